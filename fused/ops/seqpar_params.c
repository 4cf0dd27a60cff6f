// SPDX-License-Identifier: Apache-2.0
/* Knobs of the sequence-parallel pair: fused or unfused path. */
#include "fused/ops/seqpar_params.h"

MK_PARAM_INT(gemm_rs_fused, "fused", "MKERNEL_GEMM_RS_FUSED", -1,
	     "mkGemmReduceScatter: 1 runs the fused kernel wherever it can, 0 always runs cuBLAS "
	     "+ ncclReduceScatter, -1 lets the policy engine's cost model choose per shape")
MK_PARAM_INT(ag_gemm_fused, "fused", "MKERNEL_AG_GEMM_FUSED", -1,
	     "mkAllGatherGemm: 1 runs the fused kernel wherever it can, 0 always runs "
	     "ncclAllGather + cuBLAS, -1 lets the policy engine's cost model choose per shape")
MK_PARAM_INT(ag_gemm_pipeline, "fused", "MKERNEL_AG_GEMM_PIPELINE", -1,
	     "mkAllGatherGemm's unfused path: 1 runs the all-gather in up to 4 pieces on a side "
	     "stream and each piece's GEMM as it lands (own shard's first), 0 runs one "
	     "ncclAllGather then one GEMM, -1 pipelines where a shard's GEMM is at least 2^34 flop")
