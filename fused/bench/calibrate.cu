/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkernel-calibrate: measure mkGemm's paths on a grid of shape classes and write the calibration
 * file mkGemm's dispatch and the cost model read (format: tuner/calib.h; MKERNEL_CALIBRATION, or
 * compiled in as the built-in table). Per class (M, N, K, B layout): cuBLASLt and cublasGemmEx
 * exactly as mkGemm runs them (fused/ops/gemm_fallback.c, the stream's workspace) and the
 * engine's variants that can matter there, the skinny kernel (M <= 16, B N x K)
 * (64-row tiles up to M = 512, 128-row tiles from M = 65; k-splits only while the tiles do not
 * fill the GPU, up to two waves, at least two k-blocks per split), each launched as the dispatch
 * launches it (tensor maps built once). Every path of a class runs in each repetition, in
 * rotating order, CAL_BURST times back to back between its own CUDA events (per call: the larger
 * of GPU and host time); medians. Each engine path's output is compared
 * with cuBLASLt's first: a variant that computes a wrong result is left out of the file (and
 * reported, exit 1), so a broken variant is switched off by the data.
 *
 * Usage: mkernel-calibrate [--out FILE] [--quick] [--reps N] [--json]
 *   --out: the calibration file (default: standard output)
 *   --json: one JSON line per measurement on standard error as well
 * Exit: 0, 1 (a measurement failed or a variant was wrong), 77 (no sm_90 device).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fused/bench/bench_util.cuh"
#include "fused/bench/fill.cuh"
#include "fused/gemm/gemm.h"
#include "fused/gemm/skinny.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/gemm_fallback.h"
#include "mk/revision.h"

#define CAL_MAX_PATHS 24
/* cuBLASLt, cublasGemmEx and every engine path are timed together */
static_assert(CAL_MAX_PATHS + 2 <= BENCH_MAX_IMPLS, "bench_time() would refuse a class");

/* Classes: every M with every (N, K) pair, both layouts (the benchmark's grid and more M). */
static const int cal_ms[] = { 1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384 };
static const int cal_nk[][2] = { { 4096, 4096 },  { 14336, 4096 }, { 4096, 14336 },
				 { 28672, 8192 }, { 8192, 28672 }, { 8192, 8192 },
				 { 3000, 1000 },  { 1000, 5000 },  { 1024, 1024 },
				 { 4096, 8192 },  { 8192, 4096 } };
static const int cal_splits[] = { 1, 2, 3, 4, 6, 8, 12, 16 };

struct cal_engine {
	struct mk_gemm_args args;
	struct mk_gemm_tmaps maps;
};

static int cal_engine_launch(void *ctx, cudaStream_t st)
{
	struct cal_engine *e = (struct cal_engine *)ctx;

	return mk_gemm_launch_prepared(&e->args, &e->maps, 0, st);
}

struct cal_blas {
	int m, n, k, b_nk;
	const void *a, *b;
	void *c, *ws;
	size_t ws_bytes;
};

static int cal_blas_launch(void *ctx, cudaStream_t st)
{
	struct cal_blas *x = (struct cal_blas *)ctx;

	return mk_gemm_blaslt(x->a, x->b, x->c, x->m, x->n, x->k, x->b_nk, CUDA_R_16BF,
			      CUDA_R_16BF, x->ws, x->ws_bytes, st);
}

/* cublasGemmEx: cuBLAS's other call, whose own algorithm choice beats Lt's heuristic at some
 * small and odd shapes; measured so the faster of the two stands for cuBLAS. */
static int cal_gemmex_launch(void *ctx, cudaStream_t st)
{
	struct cal_blas *x = (struct cal_blas *)ctx;

	return mk_fallback_gemm_bf16(x->a, x->b, x->c, x->m, x->n, x->k, x->b_nk, st);
}

struct cal_skinny {
	int m, n, k;
	const void *a, *b;
	void *c;
};

static int cal_skinny_launch(void *ctx, cudaStream_t st)
{
	struct cal_skinny *x = (struct cal_skinny *)ctx;

	return mk_skinny_launch(x->a, x->b, x->c, x->m, x->n, x->k, st);
}

/*
 * Each timed repetition runs a path CAL_BURST times back to back, and its time is the burst's over
 * CAL_BURST: what a stream of such calls costs per call, the larger of the GPU's time and the
 * host's (launch and library overhead). Timed alone, a decode-size call hides the host's share
 * behind the longer calls queued before it; the user's next call does not.
 */
#define CAL_BURST 4

struct cal_burst {
	int (*launch)(void *ctx, cudaStream_t st);
	void *ctx;
};

static int cal_burst_launch(void *ctx, cudaStream_t st)
{
	const struct cal_burst *b = (const struct cal_burst *)ctx;

	for (int i = 0; i < CAL_BURST; i++) {
		const int rc = b->launch(b->ctx, st);

		if (rc)
			return rc;
	}
	return 0;
}

struct cal_path {
	struct mk_gemm_pick pick;
	struct cal_engine eng;
	void *out;
};

static int cal_sms;
static int cal_json;
static int cal_wrong;

/* Wait for the stream at most 10 s: a variant that never finishes is reported and the run ends
 * (nothing else can run on a device with a hung kernel). */
static void cal_sync(cudaStream_t st, const char *what, int m, int n, int k)
{
	const time_t t0 = time(NULL);
	cudaError_t e;

	while ((e = cudaStreamQuery(st)) == cudaErrorNotReady) {
		if (time(NULL) - t0 > 10) {
			fprintf(stderr, "calibrate: HANG: %s at %d x %d x %d did not finish in 10 s\n",
				what, m, n, k);
			_exit(2);
		}
	}
	if (e != cudaSuccess)
		fprintf(stderr, "calibrate: %s at %d x %d x %d: %s\n", what, m, n, k,
			cudaGetErrorString(e));
}

/* The engine variants worth measuring at (m, n, k). */
static int cal_candidates(int m, int n, int k, int b_nk, size_t ws_cap, struct cal_path *p)
{
	int np = 0;

	for (int t = 0; t < MK_GEMM_TILE_COUNT; t++) {
		const int bm = mk_gemm_tile_bm(t), bn = mk_gemm_tile_bn(t);
		const int tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
		const int nk = (k + MK_GEMM_BK - 1) / MK_GEMM_BK;

		if ((bm == 64 && m > 512) || (bm == 128 && m <= 64))
			continue;
		for (size_t i = 0; i < sizeof(cal_splits) / sizeof(cal_splits[0]); i++) {
			const int s = cal_splits[i];
			struct mk_gemm_args args;

			if (s > 1 && (tiles >= cal_sms || tiles * s > 2 * cal_sms || nk / s < 2))
				continue;
			mk_gemm_args_init(&args, m, n, k, b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN, NULL);
			mk_gemm_args_variant(&args, t, s);
			if (s > 1 && mk_gemm_split_ws_bytes(&args) > ws_cap)
				continue;
			if (np == CAL_MAX_PATHS - 1)
				return np;
			p[np].pick.path = MK_GEMM_PATH_ENGINE;
			p[np].pick.tile = t;
			p[np].pick.splits = s;
			np++;
		}
	}
	return np;
}

/*
 * A path's output (its first launch, waited for) against cuBLASLt's: 1 when it is right, else 0
 * with the path reported and recorded as left out of the file.
 */
static int cal_right(FILE *out, const char *what, const void *c, const void *c_blas, int m, int n,
		     int k, int b_nk, cudaStream_t st)
{
	double rms, err;

	cal_sync(st, what, m, n, k);
	err = bench_rel_err(c, c_blas, (size_t)m * n, st, &rms);
	if (err >= 0 && err < 1e-2)
		return 1;
	fprintf(stderr, "calibrate: %s at %d x %d x %d %s is WRONG (rel err %g): left out\n", what, m,
		n, k, b_nk ? "nk" : "kn", err);
	fprintf(out, "# left out: %s at %d %d %d %s computed a wrong result\n", what, m, n, k,
		b_nk ? "nk" : "kn");
	cal_wrong = 1;
	return 0;
}

/* The record name of timed path i: the two cuBLAS calls, then engine variants or the skinny
 * kernel (who < 0). */
static const char *cal_name(int i, const int *who, const struct cal_path *paths, char *buf,
			    size_t len)
{
	if (i < 2)
		return i == 0 ? "cublas" : "gemmex";
	return who[i] < 0 ? "skinny" : mk_gemm_pick_name(&paths[who[i]].pick, buf, len);
}

static int cal_class(FILE *out, int m, int n, int k, int b_nk, cudaStream_t st, int reps)
{
	const size_t ea = (size_t)m * k, eb = (size_t)k * n, ec = (size_t)m * n;
	struct cal_path paths[CAL_MAX_PATHS];
	struct bench_impl impl[CAL_MAX_PATHS + 2];
	struct cal_blas blas;
	struct cal_skinny sk = { m, n, k, NULL, NULL, NULL };
	void *a = NULL, *b = NULL, *c_blas = NULL, *ws = NULL;
	size_t ws_bytes = 0;
	int np, ni = 0, rc = -1, who[CAL_MAX_PATHS + 2];
	char name[32];

	memset(paths, 0, sizeof(paths));
	if (mk_gemm_ws_get(st, &ws, &ws_bytes))
		return -1;
	np = cal_candidates(m, n, k, b_nk, ws_bytes, paths);
	if (bench_cuda(cudaMalloc(&a, ea * 2), "alloc A") ||
	    bench_cuda(cudaMalloc(&b, eb * 2), "alloc B") ||
	    bench_cuda(cudaMalloc(&c_blas, ec * 2), "alloc C"))
		goto out;
	mk_fill_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)a, ea, 0x1234u + m);
	mk_fill_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)b, eb, 0x9876u + n);
	blas = (struct cal_blas){ m, n, k, b_nk, a, b, c_blas,
				  (char *)ws + MK_GEMM_SPLIT_COUNT_BYTES,
				  ws_bytes - MK_GEMM_SPLIT_COUNT_BYTES };
	if (cal_blas_launch(&blas, st))
		goto out;
	impl[ni++] = (struct bench_impl){ cal_blas_launch, &blas, 0, 0, 0 };
	impl[ni++] = (struct bench_impl){ cal_gemmex_launch, &blas, 0, 0, 0 };
	/* every engine path: its own output, checked against cuBLASLt's before it is timed */
	for (int i = 0; i < np; i++) {
		struct cal_path *p = &paths[i];

		if (bench_cuda(cudaMalloc(&p->out, ec * 2), "alloc C"))
			goto out;
		cudaMemsetAsync(p->out, 0xFF, ec * 2, st);
		mk_gemm_args_init(&p->eng.args, m, n, k, b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN, p->out);
		mk_gemm_args_variant(&p->eng.args, p->pick.tile, p->pick.splits);
		if (p->pick.splits > 1)
			mk_gemm_args_split_ws(&p->eng.args, ws);
		if (mk_gemm_check(a, b, &p->eng.args, NULL) ||
		    mk_gemm_make_tensor_maps(a, b, &p->eng.args, &p->eng.maps) ||
		    cal_engine_launch(&p->eng, st))
			continue; /* the engine cannot run it (alignment rules): not a path here */
		if (!cal_right(out, mk_gemm_pick_name(&p->pick, name, sizeof(name)), p->out, c_blas,
			       m, n, k, b_nk, st))
			continue;
		who[ni] = i;
		impl[ni++] = (struct bench_impl){ cal_engine_launch, &p->eng, 0, 0, 0 };
	}
	/* the skinny kernel where it runs, checked the same way (who = -1) */
	if (mk_skinny_check(a, b, c_blas, m, n, k, b_nk, NULL) == 0 &&
	    !bench_cuda(cudaMalloc(&sk.c, ec * 2), "alloc C")) {
		sk.a = a;
		sk.b = b;
		cudaMemsetAsync(sk.c, 0xFF, ec * 2, st);
		if (cal_skinny_launch(&sk, st) == 0 &&
		    cal_right(out, "skinny", sk.c, c_blas, m, n, k, b_nk, st)) {
			who[ni] = -1;
			impl[ni++] = (struct bench_impl){ cal_skinny_launch, &sk, 0, 0, 0 };
		}
	}
	{
		struct cal_burst burst[CAL_MAX_PATHS + 2];

		for (int i = 0; i < ni; i++) {
			burst[i] = (struct cal_burst){ impl[i].launch, impl[i].ctx };
			impl[i].launch = cal_burst_launch;
			impl[i].ctx = &burst[i];
		}
		if (bench_time(impl, ni, 3, reps, st))
			goto out;
		for (int i = 0; i < ni; i++) {
			impl[i].med /= CAL_BURST;
			impl[i].p10 /= CAL_BURST;
			impl[i].p90 /= CAL_BURST;
		}
		for (int i = 0; i < ni; i++)
			fprintf(out, "gemm %d %d %d %s %s %.2f\n", m, n, k, b_nk ? "nk" : "kn",
				cal_name(i, who, paths, name, sizeof(name)), impl[i].med * 1e3);
		if (cal_json) {
			for (int i = 0; i < ni; i++)
				fprintf(stderr,
					"{\"bench\":\"calibrate\",\"m\":%d,\"n\":%d,\"k\":%d,"
					"\"b_layout\":\"%s\",\"path\":\"%s\",\"us\":%.2f,"
					"\"p10_us\":%.2f,\"p90_us\":%.2f,\"reps\":%d}\n",
					m, n, k, b_nk ? "NK" : "KN",
					cal_name(i, who, paths, name, sizeof(name)),
					impl[i].med * 1e3, impl[i].p10 * 1e3, impl[i].p90 * 1e3, reps);
		}
	}
	fflush(out);
	rc = 0;
out:
	for (int i = 0; i < np; i++)
		cudaFree(paths[i].out);
	cudaFree(sk.c);
	cudaFree(a);
	cudaFree(b);
	cudaFree(c_blas);
	return rc;
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	struct cudaDeviceProp prop;
	cudaStream_t st;
	FILE *out = stdout;
	int quick = 0, reps = 15, ndev = 0, failed = 0;
	char when[32];
	time_t now = time(NULL);

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			path = argv[++i];
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--json"))
			cal_json = 1;
		else {
			fprintf(stderr, "calibrate: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (reps < 3)
		reps = 3;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "calibrate: no CUDA device\n");
		return 77;
	}
	cudaGetDeviceProperties(&prop, 0);
	if (!mk_gemm_device_ok()) {
		fprintf(stderr, "calibrate: %s is not sm_90\n", prop.name);
		return 77;
	}
	cal_sms = prop.multiProcessorCount;
	if (path != NULL && (out = fopen(path, "w")) == NULL) {
		perror(path);
		return 1;
	}
	/* whole lines only: a run stopped part-way leaves a valid file of the classes done */
	setvbuf(out, NULL, _IOLBF, 0);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime(&now));
	fprintf(out,
		"# Written by mkernel-calibrate (source %s) on %s: medians of %d interleaved "
		"repetitions of %d calls back to back, us per call.\n# Format: tuner/calib.h.\n"
		"mkernel-calibration 1\ndevice %d %s\n",
		mk_git_revision(), when, reps, CAL_BURST, cal_sms, prop.name);
	cudaStreamCreate(&st);
	for (size_t p = 0; p < sizeof(cal_nk) / sizeof(cal_nk[0]); p++) {
		for (size_t i = 0; i < sizeof(cal_ms) / sizeof(cal_ms[0]); i++) {
			const int m = cal_ms[i], n = cal_nk[p][0], k = cal_nk[p][1];
			/* large classes: fewer repetitions (their medians are steady) */
			const int r = (double)m * n * k > 1e12 ? (reps < 5 ? reps : 5) : reps;

			if (quick && (p > 0 || i % 4))
				continue;
			for (int b_nk = 1; b_nk >= 0; b_nk--) {
				if (cal_class(out, m, n, k, b_nk, st, r)) {
					fprintf(stderr, "calibrate: %d x %d x %d %s failed\n", m, n,
						k, b_nk ? "nk" : "kn");
					failed = 1;
				}
			}
		}
	}
	cudaStreamDestroy(st);
	if (out != stdout)
		fclose(out);
	return failed || cal_wrong ? 1 : 0;
}
