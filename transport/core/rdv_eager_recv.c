// SPDX-License-Identifier: Apache-2.0
/*
 * Eager path, receiver's half (rdv_eager.h): bounce slots that landed are taken strictly in
 * their order, matched to a posted receive by NCCL's rule from the sender's frontier on (the
 * sender matches the same way, rdv_eager_send.c), copied out, and handed back as credits.
 * Called by rdv_recv.c from its progress (test, and irecv when it polls); never blocks.
 */
#include <errno.h>
#include <string.h>

#include "mk/log.h"
#include "mk/core_params.h"
#include "rdv_internal.h"

void mk_rdv_eager_rx_init(struct mk_rdv_recv *r, char *slots, struct mk_rdv_eager_words *words,
			  uint32_t bytes)
{
	struct mk_rdv_eager_rx *rx = &r->eager;
	int64_t wait_us;

	rx->slots = slots;
	rx->bytes = slots != NULL ? bytes : 0;
	rx->stride = mk_rdv_eager_stride(rx->bytes);
	rx->words = words;
	rx->next = mk_rdv_initial_seq();
	rx->open_from = rx->next; /* groups start at the initial sequence too */
	rx->credited = rx->next;
	wait_us = mk_param_eager_cts_wait_us();
	rx->cts_wait_ns = wait_us > 0 ? (uint64_t)wait_us * 1000u : 0;
	words->frontier = rx->next;
}

void mk_rdv_eager_read_frontier(struct mk_rdv_recv *r)
{
	uint32_t f = __atomic_load_n(&r->eager.words->frontier, __ATOMIC_ACQUIRE);

	/* it only grows; a value past every group posted is not the sender's */
	if ((int32_t)(f - r->frontier) > 0 && (int32_t)(r->next_seq - f) >= 0)
		r->frontier = f;
}

void mk_rdv_eager_rx_connect(struct mk_rdv_recv *r, const struct mk_rdv_blob *peer)
{
	r->eager.peer_credit = peer->eager_addr;
}

bool mk_rdv_eager_arrived(struct mk_rdv_recv *r, uint32_t imm)
{
	struct mk_rdv_eager_rx *rx = &r->eager;
	uint32_t e = rx->next + ((imm - rx->next) & MK_RDV_EAGER_SEQ_MASK);
	unsigned slot = e % MK_RDV_EAGER_SLOTS;

	/* a sender holds at most one ring of credits: anything further is a stranger's */
	if (rx->slots == NULL || e - rx->next >= MK_RDV_EAGER_SLOTS || rx->arrived[slot]) {
		MK_WARN_RATELIMITED("receive: dropped an eager immediate 0x%08x outside the %u "
				    "slots after message %u",
				    imm, MK_RDV_EAGER_SLOTS, rx->next);
		return false;
	}
	rx->arrived[slot] = true;
	return true;
}

/*
 * Whether group g may still take an eager message: posted under that sequence (its slot not
 * done nor reused by a later group) with a sub-receive no eager message took. Once false it
 * stays false: a request only goes from posted to done, and taken bits are only ever set.
 */
static bool eager_open(const struct mk_rdv_recv *r, uint32_t g)
{
	const struct mk_rdv_req *req = &r->reqs[g % MK_RDV_CTS_GROUPS];

	return req->seq == g && req->state == MK_RDV_REQ_POSTED &&
	       req->etaken != mk_rdv_subs_all((unsigned)req->n);
}

/*
 * The receive an eager message belongs to: the first posted group from the sender's frontier on
 * with a sub-receive no earlier eager message took and whose tag is the message's (any, in a
 * group of one). Rendezvous sends only ever land in groups the sender had processed before it
 * sent this message, so those are never candidates. False: its group is not posted yet. The
 * walk skips the closed groups at the front (open_from): none of them could match.
 */
static bool eager_match(struct mk_rdv_recv *r, const struct mk_rdv_eager_hdr *hdr,
			struct mk_rdv_req **out, unsigned *idx)
{
	uint32_t from = hdr->frontier;

	while ((int32_t)(r->eager.open_from - r->next_seq) < 0 &&
	       !eager_open(r, r->eager.open_from))
		r->eager.open_from++;
	if ((int32_t)(r->eager.open_from - from) > 0)
		from = r->eager.open_from;
	for (uint32_t g = from; (int32_t)(g - r->next_seq) < 0; g++) {
		struct mk_rdv_req *req = &r->reqs[g % MK_RDV_CTS_GROUPS];
		const struct mk_rdv_cts *cts = mk_rdv_staging(r, g);

		/* done (or its slot reused by a later group): every sub-receive was taken */
		if (req->seq != g || req->state != MK_RDV_REQ_POSTED)
			continue;
		for (int i = 0; i < req->n; i++) {
			if (!(req->etaken & (1u << i)) && (req->n == 1 || cts[i].tag == hdr->tag)) {
				*out = req;
				*idx = (unsigned)i;
				return true;
			}
		}
	}
	return false;
}

/* Copy one matched message out: its length from the header, the receive's capacity checked. */
static void eager_copy(struct mk_rdv_recv *r, const struct mk_rdv_eager_hdr *hdr,
		       struct mk_rdv_req *req, unsigned i)
{
	const struct mk_rdv_cts *cts = mk_rdv_staging(r, req->seq) + i;

	req->etaken |= (uint8_t)(1u << i);
	if (hdr->len > cts->size) {
		MK_WARN("receive: the peer's %u-byte eager message is larger than the %llu-byte "
			"receive it belongs to (sequence %u, index %u)",
			hdr->len, (unsigned long long)cts->size, req->seq, i);
		if (req->status == 0)
			req->status = -EMSGSIZE;
		r->eager.flags |= MK_RDV_CREDIT_ERR; /* the sender fails too, at its next call */
	} else if (hdr->len > 0) {
		memcpy((void *)(uintptr_t)cts->addr, hdr + 1, hdr->len);
	}
	req->got[i] = hdr->len;
	req->segs_total[i] = 1;
	req->segs_seen[i] = 1;
}

/*
 * Tell the sender about freed slots with an 8-byte write into its credit word, when it has not
 * heard of half a ring of them, or about an error. CTS entries carry credits too: while groups
 * hold their CTS back (a batch goes every cts_batch of them, up to half a ring), the write waits
 * for three quarters of a ring, so in a stream of one-message groups the CTS batch carries the
 * credits alone; at half a ring both went, two writes where one does. One write at a time: its
 * source must not change while it is in flight.
 */
static void eager_credit(struct mk_rdv_recv *r)
{
	struct mk_rdv_eager_rx *rx = &r->eager;
	struct mk_conn *c = r->cs.conn;
	const uint32_t at =
		r->cts_next != r->next_seq ? MK_RDV_EAGER_SLOTS * 3 / 4 : MK_RDV_EAGER_SLOTS / 2;
	int rc;

	if (rx->credit_busy || rx->peer_credit == 0 ||
	    (rx->next - rx->credited < at && (rx->flags & ~rx->words->credit.flags) == 0))
		return;
	rx->words->credit.freed = rx->next;
	rx->words->credit.flags = rx->flags;
	rc = c->ops->write(c, 0, &rx->words->credit, sizeof(rx->words->credit),
			   r->cs.region.mr->bmr, rx->peer_credit, &r->cs.peer_rkey, false, 0,
			   &rx->words->credit);
	if (rc == -EAGAIN)
		return; /* the next progress call tries again */
	if (rc) {
		mk_rdv_fail(&r->cs, rc, "eager credit write");
		return;
	}
	rx->credit_busy = true;
	rx->credited = rx->next;
}

void mk_rdv_eager_deliver(struct mk_rdv_recv *r)
{
	struct mk_rdv_eager_rx *rx = &r->eager;

	while (rx->slots != NULL && rx->arrived[rx->next % MK_RDV_EAGER_SLOTS]) {
		unsigned slot = rx->next % MK_RDV_EAGER_SLOTS;
		const struct mk_rdv_eager_hdr *hdr =
			(const void *)(rx->slots + (size_t)slot * rx->stride);
		struct mk_rdv_req *req;
		unsigned i;

		if (hdr->eseq != rx->next || hdr->len > rx->bytes) {
			MK_WARN("receive: eager slot %u holds message %u of %u bytes, expected "
				"message %u of at most %u",
				slot, hdr->eseq, hdr->len, rx->next, rx->bytes);
			mk_rdv_fail(&r->cs, -EPROTO, "protocol violation");
			return;
		}
		if ((int32_t)(hdr->frontier - r->frontier) > 0)
			r->frontier = hdr->frontier;
		if (!eager_match(r, hdr, &req, &i))
			break; /* its receive is not posted yet; later ones wait behind it */
		eager_copy(r, hdr, req, i);
		rx->arrived[slot] = false;
		rx->next++;
		rx->copied++;
	}
	eager_credit(r);
}

bool mk_rdv_eager_rx_event(struct mk_rdv_recv *r, const struct mk_event *ev)
{
	if (ev->ctx != &r->eager.words->credit)
		return false;
	r->eager.credit_busy = false;
	if (ev->status)
		mk_rdv_fail(&r->cs, ev->status, "eager credit write");
	return true;
}
