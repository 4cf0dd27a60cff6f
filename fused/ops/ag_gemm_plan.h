/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkAllGatherGemm's plan (ag_gemm_plan.c), plain C so it is unit-tested on any machine.
 *
 * Ranks are (node v, local rank l), G ranks per node, N nodes, rank_at[w * G + p] the rank of
 * local rank p on node w. Every rank gathers the whole A (M x K) in a buffer of its symmetric
 * heap, chunk by chunk (seqpar_plan.h), and the GEMM engine reads it from there once the chunks
 * of a tile row are in. Stages, in the order CTAs take their tickets (every CTA starts in one and
 * goes on through the later ones, ending in compute):
 *   copy:    my shard's chunks into my buffer and into every node peer's (stores through the
 *            mapped heaps), then their arrival flags; tickets (chunk c, destination d) with d = 0
 *            my own buffer and d > 0 local rank (l + d) mod G, chunk-major;
 *   send:    (N > 1) each chunk of my shard, once in my buffer, put to my local rank's peer on
 *            every other node (the shard crosses the network once per node), nodes v + 1 on;
 *   forward: (N > 1) each chunk landing at me (from my local rank's peer on node v - dn, dn =
 *            1 .. N - 1, chunk-major: the order the senders send in) is copied on to my node
 *            peers, then its arrival flags;
 *   gather:  (aGathered given) every other shard's chunk, once arrived, copied out of the heap;
 *   compute: the engine, dynamic tickets over the compute order; its producer waits until the
 *            tile row's chunks are all in (a_ready[tm] >= want[tm]) before loading A.
 * Arrival order at rank (v, l), which the compute order follows: my shard; my node peers'
 * shards chunk by chunk; the other nodes' shards chunk by chunk, nodes v - 1, v - 2, ...,
 * within a node the shard landing at me first, then the ones my node peers forward.
 */
#ifndef MK_FUSED_OPS_AG_GEMM_PLAN_H
#define MK_FUSED_OPS_AG_GEMM_PLAN_H

#include "fused/ops/seqpar_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* want[tm] (tiles_m entries) = the chunks tile row tm touches: a tile row's A is in when its
 * arrival flag counted that many (1 when shards are multiples of 128 rows). */
void mk_agg_row_want(const struct mk_sp_geom *g, unsigned int *want);

/*
 * arrival[0 .. nranks * nch): chunk ids (shard * nch + c) in the order they arrive at rank
 * (node, local), as above; my shard's nch chunks first. 0, or -EINVAL for a bad layout.
 */
int mk_agg_arrival(const struct mk_sp_geom *g, int node, int nnodes, int local, int nlocal,
		   const int *rank_at, int *arrival);

/*
 * order[0 .. tiles_m * tiles_n): tile ids, tile rows in the order their last chunk arrives
 * (`arrival` as above, `want` from mk_agg_row_want), MK_SP_BAND rows at a time column by
 * column. 0, -ENOMEM, or -EINVAL when `arrival` does not complete every tile row.
 */
int mk_agg_tile_order(const struct mk_sp_geom *g, const int *arrival, const unsigned int *want,
		      int *order);

/*
 * The unfused path's pipeline: ncclAllGather + one GEMM becomes P all-gathers of a piece of
 * every shard (piece p: rows mk_agg_pipe_rows of each shard, gathered rank by rank into a
 * staging area) on a side stream, while the caller's stream runs the GEMM of my own shard (it
 * needs nothing gathered) and then, as each piece lands, the GEMM of the other shards' rows of
 * that piece. The same collective (all-gathers keep NCCL's ring and channels; point-to-point
 * sends over a network get fewer) and the same GEMM as the baseline, overlapped: it saves up to
 * the GEMM's time where the collective is longer, and costs P - 1 more collective launches and
 * nranks x P smaller GEMMs, so by default it runs only where a shard's GEMM is at least
 * MK_AGG_PIPE_MIN_FLOP. `knob` (MKERNEL_AG_GEMM_PIPELINE): 1 always with several ranks, 0
 * never, -1 that rule.
 */
#define MK_AGG_PIPE_MIN_FLOP (1ull << 34) /* ~17 GFLOP: tens of microseconds on a Hopper GPU */
#define MK_AGG_PIPE_PIECES   4		  /* at most; pieces of at least MK_AGG_PIPE_ROWS rows */
#define MK_AGG_PIPE_ROWS     128

static inline int mk_agg_pipe_pick(int nranks, int m, int n, int k, long long knob)
{
	const unsigned long long shard_flop = nranks > 0 ? 2ull * (unsigned long long)(m / nranks) *
								   (unsigned long long)n *
								   (unsigned long long)k
							 : 0;

	if (nranks < 2 || knob == 0)
		return 0;
	return knob > 0 || shard_flop >= MK_AGG_PIPE_MIN_FLOP;
}

/* How many pieces a shard of `ms` rows is gathered in: 1 .. MK_AGG_PIPE_PIECES. */
static inline int mk_agg_pipe_pieces(int ms)
{
	const int p = ms / MK_AGG_PIPE_ROWS;

	return p < 1 ? 1 : p > MK_AGG_PIPE_PIECES ? MK_AGG_PIPE_PIECES : p;
}

/* Piece p of `pieces`: the shard's rows [*row0, *row0 + *rows), as even as rows allow. */
static inline void mk_agg_pipe_rows(int ms, int pieces, int p, int *row0, int *rows)
{
	*row0 = (int)((long long)ms * p / pieces);
	*rows = (int)((long long)ms * (p + 1) / pieces) - *row0;
}

/* Ticket i of the copy stage: chunk *c to local rank (local + *d) mod nlocal. */
MK_SP_HD void mk_agg_copy_ticket(int i, int nlocal, int *c, int *d)
{
	*c = i / nlocal;
	*d = i % nlocal;
}

/* Ticket i of the forward stage: chunk *c from node (node - *dn) mod nnodes, *dn in 1 .. N-1. */
MK_SP_HD void mk_agg_forward_ticket(int i, int nnodes, int *c, int *dn)
{
	*c = i / (nnodes - 1);
	*dn = 1 + i % (nnodes - 1);
}

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_AG_GEMM_PLAN_H */
