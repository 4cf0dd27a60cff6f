/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to transport/core/rdv_*.c: the state of one rendezvous connection, shared by both
 * sides (rdv_conn.c). Setup (rdv_setup.c) makes it from the peer's blob; the send and receive
 * sides (rdv_send.c, rdv_recv.c) report failures and liveness into it. It knows nothing of
 * either side's requests, so nothing here calls back into them.
 */
#ifndef MK_RDV_CONN_H
#define MK_RDV_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mk/mr_cache.h"
#include "mk/transport.h"

#define MK_RDV_BLOB_VERSION 3
#define MK_RDV_HANDLE_TAG   0x4d4b5256u /* 'MKRV': our listen handles' trailer and blobs */

/*
 * What each side hands the other at connection setup: where to write liveness probes; from the
 * sender, where the receiver writes clear-to-send entries and eager credits; from the receiver,
 * the eager bounce slots it offers.
 */
struct mk_rdv_blob {
	uint32_t magic;
	uint32_t version;
	uint64_t ring_addr;	/* sender's CTS ring; 0 in the receiver's blob */
	uint64_t probe_addr;	/* where the peer writes its liveness probes */
	struct mk_rkey rkey;	/* covers everything named here */
	uint64_t eager_addr;	/* sender: its credit word; receiver: its bounce slots */
	uint64_t frontier_addr; /* receiver: the word the sender writes its frontier to */
	uint32_t eager_slots;	/* receiver: bounce slots offered (0: no eager); sender: 0 */
	uint32_t eager_bytes;	/* receiver: payload bytes per slot */
};

_Static_assert(sizeof(struct mk_rdv_blob) <= MK_TP_BLOB_MAX, "blob fits");

/* One registered scratch region per comm: the CTS ring (send) or CTS staging (recv) + probes. */
struct mk_rdv_region {
	void *base;
	size_t len;
	struct mk_mr *mr;
};

/*
 * The last 128 bytes of a connection's region: the slot the peer's probes land in, then the
 * 8 bytes our own probes are written from.
 */
static inline uint64_t mk_rdv_probe_slot(const struct mk_rdv_region *r)
{
	return (uint64_t)(uintptr_t)r->base + r->len - 128;
}

static inline void *mk_rdv_probe_src(const struct mk_rdv_region *r)
{
	return (char *)r->base + r->len - 64;
}

/* Striped above this where neither MKERNEL_STRIPE_MIN nor the device says (dev_props) */
#define MK_RDV_STRIPE_MIN_DEFAULT 131072

struct mk_rdv_conn_state {
	struct mk_conn *conn;
	struct mk_rdv_region region;
	uint64_t peer_probe;	  /* peer's probe slot VA */
	struct mk_rkey peer_rkey; /* peer's region key */
	int error;		  /* sticky: first failure of the connection */
	uint64_t last_event_ms;	  /* last sign of life from the peer */
	uint64_t probe_posted_ms; /* 0 = no probe in flight */
	uint64_t probes;	  /* probes posted (tests read it) */
	/*
	 * CQ reads shared between the tests of one connection's requests: every read of the
	 * connection's completions bumps polls (an epoch each request remembers at its last
	 * test) and stamps its time (mk_rdv_polled); a test answered by another request's read
	 * counts in polls_shared (tests read it).
	 */
	uint32_t polls;
	uint64_t last_poll_ns;
	uint64_t share_ns; /* MKERNEL_POLL_SHARE_NS, read once at setup */
	uint64_t polls_shared;
	/*
	 * The latest clock reading of a call on this connection: a read's stamp (mk_rdv_polled)
	 * or a test's check for a shared read. The liveness check after them takes it rather than
	 * reading the clock again: a test of an unfinished request read it two to three times,
	 * and on small messages the clock was the sender's largest user-space cost.
	 */
	uint64_t now_ns;
	uint32_t quiet_reads; /* reads that heard nothing since the clock was last read */
	size_t stripe_min; /* messages above it are striped (MKERNEL_STRIPE_MIN or the device's) */
};

/* A scratch region of len bytes (rounded to pages) registered on (ops, dev). 0 or -errno. */
int mk_rdv_region_init(const struct mk_transport_ops *ops, int dev, struct mk_rdv_region *r,
		       size_t len);
void mk_rdv_region_fini(struct mk_rdv_region *r);

/*
 * The blob this side sends: its probe slot and region key; the side fills in its CTS ring and
 * eager fields.
 */
struct mk_rdv_blob mk_rdv_conn_blob(const struct mk_rdv_conn_state *cs);

/*
 * The connection is up: take the peer's blob (where to probe it) and copy it to *peer for the
 * side's own fields. 0, or -EPROTO for a malformed blob.
 */
int mk_rdv_conn_finish(struct mk_rdv_conn_state *cs, struct mk_conn *conn,
		       struct mk_rdv_blob *peer);

/* Latch the connection's first failure (sticky) with a WARN saying what failed. */
void mk_rdv_fail(struct mk_rdv_conn_state *cs, int rc, const char *what);

/*
 * Milliseconds from then to now, 0 when then is later: now may be an older reading than a
 * sign of life stamped from a fresh one (a read's stamp lags the events it delivered).
 */
static inline uint64_t mk_rdv_ms_since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/*
 * Liveness, called by a side that waits on the peer (busy: it has work outstanding): probes a
 * quiet peer and turns a probe unanswered for MKERNEL_TIMEOUT into -ETIMEDOUT. Its time is
 * cs->now_ns: call it only after a CQ read of the same call, or after mk_rdv_test_must_poll
 * found a shared one.
 */
void mk_rdv_keepalive(struct mk_rdv_conn_state *cs, bool busy);

/* A probe's completion (the event whose ctx is cs) arrived with status. */
void mk_rdv_probe_done(struct mk_rdv_conn_state *cs, int status);

/*
 * May a test() of an unfinished request skip the CQ read? Only when some other read of the
 * connection happened since this request's last test (its epoch seen differs from polls), so
 * two tests of one request always have a read between them and a caller that tests one
 * request in a loop still drives progress; and only while that read is younger than share_ns,
 * so a completion is never reported later than share_ns after it could have been read.
 * share_ns 0: every test reads.
 */
static inline bool mk_rdv_poll_shared(uint32_t seen, uint32_t polls, uint64_t now_ns,
				      uint64_t last_ns, uint64_t share_ns)
{
	return seen != polls && share_ns != 0 && now_ns - last_ns < share_ns;
}

/*
 * The test of an unfinished request whose last look was at epoch *seen: true when it must read
 * the CQ (then call mk_rdv_polled after the read and take *seen = cs->polls); false when a
 * fresh read of another request answers it (counted, *seen updated).
 */
bool mk_rdv_test_must_poll(struct mk_rdv_conn_state *cs, uint32_t *seen);
/* Before a read of the connection's CQ: no backend reading yet (see mk_rdv_polled). */
static inline void mk_rdv_polling(struct mk_rdv_conn_state *cs)
{
	cs->conn->polled_ns = 0;
}

/*
 * A read of the connection's CQ (begun by mk_rdv_polling) just ended: a new epoch; heard: it
 * brought the peer's sign of life (last_event_ms). One clock reading serves both, not one per
 * event: the backend's from its poll when it took one (conn->polled_ns), else ours. The
 * backend's is from before the read, microseconds older than ours would be: a shared read
 * then only ages sooner (a test reads the CQ no later than before), and against the
 * millisecond limits of MKERNEL_KEEPALIVE and MKERNEL_TIMEOUT the difference does not count.
 */
void mk_rdv_polled(struct mk_rdv_conn_state *cs, bool heard);

#endif /* MK_RDV_CONN_H */
