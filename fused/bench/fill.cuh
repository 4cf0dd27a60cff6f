/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deterministic pseudo-random bf16 fills shared by the GEMM benchmark and the gpu tests: uniform in
 * [-1, 1) or standard normal; real-looking data, never zeros, same inputs every run.
 */
#ifndef MK_FUSED_BENCH_FILL_CUH
#define MK_FUSED_BENCH_FILL_CUH

#include <stdint.h>

#include <cuda_bf16.h>

static __device__ __forceinline__ uint32_t mk_fill_hash(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

static __global__ void mk_fill_bf16(__nv_bfloat16 *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t x = mk_fill_hash((uint32_t)i * 2654435761u ^ seed);

		p[i] = __float2bfloat16((float)(x & 0xFFFF) / 32768.0f - 1.0f);
	}
}

/* Standard normal values (Box-Muller), the distribution torch.randn gives. */
static __global__ void mk_fill_bf16_normal(__nv_bfloat16 *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t x = mk_fill_hash((uint32_t)i * 2654435761u ^ seed);
		uint32_t y = mk_fill_hash(x ^ 0x9e3779b9u);
		float u1 = ((float)(x >> 8) + 1.0f) / 16777217.0f;
		float u2 = (float)(y >> 8) / 16777216.0f;

		p[i] = __float2bfloat16(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
	}
}

#endif /* MK_FUSED_BENCH_FILL_CUH */
