/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The skinny GEMM: C (M x N, bf16) = A (M x K) @ B^T with B row-major N x K (a linear layer's
 * weight), for decode-size M (at most MK_SKINNY_MAX_M rows). At those sizes the work is reading
 * B once: the engine's 64-row tiles waste most of each tile, and cuBLAS runs them as a split-K
 * GEMV in two launches. This kernel is one launch: every warp streams 16-byte pieces of B rows
 * from memory into tensor-core MMAs (m16n8k16, fp32 accumulation), the CTA's warps split K and
 * add their sums in shared memory. mkGemm's dispatch picks it where the calibration measured it
 * faster (path name "skinny").
 *
 * Rules (mk_skinny_check): 1 <= M <= 16; B N x K; K a multiple of 8; A and B 16-byte aligned
 * (every row then starts on 16 bytes); C 2-byte aligned.
 */
#ifndef MK_FUSED_GEMM_SKINNY_H
#define MK_FUSED_GEMM_SKINNY_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MK_SKINNY_MAX_M 16

/* 0 when the skinny kernel can run this call, else -EINVAL with *why (static text; may be
 * NULL). b_nk: B is N x K. */
int mk_skinny_check(const void *a, const void *b, const void *c, int m, int n, int k, int b_nk,
		    const char **why);

/* Enqueue C = A @ B^T on `stream` (mk_skinny_check must have passed). 0 or -EIO. */
int mk_skinny_launch(const void *a, const void *b, void *c, int m, int n, int k,
		     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_GEMM_SKINNY_H */
