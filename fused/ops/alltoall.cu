// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllToAll's kernel: `slices` CTAs per peer, each moving one contiguous slice of the block
 * (more CTAs for larger blocks: the copies into a host mirror and out of it need several SMs to
 * keep up with the transport). Thread 0 of a slice announces that this rank is ready to receive
 * (signal nranks + me at the peer) and waits until every slice of the peer announced this call
 * (`target`: signals only grow, so the comm passes the running total); the CTA then puts its
 * slice (node peers: stores through the mapped heap; other nodes: through the proxy in 4 MiB
 * chunks) and raises the arrival signal (index me), ordered after the data; it waits for every
 * slice of the peer's block, lands its own slice (a host mirror's arrivals are copied into the
 * heap) and waits for its puts to complete (quiet), so both buffers may be reused when the
 * kernel ends. My own block is a copy. Every wait is bounded; the first error goes to the comm's
 * error word.
 */
#include <cuda_runtime.h>
#include <errno.h>

#include "fused/ops/alltoall.h"
#include "fused/runtime/device.cuh"

#define MK_A2A_CHUNK	     (4ull << 20)
#define MK_A2A_THREADS	     256
#define MK_A2A_SLICE_MIN     (256ull << 10) /* below this per CTA, more CTAs do not pay */
#define MK_A2A_MAX_SLICES    8
#define MK_A2A_MAX_CTAS	     512 /* every CTA must be resident: they wait for each other */

/* Thread 0's wait, shared with the CTA. */
MK_DEV int a2a_wait(const struct mk_dev_comm *c, uint32_t signal, uint64_t value)
{
	__shared__ int rc_s;

	__syncthreads();
	if (threadIdx.x == 0)
		rc_s = mk_dev_signal_wait(c, signal, value);
	__syncthreads();
	return rc_s;
}

/* Slice j of `slices` over bytes: 16-byte aligned boundaries, the last takes the rest. */
MK_DEV void a2a_slice(uint64_t bytes, uint32_t slices, uint32_t j, uint64_t *off, uint64_t *len)
{
	uint64_t step = (bytes / slices + 15) & ~15ull;
	uint64_t lo = step * j < bytes ? step * j : bytes;
	uint64_t hi = step * (j + 1) < bytes && j + 1 < slices ? step * (j + 1) : bytes;

	*off = lo;
	*len = hi - lo;
}

MK_DEV int a2a_exchange(const struct mk_dev_comm *c, int p, uint64_t src, uint64_t dst,
			uint64_t land, uint64_t len, uint64_t target)
{
	const uint32_t me = (uint32_t)c->rank, n = (uint32_t)c->nranks;
	uint32_t t = 0;
	int rc;

	rc = mk_dev_signal_block(c, p, n + me, &t);
	if (rc == 0)
		rc = a2a_wait(c, n + (uint32_t)p, target);
	/* Chunks, the last one carrying the arrival signal (index me). */
	for (uint64_t off = 0; rc == 0 && off + MK_A2A_CHUNK < len; off += MK_A2A_CHUNK)
		rc = mk_dev_put_block(c, p, dst + off, src + off, MK_A2A_CHUNK, &t);
	if (rc == 0) {
		uint64_t last = len > 0 ? (len - 1) / MK_A2A_CHUNK * MK_A2A_CHUNK : 0;

		rc = mk_dev_put_signal_block(c, p, dst + last, src + last, len - last, me, &t);
	}
	if (rc == 0)
		rc = a2a_wait(c, (uint32_t)p, target);
	if (rc == 0)
		mk_dev_land_block(c, p, land, len);
	if (rc == 0 && threadIdx.x == 0)
		rc = mk_dev_quiet(c, t);
	return rc;
}

__global__ void __launch_bounds__(MK_A2A_THREADS)
	mk_alltoall_kernel(struct mk_dev_comm c, uint64_t send_off, uint64_t recv_off,
			   uint64_t bytes, uint32_t slices, uint64_t target)
{
	const int p = (int)(blockIdx.x / slices);
	const uint32_t j = blockIdx.x % slices;
	uint64_t off, len;

	a2a_slice(bytes, slices, j, &off, &len);
	if (p != c.rank) {
		int rc = a2a_exchange(&c, p, send_off + (uint64_t)p * bytes + off,
				      recv_off + (uint64_t)c.rank * bytes + off,
				      recv_off + (uint64_t)p * bytes + off, len, target);

		if (rc && threadIdx.x == 0)
			mk_dev_record_error(c.error, rc);
		return;
	}
	mk_dev_copy(c.heap + recv_off + (uint64_t)p * bytes + off,
		    c.heap + send_off + (uint64_t)p * bytes + off, len, threadIdx.x, blockDim.x,
		    false);
}

extern "C" uint32_t mk_alltoall_slices(uint64_t bytes, int nranks)
{
	uint32_t s = 1;

	while (s < MK_A2A_MAX_SLICES && bytes / (2 * s) >= MK_A2A_SLICE_MIN &&
	       (uint64_t)nranks * 2 * s <= MK_A2A_MAX_CTAS)
		s *= 2;
	return s;
}

/*
 * Load the kernel now (mkCommInit calls this through the op's hook in alltoall_api.c): with lazy
 * module loading, a first launch while an application kernel spins waiting for this one could
 * wait for that kernel to finish.
 */
extern "C" int mk_alltoall_preload(void)
{
	struct cudaFuncAttributes fa;

	return cudaFuncGetAttributes(&fa, mk_alltoall_kernel) == cudaSuccess ? 0 : -EIO;
}

extern "C" int mk_alltoall_launch(const struct mk_dev_comm *c, uint64_t send_off,
				  uint64_t recv_off, uint64_t bytes, uint32_t slices,
				  uint64_t target, cudaStream_t stream)
{
	mk_alltoall_kernel<<<c->nranks * slices, MK_A2A_THREADS, 0, stream>>>(
		*c, send_off, recv_off, bytes, slices, target);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
