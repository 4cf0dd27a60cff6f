/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Planning of mkMoeDispatchGemm / mkMoeGemmCombine in plain C: the geometry of an expert-parallel
 * layer on a comm, where every (token, slot) pair goes, the `layout` buffer the dispatch fills
 * and the combine reads, and the fused kernels' symmetric-heap workspace. The MK_MOE_HD
 * functions compile for the host (the unfused path's planner, unit tests) and the device (the
 * fused kernels), so what the tests check is what the GPU computes.
 *
 * Placement of pairs. Rank q owns experts [q E/n, (q+1) E/n). Its received rows (the grouped
 * GEMM's A, out, h) are grouped by local expert; inside an expert by source rank s; inside a
 * source in the source's (token, slot) order. With cnt[s][e] the pairs of rank s for expert e:
 *   recv_off_q[l] = sum over experts e' of q below l of sum_s cnt[s][e'],
 *   row of rank s's i-th pair for expert e = recv_off_q[e - q E/n] + sum_{s' < s} cnt[s'][e] + i.
 * Every rank can compute every row once it holds the count matrix (the "counts first" step).
 *
 * Hierarchy (fused path). A token of rank s with experts on another node B travels once to B,
 * to the rank of B with s's local index (its "entry" rank there), which stores it into every
 * destination row on B. The combine mirrors it: each node sums its rows of a token first (at
 * that entry rank, or at s itself for s's own node) and one partial per node travels back.
 * Tokens s sends to node B are numbered in token order: slot = node_slot[t][B].
 */
#ifndef MK_FUSED_OPS_MOE_PLAN_H
#define MK_FUSED_OPS_MOE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MK_MOE_HD static __host__ __device__ __forceinline__
#else
#define MK_MOE_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MK_MOE_TOPK_MAX	   16 /* = MK_MOE_MAX_TOPK of mkernel.h */
#define MK_MOE_FUSED_RANKS 64 /* the fused kernels' limits (kernel-parameter tables) */
#define MK_MOE_FUSED_NODES 16
#define MK_MOE_CHUNK	   32  /* tokens per inter-node put (one signal each) */
#define MK_MOE_BLK	   128 /* rows per readiness block of the received rows */

struct mk_moe_geom {
	int nranks, rank;
	int nnodes, nlocal, node, local; /* uniform nodes (the fused path's rule) */
	int ne, eloc, topk;
	int hidden, inter;
	int max_tokens, max_recv;
	int w_nk; /* weights are N x K (nn.Linear) */
};

/* ---- the layout buffer (device; the dispatch fills it, the combine reads it) ---- */

/* Fixed header, after recv_off. */
struct mk_moe_lhdr {
	int32_t ntok;	    /* tokens of this rank in the dispatch */
	int32_t total_recv; /* rows of out on this rank */
	int32_t status;	    /* 0 ok; MK_MOE_ST_* when the dispatch moved nothing */
	int32_t needed;	    /* largest rows any rank needed (capacity message) */
	int32_t bad;	    /* first bad (token * topk + slot) of the lowest bad rank, or -1 */
	int32_t bad_rank;   /* that rank, or -1 */
	int32_t bad_id;	    /* the id found there */
	int32_t path;	    /* MK_MOE_PATH_* that filled the layout */
};

enum { MK_MOE_ST_OK = 0, MK_MOE_ST_BAD_ID = 1, MK_MOE_ST_OVERFLOW = 2, MK_MOE_ST_ERROR = 3 };
enum { MK_MOE_PATH_FUSED = 1, MK_MOE_PATH_UNFUSED = 2 };

/* Byte offsets of the layout's regions. */
struct mk_moe_lmap {
	size_t recv_off;    /* int32 [eloc + 1] (documented: first in the buffer) */
	size_t hdr;	    /* struct mk_moe_lhdr */
	size_t pair_q;	    /* int32 [max_tokens x topk]: rank of the pair's expert, -1 none */
	size_t pair_row;    /* int32 [max_tokens x topk]: the pair's row there */
	size_t pair_w;	    /* float [max_tokens x topk]: its weight */
	size_t node_slot;   /* int32 [max_tokens x nnodes]: slot in my list to node B, -1 */
	size_t send_list;   /* int32 [nnodes x max_tokens]: token of slot */
	size_t send_count;  /* int32 [nnodes]: tokens I send to node B (0 for mine) */
	size_t in_count;    /* int32 [nnodes]: tokens entering node through me from node A */
	size_t inbound;	    /* [nnodes x max_tokens] entries (mk_moe_entry_ints each) */
	size_t unf_pos;	    /* int32 [max_tokens x topk]: unfused: pair's row in the exchange */
	size_t unf_count;   /* int32 [2 x nranks]: unfused: rows sent to / received from rank */
	size_t unf_scatter; /* int32 [max_recv]: unfused: exchange row -> received row */
	size_t bytes;
};

/* An entry header: token, then per slot rank, row, weight bits; padded to 16 bytes. */
MK_MOE_HD int mk_moe_entry_ints(int topk)
{
	return (1 + 3 * topk + 3) & ~3;
}

MK_MOE_HD size_t mk_moe_align(size_t v)
{
	return (v + 255) & ~(size_t)255;
}

/* ---- the fused kernels' workspace in the symmetric heap (same offsets on every rank) ---- */

struct mk_moe_wmap {
	size_t cnt;	 /* int32 [2][nranks][cnt_ints]: counts per expert, per node, bad */
	size_t recv_x;	 /* bf16 [max_recv][hidden]: dispatch rows (the up GEMM's A) */
	size_t recv_blk; /* u32 [nblk]: rows landed per block of recv_x */
	size_t inbound;	 /* [nnodes][max_tokens] x (entry header + hidden row) */
	size_t stage;	 /* the same, what I send to node B */
	size_t yrows;	 /* bf16 [max_recv][hidden]: combine GEMM output (node peers read) */
	size_t y_flag;	 /* u32 [nblk]: call number once a block of yrows is complete */
	size_t part;	 /* bf16 [nnodes][max_tokens][hidden]: node partials I send */
	size_t land;	 /* bf16 [nnodes][max_tokens][hidden]: partials for my tokens */
	size_t ctl;	 /* struct mk_moe_ctl */
	size_t blk_cnt;	 /* u32 [nblk]: combine, GEMM tiles x rows stored per block (local) */
	size_t bytes;
	int cnt_ints, nblk;
	size_t entry_bytes; /* header + row */
};

/* Words only this rank's kernels touch. */
struct mk_moe_ctl {
	uint32_t d_calls, d_cur, d_ready, d_tickets, d_exits;
	uint32_t c_calls, c_cur, c_ready, c_tickets, c_exits;
	uint32_t in_total[MK_MOE_FUSED_NODES], in_base[MK_MOE_FUSED_NODES];
	uint32_t land_total[MK_MOE_FUSED_NODES], land_base[MK_MOE_FUSED_NODES];
};

/* ---- placement, shared by host and device ---- */

MK_MOE_HD int mk_moe_owner(const struct mk_moe_geom *g, int e)
{
	return e / g->eloc;
}

/* Received rows of local expert l (< eloc) on rank q summed over sources: cnt is [nranks][ne]
 * with row stride `stride` ints. */
MK_MOE_HD int mk_moe_expert_rows(const int32_t *cnt, size_t stride, int nranks, int e)
{
	int s, rows = 0;

	for (s = 0; s < nranks; s++)
		rows += cnt[(size_t)s * stride + e];
	return rows;
}

/* recv_off of rank q: [eloc + 1]; returns the total. */
MK_MOE_HD int mk_moe_recv_off(const struct mk_moe_geom *g, const int32_t *cnt, size_t stride, int q,
			      int32_t *off)
{
	int l, total = 0;

	for (l = 0; l < g->eloc; l++) {
		off[l] = total;
		total += mk_moe_expert_rows(cnt, stride, g->nranks, q * g->eloc + l);
	}
	off[g->eloc] = total;
	return total;
}

/* First row at its owner of rank s's pairs for expert e. */
MK_MOE_HD int mk_moe_pair_base(const struct mk_moe_geom *g, const int32_t *cnt, size_t stride,
			       int s, int e)
{
	const int q = mk_moe_owner(g, e);
	int l, sp, base = 0;

	for (l = q * g->eloc; l < e; l++)
		base += mk_moe_expert_rows(cnt, stride, g->nranks, l);
	for (sp = 0; sp < s; sp++)
		base += cnt[(size_t)sp * stride + e];
	return base;
}

/* Rows of [0, total) in readiness block b. */
MK_MOE_HD int mk_moe_blk_rows(int total, int b)
{
	const int lo = b * MK_MOE_BLK;

	return total - lo >= MK_MOE_BLK ? MK_MOE_BLK : (total > lo ? total - lo : 0);
}

/* Chunks of n tokens. */
MK_MOE_HD int mk_moe_chunks(int n)
{
	return (n + MK_MOE_CHUNK - 1) / MK_MOE_CHUNK;
}

/*
 * The value of a node's chunk signal word (tokens entering through me at the dispatch, partials
 * landing at the combine) at which any chunk of this call may be read: base (the word's value
 * before the call) plus all n tokens' chunks. The word counts chunks, not which ones: they are
 * put by different CTAs, so they enter the command queue (and may cross the network) in any
 * order, and base + chunk + 1 can be reached while that very chunk is still missing. Reading it
 * then fans out garbage headers: its rows are never stored and the GEMM waits for them forever.
 */
MK_MOE_HD uint32_t mk_moe_chunks_landed(uint32_t base, int n)
{
	return base + (uint32_t)mk_moe_chunks(n);
}

/* ---- host side (moe_plan.c) ---- */

/* Fill g from the config; -EINVAL and *why when the comm cannot take it. */
int mk_moe_geom_init(struct mk_moe_geom *g, int nranks, int rank, int nnodes, int nlocal, int node,
		     int local, int ne, int topk, size_t hidden, size_t inter, size_t max_tokens,
		     size_t max_recv, int w_nk, const char **why);

void mk_moe_lmap_init(const struct mk_moe_geom *g, struct mk_moe_lmap *m);

/*
 * 1 when a and b move tokens alike (every field but inter): the layout, the workspace and the
 * exchange do not depend on the expert width, and a gated MLP's combine takes h of half the
 * width of its dispatch's out (SwiGLU: up N = 2 I, down K = I).
 */
int mk_moe_same_exchange(const struct mk_moe_geom *a, const struct mk_moe_geom *b);
void mk_moe_wmap_init(const struct mk_moe_geom *g, struct mk_moe_wmap *m);

/* Rows the worst routing could send to one rank: nranks x max_tokens x min(topk, eloc). */
long long mk_moe_worst_recv(const struct mk_moe_geom *g);

/*
 * Count this rank's pairs per expert (cnt[ne]). Returns the number of ids outside [-1, ne);
 * *first_bad gets the first one's index (token * topk + slot), -1 when none.
 */
int mk_moe_count(const struct mk_moe_geom *g, const int32_t *topk_idx, int ntok, int32_t *cnt,
		 int *first_bad);

/*
 * Everything the unfused path needs on this rank, from its routing and the count matrix
 * cnt_all [nranks][stride >= ne] (this rank's row included): the layout as the unfused path fills
 * it (recv_off, hdr, pair_q, pair_row, pair_w, unf_pos, unf_count, unf_scatter; node regions zero)
 * in `lay` (mk_moe_lmap bytes), the gather list of the exchange (`gather`, rows of the send buffer
 * in order: token of each row, [sum of sends]) and *needed: the largest received row count of any
 * rank. 0, or -EOVERFLOW when some rank needs more than max_recv (only *needed is then meaningful).
 */
int mk_moe_plan_unfused(const struct mk_moe_geom *g, const int32_t *topk_idx, const float *topk_w,
			int ntok, const int32_t *cnt_all, size_t stride, void *lay, int32_t *gather,
			int *needed);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_MOE_PLAN_H */
