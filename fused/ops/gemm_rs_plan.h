/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkGemmReduceScatter's plan (gemm_rs_plan.c), plain C so it is unit-tested on any machine.
 *
 * Ranks are (node v, local rank l) with G ranks per node and N nodes; rank_at[w * G + p] is the
 * rank of local rank p on node w. Shard q (rank q's output rows, seqpar_plan.h) is reduced in
 * two steps: within every node by the rank with q's local rank (the node sum of the G partials,
 * read through the mapped heaps), then across nodes by q itself (the other nodes' node sums,
 * put to q by its local-rank peers there). So local rank l of node v reduces the shards of
 * local rank l on every node, in its "reduce list": the other nodes' first, from node v + 1 on
 * (at any time every node sends to a different node), its own shard last (the node sums of the
 * other nodes must arrive for it, and they produce it first). Position j of the list is node
 * (v + 1 + j) mod N; each shard is worked through chunk by chunk.
 *
 * Compute order (the same on every rank of a node, so that a chunk's G partials are ready at
 * about the same time): the reduce lists of the G local ranks in step, MK_SP_BAND / G list
 * positions at a time (at least one), each band column by column; a tile that serves two chunks
 * comes with the first.
 */
#ifndef MK_FUSED_OPS_GEMM_RS_PLAN_H
#define MK_FUSED_OPS_GEMM_RS_PLAN_H

#include "fused/ops/seqpar_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The node at position j of a reduce list on node `node` (j = nnodes - 1: my own node). */
MK_SP_HD int mk_grs_list_node(int node, int nnodes, int j)
{
	return (node + 1 + j) % nnodes;
}

/* Reduce-list positions (chunks of the list's shards) per band of the compute order. */
MK_SP_HD int mk_grs_band(int nlocal)
{
	return MK_SP_BAND / nlocal > 1 ? MK_SP_BAND / nlocal : 1;
}

/*
 * order[0 .. tiles_m * tiles_n): tile ids (tm * tiles_n + tn) of node `node`'s compute order,
 * as above. 0, -ENOMEM, or -EINVAL when the lists do not cover every tile (bad rank_at).
 */
int mk_grs_tile_order(const struct mk_sp_geom *g, int node, int nnodes, int nlocal,
		      const int *rank_at, int *order);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_RS_PLAN_H */
