/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkernel-gemm-bench: mkGemm against cuBLAS in one process and one run.
 *
 * Default (grid): mkGemm, the public call, on a grid of shapes (M from 1 to 16384, N and K from
 * 1000 to 28672 including non-multiples of 128 and 64, both B layouts, and the shapes users
 * reported), against the faster of cublasLtMatmul (the heuristic's first algorithm, default
 * settings, 32 MiB workspace) and cublasGemmEx (default math). Each repetition runs all three
 * between their own CUDA events, starting with a different one each time; medians (p10, p90)
 * after warm-ups. ratio = baseline time / mkGemm time (above 1: mkGemm is faster). Per shape the
 * path mkGemm took (the dispatch's record) and mkGemm's relative error against the baseline
 * (its output poisoned with NaN first). Where the baseline runs under 100 us, each call's host
 * time too (mk_host_us, baseline_host_us: 32 calls enqueued back to back, median of 9
 * interleaved rounds; -1 elsewhere), which an event-timed lone call adds when the GPU waits,
 * with mkGemm's own cuBLASLt plan called directly (mk_lt_direct_host_us: what the dispatch
 * adds), and each cuBLASLt plan's algorithm (mk_lt_algo, lt_algo: id/tile/stages/splitK/
 * scheme). One JSON line per shape, a summary line (lowest ratio, geometric mean, cells below
 * 0.95 and 1.0), then a table.
 *
 * --engine: the GEMM engine's default variant against cuBLAS (the earlier benchmark: square and
 * K = N/16 shapes, and SM limits against cuBLASLt with the same SM count target).
 *
 * Usage: mkernel-gemm-bench [--engine] [--reps N] [--warmup N] [--quick] [--dist uniform|normal]
 *                           [--path NAME] [--shape M N K NK|KN [--sms S]]
 *   --path: force mkGemm's path (MKERNEL_GEMM_PATH: cublas, cublaslt, engine, eBMxBNsS).
 * Exit: 0, 1 (a measurement failed or an output was wrong), 77 (no sm_90 device).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mkernel.h"
#include "fused/bench/bench_util.cuh"
#include "fused/bench/fill.cuh"
#include "fused/gemm/gemm.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/gemm_fallback.h"
#include "mk/revision.h"
extern "C" {
#include "tuner/calib.h"
}

#define BENCH_MAX_ROWS 256

struct bench_case {
	int m, n, k;
	int b_layout;
	int sms; /* --engine: 0 = all */
	const char *group;
};

struct bench_row {
	struct bench_case c;
	double mk_ms, base_ms, ratio, err;
	char path[32];
	const char *base_name;
};

static struct bench_row bench_rows[BENCH_MAX_ROWS];
static int bench_nrows;
static int bench_normal; /* --dist normal: N(0, 1) inputs instead of uniform [-1, 1) */
static int bench_bad;	 /* a wrong output was measured */

struct bench_env {
	cublasHandle_t h;
	cublasLtHandle_t lt;
	void *ws;
	size_t ws_size;
	cudaStream_t st;
	const char *gpu;
	int warmup, reps;
};

/* mkGemm, the public call. */
struct bench_mk {
	const struct bench_case *c;
	const void *a, *b;
	void *c_out;
};

static int bench_mk_launch(void *ctx, cudaStream_t st)
{
	struct bench_mk *x = (struct bench_mk *)ctx;

	return mkGemm(x->a, x->b, x->c_out, (size_t)x->c->m, (size_t)x->c->n, (size_t)x->c->k,
		      ncclBfloat16,
		      x->c->b_layout == MK_GEMM_B_NK ? mkLayoutRowMajorNK : mkLayoutRowMajorKN,
		      st) == ncclSuccess
		       ? 0
		       : -1;
}

/* mkGemm's own cuBLASLt plan called directly (host timing only): what the dispatch adds. */
struct bench_mklt {
	int dev, m, n, k, b_nk;
	const void *a, *b;
	void *c, *ws;
	size_t ws_bytes;
};

static int bench_mklt_launch(void *ctx, cudaStream_t st)
{
	struct bench_mklt *x = (struct bench_mklt *)ctx;

	return mk_gemm_blaslt_on(x->dev, x->a, x->b, x->c, x->m, x->n, x->k, x->b_nk, CUDA_R_16BF,
				 CUDA_R_16BF, x->ws, x->ws_bytes, st);
}

/* "algo/tile/stages/splitK/reduction" of a cuBLASLt algorithm, for telling two plans apart. */
static void bench_algo_desc(const cublasLtMatmulAlgo_t *a, char *buf, size_t len)
{
	int id = -1, tile = -1, stages = -1, splitk = -1, red = -1;
	size_t got;

	cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &got);
	cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
					     &got);
	cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
					     sizeof(stages), &got);
	cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
					     sizeof(splitk), &got);
	cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
					     sizeof(red), &got);
	snprintf(buf, len, "%d/%d/%d/%d/%d", id, tile, stages, splitk, red);
}

/* The engine's default variant alone (--engine), on c->sms CTAs. */
struct bench_engine {
	struct mk_gemm_launch l;
};

static int bench_engine_launch(void *ctx, cudaStream_t st)
{
	return mk_gemm_run(&((struct bench_engine *)ctx)->l, st);
}

struct bench_bufs {
	void *a, *b, *c_mk, *c_base;
};

static int bench_alloc(const struct bench_case *c, struct bench_bufs *x, cudaStream_t st)
{
	const size_t ea = (size_t)c->m * c->k, eb = (size_t)c->k * c->n, ec = (size_t)c->m * c->n;

	memset(x, 0, sizeof(*x));
	if (bench_cuda(cudaMalloc(&x->a, ea * 2), "alloc A") ||
	    bench_cuda(cudaMalloc(&x->b, eb * 2), "alloc B") ||
	    bench_cuda(cudaMalloc(&x->c_mk, ec * 2), "alloc C") ||
	    bench_cuda(cudaMalloc(&x->c_base, ec * 2), "alloc C"))
		return -1;
	if (bench_normal) {
		mk_fill_bf16_normal<<<1024, 256, 0, st>>>((__nv_bfloat16 *)x->a, ea, 0x1234u + c->m);
		mk_fill_bf16_normal<<<1024, 256, 0, st>>>((__nv_bfloat16 *)x->b, eb, 0x9876u + c->n);
	} else {
		mk_fill_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)x->a, ea, 0x1234u + c->m);
		mk_fill_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)x->b, eb, 0x9876u + c->n);
	}
	return bench_cuda(cudaGetLastError(), "fill");
}

static void bench_free(struct bench_bufs *x)
{
	cudaFree(x->a);
	cudaFree(x->b);
	cudaFree(x->c_mk);
	cudaFree(x->c_base);
}

/* cuBLASLt (with c->sms as its SM count target) and cublasGemmEx on x into impl[1], impl[2]. */
static int bench_baselines(const struct bench_case *c, const struct bench_env *env,
			   const struct bench_bufs *x, struct bench_lt *lt,
			   struct bench_gemmex *gx, struct bench_impl *impl)
{
	const int b_nk = c->b_layout == MK_GEMM_B_NK;

	if (bench_lt_setup(lt, env->lt, c->m, c->n, c->k, b_nk, c->sms, env->ws, env->ws_size)) {
		fprintf(stderr, "bench: no cuBLASLt algorithm for %dx%dx%d\n", c->m, c->n, c->k);
		return -1;
	}
	lt->a = x->a;
	lt->b = x->b;
	lt->c = x->c_base;
	*gx = (struct bench_gemmex){ env->h, c->m, c->n, c->k, b_nk, x->a, x->b, x->c_base };
	impl[1] = (struct bench_impl){ bench_lt_launch, lt, 0, 0, 0 };
	impl[2] = (struct bench_impl){ bench_gemmex_launch, gx, 0, 0, 0 };
	return 0;
}

/* Repetitions for about 0.5 s of timed work per shape: at least 10, at most `reps`. */
static int bench_reps(const struct bench_env *env, int impls, double est_ms)
{
	int r = est_ms > 0 ? (int)(500.0 / (impls * est_ms)) : env->reps;

	return r < 10 ? 10 : r > env->reps ? env->reps : r;
}

/* Record one shape's result (impl[0] against impl[base]). */
static struct bench_row *bench_row_add(const struct bench_case *c, const struct bench_impl *impl,
				       int base, double err, const char *base_name,
				       const char *path)
{
	struct bench_row *row =
		&bench_rows[bench_nrows < BENCH_MAX_ROWS ? bench_nrows++ : BENCH_MAX_ROWS - 1];

	row->c = *c;
	row->mk_ms = impl[0].med;
	row->base_ms = impl[base].med;
	row->ratio = impl[base].med / impl[0].med;
	row->err = err;
	row->base_name = base_name;
	snprintf(row->path, sizeof(row->path), "%s", path);
	return row;
}

/* One shape of the grid: mkGemm against cuBLASLt and cublasGemmEx. */
static int bench_grid_one(const struct bench_case *c, const struct bench_env *env)
{
	const int b_nk = c->b_layout == MK_GEMM_B_NK;
	const size_t ec = (size_t)c->m * c->n;
	const double flops = 2.0 * c->m * c->n * c->k;
	struct bench_bufs x;
	struct bench_mk mk = { c, NULL, NULL, NULL };
	struct bench_lt lt;
	struct bench_gemmex gx;
	struct bench_impl impl[4];
	struct mk_gemm_ran ran;
	struct bench_row *row;
	double rms, err, host_us[4];
	int rc = -1, reps, base;
	char path[32], mk_algo[48] = "none", lt_algo[48];
	struct bench_mklt mklt;
	cublasLtMatmulAlgo_t algo;

	if (bench_alloc(c, &x, env->st))
		goto out;
	mk.a = x.a;
	mk.b = x.b;
	mk.c_out = x.c_mk;
	if (bench_baselines(c, env, &x, &lt, &gx, impl))
		goto out;
	impl[0] = (struct bench_impl){ bench_mk_launch, &mk, 0, 0, 0 };
	/* a short first pass sizes the repetitions */
	if (bench_time(impl, 3, 2, 3, env->st))
		goto out_lt;
	reps = bench_reps(env, 3, impl[1].med);
	if (bench_time(impl, 3, env->warmup, reps, env->st))
		goto out_lt;
	base = impl[2].med < impl[1].med ? 2 : 1;
	/* Host time where it can show in a lone call (the GPU's part under 100 us): 32 calls, 9
	 * rounds, well inside the launch queue, a median that one preemption does not move. */
	host_us[0] = host_us[1] = host_us[2] = host_us[3] = -1;
	mklt = (struct bench_mklt){ 0, c->m, c->n, c->k, b_nk, x.a, x.b, x.c_mk, NULL, 0 };
	cudaGetDevice(&mklt.dev);
	if (mk_gemm_ws_get(env->st, &mklt.ws, &mklt.ws_bytes) == 0) {
		mklt.ws = (char *)mklt.ws + MK_GEMM_SPLIT_COUNT_BYTES; /* as the dispatch passes it */
		mklt.ws_bytes -= MK_GEMM_SPLIT_COUNT_BYTES;
	}
	impl[3] = (struct bench_impl){ bench_mklt_launch, &mklt, 0, 0, 0 };
	if (impl[base].med < 0.1 && bench_host_time(impl, 4, 32, 9, env->st, host_us))
		goto out_lt;
	/* which algorithm each cuBLASLt plan holds (mkGemm's exists once a call took cuBLASLt) */
	if (mk_gemm_blaslt_algo(mklt.dev, c->m, c->n, c->k, b_nk, CUDA_R_16BF, CUDA_R_16BF,
				mklt.ws_bytes, &algo) == 0)
		bench_algo_desc(&algo, mk_algo, sizeof(mk_algo));
	bench_algo_desc(&lt.algo, lt_algo, sizeof(lt_algo));
	/* the path mkGemm took (the dispatch decides the same way for the same shape) and its
	 * output, NaN-poisoned first, against the baseline's */
	cudaMemsetAsync(x.c_mk, 0xFF, ec * 2, env->st);
	if (mk_gemm_dispatch(x.a, x.b, x.c_mk, c->m, c->n, c->k, b_nk, env->st, NULL, &ran) ||
	    bench_mk_launch(&mk, env->st) || impl[base].launch(impl[base].ctx, env->st))
		goto out_lt;
	err = bench_rel_err(x.c_mk, x.c_base, ec, env->st, &rms);
	if (!(err >= 0 && err < 1e-2)) {
		fprintf(stderr, "bench: %dx%dx%d %s: mkGemm's output is wrong (rel err %g)\n", c->m,
			c->n, c->k, b_nk ? "NK" : "KN", err);
		bench_bad = 1;
	}
	mk_gemm_pick_name(&ran.pick, path, sizeof(path));
	row = bench_row_add(c, impl, base, err, base == 1 ? "cublasLt" : "cublasGemmEx", path);
	printf("{\"bench\":\"mkgemm\",\"group\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"b_layout\":"
	       "\"%s\",\"path\":\"%s\",\"why\":\"%s\",\"graph\":%d,\"mk_ms\":%.5f,"
	       "\"mk_p10_ms\":%.5f,"
	       "\"mk_p90_ms\":%.5f,\"mk_tflops\":%.1f,\"baseline\":\"%s\",\"baseline_ms\":%.5f,"
	       "\"baseline_p10_ms\":%.5f,\"baseline_p90_ms\":%.5f,\"cublaslt_ms\":%.5f,"
	       "\"cublas_gemmex_ms\":%.5f,\"ratio\":%.3f,\"rel_err\":%.2e,\"baseline_rms\":%.3f,"
	       "\"mk_host_us\":%.2f,\"baseline_host_us\":%.2f,\"mk_lt_direct_host_us\":%.2f,"
	       "\"mk_lt_algo\":\"%s\",\"lt_algo\":\"%s\","
	       "\"dist\":\"%s\",\"reps\":%d,\"warmup\":%d,\"calibration\":\"%s\",\"gpu\":\"%s\","
	       "\"git\":\"%s\"}\n",
	       c->group, c->m, c->n, c->k, b_nk ? "NK" : "KN", path, ran.why, ran.graph,
	       impl[0].med,
	       impl[0].p10, impl[0].p90, flops / (impl[0].med * 1e-3) / 1e12, row->base_name,
	       impl[base].med, impl[base].p10, impl[base].p90, impl[1].med, impl[2].med, row->ratio,
	       err, rms, host_us[0], host_us[base], host_us[3], mk_algo, lt_algo,
	       bench_normal ? "normal" : "uniform", reps, env->warmup, mk_calib_get()->source,
	       env->gpu, mk_git_revision());
	fflush(stdout);
	rc = 0;
out_lt:
	bench_lt_free(&lt);
out:
	bench_free(&x);
	return rc;
}

/* --engine: the default variant on c->sms CTAs against cuBLAS (SM count target when limited). */
static int bench_engine_one(const struct bench_case *c, const struct bench_env *env)
{
	const int b_nk = c->b_layout == MK_GEMM_B_NK;
	const size_t ec = (size_t)c->m * c->n;
	const double flops = 2.0 * c->m * c->n * c->k;
	struct bench_bufs x;
	struct bench_engine eng;
	struct bench_lt lt;
	struct bench_gemmex gx;
	struct bench_impl impl[3];
	struct bench_row *row;
	const int n = c->sms == 0 ? 3 : 2; /* no SM limit for cublasGemmEx */
	double rms, err;
	int rc = -1, base;

	if (bench_alloc(c, &x, env->st))
		goto out;
	memset(&eng, 0, sizeof(eng));
	eng.l.a = x.a;
	eng.l.b = x.b;
	eng.l.ctas = c->sms;
	mk_gemm_args_init(&eng.l.args, c->m, c->n, c->k, c->b_layout, x.c_mk);
	if (bench_baselines(c, env, &x, &lt, &gx, impl))
		goto out;
	impl[0] = (struct bench_impl){ bench_engine_launch, &eng, 0, 0, 0 };
	if (bench_time(impl, n, env->warmup, env->reps, env->st))
		goto out_lt;
	base = n == 3 && impl[2].med < impl[1].med ? 2 : 1;
	cudaMemsetAsync(x.c_mk, 0xFF, ec * 2, env->st);
	if (impl[0].launch(impl[0].ctx, env->st) || impl[base].launch(impl[base].ctx, env->st))
		goto out_lt;
	err = bench_rel_err(x.c_mk, x.c_base, ec, env->st, &rms);
	bench_bad |= !(err >= 0 && err < 1e-2);
	row = bench_row_add(c, impl, base, err,
			    base == 2	? "cublasGemmEx"
			    : c->sms	? "cublasLt_sm_target"
					: "cublasLt",
			    "e128x256s1");
	printf("{\"bench\":\"gemm\",\"group\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"b_layout\":\"%s\","
	       "\"sms\":%d,\"engine_ms\":%.5f,\"engine_p10_ms\":%.5f,\"engine_p90_ms\":%.5f,"
	       "\"engine_tflops\":%.1f,\"baseline\":\"%s\",\"baseline_ms\":%.5f,"
	       "\"baseline_p10_ms\":%.5f,\"baseline_p90_ms\":%.5f,\"baseline_tflops\":%.1f,"
	       "\"cublas_gemmex_ms\":%.5f,\"cublaslt_ms\":%.5f,\"ratio\":%.3f,\"rel_err\":%.2e,"
	       "\"baseline_rms\":%.3f,\"dist\":\"%s\",\"reps\":%d,\"warmup\":%d,\"gpu\":\"%s\","
	       "\"git\":\"%s\"}\n",
	       c->group, c->m, c->n, c->k, b_nk ? "NK" : "KN", c->sms, impl[0].med, impl[0].p10,
	       impl[0].p90, flops / (impl[0].med * 1e-3) / 1e12, row->base_name, impl[base].med,
	       impl[base].p10, impl[base].p90, flops / (impl[base].med * 1e-3) / 1e12,
	       n == 3 ? impl[2].med : 0.0, impl[1].med, row->ratio, err, rms,
	       bench_normal ? "normal" : "uniform", env->reps, env->warmup, env->gpu, mk_git_revision());
	fflush(stdout);
	rc = 0;
out_lt:
	bench_lt_free(&lt);
out:
	bench_free(&x);
	return rc;
}

/*
 * The grid: every M with every (N, K) pair, both layouts, then the shapes users reported.
 * Pairs: Llama-style projections (4096^2, MLP up 14336 x 4096 and down 4096 x 14336, 70B-size
 * 28672 x 8192 and 8192 x 28672, 8192^2), tails that are not multiples of 128 or 64 (N 3000 x K
 * 1000, N 1000 x K 5000) and 1024^2.
 */
static const int bench_ms[] = { 1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384 };
static const int bench_nk[][2] = { { 4096, 4096 },  { 14336, 4096 }, { 4096, 14336 },
				   { 28672, 8192 }, { 8192, 28672 }, { 8192, 8192 },
				   { 3000, 1000 },  { 1000, 5000 },  { 1024, 1024 } };
static const struct bench_case bench_reported[] = {
	{ 3000, 5000, 1000, MK_GEMM_B_NK, 0, "reported" },
	{ 3000, 5000, 1000, MK_GEMM_B_KN, 0, "reported" },
	{ 1001, 1003, 1000, MK_GEMM_B_NK, 0, "reported" },
	{ 1001, 1003, 1000, MK_GEMM_B_KN, 0, "reported" }, /* N % 8: cuBLAS */
	{ 4096, 4096, 512, MK_GEMM_B_NK, 0, "reported" },
	{ 512, 4096, 4096, MK_GEMM_B_NK, 0, "reported" },
	{ 4096, 14336, 1024, MK_GEMM_B_NK, 0, "reported" },
	{ 16384, 8192, 2048, MK_GEMM_B_NK, 0, "reported" },
	{ 7, 4100, 4104, MK_GEMM_B_NK, 0, "reported" }, /* odd M, tails */
	{ 100, 4104, 1000, MK_GEMM_B_KN, 0, "reported" },
};

static const struct bench_case bench_engine_cases[] = {
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

static int bench_grid(const struct bench_env *env, int quick)
{
	const size_t nm = sizeof(bench_ms) / sizeof(bench_ms[0]);
	const size_t np = sizeof(bench_nk) / sizeof(bench_nk[0]);
	int failed = 0;

	for (size_t p = 0; p < np; p++) {
		for (size_t i = 0; i < nm; i++) {
			for (int l = 1; l >= 0; l--) {
				const struct bench_case c = { bench_ms[i], bench_nk[p][0],
							      bench_nk[p][1], l, 0, "grid" };

				if (quick && (p > 0 || (i % 3) != 0))
					continue;
				failed |= bench_grid_one(&c, env) != 0;
			}
		}
	}
	for (size_t i = 0; !quick && i < sizeof(bench_reported) / sizeof(bench_reported[0]); i++)
		failed |= bench_grid_one(&bench_reported[i], env) != 0;
	return failed;
}

static void bench_summary(int engine_mode, int sms)
{
	double lo = 1e30, lg = 0;
	int below95 = 0, below1 = 0;

	for (int i = 0; i < bench_nrows; i++) {
		lo = bench_rows[i].ratio < lo ? bench_rows[i].ratio : lo;
		lg += log(bench_rows[i].ratio);
		below95 += bench_rows[i].ratio < 0.95;
		below1 += bench_rows[i].ratio < 1.0;
	}
	if (bench_nrows > 0)
		printf("{\"bench\":\"%s_summary\",\"cells\":%d,\"min_ratio\":%.3f,\"geomean\":%.3f,"
		       "\"below_0.95\":%d,\"below_1.0\":%d,\"wrong_outputs\":%d}\n",
		       engine_mode ? "gemm" : "mkgemm", bench_nrows, lo, exp(lg / bench_nrows),
		       below95, below1, bench_bad);
	printf("\n%-10s %6s %6s %6s %3s %4s %-11s | %9s | %9s %-13s | %6s %8s\n", "group", "M", "N",
	       "K", "B", "SMs", "path", "mk ms", "base ms", "baseline", "ratio", "rel_err");
	for (int i = 0; i < bench_nrows; i++) {
		const struct bench_row *r = &bench_rows[i];

		printf("%-10s %6d %6d %6d %3s %4d %-11s | %9.4f | %9.4f %-13s | %6.3f %8.1e\n",
		       r->c.group, r->c.m, r->c.n, r->c.k, r->c.b_layout == MK_GEMM_B_NK ? "NK" : "KN",
		       r->c.sms ? r->c.sms : sms, r->path, r->mk_ms, r->base_ms, r->base_name,
		       r->ratio, r->err);
	}
}

int main(int argc, char **argv)
{
	struct bench_case one = { 0, 0, 0, MK_GEMM_B_NK, 0, "custom" };
	struct bench_env env;
	struct cudaDeviceProp prop;
	int quick = 0, engine_mode = 0, ndev = 0, failed = 0;

	memset(&env, 0, sizeof(env));
	env.warmup = 10;
	env.reps = 50;
	env.ws_size = 32u << 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			env.reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
			env.warmup = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--engine"))
			engine_mode = 1;
		else if (!strcmp(argv[i], "--dist") && i + 1 < argc)
			bench_normal = !strcmp(argv[++i], "normal");
		else if (!strcmp(argv[i], "--path") && i + 1 < argc)
			setenv("MKERNEL_GEMM_PATH", argv[++i], 1);
		else if (!strcmp(argv[i], "--shape") && i + 4 < argc) {
			one.m = atoi(argv[i + 1]);
			one.n = atoi(argv[i + 2]);
			one.k = atoi(argv[i + 3]);
			one.b_layout = !strcmp(argv[i + 4], "KN") ? MK_GEMM_B_KN : MK_GEMM_B_NK;
			i += 4;
		} else if (!strcmp(argv[i], "--sms") && i + 1 < argc) {
			one.sms = atoi(argv[++i]);
		} else {
			fprintf(stderr, "bench: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (env.reps < 10)
		env.reps = 10;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "bench: no CUDA device\n");
		return 77;
	}
	cudaGetDeviceProperties(&prop, 0);
	if (!mk_gemm_device_ok()) {
		fprintf(stderr, "bench: %s is not sm_90; the engine does not run here\n", prop.name);
		return 77;
	}
	env.gpu = prop.name;
	cudaStreamCreate(&env.st);
	cublasCreate(&env.h);
	cublasSetStream(env.h, env.st);
	cublasLtCreate(&env.lt);
	cudaMalloc(&env.ws, env.ws_size);
	cublasSetWorkspace(env.h, env.ws, env.ws_size);
	if (one.m > 0)
		failed |= (engine_mode ? bench_engine_one(&one, &env) : bench_grid_one(&one, &env));
	else if (engine_mode)
		for (size_t i = 0;
		     i < (quick ? 3 : sizeof(bench_engine_cases) / sizeof(bench_engine_cases[0])); i++)
			failed |= bench_engine_one(&bench_engine_cases[i], &env) != 0;
	else
		failed |= bench_grid(&env, quick);
	bench_summary(engine_mode, prop.multiProcessorCount);
	cudaFree(env.ws);
	cublasLtDestroy(env.lt);
	cublasDestroy(env.h);
	cudaStreamDestroy(env.st);
	return failed || bench_bad ? 1 : 0;
}
