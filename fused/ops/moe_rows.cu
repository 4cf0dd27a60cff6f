// SPDX-License-Identifier: Apache-2.0
/*
 * Row kernels of the MoE ops' unfused path: gather and scatter of whole rows by an index list
 * (token rows into the exchange buffer, received rows into expert order and back), and the
 * weighted sum of a token's returned rows. 16-byte copies when the rows and pointers allow.
 */
#include <errno.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fused/ops/moe.h"

#define ROWS_THREADS 256

/* One block per row (grid-stride), threads over the row's 16-byte (or 2-byte) pieces. */
__global__ void __launch_bounds__(ROWS_THREADS)
	moe_move_rows(char *dst, const char *src, const int32_t *idx, int rows, size_t row_bytes,
		      int scatter)
{
	const int vec = (row_bytes % 16) == 0 && ((uintptr_t)dst % 16) == 0 &&
			((uintptr_t)src % 16) == 0;

	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const int i = idx[r];

		if (i < 0)
			continue;
		char *d = dst + (size_t)(scatter ? i : r) * row_bytes;
		const char *s = src + (size_t)(scatter ? r : i) * row_bytes;

		if (vec) {
			for (size_t o = threadIdx.x * 16; o < row_bytes; o += ROWS_THREADS * 16)
				*(uint4 *)(d + o) = *(const uint4 *)(s + o);
		} else {
			for (size_t o = threadIdx.x * 2; o < row_bytes; o += ROWS_THREADS * 2)
				*(uint16_t *)(d + o) = *(const uint16_t *)(s + o);
		}
	}
}

static int rows_launch(void *dst, const void *src, const int32_t *idx, int rows,
		       size_t row_bytes, int scatter, cudaStream_t stream)
{
	if (rows <= 0)
		return 0;
	moe_move_rows<<<rows < 4096 ? rows : 4096, ROWS_THREADS, 0, stream>>>(
		(char *)dst, (const char *)src, idx, rows, row_bytes, scatter);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int mk_moe_gather_rows(void *dst, const void *src, const int32_t *idx, int rows,
				  size_t row_bytes, cudaStream_t stream)
{
	return rows_launch(dst, src, idx, rows, row_bytes, 0, stream);
}

extern "C" int mk_moe_scatter_rows(void *dst, const void *src, const int32_t *idx, int rows,
				   size_t row_bytes, cudaStream_t stream)
{
	return rows_launch(dst, src, idx, rows, row_bytes, 1, stream);
}

/* One block per token (grid-stride); each thread sums its columns over the token's slots. */
__global__ void __launch_bounds__(ROWS_THREADS)
	moe_weighted_sum(__nv_bfloat16 *y, const __nv_bfloat16 *ret, const char *lay,
			 struct mk_moe_lmap m, int topk, int hidden, int max_tokens)
{
	const struct mk_moe_lhdr *hdr = (const struct mk_moe_lhdr *)(lay + m.hdr);
	const int32_t *pos = (const int32_t *)(lay + m.unf_pos);
	const float *w = (const float *)(lay + m.pair_w);
	const int ntok = min(hdr->ntok, max_tokens);

	for (int t = blockIdx.x; t < ntok; t += gridDim.x) {
		for (int col = threadIdx.x; col < hidden; col += ROWS_THREADS) {
			float acc = 0.0f;

			for (int j = 0; j < topk; j++) {
				const int p = pos[t * topk + j];

				if (p >= 0)
					acc += w[t * topk + j] *
					       __bfloat162float(ret[(size_t)p * hidden + col]);
			}
			y[(size_t)t * hidden + col] = __float2bfloat16_rn(acc);
		}
	}
}

extern "C" int mk_moe_weighted_sum(void *y, const void *ret, const void *layout,
				   const struct mk_moe_geom *g, cudaStream_t stream)
{
	struct mk_moe_lmap m;

	if (g->max_tokens == 0)
		return 0;
	mk_moe_lmap_init(g, &m);
	moe_weighted_sum<<<g->max_tokens < 4096 ? g->max_tokens : 4096, ROWS_THREADS, 0, stream>>>(
		(__nv_bfloat16 *)y, (const __nv_bfloat16 *)ret, (const char *)layout, m, g->topk,
		g->hidden, g->max_tokens);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
