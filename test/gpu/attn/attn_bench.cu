/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkernel-attn-bench: mkAttention's forward throughput on one GPU. Per shape: N(0, 1) bf16
 * inputs (BSHD), warm-ups, then repetitions each timed with its own CUDA event pair; the median
 * (and p10 / p90) becomes TFLOP/s with FlashAttention's convention (4 B H Sq Skv D, halved when
 * causal). Up to --check-max S, the output is compared with the portable kernel's (max |diff|,
 * relative RMS). One JSON line per shape, then a table. The ratio to PyTorch SDPA comes from
 * scripts/gpu/attn_bench.py, which times both in one process.
 *
 * Usage: mkernel-attn-bench [--reps N] [--warmup N] [--quick] [--check-max S]
 *                           [--shape B H S D causal]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mkernel.h"
#include "fused/attn/attn.h"
#include "fused/bench/fill.cuh"
#include "mk/revision.h"

#define BENCH_MAX_ROWS 64

struct bench_row {
	int b, h, s, d, causal;
	double ms, tflops, max_diff, rel_rms;
};

static struct bench_row rows[BENCH_MAX_ROWS];
static int nrows;

static int bench_cuda(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "attn-bench: %s: %s\n", what, cudaGetErrorString(e));
	return -1;
}

/* max |x - y|, sum (x - y)^2 and sum y^2 over bf16 arrays. */
__global__ void bench_diff(const __nv_bfloat16 *x, const __nv_bfloat16 *y, size_t n, double *acc)
{
	double d2 = 0, y2 = 0;
	float mx = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);

		d2 += (double)(a - b) * (a - b);
		y2 += (double)b * b;
		mx = fmaxf(mx, isnan(a - b) ? INFINITY : fabsf(a - b));
	}
	atomicAdd(&acc[0], d2);
	atomicAdd(&acc[1], y2);
	atomicMax((unsigned long long *)&acc[2], (unsigned long long)__float_as_uint(mx));
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int bench_shape(int b, int h, int s, int d, int causal, int reps, int warmup,
		       int check_max, const char *gpu)
{
	const size_t n = (size_t)b * s * h * d;
	void *q = NULL, *k = NULL, *v = NULL, *o = NULL, *o2 = NULL;
	float *lse = NULL;
	double *times = (double *)calloc(reps, sizeof(double)), *acc = NULL;
	cudaEvent_t ev[2] = { NULL, NULL };
	struct bench_row *row = &rows[nrows];
	const double flops = 4.0 * b * h * (double)s * s * d * (causal ? 0.5 : 1.0);
	int rc = -1;

	if (times == NULL || nrows == BENCH_MAX_ROWS)
		return -1;
	cudaEventCreate(&ev[0]);
	cudaEventCreate(&ev[1]);
	if (bench_cuda(cudaMalloc(&q, n * 2), "malloc q") || bench_cuda(cudaMalloc(&k, n * 2), "k") ||
	    bench_cuda(cudaMalloc(&v, n * 2), "v") || bench_cuda(cudaMalloc(&o, n * 2), "o") ||
	    bench_cuda(cudaMalloc((void **)&lse, (size_t)b * h * s * 4), "lse"))
		goto undo_buffers;
	mk_fill_bf16_normal<<<1024, 256>>>((__nv_bfloat16 *)q, n, 11u + s);
	mk_fill_bf16_normal<<<1024, 256>>>((__nv_bfloat16 *)k, n, 13u + s);
	mk_fill_bf16_normal<<<1024, 256>>>((__nv_bfloat16 *)v, n, 17u + s);
	for (int i = 0; i < warmup; i++)
		if (mkAttention(q, k, v, o, lse, b, h, h, s, s, d, causal, 0) != ncclSuccess)
			goto undo_buffers;
	for (int i = 0; i < reps; i++) {
		float ms = 0;

		cudaEventRecord(ev[0], 0);
		mkAttention(q, k, v, o, lse, b, h, h, s, s, d, causal, 0);
		cudaEventRecord(ev[1], 0);
		if (bench_cuda(cudaEventSynchronize(ev[1]), "run"))
			goto undo_buffers;
		cudaEventElapsedTime(&ms, ev[0], ev[1]);
		times[i] = ms;
	}
	qsort(times, reps, sizeof(double), cmp_double);
	row->b = b;
	row->h = h;
	row->s = s;
	row->d = d;
	row->causal = causal;
	row->ms = times[reps / 2];
	row->tflops = flops / (row->ms * 1e-3) / 1e12;
	row->max_diff = row->rel_rms = -1;
	if (s <= check_max) {
		struct mk_attn_args a;
		double h_acc[3];

		if (bench_cuda(cudaMalloc(&o2, n * 2), "o2") ||
		    bench_cuda(cudaMalloc((void **)&acc, 3 * sizeof(double)), "acc"))
			goto undo_buffers;
		mk_attn_args_init(&a, q, k, v, o2, NULL, b, h, h, s, s, d, causal);
		if (mk_attn_run_portable(&a, 0) == 0) {
			cudaMemset(acc, 0, 3 * sizeof(double));
			bench_diff<<<512, 256>>>((const __nv_bfloat16 *)o, (const __nv_bfloat16 *)o2, n,
						 acc);
			if (bench_cuda(cudaMemcpy(h_acc, acc, sizeof(h_acc), cudaMemcpyDeviceToHost),
				       "check"))
				goto undo_buffers;
			unsigned long long bits;
			unsigned int fbits;
			float mx;

			row->rel_rms = sqrt(h_acc[0] / h_acc[1]);
			memcpy(&bits, &h_acc[2], sizeof(bits)); /* the float's bits, see bench_diff */
			fbits = (unsigned int)bits;
			memcpy(&mx, &fbits, sizeof(mx));
			row->max_diff = mx;
		}
	}
	printf("{\"bench\":\"attention\",\"impl\":\"mkernel\",\"B\":%d,\"H\":%d,\"S\":%d,\"D\":%d,"
	       "\"causal\":%d,\"median_ms\":%.4f,\"p10_ms\":%.4f,\"p90_ms\":%.4f,\"tflops\":%.1f,"
	       "\"vs_portable_max_diff\":%.3g,\"vs_portable_rel_rms\":%.3g,\"reps\":%d,"
	       "\"warmup\":%d,\"gpu\":\"%s\",\"git\":\"%s\"}\n",
	       b, h, s, d, causal, row->ms, times[reps / 10], times[(reps * 9) / 10], row->tflops,
	       row->max_diff, row->rel_rms, reps, warmup, gpu, mk_git_revision());
	fflush(stdout);
	nrows++;
	rc = 0;
undo_buffers:
	cudaEventDestroy(ev[0]);
	cudaEventDestroy(ev[1]);
	cudaFree(q);
	cudaFree(k);
	cudaFree(v);
	cudaFree(o);
	cudaFree(o2);
	cudaFree(lse);
	cudaFree(acc);
	free(times);
	return rc;
}

int main(int argc, char **argv)
{
	static const int seqs[] = { 4096, 8192, 16384, 32768, 65536 };
	int reps = 20, warmup = 5, quick = 0, check_max = 16384, shape[5] = { 0 }, one = 0, fail = 0;
	cudaDeviceProp prop;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
			warmup = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--check-max") && i + 1 < argc)
			check_max = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--shape") && i + 5 < argc) {
			for (int j = 0; j < 5; j++)
				shape[j] = atoi(argv[++i]);
			one = 1;
		} else {
			fprintf(stderr,
				"usage: %s [--reps N] [--warmup N] [--quick] [--check-max S] "
				"[--shape B H S D causal]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1)
		reps = 1;
	if (bench_cuda(cudaGetDeviceProperties(&prop, 0), "no device"))
		return 77;
	if (one) {
		fail |= bench_shape(shape[0], shape[1], shape[2], shape[3], shape[4], reps, warmup,
				    check_max, prop.name);
	} else {
		for (int d = 128; d >= 64; d -= 64)
			for (int causal = 0; causal < 2; causal++)
				for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
					if (quick && seqs[i] > 8192)
						continue;
					fail |= bench_shape(4, 16, seqs[i], d, causal, reps, warmup,
							    check_max, prop.name);
				}
	}
	printf("\n%-4s %-4s %-7s %-4s %-7s %10s %9s %12s %10s\n", "B", "H", "S", "D", "causal",
	       "median ms", "TFLOP/s", "max|d| port", "rms port");
	for (int i = 0; i < nrows; i++)
		printf("%-4d %-4d %-7d %-4d %-7d %10.3f %9.1f %12.3g %10.3g\n", rows[i].b, rows[i].h,
		       rows[i].s, rows[i].d, rows[i].causal, rows[i].ms, rows[i].tflops,
		       rows[i].max_diff, rows[i].rel_rms);
	return fail ? 1 : 0;
}
