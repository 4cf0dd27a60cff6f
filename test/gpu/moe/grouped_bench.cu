/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkernel-grouped-bench: mkGroupedGemm against cuBLAS called once per expert (the counts are known
 * to this program, so the loop needs no device-to-host copy; a real MoE layer would have to make
 * one), in one process and one run, on the DeepSeek-V3 expert shapes: hidden 7168, expert
 * intermediate 2048, up projection (N 2048, K 7168) and down projection (N 7168, K 2048), 32 local
 * experts, multinomial routing of 256 .. 65536 rows (decode to prefill sizes; counts are not
 * multiples of the tile). Repetitions alternate the two, each timed with its own CUDA event
 * pair after warm-ups; medians (p10, p90) become TFLOP/s of useful work (2 x rows x N x K) and the
 * ratio baseline time / mkernel time. Each shape also checks mkernel's output against cuBLAS's
 * (relative Frobenius error, elements out of the test's bound, NaNs): a wrong result fails the
 * run (exit 1). torch._grouped_mm on the same shapes: scripts/gpu/moe_grouped_bench.py.
 *
 * Usage: mkernel-grouped-bench [--reps N] [--warmup N] [--experts E] [--quick]
 *                              [--shape ROWS N K NK|KN]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mkernel.h"
#include "fused/bench/fill.cuh"
#include "mk/revision.h"
#include "test/gpu/moe/grouped_check.h"

#define BENCH_MAX_ROWS 64

struct bench_case {
	int rows, n, k, b_nk;
	const char *dir;
};

struct bench_row {
	struct bench_case c;
	double mk_ms, mk_p10, mk_p90, base_ms, base_p10, base_p90, mk_tf, base_tf, ratio, rel_err;
	unsigned long long out_of_bound;
	int min_count, max_count, empty;
};

static struct bench_row bench_rows[BENCH_MAX_ROWS];
static int bench_nrows, bench_experts = 32, bench_failed;

/* sum (x - y)^2, sum y^2 over expert rows; count of |x - y| > 2^-7 |y| + 1e-5 K or NaN. */
__global__ void bench_diff(const __nv_bfloat16 *x, const __nv_bfloat16 *y, size_t n, float atol,
			   double *acc, unsigned long long *bad)
{
	double d2 = 0, y2 = 0;
	unsigned long long b = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float a = __bfloat162float(x[i]), c = __bfloat162float(y[i]);

		d2 += (double)(a - c) * (a - c);
		y2 += (double)c * c;
		if (!(fabsf(a - c) <= ldexpf(fabsf(c), -7) + atol))
			b++;
	}
	atomicAdd(&acc[0], d2);
	atomicAdd(&acc[1], y2);
	if (b)
		atomicAdd(bad, b);
}

static int bench_cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

struct bench_ctx {
	const struct bench_case *c;
	int *h_off, *d_off;
	__nv_bfloat16 *a, *b, *c_mk, *c_base;
	cublasHandle_t h;
	cudaStream_t st;
};

static int bench_mk(struct bench_ctx *x)
{
	const struct bench_case *c = x->c;

	return mkGroupedGemm(x->a, x->b, x->c_mk, x->d_off, bench_experts, (size_t)c->rows,
			     (size_t)c->n, (size_t)c->k, ncclBfloat16,
			     c->b_nk ? mkLayoutRowMajorNK : mkLayoutRowMajorKN, x->st) == ncclSuccess
		       ? 0
		       : -1;
}

/* cuBLAS once per non-empty expert (row-major C_e = A_e B_e as column-major C_e^T). */
static int bench_base(struct bench_ctx *x)
{
	const struct bench_case *c = x->c;
	const float one = 1.0f, zero = 0.0f;

	for (int e = 0; e < bench_experts; e++) {
		const int lo = x->h_off[e], m = x->h_off[e + 1] - lo;

		if (m == 0)
			continue;
		if (cublasGemmEx(x->h, c->b_nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, c->n, m,
				 c->k, &one, x->b + (size_t)e * c->n * c->k, CUDA_R_16BF,
				 c->b_nk ? c->k : c->n, x->a + (size_t)lo * c->k, CUDA_R_16BF, c->k,
				 &zero, x->c_base + (size_t)lo * c->n, CUDA_R_16BF, c->n,
				 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
			return -1;
	}
	return 0;
}

static void bench_stats(float *t, int reps, double *med, double *p10, double *p90)
{
	qsort(t, reps, sizeof(float), bench_cmp_float);
	*med = t[reps / 2];
	*p10 = t[reps / 10];
	*p90 = t[(reps * 9) / 10];
}

static int bench_one(const struct bench_case *c, cublasHandle_t h, cudaStream_t st, int warmup,
		     int reps)
{
	struct bench_ctx x;
	struct bench_row *row = &bench_rows[bench_nrows];
	const size_t a_el = (size_t)c->rows * c->k, b_el = (size_t)bench_experts * c->n * c->k,
		     c_el = (size_t)c->rows * c->n;
	int *counts = (int *)malloc(bench_experts * sizeof(int));
	cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)reps * 4, sizeof(*ev));
	float *tm = (float *)calloc(reps, sizeof(float)), *tb = (float *)calloc(reps, sizeof(float));
	double *acc;
	unsigned long long *bad;
	double hacc[2];
	int rc = -1;

	memset(&x, 0, sizeof(x));
	memset(row, 0, sizeof(*row));
	row->c = *c;
	x.c = c;
	x.h = h;
	x.st = st;
	snprintf(gc_case, sizeof(gc_case), "bench %s rows %d %s", c->dir, c->rows,
		 c->b_nk ? "NK" : "KN");
	gc_counts_multinomial(counts, bench_experts, c->rows);
	x.h_off = (int *)malloc((bench_experts + 1) * sizeof(int));
	x.h_off[0] = 0;
	row->min_count = c->rows;
	for (int e = 0; e < bench_experts; e++) {
		x.h_off[e + 1] = x.h_off[e] + counts[e];
		row->min_count = counts[e] < row->min_count ? counts[e] : row->min_count;
		row->max_count = counts[e] > row->max_count ? counts[e] : row->max_count;
		row->empty += counts[e] == 0;
	}
	GC_CUDA(cudaMalloc((void **)&x.d_off, (bench_experts + 1) * sizeof(int)));
	GC_CUDA(cudaMalloc((void **)&x.a, a_el * 2));
	GC_CUDA(cudaMalloc((void **)&x.b, b_el * 2));
	GC_CUDA(cudaMalloc((void **)&x.c_mk, c_el * 2));
	GC_CUDA(cudaMalloc((void **)&x.c_base, c_el * 2));
	GC_CUDA(cudaMalloc((void **)&acc, 2 * sizeof(double)));
	GC_CUDA(cudaMalloc((void **)&bad, sizeof(*bad)));
	GC_CUDA(cudaMemcpy(x.d_off, x.h_off, (bench_experts + 1) * sizeof(int),
			   cudaMemcpyHostToDevice));
	mk_fill_bf16<<<1024, 256, 0, st>>>(x.a, a_el, 7u);
	mk_fill_bf16<<<1024, 256, 0, st>>>(x.b, b_el, 11u);
	GC_CUDA(cudaGetLastError());
	for (int i = 0; i < reps * 4; i++)
		GC_CUDA(cudaEventCreate(&ev[i]));
	for (int w = 0; w < warmup; w++)
		if (bench_mk(&x) || bench_base(&x))
			goto out;
	gc_wait(st, 120);
	for (int r = 0; r < reps; r++) {
		GC_CUDA(cudaEventRecord(ev[4 * r], st));
		if (bench_mk(&x))
			goto out;
		GC_CUDA(cudaEventRecord(ev[4 * r + 1], st));
		GC_CUDA(cudaEventRecord(ev[4 * r + 2], st));
		if (bench_base(&x))
			goto out;
		GC_CUDA(cudaEventRecord(ev[4 * r + 3], st));
	}
	gc_wait(st, 300);
	for (int r = 0; r < reps; r++) {
		GC_CUDA(cudaEventElapsedTime(&tm[r], ev[4 * r], ev[4 * r + 1]));
		GC_CUDA(cudaEventElapsedTime(&tb[r], ev[4 * r + 2], ev[4 * r + 3]));
	}
	bench_stats(tm, reps, &row->mk_ms, &row->mk_p10, &row->mk_p90);
	bench_stats(tb, reps, &row->base_ms, &row->base_p10, &row->base_p90);
	{
		const double flop = 2.0 * c->rows * c->n * (double)c->k;

		row->mk_tf = flop / (row->mk_ms * 1e9);
		row->base_tf = flop / (row->base_ms * 1e9);
		row->ratio = row->base_ms / row->mk_ms;
	}
	GC_CUDA(cudaMemsetAsync(acc, 0, 2 * sizeof(double), st));
	GC_CUDA(cudaMemsetAsync(bad, 0, sizeof(*bad), st));
	bench_diff<<<1024, 256, 0, st>>>(x.c_mk, x.c_base, c_el, 1e-5f * c->k, acc, bad);
	GC_CUDA(cudaMemcpyAsync(hacc, acc, sizeof(hacc), cudaMemcpyDeviceToHost, st));
	GC_CUDA(cudaMemcpyAsync(&row->out_of_bound, bad, sizeof(*bad), cudaMemcpyDeviceToHost, st));
	gc_wait(st, 60);
	row->rel_err = hacc[1] > 0 ? sqrt(hacc[0] / hacc[1]) : 0;
	if (row->out_of_bound || !(row->rel_err < 1e-2)) {
		fprintf(stderr, "FAIL %s: %llu elements out of bound, relative error %.3g\n", gc_case,
			row->out_of_bound, row->rel_err);
		bench_failed = 1;
	}
	bench_nrows++;
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "FAIL %s: launch failed\n", gc_case);
	for (int i = 0; i < reps * 4; i++)
		if (ev[i])
			cudaEventDestroy(ev[i]);
	cudaFree(x.d_off);
	cudaFree(x.a);
	cudaFree(x.b);
	cudaFree(x.c_mk);
	cudaFree(x.c_base);
	cudaFree(acc);
	cudaFree(bad);
	free(x.h_off);
	free(counts);
	free(ev);
	free(tm);
	free(tb);
	return rc;
}

static void bench_print(const char *gpu, int warmup, int reps)
{
	for (int i = 0; i < bench_nrows; i++) {
		const struct bench_row *r = &bench_rows[i];

		printf("{\"bench\":\"grouped_gemm\",\"dir\":\"%s\",\"experts\":%d,\"rows\":%d,"
		       "\"n\":%d,\"k\":%d,\"b_layout\":\"%s\",\"routing\":\"multinomial\","
		       "\"min_count\":%d,\"max_count\":%d,\"empty_experts\":%d,"
		       "\"mk_ms\":%.5f,\"mk_p10_ms\":%.5f,\"mk_p90_ms\":%.5f,\"mk_tflops\":%.1f,"
		       "\"baseline\":\"cublas_per_expert\",\"baseline_ms\":%.5f,"
		       "\"baseline_p10_ms\":%.5f,\"baseline_p90_ms\":%.5f,\"baseline_tflops\":%.1f,"
		       "\"ratio\":%.3f,\"rel_err\":%.2e,\"out_of_bound\":%llu,\"reps\":%d,"
		       "\"warmup\":%d,\"gpu\":\"%s\",\"git\":\"%s\"}\n",
		       r->c.dir, bench_experts, r->c.rows, r->c.n, r->c.k, r->c.b_nk ? "NK" : "KN",
		       r->min_count, r->max_count, r->empty, r->mk_ms, r->mk_p10, r->mk_p90,
		       r->mk_tf, r->base_ms, r->base_p10, r->base_p90, r->base_tf, r->ratio,
		       r->rel_err, r->out_of_bound, reps, warmup, gpu, mk_git_revision());
	}
	printf("\n| dir | rows | N | K | B | counts min..max | mkernel ms | TFLOP/s | cuBLAS/expert ms "
	       "| TFLOP/s | ratio |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int i = 0; i < bench_nrows; i++) {
		const struct bench_row *r = &bench_rows[i];

		printf("| %s | %d | %d | %d | %s | %d..%d | %.4f | %.1f | %.4f | %.1f | **%.3f** |\n",
		       r->c.dir, r->c.rows, r->c.n, r->c.k, r->c.b_nk ? "NK" : "KN", r->min_count,
		       r->max_count, r->mk_ms, r->mk_tf, r->base_ms, r->base_tf, r->ratio);
	}
}

int main(int argc, char **argv)
{
	struct bench_case cases[BENCH_MAX_ROWS];
	int ncases = 0, reps = 50, warmup = 10, quick = 0, ndev = 0;
	cudaDeviceProp prop;
	cublasHandle_t h;
	cudaStream_t st;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
			warmup = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--experts") && i + 1 < argc)
			bench_experts = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--shape") && i + 4 < argc && ncases < BENCH_MAX_ROWS) {
			cases[ncases].rows = atoi(argv[i + 1]);
			cases[ncases].n = atoi(argv[i + 2]);
			cases[ncases].k = atoi(argv[i + 3]);
			cases[ncases].b_nk = strcmp(argv[i + 4], "KN") != 0;
			cases[ncases].dir = "custom";
			ncases++;
			i += 4;
		} else {
			fprintf(stderr, "usage: %s [--reps N] [--warmup N] [--experts E] [--quick] "
					"[--shape ROWS N K NK|KN]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || warmup < 0 || bench_experts < 1) {
		fprintf(stderr, "bad --reps, --warmup or --experts\n");
		return 2;
	}
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	if (ncases == 0) {
		static const int rows_full[] = { 256, 1024, 8192, 65536 };
		static const int rows_quick[] = { 1024, 8192 };
		const int *rl = quick ? rows_quick : rows_full;
		const int nr = quick ? 2 : 4;

		for (int d = 0; d < 2; d++)
			for (int i = 0; i < nr; i++)
				for (int b_nk = 1; b_nk >= 0; b_nk--) {
					if (b_nk == 0 && rl[i] != 8192)
						continue; /* K x N at the headline size only */
					cases[ncases].rows = rl[i];
					cases[ncases].n = d == 0 ? 2048 : 7168;
					cases[ncases].k = d == 0 ? 7168 : 2048;
					cases[ncases].b_nk = b_nk;
					cases[ncases].dir = d == 0 ? "up" : "down";
					ncases++;
				}
	}
	GC_CUDA(cudaGetDeviceProperties(&prop, 0));
	GC_CUDA(cudaStreamCreate(&st));
	if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
		return 1;
	cublasSetStream(h, st);
	cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
					    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
	gc_rand_state = 2026;
	for (int i = 0; i < ncases; i++)
		if (bench_one(&cases[i], h, st, warmup, reps))
			bench_failed = 1;
	bench_print(prop.name, warmup, reps);
	cublasDestroy(h);
	cudaStreamDestroy(st);
	return bench_failed ? 1 : 0;
}
