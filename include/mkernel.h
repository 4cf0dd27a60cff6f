/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkernel public API (libmkernel.so): NCCL-shaped entry points for fused multi-GPU kernels and
 * the GEMM engine they are built on. Every function returns ncclResult_t and is stream-ordered
 * where it takes a stream. Unsupported GPUs or shapes take an unfused fallback (cuBLAS, NCCL),
 * never an error.
 */
#ifndef MKERNEL_H
#define MKERNEL_H

#include <stddef.h>

#include <cuda_runtime.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MK_API __attribute__((visibility("default")))
#else
#define MK_API
#endif

#define MK_VERSION_MAJOR 0
#define MK_VERSION_MINOR 1

/* Layout of the B operand of C = A @ B (A is always row-major M x K, C row-major M x N). */
typedef enum {
	mkLayoutRowMajorKN = 0, /* B row-major K x N */
	mkLayoutRowMajorNK = 1, /* B row-major N x K, i.e. an nn.Linear weight: C = A @ W^T */
} mkLayout_t;

/*
 * C = A @ B in bf16 with fp32 accumulation, enqueued on `stream`. type must be ncclBfloat16;
 * m, n, k >= 1 and <= INT_MAX. On Hopper (compute capability 9.0) with A and B 16-byte aligned, K a
 * multiple of 8, and (for mkLayoutRowMajorKN) N a multiple of 8, mkernel's own persistent GEMM
 * runs; any other valid call runs cuBLAS. MKERNEL_GEMM_FORCE_FALLBACK=1 always runs cuBLAS.
 * Returns ncclInvalidArgument for NULL pointers, zero or too large sizes, another type or layout;
 * ncclUnhandledCudaError if a launch fails.
 */
MK_API ncclResult_t mkGemm(const void *a, const void *b, void *c, size_t m, size_t n, size_t k,
			   ncclDataType_t type, mkLayout_t bLayout, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MKERNEL_H */
