/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unfused path of libmkernel.so: cuBLAS for GEMMs the engine does not run (other GPUs,
 * unaligned shapes, MKERNEL_GEMM_FORCE_FALLBACK). Returns 0 or a negative errno.
 */
#ifndef MK_FUSED_OPS_GEMM_FALLBACK_H
#define MK_FUSED_OPS_GEMM_FALLBACK_H

#include <cuda_runtime.h>
#include <library_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The same for A, B of ab_type and C of c_type (bf16, fp16 or fp32), fp32 accumulation. */
int mk_fallback_gemm(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		     cudaDataType_t ab_type, cudaDataType_t c_type, cudaStream_t stream);

/* C (row-major m x n) = A (row-major m x k) @ B (row-major k x n, or n x k if b_nk), bf16. */
int mk_fallback_gemm_bf16(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
			  cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_FALLBACK_H */
