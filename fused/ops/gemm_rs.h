/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkGemmReduceScatter's fused kernel (gemm_rs.cu) as its host side (gemm_rs_mem.c) sees it: one
 * persistent cooperative kernel per call, CTAs in the policy engine's four roles, numbered
 * compute first; every CTA goes on through the later roles' tickets (gemm_rs_plan.h, design in
 * docs/seqpar.md):
 *   compute: the engine in the node's compute order, each tile into my partial W (symmetric
 *            heap), then its ready flag;
 *   intra:   (several ranks per node) per chunk x 256 columns of my reduce list, the node's
 *            partials added through the CUDA IPC maps: into C (one node) or back into my W;
 *   send:    (several nodes) per chunk of another node's shard, once summed, one put_signal to
 *            its owner (my local rank there), into its landing slot for my node;
 *   reduce:  (several nodes) per chunk x 256 columns of my shard, my node's sum plus the other
 *            nodes' landed sums, into C.
 */
#ifndef MK_FUSED_OPS_GEMM_RS_H
#define MK_FUSED_OPS_GEMM_RS_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "fused/ops/gemm_rs_plan.h"
#include "fused/ops/seqpar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ticket counters of the roles after compute. */
enum { MK_GRS_T_INTRA = MK_SP_T0, MK_GRS_T_SEND = MK_SP_T1, MK_GRS_T_REDUCE = MK_SP_T2 };

struct mk_grs_launch {
	struct mk_sp_common cm;
	const void *a, *b;
	void *c;
	int m, n, k, b_layout;
	const int *order;		   /* compute order (device) */
	uint16_t *w[MK_MAX_LOCAL];	   /* node peers' partials, M x N (mine at my local rank) */
	unsigned int *ready[MK_MAX_LOCAL]; /* node peers' tile flags (the engine raises them) */
	unsigned int *row_done; /* [nnodes * nch]: per reduce-list chunk, tiles summed, all calls */
	uint64_t w_off;		/* heap offset of my W */
	uint64_t land_off;	/* heap offset of my landing area: (nnodes - 1) slots x ms rows */
};

struct mk_comm;
struct mk_sp_args;

/*
 * gemm_rs_mem.c: run the fused kernel with split *sp (adaptive: the controller updates it), setting
 * up the shape's memory first when it is new (collective). 0, -ENOMEM when the symmetric heap is
 * too small for the shape (nothing launched: take the unfused path), -errno.
 */
int mk_grs_fused(struct mk_comm *c, const struct mk_sp_args *x, const struct mk_gar_split *sp,
		 int adaptive, cudaStream_t stream);
/* gemm_rs_fallback.c: cuBLAS into a stream-ordered scratch buffer of the whole product, then
 * ncclReduceScatter into C on the stream. 0 or -errno. */
int mk_grs_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream);

/* Raise the kernel's shared-memory limit and load it (once per device). 0 or -EIO. */
int mk_grs_prepare(void);

/* Enqueue the fused kernel on `stream` (cooperative launch over the split's CTAs). 0, -EINVAL,
 * -ENOSYS or -EIO. */
int mk_grs_launch(const struct mk_grs_launch *l, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_RS_H */
