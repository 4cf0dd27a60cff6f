// SPDX-License-Identifier: Apache-2.0
/*
 * The skinny GEMM's kernel (skinny.h). A CTA owns SK_NT x 8 output columns and all M (<= 16)
 * rows; its SK_WARPS warps take every SK_WARPS-th 32-wide k block. Per block a lane loads 16 bytes
 * of one B row (column n0 + 8j + lane/4, k from 8 * (lane % 4)) and 16 bytes of A rows lane/4 and
 * lane/4 + 8 at the same k, and issues two m16n8k16 MMAs per n-tile.
 *
 * The MMA wants, in each lane, A and B elements at k' = 2t, 2t+1 (first register) and 2t+8,
 * 2t+9 (second) for t = lane % 4. A sum does not care which k is called k' as long as A and B
 * agree, so the lane hands it the k it loaded: k' {2t, 2t+1} <- k + 8t + {0, 1}, k' {2t+8, 2t+9}
 * <- k + 8t + {2, 3} in the first MMA, k + 8t + {4..7} in the second. Every load is then one
 * aligned 16-byte vector and no shuffles are needed.
 */
#include <cuda_bf16.h>
#include <errno.h>
#include <stdint.h>

#include "fused/gemm/skinny.h"

#define SK_WARPS   8
#define SK_THREADS (SK_WARPS * 32)
#define SK_KB	   32 /* k per warp step */

/* B is read once: past L1, first to leave L2 (A stays cached for every CTA). */
static __device__ __forceinline__ uint4 sk_ld_stream(const __nv_bfloat16 *p)
{
	return __ldcs((const uint4 *)p);
}

static __device__ __forceinline__ uint4 sk_ld_keep(const __nv_bfloat16 *p)
{
	return __ldg((const uint4 *)p);
}

static __device__ __forceinline__ void sk_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
					      uint32_t a3, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
		     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int SK_NT>
__global__ void __launch_bounds__(SK_THREADS)
	mk_skinny_kernel(const __nv_bfloat16 *__restrict__ a, const __nv_bfloat16 *__restrict__ b,
			 __nv_bfloat16 *__restrict__ c, int m, int n, int k)
{
	__shared__ float red[SK_WARPS][SK_NT][32][4];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, t = lane & 3;
	const int n0 = blockIdx.x * SK_NT * 8;
	const uint4 zero = make_uint4(0, 0, 0, 0);
	const bool row0 = g < m, row1 = g + 8 < m;
	const __nv_bfloat16 *a0 = a + (size_t)(row0 ? g : 0) * k + 8 * t;
	const __nv_bfloat16 *a1 = a + (size_t)(row1 ? g + 8 : 0) * k + 8 * t;
	const __nv_bfloat16 *bp[SK_NT];
	bool col[SK_NT];
	float acc[SK_NT][4];

#pragma unroll
	for (int j = 0; j < SK_NT; j++) {
		const int nn = n0 + 8 * j + g;

		col[j] = nn < n;
		bp[j] = b + (size_t)(col[j] ? nn : 0) * k + 8 * t;
		acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
	}
	/* K is a multiple of 8, so a lane's 8 elements are all in range or all past the end */
#pragma unroll 4
	for (int kb = warp * SK_KB; kb < k; kb += SK_WARPS * SK_KB) {
		const bool in = kb + 8 * t < k;
		const uint4 x = in && row0 ? sk_ld_keep(a0 + kb) : zero;
		const uint4 y = in && row1 ? sk_ld_keep(a1 + kb) : zero;

#pragma unroll
		for (int j = 0; j < SK_NT; j++) {
			const uint4 w = in && col[j] ? sk_ld_stream(bp[j] + kb) : zero;

			sk_mma(acc[j], x.x, y.x, x.y, y.y, w.x, w.y);
			sk_mma(acc[j], x.z, y.z, x.w, y.w, w.z, w.w);
		}
	}
#pragma unroll
	for (int j = 0; j < SK_NT; j++) {
#pragma unroll
		for (int r = 0; r < 4; r++)
			red[warp][j][lane][r] = acc[j][r];
	}
	__syncthreads();
	/* one output per thread and pass: row r, column cc of the CTA's SK_NT x 8 */
	for (int o = threadIdx.x; o < 16 * SK_NT * 8; o += SK_THREADS) {
		const int r = o / (SK_NT * 8), cc = o % (SK_NT * 8);
		const int j = cc / 8, q = cc % 8;
		const int ln = (r % 8) * 4 + q / 2, reg = (r >= 8 ? 2 : 0) + (q & 1);
		float s = 0.0f;

		if (r >= m || n0 + cc >= n)
			continue;
#pragma unroll
		for (int w = 0; w < SK_WARPS; w++)
			s += red[w][j][ln][reg];
		c[(size_t)r * n + n0 + cc] = __float2bfloat16_rn(s);
	}
}

extern "C" int mk_skinny_check(const void *a, const void *b, const void *c, int m, int n, int k,
			       int b_nk, const char **why)
{
	const char *no = NULL;

	if (m < 1 || m > MK_SKINNY_MAX_M)
		no = "the skinny kernel takes 1 .. 16 rows";
	else if (!b_nk)
		no = "the skinny kernel takes B as N x K only";
	else if (n < 1 || k < 8 || k % 8 != 0)
		no = "the skinny kernel needs K a multiple of 8";
	else if (((uintptr_t)a | (uintptr_t)b) % 16 != 0 || (uintptr_t)c % 2 != 0)
		no = "the skinny kernel needs A and B 16-byte aligned";
	if (why != NULL)
		*why = no;
	return no != NULL ? -EINVAL : 0;
}

extern "C" int mk_skinny_launch(const void *a, const void *b, void *c, int m, int n, int k,
				cudaStream_t stream)
{
	/* Two n-tiles per CTA halve the A loads per B load; one where that leaves under two CTAs
	 * per SM (132 SMs on the H200), to keep enough loads in flight. */
	const int wide = (n + 15) / 16 >= 264;
	const int cols = wide ? 16 : 8;
	const dim3 grid((unsigned int)((n + cols - 1) / cols));
	void (*const kernel)(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int,
			     int, int) = wide ? mk_skinny_kernel<2> : mk_skinny_kernel<1>;

	kernel<<<grid, SK_THREADS, 0, stream>>>((const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b,
						(__nv_bfloat16 *)c, m, n, k);
	if (cudaGetLastError() != cudaSuccess)
		return -EIO;
	return 0;
}
