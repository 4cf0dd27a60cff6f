// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllGatherGemm's unfused path: ncclAllGather into aGathered (or a stream-ordered scratch
 * buffer), then cuBLAS (the gemm op's fallback) from there on the same stream. Any GPU, any
 * shape and type the API accepts; capturable in a CUDA graph.
 */
#include <errno.h>

#include "fused/ops/ag_gemm.h"
#include "fused/ops/gemm_fallback.h"
#include "fused/ops/seqpar_host.h"

/* ncclAllGather into aGathered (or scratch), cuBLAS from there (stream-ordered, capturable). */
int mk_agg_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream)
{
	const cudaDataType_t ct = x->type == ncclBfloat16  ? CUDA_R_16BF
				  : x->type == ncclFloat16 ? CUDA_R_16F
							   : CUDA_R_32F;
	const size_t esz = x->type == ncclFloat32 ? 4 : 2;
	void *all = x->gathered;
	int rc = 0;

	if (all == NULL && cudaMallocAsync(&all, (size_t)x->m * x->k * esz, stream) != cudaSuccess)
		return -ENOMEM;
	if (ncclAllGather(x->a, all, (size_t)(x->m / c->nranks) * x->k, x->type, c->nccl, stream) !=
	    ncclSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_fallback_gemm(all, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct, ct,
				      stream);
	if (x->gathered == NULL && cudaFreeAsync(all, stream) != cudaSuccess && rc == 0)
		rc = -EIO;
	return rc;
}
