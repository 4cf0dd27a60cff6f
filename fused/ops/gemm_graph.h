/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small cuBLASLt calls that repeat, replayed as CUDA graphs. Enqueueing one cublasLtMatmul
 * costs the host 6-16 us on the H200 host (docs/benchmarks.md, 5a), longer than the kernel of a
 * decode-size GEMM, so a stream of such calls runs at the host's pace. A call that repeats with
 * the same pointers, shape, workspace and device (a decode loop over static weights and
 * reused activation buffers) is captured once, on a private stream, and later calls launch the
 * captured graph: one launch instead of cuBLAS's per-call work. The graph reads the buffers when
 * it runs, so only the pointers, never the data, must repeat.
 */
#ifndef MK_FUSED_OPS_GEMM_GRAPH_H
#define MK_FUSED_OPS_GEMM_GRAPH_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime.h>

#include "fused/ops/gemm_dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One cuBLASLt call as mkGemm makes it (mk_gemm_blaslt_on's arguments, bf16). */
struct mk_gemm_graph_call {
	struct mk_gemm_key shape; /* x0, x1: A/B and C types, as the cuBLASLt plans' key */
	const void *a, *b;
	void *c;
	void *ws;
	size_t ws_bytes;
};

/*
 * Run the call as a replay of its graph when it qualifies (MKERNEL_GEMM_GRAPH calls seen with
 * the same key before, 2 m n k within MKERNEL_GEMM_GRAPH_MAX_FLOP, `stream` not capturing):
 * true when the graph ran, false when the caller must make the call itself (also after a
 * capture or a replay that failed: the key then runs directly).
 */
bool mk_gemm_graph_run(const struct mk_gemm_graph_call *x, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_GRAPH_H */
