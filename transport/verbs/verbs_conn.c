// SPDX-License-Identifier: Apache-2.0
/*
 * Connection setup of the verbs backend. The listen handle carries the listener's TCP address
 * and a nonce; connect opens a non-blocking TCP socket and both sides exchange QP numbers,
 * LID/GID, PSN, MTU and the consumer's blob, then move their RC queue pairs to RTR/RTS and
 * confirm with an ack. Every step is non-blocking: connected() and accept() advance a small
 * state machine each call. The socket stays open afterwards as a cheap liveness signal.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "verbs.h"

#define CONN_RETRY_MIN_MS 10
#define CONN_RETRY_MAX_MS 500

static uint64_t conn_random64(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
		v = mk_now_ns() ^ ((uint64_t)getpid() << 32);
	return v;
}

int mk_verbs_handle_encode(void *buf, uint32_t ip, uint16_t port, uint64_t nonce)
{
	struct mk_verbs_handle h;

	memset(&h, 0, sizeof(h));
	h.magic = MK_VERBS_HANDLE_MAGIC;
	h.version = MK_VERBS_VERSION;
	h.size = sizeof(h);
	h.nonce = nonce;
	h.ip = ip;
	h.port = port;
	h.check = mk_fnv1a32(&h, offsetof(struct mk_verbs_handle, check));
	memcpy(buf, &h, sizeof(h));
	return 0;
}

int mk_verbs_handle_decode(const void *buf, struct mk_verbs_handle *out)
{
	struct mk_verbs_handle h;
	const char *why = NULL;

	if (buf == NULL) {
		MK_WARN("verbs: connect with a NULL handle");
		return -EINVAL;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != MK_VERBS_HANDLE_MAGIC)
		why = "not a verbs handle (wrong magic)";
	else if (h.version != MK_VERBS_VERSION)
		why = "unsupported handle version";
	else if (h.size != sizeof(h) || h.reserved != 0 || h.reserved2 != 0)
		why = "malformed handle";
	else if (h.check != mk_fnv1a32(&h, offsetof(struct mk_verbs_handle, check)))
		why = "handle checksum mismatch (corrupted)";
	else if (h.ip == 0 || h.port == 0)
		why = "handle names no address";
	if (why != NULL) {
		MK_WARN("verbs: rejecting connect handle: %s", why);
		return -EINVAL;
	}
	*out = h;
	return 0;
}

/*
 * IPv4 of MKERNEL_SOCKET_IFNAME, else of the first interface that is up and neither loopback nor a
 * docker/virbr bridge, else 127.0.0.1.
 */
static uint32_t conn_local_ip(void)
{
	const char *want = mk_param_ib_socket_ifname();
	struct ifaddrs *ifs, *i;
	uint32_t ip = htonl(INADDR_LOOPBACK);

	if (getifaddrs(&ifs))
		return ip;
	for (i = ifs; i != NULL; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
		    !(i->ifa_flags & IFF_UP))
			continue;
		if (want != NULL && *want != '\0') {
			if (strcmp(i->ifa_name, want) != 0)
				continue;
		} else if ((i->ifa_flags & IFF_LOOPBACK) ||
			   strncmp(i->ifa_name, "docker", 6) == 0 ||
			   strncmp(i->ifa_name, "virbr", 5) == 0) {
			continue; /* host-local bridges do not reach other nodes */
		}
		ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		break;
	}
	if (i == NULL && want != NULL && *want != '\0')
		MK_WARN("verbs: MKERNEL_SOCKET_IFNAME=%s has no IPv4 address; using 127.0.0.1",
			want);
	freeifaddrs(ifs);
	return ip;
}

/* ---- queue pairs ---- */

static int conn_min(int a, int b)
{
	return a < b ? a : b;
}

/* A knob clamped to what the QP attribute field can hold. */
static uint8_t conn_knob(int64_t v, int lo, int hi)
{
	return (uint8_t)(v < lo ? lo : v > hi ? hi : v);
}

static int conn_qp_init(struct mk_verbs_conn *c, struct ibv_qp *qp, int rail)
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

static struct ibv_qp *conn_qp_create(struct mk_verbs_conn *c, int rail, int sq, int rq)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = c->cqs[rail];
	ia.recv_cq = c->cqs[rail];
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = sq;
	ia.cap.max_recv_wr = rq;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.sq_sig_all = 0;
	return mk_verbs_ibv->create_qp(c->vdev->rails[rail]->pd, &ia);
}

/* INIT -> RTR -> RTS from our rail towards (qpn, lid/gid of its rail, psn) of the peer. */
static int conn_qp_rtr_rts(struct mk_verbs_conn *c, struct ibv_qp *qp, int rail, int peer_rail,
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
	a.ah_attr.sl = conn_knob(mk_param_ib_sl(), 0, 15);
	if (d->gid_index >= 0) {
		/* RoCE (or IB with an explicit GID index): a GRH is required */
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, sizeof(peer->gid));
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = 255;
		a.ah_attr.grh.traffic_class = conn_knob(mk_param_ib_tc(), 0, 255);
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
	a.timeout = conn_knob(mk_param_ib_timeout(), 1, 31);
	a.retry_cnt = conn_knob(mk_param_ib_retry_cnt(), 0, 7);
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
		rc = conn_qp_rtr_rts(c, c->qps[i], mk_verbs_lane_rail(i, c->nrails),
				     mk_verbs_lane_rail(i, c->peer_nrails), peer->qpn[i], peer);
		if (rc)
			return rc;
	}
	if (c->flush_qp != NULL) /* rail 0 reading from itself */
		return conn_qp_rtr_rts(c, c->flush_qp, 0, 0, c->flush_qp->qp_num, &c->local);
	return 0;
}

static bool conn_wants_flush_qp(const struct mk_verbs_dev *d)
{
	return d->peermem || d->dmabuf || mk_param_ib_force_flush();
}

static void conn_objects_destroy(struct mk_verbs_conn *c)
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
static int conn_objects_create(struct mk_verbs_conn *c, int nqps)
{
	struct mk_verbs_dev *d = c->vdev;
	bool flush = conn_wants_flush_qp(d);
	int nslots, cqe, rc;

	c->nqps = nqps;
	c->sq_depth = conn_min((int)mk_param_ib_sq_depth(), d->max_qp_wr);
	c->rq_depth = conn_min((int)mk_param_ib_rq_depth(), d->max_qp_wr);
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
	for (int i = 0; i < nqps; i++) {
		c->qps[i] = conn_qp_create(c, mk_verbs_lane_rail(i, c->nrails), c->sq_depth,
					   c->rq_depth);
		if (c->qps[i] == NULL) {
			rc = -(errno ? errno : ENOMEM);
			MK_WARN("verbs: %s: create_qp (lane %d of %d) failed: %s", d->props.name, i,
				nqps, mk_strerror(rc));
			goto undo_qps;
		}
		rc = conn_qp_init(c, c->qps[i], mk_verbs_lane_rail(i, c->nrails));
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
	c->flush_qp = conn_qp_create(c, 0, MK_VERBS_FLUSH_DEPTH, 1);
	if (c->flush_qp == NULL) {
		rc = -(errno ? errno : ENOMEM);
		MK_WARN("verbs: %s: create_qp (flush) failed: %s", d->props.name, mk_strerror(rc));
		goto undo_flush_mr;
	}
	rc = conn_qp_init(c, c->flush_qp, 0);
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

static struct mk_verbs_conn *conn_alloc(int dev, struct mk_verbs_dev *vdev)
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
	c->psn = (uint32_t)conn_random64() & 0xffffff;
	c->deadline_ns = mk_now_ns() + (uint64_t)mk_param_timeout_ms() * 1000000ull;
	return c;
}

int mk_verbs_conn_create(struct mk_verbs_dev *vdev, int nqps, struct mk_verbs_conn **out)
{
	struct mk_verbs_conn *c = conn_alloc(0, vdev);
	int rc;

	if (c == NULL)
		return -ENOMEM;
	rc = conn_objects_create(c, nqps);
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
	conn_objects_destroy(c);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

/* What this side tells the peer: QPs, routing identity, PSN, MTU, blob. */
static void conn_fill_local(struct mk_verbs_conn *c, uint64_t nonce, const void *blob,
			    size_t blob_len)
{
	struct mk_verbs_wire *w = &c->local;
	struct mk_verbs_dev *d = c->vdev;

	memset(w, 0, sizeof(*w));
	w->magic = MK_VERBS_WIRE_MAGIC;
	w->version = MK_VERBS_VERSION;
	w->nqps = (uint16_t)c->nqps;
	w->nonce = nonce;
	for (int i = 0; i < c->nqps; i++)
		w->qpn[i] = c->qps[i]->qp_num;
	w->psn = c->psn;
	w->nrails = (uint16_t)c->nrails;
	for (int r = 0; r < c->nrails; r++) {
		const struct mk_verbs_dev *rd = d->rails[r];

		w->rail[r].lid = rd->lid;
		w->rail[r].link_layer = rd->link_layer;
		w->rail[r].mtu = (uint8_t)rd->mtu;
		memcpy(w->rail[r].gid, rd->gid.raw, sizeof(w->rail[r].gid));
	}
	w->blob_len = (uint32_t)blob_len;
	if (blob_len > 0)
		memcpy(w->blob, blob, blob_len);
	w->check = mk_fnv1a32(w, offsetof(struct mk_verbs_wire, check));
}

/* 0 if the peer's setup message is sound for this device, else -EPROTO with the reason. */
static int conn_check_remote(struct mk_verbs_conn *c, uint64_t nonce)
{
	const struct mk_verbs_wire *w = &c->remote;
	const char *why = NULL;

	if (w->magic != MK_VERBS_WIRE_MAGIC || w->version != MK_VERBS_VERSION)
		why = "not a verbs peer";
	else if (w->check != mk_fnv1a32(w, offsetof(struct mk_verbs_wire, check)))
		why = "corrupted setup message";
	else if (w->nonce != nonce)
		why = "stale or foreign handle (nonce mismatch)";
	else if (w->nqps < 1 || w->nqps > MK_TP_MAX_LANES || w->blob_len > MK_TP_BLOB_MAX)
		why = "bad lane count or blob size";
	else if (w->nrails < 1 || w->nrails > MK_VERBS_MAX_RAILS)
		why = "bad port count";
	for (int r = 0; why == NULL && r < w->nrails; r++)
		if (w->rail[r].link_layer != c->vdev->link_layer)
			why = "link layers differ (InfiniBand vs RoCE)";
	if (why == NULL)
		return 0;
	MK_WARN("verbs: %s: rejecting peer setup: %s", c->vdev->props.name, why);
	return -EPROTO;
}

static void conn_take_peer_blob(struct mk_verbs_conn *c)
{
	memcpy(c->base.peer_blob, c->remote.blob, c->remote.blob_len);
	c->base.peer_blob_len = c->remote.blob_len;
}

/* Move bytes of one setup message: 1 done, 0 would block, -errno (-ECONNRESET on EOF). */
static int conn_io(int fd, bool out, void *buf, size_t len, size_t *done)
{
	while (*done < len) {
		ssize_t n = out ? send(fd, (char *)buf + *done, len - *done,
				       MSG_NOSIGNAL | MSG_DONTWAIT)
				: recv(fd, (char *)buf + *done, len - *done, MSG_DONTWAIT);

		if (n > 0) {
			*done += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno;
	}
	return 1;
}

/* ---- listen / accept ---- */

int mk_verbs_listen(int dev, void *handle, struct mk_listener **out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t salen = sizeof(sa);
	struct mk_verbs_listener *l;
	int rc;

	if (mk_verbs_dev_get(dev) == NULL || handle == NULL || out == NULL)
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	l->base.ops = &mk_verbs_ops;
	l->base.dev = dev;
	l->nonce = conn_random64();
	l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0) {
		rc = -errno;
		goto undo_alloc;
	}
	if (bind(l->fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(l->fd, 16) ||
	    getsockname(l->fd, (struct sockaddr *)&sa, &salen)) {
		rc = -errno;
		MK_WARN("verbs: listen socket: %s", mk_strerror(rc));
		goto undo_socket;
	}
	mk_verbs_handle_encode(handle, conn_local_ip(), sa.sin_port, l->nonce);
	*out = &l->base;
	return 0;

undo_socket:
	close(l->fd);
undo_alloc:
	free(l);
	return rc;
}

static void accept_drop(struct mk_verbs_listener *l, const char *why, int rc)
{
	MK_INFO(MK_SUBSYS_NET, "verbs: dropping an incoming connection: %s (%s)", why,
		mk_strerror(rc));
	mk_verbs_conn_destroy(l->pending);
	l->pending = NULL;
}

/* The connector's setup message arrived: build the QPs it asked for and connect them. */
static int accept_build(struct mk_verbs_listener *l, const void *blob, size_t blob_len)
{
	struct mk_verbs_conn *c = l->pending;
	int rc;

	rc = conn_check_remote(c, l->nonce);
	if (rc)
		return rc;
	rc = conn_objects_create(c, c->remote.nqps);
	if (rc)
		return rc;
	conn_fill_local(c, l->nonce, blob, blob_len);
	rc = mk_verbs_qps_connect(c, &c->remote);
	if (rc)
		return rc;
	conn_take_peer_blob(c);
	c->base.nlanes = c->nqps;
	c->state = MK_VC_SEND_INFO;
	c->io_done = 0;
	return 0;
}

int mk_verbs_accept(struct mk_listener *base, const void *blob, size_t blob_len,
		    struct mk_conn **out)
{
	struct mk_verbs_listener *l = verbs_listener(base);
	struct mk_verbs_conn *c;
	int fd, rc, one = 1;

	if (out == NULL || blob_len > MK_TP_BLOB_MAX || (blob_len > 0 && blob == NULL))
		return -EINVAL;
	*out = NULL;
	if (l->done)
		return -EINVAL; /* a listener accepts exactly one connection */
	if (l->pending == NULL) {
		fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED ||
					       errno == EINTR
				       ? 0
				       : -errno;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		l->pending = conn_alloc(base->dev, mk_verbs_dev_get(base->dev));
		if (l->pending == NULL) {
			close(fd);
			return -ENOMEM;
		}
		l->pending->fd = fd;
		l->pending->acceptor = true;
		l->pending->state = MK_VC_RECV_INFO;
	}
	c = l->pending;
	if (mk_now_ns() > c->deadline_ns) {
		accept_drop(l, "peer did not finish setup in time", -ETIMEDOUT);
		return 0;
	}
	if (c->state == MK_VC_RECV_INFO) {
		rc = conn_io(c->fd, false, &c->remote, sizeof(c->remote), &c->io_done);
		if (rc < 0)
			accept_drop(l, "peer went away during setup", rc);
		if (rc <= 0)
			return 0;
		rc = accept_build(l, blob, blob_len);
		if (rc == -EPROTO) {
			accept_drop(l, "bad setup message", rc);
			return 0;
		}
		if (rc) {
			mk_verbs_conn_destroy(l->pending);
			l->pending = NULL;
			return rc;
		}
	}
	if (c->state == MK_VC_SEND_INFO) {
		rc = conn_io(c->fd, true, &c->local, sizeof(c->local), &c->io_done);
		if (rc < 0)
			accept_drop(l, "peer went away during setup", rc);
		if (rc <= 0)
			return 0;
		c->state = MK_VC_RECV_ACK;
		c->io_done = 0;
	}
	rc = conn_io(c->fd, false, &c->ack, sizeof(c->ack), &c->io_done);
	if (rc == 0)
		return 0;
	if (rc < 0 || c->ack != MK_VERBS_ACK_MAGIC) {
		accept_drop(l, "no ack from peer", rc < 0 ? rc : -EPROTO);
		return 0;
	}
	c->state = MK_VC_READY;
	l->pending = NULL;
	l->done = true;
	*out = &c->base;
	return 0;
}

int mk_verbs_close_listen(struct mk_listener *base)
{
	struct mk_verbs_listener *l;

	if (base == NULL)
		return -EINVAL;
	l = verbs_listener(base);
	mk_verbs_conn_destroy(l->pending);
	close(l->fd);
	free(l);
	return 0;
}

/* ---- connect ---- */

int mk_verbs_connect(int dev, const void *handle, const void *blob, size_t blob_len,
		     struct mk_conn **out)
{
	struct mk_verbs_dev *vdev = mk_verbs_dev_get(dev);
	struct mk_verbs_handle h;
	struct mk_verbs_conn *c;
	int nqps = (int)mk_param_ib_qps_per_conn();
	int rc;

	if (vdev == NULL || out == NULL || blob_len > MK_TP_BLOB_MAX ||
	    (blob_len > 0 && blob == NULL))
		return -EINVAL;
	*out = NULL;
	rc = mk_verbs_handle_decode(handle, &h);
	if (rc)
		return rc;
	if (nqps < 1 || nqps > MK_TP_MAX_LANES) {
		MK_WARN("verbs: MKERNEL_IB_QPS_PER_CONN=%d outside 1..%d", nqps, MK_TP_MAX_LANES);
		return -EINVAL;
	}
	/* a fused device: that many QPs on every rail, within the lanes a connection has */
	nqps = conn_min(nqps * vdev->nrails, MK_TP_MAX_LANES);
	c = conn_alloc(dev, vdev);
	if (c == NULL)
		return -ENOMEM;
	rc = conn_objects_create(c, nqps);
	if (rc)
		goto undo_alloc;
	c->peer_ip = h.ip;
	c->peer_port = h.port;
	c->nonce = h.nonce;
	c->state = MK_VC_CONNECTING;
	c->retry_ms = CONN_RETRY_MIN_MS;
	conn_fill_local(c, h.nonce, blob, blob_len);
	c->base.nlanes = nqps;
	*out = &c->base;
	return 0;

undo_alloc:
	free(c);
	return rc;
}

/* The listener refused or dropped us: try again a little later, until the deadline. */
static void conn_schedule_retry(struct mk_verbs_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = MK_VC_CONNECTING;
	c->io_done = 0;
	c->retry_ns = mk_now_ns() + (uint64_t)c->retry_ms * 1000000ull;
	c->retry_ms = conn_min((int)c->retry_ms * 2, CONN_RETRY_MAX_MS);
}

/* One TCP connect step: 1 connected, 0 pending, -errno fatal. */
static int conn_tcp_step(struct mk_verbs_conn *c)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct pollfd pfd;
	socklen_t len = sizeof(int);
	int err = 0, one = 1;

	if (c->fd < 0) {
		if (mk_now_ns() < c->retry_ns)
			return 0;
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			return -errno;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		sa.sin_addr.s_addr = c->peer_ip;
		sa.sin_port = c->peer_port;
		if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return 1;
		if (errno != EINPROGRESS) {
			err = errno;
			goto refused;
		}
	}
	pfd.fd = c->fd;
	pfd.events = POLLOUT;
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) <= 0)
		return 0;
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
		return 1;
refused:
	if (err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT || err == EHOSTUNREACH ||
	    err == ENETUNREACH || err == EAGAIN) {
		conn_schedule_retry(c);
		return 0;
	}
	return -err;
}

static int conn_fail(struct mk_verbs_conn *c, int rc)
{
	if (rc == -ETIMEDOUT)
		MK_WARN("verbs: %s: no answer from listener %s:%u within MKERNEL_TIMEOUT=%ld ms",
			c->vdev->props.name, inet_ntoa((struct in_addr){ c->peer_ip }),
			ntohs(c->peer_port), (long)mk_param_timeout_ms());
	else
		MK_WARN("verbs: %s: connection setup to %s:%u failed: %s", c->vdev->props.name,
			inet_ntoa((struct in_addr){ c->peer_ip }), ntohs(c->peer_port),
			mk_strerror(rc));
	c->state = MK_VC_FAILED;
	c->err = rc;
	return rc;
}

int mk_verbs_connected(struct mk_conn *base)
{
	struct mk_verbs_conn *c;
	int rc;

	if (base == NULL)
		return -EINVAL;
	c = verbs_conn(base);
	for (;;) {
		switch (c->state) {
		case MK_VC_READY:
			return 1;
		case MK_VC_FAILED:
			return c->err;
		default:
			break;
		}
		if (mk_now_ns() > c->deadline_ns)
			return conn_fail(c, -ETIMEDOUT);
		switch (c->state) {
		case MK_VC_CONNECTING:
			rc = conn_tcp_step(c);
			if (rc <= 0)
				return rc < 0 ? conn_fail(c, rc) : 0;
			c->state = MK_VC_SEND_INFO;
			c->io_done = 0;
			break;
		case MK_VC_SEND_INFO:
			rc = conn_io(c->fd, true, &c->local, sizeof(c->local), &c->io_done);
			if (rc < 0)
				conn_schedule_retry(c);
			if (rc <= 0)
				return 0;
			c->state = MK_VC_RECV_INFO;
			c->io_done = 0;
			break;
		case MK_VC_RECV_INFO:
			rc = conn_io(c->fd, false, &c->remote, sizeof(c->remote), &c->io_done);
			if (rc < 0)
				conn_schedule_retry(c); /* dropped: a stale or foreign listener */
			if (rc <= 0)
				return 0;
			rc = conn_check_remote(c, c->nonce);
			if (rc == 0 && c->remote.nqps != c->nqps)
				rc = -EPROTO;
			if (rc == 0)
				rc = mk_verbs_qps_connect(c, &c->remote);
			if (rc)
				return conn_fail(c, rc);
			conn_take_peer_blob(c);
			c->ack = MK_VERBS_ACK_MAGIC;
			c->state = MK_VC_SEND_ACK;
			c->io_done = 0;
			break;
		case MK_VC_SEND_ACK:
			rc = conn_io(c->fd, true, &c->ack, sizeof(c->ack), &c->io_done);
			if (rc < 0)
				return conn_fail(c, rc);
			if (rc == 0)
				return 0;
			c->state = MK_VC_READY;
			break;
		default:
			return conn_fail(c, -EINVAL);
		}
	}
}

int mk_verbs_close(struct mk_conn *base)
{
	if (base == NULL)
		return -EINVAL;
	mk_verbs_conn_destroy(verbs_conn(base));
	return 0;
}
