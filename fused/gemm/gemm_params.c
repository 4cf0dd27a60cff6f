// SPDX-License-Identifier: Apache-2.0
/*
 * Knobs of the GEMM engine itself (declared in C: the registry's records use C designated
 * initializers). mkGemm's own knobs live in fused/api.c.
 */
#include "mk/param.h"

MK_PARAM_DECLARE_INT(gemm_no_tma_store);

MK_PARAM_INT(gemm_no_tma_store, "fused", "MKERNEL_GEMM_NO_TMA_STORE", 0,
	     "1 = the GEMM epilogue writes every output with per-thread stores instead of TMA");
