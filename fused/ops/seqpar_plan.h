/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What mkGemmReduceScatter and mkAllGatherGemm share of their plans (plain C, unit-tested on
 * any machine; the inline parts are also compiled into the kernels):
 *
 *   shards:  rank r's rows of the M x N output (GEMM + reduce-scatter) or of the gathered M x K
 *            A (all-gather + GEMM) are [r ms, (r + 1) ms), ms = M / nranks;
 *   chunks:  what moves between ranks: 128 rows of one shard (the last chunk of a shard may be
 *            shorter), chunk c of shard s = rows [s ms + 128 c, s ms + min(128 (c + 1), ms));
 *   tiles:   the GEMM engine's 128 x 256 output tiles, tile row tm = rows [128 tm, 128 tm + 128).
 *            When ms is not a multiple of 128 a tile row straddles two (or, for ms < 128, more)
 *            chunks: the ops wait for every chunk a tile row touches (all-gather) or for every
 *            tile row a chunk touches (reduce-scatter), so the engine needs no notion of shards.
 *
 * The split: the policy engine's answer through mk_gar_split_plan (the same rules file,
 * MKERNEL_TUNER_SM_SPLIT and MKERNEL_ROLE_SPLIT as mkGemmAllReduce), then mk_sp_split_fix for
 * the roles each op uses.
 */
#ifndef MK_FUSED_OPS_SEQPAR_PLAN_H
#define MK_FUSED_OPS_SEQPAR_PLAN_H

#include "fused/ops/gemm_allreduce_plan.h"

#ifdef __CUDACC__
#define MK_SP_HD static inline __host__ __device__
#else
#define MK_SP_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MK_SP_TILE_M 128 /* the engine's tile (MK_GEMM_BM x MK_GEMM_BN; the kernels check) */
#define MK_SP_TILE_N 256
#define MK_SP_CHUNK  128 /* rows of a shard per chunk: one tile row when shards are aligned */
#define MK_SP_BAND   8	 /* tile rows the compute order works through column by column */

struct mk_sp_geom {
	int m, n;	      /* the whole product: M x N (reduce-scatter) or gathered M x N */
	int nranks;	      /* shards */
	int ms;		      /* rows per shard, M / nranks */
	int nch;	      /* chunks per shard, ceil(ms / MK_SP_CHUNK) */
	int tiles_m, tiles_n; /* engine tiles */
};

/* The geometry of an M x N product over nranks shards. 0, or -EINVAL when M % nranks != 0 or a
 * size is < 1. */
int mk_sp_geom_init(struct mk_sp_geom *g, int m, int n, int nranks);

/* Rows [*r0, *r0 + *rows) of chunk c of shard s. */
MK_SP_HD void mk_sp_chunk_rows(const struct mk_sp_geom *g, int s, int c, int *r0, int *rows)
{
	const int left = g->ms - c * MK_SP_CHUNK;

	*r0 = s * g->ms + c * MK_SP_CHUNK;
	*rows = left < MK_SP_CHUNK ? left : MK_SP_CHUNK;
}

/* Tile rows [*tm0, *tm1] (inclusive) that chunk c of shard s touches. */
MK_SP_HD void mk_sp_chunk_tiles(const struct mk_sp_geom *g, int s, int c, int *tm0, int *tm1)
{
	int r0, rows;

	mk_sp_chunk_rows(g, s, c, &r0, &rows);
	*tm0 = r0 / MK_SP_TILE_M;
	*tm1 = (r0 + rows - 1) / MK_SP_TILE_M;
}

/*
 * Which roles an op uses, from the split mk_gar_split_plan made for mkGemmAllReduce's layout
 * rules: roles with used[r] == 0 give their CTAs (and bounds) to compute; role `needed` (> 0)
 * keeps at least one CTA (the all-gather's first stage, which every later stage and the GEMM
 * wait for and which no other CTA passes through): where the layout rule dropped it, it gets a
 * 32nd of the share (at least one) from compute and the controller may take it to a quarter.
 * 0, or -EINVAL when no CTA is left for compute.
 */
int mk_sp_split_fix(struct mk_gar_split *s, const int used[MK_GAR_ROLES], int needed);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_SEQPAR_PLAN_H */
