/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The grouped GEMM (mixture-of-experts layers): for each expert e, C[rows of e] = A[rows of e] @
 * B_e, the rows of expert e being [offsets[e], offsets[e+1]) and the offsets in device memory,
 * read by the kernel (no host synchronisation, CUDA-graph safe). bf16 in and out, fp32
 * accumulation. A is max_rows x K row-major, C max_rows x N row-major (row stride N), B is E
 * stacked matrices, each K x N (MK_GEMM_B_KN) or N x K (MK_GEMM_B_NK, an nn.Linear weight).
 *
 * Two kernels:
 *  - the Hopper kernel (grouped_kernel.cu): the GEMM engine's warp-specialised 128 x 256 tiles,
 *    one persistent launch; tiles of all experts scheduled on the device (grouped_sched.h); A
 *    through one tensor map with a per-tile row base, B through one 3-D tensor map (k, n, expert)
 *    so loads past an expert's K or N edge read zeros, never the next expert's weights; 64-row
 *    halves of a tile that lie wholly inside the expert are stored by TMA, a half that crosses
 *    the expert's last row by per-thread stores clipped at that row, so the next expert's rows
 *    are never written;
 *  - the portable kernel (grouped_portable.cu), compiled for every GPU from sm_75 on: the same
 *    schedule with 64 x 64 tiles and CUDA-core fp32 arithmetic. It runs where the Hopper kernel
 *    cannot (other GPUs, pointers or strides TMA does not take). Why not cuBLAS: its grouped and
 *    batched calls take the row counts from the host, so they would cost a device-to-host copy and
 *    a stream synchronisation per call and could not be captured in a CUDA graph.
 */
#ifndef MK_FUSED_GEMM_GROUPED_H
#define MK_FUSED_GEMM_GROUPED_H

#include <cuda_runtime.h>

#include "fused/gemm/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Shared memory of the Hopper kernel: the engine's, plus the two tile hand-off slots. */
#define MK_GROUPED_SMEM_BYTES (MK_GEMM_SMEM_BYTES + 128)

/* Portable kernel: tile and block shape. */
#define MK_GROUPED_P_BM	     64
#define MK_GROUPED_P_BN	     64
#define MK_GROUPED_P_BK	     16
#define MK_GROUPED_P_THREADS 256

/* Progress words per CTA when tracing (test watchdog): tiles issued by the producer, tiles
 * stored by consumer warpgroup 0 and 1, last expert issued. */
#define MK_GROUPED_TRACE_WORDS 4

/* Tickets stay below this, so that ticket arithmetic never overflows an int. */
#define MK_GROUPED_MAX_TILES (1LL << 30)

/* Device arguments of the Hopper kernel (kernel parameter, by value). */
struct mk_grouped_args {
	const int *offsets; /* device [num_experts + 1] */
	int num_experts;
	int max_rows;
	int n, k;
	int b_layout; /* enum mk_gemm_b_layout */
	int tiles_n;
	void *c;		  /* bf16, max_rows x n, row stride n */
	int tma_store;		  /* 1: whole 64-row halves go out by TMA through maps.c[0] */
	unsigned int *trace;	  /* NULL or host-mapped [gridDim.x * MK_GROUPED_TRACE_WORDS] */
	struct mk_gemm_args gemm; /* epi.tma_mask for the engine's TMA epilogue */
	/*
	 * Fused use (all NULL for a plain grouped GEMM). A rows arrive while the kernel runs:
	 * before loading a tile's A the producer waits until row_ready[b] >= the rows of
	 * [0, offsets[E]) in block b (MK_GROUPED_READY_ROWS rows each) for every block the tile
	 * touches (system-scope acquire: peers' stores). Output blocks are announced: after a
	 * tile's stores, blk_cnt[b] grows by the tile's rows in block b; the tile that completes a
	 * block (all column tiles of all its rows) resets the count and stores blk_flag[b] =
	 * *calls + 1 (the call number: read on the device, so CUDA-graph replays stay in step)
	 * with a system-scope release. Waits give up after timeout_ns or once *error (mapped host
	 * word) is set, recording -ETIMEDOUT in *error.
	 */
	const unsigned int *row_ready;
	unsigned int *blk_cnt, *blk_flag;
	const unsigned int *calls;
	int *error;
	unsigned long long timeout_ns;
};

#define MK_GROUPED_READY_ROWS 128 /* rows per readiness block (= MK_MOE_BLK) */

/* One call, as the API and the tests describe it. */
struct mk_grouped_launch {
	const void *a;	    /* bf16 max_rows x k */
	const void *b;	    /* bf16 num_experts x (k x n | n x k) */
	void *c;	    /* bf16 max_rows x n */
	const int *offsets; /* device [num_experts + 1] */
	int num_experts;
	int max_rows;
	int n, k;
	int b_layout;	     /* enum mk_gemm_b_layout */
	int ctas;	     /* grid size; 0 = SM count (capped by the tile bound) */
	int no_tma_store;    /* 1: every half tile takes per-thread stores (tests, comparisons) */
	unsigned int *trace; /* see MK_GROUPED_TRACE_WORDS; NULL = off */
};

/*
 * 0 if the Hopper kernel can run this call, else -EINVAL and *why names the rule: sizes >= 1
 * (max_rows >= 0), known layout, A and B 16-byte aligned, K a multiple of 8, N a multiple of 8
 * when B is K x N, C 2-byte aligned, the tile bound below MK_GROUPED_MAX_TILES.
 */
int mk_grouped_check(const struct mk_grouped_launch *l, const char **why);

/* Hopper kernel: 0, -EINVAL (check failed), -ENOSYS (no tensor-map encoder), -EIO (CUDA). */
int mk_grouped_run(const struct mk_grouped_launch *l, cudaStream_t stream);

/*
 * Fill the Hopper kernel's arguments and tensor maps for a launch (mk_grouped_run's own set-up;
 * fused kernels that run the grouped role in some CTAs call it and add their hooks). 0,
 * -EINVAL (check failed), -ENOSYS (no tensor-map encoder).
 */
int mk_grouped_prepare(const struct mk_grouped_launch *l, struct mk_grouped_args *g,
		       struct mk_gemm_tmaps *maps);

/* Portable kernel (any pointer alignment, any GPU from sm_75): 0, -EINVAL, -EIO. */
int mk_grouped_portable_run(const struct mk_grouped_launch *l, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_GEMM_GROUPED_H */
