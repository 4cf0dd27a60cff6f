// SPDX-License-Identifier: Apache-2.0
/* Knobs of mkRingAttention: fused or unfused path. */
#include "fused/ops/ring_attention_params.h"

MK_PARAM_INT(ring_attn_fused, "fused", "MKERNEL_RING_ATTN_FUSED", -1,
	     "mkRingAttention: 1 runs the fused kernel wherever it can, 0 always runs "
	     "ncclAllGather of K and V + the attention engine, -1 lets the policy engine's cost "
	     "model choose per shape")
