// SPDX-License-Identifier: Apache-2.0
/*
 * Queue pairs of the verbs backend: a connection's objects (a CQ per rail, RC QPs in INIT with
 * receives posted, send slots, the flush QP) and their moves INIT -> RTR -> RTS towards the
 * peer's QPs. Which peer, and when, is the connect/accept state machine's business
 * (verbs_conn.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "verbs.h"

static int qp_min(int a, int b)
{
	return a < b ? a : b;
}

/* A knob clamped to what the QP attribute field can hold. */
static uint8_t qp_knob(int64_t v, int lo, int hi)
{
	return (uint8_t)(v < lo ? lo : v > hi ? hi : v);
}

static int qp_init(struct mk_verbs_conn *c, struct ibv_qp *qp, int rail)
{
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = c->vdev->rails[rail]->port;
	a.qp_access_flags =
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	rc = mk_verbs_ibv->modify_qp(
		qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc) {
		MK_WARN("verbs: %s: QP %u to INIT failed: %s", c->vdev->props.name, qp->qp_num,
			strerror(rc));
		return -rc;
	}
	return 0;
}

/*
 * An RC QP asking for MK_VERBS_INLINE inline bytes; a provider that refuses that gets a second
 * request without. *inline_max: what the provider granted (it writes the caps back).
 */
static struct ibv_qp *qp_create(struct mk_verbs_conn *c, int rail, int sq, int rq,
				uint32_t *inline_max)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp *qp;

	for (int attempt = 0; attempt < 2; attempt++) {
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = c->cqs[rail];
		ia.recv_cq = c->cqs[rail];
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = sq;
		ia.cap.max_recv_wr = rq;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.cap.max_inline_data = attempt == 0 ? MK_VERBS_INLINE : 0;
		ia.sq_sig_all = 0;
		qp = mk_verbs_ibv->create_qp(c->vdev->rails[rail]->pd, &ia);
		if (qp != NULL) {
			*inline_max = ia.cap.max_inline_data;
			return qp;
		}
		if (errno != EINVAL)
			break;
	}
	return NULL;
}

/* INIT -> RTR -> RTS from our rail towards (qpn, lid/gid of its rail, psn) of the peer. */
static int qp_rtr_rts(struct mk_verbs_conn *c, struct ibv_qp *qp, int rail, int peer_rail,
		      uint32_t dest_qpn, const struct mk_verbs_wire *wire)
{
	struct mk_verbs_dev *d = c->vdev->rails[rail];
	const struct mk_verbs_wire_rail *peer = &wire->rail[peer_rail];
	struct ibv_qp_attr a;
	const char *step = "RTR";
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->mtu < (enum ibv_mtu)peer->mtu ? d->mtu : (enum ibv_mtu)peer->mtu;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = wire->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = d->port;
	a.ah_attr.sl = qp_knob(mk_param_ib_sl(), 0, 15);
	if (d->gid_index >= 0) {
		/* RoCE (or IB with an explicit GID index): a GRH is required */
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, sizeof(peer->gid));
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = 255;
		a.ah_attr.grh.traffic_class = qp_knob(mk_param_ib_tc(), 0, 255);
		a.ah_attr.dlid = peer->lid;
	} else {
		a.ah_attr.is_global = 0;
		a.ah_attr.dlid = peer->lid;
	}
	rc = mk_verbs_ibv->modify_qp(qp, &a,
				     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER);
	if (rc)
		goto fail;
	step = "RTS";
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = qp_knob(mk_param_ib_timeout(), 1, 31);
	a.retry_cnt = qp_knob(mk_param_ib_retry_cnt(), 0, 7);
	a.rnr_retry = 7;
	a.sq_psn = c->psn;
	a.max_rd_atomic = 1;
	rc = mk_verbs_ibv->modify_qp(qp, &a,
				     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		goto fail;
	return 0;

fail:
	MK_WARN("verbs: %s: QP %u to %s (peer QP %u) failed: %s", d->props.name, qp->qp_num, step,
		dest_qpn, strerror(rc));
	return -rc;
}

int mk_verbs_qps_connect(struct mk_verbs_conn *c, const struct mk_verbs_wire *peer)
{
	int rc;

	c->peer_nrails = peer->nrails;
	for (int i = 0; i < c->nqps; i++) {
		rc = qp_rtr_rts(c, c->qps[i], mk_verbs_lane_rail(i, c->nrails),
				mk_verbs_lane_rail(i, c->peer_nrails), peer->qpn[i], peer);
		if (rc)
			return rc;
	}
	if (c->flush_qp != NULL) /* rail 0 reading from itself */
		return qp_rtr_rts(c, c->flush_qp, 0, 0, c->flush_qp->qp_num, &c->local);
	return 0;
}

static bool qp_wants_flush(const struct mk_verbs_dev *d)
{
	return d->peermem || d->dmabuf || mk_param_ib_force_flush();
}

static void qp_objects_destroy(struct mk_verbs_conn *c)
{
	if (c->flush_qp != NULL && mk_verbs_ibv->destroy_qp(c->flush_qp))
		MK_WARN("verbs: destroy flush QP failed: %s", strerror(errno));
	c->flush_qp = NULL;
	if (c->flush_mr != NULL && mk_verbs_ibv->dereg_mr(c->flush_mr))
		MK_WARN("verbs: dereg flush MR failed: %s", strerror(errno));
	c->flush_mr = NULL;
	for (int i = 0; i < MK_TP_MAX_LANES; i++) {
		if (c->qps[i] != NULL && mk_verbs_ibv->destroy_qp(c->qps[i]))
			MK_WARN("verbs: destroy QP failed: %s", strerror(errno));
		c->qps[i] = NULL;
	}
	for (int r = 0; r < MK_VERBS_MAX_RAILS; r++) {
		if (c->cqs[r] != NULL && mk_verbs_ibv->destroy_cq(c->cqs[r]))
			MK_WARN("verbs: destroy CQ failed: %s", strerror(errno));
		c->cqs[r] = NULL;
	}
	free(c->free_slots);
	c->free_slots = NULL;
	free(c->slots);
	c->slots = NULL;
}

/*
 * A CQ per rail, nqps RC QPs in INIT spread over the rails with receives posted, slots, and the
 * flush QP (rail 0) when needed.
 */
int mk_verbs_conn_objects(struct mk_verbs_conn *c, int nqps)
{
	struct mk_verbs_dev *d = c->vdev;
	bool flush = qp_wants_flush(d);
	int nslots, cqe, rc;

	c->nqps = nqps;
	c->sq_depth = qp_min((int)mk_param_ib_sq_depth(), d->max_qp_wr);
	c->rq_depth = qp_min((int)mk_param_ib_rq_depth(), d->max_qp_wr);
	if (c->sq_depth < 1)
		c->sq_depth = 1;
	if (c->rq_depth < 1)
		c->rq_depth = 1;
	nslots = nqps * c->sq_depth + (flush ? MK_VERBS_FLUSH_DEPTH : 0);
	c->slots = calloc((size_t)nslots, sizeof(*c->slots));
	c->free_slots = calloc((size_t)nslots, sizeof(*c->free_slots));
	if (c->slots == NULL || c->free_slots == NULL) {
		rc = -ENOMEM;
		goto undo_slots;
	}
	for (int i = 0; i < nslots; i++)
		c->free_slots[i] = (uint32_t)(nslots - 1 - i);
	c->nfree = nslots;

	cqe = nslots + nqps * c->rq_depth; /* enough for every QP: a rail holds a share */
	if (d->max_cqe > 0 && cqe > d->max_cqe)
		cqe = d->max_cqe;
	for (int r = 0; r < c->nrails; r++) {
		c->cqs[r] = mk_verbs_ibv->create_cq(d->rails[r]->ctx, cqe, c, NULL, 0);
		if (c->cqs[r] == NULL) {
			rc = -(errno ? errno : ENOMEM);
			MK_WARN("verbs: %s: create_cq(%d) on rail %d failed: %s", d->props.name,
				cqe, r, mk_strerror(rc));
			goto undo_cqs;
		}
	}
	c->max_inline = MK_VERBS_INLINE;
	for (int i = 0; i < nqps; i++) {
		uint32_t inl = 0;

		c->qps[i] = qp_create(c, mk_verbs_lane_rail(i, c->nrails), c->sq_depth, c->rq_depth,
				      &inl);
		if (inl < c->max_inline)
			c->max_inline = inl;
		if (c->qps[i] == NULL) {
			rc = -(errno ? errno : ENOMEM);
			MK_WARN("verbs: %s: create_qp (lane %d of %d) failed: %s", d->props.name, i,
				nqps, mk_strerror(rc));
			goto undo_qps;
		}
		rc = qp_init(c, c->qps[i], mk_verbs_lane_rail(i, c->nrails));
		if (rc)
			goto undo_qps;
		rc = mk_verbs_post_recvs(c, i, c->rq_depth);
		if (rc)
			goto undo_qps;
	}
	if (!flush)
		return 0;
	c->flush_mr = mk_verbs_ibv->reg_mr(d->rails[0]->pd, c->flush_buf, sizeof(c->flush_buf),
					   IBV_ACCESS_LOCAL_WRITE);
	if (c->flush_mr == NULL) {
		rc = -(errno ? errno : ENOMEM);
		MK_WARN("verbs: %s: registering the flush buffer failed: %s", d->props.name,
			mk_strerror(rc));
		goto undo_qps;
	}
	c->flush_qp = qp_create(c, 0, MK_VERBS_FLUSH_DEPTH, 1, &(uint32_t){ 0 });
	if (c->flush_qp == NULL) {
		rc = -(errno ? errno : ENOMEM);
		MK_WARN("verbs: %s: create_qp (flush) failed: %s", d->props.name, mk_strerror(rc));
		goto undo_flush_mr;
	}
	rc = qp_init(c, c->flush_qp, 0);
	if (rc)
		goto undo_flush_qp;
	return 0;

undo_flush_qp:
	mk_verbs_ibv->destroy_qp(c->flush_qp);
	c->flush_qp = NULL;
undo_flush_mr:
	mk_verbs_ibv->dereg_mr(c->flush_mr);
	c->flush_mr = NULL;
undo_qps:
	for (int i = 0; i < nqps; i++) {
		if (c->qps[i] != NULL)
			mk_verbs_ibv->destroy_qp(c->qps[i]);
		c->qps[i] = NULL;
	}
undo_cqs:
	for (int r = 0; r < c->nrails; r++) {
		if (c->cqs[r] != NULL)
			mk_verbs_ibv->destroy_cq(c->cqs[r]);
		c->cqs[r] = NULL;
	}
undo_slots:
	free(c->free_slots);
	c->free_slots = NULL;
	free(c->slots);
	c->slots = NULL;
	return rc;
}

struct mk_verbs_conn *mk_verbs_conn_alloc(int dev, struct mk_verbs_dev *vdev)
{
	struct mk_verbs_conn *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->base.ops = &mk_verbs_ops;
	c->base.dev = dev;
	c->vdev = vdev;
	c->nrails = vdev->nrails;
	c->peer_nrails = vdev->nrails;
	c->fd = -1;
	c->psn = (uint32_t)mk_verbs_boot_random64() & 0xffffff;
	c->deadline_ns = mk_now_ns() + (uint64_t)mk_param_timeout_ms() * 1000000ull;
	return c;
}

int mk_verbs_conn_create(struct mk_verbs_dev *vdev, int nqps, struct mk_verbs_conn **out)
{
	struct mk_verbs_conn *c = mk_verbs_conn_alloc(0, vdev);
	int rc;

	if (c == NULL)
		return -ENOMEM;
	rc = mk_verbs_conn_objects(c, nqps);
	if (rc) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void mk_verbs_conn_destroy(struct mk_verbs_conn *c)
{
	if (c == NULL)
		return;
	qp_objects_destroy(c);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}
