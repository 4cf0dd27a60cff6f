/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs of the device runtime (defined in runtime_params.c). */
#ifndef MK_FUSED_RUNTIME_PARAMS_H
#define MK_FUSED_RUNTIME_PARAMS_H

#include "mk/param.h"

MK_PARAM_DECLARE_INT(cmdq_slots);	    /* MKERNEL_CMDQ_SLOTS */
MK_PARAM_DECLARE_INT(proxy_threads);	    /* MKERNEL_PROXY_THREADS */
MK_PARAM_DECLARE_INT(proxy_batch);	    /* MKERNEL_PROXY_BATCH */
MK_PARAM_DECLARE_INT(symm_heap);	    /* MKERNEL_SYMM_HEAP */
MK_PARAM_DECLARE_STR(heap_share);	    /* MKERNEL_HEAP_SHARE */
MK_PARAM_DECLARE_STR(role_split);	    /* MKERNEL_ROLE_SPLIT */
MK_PARAM_DECLARE_STR(sm_policy);	    /* MKERNEL_SM_POLICY */
MK_PARAM_DECLARE_STR(hostid);		    /* MKERNEL_HOSTID */
MK_PARAM_DECLARE_INT(gemm_ar_fused);	    /* MKERNEL_GEMM_AR_FUSED */
MK_PARAM_DECLARE_INT(gemm_ar_oneshot_ctas); /* MKERNEL_GEMM_AR_ONESHOT_CTAS */

#endif
