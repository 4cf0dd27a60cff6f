/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkernel-gemm-bench: mkernel's GEMM engine against cuBLAS in one process and one run. Per shape:
 * random bf16 inputs, warm-ups, then repetitions that alternate engine and baseline, each timed
 * with its own CUDA event pair; medians (and p10/p90) become TFLOP/s and the ratio baseline time /
 * engine time (above 1: the engine is faster). The baseline at full SMs is the faster of
 * cublasGemmEx and cublasLtMatmul (heuristic's first algorithm, 32 MiB workspace); with an SM
 * limit it is cublasLtMatmul with
 * CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET set to the engine's CTA count. Each shape also reports the
 * engine's relative error against the baseline's output. One JSON line per measurement, then a
 * table.
 *
 * Usage: mkernel-gemm-bench [--reps N] [--warmup N] [--quick] [--dist uniform|normal]
 *                           [--shape M N K NK|KN [--sms S]]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fused/bench/fill.cuh"
#include "fused/gemm/gemm.h"
#include "mk_git.h"

#define BENCH_MAX_ROWS 64

struct bench_case {
	int m, n, k;
	int b_layout;
	int sms; /* 0 = all */
	const char *group;
};

struct bench_row {
	struct bench_case c;
	double eng_ms, base_ms, eng_tf, base_tf, ratio, err, rms;
	const char *base_name;
};

static struct bench_row bench_rows[BENCH_MAX_ROWS];
static int bench_nrows;
static int bench_normal; /* --dist normal: N(0, 1) inputs instead of uniform [-1, 1) */

static int bench_cuda(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(e));
	return -1;
}

/* sum (x - y)^2 and sum y^2 over bf16 arrays (for a relative Frobenius error). */
__global__ void bench_diff(const __nv_bfloat16 *x, const __nv_bfloat16 *y, size_t n, double *acc)
{
	double d2 = 0, y2 = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		double a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);

		d2 += (a - b) * (a - b);
		y2 += b * b;
	}
	atomicAdd(&acc[0], d2);
	atomicAdd(&acc[1], y2);
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

struct bench_lt {
	cublasLtHandle_t lt;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
	void *ws;
	size_t ws_size;
};

/* Row-major C = A @ B as column-major C^T = op(B) A^T. */
static int bench_lt_setup(struct bench_lt *b, cublasLtHandle_t lt, const struct bench_case *c,
			  void *ws, size_t ws_size)
{
	cublasOperation_t ta = c->b_layout == MK_GEMM_B_NK ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t tb = CUBLAS_OP_N;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;

	memset(b, 0, sizeof(*b));
	b->lt = lt;
	b->ws = ws;
	b->ws_size = ws_size;
	if (cublasLtMatmulDescCreate(&b->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F))
		return -1;
	cublasLtMatmulDescSetAttribute(b->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	cublasLtMatmulDescSetAttribute(b->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	if (c->sms > 0)
		cublasLtMatmulDescSetAttribute(b->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
					       &c->sms, sizeof(c->sms));
	if (c->b_layout == MK_GEMM_B_NK)
		cublasLtMatrixLayoutCreate(&b->la, CUDA_R_16BF, c->k, c->n, c->k);
	else
		cublasLtMatrixLayoutCreate(&b->la, CUDA_R_16BF, c->n, c->k, c->n);
	cublasLtMatrixLayoutCreate(&b->lb, CUDA_R_16BF, c->k, c->m, c->k);
	cublasLtMatrixLayoutCreate(&b->lc, CUDA_R_16BF, c->n, c->m, c->n);
	cublasLtMatmulPreferenceCreate(&pref);
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
					     &ws_size, sizeof(ws_size));
	if (cublasLtMatmulAlgoGetHeuristic(lt, b->desc, b->la, b->lb, b->lc, b->lc, pref, 1, &res,
					   &found) ||
	    found < 1) {
		cublasLtMatmulPreferenceDestroy(pref);
		return -1;
	}
	b->algo = res.algo;
	cublasLtMatmulPreferenceDestroy(pref);
	return 0;
}

static void bench_lt_free(struct bench_lt *b)
{
	cublasLtMatrixLayoutDestroy(b->la);
	cublasLtMatrixLayoutDestroy(b->lb);
	cublasLtMatrixLayoutDestroy(b->lc);
	cublasLtMatmulDescDestroy(b->desc);
}

enum { IMPL_ENGINE, IMPL_GEMMEX, IMPL_LT, IMPL_COUNT };

struct bench_ctx {
	const struct bench_case *c;
	const void *a, *b;
	void *c_eng, *c_base;
	cublasHandle_t h;
	struct bench_lt lt;
	cudaStream_t st;
};

static int bench_launch(struct bench_ctx *x, int impl)
{
	const struct bench_case *c = x->c;
	const float one = 1.0f, zero = 0.0f;

	if (impl == IMPL_ENGINE) {
		struct mk_gemm_launch l;

		memset(&l, 0, sizeof(l));
		l.a = x->a;
		l.b = x->b;
		l.ctas = c->sms;
		mk_gemm_args_init(&l.args, c->m, c->n, c->k, c->b_layout, x->c_eng);
		return mk_gemm_run(&l, x->st);
	}
	if (impl == IMPL_GEMMEX)
		return cublasGemmEx(x->h, c->b_layout == MK_GEMM_B_NK ? CUBLAS_OP_T : CUBLAS_OP_N,
				    CUBLAS_OP_N, c->n, c->m, c->k, &one, x->b, CUDA_R_16BF,
				    c->b_layout == MK_GEMM_B_NK ? c->k : c->n, x->a, CUDA_R_16BF,
				    c->k, &zero, x->c_base, CUDA_R_16BF, c->n, CUBLAS_COMPUTE_32F,
				    CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
			       ? 0
			       : -1;
	return cublasLtMatmul(x->lt.lt, x->lt.desc, &one, x->b, x->lt.la, x->a, x->lt.lb, &zero,
			      x->c_base, x->lt.lc, x->c_base, x->lt.lc, &x->lt.algo, x->lt.ws,
			      x->lt.ws_size, x->st) == CUBLAS_STATUS_SUCCESS
		       ? 0
		       : -1;
}

/* Median, p10 and p90 in ms of `reps` alternating runs of each implementation in `use`. */
static int bench_time(struct bench_ctx *x, const int *use, int warmup, int reps,
		      double med[IMPL_COUNT], double p10[IMPL_COUNT], double p90[IMPL_COUNT])
{
	cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)reps * IMPL_COUNT * 2, sizeof(*ev));
	float *t = (float *)calloc((size_t)reps, sizeof(float));
	int rc = -1;

	if (ev == NULL || t == NULL)
		goto out;
	for (int i = 0; i < reps * IMPL_COUNT * 2; i++)
		cudaEventCreate(&ev[i]);
	for (int w = 0; w < warmup; w++)
		for (int i = 0; i < IMPL_COUNT; i++)
			if (use[i] && bench_launch(x, i))
				goto out_ev;
	for (int r = 0; r < reps; r++) {
		for (int i = 0; i < IMPL_COUNT; i++) {
			if (!use[i])
				continue;
			cudaEventRecord(ev[(r * IMPL_COUNT + i) * 2], x->st);
			if (bench_launch(x, i))
				goto out_ev;
			cudaEventRecord(ev[(r * IMPL_COUNT + i) * 2 + 1], x->st);
		}
	}
	if (bench_cuda(cudaStreamSynchronize(x->st), "timed runs"))
		goto out_ev;
	for (int i = 0; i < IMPL_COUNT; i++) {
		if (!use[i])
			continue;
		for (int r = 0; r < reps; r++)
			cudaEventElapsedTime(&t[r], ev[(r * IMPL_COUNT + i) * 2],
					     ev[(r * IMPL_COUNT + i) * 2 + 1]);
		qsort(t, (size_t)reps, sizeof(float), cmp_float);
		med[i] = t[reps / 2];
		p10[i] = t[reps / 10];
		p90[i] = t[(reps * 9) / 10];
	}
	rc = 0;
out_ev:
	for (int i = 0; i < reps * IMPL_COUNT * 2; i++)
		cudaEventDestroy(ev[i]);
out:
	free(ev);
	free(t);
	return rc;
}

/* Relative Frobenius error of the engine's output against the baseline's; *rms = baseline RMS
 * (so a zero error can be told from an empty comparison). */
static double bench_error(struct bench_ctx *x, double *rms)
{
	size_t n = (size_t)x->c->m * x->c->n;
	double *d, h[2] = { 0, 0 };

	cudaMalloc((void **)&d, 2 * sizeof(double));
	cudaMemsetAsync(d, 0, 2 * sizeof(double), x->st);
	bench_diff<<<1024, 256, 0, x->st>>>((const __nv_bfloat16 *)x->c_eng,
					    (const __nv_bfloat16 *)x->c_base, n, d);
	cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, x->st);
	cudaStreamSynchronize(x->st);
	cudaFree(d);
	*rms = sqrt(h[1] / (double)n);
	return h[1] > 0 ? sqrt(h[0] / h[1]) : -1;
}

static int bench_one(const struct bench_case *c, int warmup, int reps, cublasHandle_t h,
		     cublasLtHandle_t lt, void *ws, size_t ws_size, cudaStream_t st,
		     const char *gpu)
{
	size_t ea = (size_t)c->m * c->k, eb = (size_t)c->k * c->n, ec = (size_t)c->m * c->n;
	double med[IMPL_COUNT] = { 0 }, p10[IMPL_COUNT] = { 0 }, p90[IMPL_COUNT] = { 0 };
	int use[IMPL_COUNT] = { 1, c->sms == 0, 1 };
	struct bench_ctx x;
	void *a = NULL, *b = NULL, *ce = NULL, *cb = NULL;
	double flops = 2.0 * c->m * c->n * c->k;
	struct bench_row *row;
	int rc = -1, base;

	memset(&x, 0, sizeof(x));
	if (bench_cuda(cudaMalloc(&a, ea * 2), "alloc A") ||
	    bench_cuda(cudaMalloc(&b, eb * 2), "alloc B") ||
	    bench_cuda(cudaMalloc(&ce, ec * 2), "alloc C") ||
	    bench_cuda(cudaMalloc(&cb, ec * 2), "alloc C"))
		goto out;
	if (bench_normal) {
		mk_fill_bf16_normal<<<1024, 256, 0, st>>>((__nv_bfloat16 *)a, ea, 0x1234u + c->m);
		mk_fill_bf16_normal<<<1024, 256, 0, st>>>((__nv_bfloat16 *)b, eb, 0x9876u + c->n);
	} else {
		mk_fill_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)a, ea, 0x1234u + c->m);
		mk_fill_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)b, eb, 0x9876u + c->n);
	}
	x.c = c;
	x.a = a;
	x.b = b;
	x.c_eng = ce;
	x.c_base = cb;
	x.h = h;
	x.st = st;
	if (bench_lt_setup(&x.lt, lt, c, ws, ws_size)) {
		fprintf(stderr, "bench: no cuBLASLt algorithm for %dx%dx%d\n", c->m, c->n, c->k);
		goto out;
	}
	if (bench_time(&x, use, warmup, reps, med, p10, p90))
		goto out_lt;
	base = IMPL_LT;
	if (use[IMPL_GEMMEX] && med[IMPL_GEMMEX] < med[IMPL_LT])
		base = IMPL_GEMMEX;
	/* Error of the engine against the chosen baseline's output (run once more each). */
	bench_launch(&x, IMPL_ENGINE);
	bench_launch(&x, base);

	row = &bench_rows[bench_nrows < BENCH_MAX_ROWS ? bench_nrows++ : 0];

	row->c = *c;
	row->eng_ms = med[IMPL_ENGINE];
	row->base_ms = med[base];
	row->eng_tf = flops / (med[IMPL_ENGINE] * 1e-3) / 1e12;
	row->base_tf = flops / (med[base] * 1e-3) / 1e12;
	row->ratio = med[base] / med[IMPL_ENGINE];
	row->err = bench_error(&x, &row->rms);
	row->base_name = base == IMPL_LT ? (c->sms ? "cublasLt_sm_target" : "cublasLt") : "cublasGemmEx";
	printf("{\"bench\":\"gemm\",\"group\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"b_layout\":\"%s\","
	       "\"sms\":%d,\"engine_ms\":%.5f,\"engine_p10_ms\":%.5f,\"engine_p90_ms\":%.5f,"
	       "\"engine_tflops\":%.1f,\"baseline\":\"%s\",\"baseline_ms\":%.5f,"
	       "\"baseline_p10_ms\":%.5f,\"baseline_p90_ms\":%.5f,\"baseline_tflops\":%.1f,"
	       "\"cublas_gemmex_ms\":%.5f,\"cublaslt_ms\":%.5f,\"ratio\":%.3f,\"rel_err\":%.2e,"
	       "\"baseline_rms\":%.3f,\"dist\":\"%s\","
	       "\"reps\":%d,\"warmup\":%d,\"gpu\":\"%s\",\"git\":\"%s\"}\n",
	       c->group, c->m, c->n, c->k, c->b_layout == MK_GEMM_B_NK ? "NK" : "KN", c->sms,
	       med[IMPL_ENGINE], p10[IMPL_ENGINE], p90[IMPL_ENGINE], row->eng_tf, row->base_name,
	       med[base], p10[base], p90[base], row->base_tf, med[IMPL_GEMMEX], med[IMPL_LT],
	       row->ratio, row->err, row->rms, bench_normal ? "normal" : "uniform", reps, warmup, gpu,
	       MK_GIT_HASH);
	fflush(stdout);
	rc = 0;
out_lt:
	bench_lt_free(&x.lt);
out:
	cudaFree(a);
	cudaFree(b);
	cudaFree(ce);
	cudaFree(cb);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct bench_case full[] = {
		{ 8192, 8192, 8192, MK_GEMM_B_NK, 0, "square" },
		{ 8192, 8192, 8192, MK_GEMM_B_KN, 0, "square" },
		{ 4096, 4096, 256, MK_GEMM_B_NK, 0, "fused_k_n16" },
		{ 8192, 8192, 512, MK_GEMM_B_NK, 0, "fused_k_n16" },
		{ 16384, 16384, 1024, MK_GEMM_B_NK, 0, "fused_k_n16" },
		{ 32768, 32768, 2048, MK_GEMM_B_NK, 0, "fused_k_n16" },
		{ 4096, 4096, 4096, MK_GEMM_B_NK, 0, "square" },
		{ 4096, 4096, 4096, MK_GEMM_B_KN, 0, "square" },
		{ 8192, 8192, 8192, MK_GEMM_B_NK, 132, "sm_limit" },
		{ 8192, 8192, 8192, MK_GEMM_B_NK, 120, "sm_limit" },
		{ 8192, 8192, 8192, MK_GEMM_B_NK, 116, "sm_limit" },
		{ 8192, 8192, 8192, MK_GEMM_B_NK, 100, "sm_limit" },
		{ 16384, 16384, 1024, MK_GEMM_B_NK, 132, "sm_limit" },
		{ 16384, 16384, 1024, MK_GEMM_B_NK, 120, "sm_limit" },
		{ 16384, 16384, 1024, MK_GEMM_B_NK, 116, "sm_limit" },
		{ 16384, 16384, 1024, MK_GEMM_B_NK, 100, "sm_limit" },
	};
	struct bench_case one = { 0, 0, 0, MK_GEMM_B_NK, 0, "custom" };
	int warmup = 10, reps = 50, quick = 0, ndev = 0, failed = 0;
	size_t ncases = sizeof(full) / sizeof(full[0]);
	struct cudaDeviceProp prop;
	cublasHandle_t h;
	cublasLtHandle_t lt;
	cudaStream_t st;
	size_t ws_size = 32u << 20;
	void *ws = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
			warmup = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--dist") && i + 1 < argc)
			bench_normal = !strcmp(argv[++i], "normal");
		else if (!strcmp(argv[i], "--shape") && i + 4 < argc) {
			one.m = atoi(argv[i + 1]);
			one.n = atoi(argv[i + 2]);
			one.k = atoi(argv[i + 3]);
			one.b_layout = !strcmp(argv[i + 4], "KN") ? MK_GEMM_B_KN : MK_GEMM_B_NK;
			one.group = "custom";
			i += 4;
		} else if (!strcmp(argv[i], "--sms") && i + 1 < argc) {
			one.sms = atoi(argv[++i]);
		}
	}
	if (reps < 1)
		reps = 1;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "bench: no CUDA device\n");
		return 77;
	}
	cudaGetDeviceProperties(&prop, 0);
	if (!mk_gemm_device_ok()) {
		fprintf(stderr, "bench: %s is not sm_90; the engine does not run here\n", prop.name);
		return 77;
	}
	if (quick)
		ncases = 3;
	cudaStreamCreate(&st);
	cublasCreate(&h);
	cublasSetStream(h, st);
	cublasLtCreate(&lt);
	cudaMalloc(&ws, ws_size);
	cublasSetWorkspace(h, ws, ws_size);
	if (one.m > 0)
		failed |= bench_one(&one, warmup, reps, h, lt, ws, ws_size, st, prop.name) != 0;
	for (size_t i = 0; one.m == 0 && i < ncases; i++)
		failed |= bench_one(&full[i], warmup, reps, h, lt, ws, ws_size, st, prop.name) != 0;

	printf("\n%-12s %6s %6s %6s %3s %4s | %9s %8s | %9s %8s | %6s %8s\n", "group", "M", "N",
	       "K", "B", "SMs", "mk ms", "TFLOP/s", "base ms", "TFLOP/s", "ratio", "rel_err");
	for (int i = 0; i < bench_nrows; i++) {
		struct bench_row *r = &bench_rows[i];

		printf("%-12s %6d %6d %6d %3s %4d | %9.4f %8.1f | %9.4f %8.1f | %6.3f %8.1e\n",
		       r->c.group, r->c.m, r->c.n, r->c.k, r->c.b_layout == MK_GEMM_B_NK ? "NK" : "KN",
		       r->c.sms ? r->c.sms : prop.multiProcessorCount, r->eng_ms, r->eng_tf,
		       r->base_ms, r->base_tf, r->ratio, r->err);
	}
	cudaFree(ws);
	cublasLtDestroy(lt);
	cublasDestroy(h);
	cudaStreamDestroy(st);
	return failed ? 1 : 0;
}
