/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The grouped GEMM's portable kernel, built for every GPU from sm_75 on (its own gencode list in
 * fused/meson.build): the same device-side schedule as the Hopper kernel (grouped_sched.h) with
 * 64 x 64 tiles, bf16 loads of any alignment, fp32 products and sums on CUDA cores, stores
 * clipped at the expert's last row. Correct everywhere, not fast: it is what runs where the
 * Hopper kernel cannot.
 */
#include <errno.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fused/gemm/grouped.h"
#include "fused/gemm/grouped_sched.h"

#define P_BM MK_GROUPED_P_BM
#define P_BN MK_GROUPED_P_BN
#define P_BK MK_GROUPED_P_BK

struct grouped_p_args {
	const __nv_bfloat16 *a, *b;
	__nv_bfloat16 *c;
	const int *offsets;
	int num_experts, max_rows, n, k, b_nk, tiles_n;
};

/* 256 threads, each a 4 x 4 block of the 64 x 64 tile (rows ty + 16 i, columns tx + 16 j). */
extern "C" __global__ void __launch_bounds__(MK_GROUPED_P_THREADS)
	mk_grouped_portable_kernel(const struct grouped_p_args p)
{
	__shared__ float as[P_BK][P_BM + 1]; /* k-major: a row of k broadcasts along the tile */
	__shared__ float bs[P_BK][P_BN + 1];
	__shared__ struct mk_grouped_tile tile;
	const struct mk_grouped_shape shape = { p.offsets, p.num_experts, p.max_rows,
						p.tiles_n,  P_BM,	   P_BN };
	struct mk_grouped_cursor cur = { 0, 0, 0 };
	const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

	for (int ticket = blockIdx.x;; ticket += gridDim.x) {
		__syncthreads(); /* the previous tile's last reads of `tile` and the stages */
		if (threadIdx.x == 0)
			mk_grouped_find(&cur, &shape, ticket, &tile);
		__syncthreads();
		const struct mk_grouped_tile t = tile;

		if (t.e < 0)
			break;

		const size_t b_base = (size_t)t.e * p.n * p.k;
		float acc[4][4] = { { 0 } };

		for (int k0 = 0; k0 < p.k; k0 += P_BK) {
			/* 64 x 16 of A and 16 x 64 of B, 4 elements per thread each; zeros past
			 * the expert's rows, N and K. */
			for (int i = threadIdx.x; i < P_BM * P_BK; i += blockDim.x) {
				const int r = i / P_BK, kk = i % P_BK, k = k0 + kk;
				/* B along K for an N x K B_e, along N for K x N: coalesced. */
				const int col = p.b_nk ? i / P_BK : i % P_BN;
				const int kb = p.b_nk ? i % P_BK : i / P_BN, kcol = k0 + kb;
				float av = 0, bv = 0;

				if (r < t.rows && k < p.k)
					av = __bfloat162float(p.a[(size_t)(t.row0 + r) * p.k + k]);
				if (t.n0 + col < p.n && kcol < p.k)
					bv = __bfloat162float(
						p.b_nk ? p.b[b_base + (size_t)(t.n0 + col) * p.k + kcol]
						       : p.b[b_base + (size_t)kcol * p.n + t.n0 + col]);
				as[kk][r] = av;
				bs[kb][col] = bv;
			}
			__syncthreads();
#pragma unroll
			for (int kk = 0; kk < P_BK; kk++) {
#pragma unroll
				for (int i = 0; i < 4; i++)
#pragma unroll
					for (int j = 0; j < 4; j++)
						acc[i][j] += as[kk][ty + 16 * i] * bs[kk][tx + 16 * j];
			}
			__syncthreads();
		}
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int r = ty + 16 * i;

			if (r >= t.rows)
				continue;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const int col = t.n0 + tx + 16 * j;

				if (col < p.n)
					p.c[(size_t)(t.row0 + r) * p.n + col] =
						__float2bfloat16_rn(acc[i][j]);
			}
		}
	}
}

extern "C" int mk_grouped_portable_run(const struct mk_grouped_launch *l, cudaStream_t stream)
{
	struct grouped_p_args p;
	long long bound;
	int dev, sms = 0, grid;

	if (l->num_experts < 1 || l->n < 1 || l->k < 1 || l->max_rows < 0 || l->a == NULL ||
	    l->b == NULL || l->c == NULL || l->offsets == NULL ||
	    (l->b_layout != MK_GEMM_B_KN && l->b_layout != MK_GEMM_B_NK) ||
	    ((uintptr_t)l->a | (uintptr_t)l->b | (uintptr_t)l->c) & 1)
		return -EINVAL;
	p.tiles_n = (l->n + P_BN - 1) / P_BN;
	bound = mk_grouped_tile_bound(l->max_rows, l->num_experts, p.tiles_n, P_BM,
				      MK_GROUPED_MAX_TILES);
	if (bound < 0)
		return -EINVAL;
	if (l->max_rows == 0)
		return 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
		return -EIO;
	p.a = (const __nv_bfloat16 *)l->a;
	p.b = (const __nv_bfloat16 *)l->b;
	p.c = (__nv_bfloat16 *)l->c;
	p.offsets = l->offsets;
	p.num_experts = l->num_experts;
	p.max_rows = l->max_rows;
	p.n = l->n;
	p.k = l->k;
	p.b_nk = l->b_layout == MK_GEMM_B_NK;
	/* Several blocks per SM: latency is hidden by occupancy, not by a pipeline. */
	grid = l->ctas > 0 ? l->ctas : 8 * sms;
	if (grid > bound)
		grid = (int)bound;
	mk_grouped_portable_kernel<<<grid, MK_GROUPED_P_THREADS, 0, stream>>>(p);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
