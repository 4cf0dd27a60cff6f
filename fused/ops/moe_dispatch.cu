// SPDX-License-Identifier: Apache-2.0
/*
 * mkMoeDispatchGemm's fused kernel (moe_dev.cuh: the frame). One call:
 *
 *  1. counts first (CTA 0): my pairs per expert, my tokens per destination node and my bad ids
 *     go to every rank (node peers by stores into their mapped workspace, other nodes through
 *     the proxy; slots alternate by call parity), after my row counters are reset (no peer
 *     writes them before it has my counts). With every rank's counts, every rank takes the same
 *     decision (a bad id or an overflow anywhere: nothing moves, the error is recorded) and
 *     computes the layout: my received rows per expert (the grouped GEMM's offsets), every
 *     pair's destination row (ranked in (token, slot) order per expert by the warps), and my
 *     tokens' slots in the list to each other node. Then the layout is published to the CTAs.
 *  2. token rows (the other communication CTAs too, by tickets, in this order so that a CTA
 *     only waits for work already handed out): to ranks of my node, stores straight into their
 *     received rows; to another node, once per token and node: staged with a header (token, its
 *     pairs' ranks, rows and weights) and put in chunks to the rank of that node with my local
 *     index (one signal per chunk); arriving chunks of other nodes, through me, are fanned out
 *     to the ranks of my node the same way once all of that node's chunks have landed (the
 *     signal counts chunks, which land in any order), their headers kept in the layout for the
 *     combine.
 *     Every stored row adds 1 to its 128-row block's counter at the owner.
 *  3. the GEMM (the other CTAs): the grouped role over my received rows; a tile's A is loaded
 *     once its row blocks are complete.
 */
#include <errno.h>

#include "fused/ops/moe.h"
#include "fused/ops/moe_dev.cuh"

/* ---- 1. counts and layout (CTA 0) ---- */

/* Shared memory of the count phase, in the dynamic region (the GEMM's stages are not in use). */
struct moe_count_smem {
	int *cnt;  /* [ne] my pairs per expert */
	int *base; /* [ne] my first row per expert at its owner */
	int *wcnt; /* [MOE_WARPS][ne] per warp, then running ranks */
	int *node; /* [nnodes] my tokens per node */
	int *wn;   /* [MOE_WARPS][nnodes] */
};

/* Ordered ranking of my pairs per expert: pass 1 counts per warp segment, pass 2 ranks inside
 * 32-pair chunks with match_any. Fills pair_q, pair_row, pair_w. */
MK_DEV void moe_rank_pairs(const struct mk_moe_kargs *a, struct moe_count_smem *s)
{
	const struct mk_moe_geom *g = &a->g;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int pairs = a->ntok * g->topk, seg = (pairs + MOE_WARPS - 1) / MOE_WARPS;
	const int lo = min(pairs, warp * seg), hi = min(pairs, lo + seg);
	int32_t *pq = (int32_t *)(a->layout + a->lm.pair_q);
	int32_t *prow = (int32_t *)(a->layout + a->lm.pair_row);
	float *pw = (float *)(a->layout + a->lm.pair_w);

	for (int i = threadIdx.x; i < MOE_WARPS * g->ne; i += blockDim.x)
		s->wcnt[i] = 0;
	__syncthreads();
	for (int i = lo + lane; i < hi; i += 32) {
		const int e = a->topk_idx[i];

		if (e >= 0 && e < g->ne)
			atomicAdd(&s->wcnt[warp * g->ne + e], 1);
	}
	__syncthreads();
	/* exclusive prefix over warps, plus my base row at the expert's owner */
	for (int e = threadIdx.x; e < g->ne; e += blockDim.x) {
		int run = s->base[e];

		for (int w = 0; w < MOE_WARPS; w++) {
			const int c = s->wcnt[w * g->ne + e];

			s->wcnt[w * g->ne + e] = run;
			run += c;
		}
	}
	__syncthreads();
	for (int c0 = lo; c0 < hi; c0 += 32) {
		const int i = c0 + lane;
		const int e = i < hi ? a->topk_idx[i] : -2;
		const int ok = i < hi && e >= 0 && e < g->ne;
		const unsigned int same = __match_any_sync(0xffffffffu, ok ? e : -1);
		const int before = __popc(same & ((1u << lane) - 1));
		int row = -1;

		if (ok)
			row = s->wcnt[warp * g->ne + e] + before;
		__syncwarp();
		if (ok && before == 0)
			s->wcnt[warp * g->ne + e] += __popc(same);
		__syncwarp();
		if (i < hi) {
			pq[i] = ok ? mk_moe_owner(g, e) : -1;
			prow[i] = row;
			pw[i] = a->topk_w[i];
		}
	}
}

/* Nodes that own at least one of token t's experts (a bit per node). */
MK_DEV unsigned int moe_token_nodes(const struct mk_moe_kargs *a, int t)
{
	unsigned int mask = 0;

	for (int j = 0; j < a->g.topk; j++) {
		const int e = a->topk_idx[t * a->g.topk + j];

		if (e >= 0 && e < a->g.ne)
			mask |= 1u << moe_node(a, mk_moe_owner(&a->g, e));
	}
	return mask;
}

/* My tokens' slot in the list to each other node, in token order (ballot per node). */
MK_DEV void moe_rank_tokens(const struct mk_moe_kargs *a, struct moe_count_smem *s)
{
	const struct mk_moe_geom *g = &a->g;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nn = g->nnodes;
	const int seg = (a->ntok + MOE_WARPS - 1) / MOE_WARPS;
	const int lo = min(a->ntok, warp * seg), hi = min(a->ntok, lo + seg);
	int32_t *slot = (int32_t *)(a->layout + a->lm.node_slot);
	int32_t *list = (int32_t *)(a->layout + a->lm.send_list);
	int32_t *count = (int32_t *)(a->layout + a->lm.send_count);

	for (int i = threadIdx.x; i < MOE_WARPS * nn; i += blockDim.x)
		s->wn[i] = 0;
	__syncthreads();
	for (int c0 = lo; c0 < hi; c0 += 32) {
		const int t = c0 + lane;
		const unsigned int mask = t < hi ? moe_token_nodes(a, t) : 0;
		for (int b = 0; b < nn; b++) {
			const unsigned int has = __ballot_sync(0xffffffffu, (mask >> b) & 1);

			if (lane == 0)
				s->wn[warp * nn + b] += __popc(has);
		}
	}
	__syncthreads();
	if (threadIdx.x < nn) {
		const int b = threadIdx.x;
		int run = 0;

		for (int w = 0; w < MOE_WARPS; w++) {
			const int c = s->wn[w * nn + b];

			s->wn[w * nn + b] = run;
			run += c;
		}
		count[b] = b == g->node ? 0 : run;
	}
	__syncthreads();
	for (int c0 = lo; c0 < hi; c0 += 32) {
		const int t = c0 + lane;
		const unsigned int mask = t < hi ? moe_token_nodes(a, t) : 0;
		for (int b = 0; b < nn; b++) {
			const int on = (mask >> b) & 1;
			const unsigned int has = __ballot_sync(0xffffffffu, on);
			const int sl = s->wn[warp * nn + b] + __popc(has & ((1u << lane) - 1));

			if (t < hi)
				slot[(size_t)t * nn + b] = on && b != g->node ? sl : -1;
			if (on && b != g->node)
				list[(size_t)b * g->max_tokens + sl] = t;
			__syncwarp();
			if (lane == 0)
				s->wn[warp * nn + b] += __popc(has);
		}
	}
}

/* Counts, exchange, decision, layout. Returns the status (MK_MOE_ST_*) or -1 on an error. */
MK_DEV int moe_count_phase(const struct mk_moe_kargs *a, uint32_t cur, void *dyn)
{
	const struct mk_moe_geom *g = &a->g;
	const int me = g->rank, n = g->nranks, nn = g->nnodes, ne = g->ne;
	const int stride = a->w.cnt_ints, parity = cur & 1;
	char *ws = moe_ws(a);
	int32_t *table = (int32_t *)(ws + a->w.cnt) + (size_t)parity * n * stride;
	int32_t *mine = table + (size_t)me * stride;
	struct mk_moe_lhdr *hdr = (struct mk_moe_lhdr *)(a->layout + a->lm.hdr);
	__shared__ int bad_s, first_s, err_s, status_s, needed_s;
	struct moe_count_smem s;
	uint32_t ticket = 0;
	int rc = 0, put = 0;

	s.cnt = (int *)dyn;
	s.base = s.cnt + ne;
	s.wcnt = s.base + ne;
	s.node = s.wcnt + MOE_WARPS * ne;
	s.wn = s.node + nn;

	if (threadIdx.x == 0)
		hdr->status = MK_MOE_ST_ERROR; /* until the decision below */
	/* Nobody writes my row counters before it has my counts: reset them first. */
	for (int b = threadIdx.x; b < a->w.nblk; b += blockDim.x)
		((uint32_t *)(ws + a->w.recv_blk))[b] = 0;
	for (int e = threadIdx.x; e < ne; e += blockDim.x)
		s.cnt[e] = 0;
	for (int b = threadIdx.x; b < nn; b += blockDim.x)
		s.node[b] = 0;
	if (threadIdx.x == 0) {
		bad_s = 0;
		first_s = INT_MAX;
		err_s = 0;
		status_s = MK_MOE_ST_OK;
		needed_s = 0;
	}
	__syncthreads();
	for (int i = threadIdx.x; i < a->ntok * g->topk; i += blockDim.x) {
		const int e = a->topk_idx[i];

		if (e == -1)
			continue;
		if (e < -1 || e >= ne) {
			atomicAdd(&bad_s, 1);
			atomicMin(&first_s, i);
		} else {
			atomicAdd(&s.cnt[e], 1);
		}
	}
	for (int t = threadIdx.x; t < a->ntok; t += blockDim.x) {
		const unsigned int mask = moe_token_nodes(a, t);

		for (int b = 0; b < nn; b++)
			if ((mask >> b) & 1)
				atomicAdd(&s.node[b], 1);
	}
	__syncthreads();
	for (int e = threadIdx.x; e < ne; e += blockDim.x)
		mine[e] = s.cnt[e];
	for (int b = threadIdx.x; b < nn; b += blockDim.x)
		mine[ne + b] = s.node[b];
	if (threadIdx.x == 0) {
		mine[ne + nn] = bad_s;
		mine[ne + nn + 1] = bad_s ? first_s : -1;
	}
	__syncthreads();

	/* To every rank (the same offset in every workspace), one signal each. */
	{
		const uint64_t off = a->ws_off + a->w.cnt + ((size_t)parity * n + me) * stride * 4;

		for (int p = 0; p < n && rc == 0; p++) {
			if (p == me)
				continue;
			rc = mk_dev_put_signal_block(&a->dc, p, off, off, (uint64_t)stride * 4,
						     a->sig_count + (uint32_t)me, &ticket);
			put = 1;
		}
	}
	if (rc) {
		moe_fail(a, rc);
		return -1;
	}
	for (int p = threadIdx.x; p < n; p += blockDim.x) {
		if (p == me)
			continue;
		int r = mk_dev_signal_wait(&a->dc, a->sig_count + (uint32_t)p, cur);

		if (r)
			err_s = r;
	}
	__syncthreads();
	if (err_s) {
		moe_fail(a, err_s);
		return -1;
	}
	for (int p = 0; p < n; p++)
		if (p != me)
			mk_dev_land_block(&a->dc, p,
					  a->ws_off + a->w.cnt + ((size_t)parity * n + p) * stride * 4,
					  (uint64_t)stride * 4);
	/* My row of this parity is written again two calls on: its puts must be done. */
	if (put && moe_bcast(threadIdx.x == 0 ? mk_dev_quiet(&a->dc, ticket) : 0)) {
		moe_fail(a, -EPIPE);
		return -1;
	}

	/* The same decision on every rank: the lowest bad rank, the largest receiver. */
	if (threadIdx.x == 0) {
		hdr->bad = hdr->bad_rank = hdr->bad_id = -1;
		for (int s2 = 0; s2 < n; s2++) {
			const int32_t *row = table + (size_t)s2 * stride;

			if (row[ne + nn] > 0) {
				status_s = MK_MOE_ST_BAD_ID;
				hdr->bad_rank = s2;
				hdr->bad = row[ne + nn + 1];
				break;
			}
		}
	}
	for (int q = threadIdx.x; q < n; q += blockDim.x) {
		int rows = 0;

		for (int l = 0; l < g->eloc; l++)
			rows += mk_moe_expert_rows(table, (size_t)stride, n, q * g->eloc + l);
		atomicMax(&needed_s, rows);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		if (status_s == MK_MOE_ST_OK && needed_s > g->max_recv)
			status_s = MK_MOE_ST_OVERFLOW;
		hdr->ntok = a->ntok;
		hdr->needed = needed_s;
		hdr->status = status_s;
		hdr->path = MK_MOE_PATH_FUSED;
		hdr->total_recv = mk_moe_recv_off(g, table, (size_t)stride, me,
						  (int32_t *)(a->layout + a->lm.recv_off));
	}
	__syncthreads();
	if (status_s != MK_MOE_ST_OK) {
		/* Every rank saw it: the comm's error word says so (-ERANGE: ncclInvalidUsage from
		 * mkCommGetAsyncError, as documented), nothing moves anywhere. */
		moe_fail(a, -ERANGE);
		return status_s;
	}

	for (int e = threadIdx.x; e < ne; e += blockDim.x)
		s.base[e] = mk_moe_pair_base(g, table, (size_t)stride, me, e);
	__syncthreads();
	moe_rank_pairs(a, &s);
	__syncthreads();
	moe_rank_tokens(a, &s);
	if (threadIdx.x < nn) {
		const int b = threadIdx.x;
		int32_t *in = (int32_t *)(a->layout + a->lm.in_count);
		/* tokens of node b entering through me: its rank with my local index counted them */
		const int src = b == g->node ? -1 : a->rank_at[b][g->local];
		const int cnt = src < 0 ? 0 : table[(size_t)src * stride + ne + g->node];

		in[b] = cnt;
		a->ctl->in_base[b] = a->ctl->in_total[b];
		a->ctl->in_total[b] = mk_moe_chunks_landed(a->ctl->in_base[b], cnt);
	}
	__syncthreads();
	return MK_MOE_ST_OK;
}

/* ---- 2. token rows ---- */

/* Store pair rows of my tokens [t0, t1) whose owner is on my node. */
MK_DEV void moe_local_item(const struct mk_moe_kargs *a, int t0, int t1, int *q_s, int *row_s)
{
	const struct mk_moe_geom *g = &a->g;
	const int k = g->topk, n = (t1 - t0) * k;
	const int32_t *pq = (const int32_t *)(a->layout + a->lm.pair_q) + t0 * k;
	const int32_t *prow = (const int32_t *)(a->layout + a->lm.pair_row) + t0 * k;
	const size_t rb = (size_t)g->hidden * 2;

	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const int q = pq[i];
		const int local = q >= 0 && moe_node(a, q) == g->node;

		q_s[i] = q;
		row_s[i] = local ? prow[i] : -1;
	}
	__syncthreads();
	for (int i = 0; i < n; i++) {
		if (row_s[i] < 0)
			continue;
		mk_dev_copy(moe_peer_ws(a, q_s[i]) + a->w.recv_x + (size_t)row_s[i] * rb,
			    (const char *)a->x + (size_t)(t0 + i / k) * rb, rb, threadIdx.x,
			    blockDim.x, false);
	}
	moe_announce_rows(a, q_s, row_s, n);
}

/* Stage my slots [s0, s1) of the list to node b and put them to its rank with my local index. */
MK_DEV int moe_send_item(const struct mk_moe_kargs *a, int b, int s0, int s1, uint32_t *ticket)
{
	const struct mk_moe_geom *g = &a->g;
	const int k = g->topk, hi = mk_moe_entry_ints(k);
	const int32_t *list = (const int32_t *)(a->layout + a->lm.send_list) + (size_t)b * g->max_tokens;
	const int32_t *pq = (const int32_t *)(a->layout + a->lm.pair_q);
	const int32_t *prow = (const int32_t *)(a->layout + a->lm.pair_row);
	const size_t rb = (size_t)g->hidden * 2, eb = a->w.entry_bytes;
	const uint64_t src = a->ws_off + a->w.stage + ((size_t)b * g->max_tokens + s0) * eb;
	const uint64_t dst = a->ws_off + a->w.inbound + ((size_t)g->node * g->max_tokens + s0) * eb;
	char *stage = a->dc.heap + src;

	for (int sl = s0; sl < s1; sl++) {
		char *ent = stage + (size_t)(sl - s0) * eb;
		int32_t *h = (int32_t *)ent;
		const int t = list[sl];

		for (int i = threadIdx.x; i < hi; i += blockDim.x) {
			int32_t v = 0;

			if (i == 0)
				v = t;
			else if (i <= k)
				v = pq[t * k + i - 1];
			else if (i <= 2 * k)
				v = prow[t * k + i - 1 - k];
			else if (i <= 3 * k)
				v = __float_as_int(a->topk_w[t * k + i - 1 - 2 * k]);
			h[i] = v;
		}
		mk_dev_copy(ent + (size_t)hi * 4, (const char *)a->x + (size_t)t * rb, rb, threadIdx.x,
			    blockDim.x, false);
	}
	__syncthreads();
	return mk_dev_put_signal_block(&a->dc, a->rank_at[b][g->local], dst, src,
				       (uint64_t)(s1 - s0) * eb, a->sig_in + (uint32_t)g->node, ticket);
}

/* Chunk [s0, s1) of node b's cnt tokens entering through me: land, keep the headers, fan out. */
MK_DEV int moe_forward_item(const struct mk_moe_kargs *a, int b, int cnt, int s0, int s1,
				int *q_s, int *row_s)
{
	const struct mk_moe_geom *g = &a->g;
	const int k = g->topk, hi = mk_moe_entry_ints(k), src_rank = a->rank_at[b][g->local];
	const size_t rb = (size_t)g->hidden * 2, eb = a->w.entry_bytes;
	const uint64_t off = a->ws_off + a->w.inbound + ((size_t)b * g->max_tokens + s0) * eb;
	int32_t *keep = (int32_t *)(a->layout + a->lm.inbound) + ((size_t)b * g->max_tokens + s0) * hi;
	const char *in = a->dc.heap + off;
	int rc;

	/* every chunk of node b, not just this one's count: they land in any order */
	rc = moe_signal_wait(a, a->sig_in + (uint32_t)b,
			     mk_moe_chunks_landed(a->ctl->in_base[b], cnt));
	if (rc)
		return rc;
	mk_dev_land_block(&a->dc, src_rank, off, (uint64_t)(s1 - s0) * eb);
	for (int i = threadIdx.x; i < (s1 - s0) * hi; i += blockDim.x)
		keep[i] = __ldcg((const int32_t *)(in + (size_t)(i / hi) * eb) + i % hi);
	for (int i = threadIdx.x; i < (s1 - s0) * k; i += blockDim.x) {
		const int32_t *h = (const int32_t *)(in + (size_t)(i / k) * eb);
		const int q = __ldcg(h + 1 + i % k);

		q_s[i] = q;
		row_s[i] = q >= 0 && moe_node(a, q) == g->node ? __ldcg(h + 1 + k + i % k) : -1;
	}
	__syncthreads();
	for (int i = 0; i < (s1 - s0) * k; i++) {
		if (row_s[i] < 0)
			continue;
		/* past the L1: the NIC (or the landing copy) wrote these lines since this SM may
		 * have read them in an earlier call */
		mk_dev_copy(moe_peer_ws(a, q_s[i]) + a->w.recv_x + (size_t)row_s[i] * rb,
			    in + (size_t)(i / k) * eb + (size_t)hi * 4, rb, threadIdx.x, blockDim.x,
			    true);
	}
	moe_announce_rows(a, q_s, row_s, (s1 - s0) * k);
	return 0;
}

/* scratch: the dynamic shared memory (the GEMM's stages are not used by these CTAs). */
MK_DEV void moe_comm_role(const struct mk_moe_kargs *a, int *scratch)
{
	__shared__ int chunks_s[2][MK_MOE_FUSED_NODES];
	const struct mk_moe_geom *g = &a->g;
	const int nn = g->nnodes;
	const int nlocal_items = (a->ntok + MOE_LOCAL_T - 1) / MOE_LOCAL_T;
	int *q_s = scratch, *row_s = scratch + MK_MOE_CHUNK * MK_MOE_TOPK_MAX;
	uint32_t ticket = 0;
	int nsend = 0, nfwd = 0, rc = 0, put = 0;

	if (threadIdx.x < nn) {
		chunks_s[0][threadIdx.x] =
			mk_moe_chunks(((const int32_t *)(a->layout + a->lm.send_count))[threadIdx.x]);
		chunks_s[1][threadIdx.x] =
			mk_moe_chunks(((const int32_t *)(a->layout + a->lm.in_count))[threadIdx.x]);
	}
	__syncthreads();
	for (int b = 0; b < nn; b++) {
		nsend += chunks_s[0][b];
		nfwd += chunks_s[1][b];
	}
	for (;;) {
		int t = moe_ticket(&a->ctl->d_tickets), b;

		if (t >= nlocal_items + nsend + nfwd)
			break;
		if (t < nlocal_items) {
			moe_local_item(a, t * MOE_LOCAL_T, min(a->ntok, (t + 1) * MOE_LOCAL_T), q_s,
				       row_s);
			continue;
		}
		t -= nlocal_items;
		if (t < nsend) {
			for (b = 0; t >= chunks_s[0][b]; b++)
				t -= chunks_s[0][b];
			const int cnt = ((const int32_t *)(a->layout + a->lm.send_count))[b];

			rc = moe_send_item(a, b, t * MK_MOE_CHUNK, min(cnt, (t + 1) * MK_MOE_CHUNK),
					   &ticket);
			put = 1;
		} else {
			t -= nsend;
			for (b = 0; t >= chunks_s[1][b]; b++)
				t -= chunks_s[1][b];
			const int cnt = ((const int32_t *)(a->layout + a->lm.in_count))[b];

			rc = moe_forward_item(a, b, cnt, t * MK_MOE_CHUNK,
					      min(cnt, (t + 1) * MK_MOE_CHUNK), q_s, row_s);
		}
		if (rc)
			break;
	}
	/* The staging rows are written again next call: the puts must be done. */
	if (rc == 0 && put && threadIdx.x == 0)
		rc = mk_dev_quiet(&a->dc, ticket);
	moe_fail(a, rc);
}

/* ---- the kernel ---- */

MK_DEV void moe_dispatch(const struct mk_gemm_tmaps *maps, const struct mk_grouped_args *ga,
			 const struct mk_moe_kargs *a, const int b_nk)
{
	extern __shared__ unsigned char moe_dyn_smem[];
	struct mk_moe_ctl *ctl = a->ctl;
	const uint32_t cur = *(volatile uint32_t *)&ctl->d_calls + 1;
	const struct mk_moe_lhdr *hdr = (const struct mk_moe_lhdr *)(a->layout + a->lm.hdr);
	int rc;

	if (blockIdx.x == 0) {
		void *dyn = (void *)(((uintptr_t)moe_dyn_smem + 15) & ~(uintptr_t)15);

		moe_count_phase(a, cur, dyn);
		__syncthreads();
		if (threadIdx.x == 0) {
			__threadfence();
			asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(&ctl->d_ready),
				     "r"(cur)
				     : "memory");
		}
	}
	rc = moe_local_wait(a, &ctl->d_ready, cur);
	if (rc == 0 && moe_bcast(*(volatile int32_t *)&hdr->status) == MK_MOE_ST_OK) {
		if ((int)blockIdx.x < a->ncomm)
			moe_comm_role(a, (int *)(((uintptr_t)moe_dyn_smem + 15) & ~(uintptr_t)15));
		else
			mk_grouped_role(ga, maps, blockIdx.x - a->ncomm, gridDim.x - a->ncomm,
					moe_dyn_smem, b_nk);
	}
	moe_fail(a, rc);
	moe_exit(&ctl->d_exits, &ctl->d_tickets, &ctl->d_calls, cur);
}

extern "C" __global__ void __launch_bounds__(MOE_THREADS, 1)
	mk_moe_dispatch_nk(const __grid_constant__ struct mk_gemm_tmaps maps,
			   const __grid_constant__ struct mk_grouped_args ga,
			   const __grid_constant__ struct mk_moe_kargs a)
{
	moe_dispatch(&maps, &ga, &a, 1);
}

extern "C" __global__ void __launch_bounds__(MOE_THREADS, 1)
	mk_moe_dispatch_kn(const __grid_constant__ struct mk_gemm_tmaps maps,
			   const __grid_constant__ struct mk_grouped_args ga,
			   const __grid_constant__ struct mk_moe_kargs a)
{
	moe_dispatch(&maps, &ga, &a, 0);
}

extern "C" int mk_moe_dispatch_prepare(void)
{
	return cudaFuncSetAttribute((const void *)mk_moe_dispatch_nk,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    MK_GROUPED_SMEM_BYTES) == cudaSuccess &&
			       cudaFuncSetAttribute((const void *)mk_moe_dispatch_kn,
						    cudaFuncAttributeMaxDynamicSharedMemorySize,
						    MK_GROUPED_SMEM_BYTES) == cudaSuccess
		       ? 0
		       : -EIO;
}

extern "C" int mk_moe_dispatch_launch(const struct mk_moe_kargs *a, const struct mk_grouped_args *ga,
				   const struct mk_gemm_tmaps *maps, int b_nk, int grid,
				   cudaStream_t stream)
{
	void *params[3] = { (void *)maps, (void *)ga, (void *)a };

	return cudaLaunchCooperativeKernel(b_nk ? (const void *)mk_moe_dispatch_nk
					       : (const void *)mk_moe_dispatch_kn,
					  grid, MOE_THREADS, params, MK_GROUPED_SMEM_BYTES,
					  stream) == cudaSuccess
		       ? 0
		       : -EIO;
}
