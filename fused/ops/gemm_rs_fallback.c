// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmReduceScatter's unfused path: cuBLAS (the gemm op's fallback) into a stream-ordered
 * scratch buffer of the whole product, then ncclReduceScatter into C on the same stream. Any GPU,
 * any shape and type the API accepts; capturable in a CUDA graph.
 */
#include <errno.h>

#include "fused/ops/gemm_fallback.h"
#include "fused/ops/gemm_rs.h"
#include "fused/ops/seqpar_host.h"

/* cuBLAS into a scratch M x N buffer, ncclReduceScatter into C (stream-ordered, capturable). */
int mk_grs_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream)
{
	const cudaDataType_t ct = x->type == ncclBfloat16  ? CUDA_R_16BF
				  : x->type == ncclFloat16 ? CUDA_R_16F
							   : CUDA_R_32F;
	const size_t esz = x->type == ncclFloat32 ? 4 : 2;
	void *tmp = NULL;
	int rc;

	if (cudaMallocAsync(&tmp, (size_t)x->m * x->n * esz, stream) != cudaSuccess)
		return -ENOMEM;
	rc = mk_fallback_gemm(x->a, x->b, tmp, x->m, x->n, x->k, x->b_layout, ct, ct, stream);
	if (rc == 0 && ncclReduceScatter(tmp, x->c, (size_t)(x->m / c->nranks) * x->n, x->type,
					 ncclSum, c->nccl, stream) != ncclSuccess)
		rc = -EIO;
	if (cudaFreeAsync(tmp, stream) != cudaSuccess && rc == 0)
		rc = -EIO;
	return rc;
}
