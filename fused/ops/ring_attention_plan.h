/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkRingAttention's planning, plain C (unit-tested on every machine): which rank's K/V block
 * each of my ring steps reads, which of my query rows against which of its key rows with which
 * causal offset, what my rows' epilogue is at each step, where the block is readable from, and
 * the symmetric-heap layout and signal words of the fused kernel.
 *
 * Sharding (global sequence S = R x seq_local, rank r of R):
 *   non-causal: rank r holds rows [r S_l, (r + 1) S_l);
 *   causal (zigzag, S_l = 2c): rank r holds chunk r then chunk 2R - 1 - r of 2R chunks of c
 *   rows, so every rank does the same work.
 * A step is one attention job of the engine (fused/attn/attn.h) over one source rank's block:
 *   non-causal: all my rows against all its keys;
 *   causal: my own block: all rows, all keys, causal (the local order keeps positions
 *   ordered); a source s < r: all my rows against its first chunk (its second is in my future);
 *   s > r: my second chunk against both of its chunks (my first chunk precedes both).
 * Every (query, key) pair the global causal (or full) mask allows is computed exactly once, and
 * blocks wholly above the diagonal are never touched. My own block comes first (it is here);
 * then my node peers' (read through their mapped heaps as soon as they published them); then the
 * other nodes' in node order: each block crosses the network once per destination node, to the
 * rank of the same local index there, and is read by that node's ranks from its landing slot.
 */
#ifndef MK_FUSED_OPS_RING_ATTENTION_PLAN_H
#define MK_FUSED_OPS_RING_ATTENTION_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "fused/ops/signals.h"

#ifdef __CUDACC__
#define MK_RING_HD static inline __host__ __device__
#else
#define MK_RING_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Ranks of a ring the fused kernel takes (one engine job per rank). */
#define MK_RING_MAX_RANKS 16

/* Where a step's block is readable from. */
enum mk_ring_where {
	MK_RING_SELF = 0,   /* my own k, v (the caller's buffers) */
	MK_RING_PEER = 1,   /* a node peer's published copy in its heap */
	MK_RING_LANDED = 2, /* another node's block in a landing slot of a rank of my node */
};

/* One rank's view of the ring (uniform nodes: nranks = nnodes x nlocal, rank = node x nlocal +
 * local, as mkComm numbers them when nodes are contiguous; the plan takes any map). */
struct mk_ring_geom {
	int nranks, rank;
	int nnodes, node;
	int nlocal, local;
	const int *node_of;  /* [nranks] */
	const int *local_of; /* [nranks] */
	int causal;
	int seq_local;
};

struct mk_ring_step {
	int src;		/* rank whose K/V block */
	int q_row0, sq;		/* my query rows */
	int kv_row0, skv;	/* the source's key rows */
	int causal, diag;	/* key j visible to query i iff j <= i + diag */
	int fresh_lo, fresh_hi; /* rows whose first step this is */
	int final_lo, final_hi; /* rows whose last step this is */
	int where;		/* enum mk_ring_where */
	int holder;		/* local index of the rank of my node whose heap holds it */
	int slot;		/* MK_RING_LANDED: landing slot there (-1 otherwise) */
};

/*
 * My steps, in the order the kernel runs them (nranks of them: `steps` holds that many; the
 * fused kernel takes at most MK_RING_MAX_RANKS). 0, or -EINVAL with *why: nodes of different
 * sizes, an odd causal seq_local, a whole sequence of 2^30 rows and more.
 */
int mk_ring_steps(const struct mk_ring_geom *g, struct mk_ring_step *steps, const char **why);

/* Landing slot for node n's block on a rank of node `node` (slots skip the own node). */
MK_RING_HD int mk_ring_slot(int n, int node)
{
	return n < node ? n : n - 1;
}

/* Global position of my query row i (or of the source's key row i). */
long long mk_ring_pos(const struct mk_ring_geom *g, int rank, int i);

/*
 * Symmetric-heap layout of one shape (offsets from the shape's allocation, the same on every
 * rank): my published K and V (K then V, `blk` bytes each), the landing slots (K then V of
 * another node's block, nnodes - 1 of them), then the flag words.
 */
struct mk_ring_mem {
	size_t blk;	  /* bytes of one K or V block: B x S_l x Hkv x D x 2 */
	size_t kv_off;	  /* my published K, V */
	size_t land_off;  /* slot s at land_off + s x 2 blk */
	size_t flags_off; /* flag words (struct mk_ring_flags), 256-byte aligned */
	size_t bytes;	  /* all of it */
};

int mk_ring_mem_plan(int batch, int seq_local, int heads_kv, int head_dim, int nnodes,
		     size_t flags_bytes, struct mk_ring_mem *m);

/*
 * Signal words of the fused kernel: the last 2 x nnodes words of the ring's range
 * (fused/ops/signals.h). They once ended at the comm's half, on the words of mkGemmAllReduce's
 * one-shot path: a ring call then let a later one-shot call read another node's slice before
 * it landed.
 */
MK_RING_HD uint32_t mk_ring_sig_kv(uint32_t nsignals, int nnodes, int n)
{
	return mk_sig_ring_end(nsignals) - 2u * (uint32_t)nnodes + (uint32_t)n; /* block landed */
}

MK_RING_HD uint32_t mk_ring_sig_free(uint32_t nsignals, int nnodes, int n)
{
	return mk_sig_ring_end(nsignals) - (uint32_t)nnodes + (uint32_t)n; /* slot emptied */
}

/* Puts of a block to another node: chunks of at most `chunk` bytes; the last carries the
 * signal. Number of chunks of `bytes` (>= 1). */
MK_RING_HD uint64_t mk_ring_chunks(uint64_t bytes, uint64_t chunk)
{
	return bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
}

struct mk_gar_split;

/*
 * The ring kernel's split from the policy engine's (mk_gar_split_plan, roles in the order
 * compute, publish, send, land): publish keeps a CTA whenever there are several ranks (the
 * sends read the published copy even with one rank per node), send and land one each with
 * several nodes, taken from compute; roles not used give theirs to compute. 0, or -EINVAL when
 * compute is left with none.
 */
int mk_ring_split_fix(struct mk_gar_split *sp, int nranks, int nnodes);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_RING_ATTENTION_PLAN_H */
