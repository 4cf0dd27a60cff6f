// SPDX-License-Identifier: Apache-2.0
/* In-process fake backend for unit tests (see fake_tp.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_tp.h"
#include "mk/clock.h"
#include "mk/compiler.h"
#include "mk/core_params.h"

#define FAKE_MAGIC  0x46414b45u
#define FAKE_EVQ    4096
#define FAKE_MAX_ID 1024

#define FAKE_NPHYS     2 /* physical devices */
#define FAKE_MAX_VDEVS 4

struct fake_bmr {
	void *addr;
	size_t len;
	uint64_t key;
	uint64_t key2; /* fused devices: a second key word that must travel with the first */
	struct fake_bmr *next;
};

/* A write waiting for its target to poll (fake_tp_faults.land_on_poll). */
struct fake_wr {
	void *copy; /* the bytes as they were at post (malloc'd) */
	size_t len;
	uint64_t dst;
	bool has_imm;
	uint32_t imm;
};

struct fake_conn {
	struct mk_conn base;
	struct fake_conn *peer;
	int established;
	int dead;
	int inflight;
	uint64_t connected_calls;
	uint32_t want_id; /* connecting side: the listener's id */
	uint8_t blob[MK_TP_BLOB_MAX];
	size_t blob_len;
	struct mk_event evq[FAKE_EVQ];
	unsigned head, tail;
	struct fake_wr inq[FAKE_EVQ]; /* writes towards this side, not landed yet */
	unsigned nin;
	struct fake_conn *next_pending;
};

struct fake_listener {
	struct mk_listener base;
	uint32_t id;
	struct fake_conn *pending;
};

struct fake_tp_faults fake_tp_faults;
static struct fake_listener *listeners[FAKE_MAX_ID];
static uint32_t next_id = 1;
static struct fake_bmr *regs;
static uint64_t next_key = 100;
static int nwrites;
static int nunread; /* writes on a lane other than 0 while the target did not want them */
/* fused devices live as long as the process, as NCCL's do: fake_tp_reset leaves them */
static int nvdevs;
static int vdev_n[FAKE_MAX_VDEVS];
static int vdev_devs[FAKE_MAX_VDEVS][MK_TP_MAX_FUSED];

struct fake_handle {
	uint32_t magic;
	uint32_t id;
};

void fake_tp_reset(void)
{
	memset(&fake_tp_faults, 0, sizeof(fake_tp_faults));
	memset(listeners, 0, sizeof(listeners));
	nwrites = 0;
	nunread = 0;
}

int fake_tp_live_regs(void)
{
	int n = 0;

	for (struct fake_bmr *b = regs; b != NULL; b = b->next)
		n++;
	return n;
}

int fake_tp_writes(void)
{
	return nwrites;
}

int fake_tp_unread_lane_writes(void)
{
	return nunread;
}

static int fake_init(void)
{
	return 0;
}

static void fake_fini(void)
{
}

static int fake_ndevs(void)
{
	return FAKE_NPHYS + nvdevs;
}

static int fake_make_vdev(int n, const int *devs, int *out)
{
	if (nvdevs == FAKE_MAX_VDEVS)
		return -ENOSPC;
	vdev_n[nvdevs] = n;
	memcpy(vdev_devs[nvdevs], devs, sizeof(int) * (size_t)n);
	*out = FAKE_NPHYS + nvdevs++;
	return 0;
}

static int fake_dev_props(int dev, struct mk_dev_props *p)
{
	if (dev < 0 || dev >= fake_ndevs())
		return -ENODEV;
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "fake:%d", dev);
	if (dev >= FAKE_NPHYS) {
		p->nfused = vdev_n[dev - FAKE_NPHYS];
		memcpy(p->fused, vdev_devs[dev - FAKE_NPHYS], sizeof(p->fused));
	}
	p->ptr_support = MK_PTR_HOST | (fake_tp_faults.ptr_cuda ? MK_PTR_CUDA : 0);
	p->speed_mbps = 100000;
	p->max_comms = 65536;
	p->max_lanes = MK_TP_MAX_LANES;
	p->max_msg = (size_t)1 << 40;
	strcpy(p->provider, "fake");
	p->rma_lands_unpolled = !fake_tp_faults.needs_poll; /* memcpy at post time */
	p->eager_bytes = fake_tp_faults.eager_bytes;
	p->cts_batch = fake_tp_faults.cts_batch;
	p->stripe_min = fake_tp_faults.stripe_min;
	p->cq_read_rearms = fake_tp_faults.cq_read_rearms;
	return 0;
}

static struct fake_conn *fake_conn_new(int dev)
{
	struct fake_conn *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->base.ops = &fake_tp_ops;
	c->base.dev = dev;
	c->base.nlanes = fake_tp_faults.nlanes > 0 ? fake_tp_faults.nlanes : 1;
	return c;
}

static int fake_listen(int dev, void *handle, struct mk_listener **out)
{
	struct fake_listener *l = calloc(1, sizeof(*l));
	struct fake_handle h = { FAKE_MAGIC, 0 };

	if (l == NULL)
		return -ENOMEM;
	l->base.ops = &fake_tp_ops;
	l->base.dev = dev;
	l->id = next_id++ % FAKE_MAX_ID;
	listeners[l->id] = l;
	h.id = l->id;
	memcpy(handle, &h, sizeof(h));
	*out = &l->base;
	return 0;
}

static int fake_connect(int dev, const void *handle, const void *blob, size_t blob_len,
			struct mk_conn **out)
{
	struct fake_handle h;
	struct fake_conn *c;

	memcpy(&h, handle, sizeof(h));
	if (h.magic != FAKE_MAGIC || h.id >= FAKE_MAX_ID)
		return -EINVAL;
	c = fake_conn_new(dev);
	if (c == NULL)
		return -ENOMEM;
	memcpy(c->blob, blob, blob_len);
	c->blob_len = blob_len;
	c->want_id = h.id;
	c->connected_calls = 0;
	if (listeners[h.id] != NULL) {
		c->next_pending = listeners[h.id]->pending;
		listeners[h.id]->pending = c;
	}
	*out = &c->base;
	return 0;
}

static int fake_connected(struct mk_conn *base)
{
	struct fake_conn *c = container_of(base, struct fake_conn, base);

	if (c->established)
		return 1;
	if (c->connected_calls++ > (uint64_t)mk_param_timeout_ms())
		return -ETIMEDOUT; /* counted in calls: tests pass a small timeout */
	return 0;
}

static int fake_accept(struct mk_listener *lb, const void *blob, size_t blob_len,
		       struct mk_conn **out)
{
	struct fake_listener *l = container_of(lb, struct fake_listener, base);
	struct fake_conn *peer = l->pending, *c;

	*out = NULL;
	if (peer == NULL)
		return 0;
	l->pending = peer->next_pending;
	c = fake_conn_new(lb->dev);
	if (c == NULL)
		return -ENOMEM;
	c->base.nlanes = peer->base.nlanes;
	memcpy(c->base.peer_blob, peer->blob, peer->blob_len);
	c->base.peer_blob_len = peer->blob_len;
	memcpy(peer->base.peer_blob, blob, blob_len);
	peer->base.peer_blob_len = blob_len;
	c->peer = peer;
	peer->peer = c;
	c->established = 1;
	peer->established = 1;
	*out = &c->base;
	return 0;
}

static int fake_close_listen(struct mk_listener *lb)
{
	struct fake_listener *l = container_of(lb, struct fake_listener, base);

	listeners[l->id] = NULL;
	free(l);
	return 0;
}

static int fake_close(struct mk_conn *base)
{
	struct fake_conn *c = container_of(base, struct fake_conn, base);

	if (c->peer != NULL)
		c->peer->peer = NULL;
	for (int i = 0; i < FAKE_MAX_ID; i++) {
		struct fake_listener *l = listeners[i];

		if (l == NULL)
			continue;
		for (struct fake_conn **pp = &l->pending; *pp != NULL; pp = &(*pp)->next_pending) {
			if (*pp == c) {
				*pp = c->next_pending;
				break;
			}
		}
	}
	for (unsigned k = 0; k < c->nin; k++)
		free(c->inq[k].copy);
	free(c);
	return 0;
}

static int fake_reg_mr(int dev, void *addr, size_t len, const struct mk_mr_attr *attr,
		       struct mk_bmr **out, struct mk_rkey *rkey)
{
	struct fake_bmr *b;

	if (fake_tp_faults.fail_reg)
		return fake_tp_faults.fail_reg;
	b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -ENOMEM;
	b->addr = addr;
	b->len = len;
	b->key = next_key++;
	b->key2 = dev >= FAKE_NPHYS ? b->key * 31 : 0;
	b->next = regs;
	regs = b;
	rkey->base = (uint64_t)(uintptr_t)addr;
	rkey->key = b->key;
	rkey->key2 = b->key2;
	*out = (struct mk_bmr *)b;
	return 0;
}

static int fake_dereg_mr(int dev, struct mk_bmr *mr)
{
	for (struct fake_bmr **pp = &regs; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == (struct fake_bmr *)mr) {
			*pp = (*pp)->next;
			free(mr);
			return 0;
		}
	}
	return -EINVAL;
}

static int fake_push(struct fake_conn *c, const struct mk_event *ev)
{
	if (c->tail - c->head >= FAKE_EVQ)
		return -ENOSPC;
	c->evq[c->tail++ % FAKE_EVQ] = *ev;
	return 0;
}

static int fake_key_ok(const struct mk_rkey *rkey, uint64_t dst, size_t len)
{
	for (struct fake_bmr *b = regs; b != NULL; b = b->next) {
		uint64_t lo = (uint64_t)(uintptr_t)b->addr;

		if (b->key == rkey->key && b->key2 == rkey->key2 && lo == rkey->base && dst >= lo &&
		    dst + len <= lo + b->len)
			return 1;
	}
	return 0;
}

static int fake_write(struct mk_conn *base, int lane, const void *src, size_t len,
		      struct mk_bmr *src_mr, uint64_t dst, const struct mk_rkey *rkey, bool has_imm,
		      uint32_t imm, void *ctx)
{
	struct fake_conn *c = container_of(base, struct fake_conn, base);
	struct mk_event done = { .type = MK_EV_WRITE_DONE, .ctx = ctx, .len = len };
	int max = fake_tp_faults.max_inflight > 0 ? fake_tp_faults.max_inflight : 256;
	int rc;

	if (fake_tp_faults.fail_next_write) {
		rc = fake_tp_faults.fail_next_write;
		fake_tp_faults.fail_next_write = 0;
		return rc;
	}
	if (fake_tp_faults.eagain_writes > 0) {
		fake_tp_faults.eagain_writes--;
		return -EAGAIN;
	}
	if (lane < 0 || lane >= base->nlanes || (len > 0 && src_mr == NULL))
		return -EINVAL;
	if (c->inflight >= max)
		return -EAGAIN;
	nwrites++;
	/* a socket provider would move such a write only once the target reads that lane */
	if (lane != 0 && c->peer != NULL && c->peer->base.lanes_wanted == 0)
		nunread++;
	if (fake_tp_faults.blackhole)
		return 0;
	if (c->peer == NULL || c->peer->dead || c->dead) {
		done.status = -ECONNRESET;
	} else if (!fake_key_ok(rkey, dst, len)) {
		done.status = -EACCES;
	} else if (fake_tp_faults.land_on_poll) {
		struct fake_wr *w;

		if (c->peer->nin == FAKE_EVQ)
			return -EAGAIN;
		w = &c->peer->inq[c->peer->nin];
		w->copy = len > 0 ? malloc(len) : NULL;
		if (len > 0 && w->copy == NULL)
			return -ENOMEM;
		if (len > 0)
			memcpy(w->copy, src, len);
		w->len = len;
		w->dst = dst;
		w->has_imm = has_imm;
		w->imm = imm;
		c->peer->nin++;
	} else {
		if (len > 0)
			memcpy((void *)(uintptr_t)dst, src, len);
		if (has_imm) {
			struct mk_event in = { .type = MK_EV_IMM, .imm = imm, .len = len };

			rc = fake_push(c->peer, &in);
			if (rc)
				return rc;
		}
	}
	c->inflight++;
	return fake_push(c, &done);
}

/* The writes waiting for c to poll land now: their bytes, then c's immediates. */
static void fake_land(struct fake_conn *c)
{
	for (unsigned k = 0; k < c->nin; k++) {
		struct fake_wr *w = &c->inq[fake_tp_faults.reorder ? c->nin - 1 - k : k];
		struct mk_event in = { .type = MK_EV_IMM, .imm = w->imm, .len = w->len };

		if (w->len > 0)
			memcpy((void *)(uintptr_t)w->dst, w->copy, w->len);
		free(w->copy);
		w->copy = NULL;
		if (w->has_imm)
			fake_push(c, &in);
	}
	c->nin = 0;
}

static int fake_poll(struct mk_conn *base, struct mk_event *ev, int max)
{
	struct fake_conn *c = container_of(base, struct fake_conn, base);
	int n = 0;

	if (fake_tp_faults.poll_reads_clock)
		base->polled_ns = mk_now_ns();
	fake_land(c);
	while (n < max && c->head != c->tail) {
		ev[n] = c->evq[c->head++ % FAKE_EVQ];
		if (ev[n].type != MK_EV_IMM)
			c->inflight--;
		n++;
	}
	return n;
}

void fake_tp_kill_peer(struct mk_conn *base)
{
	struct fake_conn *c = container_of(base, struct fake_conn, base);

	if (c->peer != NULL)
		c->peer->dead = 1;
}

const struct mk_transport_ops fake_tp_ops = {
	.name = "fake",
	.init = fake_init,
	.fini = fake_fini,
	.ndevs = fake_ndevs,
	.dev_props = fake_dev_props,
	.make_vdev = fake_make_vdev,
	.listen = fake_listen,
	.connect = fake_connect,
	.connected = fake_connected,
	.accept = fake_accept,
	.close_listen = fake_close_listen,
	.close = fake_close,
	.reg_mr = fake_reg_mr,
	.dereg_mr = fake_dereg_mr,
	.write = fake_write,
	.read = NULL,
	.flush = NULL,
	.poll = fake_poll,
};
