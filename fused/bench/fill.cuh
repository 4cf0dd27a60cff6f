/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deterministic pseudo-random bf16 fill (uniform in [-1, 1), 16 random bits per element) shared by
 * the GEMM benchmark and the gpu tests: real-looking data, never zeros, same inputs every run.
 */
#ifndef MK_FUSED_BENCH_FILL_CUH
#define MK_FUSED_BENCH_FILL_CUH

#include <stdint.h>

#include <cuda_bf16.h>

static __global__ void mk_fill_bf16(__nv_bfloat16 *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t x = (uint32_t)i * 2654435761u ^ seed;

		x ^= x >> 16;
		x *= 0x7feb352du;
		x ^= x >> 15;
		x *= 0x846ca68bu;
		x ^= x >> 16;
		p[i] = __float2bfloat16((float)(x & 0xFFFF) / 32768.0f - 1.0f);
	}
}

#endif /* MK_FUSED_BENCH_FILL_CUH */
