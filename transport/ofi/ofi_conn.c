// SPDX-License-Identifier: Apache-2.0
/*
 * Connection setup for the libfabric backend. Every connection owns MKERNEL_OFI_LANES RDM
 * endpoints (lanes), each with its own CQ and AV on the device's shared domain. listen() opens
 * the lane-0 endpoint the accepted connection will use and publishes its address in a
 * self-validating handle; connect() opens its lanes, inserts the listener's address on lane 0
 * and sends {nonce, lane addresses, blob}; accept() opens as many lanes, pairs them with the
 * connector's and answers with its own addresses and blob. Nothing here blocks: progress
 * happens when connected()/accept() are called.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "ofi.h"

/* Handle layout (little-endian host order; peers run the same build) */
#define H_MAGIC	   0
#define H_VERSION  4
#define H_ADDRLEN  5
#define H_RESERVED 6
#define H_PROV	   8
#define H_NONCE	   16
#define H_ADDR	   24
#define H_CSUM	   (MK_TP_HANDLE_MAX - 4)

_Static_assert(H_ADDR + MK_OFI_ADDR_MAX <= H_CSUM, "handle address field overlaps the checksum");

/* Connect-side retry pace after a failed request send (listener not reachable yet). */
#define OFI_RESEND_NS 20000000ull

int mk_ofi_handle_encode(const struct mk_ofi_handle *h, void *buf)
{
	uint8_t *b = buf;
	uint32_t magic = MK_OFI_HANDLE_MAGIC, csum;

	if (h->addrlen == 0 || h->addrlen > MK_OFI_ADDR_MAX)
		return -EINVAL;
	memset(b, 0, MK_TP_HANDLE_MAX);
	memcpy(b + H_MAGIC, &magic, 4);
	b[H_VERSION] = MK_OFI_WIRE_VERSION;
	b[H_ADDRLEN] = (uint8_t)h->addrlen;
	memcpy(b + H_PROV, &h->prov_hash, 4);
	memcpy(b + H_NONCE, &h->nonce, 8);
	memcpy(b + H_ADDR, h->addr, h->addrlen);
	csum = mk_fnv1a32(b, H_CSUM);
	memcpy(b + H_CSUM, &csum, 4);
	return 0;
}

int mk_ofi_handle_decode(const void *buf, struct mk_ofi_handle *h)
{
	const uint8_t *b = buf;
	uint32_t magic, csum;
	uint16_t reserved;

	memcpy(&magic, b + H_MAGIC, 4);
	if (magic != MK_OFI_HANDLE_MAGIC) {
		MK_WARN("ofi: connect handle has magic 0x%08x: not from the ofi backend", magic);
		return -EINVAL;
	}
	memcpy(&csum, b + H_CSUM, 4);
	if (csum != mk_fnv1a32(b, H_CSUM)) {
		MK_WARN("ofi: connect handle checksum mismatch: the handle was corrupted in "
			"transit");
		return -EINVAL;
	}
	if (b[H_VERSION] != MK_OFI_WIRE_VERSION) {
		MK_WARN("ofi: connect handle version %u, this build speaks %u", b[H_VERSION],
			MK_OFI_WIRE_VERSION);
		return -EINVAL;
	}
	memcpy(&h->prov_hash, b + H_PROV, 4);
	if (h->prov_hash != mk_ofi.prov_hash) {
		MK_WARN("ofi: connect handle comes from another libfabric provider (hash 0x%08x, "
			"ours 0x%08x): set the same MKERNEL_OFI_PROVIDER on both sides",
			h->prov_hash, mk_ofi.prov_hash);
		return -EINVAL;
	}
	memcpy(&reserved, b + H_RESERVED, 2);
	h->addrlen = b[H_ADDRLEN];
	if (reserved != 0 || h->addrlen == 0 || h->addrlen > MK_OFI_ADDR_MAX) {
		MK_WARN("ofi: connect handle has a bad address length %zu", h->addrlen);
		return -EINVAL;
	}
	memcpy(&h->nonce, b + H_NONCE, 8);
	memcpy(h->addr, b + H_ADDR, h->addrlen);
	return 0;
}

static uint64_t ofi_nonce(void)
{
	uint64_t n;

	if (getrandom(&n, sizeof(n), GRND_NONBLOCK) == (ssize_t)sizeof(n))
		return n;
	/* entropy pool not ready: uniqueness, not secrecy, is what the nonce is for */
	return mk_now_ns() ^ ((uint64_t)getpid() << 32);
}

int mk_ofi_ep_open(struct mk_ofi_conn *conn, size_t cq_size, size_t av_count,
		   struct mk_ofi_lane *lane)
{
	struct mk_ofi_dev *d = conn->dev;
	struct fi_cq_attr cq_attr = {
		.format = FI_CQ_FORMAT_DATA,
		.size = cq_size,
		.wait_obj = FI_WAIT_NONE,
	};
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = av_count };
	int rc;

	lane->conn = conn;
	lane->peer = FI_ADDR_UNSPEC;
	rc = fi_cq_open(d->domain, &cq_attr, &lane->cq, NULL);
	if (rc)
		return rc;
	rc = fi_av_open(d->domain, &av_attr, &lane->av, NULL);
	if (rc)
		goto undo_cq;
	rc = fi_endpoint(d->domain, d->info, &lane->ep, NULL);
	if (rc)
		goto undo_av;
	rc = fi_ep_bind(lane->ep, &lane->cq->fid, FI_TRANSMIT | FI_RECV);
	if (rc)
		goto undo_ep;
	rc = fi_ep_bind(lane->ep, &lane->av->fid, 0);
	if (rc)
		goto undo_ep;
	rc = mk_ofi_enable(conn, lane);
	if (rc)
		goto undo_ep;
	lane->addrlen = sizeof(lane->addr);
	rc = fi_getname(&lane->ep->fid, lane->addr, &lane->addrlen);
	if (rc == -FI_ETOOSMALL)
		rc = -ENAMETOOLONG; /* address longer than a handle can carry */
	if (rc)
		goto undo_ep;
	return 0;

undo_ep:
	fi_close(&lane->ep->fid);
	lane->ep = NULL;
undo_av:
	fi_close(&lane->av->fid);
	lane->av = NULL;
undo_cq:
	fi_close(&lane->cq->fid);
	lane->cq = NULL;
	return rc;
}

static int ofi_lane_open(struct mk_ofi_conn *conn, struct mk_ofi_lane *lane)
{
	/* own ops + the peer's immediates; the peer's lane only */
	return mk_ofi_ep_open(conn, (size_t)conn->nops * 4, 2, lane);
}

/* Opens lanes until there are n (lane 0 first); on failure the ones open stay for destroy. */
static int ofi_lanes_add(struct mk_ofi_conn *conn, int n)
{
	struct mk_ofi_dev *d = conn->dev;
	int rc;

	while (conn->nlanes < n) {
		if (conn->sep != NULL) {
			rc = mk_ofi_sep_lane(conn, conn->nlanes);
		} else {
			rc = mk_ofi_shm_room(d); /* on shm every endpoint is a region in /dev/shm */
			if (rc)
				return rc;
			rc = ofi_lane_open(conn, &conn->lanes[conn->nlanes]);
		}
		if (rc) {
			MK_WARN("ofi: opening endpoint %d of a connection on %s failed: %s",
				conn->nlanes, d->props.name, mk_ofi.lib->strerror(-rc));
			return mk_ofi_errno(rc);
		}
		conn->nlanes++;
		conn->base.nlanes = conn->nlanes;
	}
	return 0;
}

static void ofi_conn_free(struct mk_ofi_conn *conn);

static int ofi_conn_create(int dev, int nlanes, enum mk_ofi_sep_role role, struct mk_ofi_conn **out)
{
	struct mk_ofi_dev *d = mk_ofi_dev_at(dev);
	int64_t depth = mk_param_ofi_tx_depth();
	struct mk_ofi_conn *conn;
	int rc;

	if (d == NULL)
		return -ENODEV;
	depth = depth < 8 ? 8 : depth > 65536 ? 65536 : depth;
	conn = calloc(1, sizeof(*conn) + (size_t)depth * sizeof(conn->ops[0]));
	if (conn == NULL)
		return -ENOMEM;
	conn->dev = d;
	conn->nops = (int)depth;
	conn->peer_pidfd = -1;
	rc = mk_ofi_dev_get(d);
	if (rc) {
		free(conn);
		return rc;
	}
	for (int i = 0; i < conn->nops; i++)
		conn->ops[i].conn = conn;
	conn->ctrl_op.conn = conn;
	conn->ctrl_op.kind = MK_OFI_OP_CTRL;
	if (mk_ofi_sep_wanted(d)) {
		rc = mk_ofi_sep_attach(conn, role);
		if (rc)
			goto undo_conn;
	}
	rc = ofi_lanes_add(conn, nlanes);
	if (rc)
		goto undo_conn;
	/* FI_MR_LOCAL providers need even the setup messages' buffers registered */
	if (d->mr_mode & FI_MR_LOCAL) {
		rc = mk_ofi_mr_raw(d, &conn->ctrl_tx, sizeof(conn->ctrl_tx) * 2, FI_SEND | FI_RECV,
				   &conn->ctrl_mr, &conn->ctrl_key);
		if (rc) {
			MK_WARN("ofi: registering setup buffers on %s failed: %s", d->props.name,
				mk_ofi.lib->strerror(-rc));
			rc = mk_ofi_errno(rc);
			goto undo_conn;
		}
		conn->ctrl_desc = fi_mr_desc(conn->ctrl_mr);
	}
	for (int i = conn->nops - 1; i >= 0; i--) {
		conn->ops[i].next_free = conn->free_ops;
		conn->free_ops = &conn->ops[i];
	}
	mk_ofi_shm_learn(conn);
	conn->base.ops = &mk_ofi_ops;
	conn->base.dev = dev;
	conn->len_in_data = d->len_in_data;
	conn->quiet_max = d->quiet_max;
	conn->split_min = d->split_min;
	conn->inject_max = d->inject_max;
	conn->virt_addr = (d->mr_mode & FI_MR_VIRT_ADDR) != 0;
	conn->cq_batch = (int)mk_param_ofi_cq_read_count();
	if (conn->cq_batch < 1 || conn->cq_batch > MK_OFI_CQ_BATCH_MAX)
		conn->cq_batch = MK_OFI_CQ_BATCH_MAX;
	conn->timeout_ns = (uint64_t)mk_param_timeout_ms() * 1000000ull;
	conn->idle_refuse_limit_ns = (uint64_t)mk_param_keepalive_ms() * 1000000ull;
	if (conn->timeout_ns != 0 && conn->idle_refuse_limit_ns > conn->timeout_ns)
		conn->idle_refuse_limit_ns = conn->timeout_ns;
	*out = conn;
	return 0;

undo_conn:
	ofi_conn_free(conn);
	return rc;
}

/* Wedged connections stay referenced: kept on purpose, not leaked. */
static pthread_mutex_t ofi_wedged_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mk_ofi_conn *ofi_wedged[64];
static int ofi_nwedged;

static void ofi_keep_wedged(struct mk_ofi_conn *conn)
{
	pthread_mutex_lock(&ofi_wedged_lock);
	if (ofi_nwedged < (int)MK_ARRAY_SIZE(ofi_wedged))
		ofi_wedged[ofi_nwedged++] = conn;
	pthread_mutex_unlock(&ofi_wedged_lock);
}

/* Tears down in dependency order; keeps the first error, never stops early, never waits. */
static int ofi_conn_close_all(struct mk_ofi_conn *conn)
{
	int rc = 0, r;

	mk_ofi_progress_stop(conn);
	mk_ofi_peer_unwatch(conn);
	if (conn->sep != NULL) {
		/* the endpoints are the device's; conn may outlive this call (parked) */
		mk_ofi_sep_detach(conn);
		return 0;
	}
	if (conn->wedged) {
		/*
		 * A dead peer holds a lock these objects would take to close (any lane's: the
		 * region is the peer's, whichever endpoint reaches it), and the provider may
		 * still name op contexts inside conn: all of it stays until the process exits.
		 */
		MK_INFO(MK_SUBSYS_NET, "ofi: %s: leaving a wedged connection's endpoints open",
			conn->dev->props.name);
		ofi_keep_wedged(conn);
		return 0;
	}
	for (int i = 0; i < conn->nlanes; i++) {
		r = fi_close(&conn->lanes[i].ep->fid);
		rc = rc ? rc : r;
	}
	if (conn->ctrl_mr != NULL) {
		r = fi_close(&conn->ctrl_mr->fid);
		if (r == 0)
			mk_ofi_key_put(conn->dev, conn->ctrl_key);
		rc = rc ? rc : r;
	}
	for (int i = 0; i < conn->nlanes; i++) {
		r = fi_close(&conn->lanes[i].av->fid);
		rc = rc ? rc : r;
		r = fi_close(&conn->lanes[i].cq->fid);
		rc = rc ? rc : r;
	}
	mk_ofi_dev_put(conn->dev);
	free(conn);
	return rc;
}

void mk_ofi_conn_release(struct mk_ofi_conn *conn)
{
	if (conn->ctrl_mr != NULL && fi_close(&conn->ctrl_mr->fid) == 0)
		mk_ofi_key_put(conn->dev, conn->ctrl_key);
	mk_ofi_dev_put(conn->dev);
	free(conn->q);
	free(conn);
}

/*
 * Providers report a write done once they have queued it, not once it left: net hands it to its
 * own progress thread, and a connection to the peer may not even be up yet. An endpoint closed
 * at once drops what is still queued, and a sender whose last small messages went eagerly may
 * close before its peer even asked for them. So a close within OFI_CLOSE_FLUSH_NS of the last
 * post sleeps out the rest of that time (sleeps: on a busy host the provider's thread needs
 * the CPU). It waits for nothing from the peer, and a job closing many connections pays it
 * once: the later ones find their last post old enough.
 */
#define OFI_CLOSE_FLUSH_NS 20000000ull

static void ofi_close_flush(struct mk_ofi_conn *conn)
{
	uint64_t until = conn->last_post_ns + OFI_CLOSE_FLUSH_NS, now;

	if (conn->state != MK_OFI_READY || conn->err || conn->last_post_ns == 0)
		return;
	while ((now = mk_now_ns()) < until) {
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)(until - now) };

		nanosleep(&ts, NULL);
	}
}

/* A connection that failed during creation: its WARN was already given. */
static void ofi_conn_free(struct mk_ofi_conn *conn)
{
	ofi_conn_close_all(conn);
}

static int ofi_conn_destroy(struct mk_ofi_conn *conn)
{
	int rc;

	ofi_close_flush(conn);
	rc = ofi_conn_close_all(conn);

	if (rc)
		MK_WARN("ofi: closing a connection: %s", mk_ofi.lib->strerror(-rc));
	return mk_ofi_errno(rc);
}

static int ofi_post_recv(struct mk_ofi_conn *conn)
{
	ssize_t rc;

	if (conn->sep != NULL) {
		/* the shared endpoint keeps receives posted and hands over what is ours */
		conn->rx_posted = true;
		return 0;
	}
	rc = fi_recv(conn->lanes[0].ep, &conn->ctrl_rx, sizeof(conn->ctrl_rx), conn->ctrl_desc,
		     FI_ADDR_UNSPEC, &conn->rx_ctx);

	if (rc == 0)
		conn->rx_posted = true;
	return rc == -FI_EAGAIN ? 0 : mk_ofi_errno(rc); /* retried by the next drive */
}

/* Hand ctrl_tx to the provider if it is due; -FI_EAGAIN leaves it for the next call. */
static int ofi_send_ctrl(struct mk_ofi_conn *conn)
{
	ssize_t rc;

	if (!conn->tx_due || conn->tx_posted || mk_now_ns() < conn->tx_not_before_ns)
		return 0;
	/* on a shared endpoint the completion finds its connection through the op */
	rc = fi_send(conn->lanes[0].ep, &conn->ctrl_tx, sizeof(conn->ctrl_tx), conn->ctrl_desc,
		     conn->lanes[0].peer, conn->sep != NULL ? &conn->ctrl_op.ctx : &conn->tx_ctx);
	if (rc == -FI_EAGAIN)
		return 0;
	if (rc)
		return mk_ofi_errno(rc);
	conn->tx_posted = true;
	conn->tx_due = false;
	return 0;
}

static int ofi_post_recv(struct mk_ofi_conn *conn);

void mk_ofi_ctrl_complete(struct mk_ofi_conn *conn, void *op_context, bool failed)
{
	if (op_context == &conn->tx_ctx) {
		conn->tx_posted = false;
		if (failed && conn->state == MK_OFI_CONNECTING) {
			/* the listener may not be reachable yet; connected() gives up at deadline
			 */
			conn->tx_due = true;
			conn->tx_not_before_ns = mk_now_ns() + OFI_RESEND_NS;
		} else if (failed) {
			conn->err = -ECONNABORTED; /* the connecting side went away */
		}
		return;
	}
	conn->rx_posted = false;
	conn->rx_full = !failed;
	if (conn->state == MK_OFI_READY) {
		/* setup is over: whatever arrives now was sent by someone else, dropped */
		MK_WARN_RATELIMITED("ofi: %s dropped %s message on an established connection "
				    "(not from its peer's setup)",
				    conn->dev->props.name, failed ? "an oversized or failed" : "a");
		conn->rx_full = false;
		mk_ofi_stray_rearm(conn);
	}
}

/*
 * An established connection keeps one receive posted: messages nobody expects (a stranger
 * reached the endpoint) are taken and dropped there instead of piling up in the provider's
 * queue of unexpected messages, which only grows.
 */
void mk_ofi_stray_rearm(struct mk_ofi_conn *conn)
{
	if (conn->state == MK_OFI_READY && !conn->rx_posted && !conn->wedged)
		ofi_post_recv(conn);
}

/* Checks a received setup message; false (with a WARN) means drop it and receive again. */
static bool ofi_ctrl_valid(const struct mk_ofi_conn *conn, enum mk_ofi_ctrl_kind kind)
{
	const struct mk_ofi_ctrl *m = &conn->ctrl_rx;

	if (m->magic != MK_OFI_CTRL_MAGIC || m->version != MK_OFI_WIRE_VERSION || m->kind != kind) {
		MK_WARN_RATELIMITED("ofi: %s dropped a setup message that is not ours (magic "
				    "0x%08x kind %u)",
				    conn->dev->props.name, m->magic, m->kind);
		return false;
	}
	if (m->nonce != conn->nonce) {
		MK_WARN_RATELIMITED("ofi: %s dropped a setup message with a foreign nonce (stale "
				    "handle, or a stranger)",
				    conn->dev->props.name);
		return false;
	}
	if (m->bloblen > MK_TP_BLOB_MAX || m->addrlen > MK_OFI_ADDR_MAX ||
	    (kind == MK_OFI_CTRL_CONNECT && m->addrlen == 0)) {
		MK_WARN_RATELIMITED("ofi: %s dropped a setup message with bad lengths",
				    conn->dev->props.name);
		return false;
	}
	if (m->nlanes < 1 || m->nlanes > MK_TP_MAX_LANES ||
	    (kind == MK_OFI_CTRL_REPLY && m->nlanes != conn->nlanes)) {
		MK_WARN("ofi: %s dropped a setup message for %u lanes (this side has %d)",
			conn->dev->props.name, m->nlanes, conn->nlanes);
		return false;
	}
	for (int i = 1; i < m->nlanes; i++) {
		if (m->lane_addrlen[i] == 0 || m->lane_addrlen[i] > MK_OFI_ADDR_MAX) {
			MK_WARN("ofi: %s dropped a setup message with a bad address for lane %d",
				conn->dev->props.name, i);
			return false;
		}
	}
	return true;
}

/* Reads the CQ for setup messages; any data event read meanwhile is kept for poll(). */
static int ofi_drive(struct mk_ofi_conn *conn, enum mk_ofi_ctrl_kind want)
{
	int rc = mk_ofi_cq_drain(conn, NULL, 0);

	if (rc < 0)
		return rc;
	if (conn->rx_full && !ofi_ctrl_valid(conn, want))
		conn->rx_full = false;
	if (!conn->rx_full && !conn->rx_posted) {
		rc = ofi_post_recv(conn);
		if (rc)
			return rc;
	}
	return ofi_send_ctrl(conn);
}

static void ofi_fill_ctrl(struct mk_ofi_conn *conn, enum mk_ofi_ctrl_kind kind, const void *blob,
			  size_t blob_len)
{
	struct mk_ofi_ctrl *m = &conn->ctrl_tx;

	memset(m, 0, sizeof(*m));
	m->magic = MK_OFI_CTRL_MAGIC;
	m->version = MK_OFI_WIRE_VERSION;
	m->kind = (uint8_t)kind;
	m->nonce = conn->nonce;
	m->bloblen = (uint8_t)blob_len;
	if (blob_len > 0)
		memcpy(m->blob, blob, blob_len);
	if (kind == MK_OFI_CTRL_CONNECT) {
		m->addrlen = (uint8_t)conn->lanes[0].addrlen;
		memcpy(m->addr, conn->lanes[0].addr, conn->lanes[0].addrlen);
	}
	m->nlanes = (uint8_t)conn->nlanes;
	m->num = (uint16_t)conn->num;
	for (int i = 1; i < conn->nlanes; i++) {
		m->lane_addrlen[i] = (uint8_t)conn->lanes[i].addrlen;
		memcpy(m->lane_addr[i], conn->lanes[i].addr, conn->lanes[i].addrlen);
	}
	conn->tx_due = true;
}

static int ofi_insert_peer(struct mk_ofi_conn *conn, int i, const void *addr, size_t len)
{
	struct mk_ofi_lane *lane = &conn->lanes[i];
	/* each lane's address names its own shm region: every one must still exist */
	int n;

	if (conn->sep != NULL)
		return mk_ofi_sep_av_insert(conn, i, addr, len, &lane->peer);
	n = mk_ofi_shm_peer_present(conn, addr, len);

	if (n)
		return n;
	n = fi_av_insert(lane->av, addr, 1, &lane->peer, 0, NULL);

	if (n == 1) {
		if (i == 0) /* one process behind every lane */
			mk_ofi_peer_watch(conn, addr, len);
		return 0;
	}
	MK_WARN("ofi: %s could not insert the peer address of lane %d (%d)", conn->dev->props.name,
		i, n);
	return n < 0 ? mk_ofi_errno(n) : -EINVAL;
}

/* Lanes 1.. of the peer, from its setup message (lane 0's address came by another way). */
static int ofi_insert_lanes(struct mk_ofi_conn *conn, const struct mk_ofi_ctrl *m)
{
	int rc = 0;

	for (int i = 1; i < conn->nlanes && rc == 0; i++)
		rc = ofi_insert_peer(conn, i, m->lane_addr[i], m->lane_addrlen[i]);
	if (rc == 0)
		conn->peer_inserted = true;
	return rc;
}

int mk_ofi_listen(int dev, void *handle, struct mk_listener **out)
{
	struct mk_ofi_handle h = { .prov_hash = mk_ofi.prov_hash };
	struct mk_ofi_listener *l;
	int rc;

	*out = NULL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	/* lane 0 only: the connecting side says how many lanes it wants */
	rc = ofi_conn_create(dev, 1, MK_OFI_SEP_ACCEPTS, &l->pending);
	if (rc)
		goto undo_alloc;
	l->pending->state = MK_OFI_LISTENING;
	l->pending->nonce = ofi_nonce();
	if (l->pending->sep != NULL)
		mk_ofi_sep_expect(l->pending, MK_OFI_CTRL_CONNECT);
	rc = ofi_post_recv(l->pending);
	if (rc)
		goto undo_conn;
	h.nonce = l->pending->nonce;
	h.addrlen = l->pending->lanes[0].addrlen;
	memcpy(h.addr, l->pending->lanes[0].addr, h.addrlen);
	rc = mk_ofi_handle_encode(&h, handle);
	if (rc)
		goto undo_conn;
	l->base.ops = &mk_ofi_ops;
	l->base.dev = dev;
	*out = &l->base;
	return 0;

undo_conn:
	ofi_conn_destroy(l->pending);
undo_alloc:
	free(l);
	return rc;
}

int mk_ofi_connect(int dev, const void *handle, const void *blob, size_t blob_len,
		   struct mk_conn **out)
{
	struct mk_ofi_handle h;
	struct mk_ofi_conn *conn;
	struct mk_ofi_dev *d;
	int rc;

	*out = NULL;
	if (blob_len > MK_TP_BLOB_MAX || (blob_len > 0 && blob == NULL))
		return -EINVAL;
	rc = mk_ofi_handle_decode(handle, &h);
	if (rc)
		return rc;
	d = mk_ofi_dev_at(dev);
	if (d == NULL)
		return -ENODEV;
	rc = ofi_conn_create(dev, d->lanes, MK_OFI_SEP_CONNECTS, &conn);
	if (rc)
		return rc;
	rc = ofi_insert_peer(conn, 0, h.addr, h.addrlen);
	if (rc)
		goto undo_conn;
	conn->state = MK_OFI_CONNECTING;
	conn->nonce = h.nonce;
	conn->deadline_ns = mk_now_ns() + conn->timeout_ns;
	if (conn->sep != NULL)
		mk_ofi_sep_expect(conn, MK_OFI_CTRL_REPLY);
	rc = ofi_post_recv(conn);
	if (rc)
		goto undo_conn;
	ofi_fill_ctrl(conn, MK_OFI_CTRL_CONNECT, blob, blob_len);
	rc = ofi_send_ctrl(conn);
	if (rc)
		goto undo_conn;
	*out = &conn->base;
	return 0;

undo_conn:
	ofi_conn_destroy(conn);
	return rc;
}

int mk_ofi_connected(struct mk_conn *c)
{
	struct mk_ofi_conn *conn = mk_ofi_conn_of(c);
	int rc;

	if (conn->state == MK_OFI_READY)
		return 1;
	if (conn->state != MK_OFI_CONNECTING)
		return -EINVAL;
	rc = ofi_drive(conn, MK_OFI_CTRL_REPLY);
	if (rc)
		return rc;
	if (conn->rx_full) {
		rc = ofi_insert_lanes(conn, &conn->ctrl_rx);
		if (rc)
			return rc;
		c->peer_blob_len = conn->ctrl_rx.bloblen;
		memcpy(c->peer_blob, conn->ctrl_rx.blob, c->peer_blob_len);
		conn->peer_num = conn->ctrl_rx.num;
		conn->rx_full = false;
		if (conn->sep != NULL)
			mk_ofi_sep_expect(conn, 0);
		conn->state = MK_OFI_READY;
		mk_ofi_stray_rearm(conn);
		mk_ofi_progress_start(conn);
		return 1;
	}
	if (mk_now_ns() > conn->deadline_ns) {
		MK_WARN("ofi: %s: no answer from the listener within MKERNEL_TIMEOUT=%lld ms "
			"(stale handle or dead peer)",
			conn->dev->props.name, (long long)mk_param_timeout_ms());
		return -ETIMEDOUT;
	}
	return 0;
}

int mk_ofi_accept(struct mk_listener *lst, const void *blob, size_t blob_len, struct mk_conn **out)
{
	struct mk_ofi_listener *l = mk_ofi_listener_of(lst);
	struct mk_ofi_conn *conn = l->pending;
	int rc;

	*out = NULL;
	if (conn == NULL)
		return -EINVAL; /* a listener accepts exactly one connection */
	if (blob_len > MK_TP_BLOB_MAX || (blob_len > 0 && blob == NULL))
		return -EINVAL;
	if (!conn->peer_inserted) {
		rc = ofi_drive(conn, MK_OFI_CTRL_CONNECT);
		if (rc || !conn->rx_full)
			return rc;
		rc = ofi_lanes_add(conn, conn->ctrl_rx.nlanes);
		if (rc)
			return rc;
		rc = ofi_insert_peer(conn, 0, conn->ctrl_rx.addr, conn->ctrl_rx.addrlen);
		if (rc)
			return rc;
		rc = ofi_insert_lanes(conn, &conn->ctrl_rx);
		if (rc)
			return rc;
		conn->base.peer_blob_len = conn->ctrl_rx.bloblen;
		memcpy(conn->base.peer_blob, conn->ctrl_rx.blob, conn->base.peer_blob_len);
		conn->peer_num = conn->ctrl_rx.num;
		conn->rx_full = false;
		if (conn->sep != NULL)
			mk_ofi_sep_expect(conn, 0); /* a listener accepts one connection */
		ofi_fill_ctrl(conn, MK_OFI_CTRL_REPLY, blob, blob_len);
	}
	rc = ofi_send_ctrl(conn);
	if (rc == 0 && conn->tx_posted)
		rc = mk_ofi_cq_drain(conn, NULL, 0);
	if (rc < 0)
		return rc;
	/*
	 * Hand the connection out only once the reply has left: a manual-progress provider moves
	 * it only while this endpoint is polled, and the caller may not poll the new connection
	 * before the connecting side's MKERNEL_TIMEOUT runs out.
	 */
	if (conn->tx_due || conn->tx_posted)
		return 0;
	conn->state = MK_OFI_READY;
	mk_ofi_stray_rearm(conn);
	mk_ofi_progress_start(conn);
	l->pending = NULL;
	*out = &conn->base;
	return 0;
}

int mk_ofi_close_listen(struct mk_listener *lst)
{
	struct mk_ofi_listener *l = mk_ofi_listener_of(lst);
	int rc = 0;

	if (l->pending != NULL)
		rc = ofi_conn_destroy(l->pending);
	free(l);
	return rc;
}

int mk_ofi_close(struct mk_conn *c)
{
	return ofi_conn_destroy(mk_ofi_conn_of(c));
}
