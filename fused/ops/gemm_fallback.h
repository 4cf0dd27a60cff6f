/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gemm op's cuBLAS paths: cublasGemmEx (any type; no workspace, so always capturable) and
 * cuBLASLt with the heuristic's algorithm kept per shape (bf16 GEMMs the calibration gives to
 * cuBLAS). Returns 0 or a negative errno.
 */
#ifndef MK_FUSED_OPS_GEMM_FALLBACK_H
#define MK_FUSED_OPS_GEMM_FALLBACK_H

#include <stddef.h>

#include <cuda_runtime.h>
#include <cublasLt.h>
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

/*
 * cuBLASLt on `stream`: the heuristic's first algorithm for this shape and types, found once per
 * thread, device and shape, with the stream's workspace (none needed: NULL ws). fp32 compute,
 * no reduction in the output type. 0, -ENOSYS (no algorithm: use cublasGemmEx), -EIO.
 */
int mk_gemm_blaslt(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		   cudaDataType_t ab_type, cudaDataType_t c_type, void *ws, size_t ws_bytes,
		   cudaStream_t stream);

/*
 * The cuBLASLt algorithm this thread's plan for the shape holds (made by an earlier
 * mk_gemm_blaslt with this workspace size), for diagnostics: 0, or -ENOENT where there is none.
 */
int mk_gemm_blaslt_algo(int dev, int m, int n, int k, int b_nk, cudaDataType_t ab_type,
			cudaDataType_t c_type, size_t ws_bytes, cublasLtMatmulAlgo_t *algo);

/* The same on device `dev`, the current device, which the caller has already asked for. */
int mk_gemm_blaslt_on(int dev, const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		      cudaDataType_t ab_type, cudaDataType_t c_type, void *ws, size_t ws_bytes,
		      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_FALLBACK_H */
