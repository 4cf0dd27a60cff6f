// SPDX-License-Identifier: Apache-2.0
/*
 * Data path of the libfabric backend: one-sided write (optionally with a 32-bit immediate as
 * remote CQ data), read, and poll(), which is also what makes manual-progress providers move
 * data at the target. A write or read goes out on the lane the caller names; poll() reads lane
 * 0's CQ, and the others' while striped data may move on them, starting with a different one
 * each call. Nothing here allocates or blocks; op contexts come from a fixed per-connection
 * pool and a full pool or queue is -EAGAIN.
 */
#include <pthread.h>
#include <string.h>

#include "mk/log.h"
#include "ofi.h"

static struct mk_ofi_op *ofi_op_get(struct mk_ofi_conn *conn)
{
	struct mk_ofi_op *op = conn->free_ops;

	if (op != NULL) {
		conn->free_ops = op->next_free;
		op->parts = 1;
		op->status = 0;
		op->whole = NULL;
		op->lane = 0; /* until a post on another lane succeeds */
	}
	return op;
}

static void ofi_op_put(struct mk_ofi_conn *conn, struct mk_ofi_op *op)
{
	if (op->lane != 0)
		conn->side_out--;
	op->kind = MK_OFI_OP_FREE;
	op->expired = false;
	op->next_free = conn->free_ops;
	conn->free_ops = op;
}

static int ofi_check_post(struct mk_ofi_conn *conn, int lane, uint64_t now)
{
	if (mk_unlikely(conn->err))
		return conn->err;
	if (mk_unlikely(conn->state != MK_OFI_READY))
		return -ENOTCONN;
	if (mk_unlikely(lane < 0 || lane >= conn->nlanes))
		return -EINVAL;
	if (conn->peer_pid != 0)
		return mk_ofi_peer_gone(conn, now);
	return 0;
}

/*
 * The provider refused new work. A live peer frees the queue soon; one that died can leave it
 * refusing forever without an error completion (net on 1.17 after the peer was killed), so a
 * refusal that lasts MKERNEL_TIMEOUT with nothing completing breaks the connection.
 */
static int ofi_refused(struct mk_ofi_conn *conn)
{
	uint64_t now = mk_now_ns();

	conn->blocked = true;
	if (conn->stall_since_ns == 0)
		conn->stall_since_ns = now;
	else if (conn->timeout_ns != 0 && now - conn->stall_since_ns >= conn->timeout_ns)
		conn->err = -ETIMEDOUT;
	/*
	 * Refused while nothing of ours is in flight: the queue is empty, so this is not
	 * back-pressure but a provider that cannot reach the peer (tcp;ofi_rxm and net keep
	 * reconnecting to a dead peer and refuse meanwhile). After MKERNEL_KEEPALIVE of that the
	 * peer is gone, seconds before MKERNEL_TIMEOUT would say so.
	 */
	if (conn->inflight > 0)
		conn->refused_idle_ns = 0;
	else if (conn->refused_idle_ns == 0)
		conn->refused_idle_ns = now;
	else if (conn->err == 0 && now - conn->refused_idle_ns >= conn->idle_refuse_limit_ns) {
		MK_WARN("ofi: %s: every post refused for %llu ms with nothing in flight: the peer "
			"is unreachable",
			conn->dev->props.name,
			(unsigned long long)((now - conn->refused_idle_ns) / 1000000));
		conn->err = -ECONNRESET;
	}
	return conn->err ? conn->err : -EAGAIN;
}

/* One op's message: the local buffer, the peer's range on a lane, the CQ data. */
struct ofi_rma_msg {
	struct iovec iov;
	void *desc;
	struct fi_rma_iov rma;
	struct fi_msg_rma msg;
};

static void ofi_rma_msg_fill(struct ofi_rma_msg *m, const struct mk_ofi_conn *conn, int lane,
			     void *buf, size_t len, const struct mk_bmr *mr, uint64_t raddr,
			     const struct mk_rkey *rkey, uint64_t data)
{
	m->iov = (struct iovec){ .iov_base = buf, .iov_len = len };
	m->desc = mr != NULL ? mr->desc : NULL;
	m->rma = (struct fi_rma_iov){
		/* without FI_MR_VIRT_ADDR the provider addresses by offset into the region */
		.addr = conn->virt_addr ? raddr : raddr - rkey->base,
		.len = len,
		.key = rkey->key,
	};
	m->msg = (struct fi_msg_rma){
		.msg_iov = &m->iov,
		.desc = &m->desc,
		.iov_count = 1,
		.addr = conn->lanes[lane].peer,
		.rma_iov = &m->rma,
		.rma_iov_count = 1,
		.data = data,
	};
}

/*
 * Posts one RMA op (taken from the pool by the caller, NULL when it was empty) on a lane; on any
 * failure the op goes back to the pool. now: the caller's one clock reading for the whole post
 * (liveness check, guard, last_post_ns).
 */
static int ofi_post_rma(struct mk_ofi_conn *conn, int lane, struct mk_ofi_op *op,
			enum mk_ofi_op_kind kind, void *buf, size_t len, struct mk_bmr *mr,
			uint64_t raddr, const struct mk_rkey *rkey, uint64_t data, uint64_t flags,
			void *ctx, uint64_t now)
{
	struct fid_ep *ep = conn->lanes[lane].ep;
	struct ofi_rma_msg m;
	ssize_t rc;

	if (op == NULL)
		return -EAGAIN;
	ofi_rma_msg_fill(&m, conn, lane, buf, len, mr, raddr, rkey, data);
	m.msg.context = &op->ctx;
	rc = mk_ofi_guarded_rma(conn, ep, kind != MK_OFI_OP_READ, &m.msg, flags, now);
	if (mk_unlikely(rc)) {
		ofi_op_put(conn, op);
		return rc == -FI_EAGAIN ? ofi_refused(conn) : mk_ofi_errno(rc);
	}
	conn->blocked = false;
	conn->refused_idle_ns = 0;
	conn->last_post_ns = now;
	op->kind = (uint8_t)kind;
	op->user = ctx;
	op->len = len;
	op->lane = (uint8_t)lane;
	conn->side_out += lane != 0;
	conn->inflight++;
	conn->posted++;
	return 0;
}

/*
 * One write with an immediate as two on the lane: the leading bytes without an event for the
 * caller, then the trailing `tail` bytes with the immediate (whose CQ data carries the whole
 * length) and the caller's ctx. The provider keeps the two in order, so the immediate is
 * reported only after the leading part has landed; the caller's event comes once both parts
 * completed, with the first error of either. Two uses:
 *
 *   shm (quiet_lead): a write with remote CQ data up to the inject size goes inline through the
 *   target's command queue; a longer one takes the slow path (process_vm_readv at the target
 *   and a response back), and the eager path's 4 KiB message plus its header is just past it.
 *   Up to twice the inject size the leading part goes as a quiet write (MK_OFI_QUIET_DATA,
 *   dropped at the target) and the trailing inject size with the immediate; shm processes one
 *   endpoint's commands in order, at the target's poll.
 *
 *   large writes (MKERNEL_OFI_SPLIT_WRITES, ofi_init.c): all but the last MK_OFI_SPLIT_TAIL
 *   bytes as a plain write, where the provider promises write-after-write order.
 */
static int ofi_write_split(struct mk_ofi_conn *conn, int lane, const char *src, size_t len,
			   struct mk_bmr *src_mr, uint64_t dst, const struct mk_rkey *rkey,
			   uint64_t data, void *ctx, uint64_t now, size_t tail, bool quiet_lead)
{
	size_t lead_len = len - tail;
	struct mk_ofi_op *lead = ofi_op_get(conn);
	struct mk_ofi_op *op = ofi_op_get(conn);
	int rc;

	if (lead == NULL || op == NULL) {
		if (lead != NULL)
			ofi_op_put(conn, lead);
		if (op != NULL)
			ofi_op_put(conn, op);
		return -EAGAIN;
	}
	lead->whole = op;
	op->parts = 2;
	rc = ofi_post_rma(conn, lane, lead, MK_OFI_OP_LEAD, (void *)src, lead_len, src_mr, dst,
			  rkey, quiet_lead ? MK_OFI_QUIET_DATA : 0,
			  FI_COMPLETION | (quiet_lead ? FI_REMOTE_CQ_DATA : 0), NULL, now);
	if (rc) {
		ofi_op_put(conn, op);
		return rc;
	}
	rc = ofi_post_rma(conn, lane, op, MK_OFI_OP_WRITE, (void *)(src + lead_len), tail, src_mr,
			  dst + lead_len, rkey, data, FI_COMPLETION | FI_REMOTE_CQ_DATA, ctx, now);
	if (rc) {
		/*
		 * The leading part is out with nothing to report to: the caller posts the whole
		 * write again, and an error of this part breaks the connection (ofi_op_done).
		 */
		lead->whole = NULL;
		return rc;
	}
	op->len = len;
	return 0;
}

/*
 * A write small enough to inject, from host memory: the provider copies it at the post and
 * reports nothing. 0 or -errno; a failure after the post breaks the connection, which the next
 * post or poll reports.
 */
static int ofi_inject_post(struct mk_ofi_conn *conn, int lane, const void *src, size_t len,
			   uint64_t dst, const struct mk_rkey *rkey, uint64_t data, bool has_imm,
			   uint64_t now)
{
	struct ofi_rma_msg m;
	ssize_t rc;

	ofi_rma_msg_fill(&m, conn, lane, (void *)src, len, NULL, dst, rkey, data);
	rc = mk_ofi_guarded_inject(conn, conn->lanes[lane].ep, &m.msg,
				   has_imm ? FI_REMOTE_CQ_DATA : 0, now);
	if (mk_unlikely(rc))
		return rc == -FI_EAGAIN ? ofi_refused(conn) : mk_ofi_errno(rc);
	conn->blocked = false;
	conn->refused_idle_ns = 0;
	conn->last_post_ns = now;
	return 0;
}

/*
 * An injected write's completion event, made here: it waits in the stash for the next poll
 * (the source is free once the post returned, which is all MK_EV_WRITE_DONE promises).
 */
static void ofi_inject_done(struct mk_ofi_conn *conn, size_t len, void *ctx)
{
	conn->stash[conn->nstash++] = (struct mk_event){
		.type = MK_EV_WRITE_DONE,
		.ctx = ctx,
		.len = len,
	};
}

static int ofi_inject(struct mk_ofi_conn *conn, int lane, const void *src, size_t len, uint64_t dst,
		      const struct mk_rkey *rkey, uint64_t data, bool has_imm, void *ctx,
		      uint64_t now)
{
	int rc = ofi_inject_post(conn, lane, src, len, dst, rkey, data, has_imm, now);

	if (rc == 0)
		ofi_inject_done(conn, len, ctx);
	return rc;
}

/*
 * shm's split (ofi_write_split, quiet_lead) with both parts injected, from host memory: the
 * leading bytes quiet, the trailing `tail` with the immediate, and the caller's one event made
 * here. Through the CQ each part cost the writer a completion to read, which made the eager
 * path's 4 KiB message slower than a rendezvous' single inject. When the second part is
 * refused after the first went out, the caller posts the whole write again, which writes the
 * same leading bytes again (its quiet entry is dropped at the target as before).
 */
static int ofi_inject_split(struct mk_ofi_conn *conn, int lane, const char *src, size_t len,
			    uint64_t dst, const struct mk_rkey *rkey, uint64_t data, size_t tail,
			    void *ctx, uint64_t now)
{
	const size_t lead = len - tail;
	int rc = ofi_inject_post(conn, lane, src, lead, dst, rkey, MK_OFI_QUIET_DATA, true, now);

	if (rc == 0)
		rc = ofi_inject_post(conn, lane, src + lead, tail, dst + lead, rkey, data, true,
				     now);
	if (rc == 0)
		ofi_inject_done(conn, len, ctx);
	return rc;
}

static bool ofi_can_inject(const struct mk_ofi_conn *conn, size_t len, const struct mk_bmr *mr)
{
	return conn->inject_max != 0 && len <= conn->inject_max && mr != NULL && mr->host &&
	       conn->nstash < MK_OFI_STASH;
}

int mk_ofi_write(struct mk_conn *c, int lane, const void *src, size_t len, struct mk_bmr *src_mr,
		 uint64_t dst, const struct mk_rkey *rkey, bool has_imm, uint32_t imm, void *ctx)
{
	struct mk_ofi_conn *conn = mk_ofi_conn_of(c);
	uint64_t data = imm, now = mk_now_ns();
	int rc = ofi_check_post(conn, lane, now);

	if (rc)
		return rc;
	if (conn->peer_num != 0 && has_imm) {
		/* the peer shares its endpoint: bits 18..30 name the connection there */
		if (mk_unlikely(imm & MK_OFI_IMM_NUM_MASK))
			return -EINVAL;
		data |= (uint64_t)conn->peer_num << MK_OFI_NUM_SHIFT;
	}
	if (!has_imm && conn->quiet_max != 0 && len <= conn->quiet_max) {
		has_imm = true;
		data = MK_OFI_QUIET_DATA;
	} else if (conn->len_in_data) {
		if (mk_unlikely(len >= UINT32_MAX))
			return -EMSGSIZE;
		/* the whole write's length, also when it goes in two parts below */
		data |= (uint64_t)len << 32;
	}
	if (ofi_can_inject(conn, len, src_mr))
		return ofi_inject(conn, lane, src, len, dst, rkey, data, has_imm, ctx, now);
	if (has_imm && conn->quiet_max != 0 && len > conn->quiet_max &&
	    len <= 2 * conn->quiet_max) {
		if (ofi_can_inject(conn, conn->quiet_max, src_mr))
			return ofi_inject_split(conn, lane, src, len, dst, rkey, data,
						conn->quiet_max, ctx, now);
		return ofi_write_split(conn, lane, src, len, src_mr, dst, rkey, data, ctx, now,
				       conn->quiet_max, true);
	}
	if (has_imm && conn->split_min != 0 && len >= conn->split_min)
		return ofi_write_split(conn, lane, src, len, src_mr, dst, rkey, data, ctx, now,
				       MK_OFI_SPLIT_TAIL, false);
	return ofi_post_rma(conn, lane, ofi_op_get(conn), MK_OFI_OP_WRITE, (void *)src, len, src_mr,
			    dst, rkey, data, FI_COMPLETION | (has_imm ? FI_REMOTE_CQ_DATA : 0), ctx,
			    now);
}

int mk_ofi_read(struct mk_conn *c, int lane, void *dst, size_t len, struct mk_bmr *dst_mr,
		uint64_t src, const struct mk_rkey *rkey, void *ctx)
{
	struct mk_ofi_conn *conn = mk_ofi_conn_of(c);
	uint64_t now = mk_now_ns();
	int rc = ofi_check_post(conn, lane, now);

	if (rc)
		return rc;
	return ofi_post_rma(conn, lane, ofi_op_get(conn), MK_OFI_OP_READ, dst, len, dst_mr, src,
			    rkey, 0, FI_COMPLETION, ctx, now);
}

/* Room for events: the caller's array while it lasts, then the setup stash. */
struct ofi_sink {
	struct mk_event *ev;
	int max;
	int n;
};

static void ofi_emit(struct mk_ofi_conn *conn, struct ofi_sink *s, const struct mk_event *e)
{
	if (s->n < s->max)
		s->ev[s->n++] = *e;
	else if (conn->nstash < MK_OFI_STASH)
		conn->stash[conn->nstash++] = *e;
}

static int ofi_room(const struct mk_ofi_conn *conn, const struct ofi_sink *s)
{
	return s->max - s->n + MK_OFI_STASH - conn->nstash;
}

static void ofi_op_done(struct mk_ofi_conn *conn, struct ofi_sink *s, struct mk_ofi_op *op,
			int status)
{
	struct mk_event e;

	if (op->kind == MK_OFI_OP_LEAD) {
		struct mk_ofi_op *whole = op->whole;

		if (!op->expired)
			conn->inflight--;
		ofi_op_put(conn, op);
		if (whole != NULL)
			ofi_op_done(conn, s, whole, status); /* one of the caller's op's parts */
		else if (status && conn->err == 0)
			conn->err = status; /* no second part went out: nobody else to tell */
		return;
	}
	if (status && op->status == 0)
		op->status = status;
	if (--op->parts > 0)
		return;
	e = (struct mk_event){
		.type = op->kind == MK_OFI_OP_READ ? MK_EV_READ_DONE : MK_EV_WRITE_DONE,
		.status = op->status,
		.ctx = op->user,
		.len = op->len,
	};
	if (!op->expired) {
		conn->inflight--;
		ofi_emit(conn, s, &e);
	}
	ofi_op_put(conn, op);
}

static void ofi_entry(struct mk_ofi_conn *conn, struct ofi_sink *s,
		      const struct fi_cq_data_entry *ent)
{
	/* FI_REMOTE_WRITE, not FI_REMOTE_CQ_DATA: sockets flags initiator completions with it */
	if (ent->flags & FI_REMOTE_WRITE) {
		struct mk_event e;

		if (conn->quiet_max != 0 && ent->data == MK_OFI_QUIET_DATA)
			return; /* a quiet write landed: the writer asked for no event */
		e = (struct mk_event){
			.type = MK_EV_IMM,
			.imm = (uint32_t)ent->data,
			.len = conn->len_in_data ? (size_t)(ent->data >> 32) : ent->len,
		};

		ofi_emit(conn, s, &e);
		return;
	}
	if (ent->op_context == &conn->tx_ctx || ent->op_context == &conn->rx_ctx) {
		mk_ofi_ctrl_complete(conn, ent->op_context, false);
		return;
	}
	if (ent->op_context == &conn->ctrl_op.ctx) { /* a setup send on a shared endpoint */
		mk_ofi_ctrl_complete(conn, &conn->tx_ctx, false);
		return;
	}
	conn->posted--;
	ofi_op_done(conn, s, container_of(ent->op_context, struct mk_ofi_op, ctx), 0);
}

/* An error entry of this connection's (err.op_context, err.flags), already logged. */
static void ofi_entry_failed(struct mk_ofi_conn *conn, struct ofi_sink *s, void *op_context,
			     uint64_t flags, int status)
{
	if (op_context == &conn->tx_ctx || op_context == &conn->rx_ctx) {
		mk_ofi_ctrl_complete(conn, op_context, true);
		return;
	}
	if (op_context == &conn->ctrl_op.ctx) {
		mk_ofi_ctrl_complete(conn, &conn->tx_ctx, true);
		return;
	}
	if (op_context == NULL || (flags & FI_REMOTE_WRITE)) {
		/*
		 * A failure at this end of someone's write (a stranger's guessed key, say): no op
		 * of ours to fail. The writer learns from its own completion; our peer's failures
		 * reach us through the protocol or the liveness checks.
		 */
		MK_WARN_RATELIMITED("ofi: %s: a remote write into this endpoint failed (%s); "
				    "nothing of ours was affected",
				    conn->dev->props.name, mk_ofi.lib->strerror(-status));
		return;
	}
	conn->posted--;
	ofi_op_done(conn, s, container_of(op_context, struct mk_ofi_op, ctx), status);
}

int mk_ofi_cq_err_read(struct mk_ofi_conn *conn, struct fid_cq *cq, struct fi_cq_err_entry *err)
{
	char buf[128];

	if (fi_cq_readerr(cq, err, 0) != 1)
		return 0;
	MK_WARN_ONCE("ofi: %s completion error: %s (provider: %s)", conn->dev->props.name,
		     mk_ofi.lib->strerror(err->err),
		     fi_cq_strerror(cq, err->prov_errno, err->err_data, buf, sizeof(buf)));
	/* shm on 1.17 reports some errors already negated */
	return err->err > 0 ? -err->err : err->err < 0 ? err->err : -EIO;
}

/* Reads one error entry; false when it was not this connection's (a shared CQ routed it on). */
static bool ofi_entry_err(struct mk_ofi_conn *conn, struct fid_cq *cq, struct ofi_sink *s)
{
	struct fi_cq_err_entry err = { 0 };
	int status = mk_ofi_cq_err_read(conn, cq, &err);

	if (status == 0)
		return true; /* as without sharing: an error entry counts as heard */
	if (conn->sep != NULL) {
		/* a shared CQ: the entry may be another connection's (ofi_sep.c routes it) */
		struct fi_cq_data_entry e = { .op_context = err.op_context, .flags = err.flags };

		if (mk_ofi_sep_route(conn, &e, status) == NULL)
			return false;
	}
	ofi_entry_failed(conn, s, err.op_context, err.flags, status);
	return true;
}

/*
 * Ops in flight (or posts refused) and no completion for MKERNEL_TIMEOUT: the peer is gone
 * without the provider noticing. Report each op as -ETIMEDOUT; their slots stay taken until the
 * provider returns them.
 */
static void ofi_check_stall(struct mk_ofi_conn *conn, struct ofi_sink *s, uint64_t now)
{
	if ((conn->inflight == 0 && !conn->blocked) || conn->timeout_ns == 0)
		return;
	if (conn->stall_since_ns == 0) {
		conn->stall_since_ns = now;
		return;
	}
	if (now - conn->stall_since_ns < conn->timeout_ns)
		return;
	conn->err = -ETIMEDOUT;
	for (int i = 0; i < conn->nops && ofi_room(conn, s) > 0; i++) {
		struct mk_ofi_op *op = &conn->ops[i];
		struct mk_event e = {
			.type = op->kind == MK_OFI_OP_READ ? MK_EV_READ_DONE : MK_EV_WRITE_DONE,
			.status = -ETIMEDOUT,
			.ctx = op->user,
			.len = op->len,
		};

		if (op->kind == MK_OFI_OP_FREE || op->expired)
			continue;
		op->expired = true;
		conn->inflight--;
		if (op->kind != MK_OFI_OP_LEAD) /* its whole op reports for it */
			ofi_emit(conn, s, &e);
	}
}

/*
 * Time between reads of lanes nothing is expected on: a guard (an error entry, a stranger's
 * write). By time, not by count of polls: a ping-pong of small messages polls every
 * microsecond or two, and one idle read in 64 polls still cost it 2-6 % over net.
 */
#define MK_OFI_LANE_SWEEP_NS 1000000ull

/* One fi_cq_read on one lane; false when the lane had nothing to report. */
static bool ofi_lane_drain(struct mk_ofi_conn *conn, struct mk_ofi_lane *lane, struct ofi_sink *s,
			   uint64_t now)
{
	struct fi_cq_data_entry ent[MK_OFI_CQ_BATCH_MAX];
	int want = ofi_room(conn, s);
	ssize_t got;

	if (want > conn->cq_batch)
		want = conn->cq_batch;
	if (want <= 0)
		return false;
	got = mk_ofi_guarded_cq_read(conn, lane->cq, ent, (size_t)want, now);
	if (got > 0) {
		bool mine = conn->sep == NULL;

		conn->last_cq_ns = now;
		for (ssize_t i = 0; i < got; i++) {
			/* a shared CQ holds every connection's: only ours are handled here */
			if (conn->sep != NULL && mk_ofi_sep_route(conn, &ent[i], 0) == NULL)
				continue;
			mine = true;
			ofi_entry(conn, s, &ent[i]);
		}
		return mine;
	}
	if (got == -FI_EAVAIL)
		return ofi_entry_err(conn, lane->cq, s);
	if (got != -FI_EAGAIN) {
		MK_WARN_ONCE("ofi: %s fi_cq_read failed: %s", conn->dev->props.name,
			     mk_ofi.lib->strerror((int)-got));
		conn->err = mk_ofi_errno(got);
	}
	return false;
}

/*
 * A lane whose progress thread reads its CQ (ofi_progress.c): what the thread put in the ring,
 * oldest first, as far as the caller has room; no provider call. True when anything was taken.
 */
static bool ofi_ring_drain(struct mk_ofi_conn *conn, struct mk_ofi_lane *lane, struct ofi_sink *s,
			   uint64_t now)
{
	struct mk_ofi_ring *r = lane->ring;
	unsigned head = r->head; /* ours alone */
	unsigned tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);

	if (head == tail)
		return false;
	while (head != tail && ofi_room(conn, s) > 0) {
		const struct mk_ofi_ring_ent *e = &r->e[head % MK_OFI_RING];

		if (e->status == 0)
			ofi_entry(conn, s, &e->ent);
		else
			ofi_entry_failed(conn, s, e->ent.op_context, e->ent.flags, e->status);
		head++;
	}
	__atomic_store_n(&r->head, head, __ATOMIC_RELEASE);
	conn->last_cq_ns = now;
	return true;
}

/*
 * A connection on shared endpoints: under the endpoints' lock, first what other pollers kept for
 * it (oldest first), then, once that is all out, the lanes' CQs, handing other connections'
 * entries on (ofi_sep.c). True when something of this connection's was handled.
 */
static bool ofi_sep_drain(struct mk_ofi_conn *conn, struct ofi_sink *s, int nlanes, uint64_t now)
{
	struct mk_ofi_sep *sep = conn->sep;
	bool heard = false;

	pthread_mutex_lock(&sep->lock);
	mk_ofi_sep_take_inbox(conn);
	mk_ofi_sep_rearm(sep);
	if (mk_unlikely(conn->q_lost) && conn->err == 0) {
		MK_WARN("ofi: %s: out of memory keeping a connection's completions: it is broken",
			conn->dev->props.name);
		conn->err = -ENOMEM;
	}
	while (conn->q_len > 0 && ofi_room(conn, s) > 0) {
		struct mk_ofi_qent q = conn->q[conn->q_head];

		conn->q_head = (conn->q_head + 1) % conn->q_cap;
		conn->q_len--;
		heard = true;
		if (q.status == 0)
			ofi_entry(conn, s, &q.ent);
		else
			ofi_entry_failed(conn, s, q.ent.op_context, q.ent.flags, q.status);
	}
	for (int k = 0; k < nlanes && conn->q_len == 0; k++)
		heard |=
			ofi_lane_drain(conn, &conn->lanes[(conn->poll_first + k) % nlanes], s, now);
	mk_ofi_sep_take_inbox(conn); /* a setup message this read dispatched */
	pthread_mutex_unlock(&sep->lock);
	return heard;
}

int mk_ofi_cq_drain(struct mk_ofi_conn *conn, struct mk_event *ev, int max)
{
	struct ofi_sink s = { .ev = ev, .max = max, .n = 0 };
	bool heard = false;
	uint64_t now;
	int nlanes;

	if (ofi_room(conn, &s) <= 0)
		return 0;
	now = mk_now_ns(); /* one reading for the whole poll: a clock read per use showed in
			      profiles of small messages */
	conn->base.polled_ns = now; /* and for the consumer's stamp of this read */
	/*
	 * A peer that died inside the provider may hold our region's lock, and fi_cq_read would
	 * spin on it: stop here. One that closed its endpoint first cannot; what it sent before
	 * it left is still delivered, and the error comes once nothing is left to read.
	 */
	if (conn->wedged ||
	    (conn->peer_pid != 0 && mk_ofi_peer_gone(conn, now) && !mk_ofi_peer_left_cleanly(conn)))
		return conn->err;
	if (mk_unlikely(!conn->rx_posted))
		mk_ofi_stray_rearm(conn); /* a post refused earlier (-FI_EAGAIN) */
	/*
	 * The target must read a lane's CQ for writes on it to land (manual progress), and each
	 * idle lane's read costs system calls on the socket providers (two lanes read on every
	 * call lost 8 B-64 KiB points of the tcp sweep). Everything but striped data travels on
	 * lane 0, so the others are read only while striped data may come (the consumer's
	 * lanes_wanted) or go (our ops on them), and once per MK_OFI_LANE_SWEEP_NS for
	 * anything else. Setup polls lane 0 alone.
	 */
	nlanes = 1;
	if (conn->state == MK_OFI_READY && conn->nlanes > 1 &&
	    (conn->base.lanes_wanted > 0 || conn->side_out > 0 || conn->lanes[0].ring != NULL ||
	     now - conn->swept_ns >= MK_OFI_LANE_SWEEP_NS)) {
		/* (a ring costs no system call to look at: with progress threads, every lane) */
		nlanes = conn->nlanes;
		conn->swept_ns = now;
	}
	/*
	 * A poll: the caller waits for something (its posts are followed by polls, so they need
	 * no kick of their own on the post path).
	 */
	if (conn->lanes[0].ring != NULL)
		mk_ofi_progress_kick(conn, now);
	if (conn->sep != NULL)
		heard = ofi_sep_drain(conn, &s, nlanes, now);
	else
		for (int k = 0; k < nlanes && !conn->wedged; k++) {
			struct mk_ofi_lane *lane = &conn->lanes[(conn->poll_first + k) % nlanes];

			heard |= lane->ring != NULL ? ofi_ring_drain(conn, lane, &s, now)
						    : ofi_lane_drain(conn, lane, &s, now);
		}
	if (++conn->poll_first >= nlanes)
		conn->poll_first = 0;
	if (heard)
		conn->stall_since_ns = 0;
	else
		ofi_check_stall(conn, &s, now);
	if (s.n == 0 && conn->err && conn->nstash == 0)
		return conn->err;
	return s.n;
}

int mk_ofi_poll(struct mk_conn *c, struct mk_event *ev, int max)
{
	struct mk_ofi_conn *conn = mk_ofi_conn_of(c);
	int n = 0, rc;

	if (mk_unlikely(conn->nstash > 0)) {
		n = conn->nstash < max ? conn->nstash : max;
		memcpy(ev, conn->stash, (size_t)n * sizeof(*ev));
		memmove(conn->stash, conn->stash + n, (size_t)(conn->nstash - n) * sizeof(*ev));
		conn->nstash -= n;
	}
	if (mk_unlikely(conn->state != MK_OFI_READY))
		return n > 0 ? n : -ENOTCONN;
	rc = mk_ofi_cq_drain(conn, ev + n, max - n);
	if (rc < 0)
		return n > 0 ? n : rc;
	return n + rc;
}
