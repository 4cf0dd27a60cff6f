// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce's unfused path: the GEMM by the gemm op's path choice for bf16 (the faster of
 * the engine and cuBLASLt for the shape, calibrated) or cublasGemmEx for other types, then
 * ncclAllReduce in place on the same stream. One rank alone has nothing to reduce: the GEMM is
 * all (no collective is launched). Any GPU, any shape and type the API accepts; capturable in a
 * CUDA graph.
 */
#include <errno.h>

#include "fused/ops/gemm_allreduce.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/runtime/comm.h"

int mk_gar_unfused(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
		   int b_layout, ncclDataType_t type, cudaStream_t stream)
{
	const cudaDataType_t ct = type == ncclBfloat16	? CUDA_R_16BF
				  : type == ncclFloat16 ? CUDA_R_16F
							: CUDA_R_32F;
	const int rc = mk_gemm_plain(a, b, cc, m, n, k, b_layout == MK_GEMM_B_NK, ct, stream);

	if (rc || c->nranks == 1)
		return rc;
	if (ncclAllReduce(cc, cc, (size_t)m * n, type, ncclSum, c->nccl, stream) != ncclSuccess)
		return -EIO;
	return 0;
}
