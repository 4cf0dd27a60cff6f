// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmReduceScatter's fused persistent kernel (roles, flags and signals: gemm_rs.h). Every CTA
 * has MK_GEMM_THREADS threads and the engine's shared memory, so a CTA of any role holds one SM;
 * the launch is cooperative, so every CTA is resident and waiting roles cannot starve the roles
 * they wait for. Ready flags and the chunk counters count calls (a call waits for e, e * tiles);
 * landing signals only grow (`seen`).
 */
#include <errno.h>

#include "fused/gemm/gemm_engine.cuh"
#include "fused/ops/gemm_rs.h"
#include "fused/ops/seqpar_dev.cuh"

/* Columns [c0, c0 + cols) of tile column tn. */
MK_DEV int grs_cols(const struct mk_grs_launch *l, int tn, int *c0)
{
	*c0 = tn * MK_GEMM_BN;
	return min(MK_GEMM_BN, l->n - *c0);
}

/*
 * Thread 0: my node's sum of chunk c of reduce-list position j is in my W. With node peers the
 * intra role counted all of its tiles; alone the engine's flags of the tiles it touches (all
 * columns, or column tn only when tn >= 0).
 */
MK_DEV int grs_node_sum_ready0(const struct mk_grs_launch *l, int j, int q, int c, int tn,
			       unsigned int e)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	int tm0, tm1, rc = 0;

	if (cm->nlocal > 1)
		return sp_wait0(cm, &l->row_done[j * g->nch + c], e * (unsigned int)g->tiles_n);
	mk_sp_chunk_tiles(g, q, c, &tm0, &tm1);
	for (int tm = tm0; tm <= tm1 && rc == 0; tm++) {
		for (int t = tn >= 0 ? tn : 0; t < (tn >= 0 ? tn + 1 : g->tiles_n) && rc == 0; t++)
			rc = sp_wait0(cm, &l->ready[cm->local_rank][tm * g->tiles_n + t], e);
	}
	return rc;
}

/*
 * intra: tickets (list position j, chunk c, tile column tn) over my reduce list. Waits for the
 * tiles the chunk touches on every node peer, adds the G partials. One node: the result goes
 * into C. Several: back into my W (only I read those rows of my W), then the chunk's counter.
 */
MK_DEV int grs_intra(const struct mk_grs_launch *l, unsigned int e, unsigned long long *busy)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	const int per = g->nch * g->tiles_n;
	__shared__ struct sp_srcs src_s;

	for (;;) {
		const int i = sp_ticket(&cm->ws.tickets[MK_GRS_T_INTRA]);
		const int j = i / per, c = i % per / g->tiles_n, tn = i % g->tiles_n;
		int q, r0, rows, tm0, tm1, c0, cols, rc = 0;
		unsigned long long t0;
		uint16_t *out;

		if (i >= cm->nnodes * per)
			return 0;
		q = cm->ws.remote[mk_grs_list_node(cm->node, cm->nnodes, j)];
		mk_sp_chunk_rows(g, q, c, &r0, &rows);
		mk_sp_chunk_tiles(g, q, c, &tm0, &tm1);
		cols = grs_cols(l, tn, &c0);
		if (threadIdx.x == 0) {
			for (int p = 0; p < cm->nlocal && rc == 0; p++) {
				for (int tm = tm0; tm <= tm1 && rc == 0; tm++)
					rc = sp_wait0(cm, &l->ready[p][tm * g->tiles_n + tn], e);
			}
			src_s.n = cm->nlocal;
			src_s.vol = 0;
			for (int p = 0; p < cm->nlocal; p++)
				src_s.p[p] = l->w[p] + (long long)r0 * l->n + c0;
		}
		rc = sp_share(rc);
		if (rc)
			return sp_fail(cm, rc);
		t0 = sp_now();
		out = cm->nnodes == 1 ? (uint16_t *)l->c + (long long)(r0 - q * g->ms) * l->n + c0
				      : l->w[cm->local_rank] + (long long)r0 * l->n + c0;
		sp_sum_rows(&src_s, out, l->n, rows, cols);
		if (cm->nnodes > 1) {
			__syncthreads();
			if (threadIdx.x == 0) {
				mk_fence_acq_rel_gpu(); /* the sum's stores, then the count */
				atomicAdd(&l->row_done[j * g->nch + c], 1u);
			}
		}
		*busy += sp_now() - t0;
	}
}

/*
 * send: tickets (list position j < nnodes - 1, chunk c): once the chunk is my node's sum, every
 * thread copies its share into the host mirror (when the transport needs one), then one
 * put_signal to the shard's owner, into its landing slot for my node.
 */
MK_DEV int grs_send(const struct mk_grs_launch *l, unsigned int e, unsigned long long *busy)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	const uint64_t row_bytes = (uint64_t)l->n * 2;

	for (;;) {
		const int i = sp_ticket(&cm->ws.tickets[MK_GRS_T_SEND]);
		const int j = i / g->nch, c = i % g->nch;
		int w, q, r0, rows, rc = 0;
		unsigned long long t0;
		uint64_t dst;
		uint32_t ticket;

		if (i >= (cm->nnodes - 1) * g->nch)
			return 0;
		w = mk_grs_list_node(cm->node, cm->nnodes, j);
		q = cm->ws.remote[w];
		mk_sp_chunk_rows(g, q, c, &r0, &rows);
		if (threadIdx.x == 0)
			rc = grs_node_sum_ready0(l, j, q, c, -1, e);
		rc = sp_share(rc);
		if (rc)
			return sp_fail(cm, rc);
		t0 = sp_now();
		/* my node's slot at the owner: the other nodes in order, the owner's own skipped */
		dst = l->land_off + ((uint64_t)(cm->node < w ? cm->node : cm->node - 1) * g->ms +
				     (uint64_t)c * MK_SP_CHUNK) *
					    row_bytes;
		rc = mk_dev_put_signal_block(&cm->dc, q, dst, l->w_off + (uint64_t)r0 * row_bytes,
					     (uint64_t)rows * row_bytes,
					     cm->ws.sig_land + (uint32_t)(cm->node * g->nch + c), &ticket);
		if (rc)
			return sp_fail(cm, rc);
		*busy += sp_now() - t0;
	}
}

/*
 * reduce: tickets (chunk c, tile column tn) over my own shard. Waits for my node's sum and the
 * chunk from every other node (signal words count arrivals over all calls; `seen` what earlier
 * calls consumed), adds them into C. Landed rows are read where they landed: the host mirror
 * (past the L2: the NIC rewrites those lines between calls) or the heap.
 */
MK_DEV int grs_reduce(const struct mk_grs_launch *l, unsigned int e, unsigned long long *busy)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	const int me = cm->dc.rank, j = cm->nnodes - 1;
	const char *land = (cm->dc.stage != NULL ? cm->dc.stage : cm->dc.heap) + l->land_off;
	__shared__ struct sp_srcs src_s;

	for (;;) {
		const int i = sp_ticket(&cm->ws.tickets[MK_GRS_T_REDUCE]);
		const int c = i / g->tiles_n, tn = i % g->tiles_n;
		int r0, rows, c0, cols, rc = 0;
		unsigned long long t0;

		if (i >= g->nch * g->tiles_n)
			return 0;
		mk_sp_chunk_rows(g, me, c, &r0, &rows);
		cols = grs_cols(l, tn, &c0);
		if (threadIdx.x == 0) {
			rc = grs_node_sum_ready0(l, j, me, c, tn, e);
			src_s.n = 1;
			src_s.vol = 0;
			src_s.p[0] = l->w[cm->local_rank] + (long long)r0 * l->n + c0;
			for (int nn = 0; nn < cm->nnodes && rc == 0; nn++) {
				const uint32_t sig = cm->ws.sig_land + (uint32_t)(nn * g->nch + c);
				const int slot = nn < cm->node ? nn : nn - 1;

				if (nn == cm->node)
					continue;
				rc = mk_dev_signal_wait(&cm->dc, sig,
							cm->ws.seen[sig - cm->ws.sig_base] + 1);
				src_s.vol |= 1u << src_s.n;
				src_s.p[src_s.n++] =
					(const uint16_t *)(land + (((uint64_t)slot * g->ms +
								    (uint64_t)c * MK_SP_CHUNK) *
									   l->n +
								   c0) *
									  2);
			}
		}
		rc = sp_share(rc);
		if (rc)
			return sp_fail(cm, rc);
		t0 = sp_now();
		sp_sum_rows(&src_s, (uint16_t *)l->c + (long long)c * MK_SP_CHUNK * l->n + c0, l->n,
			    rows, cols);
		*busy += sp_now() - t0;
	}
}

template <int B_NK>
__global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_grs_kernel(const __grid_constant__ struct mk_gemm_tmaps maps,
		      const __grid_constant__ struct mk_gemm_args g,
		      const __grid_constant__ struct mk_grs_launch l)
{
	extern __shared__ __align__(1024) unsigned char grs_dyn[];
	__shared__ unsigned int e_s, total_s;
	__shared__ int split_s[MK_GAR_ROLES], measure_s;
	const struct mk_sp_common *cm = &l.cm;
	unsigned long long busy[MK_GAR_ROLES] = { 0, 0, 0, 0 };
	int first, rc;

	rc = sp_begin(cm, &e_s, &total_s, split_s, &measure_s);
	/* The role this CTA starts in: CTAs are numbered compute first, then intra, send, reduce. */
	first = MK_GAR_REDUCE;
	for (int r = 0, acc = 0; r < MK_GAR_REDUCE; r++) {
		acc += split_s[r];
		if ((int)blockIdx.x < acc) {
			first = r;
			break;
		}
	}
	if (rc == 0 && first == MK_GAR_COMPUTE) {
		const unsigned long long t0 = sp_now();

		mk_gemm_role(&g, &maps, blockIdx.x, split_s[MK_GAR_COMPUTE], grs_dyn, B_NK);
		sp_after_engine();
		busy[MK_GAR_COMPUTE] += sp_now() - t0;
	}
	sp_trace(cm, 2);
	if (rc == 0 && first <= MK_GAR_INTRA && cm->nlocal > 1)
		rc = grs_intra(&l, e_s, &busy[MK_GAR_INTRA]);
	sp_trace(cm, 3);
	if (rc == 0 && first <= MK_GAR_SEND && cm->nnodes > 1)
		rc = grs_send(&l, e_s, &busy[MK_GAR_SEND]);
	sp_trace(cm, 4);
	if (rc == 0 && cm->nnodes > 1)
		rc = grs_reduce(&l, e_s, &busy[MK_GAR_REDUCE]);
	sp_trace(cm, 5);
	if (sp_end(cm, busy, measure_s))
		sp_last_out(cm, e_s, total_s, split_s, measure_s);
}

extern "C" int mk_grs_prepare(void)
{
	return sp_prepare((const void *)mk_grs_kernel<1>, (const void *)mk_grs_kernel<0>);
}

extern "C" int mk_grs_launch(const struct mk_grs_launch *l, cudaStream_t stream)
{
	const int alone = l->cm.nlocal == 1 && l->cm.nnodes == 1;
	struct mk_gemm_args g;
	int grid = 0;

	for (int r = 0; r < MK_GAR_ROLES; r++)
		grid += l->cm.split.sms[r]; /* the split fills my share of the SMs */
	if (l->cm.split.sms[MK_GAR_COMPUTE] < 1)
		return -EINVAL;
	/* One rank in all: the product is the result, stored straight into C. */
	mk_gemm_args_init(&g, l->m, l->n, l->k, l->b_layout,
			  alone ? l->c : (void *)l->w[l->cm.local_rank]);
	if (!alone) {
		g.sched.order = l->order;
		g.epi.ready = l->ready[l->cm.local_rank];
		g.epi.ready_scope = MK_GEMM_FLAG_SYS;
	}
	return sp_launch(l->b_layout == MK_GEMM_B_NK ? (const void *)mk_grs_kernel<1>
						     : (const void *)mk_grs_kernel<0>,
			 l->a, l->b, &g, l, grid, stream);
}
