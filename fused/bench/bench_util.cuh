/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the GEMM benchmark and the calibration tool share: interleaved CUDA-event timing of
 * several implementations (each repetition runs every one of them, starting with a different
 * one each time, so drift and order hit all alike; medians and p10/p90), cuBLASLt as users call
 * it (the heuristic's first algorithm, default settings, 32 MiB workspace), and the relative
 * error of one output against another.
 */
#ifndef MK_FUSED_BENCH_UTIL_CUH
#define MK_FUSED_BENCH_UTIL_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define BENCH_MAX_IMPLS 32

static int bench_cuda(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(e));
	return -1;
}

static int bench_cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

static int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One implementation under test: launch(ctx) enqueues one run on the stream. */
struct bench_impl {
	int (*launch)(void *ctx, cudaStream_t st);
	void *ctx;
	double med, p10, p90; /* ms, filled by bench_time() */
};

/*
 * `warmup` untimed rounds, then `reps` timed rounds; every round runs each implementation once
 * between its own pair of events, round r starting with implementation r % n. 0 or -1.
 */
static int bench_time(struct bench_impl *impl, int n, int warmup, int reps, cudaStream_t st)
{
	cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)reps * n * 2, sizeof(*ev));
	float *t = (float *)calloc((size_t)reps, sizeof(float));
	int rc = -1, created = 0;

	if (n > BENCH_MAX_IMPLS)
		fprintf(stderr, "bench: %d implementations to time, at most %d\n", n,
			BENCH_MAX_IMPLS);
	if (ev == NULL || t == NULL || n > BENCH_MAX_IMPLS)
		goto out;
	for (; created < reps * n * 2; created++)
		if (cudaEventCreate(&ev[created]) != cudaSuccess)
			goto out_ev;
	for (int w = 0; w < warmup; w++)
		for (int i = 0; i < n; i++)
			if (impl[i].launch(impl[i].ctx, st))
				goto out_ev;
	for (int r = 0; r < reps; r++) {
		for (int j = 0; j < n; j++) {
			const int i = (r + j) % n;

			cudaEventRecord(ev[(r * n + i) * 2], st);
			if (impl[i].launch(impl[i].ctx, st))
				goto out_ev;
			cudaEventRecord(ev[(r * n + i) * 2 + 1], st);
		}
	}
	if (bench_cuda(cudaStreamSynchronize(st), "timed runs"))
		goto out_ev;
	for (int i = 0; i < n; i++) {
		for (int r = 0; r < reps; r++)
			cudaEventElapsedTime(&t[r], ev[(r * n + i) * 2], ev[(r * n + i) * 2 + 1]);
		qsort(t, (size_t)reps, sizeof(float), bench_cmp_float);
		impl[i].med = t[reps / 2];
		impl[i].p10 = t[reps / 10];
		impl[i].p90 = t[(reps * 9) / 10];
	}
	rc = 0;
out_ev:
	for (int i = 0; i < created; i++)
		cudaEventDestroy(ev[i]);
out:
	free(ev);
	free(t);
	return rc;
}

/*
 * Host time per call (us) of each implementation: `calls` launches back to back with no
 * synchronisation between them (few enough that the launch queue never fills, so the wall time
 * is the host's enqueue work alone), in `rounds` interleaved rounds; the median round into
 * host_us[i]. What an event-timed lone call adds when the GPU waits for the host. 0 or -1.
 */
static int bench_host_time(struct bench_impl *impl, int n, int calls, int rounds, cudaStream_t st,
			   double *host_us)
{
	double t[BENCH_MAX_IMPLS][16];

	if (rounds > 16)
		rounds = 16;
	if (n > BENCH_MAX_IMPLS)
		return -1;
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < n; i++) {
			struct timespec a, b;

			if (bench_cuda(cudaStreamSynchronize(st), "host timing"))
				return -1;
			clock_gettime(CLOCK_MONOTONIC, &a);
			for (int c = 0; c < calls; c++)
				if (impl[i].launch(impl[i].ctx, st))
					return -1;
			clock_gettime(CLOCK_MONOTONIC, &b);
			t[i][r] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 /
				  calls;
		}
	}
	for (int i = 0; i < n; i++) {
		qsort(t[i], (size_t)rounds, sizeof(double), bench_cmp_double);
		host_us[i] = t[i][rounds / 2];
	}
	return bench_cuda(cudaStreamSynchronize(st), "host timing");
}

/* sum (x - y)^2 and sum y^2 over bf16 arrays (for a relative Frobenius error). */
static __global__ void bench_diff(const __nv_bfloat16 *x, const __nv_bfloat16 *y, size_t n,
				  double *acc)
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

/* Relative Frobenius error of x against y (NaN counts as error: a NaN difference stays NaN);
 * *rms = RMS of y, so a zero error can be told from an empty comparison. */
static double bench_rel_err(const void *x, const void *y, size_t n, cudaStream_t st, double *rms)
{
	double *d, h[2] = { 0, 0 };

	if (cudaMalloc((void **)&d, 2 * sizeof(double)) != cudaSuccess)
		return -1;
	cudaMemsetAsync(d, 0, 2 * sizeof(double), st);
	bench_diff<<<1024, 256, 0, st>>>((const __nv_bfloat16 *)x, (const __nv_bfloat16 *)y, n, d);
	cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, st);
	cudaStreamSynchronize(st);
	cudaFree(d);
	*rms = sqrt(h[1] / (double)n);
	return h[1] > 0 ? sqrt(h[0] / h[1]) : -1;
}

/* cuBLASLt the way a user calls it: default preferences, the heuristic's first algorithm. */
struct bench_lt {
	cublasLtHandle_t lt;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
	void *ws;
	size_t ws_size;
	const void *a, *b;
	void *c;
};

/* Row-major C = A @ B as column-major C^T = op(B) A^T; sms > 0 sets the SM count target. */
static int bench_lt_setup(struct bench_lt *x, cublasLtHandle_t lt, int m, int n, int k, int b_nk,
			  int sms, void *ws, size_t ws_size)
{
	cublasOperation_t ta = b_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t tb = CUBLAS_OP_N;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;

	memset(x, 0, sizeof(*x));
	x->lt = lt;
	x->ws = ws;
	x->ws_size = ws_size;
	if (cublasLtMatmulDescCreate(&x->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F))
		return -1;
	cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	if (sms > 0)
		cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms,
					       sizeof(sms));
	if (b_nk)
		cublasLtMatrixLayoutCreate(&x->la, CUDA_R_16BF, k, n, k);
	else
		cublasLtMatrixLayoutCreate(&x->la, CUDA_R_16BF, n, k, n);
	cublasLtMatrixLayoutCreate(&x->lb, CUDA_R_16BF, k, m, k);
	cublasLtMatrixLayoutCreate(&x->lc, CUDA_R_16BF, n, m, n);
	cublasLtMatmulPreferenceCreate(&pref);
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
					     &ws_size, sizeof(ws_size));
	if (cublasLtMatmulAlgoGetHeuristic(lt, x->desc, x->la, x->lb, x->lc, x->lc, pref, 1, &res,
					   &found) ||
	    found < 1) {
		cublasLtMatmulPreferenceDestroy(pref);
		return -1;
	}
	x->algo = res.algo;
	cublasLtMatmulPreferenceDestroy(pref);
	return 0;
}

static void bench_lt_free(struct bench_lt *x)
{
	cublasLtMatrixLayoutDestroy(x->la);
	cublasLtMatrixLayoutDestroy(x->lb);
	cublasLtMatrixLayoutDestroy(x->lc);
	cublasLtMatmulDescDestroy(x->desc);
}

static int bench_lt_launch(void *ctx, cudaStream_t st)
{
	struct bench_lt *x = (struct bench_lt *)ctx;
	const float one = 1.0f, zero = 0.0f;

	return cublasLtMatmul(x->lt, x->desc, &one, x->b, x->la, x->a, x->lb, &zero, x->c, x->lc,
			      x->c, x->lc, &x->algo, x->ws, x->ws_size, st) == CUBLAS_STATUS_SUCCESS
		       ? 0
		       : -1;
}

/* cublasGemmEx with default math (the other way users call cuBLAS). */
struct bench_gemmex {
	cublasHandle_t h;
	int m, n, k, b_nk;
	const void *a, *b;
	void *c;
};

static int bench_gemmex_launch(void *ctx, cudaStream_t st)
{
	struct bench_gemmex *x = (struct bench_gemmex *)ctx;
	const float one = 1.0f, zero = 0.0f;

	(void)st; /* the handle is bound to the stream */
	return cublasGemmEx(x->h, x->b_nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, x->n, x->m,
			    x->k, &one, x->b, CUDA_R_16BF, x->b_nk ? x->k : x->n, x->a,
			    CUDA_R_16BF, x->k, &zero, x->c, CUDA_R_16BF, x->n, CUBLAS_COMPUTE_32F,
			    CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
		       ? 0
		       : -1;
}

#endif /* MK_FUSED_BENCH_UTIL_CUH */
