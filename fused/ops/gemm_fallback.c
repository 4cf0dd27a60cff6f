// SPDX-License-Identifier: Apache-2.0
/*
 * cuBLAS fallback. One handle per thread and device (a cuBLAS handle must not be shared between
 * threads that set different streams), created on first use and kept for the thread's life.
 * Row-major C = A @ B is computed as column-major C^T = B^T A^T, so no data is transposed.
 */
#include <errno.h>

#include <cublas_v2.h>

#include "fused/ops/gemm_fallback.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/log.h"

#define FALLBACK_MAX_DEVICES 64

static __thread cublasHandle_t fallback_handles[FALLBACK_MAX_DEVICES];

static int fallback_handle(cublasHandle_t *out)
{
	cublasStatus_t st;
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= FALLBACK_MAX_DEVICES)
		return -ENODEV;
	if (fallback_handles[dev] == NULL) {
		st = cublasCreate(&fallback_handles[dev]);
		/* fp32 accumulation end to end, as the engine: no split-K reduction in bf16. */
		if (st == CUBLAS_STATUS_SUCCESS)
			st = cublasSetMathMode(
				fallback_handles[dev],
				CUBLAS_DEFAULT_MATH |
					CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
		if (st != CUBLAS_STATUS_SUCCESS) {
			MK_WARN("cublasCreate failed on device %d: %s", dev,
				cublasGetStatusString(st));
			fallback_handles[dev] = NULL;
			return -EIO;
		}
	}
	*out = fallback_handles[dev];
	return 0;
}

int mk_fallback_gemm(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		     cudaDataType_t ab_type, cudaDataType_t c_type, cudaStream_t stream)
{
	const float one = 1.0f, zero = 0.0f;
	cublasHandle_t h;
	cublasStatus_t st;
	int rc;

	rc = fallback_handle(&h);
	if (rc)
		return rc;
	st = cublasSetStream(h, stream);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasGemmEx(h, b_nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
				  b, ab_type, b_nk ? k : n, a, ab_type, k, &zero, c, c_type, n,
				  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (st != CUBLAS_STATUS_SUCCESS) {
		MK_WARN("cublasGemmEx(m %d, n %d, k %d) failed: %s", m, n, k,
			cublasGetStatusString(st));
		return -EIO;
	}
	return 0;
}

int mk_fallback_gemm_bf16(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
			  cudaStream_t stream)
{
	return mk_fallback_gemm(a, b, c, m, n, k, b_nk, CUDA_R_16BF, CUDA_R_16BF, stream);
}
