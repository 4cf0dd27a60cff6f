// SPDX-License-Identifier: Apache-2.0
/*
 * Rendezvous messaging, setup: listen / connect / accept / close, registration, and the check
 * of a caller's comm pointer. The data path is in rdv_send.c and rdv_recv.c, the connection
 * state both sides share in rdv_conn.c.
 *
 * Comm objects come from per-kind free lists and are never returned to malloc: a stale pointer
 * the caller still holds reads a DEAD magic instead of unmapped memory.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mk/compiler.h"
#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/hash.h"
#include "mk/log.h"
#include "rdv_internal.h"

static pthread_mutex_t rdv_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t rdv_initial_seq = 1;

/* Connects in progress, found again by handle content (NCCL calls connect repeatedly). */
struct rdv_pending {
	uint8_t handle[MK_RDV_HANDLE_SIZE];
	int dev;
	struct mk_rdv_send *send;
	struct rdv_pending *next;
};
static struct rdv_pending *rdv_pending_list;

void mk_rdv_set_initial_seq(uint32_t seq)
{
	rdv_initial_seq = seq;
}

uint32_t mk_rdv_initial_seq(void)
{
	return rdv_initial_seq;
}

int mk_rdv_max_recvs(void)
{
	int64_t v = mk_param_max_recvs();

	return v < 1 ? 1 : v > MK_RDV_MAX_RECVS ? MK_RDV_MAX_RECVS : (int)v;
}

int mk_rdv_check(const void *comm, enum mk_rdv_kind kind)
{
	const struct mk_rdv_comm *c = comm;

	if (c == NULL || c->magic != MK_RDV_MAGIC || c->kind != kind)
		return -EBADF;
	return 0;
}

/* ---- object pools ---- */

/* One free list per kind; objects of a kind all have that kind's size. */
static struct mk_rdv_comm *rdv_pools[MK_RDV_RECV + 1];

static void *rdv_pool_get(enum mk_rdv_kind kind, size_t size)
{
	struct mk_rdv_comm *c;

	pthread_mutex_lock(&rdv_lock);
	c = rdv_pools[kind];
	if (c != NULL)
		rdv_pools[kind] = c->pool_next;
	pthread_mutex_unlock(&rdv_lock);
	if (c == NULL)
		c = malloc(size);
	if (c != NULL) {
		memset(c, 0, size);
		c->kind = kind;
	}
	return c;
}

static void rdv_pool_put(struct mk_rdv_comm *c)
{
	c->magic = MK_RDV_DEAD;
	pthread_mutex_lock(&rdv_lock);
	c->pool_next = rdv_pools[c->kind];
	rdv_pools[c->kind] = c;
	pthread_mutex_unlock(&rdv_lock);
}

static struct mk_rdv_send *rdv_send_alloc(void)
{
	struct mk_rdv_comm *c = rdv_pool_get(MK_RDV_SEND, sizeof(struct mk_rdv_send));

	return c != NULL ? container_of(c, struct mk_rdv_send, head) : NULL;
}

static struct mk_rdv_recv *rdv_recv_alloc(void)
{
	struct mk_rdv_comm *c = rdv_pool_get(MK_RDV_RECV, sizeof(struct mk_rdv_recv));

	return c != NULL ? container_of(c, struct mk_rdv_recv, head) : NULL;
}

/* Requests of a released comm must fail validation too: clear their magic. */
static void rdv_send_release(struct mk_rdv_send *s)
{
	for (int i = 0; i < MK_RDV_SEND_REQS; i++)
		s->reqs[i].magic = 0;
	rdv_pool_put(&s->head);
}

static void rdv_recv_release(struct mk_rdv_recv *r)
{
	for (int i = 0; i < MK_RDV_CTS_GROUPS; i++)
		r->reqs[i].magic = 0;
	for (int i = 0; i < MK_RDV_MAX_REQUESTS; i++)
		r->flush_reqs[i].magic = 0;
	rdv_pool_put(&r->head);
}

/* ---- receive side setup ---- */

static int rdv_recv_prepare(const struct mk_transport_ops *ops, int dev, struct mk_rdv_recv **out)
{
	size_t staging = sizeof(struct mk_rdv_cts) * MK_RDV_CTS_GROUPS * MK_RDV_MAX_RECVS;
	struct mk_rdv_recv *r = rdv_recv_alloc();
	struct mk_dev_props props;
	uint32_t eager = 0;
	size_t bounce;
	char *base;
	int rc;

	if (r == NULL)
		return -ENOMEM;
	r->head.ops = ops;
	r->head.dev = dev;
	rc = ops->dev_props(dev, &props);
	if (rc)
		goto undo_alloc;
	/*
	 * Eager messages are copied out with memcpy: offer bounce slots only where no receive
	 * buffer can be GPU memory.
	 */
	if (props.ptr_support == MK_PTR_HOST)
		eager = mk_rdv_eager_bytes(&props);
	/* at most half the ring held back: room stays for NCCL's 32 requests */
	r->cts_batch = props.cts_batch != 0 ? props.cts_batch : MK_RDV_CTS_BATCH_DEFAULT;
	if (r->cts_batch > MK_RDV_CTS_GROUPS / 2)
		r->cts_batch = MK_RDV_CTS_GROUPS / 2;
	r->post_reads = !props.cq_read_rearms;
	bounce = MK_RDV_EAGER_SLOTS * mk_rdv_eager_stride(eager);
	/*
	 * CTS staging, eager bounce slots, the eager words, then the probe slot (peer writes)
	 * and the probe source (we write)
	 */
	rc = mk_rdv_region_init(ops, dev, &r->cs.region,
				staging + bounce + MK_RDV_CREDIT_BYTES + 128);
	if (rc)
		goto undo_alloc;
	base = r->cs.region.base;
	r->staging = (struct mk_rdv_cts *)base;
	mk_rdv_eager_rx_init(r, eager ? base + staging : NULL,
			     (struct mk_rdv_eager_words *)(base + staging + bounce), eager);
	r->next_seq = rdv_initial_seq;
	r->cts_next = rdv_initial_seq;
	r->frontier = rdv_initial_seq;
	/*
	 * Finishing an optional receive before its data is in is only safe when nobody has to
	 * poll for the data to land (NCCL may stop calling us once it is done), and when no
	 * eager message, which we copy out ourselves, can be its data.
	 */
	r->early_ok = props.rma_lands_unpolled && eager == 0;
	for (int i = 0; i < MK_RDV_CTS_GROUPS; i++) {
		r->reqs[i].magic = MK_RDV_REQ_MAGIC;
		r->reqs[i].kind = MK_RDV_REQ_RECV;
		r->reqs[i].comm = &r->head;
	}
	for (int i = 0; i < MK_RDV_MAX_REQUESTS; i++) {
		r->flush_reqs[i].magic = MK_RDV_REQ_MAGIC;
		r->flush_reqs[i].kind = MK_RDV_REQ_FLUSH;
		r->flush_reqs[i].comm = &r->head;
	}
	*out = r;
	return 0;

undo_alloc:
	rdv_recv_release(r);
	return rc;
}

int mk_rdv_listen(const struct mk_transport_ops *ops, int dev, void *handle,
		  struct mk_rdv_comm **out)
{
	struct mk_rdv_handle_tail tail = { .tag = MK_RDV_HANDLE_TAG,
					   .backend = mk_fnv1a32(ops->name, strlen(ops->name)) };
	struct mk_rdv_listen *l;
	int rc;

	{
		struct mk_rdv_comm *c = rdv_pool_get(MK_RDV_LISTEN, sizeof(*l));

		if (c == NULL)
			return -ENOMEM;
		l = container_of(c, struct mk_rdv_listen, head);
	}
	l->head.ops = ops;
	l->head.dev = dev;
	rc = rdv_recv_prepare(ops, dev, &l->recv);
	if (rc)
		goto undo_alloc;
	memset(handle, 0, MK_RDV_HANDLE_SIZE);
	rc = ops->listen(dev, handle, &l->l);
	if (rc)
		goto undo_recv;
	memcpy((char *)handle + MK_RDV_TAIL_OFF, &tail, sizeof(tail));
	l->head.magic = MK_RDV_MAGIC;
	*out = &l->head;
	return 0;

undo_recv:
	mk_rdv_region_fini(&l->recv->cs.region);
	rdv_recv_release(l->recv);
undo_alloc:
	rdv_pool_put(&l->head);
	return rc;
}

int mk_rdv_accept(struct mk_rdv_comm *comm, struct mk_rdv_comm **out)
{
	struct mk_rdv_listen *l = container_of(comm, struct mk_rdv_listen, head);
	struct mk_rdv_recv *r = l->recv;
	struct mk_rdv_blob blob, peer;
	struct mk_conn *conn = NULL;
	int rc;

	*out = NULL;
	if (r == NULL)
		return -EALREADY; /* a listener accepts exactly one connection */
	blob = mk_rdv_conn_blob(&r->cs);
	if (r->eager.slots != NULL) {
		blob.eager_addr = (uint64_t)(uintptr_t)r->eager.slots;
		blob.eager_slots = MK_RDV_EAGER_SLOTS;
		blob.eager_bytes = r->eager.bytes;
		blob.frontier_addr = (uint64_t)(uintptr_t)&r->eager.words->frontier;
	}
	rc = comm->ops->accept(l->l, &blob, sizeof(blob), &conn);
	if (rc || conn == NULL)
		return rc;
	rc = mk_rdv_conn_finish(&r->cs, conn, &peer);
	if (rc) {
		MK_WARN("accept: peer sent a malformed connection blob (%zu bytes)",
			conn->peer_blob_len);
		comm->ops->close(conn);
		return rc;
	}
	r->peer_ring = peer.ring_addr;
	mk_rdv_eager_rx_connect(r, &peer);
	l->recv = NULL;
	r->head.magic = MK_RDV_MAGIC;
	*out = &r->head;
	return 0;
}

/* ---- send side setup ---- */

static int rdv_send_start(const struct mk_transport_ops *ops, int dev, const void *handle,
			  struct mk_rdv_send **out)
{
	size_t ring = sizeof(struct mk_rdv_cts) * MK_RDV_CTS_GROUPS * MK_RDV_MAX_RECVS;
	struct mk_dev_props props;
	uint32_t eager = ops->dev_props(dev, &props) == 0 ? mk_rdv_eager_bytes(&props)
							  : mk_rdv_eager_bytes(NULL);
	size_t staging = MK_RDV_EAGER_SLOTS * mk_rdv_eager_stride(eager);
	struct mk_rdv_send *s = rdv_send_alloc();
	struct mk_rdv_blob blob;
	struct mk_conn *conn = NULL;
	char *base;
	int rc;

	if (s == NULL)
		return -ENOMEM;
	s->head.ops = ops;
	s->head.dev = dev;
	/* CTS ring, eager staging slots, the eager words, then the probe slot and source */
	rc = mk_rdv_region_init(ops, dev, &s->cs.region,
				ring + staging + MK_RDV_CREDIT_BYTES + 128);
	if (rc)
		goto undo_alloc;
	base = s->cs.region.base;
	s->ring = (struct mk_rdv_cts *)base;
	mk_rdv_eager_tx_init(s, base + ring, (struct mk_rdv_eager_words *)(base + ring + staging),
			     eager);
	s->next_group = rdv_initial_seq;
	s->seen = rdv_initial_seq;
	for (int i = 0; i < MK_RDV_SEND_REQS; i++) {
		s->reqs[i].magic = MK_RDV_REQ_MAGIC;
		s->reqs[i].kind = MK_RDV_REQ_SEND;
		s->reqs[i].comm = &s->head;
		s->reqs[i].next_free = i + 1 < MK_RDV_SEND_REQS ? &s->reqs[i + 1] : NULL;
	}
	s->free_reqs = &s->reqs[0];
	blob = mk_rdv_conn_blob(&s->cs);
	blob.ring_addr = (uint64_t)(uintptr_t)s->ring;
	blob.eager_addr = (uint64_t)(uintptr_t)&s->eager.words->credit;
	rc = ops->connect(dev, handle, &blob, sizeof(blob), &conn);
	if (rc)
		goto undo_region;
	s->cs.conn = conn;
	*out = s;
	return 0;

undo_region:
	mk_rdv_region_fini(&s->cs.region);
undo_alloc:
	rdv_send_release(s);
	return rc;
}

static void rdv_send_destroy(struct mk_rdv_send *s)
{
	if (s->cs.conn != NULL)
		s->head.ops->close(s->cs.conn);
	mk_rdv_region_fini(&s->cs.region);
	rdv_send_release(s);
}

int mk_rdv_connect(const struct mk_transport_ops *ops, int dev, const void *handle,
		   struct mk_rdv_comm **out)
{
	struct mk_rdv_handle_tail tail;
	struct rdv_pending *p, **pp;
	struct mk_rdv_blob peer;
	struct mk_rdv_send *s;
	int rc;

	*out = NULL;
	pthread_mutex_lock(&rdv_lock);
	for (pp = &rdv_pending_list; *pp != NULL; pp = &(*pp)->next)
		if ((*pp)->dev == dev && memcmp((*pp)->handle, handle, MK_RDV_HANDLE_SIZE) == 0)
			break;
	p = *pp;
	if (p != NULL)
		*pp = p->next; /* taken out while we work on it; put back if still pending */
	pthread_mutex_unlock(&rdv_lock);

	if (p == NULL) {
		memcpy(&tail, (const char *)handle + MK_RDV_TAIL_OFF, sizeof(tail));
		if (tail.tag != MK_RDV_HANDLE_TAG ||
		    tail.backend != mk_fnv1a32(ops->name, strlen(ops->name))) {
			MK_WARN("connect: handle was not made by this plugin's %s backend "
				"(tag 0x%08x, backend 0x%08x)",
				ops->name, tail.tag, tail.backend);
			return -EINVAL;
		}
		p = calloc(1, sizeof(*p));
		if (p == NULL)
			return -ENOMEM;
		rc = rdv_send_start(ops, dev, handle, &p->send);
		if (rc) {
			free(p);
			return rc;
		}
		memcpy(p->handle, handle, MK_RDV_HANDLE_SIZE);
		p->dev = dev;
	}
	s = p->send;
	rc = ops->connected(s->cs.conn);
	if (rc == 0) {
		pthread_mutex_lock(&rdv_lock);
		p->next = rdv_pending_list;
		rdv_pending_list = p;
		pthread_mutex_unlock(&rdv_lock);
		return 0;
	}
	free(p);
	if (rc < 0)
		goto undo_send;
	rc = mk_rdv_conn_finish(&s->cs, s->cs.conn, &peer);
	if (rc) {
		MK_WARN("connect: peer answered with a malformed connection blob");
		goto undo_send;
	}
	mk_rdv_eager_tx_connect(s, &peer);
	s->head.magic = MK_RDV_MAGIC;
	*out = &s->head;
	return 0;

undo_send:
	rdv_send_destroy(s);
	return rc;
}

int mk_rdv_close(struct mk_rdv_comm *comm)
{
	switch (comm->kind) {
	case MK_RDV_LISTEN: {
		struct mk_rdv_listen *l = container_of(comm, struct mk_rdv_listen, head);
		int rc = comm->ops->close_listen(l->l);

		if (l->recv != NULL) {
			mk_rdv_region_fini(&l->recv->cs.region);
			rdv_recv_release(l->recv);
		}
		rdv_pool_put(&l->head);
		return rc;
	}
	case MK_RDV_SEND:
		rdv_send_destroy(container_of(comm, struct mk_rdv_send, head));
		return 0;
	case MK_RDV_RECV: {
		struct mk_rdv_recv *r = container_of(comm, struct mk_rdv_recv, head);
		int rc = comm->ops->close(r->cs.conn);

		mk_rdv_region_fini(&r->cs.region);
		rdv_recv_release(r);
		return rc;
	}
	}
	return -EBADF;
}

int mk_rdv_reg(struct mk_rdv_comm *comm, void *data, size_t size, int type, int dmabuf_fd,
	       uint64_t dmabuf_offset, struct mk_mr **out)
{
	struct mk_mr_attr attr = {
		.type = type,
		.dmabuf_fd = dmabuf_fd,
		.dmabuf_offset = dmabuf_offset,
		.cuda_device = -1,
	};

	return mk_mr_get(comm->ops, comm->dev, data, size, &attr, out);
}

int mk_rdv_dereg(struct mk_rdv_comm *comm, struct mk_mr *mr)
{
	(void)comm; /* the cache is keyed by device: the handle alone names the registration */
	return mk_mr_put(mr);
}
