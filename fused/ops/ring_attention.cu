// SPDX-License-Identifier: Apache-2.0
/*
 * mkRingAttention's fused persistent kernel (roles, flags and signals: ring_attention.h). Every
 * CTA has the attention engine's threads and shared memory, so a CTA of any role occupies one
 * SM; the launch is cooperative, so every CTA is resident and a role that waits cannot starve
 * the roles it waits for. The communication roles end in the compute role (the engine takes
 * units from a counter, so late CTAs share the remaining work).
 */
#include <errno.h>

#include "fused/attn/attn_engine.cuh"
#include "fused/ops/adapt_dev.cuh"
#include "fused/ops/ring_attention.h"
#include "fused/runtime/device.cuh"

/* Thread 0's result, shared with the CTA (every thread calls). */
MK_DEV int ring_share(int rc)
{
	__shared__ int rc_s;

	if (threadIdx.x == 0)
		rc_s = rc;
	__syncthreads();
	rc = rc_s;
	__syncthreads(); /* every thread read it before the next share writes it */
	return rc;
}

MK_DEV int ring_fail(const struct mk_ring_launch *l, int rc)
{
	if (threadIdx.x == 0 && rc != 0)
		mk_dev_record_error(l->dc.error, rc);
	return rc;
}

/*
 * Call e starts once every node peer finished call e - 1: none of them reads my published block
 * or my landing slots any more. Thread 0; 0 or the error.
 */
MK_DEV int ring_entry(const struct mk_ring_launch *l, unsigned int e)
{
	int rc = 0;

	for (int p = 0; p < l->nlocal && rc == 0; p++)
		rc = mk_dev_wait_u32_ge(l->peer_calls[p], e - 1, l->dc.error, l->dc.timeout_ns);
	return rc;
}

/*
 * publish: the P publish CTAs copy my K and V into my heap, each its share; the last one done
 * announces the block (system scope: node peers read it).
 */
MK_DEV void ring_publish(const struct mk_ring_launch *l, unsigned int e, int idx, int count)
{
	const uint32_t tid = (uint32_t)idx * blockDim.x + threadIdx.x;
	const uint32_t step = (uint32_t)count * blockDim.x;
	char *dst = l->dc.heap + l->kv_off;

	mk_dev_copy(dst, (const char *)l->k, l->blk, tid, step, false);
	mk_dev_copy(dst + l->blk, (const char *)l->v, l->blk, tid, step, false);
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		if (atomicAdd(&l->flags->copied, 1u) == (unsigned int)count - 1) {
			__threadfence(); /* the other CTAs' copies, before the announcement */
			mk_fence_acq_rel_sys();
			mk_peer_st_release_u32(&l->flags->published, e);
		}
	}
}

/*
 * send: the S send CTAs take the other nodes in turn. For node n, once my block is published
 * and my peer there said its slot for my node is free (signal), the CTA puts the block in chunks
 * (mirrored out first when the transport reads a host mirror), the last with the arrival
 * signal; in the end it waits until its puts have left my memory (the next call rewrites it).
 */
MK_DEV int ring_send(const struct mk_ring_launch *l, unsigned int e, int idx, int count)
{
	const uint64_t bytes = 2 * l->blk, nch = mk_ring_chunks(bytes, l->chunk);
	uint32_t ticket = 0;
	int rc, sent = 0;

	rc = ring_share(threadIdx.x == 0 ? mk_dev_wait_u32_ge(&l->flags->published, e,
							       l->dc.error, l->dc.timeout_ns)
					 : 0);
	for (int j = idx; rc == 0 && j < l->nnodes - 1; j += count) {
		const int n = (l->node + 1 + j) % l->nnodes, peer = l->remote[n];
		const uint64_t dst = l->land_off + (uint64_t)mk_ring_slot(l->node, n) * bytes;

		rc = ring_share(threadIdx.x == 0
					? mk_dev_signal_wait(&l->dc, l->sig_free + (uint32_t)n,
							     l->seen[l->nnodes + n] + 1)
					: 0);
		for (uint64_t c = 0; rc == 0 && c < nch; c++) {
			const uint64_t off = c * l->chunk;
			const uint64_t len = bytes - off < l->chunk ? bytes - off : l->chunk;

			rc = mk_dev_push_block(&l->dc, c + 1 == nch ? MK_CMD_PUT_SIGNAL : MK_CMD_PUT,
					       peer, dst + off, l->kv_off + off, len,
					       l->sig_kv + (uint32_t)l->node, &ticket);
		}
		sent = 1;
	}
	if (rc == 0 && sent)
		rc = ring_share(threadIdx.x == 0 ? mk_dev_quiet(&l->dc, ticket) : 0);
	return ring_fail(l, rc);
}

/*
 * land: CTA 0 first tells my local rank's peer on every other node that my slot for its node is
 * free (this call's entry passed: my node is done with the previous call's blocks). Then the L
 * land CTAs take the other nodes in turn: wait for node n's block, land it (from the host
 * mirror, when the transport writes one), announce it to my node (system scope).
 */
MK_DEV int ring_land(const struct mk_ring_launch *l, unsigned int e, int idx, int count)
{
	const uint64_t bytes = 2 * l->blk;
	int rc = 0;

	if (idx == 0 && threadIdx.x == 0) {
		for (int n = 0; n < l->nnodes && rc == 0; n++) {
			uint32_t ticket;

			if (n != l->node)
				rc = mk_dev_signal(&l->dc, l->remote[n],
						   l->sig_free + (uint32_t)l->node, &ticket);
		}
	}
	rc = ring_share(rc);
	for (int j = idx; rc == 0 && j < l->nnodes - 1; j += count) {
		const int n = (l->node + 1 + j) % l->nnodes, slot = mk_ring_slot(n, l->node);

		rc = ring_share(threadIdx.x == 0 ? mk_dev_signal_wait(&l->dc,
								      l->sig_kv + (uint32_t)n,
								      l->seen[n] + 1)
						 : 0);
		if (rc)
			break;
		mk_dev_land_block(&l->dc, l->remote[n], l->land_off + (uint64_t)slot * bytes,
				  bytes);
		if (threadIdx.x == 0) {
			mk_fence_acq_rel_sys();
			mk_peer_st_release_u32(&l->flags->landed[slot], e);
		}
	}
	return ring_fail(l, rc);
}

/*
 * The last CTA out (thread 0): this call's arrivals and free signals consumed, the adaptive
 * controller on the call's duration and the roles' busy time, the call's counters reset, and
 * the call number stored for node peers (their entry waits for it).
 */
MK_DEV void ring_last_out(const struct mk_ring_launch *l, unsigned int e, const int *split,
			  int measured)
{
	struct mk_ring_flags *f = l->flags;

	for (int n = 0; n < l->nnodes; n++) {
		if (n != l->node) {
			l->seen[n] += 1;
			l->seen[l->nnodes + n] += 1;
		}
	}
	if (measured)
		mk_gar_adapt_last(f->busy, &l->split, &f->ctl, f->t_start, split, f->split);
	f->copied = 0;
	f->units = 0;
	f->done = 0;
	f->exits = 0;
	f->t_start = ~0ull;
	__threadfence();
	mk_peer_st_release_u32(&f->calls, e);
}

/* The launch's address through shared memory: not kept in a register across the engine's role,
 * whose producer threads have 32. */
__shared__ const struct mk_ring_launch *ring_l_s;

MK_DEV void ring_body(const struct mk_attn_tmaps *maps, const struct mk_ring_launch *l,
		      unsigned char *dyn, const int hd)
{
	/*
	 * What lives across the engine's role sits in shared memory: the role leaves its producer
	 * threads 32 registers, and a runtime-indexed local array would go to the stack.
	 */
	__shared__ unsigned int e_s;
	__shared__ int split_s[MK_GAR_ROLES], last_s, measure_s;
	__shared__ unsigned long long busy_s[MK_GAR_ROLES], t0_s;
	const int b = blockIdx.x;
	int rc = 0, first = MK_RING_COMPUTE, idx = 0, acc = 0;

	if (threadIdx.x == 0) {
		ring_l_s = l;
		e_s = *(volatile unsigned int *)&l->flags->calls + 1;
		/* the split after the entry: the leader's previous call wrote it */
		rc = ring_entry(l, e_s);
		for (int r = 0; r < MK_GAR_ROLES; r++)
			busy_s[r] = 0;
		measure_s = mk_gar_split_take(l->adaptive, l->local, l->lead->split, &l->split,
					      &l->flags->ctl, split_s);
	}
	rc = ring_fail(l, ring_share(rc));
	if (measure_s && threadIdx.x == 0)
		atomicMin(&l->flags->t_start, mk_globaltimer_ns());
	/* CTAs are numbered publish, send, land, then compute */
	for (int r = MK_RING_PUBLISH; r < MK_GAR_ROLES; r++) {
		if (b >= acc && b < acc + split_s[r]) {
			first = r;
			idx = b - acc;
			break;
		}
		acc += split_s[r];
	}
	if (threadIdx.x == 0)
		t0_s = mk_globaltimer_ns();
	if (rc == 0 && first == MK_RING_PUBLISH)
		ring_publish(l, e_s, idx, split_s[MK_RING_PUBLISH]);
	else if (rc == 0 && first == MK_RING_SEND)
		rc = ring_send(l, e_s, idx, split_s[MK_RING_SEND]);
	else if (rc == 0 && first == MK_RING_LAND)
		rc = ring_land(l, e_s, idx, split_s[MK_RING_LAND]);
	if (threadIdx.x == 0) {
		const unsigned long long now = mk_globaltimer_ns();

		busy_s[first] += now - t0_s;
		t0_s = now;
	}
	__syncthreads();
	/*
	 * Then compute, always: after a failure recorded in the error word the engine's gated
	 * waits give up at once (the results are void), and the register split below is undone on
	 * every path (ptxas would otherwise give the close the producer's 32 registers).
	 */
	mk_attn_role(&l->attn, maps, b, gridDim.x, dyn, hd);
	/*
	 * The engine left its warpgroups at the producer / consumer register split: back to the
	 * entry's even split for the close. setmaxnreg is .sync.aligned: every warp arrives
	 * converged, after the engine's loader and scheduler threads left their loops. Nothing of
	 * the close may be computed before it (the barrier after it orders the loads).
	 */
	__syncthreads();
	if (threadIdx.x < 128) {
		if (hd == 64)
			mk_setmaxnreg_inc(128);
		else
			mk_setmaxnreg_inc(168);
	} else {
		if (hd == 64)
			mk_setmaxnreg_dec(128);
		else
			mk_setmaxnreg_dec(168);
	}
	__syncthreads();
	l = *(const struct mk_ring_launch *volatile *)&ring_l_s;
	/* the last CTA out closes the call */
	if (threadIdx.x == 0) {
		busy_s[MK_RING_COMPUTE] += mk_globaltimer_ns() - t0_s;
		if (measure_s)
			mk_gar_busy_add(l->flags->busy, busy_s);
		__threadfence();
		last_s = atomicAdd(&l->flags->exits, 1u) == gridDim.x - 1;
		if (last_s)
			__threadfence(); /* the other CTAs' counts and stores, before mine */
	}
	__syncthreads();
	if (last_s && threadIdx.x == 0)
		ring_last_out(l, e_s, split_s, measure_s);
}

extern "C" __global__ void __launch_bounds__(MK_ATTN_THREADS(128), 1)
	mk_ring_kernel_d128(const __grid_constant__ struct mk_attn_tmaps maps,
			    const __grid_constant__ struct mk_ring_launch l)
{
	extern __shared__ unsigned char mk_ring_dyn[];

	ring_body(&maps, &l, mk_ring_dyn, 128);
}

extern "C" __global__ void __launch_bounds__(MK_ATTN_THREADS(64), 1)
	mk_ring_kernel_d64(const __grid_constant__ struct mk_attn_tmaps maps,
			   const __grid_constant__ struct mk_ring_launch l)
{
	extern __shared__ unsigned char mk_ring_dyn[];

	ring_body(&maps, &l, mk_ring_dyn, 64);
}

extern "C" int mk_ring_prepare(void)
{
	struct cudaFuncAttributes fa;

	if (cudaFuncSetAttribute((const void *)mk_ring_kernel_d128,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_ATTN_SMEM_BYTES(128)) != cudaSuccess ||
	    cudaFuncSetAttribute((const void *)mk_ring_kernel_d64,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_ATTN_SMEM_BYTES(64)) != cudaSuccess ||
	    cudaFuncGetAttributes(&fa, (const void *)mk_ring_kernel_d128) != cudaSuccess ||
	    cudaFuncGetAttributes(&fa, (const void *)mk_ring_kernel_d64) != cudaSuccess)
		return -EIO;
	return 0;
}

extern "C" int mk_ring_launch(const struct mk_ring_launch *l, const struct mk_attn_tmaps *maps,
			      cudaStream_t stream)
{
	const int hd = l->attn.head_dim;
	void *params[2] = { (void *)maps, (void *)l };
	int grid = 0;

	for (int r = 0; r < MK_GAR_ROLES; r++)
		grid += l->split.sms[r];
	if (grid < 1 || (hd != 64 && hd != 128))
		return -EINVAL;
	if (cudaLaunchCooperativeKernel(hd == 128 ? (const void *)mk_ring_kernel_d128
						  : (const void *)mk_ring_kernel_d64,
					grid, MK_ATTN_THREADS(hd), params, MK_ATTN_SMEM_BYTES(hd),
					stream) != cudaSuccess)
		return -EIO;
	return 0;
}
