// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllGatherGemm's fused persistent kernel (stages and flags: ag_gemm.h). Every CTA has
 * MK_GEMM_THREADS threads and the engine's shared memory, so a CTA of any stage holds one SM;
 * the launch is cooperative, so every CTA is resident and a stage that waits cannot starve the
 * stage it waits for. Stages run in the order copy, send, forward, gather, compute; a CTA that
 * starts in one goes on through the later ones, and the copy stage always has a CTA, so every
 * piece of communication is taken by a CTA that waits only for earlier stages.
 */
#include <errno.h>

#include "fused/gemm/gemm_engine.cuh"
#include "fused/ops/ag_gemm.h"
#include "fused/ops/seqpar_dev.cuh"

/* The stages a CTA starting in each policy role goes through first. */
enum { AGG_COPY, AGG_SEND, AGG_FORWARD, AGG_COMPUTE };

MK_DEV uint64_t agg_row_bytes(const struct mk_agg_launch *l)
{
	return (uint64_t)l->k * 2;
}

/*
 * copy: tickets (chunk c, destination d), my own buffer first (d = 0). The chunk of my shard goes
 * from aShard into G of local rank (l + d) mod G (stores through the mapped heap) and, with
 * d = 0, into aGathered; then the destination's arrival flags of the tile rows it touches and,
 * with d = 0, my own "chunk in G" count the send stage waits for.
 */
MK_DEV int agg_copy(const struct mk_agg_launch *l, unsigned long long *busy)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	const uint64_t rb = agg_row_bytes(l);

	for (;;) {
		const int i = sp_ticket(&cm->ws.tickets[MK_AGG_T_COPY]);
		int c, d, p, r0, rows, tm0, tm1;
		unsigned long long t0;
		const char *src;

		if (i >= g->nch * cm->nlocal)
			return 0;
		mk_agg_copy_ticket(i, cm->nlocal, &c, &d);
		p = (cm->local_rank + d) % cm->nlocal;
		mk_sp_chunk_rows(g, cm->dc.rank, c, &r0, &rows);
		mk_sp_chunk_tiles(g, cm->dc.rank, c, &tm0, &tm1);
		src = (const char *)l->a_shard + (uint64_t)c * MK_SP_CHUNK * rb;
		t0 = sp_now();
		mk_dev_copy((char *)l->gbuf[p] + (uint64_t)r0 * rb, src, (uint64_t)rows * rb,
			    threadIdx.x, blockDim.x, false);
		if (d == 0 && l->a_gathered != NULL)
			mk_dev_copy((char *)l->a_gathered + (uint64_t)r0 * rb, src,
				    (uint64_t)rows * rb, threadIdx.x, blockDim.x, false);
		__syncthreads();
		if (threadIdx.x == 0) {
			sp_raise0(l->a_ready[p], tm0, tm1);
			if (d == 0)
				mk_red_release_sys_add_u32(&l->mine_done[c], 1);
		}
		*busy += sp_now() - t0;
	}
}

/*
 * send: tickets (chunk c) of my shard. Once the chunk is in my G, every thread copies its share
 * into the host mirror (when the transport needs one), then thread 0 puts it with a signal to my
 * local rank's peer on every other node, nodes v + 1 on, at the same offset of its G.
 */
MK_DEV int agg_send(const struct mk_agg_launch *l, unsigned int e, unsigned long long *busy)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	const uint64_t rb = agg_row_bytes(l);

	for (;;) {
		const int c = sp_ticket(&cm->ws.tickets[MK_AGG_T_SEND]);
		int r0, rows, rc = 0;
		unsigned long long t0;
		uint64_t off, bytes;

		if (c >= g->nch)
			return 0;
		mk_sp_chunk_rows(g, cm->dc.rank, c, &r0, &rows);
		off = l->gbuf_off + (uint64_t)r0 * rb;
		bytes = (uint64_t)rows * rb;
		if (threadIdx.x == 0)
			rc = sp_wait0(cm, &l->mine_done[c], e);
		rc = sp_share(rc);
		if (rc)
			return sp_fail(cm, rc);
		t0 = sp_now();
		mk_dev_mirror_out(&cm->dc, off, bytes, threadIdx.x, blockDim.x);
		__syncthreads();
		if (threadIdx.x == 0) {
			mk_fence_acq_rel_sys();
			for (int dn = 1; dn < cm->nnodes && rc == 0; dn++) {
				const int w = (cm->node + dn) % cm->nnodes;
				uint32_t ticket;

				rc = mk_dev_put_cmd(&cm->dc, MK_CMD_PUT_SIGNAL, cm->ws.remote[w], off,
						    off, bytes,
						    cm->ws.sig_land + (uint32_t)(cm->node * g->nch + c),
						    &ticket);
			}
		}
		rc = sp_share(rc);
		if (rc)
			return sp_fail(cm, rc);
		*busy += sp_now() - t0;
	}
}

/*
 * forward: tickets (chunk c, node distance dn) over the chunks landing at me, chunk-major (the
 * order senders send in). Waits for the chunk's signal, copies it out of the host mirror (when
 * it came through one), raises my arrival flags, then copies it on to every node peer's G and
 * raises theirs.
 */
MK_DEV int agg_forward(const struct mk_agg_launch *l, unsigned long long *busy)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	const uint64_t rb = agg_row_bytes(l);

	for (;;) {
		const int i = sp_ticket(&cm->ws.tickets[MK_AGG_T_FORWARD]);
		int c, dn, s, r0, rows, tm0, tm1, rc = 0;
		unsigned long long t0;
		uint64_t off, bytes;
		uint32_t sig;

		if (i >= g->nch * (cm->nnodes - 1))
			return 0;
		mk_agg_forward_ticket(i, cm->nnodes, &c, &dn);
		s = cm->ws.remote[(cm->node - dn + cm->nnodes) % cm->nnodes];
		mk_sp_chunk_rows(g, s, c, &r0, &rows);
		mk_sp_chunk_tiles(g, s, c, &tm0, &tm1);
		off = l->gbuf_off + (uint64_t)r0 * rb;
		bytes = (uint64_t)rows * rb;
		sig = cm->ws.sig_land +
		      (uint32_t)(((cm->node - dn + cm->nnodes) % cm->nnodes) * g->nch + c);
		if (threadIdx.x == 0)
			rc = mk_dev_signal_wait(&cm->dc, sig, cm->ws.seen[sig - cm->ws.sig_base] + 1);
		rc = sp_share(rc);
		if (rc)
			return sp_fail(cm, rc);
		t0 = sp_now();
		mk_dev_land_block(&cm->dc, s, off, bytes);
		for (int d = 0; d < cm->nlocal; d++) {
			const int p = (cm->local_rank + d) % cm->nlocal;

			if (d > 0) {
				/* past the L1: the NIC may have written my G (no host mirror) */
				mk_dev_copy((char *)l->gbuf[p] + (uint64_t)r0 * rb,
					    (const char *)l->gbuf[cm->local_rank] + (uint64_t)r0 * rb,
					    bytes, threadIdx.x, blockDim.x, true);
				__syncthreads();
			}
			if (threadIdx.x == 0)
				sp_raise0(l->a_ready[p], tm0, tm1);
		}
		*busy += sp_now() - t0;
	}
}

/*
 * gather: tickets over every other shard's chunks in arrival order. Once the tile rows the chunk
 * touches are complete in my G (which includes the chunk), it is copied into aGathered.
 */
MK_DEV int agg_gather(const struct mk_agg_launch *l, unsigned long long *busy)
{
	const struct mk_sp_common *cm = &l->cm;
	const struct mk_sp_geom *g = &cm->geom;
	const uint64_t rb = agg_row_bytes(l);

	for (;;) {
		const int i = sp_ticket(&cm->ws.tickets[MK_AGG_T_GATHER]);
		int chunk, r0, rows, tm0, tm1, rc = 0;
		unsigned long long t0;

		if (i >= (g->nranks - 1) * g->nch)
			return 0;
		chunk = l->arrival[g->nch + i];
		mk_sp_chunk_rows(g, chunk / g->nch, chunk % g->nch, &r0, &rows);
		mk_sp_chunk_tiles(g, chunk / g->nch, chunk % g->nch, &tm0, &tm1);
		if (threadIdx.x == 0) {
			for (int tm = tm0; tm <= tm1 && rc == 0; tm++)
				rc = sp_wait0(cm, &l->a_ready[cm->local_rank][tm], l->want[tm]);
		}
		rc = sp_share(rc);
		if (rc)
			return sp_fail(cm, rc);
		t0 = sp_now();
		mk_dev_copy((char *)l->a_gathered + (uint64_t)r0 * rb,
			    (const char *)l->gbuf[cm->local_rank] + (uint64_t)r0 * rb,
			    (uint64_t)rows * rb, threadIdx.x, blockDim.x, true);
		*busy += sp_now() - t0;
	}
}

template <int B_NK>
__global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_agg_kernel(const __grid_constant__ struct mk_gemm_tmaps maps,
		      const __grid_constant__ struct mk_gemm_args g,
		      const __grid_constant__ struct mk_agg_launch l)
{
	extern __shared__ __align__(1024) unsigned char agg_dyn[];
	__shared__ unsigned int e_s, total_s;
	__shared__ int split_s[MK_GAR_ROLES], measure_s;
	const struct mk_sp_common *cm = &l.cm;
	const int b = blockIdx.x;
	unsigned long long busy[MK_GAR_ROLES] = { 0, 0, 0, 0 };
	int stage, rc;

	rc = sp_begin(cm, &e_s, &total_s, split_s, &measure_s);
	/* CTAs are numbered copy (role intra), send, forward (role reduce), then compute. */
	stage = b < split_s[MK_GAR_INTRA]			? AGG_COPY
		: b < split_s[MK_GAR_INTRA] + split_s[MK_GAR_SEND] ? AGG_SEND
		: b < split_s[MK_GAR_INTRA] + split_s[MK_GAR_SEND] + split_s[MK_GAR_REDUCE]
			? AGG_FORWARD
			: AGG_COMPUTE;
	if (rc == 0 && stage <= AGG_COPY)
		rc = agg_copy(&l, &busy[MK_GAR_INTRA]);
	sp_trace(cm, 2);
	if (rc == 0 && stage <= AGG_SEND && cm->nnodes > 1)
		rc = agg_send(&l, e_s, &busy[MK_GAR_SEND]);
	sp_trace(cm, 3);
	if (rc == 0 && stage <= AGG_FORWARD && cm->nnodes > 1)
		rc = agg_forward(&l, &busy[MK_GAR_REDUCE]);
	sp_trace(cm, 4);
	if (rc == 0 && stage <= AGG_FORWARD && l.a_gathered != NULL)
		rc = agg_gather(&l, &busy[MK_GAR_REDUCE]);
	sp_trace(cm, 5);
	if (rc == 0) {
		const unsigned long long t0 = sp_now();

		mk_gemm_role(&g, &maps, b, (int)gridDim.x, agg_dyn, B_NK);
		sp_after_engine();
		busy[MK_GAR_COMPUTE] += sp_now() - t0;
	}
	sp_trace(cm, 6);
	if (sp_end(cm, busy, measure_s)) {
		/* Every arrival of this call was counted (the engine waited for all of them): zero
		 * the flags before the call count that lets node peers write the next call's. */
		for (int tm = threadIdx.x; tm < cm->geom.tiles_m; tm += blockDim.x)
			l.a_ready[cm->local_rank][tm] = 0;
		sp_last_out(cm, e_s, total_s, split_s, measure_s);
	}
}

extern "C" int mk_agg_prepare(void)
{
	return sp_prepare((const void *)mk_agg_kernel<1>, (const void *)mk_agg_kernel<0>);
}

extern "C" int mk_agg_launch(const struct mk_agg_launch *l, cudaStream_t stream)
{
	struct mk_gemm_args g;
	int grid = 0;

	for (int r = 0; r < MK_GAR_ROLES; r++)
		grid += l->cm.split.sms[r]; /* the split fills my share of the SMs */
	if (l->cm.split.sms[MK_GAR_INTRA] < 1)
		return -EINVAL; /* the copy stage needs a CTA of its own (ag_gemm_plan.h) */
	/* The engine reads A from my gather buffer once each tile row's chunks are in. */
	mk_gemm_args_init(&g, l->m, l->n, l->k, l->b_layout, l->c);
	g.sched.order = l->order;
	g.sched.counter = &l->cm.ws.tickets[MK_AGG_T_COMPUTE];
	g.sched.a_wait.ready = l->a_ready[l->cm.local_rank];
	g.sched.a_wait.want = l->want;
	g.sched.a_wait.error = l->cm.ws.error;
	g.sched.a_wait.timeout_ns = l->cm.ws.timeout_ns;
	return sp_launch(l->b_layout == MK_GEMM_B_NK ? (const void *)mk_agg_kernel<1>
						     : (const void *)mk_agg_kernel<0>,
			 l->gbuf[l->cm.local_rank], l->b, &g, l, grid, stream);
}
