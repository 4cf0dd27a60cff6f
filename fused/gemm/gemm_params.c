// SPDX-License-Identifier: Apache-2.0
/*
 * Knobs of the GEMM engine itself (declared in C: the registry's records use C designated
 * initializers), with mkGemm's own knobs, in a file of declarations only so that
 * mkernel-params lists them on machines without CUDA too.
 */
#include "mk/param.h"

MK_PARAM_DECLARE_INT(gemm_no_tma_store);
MK_PARAM_DECLARE_INT(gemm_force_fallback);
MK_PARAM_DECLARE_STR(gemm_path);
MK_PARAM_DECLARE_INT(gemm_workspace);
MK_PARAM_DECLARE_STR(gemm_ar_path);
MK_PARAM_DECLARE_INT(gemm_bf16_reduction);
MK_PARAM_DECLARE_INT(gemm_graph);
MK_PARAM_DECLARE_INT(gemm_graph_max_flop);

MK_PARAM_INT(gemm_no_tma_store, "fused", "MKERNEL_GEMM_NO_TMA_STORE", 0,
	     "1 = the GEMM epilogue writes every output with per-thread stores instead of TMA");

MK_PARAM_INT(gemm_force_fallback, "fused", "MKERNEL_GEMM_FORCE_FALLBACK", 0,
	     "1 = mkGemm always runs cuBLAS instead of mkernel's Hopper GEMM engine");

MK_PARAM_STR(gemm_path, "fused", "MKERNEL_GEMM_PATH", "",
	     "mkGemm's path for every shape: cublas, cublaslt, skinny (M <= 16, B N x K), engine "
	     "(128 x 256) or eBMxBNsS (e64x256s8: 64 x 256 tiles, 8 k-splits); empty = the "
	     "calibration's choice per shape");

MK_PARAM_INT(gemm_workspace, "fused", "MKERNEL_GEMM_WORKSPACE", 32 << 20,
	     "bytes of device memory per stream for split-K partials and cuBLASLt (allocated at "
	     "the first call that needs it)");

MK_PARAM_INT(gemm_bf16_reduction, "fused", "MKERNEL_GEMM_BF16_REDUCTION", 0,
	     "1 = mkGemm's cuBLAS calls may add split-K partials in bf16, as cuBLAS's and "
	     "PyTorch's defaults allow (faster at some small shapes, less exact); 0 = in fp32, as "
	     "the engine does");

MK_PARAM_INT(gemm_graph, "fused", "MKERNEL_GEMM_GRAPH", 2,
	     "calls mkGemm makes directly before a cuBLASLt call that repeats (same pointers, "
	     "shape, stream workspace and device) is captured as a CUDA graph and replayed from "
	     "then on, which spares the host cuBLAS's per-call work; 0 = never");

MK_PARAM_INT(gemm_graph_max_flop, "fused", "MKERNEL_GEMM_GRAPH_MAX_FLOP", 1ll << 34,
	     "largest GEMM (2 M N K) whose repeated cuBLASLt call is replayed as a CUDA graph: "
	     "above it the kernel outlasts the host's work and a replay gains nothing");

MK_PARAM_STR(
	gemm_ar_path, "fused", "MKERNEL_GEMM_AR_PATH", "",
	"mkGemmAllReduce's path: unfused (GEMM + ncclAllReduce), fused (the persistent "
	"kernel) or oneshot (GEMM, then a one-shot exchange: decode sizes); empty = the "
	"calibrated cost model's cheapest that can run (MKERNEL_GEMM_AR_FUSED=0/1 also forces)");
