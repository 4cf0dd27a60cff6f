// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce's fused persistent kernel (roles and flags: gemm_allreduce.h). Every CTA has
 * MK_GEMM_THREADS threads and the engine's shared memory, so a CTA of any role occupies one SM;
 * the launch is cooperative, so every CTA is resident and waiting roles cannot starve the roles
 * they wait for. Every wait is bounded by the comm's timeout; the first error goes to the comm's
 * error word and the waiting roles of every rank then give up in turn.
 */
#include <cuda_bf16.h>
#include <errno.h>

#include "fused/gemm/gemm_engine.cuh"
#include "fused/ops/gemm_allreduce.h"
#include "fused/runtime/device.cuh"

/* Rows, columns and origin of tile t (the engine's 128 x 256 tiles, clipped at the edges). */
struct gar_tile {
	int r0, c0, rows, cols;
};

MK_DEV struct gar_tile gar_tile_of(int t, int tiles_n, int m, int n)
{
	struct gar_tile g;

	g.r0 = (t / tiles_n) * MK_GEMM_BM;
	g.c0 = (t % tiles_n) * MK_GEMM_BN;
	g.rows = min(MK_GEMM_BM, m - g.r0);
	g.cols = min(MK_GEMM_BN, n - g.c0);
	return g;
}

/* Thread 0 waits until *flag >= want; the result is shared with the CTA. */
MK_DEV int gar_wait(const struct mk_gar_ws_dev *ws, const unsigned int *flag, unsigned int want)
{
	__shared__ int rc_s;

	__syncthreads(); /* every thread has read the previous wait's result */
	if (threadIdx.x == 0)
		rc_s = mk_dev_wait_u32_ge(flag, want, ws->error, ws->timeout_ns);
	__syncthreads();
	return rc_s;
}

/* Raise *flag after every thread's stores of the tile (thread 0, system scope: peers read). */
MK_DEV void gar_raise(unsigned int *flag)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		mk_fence_acq_rel_sys();
		mk_red_release_sys_add_u32(flag, 1);
	}
}

MK_DEV float gar_bf16(uint16_t v)
{
	return __uint_as_float((uint32_t)v << 16);
}

MK_DEV uint32_t gar_pack(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

/* CTA-wide ticket from a counter the last CTA of the call resets. */
MK_DEV int gar_ticket(unsigned int *counter)
{
	__shared__ int t_s;

	__syncthreads(); /* every thread has read the previous ticket */
	if (threadIdx.x == 0)
		t_s = (int)atomicAdd(counter, 1u);
	__syncthreads();
	return t_s;
}

#define GAR_UNROLL 4 /* 16-byte vectors in flight per thread and peer */

/*
 * Sum of the node peers' partial tiles into my result tile, fp32 in registers. Peer data is
 * read through L2 only (__ldcg): a line another process rewrote since an earlier call must not
 * come from this SM's L1.
 */
MK_DEV void gar_sum_tile(const struct mk_gar_launch *l, struct gar_tile g)
{
	const int nl = l->nlocal;
	uint16_t *out = l->ws.r[l->local_rank];

	if (l->n % 8 == 0) {
		const int vec = g.cols / 8, total = g.rows * vec;

		for (int i0 = threadIdx.x; i0 < total; i0 += GAR_UNROLL * blockDim.x) {
			float acc[GAR_UNROLL][8];
			size_t off[GAR_UNROLL];

			for (int u = 0; u < GAR_UNROLL; u++) {
				int i = i0 + u * blockDim.x;

				off[u] = i < total ? (size_t)(g.r0 + i / vec) * l->n + g.c0 +
							     (i % vec) * 8
						   : 0;
				for (int j = 0; j < 8; j++)
					acc[u][j] = 0;
			}
			for (int p = 0; p < nl; p++) {
				uint4 x[GAR_UNROLL];

				for (int u = 0; u < GAR_UNROLL; u++) {
					if (i0 + u * (int)blockDim.x < total)
						x[u] = __ldcg((const uint4 *)(l->ws.w[p] + off[u]));
				}
				for (int u = 0; u < GAR_UNROLL; u++) {
					const uint32_t w[4] = { x[u].x, x[u].y, x[u].z, x[u].w };

					if (i0 + u * (int)blockDim.x >= total)
						continue;
					for (int j = 0; j < 4; j++) {
						acc[u][2 * j] += gar_bf16((uint16_t)(w[j] & 0xffff));
						acc[u][2 * j + 1] += gar_bf16((uint16_t)(w[j] >> 16));
					}
				}
			}
			for (int u = 0; u < GAR_UNROLL; u++) {
				uint4 o;

				if (i0 + u * (int)blockDim.x >= total)
					continue;
				o.x = gar_pack(acc[u][0], acc[u][1]);
				o.y = gar_pack(acc[u][2], acc[u][3]);
				o.z = gar_pack(acc[u][4], acc[u][5]);
				o.w = gar_pack(acc[u][6], acc[u][7]);
				*(uint4 *)(out + off[u]) = o;
			}
		}
		return;
	}
	for (int i = threadIdx.x; i < g.rows * g.cols; i += blockDim.x) {
		size_t off = (size_t)(g.r0 + i / g.cols) * l->n + g.c0 + i % g.cols;
		float acc = 0;

		for (int p = 0; p < nl; p++)
			acc += gar_bf16(__ldcg((const unsigned short *)(l->ws.w[p] + off)));
		out[off] = (uint16_t)(gar_pack(acc, 0) & 0xffff);
	}
}

/* Copy a tile of the owner's result into C. */
MK_DEV void gar_copy_tile(const struct mk_gar_launch *l, const uint16_t *src, struct gar_tile g)
{
	uint16_t *c = (uint16_t *)l->c;

	if (l->n % 8 == 0 && ((uintptr_t)c % 16) == 0) {
		const int vec = g.cols / 8, total = g.rows * vec;

		for (int i0 = threadIdx.x; i0 < total; i0 += GAR_UNROLL * blockDim.x) {
			uint4 x[GAR_UNROLL];
			size_t off[GAR_UNROLL];

			for (int u = 0; u < GAR_UNROLL; u++) {
				int i = i0 + u * blockDim.x;

				off[u] = (size_t)(g.r0 + i / vec) * l->n + g.c0 + (i % vec) * 8;
				if (i < total)
					x[u] = __ldcg((const uint4 *)(src + off[u]));
			}
			for (int u = 0; u < GAR_UNROLL; u++) {
				if (i0 + u * (int)blockDim.x < total)
					*(uint4 *)(c + off[u]) = x[u];
			}
		}
		return;
	}
	for (int j = threadIdx.x; j < g.rows * g.cols; j += blockDim.x) {
		size_t off = (size_t)(g.r0 + j / g.cols) * l->n + g.c0 + j % g.cols;

		c[off] = __ldcg((const unsigned short *)(src + off));
	}
}

/*
 * reduce: tickets over the tiles of my slice, in the order compute produces them. Returns 0, or
 * the error that stopped it (already recorded).
 */
MK_DEV int gar_reduce(const struct mk_gar_launch *l, int tiles_m, int tiles_n, unsigned int e)
{
	const int rows = l->local_rank < tiles_m
				 ? (tiles_m - l->local_rank + l->nlocal - 1) / l->nlocal
				 : 0;

	for (;;) {
		const int i = gar_ticket(l->ws.tickets);
		int rc = 0, t;

		if (i >= rows * tiles_n)
			return 0;
		t = (l->local_rank + (i / tiles_n) * l->nlocal) * tiles_n + i % tiles_n;
		for (int p = 0; p < l->nlocal && rc == 0; p++)
			rc = gar_wait(&l->ws, &l->ws.ready[p][t], e);
		if (rc) {
			if (threadIdx.x == 0)
				mk_dev_record_error(l->ws.error, rc);
			return rc;
		}
		gar_sum_tile(l, gar_tile_of(t, tiles_n, l->m, l->n));
		gar_raise(&l->ws.final[l->local_rank][t]);
	}
}

/* publish: tickets over every tile in row order (the owners finish their slices row by row). */
MK_DEV void gar_publish(const struct mk_gar_launch *l, int tiles_m, int tiles_n, unsigned int e)
{
	for (;;) {
		const int t = gar_ticket(l->ws.tickets + 1);
		int owner, rc;

		if (t >= tiles_m * tiles_n)
			return;
		owner = (t / tiles_n) % l->nlocal;
		rc = gar_wait(&l->ws, &l->ws.final[owner][t], e);
		if (rc) {
			if (threadIdx.x == 0)
				mk_dev_record_error(l->ws.error, rc);
			return;
		}
		gar_copy_tile(l, l->ws.r[owner], gar_tile_of(t, tiles_n, l->m, l->n));
	}
}

template <int B_NK>
__global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_gar_kernel(const __grid_constant__ struct mk_gemm_tmaps maps,
		      const __grid_constant__ struct mk_gemm_args g,
		      const __grid_constant__ struct mk_gar_launch l)
{
	extern __shared__ __align__(1024) unsigned char gar_dyn[];
	__shared__ unsigned int e_s;
	__shared__ int entry_rc;
	const int b = blockIdx.x;

	/*
	 * Call e starts once every node peer has finished call e - 1 (its last CTA stored e - 1
	 * in its call counter), so no CTA of this call overlaps a peer's previous one: buffers and
	 * flags of consecutive calls never meet, whatever the host did in between.
	 */
	if (threadIdx.x == 0) {
		e_s = *(volatile unsigned int *)l.ws.calls + 1;
		entry_rc = 0;
		for (int p = 0; p < l.nlocal && entry_rc == 0; p++)
			entry_rc = mk_dev_wait_u32_ge(l.ws.peer_calls[p], e_s - 1, l.ws.error,
						      l.ws.timeout_ns);
		if (entry_rc)
			mk_dev_record_error(l.ws.error, entry_rc);
	}
	__syncthreads();
	if (entry_rc)
		goto leave;
	/*
	 * Compute CTAs join the reduce and then the publish work when the GEMM gives them no more
	 * tiles; reduce CTAs join publish. Tickets share the work, and every reduce ticket is
	 * taken by a CTA that waits only for compute, so no CTA waits on work nobody will do.
	 */
	if (b < l.compute) {
		mk_gemm_role(&g, &maps, b, l.compute, gar_dyn, B_NK);
		/*
		 * The engine left its warpgroups at 56 / 224 registers: back to an even split.
		 * setmaxnreg is .sync.aligned: every warp must arrive converged, and warp 0's
		 * thread 0 (the producer) leaves the engine after its warp-mates.
		 */
		__syncthreads();
		if (threadIdx.x < 128)
			mk_setmaxnreg_inc(168);
		else
			mk_setmaxnreg_dec(168);
	}
	if (b < l.compute + l.reduce) {
		if (gar_reduce(&l, g.tiles_m, g.tiles_n, e_s) == 0)
			gar_publish(&l, g.tiles_m, g.tiles_n, e_s);
	} else {
		gar_publish(&l, g.tiles_m, g.tiles_n, e_s);
	}
leave:
	/* The last CTA out records the call: the next call (or graph replay) waits for e + 1. */
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		if (atomicAdd(l.ws.exits, 1u) == gridDim.x - 1) {
			l.ws.tickets[0] = 0;
			l.ws.tickets[1] = 0;
			*l.ws.exits = 0;
			/* Node peers wait for this word (entry above). */
			mk_peer_st_release_u32(l.ws.calls, e_s);
		}
	}
}

extern "C" int mk_gar_prepare(void)
{
	if (cudaFuncSetAttribute((const void *)mk_gar_kernel<1>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_GEMM_SMEM_BYTES) != cudaSuccess ||
	    cudaFuncSetAttribute((const void *)mk_gar_kernel<0>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_GEMM_SMEM_BYTES) != cudaSuccess)
		return -EIO;
	return 0;
}

extern "C" int mk_gar_launch(const struct mk_gar_launch *l, cudaStream_t stream)
{
	struct mk_gemm_args g;
	struct mk_gemm_tmaps maps;
	void *params[3];
	int rc;

	if (l->compute < 1 || l->reduce < 1 || l->publish < 1)
		return -EINVAL;
	mk_gemm_args_init(&g, l->m, l->n, l->k, l->b_layout, l->ws.w[l->local_rank]);
	g.sched.order = l->order;
	g.epi.ready = l->ws.ready[l->local_rank];
	g.epi.ready_scope = MK_GEMM_FLAG_SYS;
	rc = mk_gemm_check(l->a, l->b, &g, NULL);
	if (rc == 0)
		rc = mk_gemm_make_tensor_maps(l->a, l->b, &g, &maps);
	if (rc)
		return rc;
	params[0] = &maps;
	params[1] = &g;
	params[2] = (void *)l;
	if (cudaLaunchCooperativeKernel(l->b_layout == MK_GEMM_B_NK ? (const void *)mk_gar_kernel<1>
								    : (const void *)mk_gar_kernel<0>,
					l->compute + l->reduce + l->publish, MK_GEMM_THREADS, params,
					MK_GEMM_SMEM_BYTES, stream) != cudaSuccess)
		return -EIO;
	return 0;
}
