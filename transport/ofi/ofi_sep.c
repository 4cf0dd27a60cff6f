// SPDX-License-Identifier: Apache-2.0
/*
 * Shared endpoints (MKERNEL_OFI_SHARED_EP): connections of a process on a device use one
 * endpoint per lane index, with its CQ and AV, instead of their own. NCCL gives each
 * direction its own comm, so without this a ping-pong runs over two endpoints per process,
 * which on tcp;ofi_rxm is a socket per direction (1.22x the one-endpoint latency at 8-64 B,
 * docs/benchmarks.md).
 *
 * Which connections share: with 1 all of a device's (one set of endpoints; rxm then runs one
 * socket per pair of processes, so NCCL's channels would all ride one TCP stream); with 2 (the
 * default) a set holds at most one open accepting connection (NCCL's receive comm) and one
 * connecting one (its send comm). NCCL sets up its channels in the same order on both sides, so
 * channel c's send and receive comms to a peer meet on the c-th set of each process: one socket
 * for both directions, and each direction of each channel still its own stream, as without
 * sharing. Other orders only mean more sockets, never a wrong delivery.
 *
 * What sharing takes, all here except the data path's CQ read (ofi_data.c):
 *   - routing: a remote write names its target by the connection number the writer puts in
 *     immediate bits 18..30 (the peer learnt it from our setup message); a local completion
 *     names its op, and the op its connection. What a poller reads for another connection
 *     waits in that connection's queue, which grows rather than drop anything.
 *   - setup: the endpoint keeps a few receives posted and hands each setup message to the
 *     connection awaiting that kind with that nonce (a process may connect to its own
 *     listener: both then wait for the same nonce, one for the request, one for the reply).
 *   - lifetimes: a connection closed while the provider still holds some of its ops is parked
 *     here and freed when the last of them completes or the endpoints close; its number is
 *     not handed out again before that, and numbers go round robin so a late write meant for
 *     a freed connection finds an empty slot rather than a newer connection.
 */
#include <stdlib.h>
#include <string.h>

#include "mk/log.h"
#include "ofi.h"

struct mk_ofi_sep_peer {
	uint8_t addr[MK_OFI_ADDR_MAX];
	size_t len;
	fi_addr_t fi;
};

/* Guards every device's sep pointer and each sep's refs; taken before any sep->lock. */
static pthread_mutex_t sep_registry = PTHREAD_MUTEX_INITIALIZER;

bool mk_ofi_sep_wanted(const struct mk_ofi_dev *d)
{
	if (d->sep_mode == 0)
		return false;
	if (mk_ofi_is_shm(d)) {
		static int said;

		if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			MK_INFO(MK_SUBSYS_NET,
				"ofi: %s: MKERNEL_OFI_SHARED_EP does not apply to shm: a peer "
				"killed inside the provider could leave a lock every user of a "
				"shared endpoint would spin on; one endpoint per connection",
				d->props.name);
		return false;
	}
	return true;
}

static struct mk_ofi_sep_rx *sep_rx_of(struct mk_ofi_sep *sep, void *ctx)
{
	for (int i = 0; i < MK_OFI_SEP_RX; i++)
		if (ctx == &sep->rx[i].ctx)
			return &sep->rx[i];
	return NULL;
}

/* Under lock: posts every setup receive not outstanding; -FI_EAGAIN is retried later. */
void mk_ofi_sep_rearm(struct mk_ofi_sep *sep)
{
	if (sep->nlanes == 0)
		return;
	for (int i = 0; i < MK_OFI_SEP_RX; i++) {
		struct mk_ofi_sep_rx *rx = &sep->rx[i];

		if (rx->posted)
			continue;
		memset(&rx->msg, 0, sizeof(rx->msg));
		if (fi_recv(sep->lanes[0].ep, &rx->msg, sizeof(rx->msg), sep->rx_desc,
			    FI_ADDR_UNSPEC, &rx->ctx) == 0)
			rx->posted = true;
	}
}

static void sep_lane_close(struct mk_ofi_sep_lane *l)
{
	if (l->ep != NULL)
		fi_close(&l->ep->fid);
	if (l->av != NULL)
		fi_close(&l->av->fid);
	if (l->cq != NULL)
		fi_close(&l->cq->fid);
	free(l->peers);
	memset(l, 0, sizeof(*l));
}

/* The shared endpoint of a lane, opened as a connection's own would be (mk_ofi_ep_open). */
static int sep_lane_open(struct mk_ofi_conn *conn, struct mk_ofi_sep_lane *l, size_t cq_size)
{
	struct mk_ofi_lane e = { 0 };
	int rc = mk_ofi_ep_open(conn, cq_size, 64, &e);

	if (rc)
		return rc;
	l->ep = e.ep;
	l->cq = e.cq;
	l->av = e.av;
	l->addrlen = e.addrlen;
	memcpy(l->addr, e.addr, e.addrlen);
	return 0;
}

/* Frees the endpoints and every connection still parked on them: nothing can complete now. */
static void sep_close(struct mk_ofi_sep *sep)
{
	struct mk_ofi_dev *d = sep->dev;

	for (int i = 0; i < sep->nlanes; i++) {
		fi_close(&sep->lanes[i].ep->fid);
		sep->lanes[i].ep = NULL;
	}
	for (unsigned n = 1; n < MK_OFI_NUMS; n++) {
		struct mk_ofi_conn *c = sep->conns[n];

		if (c != NULL) {
			sep->conns[n] = NULL;
			mk_ofi_conn_release(c);
		}
	}
	if (sep->rx_mr != NULL && fi_close(&sep->rx_mr->fid) == 0)
		mk_ofi_key_put(d, sep->rx_key);
	for (int i = 0; i < sep->nlanes; i++)
		sep_lane_close(&sep->lanes[i]);
	MK_INFO(MK_SUBSYS_NET, "ofi: %s: shared endpoints closed (%d lanes)", d->props.name,
		sep->nlanes);
	pthread_mutex_destroy(&sep->lock);
	free(sep);
	mk_ofi_dev_put(d);
}

static void sep_put(struct mk_ofi_sep *sep, enum mk_ofi_sep_role role)
{
	bool last;

	pthread_mutex_lock(&sep_registry);
	sep->roles[role]--;
	last = --sep->refs == 0;
	if (last) {
		struct mk_ofi_sep **at = &sep->dev->seps;

		while (*at != sep)
			at = &(*at)->next;
		*at = sep->next;
	}
	pthread_mutex_unlock(&sep_registry);
	if (last)
		sep_close(sep);
}

/* Under the registry lock: the set conn joins as role, NULL when a new one is due. */
static struct mk_ofi_sep *sep_find(struct mk_ofi_dev *d, enum mk_ofi_sep_role role)
{
	const bool pairs = d->sep_mode == 2;

	for (struct mk_ofi_sep *sep = d->seps; sep != NULL; sep = sep->next)
		if (!pairs || sep->roles[role] == 0)
			return sep;
	return NULL;
}

static int sep_get(struct mk_ofi_dev *d, enum mk_ofi_sep_role role, struct mk_ofi_sep **out)
{
	struct mk_ofi_sep *sep;
	int rc = 0;

	pthread_mutex_lock(&sep_registry);
	sep = sep_find(d, role);
	if (sep == NULL) {
		struct mk_ofi_sep **tail = &d->seps;

		sep = calloc(1, sizeof(*sep));
		if (sep == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		rc = mk_ofi_dev_get(d);
		if (rc) {
			free(sep);
			goto out;
		}
		pthread_mutex_init(&sep->lock, NULL);
		sep->dev = d;
		sep->next_num = 1;
		/* at the tail: the c-th set opened is the c-th a role reaches on both sides */
		while (*tail != NULL)
			tail = &(*tail)->next;
		*tail = sep;
	}
	sep->refs++;
	sep->roles[role]++;
	*out = sep;
out:
	pthread_mutex_unlock(&sep_registry);
	return rc;
}

int mk_ofi_sep_attach(struct mk_ofi_conn *conn, enum mk_ofi_sep_role role)
{
	struct mk_ofi_sep *sep;
	unsigned n = 0;
	int rc = sep_get(conn->dev, role, &sep);

	if (rc)
		return rc;
	pthread_mutex_lock(&sep->lock);
	for (unsigned k = 0; k < MK_OFI_NUMS - 1; k++) {
		unsigned cand = 1 + (sep->next_num - 1 + k) % (MK_OFI_NUMS - 1);

		if (sep->conns[cand] == NULL) {
			n = cand;
			break;
		}
	}
	if (n != 0) {
		sep->conns[n] = conn;
		sep->next_num = n % (MK_OFI_NUMS - 1) + 1;
	}
	pthread_mutex_unlock(&sep->lock);
	if (n == 0) {
		MK_WARN("ofi: %s: all %u connection numbers of the shared endpoint are in use",
			conn->dev->props.name, MK_OFI_NUMS - 1);
		sep_put(sep, role);
		return -ENOSPC;
	}
	conn->sep = sep;
	conn->sep_role = (uint8_t)role;
	conn->num = n;
	return 0;
}

int mk_ofi_sep_lane(struct mk_ofi_conn *conn, int i)
{
	struct mk_ofi_sep *sep = conn->sep;
	struct mk_ofi_dev *d = conn->dev;
	struct mk_ofi_lane *lane = &conn->lanes[i];
	int rc = 0;

	pthread_mutex_lock(&sep->lock);
	while (rc == 0 && sep->nlanes <= i) {
		/* room for every connection's ops and the peers' immediates, within reason */
		rc = sep_lane_open(conn, &sep->lanes[sep->nlanes], (size_t)conn->nops * 16);
		if (rc)
			break;
		if (sep->nlanes == 0 && (d->mr_mode & FI_MR_LOCAL)) {
			rc = mk_ofi_mr_raw(d, sep->rx, sizeof(sep->rx), FI_RECV, &sep->rx_mr,
					   &sep->rx_key);
			if (rc) {
				sep_lane_close(&sep->lanes[0]);
				break;
			}
			sep->rx_desc = fi_mr_desc(sep->rx_mr);
		}
		MK_INFO(MK_SUBSYS_NET, "ofi: %s: shared endpoint of lane %d opened", d->props.name,
			sep->nlanes);
		sep->nlanes++;
		if (sep->nlanes == 1)
			mk_ofi_sep_rearm(sep);
	}
	if (rc == 0) {
		struct mk_ofi_sep_lane *l = &sep->lanes[i];

		lane->conn = conn;
		lane->peer = FI_ADDR_UNSPEC;
		lane->ep = l->ep;
		lane->cq = l->cq;
		lane->av = l->av;
		lane->addrlen = l->addrlen;
		memcpy(lane->addr, l->addr, l->addrlen);
	}
	pthread_mutex_unlock(&sep->lock);
	return rc;
}

int mk_ofi_sep_av_insert(struct mk_ofi_conn *conn, int i, const void *addr, size_t len,
			 fi_addr_t *out)
{
	struct mk_ofi_sep *sep = conn->sep;
	struct mk_ofi_sep_lane *l = &sep->lanes[i];
	struct mk_ofi_sep_peer *p;
	int rc = 0, n;

	if (len == 0 || len > MK_OFI_ADDR_MAX)
		return -EINVAL;
	pthread_mutex_lock(&sep->lock);
	for (size_t k = 0; k < l->npeers; k++) {
		if (l->peers[k].len == len && memcmp(l->peers[k].addr, addr, len) == 0) {
			*out = l->peers[k].fi;
			goto out;
		}
	}
	if (l->npeers == l->peers_cap) {
		size_t cap = l->peers_cap ? 2 * l->peers_cap : 8;

		p = realloc(l->peers, cap * sizeof(*p));
		if (p == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		l->peers = p;
		l->peers_cap = cap;
	}
	p = &l->peers[l->npeers];
	n = fi_av_insert(l->av, addr, 1, &p->fi, 0, NULL);
	if (n != 1) {
		MK_WARN("ofi: %s could not insert the peer address of lane %d (%d)",
			conn->dev->props.name, i, n);
		rc = n < 0 ? mk_ofi_errno(n) : -EINVAL;
		goto out;
	}
	memcpy(p->addr, addr, len);
	p->len = len;
	l->npeers++;
	*out = p->fi;
out:
	pthread_mutex_unlock(&sep->lock);
	return rc;
}

void mk_ofi_sep_expect(struct mk_ofi_conn *conn, enum mk_ofi_ctrl_kind kind)
{
	pthread_mutex_lock(&conn->sep->lock);
	conn->want_kind = (uint8_t)kind;
	pthread_mutex_unlock(&conn->sep->lock);
}

void mk_ofi_sep_take_inbox(struct mk_ofi_conn *conn)
{
	if (!conn->inbox_full || conn->rx_full)
		return;
	memcpy(&conn->ctrl_rx, &conn->inbox, sizeof(conn->ctrl_rx));
	conn->inbox_full = false;
	conn->rx_full = true;
	conn->rx_posted = false;
}

/* A setup receive completed: hand the message to whoever awaits it, then post it again. */
static void sep_dispatch(struct mk_ofi_sep *sep, struct mk_ofi_sep_rx *rx, int status)
{
	const struct mk_ofi_ctrl *m = &rx->msg;
	struct mk_ofi_conn *to = NULL;

	rx->posted = false;
	if (status == 0 && m->magic == MK_OFI_CTRL_MAGIC && m->version == MK_OFI_WIRE_VERSION) {
		for (unsigned n = 1; n < MK_OFI_NUMS && to == NULL; n++) {
			struct mk_ofi_conn *c = sep->conns[n];

			if (c != NULL && !c->closed && c->want_kind != 0 &&
			    c->want_kind == m->kind && c->nonce == m->nonce && !c->inbox_full)
				to = c;
		}
	}
	if (to != NULL) {
		memcpy(&to->inbox, m, sizeof(*m));
		to->inbox_full = true;
	} else {
		MK_WARN_RATELIMITED("ofi: %s dropped a setup message no connection here awaits "
				    "(stale handle, a stranger, or %s)",
				    sep->dev->props.name,
				    status ? "a failed receive" : "a repeated request");
	}
	mk_ofi_sep_rearm(sep);
}

/* Under lock: conn's local completion, conn closed. The last one frees it. */
static void sep_parked_done(struct mk_ofi_sep *sep, struct mk_ofi_conn *c, struct mk_ofi_op *op)
{
	if (op == &c->ctrl_op)
		c->tx_posted = false;
	else
		c->posted--;
	if (c->posted == 0 && !c->tx_posted) {
		sep->conns[c->num] = NULL;
		mk_ofi_conn_release(c);
	}
}

/* Under lock: keeps an entry for c's own poll; the queue grows instead of dropping. */
static void sep_push(struct mk_ofi_conn *c, const struct fi_cq_data_entry *ent, int status)
{
	if (c->q_len == c->q_cap) {
		int cap = c->q_cap ? 2 * c->q_cap : 64;
		struct mk_ofi_qent *q = malloc((size_t)cap * sizeof(*q));

		if (q == NULL) {
			/* the connection cannot go on without this entry: broken, not silent */
			c->q_lost = true;
			return;
		}
		for (int k = 0; k < c->q_len; k++)
			q[k] = c->q[(c->q_head + k) % c->q_cap];
		free(c->q);
		c->q = q;
		c->q_head = 0;
		c->q_cap = cap;
	}
	c->q[(c->q_head + c->q_len) % c->q_cap] =
		(struct mk_ofi_qent){ .ent = *ent, .status = status };
	c->q_len++;
}

struct mk_ofi_conn *mk_ofi_sep_route(struct mk_ofi_conn *conn, struct fi_cq_data_entry *ent,
				     int status)
{
	struct mk_ofi_sep *sep = conn->sep;
	struct mk_ofi_sep_rx *rx;
	struct mk_ofi_conn *to;
	struct mk_ofi_op *op;

	if (ent->flags & FI_REMOTE_WRITE || ent->op_context == NULL) {
		unsigned n = (unsigned)(ent->data >> MK_OFI_NUM_SHIFT) & (MK_OFI_NUMS - 1);

		/* someone's write failed here: the poller says so, as without sharing */
		if (status != 0)
			return conn;
		if (conn->quiet_max != 0 && ent->data == MK_OFI_QUIET_DATA)
			return NULL; /* a quiet write landed: nobody asked for an event */
		to = sep->conns[n];
		ent->data &= ~(uint64_t)MK_OFI_IMM_NUM_MASK;
		if (to == NULL || to->closed) {
			MK_WARN_RATELIMITED("ofi: %s dropped a remote write for connection %u: "
					    "closed, or never was",
					    sep->dev->props.name, n);
			return NULL;
		}
		if (to == conn)
			return conn;
		sep_push(to, ent, 0);
		return NULL;
	}
	rx = sep_rx_of(sep, ent->op_context);
	if (rx != NULL) {
		sep_dispatch(sep, rx, status);
		return NULL;
	}
	op = container_of(ent->op_context, struct mk_ofi_op, ctx);
	to = op->conn;
	if (to->closed) {
		sep_parked_done(sep, to, op);
		return NULL;
	}
	if (to == conn)
		return conn;
	sep_push(to, ent, status);
	return NULL;
}

void mk_ofi_sep_detach(struct mk_ofi_conn *conn)
{
	struct mk_ofi_sep *sep = conn->sep;
	const enum mk_ofi_sep_role role = conn->sep_role;
	unsigned num = conn->num;
	bool parked;
	int posted;

	pthread_mutex_lock(&sep->lock);
	conn->want_kind = 0;
	/* completions read for conn but not yet handed to it: their ops are back */
	for (; conn->q_len > 0; conn->q_len--) {
		const struct fi_cq_data_entry *e = &conn->q[conn->q_head].ent;

		conn->q_head = (conn->q_head + 1) % conn->q_cap;
		if (e->op_context == NULL || (e->flags & FI_REMOTE_WRITE))
			continue;
		if (e->op_context == &conn->ctrl_op.ctx)
			conn->tx_posted = false;
		else
			conn->posted--;
	}
	posted = conn->posted;
	parked = posted > 0 || conn->tx_posted;
	if (parked)
		conn->closed = true;
	else
		sep->conns[conn->num] = NULL;
	pthread_mutex_unlock(&sep->lock);
	/* parked: another poller may free conn from here on */
	if (parked)
		MK_INFO(MK_SUBSYS_NET,
			"ofi: %s: connection %u closed with %d ops in flight: kept until they "
			"complete",
			sep->dev->props.name, num, posted);
	else
		mk_ofi_conn_release(conn);
	sep_put(sep, role);
}

int mk_ofi_sep_count(int *conns)
{
	int eps = 0, n = 0;

	pthread_mutex_lock(&sep_registry);
	for (int d = 0; d < mk_ofi.ndevs; d++) {
		for (struct mk_ofi_sep *sep = mk_ofi.devs[d].seps; sep != NULL; sep = sep->next) {
			pthread_mutex_lock(&sep->lock);
			eps += sep->nlanes;
			for (unsigned k = 1; k < MK_OFI_NUMS; k++)
				n += sep->conns[k] != NULL && !sep->conns[k]->closed;
			pthread_mutex_unlock(&sep->lock);
		}
	}
	pthread_mutex_unlock(&sep_registry);
	if (conns != NULL)
		*conns = n;
	return eps;
}
