// SPDX-License-Identifier: Apache-2.0
/*
 * Knobs of the attention engine and mkAttention (declarations only, plain C, so mkernel-params
 * lists them on machines without CUDA too).
 */
#include "mk/param.h"

MK_PARAM_DECLARE_INT(attn_force_portable);

MK_PARAM_INT(attn_force_portable, "fused", "MKERNEL_ATTN_FORCE_PORTABLE", 0,
	     "1 = mkAttention always runs the portable attention kernel instead of the Hopper one");
