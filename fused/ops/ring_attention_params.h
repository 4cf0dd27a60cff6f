/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs of mkRingAttention (ring_attention_params.c). */
#ifndef MK_FUSED_OPS_RING_ATTENTION_PARAMS_H
#define MK_FUSED_OPS_RING_ATTENTION_PARAMS_H

#include "mk/param.h"

MK_PARAM_DECLARE_INT(ring_attn_fused);

#endif /* MK_FUSED_OPS_RING_ATTENTION_PARAMS_H */
