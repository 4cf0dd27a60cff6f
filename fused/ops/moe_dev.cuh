/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the fused MoE kernels (moe_dispatch.cu, moe_combine.cu) share: their argument block, CTA
 * helpers (one thread waits, the CTA learns the result), row copies to peers, the readiness
 * counters' additions, and the work tickets.
 *
 * Both kernels are persistent and cooperative, with the GEMM engine's 384 threads and shared
 * memory in every CTA: CTAs [0, ncomm) communicate, the others run the grouped GEMM role. Every
 * CTA reads the call number at its start (`calls` + 1, the same in every CTA: the last CTA out
 * stores it), so CUDA-graph replays stay in step without the host.
 */
#ifndef MK_FUSED_OPS_MOE_DEV_CUH
#define MK_FUSED_OPS_MOE_DEV_CUH

#include <cuda_bf16.h>

#include "fused/gemm/grouped_engine.cuh"
#include "fused/ops/moe.h"
#include "fused/runtime/device.cuh"

#define MOE_THREADS MK_GEMM_THREADS
#define MOE_WARPS   (MOE_THREADS / 32)
#define MOE_LOCAL_T 8 /* tokens per work item of a node-local exchange */

MK_DEV char *moe_ws(const struct mk_moe_kargs *a)
{
	return a->dc.heap + a->ws_off;
}

/* A node peer's (or my own) workspace, through the mapped heap; NULL for another node. */
MK_DEV char *moe_peer_ws(const struct mk_moe_kargs *a, int q)
{
	char *h = mk_dev_peer_heap(&a->dc, q);

	return h != NULL ? h + a->ws_off : NULL;
}

MK_DEV void moe_fail(const struct mk_moe_kargs *a, int rc)
{
	if (threadIdx.x == 0 && rc != 0)
		mk_dev_record_error(a->dc.error, rc);
}

/* CTA-wide: thread 0 computes v, every thread returns it. */
MK_DEV int moe_bcast(int v)
{
	__shared__ int b_s;

	__syncthreads();
	if (threadIdx.x == 0)
		b_s = v;
	__syncthreads();
	return b_s;
}

/* Thread 0 waits for signal `sig` >= value; the CTA gets 0 or the error. */
MK_DEV int moe_signal_wait(const struct mk_moe_kargs *a, uint32_t sig, uint64_t value)
{
	int rc = 0;

	if (threadIdx.x == 0)
		rc = mk_dev_signal_wait(&a->dc, sig, value);
	return moe_bcast(rc);
}

/* Thread 0 waits until a GPU-local word reaches want (another CTA of this kernel stores it). */
MK_DEV int moe_local_wait(const struct mk_moe_kargs *a, const uint32_t *word, uint32_t want)
{
	int rc = 0;

	if (threadIdx.x == 0) {
		struct mk_dev_wait wt = { 0, 0 };

		while (mk_ld_acquire_gpu_u32(word) < want) {
			rc = mk_dev_wait_step(a->dc.error, &wt, a->dc.timeout_ns);
			if (rc)
				break;
		}
	}
	return moe_bcast(rc);
}

/* Thread 0 waits until a peer's flag (system scope) reaches want. */
MK_DEV int moe_flag_wait(const struct mk_moe_kargs *a, const uint32_t *word, uint32_t want)
{
	struct mk_dev_wait wt = { 0, 0 };
	int rc = 0;

	while (mk_ld_acquire_sys_u32(word) < want) {
		rc = mk_dev_wait_step(a->dc.error, &wt, a->dc.timeout_ns);
		if (rc)
			break;
	}
	return rc;
}

/* A work ticket for the CTA (thread 0 adds, everyone gets it). */
MK_DEV int moe_ticket(uint32_t *counter)
{
	int t = 0;

	if (threadIdx.x == 0)
		t = (int)atomicAdd(counter, 1u);
	return moe_bcast(t);
}

MK_DEV void moe_red_relaxed_sys_add(uint32_t *p, uint32_t v)
{
	asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/*
 * Announce rows stored into peers' received rows by this CTA: after the CTA's stores (barrier),
 * thread 0 fences at system scope once and adds 1 per row to the row's block counter at its
 * owner. rows[i] < 0: nothing.
 */
MK_DEV void moe_announce_rows(const struct mk_moe_kargs *a, const int *q_s, const int *row_s,
			      int n)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		mk_fence_acq_rel_sys();
		for (int i = 0; i < n; i++) {
			if (row_s[i] < 0)
				continue;
			uint32_t *blk = (uint32_t *)(moe_peer_ws(a, q_s[i]) + a->w.recv_blk);

			moe_red_relaxed_sys_add(&blk[row_s[i] / MK_MOE_BLK], 1u);
		}
	}
	__syncthreads();
}

/* Node of rank q. */
MK_DEV int moe_node(const struct mk_moe_kargs *a, int q)
{
	return a->node_of[q];
}

/* Exit bookkeeping: the last CTA out of the call stores its number and resets the tickets. */
MK_DEV void moe_exit(uint32_t *exits, uint32_t *tickets, uint32_t *calls, uint32_t cur)
{
	__syncthreads();
	if (threadIdx.x == 0 && atomicAdd(exits, 1u) == gridDim.x - 1) {
		*exits = 0;
		*tickets = 0;
		__threadfence();
		*(volatile uint32_t *)calls = cur;
	}
}

#endif /* MK_FUSED_OPS_MOE_DEV_CUH */
