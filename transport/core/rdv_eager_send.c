// SPDX-License-Identifier: Apache-2.0
/*
 * Eager path, sender's half (rdv_eager.h): staging slots, credits, and the matching of eager
 * messages to receives as CTS groups are processed, which must agree with the receiver's
 * (rdv_eager_recv.c). Called by rdv_send.c; never blocks, never allocates.
 */
#include <errno.h>
#include <string.h>

#include "mk/core_params.h"
#include "rdv_internal.h"

uint32_t mk_rdv_eager_bytes(const struct mk_dev_props *props)
{
	int64_t v = mk_param_eager_bytes();

	if (v < 0) {
		v = props != NULL && props->eager_bytes != 0 ? props->eager_bytes
							     : MK_RDV_EAGER_DEFAULT;
		/* the device's limit counts the header that goes ahead of each payload */
		if (props != NULL && props->eager_write_max > MK_RDV_EAGER_HDR &&
		    v + MK_RDV_EAGER_HDR > props->eager_write_max)
			v = props->eager_write_max - MK_RDV_EAGER_HDR;
	}

	return v <= 0 ? 0 : v > MK_RDV_EAGER_MAX ? MK_RDV_EAGER_MAX : (uint32_t)v;
}

void mk_rdv_eager_tx_init(struct mk_rdv_send *s, char *staging, struct mk_rdv_eager_words *words,
			  uint32_t own_bytes)
{
	struct mk_rdv_eager_tx *tx = &s->eager;

	tx->staging = staging;
	tx->stride = mk_rdv_eager_stride(own_bytes);
	tx->own_bytes = own_bytes;
	tx->words = words;
	tx->next = mk_rdv_initial_seq();
	tx->freed = tx->next;
	tx->told = tx->next; /* groups and eager messages both start at the initial sequence */
	words->credit.freed = tx->next;
}

void mk_rdv_eager_tx_connect(struct mk_rdv_send *s, const struct mk_rdv_blob *peer)
{
	struct mk_rdv_eager_tx *tx = &s->eager;

	if (tx->own_bytes == 0 || peer->eager_slots != MK_RDV_EAGER_SLOTS ||
	    peer->eager_bytes == 0 || peer->eager_addr == 0)
		return; /* no eager on this connection: nslots stays 0 */
	tx->peer_slots = peer->eager_addr;
	tx->peer_frontier = peer->frontier_addr;
	tx->peer_stride = mk_rdv_eager_stride(peer->eager_bytes);
	tx->max_bytes = tx->own_bytes < peer->eager_bytes ? tx->own_bytes : peer->eager_bytes;
	tx->nslots = MK_RDV_EAGER_SLOTS;
}

/* Credits only grow (wrap-safe); a value running ahead of what we sent is garbage. */
static void eager_credit(struct mk_rdv_send *s, uint32_t freed)
{
	struct mk_rdv_eager_tx *tx = &s->eager;

	if ((int32_t)(freed - tx->freed) > 0 && (int32_t)(tx->next - freed) >= 0)
		tx->freed = freed;
}

int mk_rdv_eager_send(struct mk_rdv_send *s, const void *data, size_t size, int tag,
		      const struct mk_mr *mr, struct mk_rdv_req *req)
{
	struct mk_rdv_eager_tx *tx = &s->eager;
	struct mk_conn *c = s->cs.conn;
	uint32_t e = tx->next, slot = e % MK_RDV_EAGER_SLOTS;
	struct mk_rdv_eager_hdr *hdr;
	int rc;

	/* the payload is copied by the CPU: GPU memory takes the rendezvous */
	if (tx->nslots == 0 || size > tx->max_bytes || (mr != NULL && mr->type != MK_PTR_HOST))
		return -EOPNOTSUPP;
	eager_credit(s, __atomic_load_n(&tx->words->credit.freed, __ATOMIC_ACQUIRE));
	if (e - tx->freed >= tx->nslots || tx->busy[slot] || tx->npend == MK_RDV_EAGER_SLOTS)
		return -EAGAIN;
	hdr = (struct mk_rdv_eager_hdr *)(tx->staging + (size_t)slot * tx->stride);
	*hdr = (struct mk_rdv_eager_hdr){
		.eseq = e,
		.frontier = s->seen,
		.tag = tag,
		.len = (uint32_t)size,
	};
	if (size > 0)
		memcpy(hdr + 1, data, size);
	/*
	 * Lane 0, the one connection setup brought up: another lane of a socket provider comes up
	 * only while both ends poll it, and a receiver with nothing posted does not poll.
	 */
	rc = c->ops->write(c, 0, hdr, MK_RDV_EAGER_HDR + size, s->cs.region.mr->bmr,
			   tx->peer_slots + (uint64_t)slot * tx->peer_stride, &s->cs.peer_rkey,
			   true, MK_RDV_IMM_EAGER | (e & MK_RDV_EAGER_SEQ_MASK),
			   &tx->done_ctx[slot]);
	if (rc)
		return rc; /* -EAGAIN included: nothing was consumed */
	tx->busy[slot] = true;
	tx->owner[slot] = req;
	tx->told = s->seen;
	tx->next = e + 1;
	tx->pend_tag[tx->npend++] = tag;
	tx->sent++;
	return 0;
}

/*
 * Offer group g's free sub-receives to the eager messages still unmatched, oldest first, each
 * taking the first with its tag (any, in a group of one): the receiver matches them by the same
 * rule in the same order (rdv_eager_recv.c), so both agree on which sub-receives are taken.
 * Once every sub-receive is taken the later messages all stay unmatched, in order: they move up
 * in one block instead of one by one (with the sender far ahead, walking every waiting message
 * for each group was 8 % of the sender's samples at 8 B, 8 in flight, over shm).
 */
void mk_rdv_eager_group_seen(struct mk_rdv_send *s, uint32_t g, unsigned n)
{
	struct mk_rdv_eager_tx *tx = &s->eager;
	const struct mk_rdv_cts *cts = &s->ring[((g - 1) % MK_RDV_CTS_GROUPS) * MK_RDV_MAX_RECVS];
	uint8_t *used = &s->used[(g - 1) % MK_RDV_CTS_GROUPS];
	const uint8_t full = mk_rdv_subs_all(n);
	int kept = 0, k;

	eager_credit(s, cts[0].credits);
	for (k = 0; k < tx->npend && *used != full; k++) {
		unsigned i;

		for (i = 0; i < n; i++)
			if (!(*used & (1u << i)) && (n == 1 || cts[i].tag == tx->pend_tag[k]))
				break;
		if (i < n)
			*used |= (uint8_t)(1u << i);
		else
			tx->pend_tag[kept++] = tx->pend_tag[k];
	}
	if (kept != k)
		memmove(&tx->pend_tag[kept], &tx->pend_tag[k],
			(size_t)(tx->npend - k) * sizeof(tx->pend_tag[0]));
	tx->npend = kept + (tx->npend - k);
}

int mk_rdv_eager_tx_error(const struct mk_rdv_send *s)
{
	if (s->eager.nslots != 0 &&
	    (__atomic_load_n(&s->eager.words->credit.flags, __ATOMIC_ACQUIRE) & MK_RDV_CREDIT_ERR))
		return -EMSGSIZE;
	return 0;
}

void mk_rdv_eager_tell_frontier(struct mk_rdv_send *s)
{
	struct mk_rdv_eager_tx *tx = &s->eager;
	struct mk_conn *c = s->cs.conn;
	int rc;

	if (tx->peer_frontier == 0 || tx->frontier_busy || tx->told == s->seen)
		return;
	tx->words->frontier = s->seen;
	rc = c->ops->write(c, 0, &tx->words->frontier, sizeof(tx->words->frontier),
			   s->cs.region.mr->bmr, tx->peer_frontier, &s->cs.peer_rkey, false, 0,
			   &tx->words->frontier);
	if (rc == -EAGAIN)
		return;
	if (rc) {
		mk_rdv_fail(&s->cs, rc, "eager frontier write");
		return;
	}
	tx->frontier_busy = true;
	tx->told = s->seen;
}

bool mk_rdv_eager_tx_event(struct mk_rdv_send *s, const struct mk_event *ev)
{
	struct mk_rdv_eager_tx *tx = &s->eager;
	const uint8_t *ctx = ev->ctx;
	struct mk_rdv_req *req;

	if (ev->ctx == &tx->words->frontier) {
		tx->frontier_busy = false;
		return true;
	}
	if (ctx < tx->done_ctx || ctx >= tx->done_ctx + MK_RDV_EAGER_SLOTS)
		return false;
	/*
	 * The request is done once its bytes left with the write, as a rendezvous send is: a
	 * sender that closes right after must not take them along.
	 */
	req = tx->owner[ctx - tx->done_ctx];
	if (ev->status && req->status == 0)
		req->status = ev->status;
	req->completed++;
	tx->busy[ctx - tx->done_ctx] = false;
	return true;
}
