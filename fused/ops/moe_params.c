// SPDX-License-Identifier: Apache-2.0
/*
 * Knobs of the MoE ops (mkMoeDispatchGemm, mkMoeGemmCombine), in a file of declarations only so
 * that mkernel-params lists them on machines without CUDA too.
 */
#include "mk/param.h"

MK_PARAM_DECLARE_INT(moe_fused);

MK_PARAM_INT(moe_fused, "fused", "MKERNEL_MOE_FUSED", -1,
	     "MoE dispatch and combine: 1 = the fused kernels wherever they can run, 0 = always "
	     "the unfused path (NCCL exchange + grouped GEMM), -1 = the policy engine's cost model "
	     "decides");
