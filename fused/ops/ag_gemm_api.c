// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllGatherGemm: argument checks, then the shared path choice and run (seqpar_api.c) over this
 * op's fused kernel (ag_gemm_mem.c) and unfused path (ag_gemm_fallback.c).
 */
#define MK_LOG_PREFIX "mkernel"

#include "fused/ops/ag_gemm.h"
#include "fused/ops/seqpar_host.h"
#include "fused/ops/seqpar_params.h"
#include "mk/log.h"

static const struct mk_sp_op_ops agg_ops = {
	.unfused = "ncclAllGather + GEMM",
	.force = mk_param_ag_gemm_fused,
	.shape_k = 1,
	.alone_direct = 1,
	.fused = mk_agg_fused,
	.unfused_run = mk_agg_unfused,
};

MK_API ncclResult_t mkAllGatherGemm(const void *aShard, const void *b, void *c, void *aGathered,
				    size_t m, size_t n, size_t k, ncclDataType_t type,
				    mkLayout_t bLayout, mkComm_t comm, cudaStream_t stream)
{
	const char *bad = mk_sp_bad_args(comm, aShard, b, c, aGathered, m, n, k, type, bLayout);
	struct mk_sp_args x;

	if (bad != NULL) {
		MK_WARN("mkAllGatherGemm: %s; nothing launched", bad);
		return ncclInvalidArgument;
	}
	x = (struct mk_sp_args){ .a = aShard,
				 .b = b,
				 .c = c,
				 .gathered = aGathered,
				 .m = (int)m,
				 .n = (int)n,
				 .k = (int)k,
				 .b_layout = bLayout,
				 .type = type };
	/* The engine reads the gather buffer (in the heap), or aShard itself when alone. */
	return mk_sp_run(comm, MK_SP_AGG, &agg_ops, &x,
			 comm->nranks == 1 ? aShard : (const void *)comm->heap, stream);
}
