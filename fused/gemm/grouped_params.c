// SPDX-License-Identifier: Apache-2.0
/*
 * Knobs of the grouped GEMM (mkGroupedGemm), in a file of declarations only so that
 * mkernel-params lists them on machines without CUDA too.
 */
#include "mk/param.h"

MK_PARAM_DECLARE_INT(grouped_force_portable);

MK_PARAM_INT(grouped_force_portable, "fused", "MKERNEL_GROUPED_FORCE_PORTABLE", 0,
	     "1 = mkGroupedGemm always runs its portable CUDA-core kernel instead of the Hopper "
	     "grouped GEMM");
