// SPDX-License-Identifier: Apache-2.0
/*
 * Connection setup of the verbs backend, as a non-blocking state machine: connect dials the
 * listener named by the handle, both sides exchange a setup message (QP numbers, LID/GID, PSN,
 * MTU and the consumer's blob), move their queue pairs to RTR/RTS and confirm with an ack.
 * connected() and accept() advance it one step per call. The socket stays open afterwards as a
 * cheap liveness signal. The socket and handle are verbs_boot.c's, the queue pairs verbs_qp.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "verbs.h"

#define CONN_RETRY_MIN_MS 10
#define CONN_RETRY_MAX_MS 500

static int conn_min(int a, int b)
{
	return a < b ? a : b;
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

/* ---- listen / accept ---- */

int mk_verbs_listen(int dev, void *handle, struct mk_listener **out)
{
	struct mk_verbs_listener *l;
	uint16_t port = 0;
	int rc;

	if (mk_verbs_dev_get(dev) == NULL || handle == NULL || out == NULL)
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	l->base.ops = &mk_verbs_ops;
	l->base.dev = dev;
	l->nonce = mk_verbs_boot_random64();
	rc = mk_verbs_boot_listen(&l->fd, &port);
	if (rc)
		goto undo_alloc;
	mk_verbs_handle_encode(handle, mk_verbs_boot_local_ip(), port, l->nonce);
	*out = &l->base;
	return 0;

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
	rc = mk_verbs_conn_objects(c, c->remote.nqps);
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
	struct mk_verbs_listener *l = mk_verbs_listener_of(base);
	struct mk_verbs_conn *c;
	int fd, rc;

	if (out == NULL || blob_len > MK_TP_BLOB_MAX || (blob_len > 0 && blob == NULL))
		return -EINVAL;
	*out = NULL;
	if (l->done)
		return -EINVAL; /* a listener accepts exactly one connection */
	if (l->pending == NULL) {
		rc = mk_verbs_boot_accept(l->fd, &fd);
		if (rc <= 0)
			return rc;
		l->pending = mk_verbs_conn_alloc(base->dev, mk_verbs_dev_get(base->dev));
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
		rc = mk_verbs_boot_io(c->fd, false, &c->remote, sizeof(c->remote), &c->io_done);
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
		rc = mk_verbs_boot_io(c->fd, true, &c->local, sizeof(c->local), &c->io_done);
		if (rc < 0)
			accept_drop(l, "peer went away during setup", rc);
		if (rc <= 0)
			return 0;
		c->state = MK_VC_RECV_ACK;
		c->io_done = 0;
	}
	rc = mk_verbs_boot_io(c->fd, false, &c->ack, sizeof(c->ack), &c->io_done);
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
	l = mk_verbs_listener_of(base);
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
	c = mk_verbs_conn_alloc(dev, vdev);
	if (c == NULL)
		return -ENOMEM;
	rc = mk_verbs_conn_objects(c, nqps);
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

/* One TCP connect step: 1 connected, 0 pending (or retrying later), -errno fatal. */
static int conn_tcp_step(struct mk_verbs_conn *c)
{
	int rc;

	if (c->fd < 0) {
		if (mk_now_ns() < c->retry_ns)
			return 0;
		rc = mk_verbs_boot_dial(c->peer_ip, c->peer_port, &c->fd);
	} else {
		rc = mk_verbs_boot_dial_done(c->fd);
	}
	if (rc >= 0)
		return rc;
	if (mk_verbs_boot_retryable(rc)) {
		conn_schedule_retry(c);
		return 0;
	}
	return rc;
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
	c = mk_verbs_conn_of(base);
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
			rc = mk_verbs_boot_io(c->fd, true, &c->local, sizeof(c->local),
					      &c->io_done);
			if (rc < 0)
				conn_schedule_retry(c);
			if (rc <= 0)
				return 0;
			c->state = MK_VC_RECV_INFO;
			c->io_done = 0;
			break;
		case MK_VC_RECV_INFO:
			rc = mk_verbs_boot_io(c->fd, false, &c->remote, sizeof(c->remote),
					      &c->io_done);
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
			rc = mk_verbs_boot_io(c->fd, true, &c->ack, sizeof(c->ack), &c->io_done);
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
	mk_verbs_conn_destroy(mk_verbs_conn_of(base));
	return 0;
}
