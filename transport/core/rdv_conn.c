// SPDX-License-Identifier: Apache-2.0
/*
 * Rendezvous messaging, connection state shared by both sides: the registered scratch region,
 * the blobs exchanged at setup, the sticky first failure and the liveness probe. Called by
 * rdv_setup.c, rdv_send.c and rdv_recv.c; calls none of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mk/clock.h"
#include "mk/compiler.h"
#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "rdv_conn.h"

int mk_rdv_region_init(const struct mk_transport_ops *ops, int dev, struct mk_rdv_region *r,
		       size_t len)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	int rc;

	len = MK_ALIGN_UP(len, (size_t)4096);
	r->base = NULL;
	rc = posix_memalign(&r->base, 4096, len);
	if (rc)
		return -rc;
	memset(r->base, 0, len);
	r->len = len;
	rc = mk_mr_get(ops, dev, r->base, len, &attr, &r->mr);
	if (rc)
		goto undo_alloc;
	return 0;

undo_alloc:
	free(r->base);
	r->base = NULL;
	return rc;
}

void mk_rdv_region_fini(struct mk_rdv_region *r)
{
	if (r->mr != NULL)
		mk_mr_put(r->mr);
	free(r->base);
	r->mr = NULL;
	r->base = NULL;
}

void mk_rdv_fail(struct mk_rdv_conn_state *cs, int rc, const char *what)
{
	if (cs->error != 0)
		return;
	cs->error = rc;
	MK_WARN("connection to peer failed (%s): %s", what, mk_strerror(rc));
}

/*
 * Liveness: a connection with work outstanding and nothing heard for MKERNEL_KEEPALIVE ms
 * writes 8 bytes into the peer's probe slot. A live peer's transport completes it; a dead one
 * fails it or leaves it hanging, which becomes -ETIMEDOUT after MKERNEL_TIMEOUT.
 */
void mk_rdv_keepalive(struct mk_rdv_conn_state *cs, bool busy)
{
	uint64_t now;
	int rc;

	if (cs->error != 0 || !busy)
		return;
	now = cs->now_ns / 1000000u;
	if (cs->probe_posted_ms != 0) {
		if (mk_rdv_ms_since(now, cs->probe_posted_ms) > (uint64_t)mk_param_timeout_ms())
			mk_rdv_fail(cs, -ETIMEDOUT, "no answer within MKERNEL_TIMEOUT");
		return;
	}
	if (mk_rdv_ms_since(now, cs->last_event_ms) < (uint64_t)mk_param_keepalive_ms())
		return;
	rc = cs->conn->ops->write(cs->conn, 0, mk_rdv_probe_src(&cs->region), 8, cs->region.mr->bmr,
				  cs->peer_probe, &cs->peer_rkey, false, 0, cs);
	if (rc == -EAGAIN) {
		/* a transport refusing every post for that long is as dead as a silent peer */
		if (mk_rdv_ms_since(now, cs->last_event_ms) > (uint64_t)mk_param_timeout_ms())
			mk_rdv_fail(cs, -ETIMEDOUT,
				    "transport refused every post for MKERNEL_TIMEOUT");
		return;
	}
	if (rc) {
		mk_rdv_fail(cs, rc, "liveness probe");
		return;
	}
	cs->probe_posted_ms = now;
	cs->probes++;
}

void mk_rdv_probe_done(struct mk_rdv_conn_state *cs, int status)
{
	cs->probe_posted_ms = 0;
	if (status)
		mk_rdv_fail(cs, status, "liveness probe");
	else
		cs->last_event_ms = mk_now_ms();
}

bool mk_rdv_test_must_poll(struct mk_rdv_conn_state *cs, uint32_t *seen)
{
	/* the clock only when the epoch allows a skip: one request tested in a loop reads none */
	if (*seen == cs->polls || cs->share_ns == 0)
		return true;
	cs->now_ns = mk_now_ns();
	if (!mk_rdv_poll_shared(*seen, cs->polls, cs->now_ns, cs->last_poll_ns, cs->share_ns))
		return true;
	*seen = cs->polls;
	cs->polls_shared++;
	return false;
}

/*
 * Behind a backend that does not stamp its reads, a read that heard nothing takes no clock
 * reading of its own, only every MK_RDV_QUIET_CLOCK_EVERY-th: a caller waiting on a message
 * spins on reads, and where the clock is a system call (a guest whose clocksource has no vDSO
 * path: HPET under qemu) those readings took a third of a soft-RoCE ping-pong's CPU samples
 * (14 clock calls a round trip, 7 after). What a stale stamp does is safe: it is older, so a
 * read counts as shared for less time and waits end a few reads later.
 */
#define MK_RDV_QUIET_CLOCK_EVERY 16

void mk_rdv_polled(struct mk_rdv_conn_state *cs, bool heard)
{
	uint64_t now = cs->conn->polled_ns;

	cs->polls++;
	if (now == 0) {
		if (!heard && ++cs->quiet_reads < MK_RDV_QUIET_CLOCK_EVERY)
			return;
		cs->quiet_reads = 0;
		now = mk_now_ns();
	}
	cs->last_poll_ns = now;
	cs->now_ns = now;
	if (heard)
		cs->last_event_ms = now / 1000000u;
}

struct mk_rdv_blob mk_rdv_conn_blob(const struct mk_rdv_conn_state *cs)
{
	return (struct mk_rdv_blob){
		.magic = MK_RDV_HANDLE_TAG,
		.version = MK_RDV_BLOB_VERSION,
		.probe_addr = mk_rdv_probe_slot(&cs->region),
		.rkey = cs->region.mr->rkey,
	};
}

/* MKERNEL_STRIPE_MIN, or where unset (-1) the device's choice, else the core's default. */
static size_t rdv_stripe_min(struct mk_conn *conn)
{
	int64_t v = mk_param_stripe_min();
	struct mk_dev_props props;

	if (v < 0)
		v = conn->ops->dev_props(conn->dev, &props) == 0 && props.stripe_min != 0
			    ? props.stripe_min
			    : MK_RDV_STRIPE_MIN_DEFAULT;
	return (size_t)v;
}

int mk_rdv_conn_finish(struct mk_rdv_conn_state *cs, struct mk_conn *conn, struct mk_rdv_blob *peer)
{
	int64_t share = mk_param_poll_share_ns();

	cs->conn = conn;
	cs->last_event_ms = mk_now_ms();
	cs->polls = 0;
	cs->last_poll_ns = 0;
	cs->now_ns = mk_now_ns();
	cs->polls_shared = 0;
	cs->share_ns = share > 0 ? (uint64_t)share : 0;
	cs->stripe_min = rdv_stripe_min(conn);
	if (conn->peer_blob_len < sizeof(*peer))
		return -EPROTO;
	memcpy(peer, conn->peer_blob, sizeof(*peer));
	if (peer->magic != MK_RDV_HANDLE_TAG || peer->version != MK_RDV_BLOB_VERSION)
		return -EPROTO;
	cs->peer_probe = peer->probe_addr;
	cs->peer_rkey = peer->rkey;
	conn->user = cs;
	return 0;
}
