/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkAllGatherGemm's fused kernel (ag_gemm.cu) as its host side (ag_gemm_mem.c) sees it: one
 * persistent cooperative kernel per call. CTAs are numbered copy (policy role intra), send
 * (send), forward (reduce), then compute; each goes on through the later stages' tickets and
 * ends in the GEMM (ag_gemm_plan.h, design in docs/seqpar.md):
 *   copy:    my shard's chunks into my gather buffer G and every node peer's, then the arrival
 *            flags of the tile rows they touch (and into aGathered);
 *   send:    (several nodes) each chunk of my shard, once in G, put to my local rank's peer on
 *            every other node;
 *   forward: (several nodes) each chunk landing at me, out of the host mirror, on to my node
 *            peers, then its arrival flags;
 *   gather:  (aGathered given) the other shards' chunks, once in, from G into aGathered;
 *   compute: the engine, dynamic tickets over the compute order, waiting for each tile row's
 *            chunks before loading A from G.
 * Arrival flags are zeroed by the last CTA out of a call, before it stores the call count node
 * peers wait for (so the engine waits for a fixed want[tm], no epoch).
 */
#ifndef MK_FUSED_OPS_AG_GEMM_H
#define MK_FUSED_OPS_AG_GEMM_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "fused/ops/ag_gemm_plan.h"
#include "fused/ops/seqpar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ticket counters: one per stage, the last the engine's (dynamic tickets). */
enum {
	MK_AGG_T_COPY = MK_SP_T0,
	MK_AGG_T_SEND = MK_SP_T1,
	MK_AGG_T_FORWARD = MK_SP_T2,
	MK_AGG_T_GATHER = MK_SP_T3,
	MK_AGG_T_COMPUTE = MK_SP_T4,
};

struct mk_agg_launch {
	struct mk_sp_common cm;
	const void *a_shard, *b;
	void *c;
	void *a_gathered; /* or NULL */
	int m, n, k, b_layout;
	const int *order;		     /* compute order (device) */
	const int *arrival;		     /* chunk ids in arrival order (device), mine first */
	const unsigned int *want;	     /* per tile row: chunks it touches (device) */
	uint16_t *gbuf[MK_MAX_LOCAL];	     /* node peers' gather buffers, M x K (mine at l) */
	unsigned int *a_ready[MK_MAX_LOCAL]; /* node peers' arrival flags per tile row */
	unsigned int *mine_done;	     /* [nch]: my chunk c is in my G, all calls */
	uint64_t gbuf_off;		     /* heap offset of my G */
};

struct mk_comm;
struct mk_sp_args;

/*
 * ag_gemm_mem.c: run the fused kernel with split *sp (adaptive: the controller updates it), setting
 * up the shape's memory first when it is new (collective). 0, -ENOMEM when the symmetric heap is
 * too small for the shape (nothing launched: take the unfused path), -errno.
 */
int mk_agg_fused(struct mk_comm *c, const struct mk_sp_args *x, const struct mk_gar_split *sp,
		 int adaptive, cudaStream_t stream);
/* ag_gemm_fallback.c: ncclAllGather into aGathered (or a scratch buffer), then cuBLAS on the
 * stream. 0 or -errno. */
int mk_agg_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream);

/* Raise the kernel's shared-memory limit and load it (once per device). 0 or -EIO. */
int mk_agg_prepare(void);

/* Enqueue the fused kernel on `stream` (cooperative launch over the split's CTAs). 0, -EINVAL,
 * -ENOSYS or -EIO. */
int mk_agg_launch(const struct mk_agg_launch *l, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_AG_GEMM_H */
