/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs of mkGemmReduceScatter and mkAllGatherGemm (defined in seqpar_params.c). */
#ifndef MK_FUSED_OPS_SEQPAR_PARAMS_H
#define MK_FUSED_OPS_SEQPAR_PARAMS_H

#include "mk/param.h"

MK_PARAM_DECLARE_INT(gemm_rs_fused);	/* MKERNEL_GEMM_RS_FUSED */
MK_PARAM_DECLARE_INT(ag_gemm_fused);	/* MKERNEL_AG_GEMM_FUSED */
MK_PARAM_DECLARE_INT(ag_gemm_pipeline); /* MKERNEL_AG_GEMM_PIPELINE */

#endif
