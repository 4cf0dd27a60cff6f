// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmReduceScatter: argument checks, then the shared path choice and run (seqpar_api.c) over
 * this op's fused kernel (gemm_rs_mem.c) and unfused path (gemm_rs_fallback.c).
 */
#define MK_LOG_PREFIX "mkernel"

#include "fused/ops/gemm_rs.h"
#include "fused/ops/seqpar_host.h"
#include "fused/ops/seqpar_params.h"
#include "mk/log.h"

static const struct mk_sp_op_ops grs_ops = {
	.unfused = "GEMM + ncclReduceScatter",
	.force = mk_param_gemm_rs_fused,
	.shape_k = 0,
	.alone_direct = 0,
	.fused = mk_grs_fused,
	.unfused_run = mk_grs_unfused,
};

MK_API ncclResult_t mkGemmReduceScatter(const void *a, const void *b, void *c, size_t m, size_t n,
					size_t k, ncclDataType_t type, mkLayout_t bLayout,
					mkComm_t comm, cudaStream_t stream)
{
	const char *bad = mk_sp_bad_args(comm, a, b, c, NULL, m, n, k, type, bLayout);
	struct mk_sp_args x;

	if (bad != NULL) {
		MK_WARN("mkGemmReduceScatter: %s; nothing launched", bad);
		return ncclInvalidArgument;
	}
	x = (struct mk_sp_args){ .a = a,
				 .b = b,
				 .c = c,
				 .m = (int)m,
				 .n = (int)n,
				 .k = (int)k,
				 .b_layout = bLayout,
				 .type = type };
	return mk_sp_run(comm, MK_SP_GRS, &grs_ops, &x, a, stream);
}
