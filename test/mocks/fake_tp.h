/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An in-process transport backend for unit tests: both ends of a connection live in one
 * process, writes are memcpy into the target VA after the remote key is checked against the
 * registrations, immediates and completions are queued per connection. Faults can be injected.
 * Two physical devices ("fake:0", "fake:1") that make_vdev can fuse; a fused device's
 * registrations carry a second key word (key2) that writes must present.
 */
#ifndef MK_TEST_FAKE_TP_H
#define MK_TEST_FAKE_TP_H

#include "mk/transport.h"

extern const struct mk_transport_ops fake_tp_ops;

struct fake_tp_faults {
	int fail_next_write; /* returned once by the next write (e.g. -EIO) */
	int eagain_writes;   /* the next N writes return -EAGAIN */
	int nlanes;	     /* lanes of new connections (default 1) */
	int blackhole;	     /* writes are accepted but never complete nor land */
	int fail_reg;	     /* reg_mr returns this */
	int max_inflight;    /* per-connection queue depth before -EAGAIN (default 256) */
	int needs_poll;	     /* report rma_lands_unpolled = 0, like tcp or shm */
	/*
	 * Manual progress as tcp and shm have it: the writer's completion comes at once (the
	 * bytes are taken at post, as a provider buffers them), but the bytes land and the
	 * immediate shows only when the target polls.
	 */
	int land_on_poll;
	int reorder;  /* with land_on_poll: what waits lands newest first, as over several lanes */
	int ptr_cuda; /* devices also register GPU memory (ptr_support has MK_PTR_CUDA) */
	int poll_reads_clock; /* poll() reads the clock once and leaves it in polled_ns, as ofi */
	unsigned eager_bytes; /* the devices' preferred eager size (props.eager_bytes), 0: none */
	unsigned cts_batch;   /* the devices' held-CTS batch (props.cts_batch), 0: none */
	unsigned stripe_min;  /* the devices' striping threshold (props.stripe_min), 0: none */
	int cq_read_rearms;   /* props.cq_read_rearms, as the socket providers report */
};

extern struct fake_tp_faults fake_tp_faults;

/* Reset all state between tests (leaks nothing the tests made). */
void fake_tp_reset(void);
/* The peer of c dies: its writes stop, writes towards it complete with -ECONNRESET. */
void fake_tp_kill_peer(struct mk_conn *c);
int fake_tp_live_regs(void);
int fake_tp_writes(void);
/*
 * Writes on lanes other than 0 that reached a peer whose consumer did not say it reads them
 * (mk_conn.lanes_wanted 0): a socket provider would leave them unread for a while.
 */
int fake_tp_unread_lane_writes(void);

#endif
