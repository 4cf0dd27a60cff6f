// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmReduceScatter's unfused path: the plain GEMM (mk_gemm_plain: for bf16 the faster of the
 * engine and cuBLAS, calibrated) into a stream-ordered scratch buffer of the whole product, then
 * ncclReduceScatter into C on the same stream. One rank alone has nothing to scatter: the GEMM
 * goes straight into C (no scratch, no collective: those cost it more than the GEMM at small
 * shapes). Any GPU, any shape and type the API accepts; capturable in a CUDA graph.
 */
#include <errno.h>

#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/gemm_rs.h"
#include "fused/ops/seqpar_host.h"

/* The GEMM into a scratch M x N buffer, ncclReduceScatter into C (stream-ordered, capturable). */
int mk_grs_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream)
{
	const cudaDataType_t ct = mk_sp_cuda_type(x->type);
	const size_t esz = mk_sp_esz(x->type);
	struct mk_sp_state *st;
	void *tmp = NULL;
	int rc;

	if (c->nranks == 1)
		return mk_gemm_plain(x->a, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct, stream);
	if (mk_sp_state_get(c, MK_SP_GRS, &st) != 0)
		st = NULL;
	if (mk_sp_scratch_alloc(st, &tmp, (size_t)x->m * x->n * esz, stream) != 0)
		return -ENOMEM;
	rc = mk_gemm_plain(x->a, x->b, tmp, x->m, x->n, x->k, x->b_layout, ct, stream);
	if (rc == 0 && ncclReduceScatter(tmp, x->c, (size_t)(x->m / c->nranks) * x->n, x->type,
					 ncclSum, c->nccl, stream) != ncclSuccess)
		rc = -EIO;
	if (mk_sp_scratch_free(tmp, stream) != 0 && rc == 0)
		rc = -EIO;
	return rc;
}
