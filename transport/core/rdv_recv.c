// SPDX-License-Identifier: Apache-2.0
/*
 * Rendezvous messaging, receive side: irecv writes one clear-to-send entry per sub-receive
 * into the sender's ring; data arrives as writes with immediates that name the group
 * (sequence), the sub-receive and the segment count, and carry the written length, or as
 * eager messages in our bounce slots, which rdv_eager_recv.c matches and copies out.
 */
#include <errno.h>
#include <string.h>

#include "mk/compiler.h"
#include "mk/core_params.h"
#include "mk/log.h"
#include "rdv_internal.h"

#define RECV_POLL_BATCH 16

/* Every sub-receive has its data (by rendezvous or eager). */
static bool recv_data_in(const struct mk_rdv_req *req)
{
	for (int i = 0; i < req->n; i++)
		if (req->segs_total[i] == 0 || req->segs_seen[i] != req->segs_total[i])
			return false;
	return true;
}

/* Eager messages took every sub-receive of the request. */
static bool recv_eager_filled(const struct mk_rdv_req *req)
{
	return req->etaken == mk_rdv_subs_all((unsigned)req->n);
}

/*
 * A striped receive's data is all in: the lanes other than 0 need no reads for it any more. A
 * request whose data never comes (the connection failed) keeps them read: harmless.
 */
static void recv_wide_check(struct mk_rdv_recv *r, struct mk_rdv_req *req)
{
	if (req->wide && recv_data_in(req)) {
		req->wide = false;
		r->cs.conn->lanes_wanted--;
	}
}

/* Nothing of the request is in flight: its slot and CTS staging entries may be reused. */
static bool recv_complete(const struct mk_rdv_req *req)
{
	return req->cts_done && recv_data_in(req);
}

/*
 * An immediate arrived. One that names no posted receive (or a sub-receive an eager message
 * already took, or an eager slot outside the sender's credits) was not sent by our peer for
 * this connection (a stranger's write reached the endpoint): dropped with a WARN, and it fails
 * nothing, not even as a sign of life. Returns whether it was our peer's.
 */
static bool recv_imm(struct mk_rdv_recv *r, const struct mk_event *ev)
{
	uint32_t seq10 = mk_rdv_imm_seq(ev->imm);
	struct mk_rdv_req *req = &r->reqs[seq10 % MK_RDV_CTS_GROUPS];
	unsigned idx = mk_rdv_imm_idx(ev->imm);

	if (ev->imm & MK_RDV_IMM_EAGER) {
		if (!ev->status)
			return mk_rdv_eager_arrived(r, ev->imm);
		mk_rdv_fail(&r->cs, ev->status, "incoming eager message");
		return true;
	}
	if (req->state == MK_RDV_REQ_FREE || (req->seq & MK_RDV_IMM_SEQ_MASK) != seq10 ||
	    idx >= (unsigned)req->n || (req->etaken & (1u << idx))) {
		MK_WARN_RATELIMITED("receive: dropped an immediate 0x%08x that names no posted "
				    "receive (seq %u, index %u)",
				    ev->imm, seq10, idx);
		return false;
	}
	if (ev->status) {
		req->status = ev->status;
		mk_rdv_fail(&r->cs, ev->status, "incoming data");
		return true;
	}
	req->got[idx] += ev->len;
	req->segs_total[idx] = (uint8_t)mk_rdv_imm_nseg(ev->imm);
	req->segs_seen[idx]++;
	/* the sender had processed this group's CTS before it wrote */
	if ((int32_t)(req->seq + 1 - r->frontier) > 0)
		r->frontier = req->seq + 1;
	if (mk_rdv_imm_trunc(ev->imm) && req->status == 0) {
		req->status = -EMSGSIZE;
		MK_WARN("receive: the peer's send is larger than the %d-buffer receive posted "
			"(sequence %u, index %u)",
			req->n, req->seq, idx);
	}
	recv_wide_check(r, req);
	if (req->state == MK_RDV_REQ_LINGER && recv_complete(req))
		req->state = MK_RDV_REQ_FREE; /* reported done earlier; its data is now in */
	return true;
}

/* One event; true when it is the peer's sign of life (recv_poll stamps the time once). */
static bool recv_event(struct mk_rdv_recv *r, const struct mk_event *ev)
{
	struct mk_rdv_req *req = ev->ctx;

	if (ev->type == MK_EV_IMM)
		return recv_imm(r, ev);
	if (ev->ctx == &r->cs) {
		mk_rdv_probe_done(&r->cs, ev->status);
		return true;
	}
	if (mk_rdv_eager_rx_event(r, ev))
		return true;
	if (req == NULL || req->comm != &r->head) {
		if (ev->status)
			mk_rdv_fail(&r->cs, ev->status, "transport error");
		return true;
	}
	if (ev->type == MK_EV_READ_DONE) {
		if (ev->status) {
			if (req->status == 0)
				req->status = ev->status;
			mk_rdv_fail(&r->cs, ev->status, "flush read");
		}
		req->flushed = true;
		return true;
	}
	/*
	 * A failed CTS write fails its receives only if data is still due: a sender that sent
	 * eagerly and closed has left the whole message here already.
	 */
	if (ev->status)
		mk_rdv_fail(&r->cs, ev->status, "clear-to-send write");
	if (req->kind != MK_RDV_REQ_RECV) {
		req->cts_done = true;
		return true;
	}
	/* one write carried the CTS of groups cts_first .. seq (recv_post_cts) */
	for (uint32_t g = req->cts_first; (int32_t)(req->seq - g) >= 0; g++) {
		struct mk_rdv_req *q = &r->reqs[g % MK_RDV_CTS_GROUPS];

		if (ev->status)
			q->cts_status = ev->status;
		q->cts_done = true;
		if (q->state == MK_RDV_REQ_LINGER && recv_complete(q))
			q->state = MK_RDV_REQ_FREE;
	}
	return true;
}

/*
 * Whether a group needs its CTS for its data at `now`: eager messages did not fill it at its
 * post and it expects none, or it expected one that has not come within MKERNEL_EAGER_CTS_WAIT. A
 * group they filled needs it only so the sender can move past it, which can wait for a later
 * group's write.
 */
static bool recv_cts_wanted(const struct mk_rdv_req *req, uint64_t now)
{
	if (!req->cts_lazy)
		return true;
	return req->cts_wait_until != 0 && !recv_eager_filled(req) && now >= req->cts_wait_until;
}

/*
 * Whether the CTS of the groups not written yet should go now: one of them wants it, or enough
 * wait that the sender should move past them (its frontier holds our ring; its pending eager
 * messages wait for groups to match in). Every test asks, and up to a batch of groups wait:
 * the scan, a cache line per group, showed in profiles of a ping-pong, so it runs only once the
 * earliest unfilled group's wait can be over (cts_scan_ns). Fills only make groups want less,
 * and a post lowers the bound to its own wait, so the bound stays below every due time.
 */
static bool recv_cts_due(struct mk_rdv_recv *r)
{
	uint64_t next = UINT64_MAX;

	if (r->next_seq - r->cts_next >= r->cts_batch)
		return true;
	if (r->cs.now_ns < r->cts_scan_ns)
		return false;
	for (uint32_t g = r->cts_next; g != r->next_seq; g++) {
		const struct mk_rdv_req *req = &r->reqs[g % MK_RDV_CTS_GROUPS];

		if (recv_cts_wanted(req, r->cs.now_ns))
			return true;
		if (req->cts_wait_until != 0 && !recv_eager_filled(req) &&
		    req->cts_wait_until < next)
			next = req->cts_wait_until;
	}
	r->cts_scan_ns = next;
	return false;
}

/*
 * Hand the transport the CTS entries of posted groups, in order, as far as it takes them. A
 * receive counts as posted before its CTS is out: eager messages already here can fill it, and
 * a transport refusing writes to a peer that left (net does so for good) cannot hold them back.
 * Draining, no CTS is written at all.
 *
 * A group that eager messages filled at its post waits (recv_cts_due): its CTS rides with the
 * next group that needs one, or goes once cts_batch such groups wait. Each write carries a
 * run of groups contiguous both in our staging and in the sender's ring, so a stream of small
 * messages costs about one eager write each and a CTS write per batch, not one per receive: on
 * the socket providers every write is system calls at each end.
 */
static void recv_post_cts(struct mk_rdv_recv *r)
{
	struct mk_conn *c = r->cs.conn;

	while (r->cts_next != r->next_seq) {
		uint32_t first = r->cts_next, end = first + 1;
		struct mk_rdv_req *last;
		struct mk_rdv_cts *cts = mk_rdv_staging(r, first);
		uint64_t dst = r->peer_ring + (uint64_t)((first - 1) % MK_RDV_CTS_GROUPS) *
						      MK_RDV_MAX_RECVS * sizeof(*cts);
		int rc = r->cs.error;

		if (rc == 0 && !recv_cts_due(r))
			return;
		/* both rings wrap before group 1 mod their depth (mk_rdv_staging) */
		while (end != r->next_seq && end - first < r->cts_batch &&
		       end % MK_RDV_CTS_GROUPS != 1)
			end++;
		last = &r->reqs[(end - 1) % MK_RDV_CTS_GROUPS];
		if (rc == 0) {
			size_t len =
				((size_t)(end - 1 - first) * MK_RDV_MAX_RECVS + (size_t)last->n) *
				sizeof(*cts);

			for (uint32_t g = first; g != end; g++) {
				struct mk_rdv_cts *e = mk_rdv_staging(r, g);
				int n = r->reqs[g % MK_RDV_CTS_GROUPS].n;

				for (int i = 0; i < n; i++)
					e[i].credits = r->eager.next; /* as fresh as they can be */
				/* the write covers the unused entries too: no group of theirs is
				 * due */
				for (int i = n; g + 1 != end && i < MK_RDV_MAX_RECVS; i++)
					e[i].seq = g - MK_RDV_CTS_GROUPS;
			}
			last->cts_first = first;
			rc = c->ops->write(c, 0, cts, len, r->cs.region.mr->bmr, dst,
					   &r->cs.peer_rkey, false, 0, last);
			if (rc == -EAGAIN)
				return;
			if (rc)
				mk_rdv_fail(&r->cs, rc, "clear-to-send write");
			else
				r->eager.credited = r->eager.next;
		}
		for (uint32_t g = first; rc && g != end; g++) {
			struct mk_rdv_req *req = &r->reqs[g % MK_RDV_CTS_GROUPS];

			req->cts_done =
				true; /* nothing in flight: a receive filled eagerly may end */
			req->cts_status = rc;
		}
		r->cts_next = end;
	}
}

/* Take in every completion and immediate the transport has for us. */
static void recv_poll(struct mk_rdv_recv *r)
{
	struct mk_event ev[RECV_POLL_BATCH];
	bool heard = false;
	int n;

	mk_rdv_polling(&r->cs);
	do {
		n = r->cs.conn->ops->poll(r->cs.conn, ev, RECV_POLL_BATCH);
		if (n < 0) {
			mk_rdv_fail(&r->cs, n, "poll");
			break;
		}
		for (int i = 0; i < n; i++)
			heard |= recv_event(r, &ev[i]);
	} while (n == RECV_POLL_BATCH);
	mk_rdv_polled(&r->cs, heard);
}

int mk_rdv_recv_progress(struct mk_rdv_recv *r)
{
	recv_poll(r);
	/* eager messages first: a receive they fill needs no CTS of its own */
	mk_rdv_eager_deliver(r);
	recv_post_cts(r);
	return r->cs.error;
}

/*
 * The connection failed, but the peer may have left data behind: it sends small messages
 * eagerly and may close before we even post their receives (its sends completed long ago), and
 * what it wrote before keeps landing for a while after our writes to it fail. So receives go on
 * as long as eager messages wait in our slots, or something arrived in the last
 * MKERNEL_KEEPALIVE ms; a receive still empty after that gets the error. Our own protocol's
 * errors end everything at once.
 */
static bool recv_draining(const struct mk_rdv_recv *r)
{
	int e = r->cs.error;

	if (e == 0 || e == -EPROTO || e == -EMSGSIZE)
		return false;
	if (r->eager.slots != NULL && r->eager.arrived[r->eager.next % MK_RDV_EAGER_SLOTS])
		return true;
	return mk_now_ms() - r->cs.last_event_ms < (uint64_t)mk_param_keepalive_ms();
}

/*
 * Room for group seq: its request slot free, fewer than NCCL's 32 receives outstanding, and,
 * with eager on, the sender past the group the ring slot last held (a group can complete by
 * eager messages before the sender read its CTS; the ring must not overrun it).
 */
static bool recv_room(struct mk_rdv_recv *r, uint32_t seq)
{
	if (r->eager.slots != NULL)
		mk_rdv_eager_read_frontier(r);
	/* draining, no CTS goes out: no ring to overrun */
	return r->reqs[seq % MK_RDV_CTS_GROUPS].state == MK_RDV_REQ_FREE &&
	       r->outstanding < MK_RDV_MAX_REQUESTS &&
	       (r->eager.slots == NULL || r->cs.error != 0 ||
		(int32_t)(seq - r->frontier) < MK_RDV_CTS_GROUPS);
}

/*
 * A receive the sender will fill with eager messages: every sub-receive fits a bounce slot (a
 * receiver with bounce slots registers host memory only: rdv_setup.c) and it is not an optional
 * receive (those end once their CTS is out). Its CTS is not needed for its data, and in a
 * ping-pong of small messages it crosses every message on the wire. With MKERNEL_EAGER_CTS_WAIT
 * (on by default) it waits that long for the message (rdv_eager.h), then goes: the sender may
 * send by rendezvous after all (out of credits, a smaller MKERNEL_EAGER_BYTES of its own). So a
 * send larger than its receive or a tag no sub-receive has is found at the receiver and
 * reported to the sender at its next call; with the wait at 0 the CTS lets this send refuse it.
 */
static bool recv_expects_eager(const struct mk_rdv_req *req, bool small)
{
	return small && !req->optional;
}

int mk_rdv_irecv(struct mk_rdv_comm *comm, int n, void **data, const size_t *sizes, const int *tags,
		 struct mk_mr **mrs, bool optional, struct mk_rdv_req **out)
{
	struct mk_rdv_recv *r = container_of(comm, struct mk_rdv_recv, head);
	uint32_t seq = r->next_seq;
	struct mk_rdv_req *req = &r->reqs[seq % MK_RDV_CTS_GROUPS];
	struct mk_rdv_cts *cts = mk_rdv_staging(r, seq);
	struct mk_conn *c = r->cs.conn;
	int rc;

	*out = NULL;
	if (r->cs.error && !recv_draining(r))
		return r->cs.error;
	/* as in isend: poll only when there is no room yet; test() polls anyway */
	if (!recv_room(r, seq)) {
		rc = mk_rdv_recv_progress(r);
		if (rc && !recv_draining(r))
			return rc;
		if (!recv_room(r, seq))
			return 0;
	}
	req->wide = false;
	for (int i = 0; i < n; i++) {
		/* what the sender stripes over the lanes (send_nseg), and only that */
		bool wide = c->nlanes > 1 && sizes[i] > r->cs.stripe_min;

		req->wide |= wide;
		cts[i] = (struct mk_rdv_cts){
			.addr = (uint64_t)(uintptr_t)data[i],
			.size = sizes[i],
			.rkey_base = mrs[i] != NULL ? mrs[i]->rkey.base : 0,
			.rkey_key = mrs[i] != NULL ? mrs[i]->rkey.key : 0,
			.rkey_key2 = mrs[i] != NULL ? mrs[i]->rkey.key2 : 0,
			.tag = tags != NULL ? tags[i] : 0,
			.nsub = (uint16_t)n,
			.idx = (uint16_t)i,
			.flags = wide ? MK_RDV_CTS_WIDE : 0,
			.seq = seq,
		};
	}
	c->lanes_wanted += req->wide; /* before its CTS can reach the sender */
	memset(req->got, 0, sizeof(req->got));
	memset(req->segs_seen, 0, sizeof(req->segs_seen));
	memset(req->segs_total, 0, sizeof(req->segs_total));
	req->etaken = 0;
	req->state = MK_RDV_REQ_POSTED;
	req->status = 0;
	req->polls_seen = r->cs.polls;
	req->seq = seq;
	req->n = n;
	req->optional = optional && r->early_ok;
	req->cts_posted = true;
	req->cts_done = false;
	req->cts_status = 0;
	req->cts_first = seq;
	req->cts_lazy = false;
	req->cts_wait_until = 0;
	r->next_seq++;
	r->outstanding++;
	/*
	 * Eager messages that arrived before this receive fill it now; if they fill all of it, its
	 * CTS can wait for a later group's write (recv_post_cts). A receive small enough for them
	 * reads the CQ for what landed (manual progress: only a poll lands them): the read is
	 * cheaper than the CTS write it may save. But one read brings every message that landed,
	 * and on shm each read takes the region lock the sender's writes need, so while other
	 * receives are outstanding, one that messages an earlier read took in fill reads nothing.
	 * A lone receive still reads: its test, finding it done, reads nothing either, and without
	 * that read one message at a time ran up to 10 % slower over shm. Where a read costs the
	 * next completion a wakeup (props.cq_read_rearms: the socket providers) none reads: the
	 * CTS waits for the message anyway, and the read would sit between a message and the
	 * reply the caller sends on it.
	 */
	if (r->eager.slots != NULL) {
		bool small = true;

		mk_rdv_eager_deliver(r);
		for (int i = 0; i < n && small; i++)
			small = sizes[i] <= r->eager.bytes;
		if (small && r->post_reads && (!recv_eager_filled(req) || r->outstanding == 1)) {
			recv_poll(r);
			mk_rdv_eager_deliver(r);
		}
		req->cts_lazy = recv_eager_filled(req);
		if (!req->cts_lazy && r->eager.cts_wait_ns != 0 && recv_expects_eager(req, small)) {
			/* the clock of the last CQ read: older, so the wait only ends sooner */
			req->cts_lazy = true;
			req->cts_wait_until = r->cs.now_ns + r->eager.cts_wait_ns;
		}
	}
	if (!req->cts_lazy)
		r->cts_scan_ns = 0;
	else if (req->cts_wait_until != 0 && req->cts_wait_until < r->cts_scan_ns)
		r->cts_scan_ns = req->cts_wait_until;
	recv_post_cts(r);
	*out = req;
	return 0;
}

int mk_rdv_iflush(struct mk_rdv_comm *comm, int n, void **data, const int *sizes,
		  struct mk_mr **mrs, struct mk_rdv_req **out)
{
	struct mk_rdv_recv *r = container_of(comm, struct mk_rdv_recv, head);
	struct mk_rdv_req *req = NULL;
	int last = -1, rc;

	*out = NULL;
	for (int i = 0; i < MK_RDV_MAX_REQUESTS && req == NULL; i++)
		if (r->flush_reqs[i].state == MK_RDV_REQ_FREE)
			req = &r->flush_reqs[i];
	if (req == NULL)
		return 0;
	for (int i = 0; i < n; i++)
		if (sizes[i] > 0 && mrs[i] != NULL && mrs[i]->type == MK_PTR_CUDA)
			last = i;
	req->status = 0;
	req->flushed = true;
	if (last >= 0 && r->cs.conn->ops->flush != NULL) {
		req->flushed = false;
		rc = r->cs.conn->ops->flush(r->cs.conn, data[last], (size_t)sizes[last],
					    mrs[last]->bmr, req);
		if (rc == -EAGAIN)
			return 0;
		if (rc)
			return rc;
	}
	req->state = MK_RDV_REQ_POSTED;
	req->polls_seen = r->cs.polls;
	*out = req;
	return 0;
}

int mk_rdv_recv_test(struct mk_rdv_req *req, int *done, size_t *sizes)
{
	struct mk_rdv_recv *r = container_of(req->comm, struct mk_rdv_recv, head);
	int rc = 0;

	*done = 0;
	if (req->state == MK_RDV_REQ_LINGER)
		return -EBADF; /* already reported done */
	/* as in send test: a request already done needs no CQ read, nor one read a moment ago */
	if (!(req->kind == MK_RDV_REQ_FLUSH ? req->flushed : recv_data_in(req)))
		rc = mk_rdv_test_must_poll(&r->cs, &req->polls_seen) ? mk_rdv_recv_progress(r)
								     : r->cs.error;
	req->polls_seen = r->cs.polls;
	if (req->status)
		return req->status;
	if (req->kind == MK_RDV_REQ_FLUSH) {
		if (!req->flushed)
			return rc;
		*done = 1;
		req->state = MK_RDV_REQ_FREE;
		return 0;
	}
	if (recv_data_in(req)) {
		recv_wide_check(r, req); /* eager messages may have filled it */
		*done = 1;
		if (sizes != NULL)
			for (int i = 0; i < req->n; i++)
				sizes[i] = req->got[i];
		/* its CTS write may still be in flight: the entries stay until it completes */
		req->state = req->cts_done ? MK_RDV_REQ_FREE : MK_RDV_REQ_LINGER;
		r->outstanding--;
		return 0;
	}
	if (rc && recv_draining(r))
		return 0; /* what the peer sent before it went may still be landing */
	if (req->cts_status)
		return req->cts_status;
	if (req->optional && req->cts_done && rc == 0) {
		/* NCCL polls flags inside the data itself; the data still lands in order. */
		*done = 1;
		if (sizes != NULL)
			for (int i = 0; i < req->n; i++)
				sizes[i] = req->got[i];
		req->state = MK_RDV_REQ_LINGER;
		r->outstanding--;
		return 0;
	}
	if (rc)
		return rc;
	mk_rdv_keepalive(&r->cs, r->outstanding > 0);
	return r->cs.error;
}
