// SPDX-License-Identifier: Apache-2.0
/*
 * Every knob of the policy engine, declared once with its default and help text. The README
 * table and `mkernel-params` are generated from these records.
 */
#include "tuner_params.h"

MK_PARAM_STR(tuner_config, "tuner", "MKERNEL_TUNER_CONFIG", "",
	     "rules file (collective/fused-op rules, first match wins); empty = no rules");
MK_PARAM_STR(tuner_algo, "tuner", "MKERNEL_TUNER_ALGO", "",
	     "force an algorithm: 'ring' for every collective or 'allreduce:tree,allgather:ring'; "
	     "beats the rules file");
MK_PARAM_STR(tuner_proto, "tuner", "MKERNEL_TUNER_PROTO", "",
	     "force a protocol (ll, ll128, simple), same syntax as MKERNEL_TUNER_ALGO");
MK_PARAM_INT(tuner_channels, "tuner", "MKERNEL_TUNER_CHANNELS", 0,
	     "channels (CTAs) for every NCCL collective; 0 = rules file or NCCL's choice");
MK_PARAM_INT(tuner_max_channels, "tuner", "MKERNEL_TUNER_MAX_CHANNELS", 0,
	     "channel budget: at most this many CTAs per NCCL collective, the other SMs stay "
	     "with compute; 0 = no bound");
MK_PARAM_INT(tuner_model, "tuner", "MKERNEL_TUNER_MODEL", 1,
	     "1: the built-in ring/tree cost model picks algo/proto when no rule does; "
	     "0: NCCL's own choice");
MK_PARAM_INT(tuner_nvl_gbps, "tuner", "MKERNEL_TUNER_NVL_GBPS", 450,
	     "cost model: intra-node bandwidth per GPU and direction, GB/s");
MK_PARAM_INT(tuner_nvl_lat_ns, "tuner", "MKERNEL_TUNER_NVL_LAT_NS", 1000,
	     "cost model: intra-node latency per hop, ns");
MK_PARAM_INT(tuner_net_gbps, "tuner", "MKERNEL_TUNER_NET_GBPS", 50,
	     "cost model: network bandwidth per GPU and direction, GB/s");
MK_PARAM_INT(tuner_net_lat_ns, "tuner", "MKERNEL_TUNER_NET_LAT_NS", 5000,
	     "cost model: network latency per hop, ns");
MK_PARAM_INT(tuner_log_decisions, "tuner", "MKERNEL_TUNER_LOG_DECISIONS", 0,
	     "1: log each new collective decision at INFO (subsystem TUNING); for checks only");
MK_PARAM_INT(tuner_gpu_sms, "tuner", "MKERNEL_TUNER_GPU_SMS", 132,
	     "fused ops: SMs per GPU when the caller does not say");
MK_PARAM_STR(tuner_sm_split, "tuner", "MKERNEL_TUNER_SM_SPLIT", "",
	     "fused ops: force the split for every op, e.g. 'compute=116 intra=12 send=4 reduce=0' "
	     "(roles left out come from the rules file or the table)");
MK_PARAM_INT(tuner_adaptive, "tuner", "MKERNEL_TUNER_ADAPTIVE", -1,
	     "fused ops: 1 runs the on-GPU SM controller, 0 keeps the split static; "
	     "-1 = rules file, else static");
MK_PARAM_INT(tuner_gemm_tflops, "tuner", "MKERNEL_TUNER_GEMM_TFLOPS", 631,
	     "fused ops: dense bf16 GEMM rate the cost model assumes, TFLOP/s (the GEMM engine's "
	     "median on an H200 at 16384 x 16384 x 1024, docs/data/gemm-bench-h200-2026-12-02)");
MK_PARAM_INT(
	tuner_attn_tflops, "tuner", "MKERNEL_TUNER_ATTN_TFLOPS", 600,
	"fused ops: attention forward rate the ring-attention cost model assumes, TFLOP/s with "
	"FlashAttention's convention (4 B H Sq Skv D, halved when causal)");
MK_PARAM_INT(tuner_fused_overhead_us, "tuner", "MKERNEL_TUNER_FUSED_OVERHEAD_US", 10,
	     "fused ops: fixed cost of a fused call over its GEMM alone, us (measured 6-8 us on an "
	     "H200 for mkGemmAllReduce on one rank, M = N = 2048..8192); the cost model fuses "
	     "where it still wins");
MK_PARAM_INT(tuner_window, "tuner", "MKERNEL_TUNER_WINDOW", 0,
	     "fused ops: tasks per controller window; 0 = rules file or max(SMs/16, 2)");
