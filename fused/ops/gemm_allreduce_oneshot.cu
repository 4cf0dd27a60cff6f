// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce's one-shot exchange (the decode path; gemm_allreduce.h says what it does).
 * One cooperative launch, MK_GAR1_THREADS threads per CTA, every CTA resident, so a CTA that
 * waits cannot keep another CTA of its rank from running. A thread works on LL lines
 * tid, tid + threads, ... of each phase:
 *   A (node peers): my partial's lines as LL lines into my heap (parity = epoch & 1);
 *   B one node: every line: my partial plus every node peer's LL line (polled until both flags
 *     are the epoch), fp32, into C;
 *   B several nodes: my slice's lines summed over the node into nsum[parity] (and its host
 *     mirror when puts go through one); the last CTA to finish that puts the slice to my local
 *     rank on every other node (one PUT_SIGNAL per node);
 *   C several nodes: once every other node signalled, its slice is added: the final slice goes
 *     into C and, with node peers, as LL lines of the final slice into my heap;
 *   D several nodes and node peers: the peers' final slices, polled, into C.
 * The epoch is the call count on this shape's buffers + 1, read from device memory, so
 * CUDA-graph replays stay in step; the last CTA out stores it and marks the signals consumed.
 * Every wait is bounded by the comm's timeout and ends at once after another rank's error.
 */
#include <cuda_bf16.h>
#include <errno.h>

#include "fused/common/wait.cuh"
#include "fused/ops/gemm_allreduce.h"
#include "fused/runtime/device.cuh"

/* A line and its epoch: {data0, epoch, data1, epoch}, one 16-byte store (each 8-byte half is
 * written at once, so a reader that sees both flags sees both data words). */
MK_DEV void gar1_st_ll(uint4 *p, uint2 d, uint32_t e)
{
	asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d.x), "r"(e),
		     "r"(d.y), "r"(e)
		     : "memory");
}

MK_DEV uint4 gar1_ld_ll(const uint4 *p)
{
	uint4 v;

	asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

/* Poll an LL line until both flags are epoch e; its data in *out. 0 or -errno. */
MK_DEV int gar1_poll(const uint4 *p, uint32_t e, const struct mk_gar1_launch *l, uint2 *out)
{
	struct mk_dev_wait wt = { 0, 0 };

	for (int spins = 0;; spins++) {
		const uint4 v = gar1_ld_ll(p);

		if (v.y == e && v.w == e) {
			out->x = v.x;
			out->y = v.z;
			return 0;
		}
		/* a few tight polls first: a peer's line usually lands within a link latency */
		if (spins >= 64) {
			const int rc = mk_dev_wait_step(l->ws.error, &wt, l->ws.timeout_ns);

			if (rc)
				return rc;
		}
	}
}

MK_DEV float gar1_bf16(uint32_t w, int hi)
{
	return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16));
}

/* acc[0..3] (+)= the four bf16 of d. */
MK_DEV void gar1_add(float acc[4], uint2 d, bool first)
{
	const float v[4] = { gar1_bf16(d.x, 0), gar1_bf16(d.x, 1), gar1_bf16(d.y, 0),
			     gar1_bf16(d.y, 1) };

	for (int j = 0; j < 4; j++)
		acc[j] = first ? v[j] : acc[j] + v[j];
}

MK_DEV uint32_t gar1_pack(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

MK_DEV uint2 gar1_pack4(const float acc[4])
{
	return make_uint2(gar1_pack(acc[0], acc[1]), gar1_pack(acc[2], acc[3]));
}

/* Line i of C: one 8-byte store when aligned and whole, else element by element. */
MK_DEV void gar1_store_c(const struct mk_gar1_launch *l, int i, uint2 d)
{
	uint16_t *c = (uint16_t *)l->c;
	const long long e0 = 4ll * i;

	if (((uintptr_t)c & 7) == 0 && e0 + 3 < l->elems) {
		*(uint2 *)(c + e0) = d;
		return;
	}
	for (int j = 0; j < 4 && e0 + j < l->elems; j++)
		c[e0 + j] = (uint16_t)(((j < 2 ? d.x : d.y) >> (16 * (j & 1))) & 0xffff);
}

MK_DEV uint2 gar1_part(const struct mk_gar1_launch *l, int i)
{
	return *(const uint2 *)(l->ws.part + 4ll * i);
}

/* Phase B, one node: every line summed over the node, into C. */
MK_DEV int gar1_node_all(const struct mk_gar1_launch *l, uint32_t e, int tid, int nth)
{
	const size_t par = (size_t)(e & 1) * l->lines;
	int rc = 0;

	for (int i = tid; i < l->lines && rc == 0; i += nth) {
		float acc[4];

		gar1_add(acc, gar1_part(l, i), true);
		for (int q = 0; q < l->nlocal && rc == 0; q++) {
			uint2 d;

			if (q == l->local_rank)
				continue;
			rc = gar1_poll(l->ws.ll[q] + par + i, e, l, &d);
			if (rc == 0)
				gar1_add(acc, d, false);
		}
		if (rc == 0)
			gar1_store_c(l, i, gar1_pack4(acc));
	}
	return rc;
}

/* Phase B, several nodes: my slice summed over the node (or copied, alone in the node) into
 * nsum[parity] and its host mirror. */
MK_DEV int gar1_node_slice(const struct mk_gar1_launch *l, uint32_t e, int s0, int s1, int tid,
			   int nth)
{
	const size_t par = (size_t)(e & 1) * l->lines;
	const size_t out0 = (size_t)(e & 1) * l->slice_lines * 4;
	int rc = 0;

	for (int i = s0 + tid; i < s1 && rc == 0; i += nth) {
		const size_t at = out0 + 4ull * (i - s0);
		float acc[4];
		uint2 d;

		gar1_add(acc, gar1_part(l, i), true);
		for (int q = 0; q < l->nlocal && rc == 0; q++) {
			if (q == l->local_rank)
				continue;
			rc = gar1_poll(l->ws.ll[q] + par + i, e, l, &d);
			if (rc == 0)
				gar1_add(acc, d, false);
		}
		if (rc)
			break;
		d = l->nlocal > 1 ? gar1_pack4(acc) : gar1_part(l, i);
		*(uint2 *)(l->ws.nsum + at) = d;
		if (l->dc.stage != NULL) /* the transport reads the host mirror */
			*(uint2 *)(l->dc.stage + l->ws.nsum_off + 2 * at) = d;
	}
	return rc;
}

/* The CTA that finishes my node-sum slice last puts it to my local rank on every other node. */
MK_DEV int gar1_put_slice(const struct mk_gar1_launch *l, uint32_t e, int s0, int s1)
{
	const uint64_t slot_bytes = (uint64_t)l->slice_lines * 8;
	const uint64_t land = l->ws.land_off + (uint64_t)(e & 1) * (l->nnodes - 1) * slot_bytes;
	const uint64_t src = l->ws.nsum_off + (uint64_t)(e & 1) * slot_bytes;
	int rc = 0;

	/* every thread's stores of the slice (heap and mirror) before the count, at system scope */
	mk_fence_acq_rel_sys();
	if (atomicAdd(l->ws.arrive, 1u) != gridDim.x - 1)
		return 0;
	atomicExch(l->ws.arrive, 0u); /* every CTA counted: ready for the next call */
	mk_fence_acq_rel_sys();
	for (int nn = 0; nn < l->nnodes && rc == 0; nn++) {
		const int slot = l->node < nn ? l->node : l->node - 1; /* mine at node nn */
		uint32_t ticket;

		if (nn == l->node)
			continue;
		rc = mk_dev_put_cmd(&l->dc, MK_CMD_PUT_SIGNAL, l->ws.remote[nn],
				    land + (uint64_t)slot * slot_bytes, src,
				    (uint64_t)(s1 - s0) * 8, l->ws.sig_base + (uint32_t)l->node,
				    &ticket);
	}
	return rc;
}

/* Phase C: the other nodes' sums of my slice added: C, and LL lines of the final slice. */
MK_DEV int gar1_remote_slice(const struct mk_gar1_launch *l, uint32_t e, int s0, int s1, int tid,
			     int nth)
{
	const uint64_t slot_bytes = (uint64_t)l->slice_lines * 8;
	const char *land = (l->dc.stage != NULL ? l->dc.stage : l->dc.heap) + l->ws.land_off +
			   (uint64_t)(e & 1) * (l->nnodes - 1) * slot_bytes;
	const size_t own0 = (size_t)(e & 1) * l->slice_lines * 4;

	for (int i = s0 + tid; i < s1; i += nth) {
		float acc[4];

		/* my node's sum: this thread wrote it in phase B */
		gar1_add(acc, *(const uint2 *)(l->ws.nsum + own0 + 4ull * (i - s0)), true);
		for (int nn = 0; nn < l->nnodes; nn++) {
			const int slot = nn < l->node ? nn : nn - 1;

			if (nn == l->node)
				continue;
			/* past the L1 and L2: the NIC or the proxy wrote it after earlier calls */
			gar1_add(acc,
				 __ldcv((const uint2 *)(land + slot * slot_bytes + 8ull * (i - s0))),
				 false);
		}
		const uint2 d = gar1_pack4(acc);

		gar1_store_c(l, i, d);
		if (l->nlocal > 1)
			gar1_st_ll(l->ws.llf[l->local_rank] + (size_t)(e & 1) * l->slice_lines +
					   (i - s0),
				   d, e);
	}
	return 0;
}

/* Phase D: my node peers' final slices into C. */
MK_DEV int gar1_gather(const struct mk_gar1_launch *l, uint32_t e, int tid, int nth)
{
	const size_t par = (size_t)(e & 1) * l->slice_lines;
	int rc = 0;

	for (int q = 0; q < l->nlocal && rc == 0; q++) {
		const int q0 = mk_gar1_slice(l->lines, l->nlocal, q),
			  q1 = mk_gar1_slice(l->lines, l->nlocal, q + 1);

		if (q == l->local_rank)
			continue;
		for (int i = q0 + tid; i < q1 && rc == 0; i += nth) {
			uint2 d;

			rc = gar1_poll(l->ws.llf[q] + par + (i - q0), e, l, &d);
			if (rc == 0)
				gar1_store_c(l, i, d);
		}
	}
	return rc;
}

extern "C" __global__ void __launch_bounds__(MK_GAR1_THREADS, 1)
	mk_gar1_kernel(const __grid_constant__ struct mk_gar1_launch l)
{
	__shared__ uint32_t e_s;
	__shared__ int rc_s, last_s;
	const int tid = blockIdx.x * blockDim.x + threadIdx.x, nth = gridDim.x * blockDim.x;
	const int s0 = mk_gar1_slice(l.lines, l.nlocal, l.local_rank);
	const int s1 = mk_gar1_slice(l.lines, l.nlocal, l.local_rank + 1);
	int rc = 0;

	if (threadIdx.x == 0) {
		e_s = *(volatile unsigned int *)l.ws.calls + 1;
		rc_s = 0;
	}
	__syncthreads();
	const uint32_t e = e_s;

	/* A: my partial for my node peers */
	if (l.nlocal > 1) {
		uint4 *mine = l.ws.ll[l.local_rank] + (size_t)(e & 1) * l.lines;

		for (int i = tid; i < l.lines; i += nth)
			gar1_st_ll(mine + i, gar1_part(&l, i), e);
	}
	if (l.nnodes == 1) {
		rc = gar1_node_all(&l, e, tid, nth);
	} else {
		rc = gar1_node_slice(&l, e, s0, s1, tid, nth);
		__syncthreads();
		if (threadIdx.x == 0) {
			const int prc = gar1_put_slice(&l, e, s0, s1);

			/* then every other node's put of my slice */
			for (int nn = 0; nn < l.nnodes && prc == 0 && rc_s == 0; nn++) {
				const uint32_t sig = l.ws.sig_base + (uint32_t)nn;

				if (nn != l.node)
					rc_s = mk_dev_signal_wait(&l.dc, sig, l.ws.seen[sig] + 1);
			}
			if (prc)
				rc_s = prc;
		}
		__syncthreads();
		if (rc == 0 && rc_s == 0)
			rc = gar1_remote_slice(&l, e, s0, s1, tid, nth);
		if (rc == 0 && rc_s == 0 && l.nlocal > 1)
			rc = gar1_gather(&l, e, tid, nth);
		if (rc == 0)
			rc = rc_s;
	}
	if (rc)
		mk_dev_record_error(l.ws.error, rc);
	/* The last CTA out closes the call. */
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		last_s = atomicAdd(l.ws.exits, 1u) == gridDim.x - 1;
		if (last_s) {
			for (int nn = 0; nn < l.nnodes; nn++) {
				if (nn != l.node)
					l.ws.seen[l.ws.sig_base + nn] += 1;
			}
			*l.ws.exits = 0;
			__threadfence();
			*(volatile unsigned int *)l.ws.calls = e;
		}
	}
}

extern "C" int mk_gar1_launch(const struct mk_gar1_launch *l, int grid, cudaStream_t stream)
{
	void *params[1] = { (void *)l };

	if (grid < 1)
		return -EINVAL;
	if (cudaLaunchCooperativeKernel((const void *)mk_gar1_kernel, grid, MK_GAR1_THREADS, params,
					0, stream) != cudaSuccess) {
		(void)cudaGetLastError();
		return -EIO;
	}
	return 0;
}
