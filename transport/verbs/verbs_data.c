// SPDX-License-Identifier: Apache-2.0
/*
 * Data path of the verbs backend: RDMA WRITE (with or without immediate), RDMA READ, flush, and
 * completion polling. Nothing here allocates or blocks; posts go through rdma-core's inline
 * dispatchers (ibv_post_send, ibv_post_recv, ibv_poll_cq). Every send WR is signalled so the
 * per-QP send-queue accounting stays exact; immediates consume receives that poll() reposts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "mk/err.h"
#include "mk/log.h"
#include "verbs.h"

#define DATA_LIVENESS_EVERY 64 /* idle polls between two peeks at the bootstrap socket */

int mk_verbs_wc_errno(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_RETRY_EXC_ERR:
		return -ETIMEDOUT; /* the peer stopped acknowledging */
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ECONNRESET; /* the peer stopped posting receives */
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
	case IBV_WC_REM_ABORT_ERR:
	case IBV_WC_INV_EECN_ERR:
	case IBV_WC_INV_EEC_STATE_ERR:
		return -EREMOTEIO; /* the peer's NIC refused the operation */
	case IBV_WC_WR_FLUSH_ERR:
		return -ECANCELED; /* the QP went to error before this WR ran */
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
	case IBV_WC_MW_BIND_ERR:
		return -EFAULT; /* a local key or range is wrong */
	default:
		return -EIO;
	}
}

int mk_verbs_post_recvs(struct mk_verbs_conn *c, int lane, int n)
{
	struct ibv_recv_wr wr, *bad;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = MK_VERBS_WR_RECV | (uint64_t)lane;
	wr.sg_list = NULL; /* immediates only: the data lands by RDMA address */
	wr.num_sge = 0;
	for (int i = 0; i < n; i++) {
		rc = ibv_post_recv(c->qps[lane], &wr, &bad);
		if (rc)
			return -rc;
	}
	return 0;
}

/* The connection is broken: remember the first cause and say so once. */
static void data_fail(struct mk_verbs_conn *c, const struct ibv_wc *wc, int err)
{
	if (c->err == 0)
		c->err = err;
	if (c->err_warned)
		return;
	c->err_warned = true;
	MK_WARN("verbs: %s: QP %u: %s (wc status %d, vendor error 0x%x): connection failed: %s",
		c->vdev->props.name, wc->qp_num, mk_verbs_ibv->wc_status_str(wc->status),
		wc->status, wc->vendor_err, mk_strerror(err));
}

static int data_post(struct mk_verbs_conn *c, struct ibv_qp *qp, uint8_t lane,
		     enum ibv_wr_opcode op, void *local, size_t len, uint32_t lkey, uint64_t remote,
		     uint32_t rkey, uint32_t imm_be, uint8_t type, void *ctx)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	uint32_t idx;
	int rc;

	idx = c->free_slots[--c->nfree];
	c->slots[idx].ctx = ctx;
	c->slots[idx].len = len;
	c->slots[idx].type = type;
	c->slots[idx].lane = lane;

	sge.addr = (uint64_t)(uintptr_t)local;
	sge.length = (uint32_t)len;
	sge.lkey = lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = idx;
	wr.sg_list = len > 0 ? &sge : NULL;
	wr.num_sge = len > 0 ? 1 : 0;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	/* small writes (CTS entries, credits, eager slots) ride in the work request itself */
	if (op != IBV_WR_RDMA_READ && len > 0 && len <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	wr.imm_data = imm_be;
	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = rkey;
	rc = ibv_post_send(qp, &wr, &bad);
	if (mk_unlikely(rc)) {
		c->free_slots[c->nfree++] = idx;
		return rc == ENOMEM ? -EAGAIN : -rc;
	}
	if (lane == MK_VERBS_FLUSH_LANE)
		c->flush_used++;
	else
		c->sq_used[lane]++;
	return 0;
}

static int data_check(struct mk_verbs_conn *c, int lane, size_t len, struct mk_bmr *mr,
		      const struct mk_rkey *rkey)
{
	if (mk_unlikely(c->err))
		return c->err;
	if (mk_unlikely(c->state != MK_VC_READY))
		return -ENOTCONN;
	if (mk_unlikely(
		    lane < 0 || lane >= c->nqps || rkey == NULL ||
		    (len > 0 && (mr == NULL || mk_verbs_lane_rail(lane, c->nrails) >= mr->nmr)) ||
		    len > UINT32_MAX))
		return -EINVAL; /* also a registration made on a device with fewer rails */
	if (c->sq_used[lane] >= c->sq_depth || c->nfree == 0)
		return -EAGAIN;
	return 0;
}

int mk_verbs_write(struct mk_conn *base, int lane, const void *src, size_t len, struct mk_bmr *mr,
		   uint64_t dst, const struct mk_rkey *rkey, bool has_imm, uint32_t imm, void *ctx)
{
	struct mk_verbs_conn *c = mk_verbs_conn_of(base);
	int rc = data_check(c, lane, len, mr, rkey);
	int rail = mk_verbs_lane_rail(lane, c->nrails);

	if (rc)
		return rc;
	if (len == 0 && !has_imm)
		return -EINVAL;
	return data_post(c, c->qps[lane], (uint8_t)lane,
			 has_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, (void *)src, len,
			 len > 0 ? mr->mr[rail]->lkey : 0, dst,
			 mk_verbs_rkey_of(rkey, mk_verbs_lane_rail(lane, c->peer_nrails)),
			 htonl(imm), MK_EV_WRITE_DONE, ctx);
}

int mk_verbs_read(struct mk_conn *base, int lane, void *dst, size_t len, struct mk_bmr *mr,
		  uint64_t src, const struct mk_rkey *rkey, void *ctx)
{
	struct mk_verbs_conn *c = mk_verbs_conn_of(base);
	int rc = data_check(c, lane, len, mr, rkey);
	int rail = mk_verbs_lane_rail(lane, c->nrails);

	if (rc)
		return rc;
	if (len == 0)
		return -EINVAL;
	return data_post(c, c->qps[lane], (uint8_t)lane, IBV_WR_RDMA_READ, dst, len,
			 mr->mr[rail]->lkey, src,
			 mk_verbs_rkey_of(rkey, mk_verbs_lane_rail(lane, c->peer_nrails)), 0,
			 MK_EV_READ_DONE, ctx);
}

int mk_verbs_flush(struct mk_conn *base, void *addr, size_t len, struct mk_bmr *mr, void *ctx)
{
	struct mk_verbs_conn *c = mk_verbs_conn_of(base);
	size_t n = len < sizeof(c->flush_buf) ? len : sizeof(c->flush_buf);
	unsigned int slot;

	if (mk_unlikely(c->err))
		return c->err;
	if (mk_unlikely(c->state != MK_VC_READY || mr == NULL || mr->nmr == 0))
		return c->state != MK_VC_READY ? -ENOTCONN : -EINVAL;
	if (c->flush_qp != NULL && len > 0 &&
	    (mr->type == MK_PTR_CUDA || mk_param_ib_force_flush())) {
		/* reading the last bytes back orders every earlier PCIe write to that memory */
		if (c->flush_used >= MK_VERBS_FLUSH_DEPTH || c->nfree == 0)
			return -EAGAIN;
		return data_post(c, c->flush_qp, MK_VERBS_FLUSH_LANE, IBV_WR_RDMA_READ,
				 c->flush_buf, n, c->flush_mr->lkey,
				 (uint64_t)(uintptr_t)addr + len - n, mr->mr[0]->rkey, 0,
				 MK_EV_READ_DONE, ctx);
	}
	/* host memory: the CPU already sees what the NIC wrote */
	if (c->fast_head - c->fast_tail >= MK_VERBS_FAST_MAX)
		return -EAGAIN;
	slot = c->fast_head++ % MK_VERBS_FAST_MAX;
	c->fast[slot].ctx = ctx;
	c->fast[slot].len = len;
	return 0;
}

/* Turn one completion into at most one event; returns how many events it produced. */
static int data_complete(struct mk_verbs_conn *c, const struct ibv_wc *wc, struct mk_event *ev)
{
	struct mk_verbs_slot *s;
	int lane, rc, err;

	if (wc->wr_id & MK_VERBS_WR_RECV) {
		lane = (int)(wc->wr_id & 0xff);
		if (wc->status == IBV_WC_SUCCESS) {
			rc = mk_verbs_post_recvs(c, lane, 1);
			if (mk_unlikely(rc))
				data_fail(c, wc, rc);
			ev->type = MK_EV_IMM;
			ev->status = 0;
			ev->ctx = NULL;
			ev->imm = ntohl(wc->imm_data);
			ev->len = wc->byte_len;
			return 1;
		}
		err = mk_verbs_wc_errno(wc->status);
		if (wc->status == IBV_WC_WR_FLUSH_ERR) {
			/* receives flushed by an earlier error carry no news of their own */
			if (c->err == 0)
				data_fail(c, wc, err);
			return 0;
		}
		data_fail(c, wc, err);
		ev->type = MK_EV_IMM;
		ev->status = err;
		ev->ctx = NULL;
		ev->imm = 0;
		ev->len = 0;
		return 1;
	}
	s = &c->slots[wc->wr_id];
	c->free_slots[c->nfree++] = (uint32_t)wc->wr_id;
	if (s->lane == MK_VERBS_FLUSH_LANE)
		c->flush_used--;
	else
		c->sq_used[s->lane]--;
	ev->type = s->type;
	ev->ctx = s->ctx;
	ev->imm = 0;
	ev->len = s->len;
	ev->status = 0;
	if (wc->status != IBV_WC_SUCCESS) {
		err = mk_verbs_wc_errno(wc->status);
		if (wc->status == IBV_WC_WR_FLUSH_ERR && c->err != 0)
			err = c->err; /* report the cause, not the flush */
		data_fail(c, wc, err);
		ev->status = err;
	}
	return 1;
}

/* A peer process that died closed its end of the bootstrap socket. */
static void data_check_peer(struct mk_verbs_conn *c)
{
	char b;
	ssize_t n;

	if (c->fd < 0 || ++c->idle_polls % DATA_LIVENESS_EVERY != 0)
		return;
	n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
		return;
	c->err = -ECONNRESET;
	if (!c->err_warned) {
		c->err_warned = true;
		MK_WARN("verbs: %s: peer closed the connection (QP %u)", c->vdev->props.name,
			c->qps[0]->qp_num);
	}
}

int mk_verbs_poll(struct mk_conn *base, struct mk_event *ev, int max)
{
	struct mk_verbs_conn *c = mk_verbs_conn_of(base);
	struct ibv_wc wc[MK_VERBS_POLL_BATCH];
	int n = 0, got, want;

	if (mk_unlikely(c->state != MK_VC_READY))
		return c->state == MK_VC_FAILED ? c->err : -ENOTCONN;
	while (n < max && c->fast_tail != c->fast_head) {
		unsigned int slot = c->fast_tail++ % MK_VERBS_FAST_MAX;

		ev[n].type = MK_EV_READ_DONE;
		ev[n].status = 0;
		ev[n].ctx = c->fast[slot].ctx;
		ev[n].imm = 0;
		ev[n].len = c->fast[slot].len;
		n++;
	}
	for (int r = 0; r < c->nrails; r++) { /* every rail's CQ, until one is drained */
		while (n < max) {
			want = max - n < MK_VERBS_POLL_BATCH ? max - n : MK_VERBS_POLL_BATCH;
			got = ibv_poll_cq(c->cqs[r], want, wc);
			if (mk_unlikely(got < 0)) {
				if (c->err == 0)
					c->err = -EIO;
				MK_WARN_ONCE("verbs: %s: ibv_poll_cq failed (%d)",
					     c->vdev->props.name, got);
				break;
			}
			for (int i = 0; i < got; i++)
				n += data_complete(c, &wc[i], &ev[n]);
			if (got < want)
				break;
		}
	}
	if (n > 0) {
		c->idle_polls = 0;
		return n;
	}
	if (c->err == 0)
		data_check_peer(c);
	return c->err;
}
