// SPDX-License-Identifier: Apache-2.0
/*
 * mkMoeGemmCombine's fused kernel (moe_dev.cuh: the frame), the dispatch's layout in hand:
 *
 *  - entry (CTA 0): "I started this call" to my node peers and to the ranks of other nodes with
 *    my local index (the ranks that read my expert rows or put partials into my landing area:
 *    by then this rank has finished its previous call), then the landing bases of this call;
 *  - GEMM (most CTAs): the grouped role, h times w_down into my expert rows in the workspace,
 *    once every node peer has entered this call (they read my rows of the previous one until
 *    then); each 128-row block's flag rises to the call number when all its tiles are stored;
 *  - sums (the communication CTAs, by tickets): first, for tokens of other nodes that entered
 *    my node through me at the dispatch, the node partial: the weighted sum of their rows on my
 *    node (pulled through the mapped heaps once their blocks' flags are up), rounded to bf16
 *    once and put in chunks to the token's home rank (one signal per chunk, once that rank
 *    entered); then my own tokens: my node's rows plus every other node's landed partial (read
 *    once all of that node's chunks have landed: they land in any order), summed in fp32 and
 *    stored into y.
 */
#include <errno.h>

#include "fused/ops/moe.h"
#include "fused/ops/moe_dev.cuh"

#define MOE_COLS_PER_THREAD 24 /* fp32 sums a thread keeps for hidden <= 384 x 24 = 9216 */

/* Wait (thread 0) for the block flag of row `row` at rank q to reach cur. */
MK_DEV int moe_row_wait(const struct mk_moe_kargs *a, int q, int row, uint32_t cur)
{
	const uint32_t *flag = (const uint32_t *)(moe_peer_ws(a, q) + a->w.y_flag);

	return moe_flag_wait(a, &flag[row / MK_MOE_BLK], cur);
}

/* acc[c] += w * row[col] for this thread's columns (col = threadIdx.x + c * blockDim.x). */
MK_DEV void moe_acc_row(float *acc, const __nv_bfloat16 *row, float w, int hidden)
{
#pragma unroll
	for (int c = 0; c < MOE_COLS_PER_THREAD; c++) {
		const int col = threadIdx.x + c * MOE_THREADS;

		if (col < hidden)
			acc[c] += w * __bfloat162float(__ldcg(row + col));
	}
}

MK_DEV void moe_store_row(__nv_bfloat16 *dst, const float *acc, int hidden)
{
#pragma unroll
	for (int c = 0; c < MOE_COLS_PER_THREAD; c++) {
		const int col = threadIdx.x + c * MOE_THREADS;

		if (col < hidden)
			dst[col] = __float2bfloat16_rn(acc[c]);
	}
}

/*
 * Add the rows of pairs (q_s, row_s, w_s)[0, n) that live on my node, weighted, once their
 * blocks are stored. Returns 0 or the wait's error (for the whole CTA).
 */
MK_DEV int moe_acc_node(const struct mk_moe_kargs *a, float *acc, const int *q_s,
			const int *row_s, const float *w_s, int n, uint32_t cur)
{
	const struct mk_moe_geom *g = &a->g;
	int rc = 0;

	if (threadIdx.x == 0)
		for (int i = 0; i < n && rc == 0; i++)
			if (q_s[i] >= 0 && moe_node(a, q_s[i]) == g->node)
				rc = moe_row_wait(a, q_s[i], row_s[i], cur);
	rc = moe_bcast(rc);
	if (rc)
		return rc;
	for (int i = 0; i < n; i++) {
		if (q_s[i] < 0 || moe_node(a, q_s[i]) != g->node)
			continue;
		const __nv_bfloat16 *yrows =
			(const __nv_bfloat16 *)(moe_peer_ws(a, q_s[i]) + a->w.yrows);

		moe_acc_row(acc, yrows + (size_t)row_s[i] * g->hidden, w_s[i], g->hidden);
	}
	return 0;
}

/* Node partials of node b's tokens [s0, s1) that entered through me, put to their home rank. */
MK_DEV int moe_partial_item(const struct mk_moe_kargs *a, int b, int s0, int s1, uint32_t cur,
			    uint32_t *ticket, int *q_s, int *row_s, float *w_s)
{
	const struct mk_moe_geom *g = &a->g;
	const int k = g->topk, hi = mk_moe_entry_ints(k), home = a->rank_at[b][g->local];
	const size_t rb = (size_t)g->hidden * 2;
	const int32_t *ent = (const int32_t *)(a->layout + a->lm.inbound) + (size_t)b * g->max_tokens * hi;
	const uint64_t src = a->ws_off + a->w.part + ((size_t)b * g->max_tokens + s0) * rb;
	const uint64_t dst = a->ws_off + a->w.land + ((size_t)g->node * g->max_tokens + s0) * rb;
	int rc;

	for (int sl = s0; sl < s1; sl++) {
		const int32_t *h = ent + (size_t)sl * hi;
		float acc[MOE_COLS_PER_THREAD] = { 0 };

		__syncthreads(); /* the previous token's pairs are read */
		for (int i = threadIdx.x; i < k; i += blockDim.x) {
			q_s[i] = h[1 + i];
			row_s[i] = h[1 + k + i];
			w_s[i] = __int_as_float(h[1 + 2 * k + i]);
		}
		__syncthreads();
		rc = moe_acc_node(a, acc, q_s, row_s, w_s, k, cur);
		if (rc)
			return rc;
		moe_store_row((__nv_bfloat16 *)(a->dc.heap + src) + (size_t)(sl - s0) * g->hidden, acc,
			      g->hidden);
	}
	__syncthreads();
	/* The home rank's landing area is free once it entered this call. */
	rc = moe_signal_wait(a, a->sig_enter + (uint32_t)home, cur);
	if (rc)
		return rc;
	return mk_dev_put_signal_block(&a->dc, home, dst, src, (uint64_t)(s1 - s0) * rb,
				       a->sig_land + (uint32_t)g->node, ticket);
}

/* My tokens [t0, t1): my node's rows plus the other nodes' partials, into y. */
MK_DEV int moe_token_item(const struct mk_moe_kargs *a, int t0, int t1, uint32_t cur, int *q_s,
			  int *row_s, float *w_s)
{
	const struct mk_moe_geom *g = &a->g;
	const int k = g->topk, nn = g->nnodes;
	const int32_t *pq = (const int32_t *)(a->layout + a->lm.pair_q);
	const int32_t *prow = (const int32_t *)(a->layout + a->lm.pair_row);
	const float *pw = (const float *)(a->layout + a->lm.pair_w);
	const int32_t *slot = (const int32_t *)(a->layout + a->lm.node_slot);
	const int32_t *sent = (const int32_t *)(a->layout + a->lm.send_count);
	const size_t rb = (size_t)g->hidden * 2;
	int rc;

	for (int t = t0; t < t1; t++) {
		float acc[MOE_COLS_PER_THREAD] = { 0 };

		__syncthreads();
		for (int i = threadIdx.x; i < k; i += blockDim.x) {
			q_s[i] = pq[t * k + i];
			row_s[i] = prow[t * k + i];
			w_s[i] = pw[t * k + i];
		}
		__syncthreads();
		rc = moe_acc_node(a, acc, q_s, row_s, w_s, k, cur);
		if (rc)
			return rc;
		for (int b = 0; b < nn; b++) {
			const int sl = slot[(size_t)t * nn + b];

			if (sl < 0)
				continue;
			const uint64_t off = a->ws_off + a->w.land + ((size_t)b * g->max_tokens + sl) * rb;

			/* every partial chunk of node b, not just this slot's: they land in any
			 * order */
			rc = moe_signal_wait(a, a->sig_land + (uint32_t)b,
					     mk_moe_chunks_landed(a->ctl->land_base[b], sent[b]));
			if (rc)
				return rc;
			mk_dev_land_block(&a->dc, a->rank_at[b][g->local], off, rb);
			moe_acc_row(acc, (const __nv_bfloat16 *)(a->dc.heap + off), 1.0f, g->hidden);
		}
		moe_store_row((__nv_bfloat16 *)a->y + (size_t)t * g->hidden, acc, g->hidden);
	}
	return 0;
}

MK_DEV void moe_sum_role(const struct mk_moe_kargs *a, uint32_t cur, int *scratch)
{
	__shared__ int chunks_s[MK_MOE_FUSED_NODES];
	const struct mk_moe_geom *g = &a->g;
	const int nn = g->nnodes;
	const struct mk_moe_lhdr *hdr = (const struct mk_moe_lhdr *)(a->layout + a->lm.hdr);
	const int ntok = hdr->ntok;
	const int ntok_items = (ntok + MOE_LOCAL_T - 1) / MOE_LOCAL_T;
	int *q_s = scratch, *row_s = scratch + MK_MOE_TOPK_MAX;
	float *w_s = (float *)(scratch + 2 * MK_MOE_TOPK_MAX);
	uint32_t ticket = 0;
	int npart = 0, rc = 0, put = 0;

	if (threadIdx.x < nn)
		chunks_s[threadIdx.x] =
			mk_moe_chunks(((const int32_t *)(a->layout + a->lm.in_count))[threadIdx.x]);
	__syncthreads();
	for (int b = 0; b < nn; b++)
		npart += chunks_s[b];
	for (;;) {
		int t = moe_ticket(&a->ctl->c_tickets), b;

		if (t >= npart + ntok_items)
			break;
		if (t < npart) {
			for (b = 0; t >= chunks_s[b]; b++)
				t -= chunks_s[b];
			const int cnt = ((const int32_t *)(a->layout + a->lm.in_count))[b];

			rc = moe_partial_item(a, b, t * MK_MOE_CHUNK, min(cnt, (t + 1) * MK_MOE_CHUNK),
					      cur, &ticket, q_s, row_s, w_s);
			put = 1;
		} else {
			t -= npart;
			rc = moe_token_item(a, t * MOE_LOCAL_T, min(ntok, (t + 1) * MOE_LOCAL_T), cur,
					    q_s, row_s, w_s);
		}
		if (rc)
			break;
	}
	/* The partials' rows are written again next call: the puts must be done. */
	if (rc == 0 && put && threadIdx.x == 0)
		rc = mk_dev_quiet(&a->dc, ticket);
	moe_fail(a, rc);
}

/* CTA 0: announce this call to the ranks that touch my workspace, set the landing bases. */
MK_DEV void moe_combine_enter(const struct mk_moe_kargs *a, uint32_t cur, int ok)
{
	const struct mk_moe_geom *g = &a->g;
	struct mk_moe_ctl *ctl = a->ctl;

	if (threadIdx.x == 0) {
		uint32_t ticket = 0;
		int rc = 0;

		for (int p = 0; p < g->nranks && rc == 0; p++) {
			const int peer_node = moe_node(a, p) == g->node;
			const int same_local = a->rank_at[moe_node(a, p)][g->local] == p;

			if (p == g->rank || (!peer_node && !same_local))
				continue;
			rc = mk_dev_signal(&a->dc, p, a->sig_enter + (uint32_t)g->rank, &ticket);
		}
		moe_fail(a, rc);
	}
	if (ok && threadIdx.x < g->nnodes) {
		const int b = threadIdx.x;
		const int n = ((const int32_t *)(a->layout + a->lm.send_count))[b];

		ctl->land_base[b] = ctl->land_total[b];
		ctl->land_total[b] = mk_moe_chunks_landed(ctl->land_base[b], n);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(&ctl->c_ready), "r"(cur)
			     : "memory");
	}
}

MK_DEV void moe_combine(const struct mk_gemm_tmaps *maps, const struct mk_grouped_args *ga,
			const struct mk_moe_kargs *a, const int b_nk)
{
	extern __shared__ unsigned char moe_dyn_smem[];
	struct mk_moe_ctl *ctl = a->ctl;
	const uint32_t cur = *(volatile uint32_t *)&ctl->c_calls + 1;
	const struct mk_moe_lhdr *hdr = (const struct mk_moe_lhdr *)(a->layout + a->lm.hdr);
	/* The dispatch that filled the layout decided for every rank alike. */
	const int ok = *(volatile const int32_t *)&hdr->status == MK_MOE_ST_OK;
	int rc;

	if (blockIdx.x == 0)
		moe_combine_enter(a, cur, ok);
	rc = moe_local_wait(a, &ctl->c_ready, cur);
	if (rc == 0 && ok) {
		if ((int)blockIdx.x < a->ncomm) {
			moe_sum_role(a, cur, (int *)(((uintptr_t)moe_dyn_smem + 15) & ~(uintptr_t)15));
		} else {
			/* Node peers read my rows of the previous call until they enter this one. */
			int r = 0;

			if (threadIdx.x == 0)
				for (int p = 0; p < a->g.nranks && r == 0; p++)
					if (p != a->g.rank && moe_node(a, p) == a->g.node)
						r = mk_dev_signal_wait(&a->dc, a->sig_enter + (uint32_t)p,
								       cur);
			rc = moe_bcast(r);
			if (rc == 0)
				mk_grouped_role(ga, maps, blockIdx.x - a->ncomm, gridDim.x - a->ncomm,
						moe_dyn_smem, b_nk);
		}
	}
	moe_fail(a, rc);
	moe_exit(&ctl->c_exits, &ctl->c_tickets, &ctl->c_calls, cur);
}

extern "C" __global__ void __launch_bounds__(MOE_THREADS, 1)
	mk_moe_combine_nk(const __grid_constant__ struct mk_gemm_tmaps maps,
			  const __grid_constant__ struct mk_grouped_args ga,
			  const __grid_constant__ struct mk_moe_kargs a)
{
	moe_combine(&maps, &ga, &a, 1);
}

extern "C" __global__ void __launch_bounds__(MOE_THREADS, 1)
	mk_moe_combine_kn(const __grid_constant__ struct mk_gemm_tmaps maps,
			  const __grid_constant__ struct mk_grouped_args ga,
			  const __grid_constant__ struct mk_moe_kargs a)
{
	moe_combine(&maps, &ga, &a, 0);
}

extern "C" int mk_moe_combine_prepare(void)
{
	return cudaFuncSetAttribute((const void *)mk_moe_combine_nk,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    MK_GROUPED_SMEM_BYTES) == cudaSuccess &&
			       cudaFuncSetAttribute((const void *)mk_moe_combine_kn,
						    cudaFuncAttributeMaxDynamicSharedMemorySize,
						    MK_GROUPED_SMEM_BYTES) == cudaSuccess
		       ? 0
		       : -EIO;
}

extern "C" int mk_moe_combine_launch(const struct mk_moe_kargs *a, const struct mk_grouped_args *ga,
				   const struct mk_gemm_tmaps *maps, int b_nk, int grid,
				   cudaStream_t stream)
{
	void *params[3] = { (void *)maps, (void *)ga, (void *)a };

	return cudaLaunchCooperativeKernel(b_nk ? (const void *)mk_moe_combine_nk
					       : (const void *)mk_moe_combine_kn,
					  grid, MOE_THREADS, params, MK_GROUPED_SMEM_BYTES,
					  stream) == cudaSuccess
		       ? 0
		       : -EIO;
}
