// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllToAll's kernel: one CTA per peer. For a remote peer, thread 0 announces that this rank is
 * ready to receive (SIGNAL at index nranks + me), waits for the peer's announcement, puts its
 * block in chunks through the command queue, raises the arrival signal (index me; ordered after
 * the data on the same connection), then waits for the peer's block and for its own puts to
 * complete (quiet), so both buffers may be reused when the kernel ends. My own block is copied by
 * the CTA for myself. Every wait is bounded; the first error goes to the comm's error word.
 */
#include <cuda_runtime.h>
#include <errno.h>

#include "fused/ops/alltoall.h"
#include "fused/runtime/device.cuh"

#define MK_A2A_CHUNK   (4ull << 20)
#define MK_A2A_THREADS 256

/* First error wins, roughly: atomics on mapped host memory are not guaranteed over PCIe. */
MK_DEV void a2a_fail(const struct mk_dev_comm *c, int rc)
{
	if (mk_ld_relaxed_sys_s32(c->error) == 0)
		mk_st_relaxed_sys_u32((uint32_t *)c->error, (uint32_t)rc);
}

MK_DEV int a2a_exchange(const struct mk_dev_comm *c, int p, uint64_t send_off,
			uint64_t recv_off, uint64_t bytes, uint64_t epoch)
{
	const uint32_t me = (uint32_t)c->rank, n = (uint32_t)c->nranks;
	uint64_t src = send_off + (uint64_t)p * bytes, dst = recv_off + (uint64_t)me * bytes;
	uint32_t t;
	int rc;

	rc = mk_dev_put_cmd(c, MK_CMD_SIGNAL, p, 0, 0, 0, n + me, &t);
	if (rc == 0)
		rc = mk_dev_signal_wait(c, n + (uint32_t)p, epoch);
	for (uint64_t off = 0; rc == 0 && off < bytes; off += MK_A2A_CHUNK) {
		uint64_t len = bytes - off < MK_A2A_CHUNK ? bytes - off : MK_A2A_CHUNK;

		rc = mk_dev_put(c, p, dst + off, src + off, len, &t);
	}
	if (rc == 0)
		rc = mk_dev_put_cmd(c, MK_CMD_SIGNAL, p, 0, 0, 0, me, &t);
	if (rc == 0)
		rc = mk_dev_signal_wait(c, (uint32_t)p, epoch);
	if (rc == 0)
		rc = mk_dev_quiet(c, t);
	return rc;
}

__global__ void __launch_bounds__(MK_A2A_THREADS)
	mk_alltoall_kernel(struct mk_dev_comm c, uint64_t send_off, uint64_t recv_off,
			   uint64_t bytes, uint64_t epoch)
{
	const int p = blockIdx.x;

	if (p != c.rank) {
		if (threadIdx.x == 0) {
			int rc = a2a_exchange(&c, p, send_off, recv_off, bytes, epoch);

			if (rc)
				a2a_fail(&c, rc);
		}
		return;
	}
	/* My own block: a plain copy, 16 bytes at a time when aligned. */
	{
		const char *src = c.heap + send_off + (uint64_t)p * bytes;
		char *dst = c.heap + recv_off + (uint64_t)p * bytes;

		if (((uintptr_t)src % 16) == 0 && ((uintptr_t)dst % 16) == 0 && bytes % 16 == 0) {
			const uint4 *s4 = (const uint4 *)src;
			uint4 *d4 = (uint4 *)dst;

			for (uint64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
				d4[i] = s4[i];
		} else {
			for (uint64_t i = threadIdx.x; i < bytes; i += blockDim.x)
				dst[i] = src[i];
		}
	}
}

/*
 * Load the kernel now (mkCommInit calls this): with lazy module loading, a first launch while an
 * application kernel spins waiting for this one could wait for that kernel to finish.
 */
extern "C" int mk_alltoall_preload(void)
{
	struct cudaFuncAttributes fa;

	return cudaFuncGetAttributes(&fa, mk_alltoall_kernel) == cudaSuccess ? 0 : -EIO;
}

extern "C" int mk_alltoall_launch(const struct mk_dev_comm *c, uint64_t send_off,
				  uint64_t recv_off, uint64_t bytes, uint64_t epoch,
				  cudaStream_t stream)
{
	mk_alltoall_kernel<<<c->nranks, MK_A2A_THREADS, 0, stream>>>(*c, send_off, recv_off, bytes,
								      epoch);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
