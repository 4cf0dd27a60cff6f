/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unfused path of libmkernel.so: cuBLAS for GEMMs the engine does not run (other GPUs,
 * unaligned shapes, MKERNEL_GEMM_FORCE_FALLBACK). Returns 0 or a negative errno.
 */
#ifndef MK_FUSED_FALLBACK_H
#define MK_FUSED_FALLBACK_H

#include <cuda_runtime.h>

/* C (row-major m x n) = A (row-major m x k) @ B (row-major k x n, or n x k if b_nk), bf16. */
int mk_fallback_gemm_bf16(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
			  cudaStream_t stream);

#endif /* MK_FUSED_FALLBACK_H */
