/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The adaptive controller against static splits, as test-gar-gpu and test-seqpar-gpu time it:
 * MK_SPLIT_CONFIGS configurations (four static counts, the policy's split, adaptive last) in
 * interleaved rounds. The best of four noisy static splits, picked and timed on the same rounds,
 * is biased low: the minimum of four medians wins on its noise too. Held out, the best static
 * split is picked on the even rounds and timed (with adaptive) on the odd ones, then the other
 * way round, and the two ratios averaged.
 */
#ifndef MK_TEST_GPU_SPLIT_BENCH_H
#define MK_TEST_GPU_SPLIT_BENCH_H

#include <stdlib.h>

#include "fused/ops/gemm_allreduce_plan.h"
#include "rank_check.h"

#define MK_SPLIT_CONFIGS 6 /* 4 static counts, the policy's split, adaptive */
/*
 * Even: half of them pick, the other half time. 24, not 12: on the emulated layouts one call's
 * p10-p90 spans 10-20 %, and a held-out median of 6 rounds moved a tie by 5 % from run to run.
 */
#define MK_SPLIT_ROUNDS	 24

/*
 * The controller's calls before the rounds: its search measures a probe in up to 16 pairs of
 * calls and settles within about 60 calls on average, 160 at most, under 3-5 % noise
 * (test_gar_plan.c), more under the heavier noise of ranks that share a GPU; so as many calls as
 * fit in MK_SPLIT_WARM_MS, between MK_SPLIT_WARM_MIN and MK_SPLIT_WARM_MAX (400 calls of a
 * 50 us shape take 20 ms). call_ms must be the same on every rank (the maximum over ranks):
 * every rank makes the same number of calls.
 */
#define MK_SPLIT_WARM_MS  3000.0f
#define MK_SPLIT_WARM_MIN 20
#define MK_SPLIT_WARM_MAX 400

static int split_warm_calls(float call_ms)
{
	const float n = call_ms > 0.0f ? MK_SPLIT_WARM_MS / call_ms : (float)MK_SPLIT_WARM_MAX;

	return n < MK_SPLIT_WARM_MIN   ? MK_SPLIT_WARM_MIN
	       : n > MK_SPLIT_WARM_MAX ? MK_SPLIT_WARM_MAX
				       : (int)n;
}

/* v[0..count) becomes its maximum over all ranks (host floats, through a device copy). */
static void rank_max_f32(float *v, int count, ncclComm_t nccl)
{
	float *d;

	CK(cudaMalloc((void **)&d, (size_t)count * sizeof(float)));
	CK(cudaMemcpy(d, v, (size_t)count * sizeof(float), cudaMemcpyHostToDevice));
	NK(ncclAllReduce(d, d, (size_t)count, ncclFloat32, ncclMax, nccl, 0));
	CK(cudaMemcpy(v, d, (size_t)count * sizeof(float), cudaMemcpyDeviceToHost));
	CK(cudaFree(d));
}

/* hm[parity][config]: the median of each configuration over the rounds of that parity. */
static void split_half_medians(float t[][MK_SPLIT_ROUNDS], int rounds,
			       float hm[2][MK_SPLIT_CONFIGS])
{
	for (int parity = 0; parity < 2; parity++) {
		for (int i = 0; i < MK_SPLIT_CONFIGS; i++) {
			float h[MK_SPLIT_ROUNDS];
			int n = 0;

			for (int r = parity; r < rounds; r += 2)
				h[n++] = t[i][r];
			qsort(h, (size_t)n, sizeof(float), cmp_f);
			hm[parity][i] = h[n / 2];
		}
	}
}

/* Held-out best static time over adaptive time (>= 1: adaptive as fast as the best). */
static float split_heldout_ratio(float hm[2][MK_SPLIT_CONFIGS])
{
	float sum = 0.0f;

	for (int pick = 0; pick < 2; pick++) {
		int best = 0;

		for (int i = 1; i < 4; i++)
			if (hm[pick][i] < hm[pick][best])
				best = i;
		sum += hm[!pick][best] / hm[!pick][MK_SPLIT_CONFIGS - 1];
	}
	return sum / 2.0f;
}

#endif
