// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllGatherGemm's unfused path: ncclAllGather into aGathered (or a stream-ordered scratch
 * buffer), then the plain GEMM (mk_gemm_plain: for bf16 the faster of the engine and cuBLAS,
 * calibrated) from there on the same stream. One rank alone has nothing to gather: the GEMM reads
 * its shard as is (and aGathered, when asked for, is a copy of it). Any GPU, any shape and type
 * the API accepts; capturable in a CUDA graph.
 */
#include <errno.h>

#include "fused/ops/ag_gemm.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/seqpar_host.h"

/* ncclAllGather into aGathered (or scratch), the GEMM from there (stream-ordered, capturable). */
int mk_agg_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream)
{
	const cudaDataType_t ct = x->type == ncclBfloat16  ? CUDA_R_16BF
				  : x->type == ncclFloat16 ? CUDA_R_16F
							   : CUDA_R_32F;
	const size_t esz = x->type == ncclFloat32 ? 4 : 2;
	void *all = x->gathered;
	int rc = 0;

	if (c->nranks == 1) {
		if (all != NULL && all != x->a &&
		    cudaMemcpyAsync(all, x->a, (size_t)x->m * x->k * esz, cudaMemcpyDeviceToDevice,
				    stream) != cudaSuccess)
			return -EIO;
		return mk_gemm_plain(x->a, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct, stream);
	}
	if (all == NULL && cudaMallocAsync(&all, (size_t)x->m * x->k * esz, stream) != cudaSuccess)
		return -ENOMEM;
	if (ncclAllGather(x->a, all, (size_t)(x->m / c->nranks) * x->k, x->type, c->nccl, stream) !=
	    ncclSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_gemm_plain(all, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct, stream);
	if (x->gathered == NULL && cudaFreeAsync(all, stream) != cudaSuccess && rc == 0)
		rc = -EIO;
	return rc;
}
