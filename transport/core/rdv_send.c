// SPDX-License-Identifier: Apache-2.0
/*
 * Rendezvous messaging, send side: match each isend to a clear-to-send entry the receiver
 * wrote into our ring, then write the data into the receiver's buffer, every segment with an
 * immediate; or, for a small message whose CTS is not here yet, send it eagerly into the
 * receiver's bounce slots (rdv_eager_send.c). Never blocks, never allocates: requests come from
 * the comm's fixed pool.
 */
#include <errno.h>
#include <string.h>

#include "mk/compiler.h"
#include "mk/core_params.h"
#include "mk/log.h"
#include "rdv_internal.h"

#define SEND_POLL_BATCH 16

static struct mk_rdv_cts *send_slot(struct mk_rdv_send *s, uint32_t seq, unsigned idx)
{
	return &s->ring[((seq - 1) % MK_RDV_CTS_GROUPS) * MK_RDV_MAX_RECVS + idx];
}

/* Number of sub-receives of group seq once all its entries have landed, else 0. */
static unsigned send_group_ready(struct mk_rdv_send *s, uint32_t seq)
{
	struct mk_rdv_cts *first = send_slot(s, seq, 0);
	unsigned n;

	if (__atomic_load_n(&first->seq, __ATOMIC_ACQUIRE) != seq)
		return 0;
	n = first->nsub;
	if (n < 1 || n > MK_RDV_MAX_RECVS)
		return 0;
	for (unsigned i = 1; i < n; i++)
		if (__atomic_load_n(&send_slot(s, seq, i)->seq, __ATOMIC_ACQUIRE) != seq)
			return 0;
	return n;
}

static bool send_group_full(struct mk_rdv_send *s, uint32_t seq)
{
	unsigned i = (seq - 1) % MK_RDV_CTS_GROUPS;

	return s->gn[i] != 0 && s->gseq[i] == seq && s->used[i] == mk_rdv_subs_all(s->gn[i]);
}

/* Retire fully consumed groups at the head so their ring slots can be rewritten. */
static void send_retire(struct mk_rdv_send *s)
{
	while (send_group_full(s, s->next_group)) {
		unsigned i = (s->next_group - 1) % MK_RDV_CTS_GROUPS;

		s->used[i] = 0;
		s->gn[i] = 0;
		s->next_group++;
	}
}

/*
 * Process the groups whose entries have all landed, in order: cache their shape (the receiver
 * may overwrite a fully consumed group's entries with a later group before an older one is
 * retired), then let the eager path take credits and match its waiting messages in them. Never
 * further than the ring's depth past the oldest unretired group: that slot is still its own.
 */
static void send_see(struct mk_rdv_send *s)
{
	for (;;) {
		uint32_t g = s->seen;
		unsigned i = (g - 1) % MK_RDV_CTS_GROUPS, n;

		if (g - s->next_group >= MK_RDV_CTS_GROUPS)
			return;
		n = send_group_ready(s, g);
		if (n == 0)
			return;
		s->gseq[i] = g;
		s->gn[i] = (uint8_t)n;
		mk_rdv_eager_group_seen(s, g, n);
		s->seen = g + 1;
		send_retire(s); /* eager messages may have taken every entry */
	}
}

/* Post what is left of req's segments; stops at the first full queue. */
static int send_post(struct mk_rdv_send *s, struct mk_rdv_req *req)
{
	struct mk_conn *c = s->cs.conn;

	while (req->posted < req->nseg) {
		unsigned i = req->posted;
		size_t off = (size_t)i * req->chunk;
		size_t len =
			req->trunc ? 0
				   : (req->size - off < req->chunk ? req->size - off : req->chunk);
		uint32_t imm = mk_rdv_imm_pack(req->seq, req->idx, req->nseg, req->trunc);
		struct mk_bmr *bmr = req->mr != NULL ? req->mr->bmr : NULL;
		int lane = c->nlanes > 0 ? (int)(i % (unsigned)c->nlanes) : 0;
		int rc;

		rc = c->ops->write(c, lane, req->src + off, len, bmr, req->dst + off, &req->rkey,
				   true, imm, req);
		if (rc == -EAGAIN)
			return 0;
		if (rc)
			return rc;
		req->posted++;
	}
	return 0;
}

static void send_pending_push(struct mk_rdv_send *s, struct mk_rdv_req *req)
{
	req->next_pending = NULL;
	if (s->pending_tail != NULL)
		s->pending_tail->next_pending = req;
	else
		s->pending_head = req;
	s->pending_tail = req;
}

/* One event; true when it is the peer's sign of life (the progress call stamps the time once). */
static bool send_event(struct mk_rdv_send *s, const struct mk_event *ev)
{
	struct mk_rdv_req *req = ev->ctx;

	if (ev->type == MK_EV_IMM) {
		/* a receiver never writes immediates to its sender: a stranger's, dropped */
		MK_WARN_RATELIMITED("send: dropped an immediate 0x%08x: nothing expects one on a "
				    "send connection",
				    ev->imm);
		return false;
	}
	if (ev->ctx == &s->cs) {
		mk_rdv_probe_done(&s->cs, ev->status);
		return true;
	}
	if (mk_rdv_eager_tx_event(s, ev)) {
		if (ev->status)
			mk_rdv_fail(&s->cs, ev->status, "eager write");
		return true;
	}
	if (ev->type != MK_EV_WRITE_DONE || req == NULL || req->comm != &s->head ||
	    req->state != MK_RDV_REQ_POSTED) {
		if (ev->status)
			mk_rdv_fail(&s->cs, ev->status, "transport error");
		return true;
	}
	if (ev->status && req->status == 0)
		req->status = ev->status;
	if (ev->status)
		mk_rdv_fail(&s->cs, ev->status, "data write");
	req->completed++;
	return true;
}

int mk_rdv_send_progress(struct mk_rdv_send *s)
{
	struct mk_event ev[SEND_POLL_BATCH];
	bool heard = false;
	int n, rc;

	mk_rdv_polling(&s->cs);
	do {
		n = s->cs.conn->ops->poll(s->cs.conn, ev, SEND_POLL_BATCH);
		if (n < 0) {
			mk_rdv_fail(&s->cs, n, "poll");
			break;
		}
		for (int i = 0; i < n; i++)
			heard |= send_event(s, &ev[i]);
	} while (n == SEND_POLL_BATCH);
	mk_rdv_polled(&s->cs, heard);
	send_see(s);
	rc = mk_rdv_eager_tx_error(s);
	if (rc)
		mk_rdv_fail(&s->cs, rc, "an eager message did not fit the peer's receive");

	while (s->pending_head != NULL && s->cs.error == 0) {
		struct mk_rdv_req *req = s->pending_head;

		rc = send_post(s, req);
		if (rc) {
			mk_rdv_fail(&s->cs, rc, "posting a data write");
			break;
		}
		if (req->posted < req->nseg)
			break; /* queue full: keep order, retry later */
		s->pending_head = req->next_pending;
		if (s->pending_head == NULL)
			s->pending_tail = NULL;
	}
	return s->cs.error;
}

/*
 * Find the sub-receive this send belongs to: the oldest processed group that has an unconsumed
 * entry with this tag (any entry when the group has one). Sends of one tag arrive in order, so a
 * tag already consumed in the oldest group belongs to a later one. Returns 0 and fills *seq and
 * *idx, -EAGAIN if its CTS has not been processed yet, -EINVAL if the oldest group lacks the tag.
 */
static int send_match(struct mk_rdv_send *s, int tag, uint32_t *seq, unsigned *idx)
{
	bool oldest = true;

	for (uint32_t g = s->next_group; g != s->seen; g++) {
		uint8_t used;
		unsigned n;
		bool tag_seen = false;

		if (send_group_full(s, g))
			continue;
		n = s->gn[(g - 1) % MK_RDV_CTS_GROUPS];
		used = s->used[(g - 1) % MK_RDV_CTS_GROUPS];
		for (unsigned i = 0; i < n; i++) {
			bool free_slot = !(used & (1u << i));

			if (n == 1 && free_slot) {
				*seq = g;
				*idx = 0;
				return 0;
			}
			if (send_slot(s, g, i)->tag != tag)
				continue;
			tag_seen = true;
			if (free_slot) {
				*seq = g;
				*idx = i;
				return 0;
			}
		}
		if (n > 1 && !tag_seen && oldest)
			return -EINVAL;
		oldest = false;
	}
	return -EAGAIN;
}

static void send_consume(struct mk_rdv_send *s, uint32_t seq, unsigned idx)
{
	s->used[(seq - 1) % MK_RDV_CTS_GROUPS] |= (uint8_t)(1u << idx);
	send_retire(s);
}

/* Segments of a send: one per lane where the receiver reads every lane for it, else one. */
static unsigned send_nseg(const struct mk_rdv_send *s, size_t size, const struct mk_rdv_cts *cts,
			  size_t *chunk)
{
	const struct mk_conn *c = s->cs.conn;
	unsigned lanes = c->nlanes > 1 ? (unsigned)c->nlanes : 1;
	unsigned nseg = 1;

	if (lanes > MK_RDV_MAX_SEGS)
		lanes = MK_RDV_MAX_SEGS;
	if (lanes > 1 && (cts->flags & MK_RDV_CTS_WIDE) && size > s->cs.stripe_min)
		nseg = lanes;
	*chunk = MK_ALIGN_UP((size + nseg - 1) / nseg, (size_t)MK_RDV_CHUNK_ALIGN);
	if (*chunk == 0) {
		*chunk = MK_RDV_CHUNK_ALIGN;
		return 1;
	}
	return (unsigned)((size + *chunk - 1) / *chunk);
}

static struct mk_rdv_req *send_req_get(struct mk_rdv_send *s, void *data, size_t size,
				       struct mk_mr *mr)
{
	struct mk_rdv_req *req = s->free_reqs;

	s->free_reqs = req->next_free;
	req->state = MK_RDV_REQ_POSTED;
	req->status = 0;
	req->polls_seen = s->cs.polls;
	req->src = data;
	req->mr = mr;
	req->size = size;
	req->posted = 0;
	req->completed = 0;
	req->nseg = 0;
	req->trunc = false;
	req->eager = false;
	return req;
}

/*
 * How this send can go now: 0 with *seq and *idx, a processed CTS entry (rendezvous); 1, sent
 * eagerly; -EAGAIN, neither yet; else an error. A CTS that is here wins over eager even for a
 * small message: writing straight into the receive buffer saves the receiver's copy.
 */
static int send_try(struct mk_rdv_send *s, const void *data, size_t size, int tag,
		    const struct mk_mr *mr, uint32_t *seq, unsigned *idx)
{
	int rc;

	if (s->free_reqs == NULL)
		return -EAGAIN;
	send_see(s);
	rc = send_match(s, tag, seq, idx);
	if (rc != -EAGAIN)
		return rc;
	rc = mk_rdv_eager_send(s, data, size, tag, mr, s->free_reqs);
	if (rc == 0)
		return 1;
	return rc == -EOPNOTSUPP ? -EAGAIN : rc;
}

int mk_rdv_isend(struct mk_rdv_comm *comm, void *data, size_t size, int tag, struct mk_mr *mr,
		 struct mk_rdv_req **out)
{
	struct mk_rdv_send *s = container_of(comm, struct mk_rdv_send, head);
	struct mk_rdv_req *req;
	struct mk_rdv_cts *cts;
	uint32_t seq;
	unsigned idx;
	int rc;

	*out = NULL;
	rc = mk_rdv_eager_tx_error(s);
	if (rc)
		mk_rdv_fail(&s->cs, rc, "an eager message did not fit the peer's receive");
	if (s->cs.error)
		return s->cs.error;
	/*
	 * Poll only when the send cannot go out as things stand: a progress call costs a provider
	 * CQ read (syscalls on the socket providers), as much as the small send itself, and the
	 * caller's test() polls anyway.
	 */
	rc = send_try(s, data, size, tag, mr, &seq, &idx);
	if (rc == -EAGAIN) {
		rc = mk_rdv_send_progress(s);
		if (rc)
			return rc;
		rc = send_try(s, data, size, tag, mr, &seq, &idx);
	}
	if (rc == -EAGAIN) {
		mk_rdv_eager_tell_frontier(s);
		mk_rdv_keepalive(&s->cs, true);
		return s->cs.error;
	}
	if (rc == 1) {
		/* the request mk_rdv_eager_send() was given: the pool's head */
		req = send_req_get(s, data, size, mr);
		req->eager = true;
		req->nseg = 1;
		req->posted = 1;
		*out = req;
		return 0;
	}
	if (rc == -EINVAL) {
		MK_WARN("isend: tag %d matches no receive of the oldest posted multi-receive", tag);
		return rc;
	}
	if (rc) {
		mk_rdv_fail(&s->cs, rc, "posting an eager write");
		return rc;
	}
	cts = send_slot(s, seq, idx);
	req = send_req_get(s, data, size, mr);
	req->dst = cts->addr;
	req->rkey.base = cts->rkey_base;
	req->rkey.key = cts->rkey_key;
	req->rkey.key2 = cts->rkey_key2;
	req->seq = seq;
	req->idx = idx;
	req->trunc = size > cts->size;
	req->nseg = req->trunc ? 1 : send_nseg(s, size, cts, &req->chunk);
	if (req->trunc) {
		req->chunk = 0;
		MK_WARN("isend: %zu bytes do not fit the peer's %llu-byte receive (tag %d)", size,
			(unsigned long long)cts->size, tag);
	}
	send_consume(s, seq, idx);
	rc = send_post(s, req);
	if (rc) {
		mk_rdv_fail(&s->cs, rc, "posting a data write");
		return rc;
	}
	if (req->posted < req->nseg)
		send_pending_push(s, req);
	*out = req;
	return 0;
}

static bool send_req_done(const struct mk_rdv_req *req)
{
	return req->status == 0 && req->completed == req->nseg && req->posted == req->nseg;
}

int mk_rdv_send_test(struct mk_rdv_req *req, int *done, size_t *sizes)
{
	struct mk_rdv_send *s = container_of(req->comm, struct mk_rdv_send, head);
	int rc = 0;

	*done = 0;
	/*
	 * Progress only for a request still waiting, and only when no other request's read a
	 * moment ago saw what there was (rdv_conn.h): with several in flight, one call's CQ read
	 * often completes the rest, and each read costs system calls on the socket providers.
	 */
	if (!send_req_done(req))
		rc = mk_rdv_test_must_poll(&s->cs, &req->polls_seen) ? mk_rdv_send_progress(s)
								     : s->cs.error;
	req->polls_seen = s->cs.polls;
	if (send_req_done(req)) {
		if (req->trunc)
			rc = -EMSGSIZE;
		else
			rc = 0;
		*done = 1;
		if (sizes != NULL)
			sizes[0] = req->size;
		req->state = MK_RDV_REQ_FREE;
		req->next_free = s->free_reqs;
		s->free_reqs = req;
		return rc;
	}
	if (req->status)
		return req->status;
	if (rc)
		return rc;
	mk_rdv_keepalive(&s->cs, true);
	return s->cs.error;
}
