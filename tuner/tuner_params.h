/* SPDX-License-Identifier: Apache-2.0 */
/* Accessors of the tuner's MKERNEL_TUNER_* knobs (declared in tuner_params.c). */
#ifndef MK_TUNER_PARAMS_H
#define MK_TUNER_PARAMS_H

#include "mk/param.h"

MK_PARAM_DECLARE_STR(tuner_config);
MK_PARAM_DECLARE_STR(tuner_algo);
MK_PARAM_DECLARE_STR(tuner_proto);
MK_PARAM_DECLARE_INT(tuner_channels);
MK_PARAM_DECLARE_INT(tuner_max_channels);
MK_PARAM_DECLARE_INT(tuner_model);
MK_PARAM_DECLARE_INT(tuner_nvl_gbps);
MK_PARAM_DECLARE_INT(tuner_nvl_lat_ns);
MK_PARAM_DECLARE_INT(tuner_net_gbps);
MK_PARAM_DECLARE_INT(tuner_net_lat_ns);
MK_PARAM_DECLARE_INT(tuner_log_decisions);
MK_PARAM_DECLARE_INT(tuner_gpu_sms);
MK_PARAM_DECLARE_STR(tuner_sm_split);
MK_PARAM_DECLARE_INT(tuner_adaptive);
MK_PARAM_DECLARE_INT(tuner_window);
MK_PARAM_DECLARE_INT(tuner_gemm_tflops);
MK_PARAM_DECLARE_INT(tuner_attn_tflops);
MK_PARAM_DECLARE_INT(tuner_fused_overhead_us);

#endif /* MK_TUNER_PARAMS_H */
