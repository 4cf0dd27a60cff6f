/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu suite, component moe: mkGroupedGemm, the Hopper grouped GEMM and the portable kernel
 * against a CPU reference (bf16 inputs, fp64 sums; grouped_check.h has the bound and why).
 *
 * Built so that one run says as much as possible: every case runs to the end whatever failed
 * before it, each failure names the first wrong (expert, row, column) with its tile row and
 * 64-row half, rows outside every expert and GC_GUARD rows past max_rows are checked to be
 * untouched (C is filled with a NaN sentinel first), and a hang fails the run after a deadline
 * with each CTA's progress words (tiles issued and stored, last expert) printed.
 *
 * Per case (routing x B layout), one set of inputs, these runs:
 *   api       mkGroupedGemm: vs reference; must be bitwise equal to the Hopper kernel's output
 *             (proof that the fast path ran; with --expect-portable, to the portable kernel's);
 *   hopper    the Hopper kernel directly, traced (progress words for the watchdog);
 *   no-tma    every half tile through per-thread stores: bitwise equal to hopper;
 *   ctas=1,7  other grid sizes: bitwise equal to hopper;
 *   portable  the portable kernel: vs reference;
 *   engine    the dense GEMM engine once per expert on its rows: bitwise equal to hopper
 *             (the same tiles and k order, so any difference is the grouped logic).
 * Cases: uniform, multinomial, one hot expert, empty experts (first, middle, last, all),
 * counts at every tile and half-tile edge, offsets[0] > 0 and rows after offsets[E], K and N
 * tails, K = 8, odd N, 256 experts, offsets that are not a partition (clipped), large K with a
 * sampled reference. Then: CUDA-graph replays with new offsets written on the device between
 * replays, API errors (nothing launched), a misaligned A (portable path).
 *
 * Usage: test-grouped-gpu [--quick] [--expect-portable] [--deadline SECONDS]
 *   --deadline: how long one step may run before it counts as a hang (default 60; raise it
 *   under compute-sanitizer).
 * Exit: 0 pass, 1 fail, 3 hang, 77 no CUDA device.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mkernel.h"
#include "fused/bench/fill.cuh"
#include "fused/gemm/gemm.h"
#include "fused/gemm/grouped.h"
#include "test/gpu/moe/grouped_check.h"

static int t_failed, t_passed, t_quick, t_expect_portable, t_hopper_ok;
static cudaStream_t t_st;
static double t_deadline = 60.0;

static void t_report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void t_report(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s ", ok ? "ok  " : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (ok)
		t_passed++;
	else
		t_failed++;
}

/* A case: counts (or explicit offsets), rows before the first expert and after the last. */
struct t_case {
	const char *name;
	int ne, n, k;
	const int *counts;  /* [ne], or NULL with offsets */
	const int *offsets; /* [ne + 1] explicit (invalid partitions), or NULL */
	int first, slack;   /* offsets[0], rows after offsets[E] */
	int max_rows;	    /* with explicit offsets */
	int sample;	    /* 0: reference for every row; else about this many rows */
	int layouts;	    /* bit 0: K x N, bit 1: N x K */
};

/* Everything one case x layout needs on both sides. */
struct t_ctx {
	const struct t_case *tc;
	int b_nk, max_rows, ne;
	int *h_off, *lo, *hi, *row_expert;
	int *d_off;
	__nv_bfloat16 *d_a, *d_b, *d_c;
	uint16_t *h_a, *h_b;
	size_t c_elems; /* (max_rows + GC_GUARD) * n */
	int *ref_rows, nref;
	float *ref;
	struct gc_problem p;
	uint16_t *out_hopper;
	unsigned int *trace_h, *trace_d;
	int sms;
};

static void t_poison(struct t_ctx *x)
{
	GC_CUDA(cudaMemsetAsync(x->d_c, 0xFF, x->c_elems * 2, t_st));
}

static uint16_t *t_fetch(struct t_ctx *x)
{
	uint16_t *h = (uint16_t *)malloc(x->c_elems * 2);

	GC_CUDA(cudaMemcpy(h, x->d_c, x->c_elems * 2, cudaMemcpyDeviceToHost));
	return h;
}

static struct mk_grouped_launch t_launch(const struct t_ctx *x)
{
	struct mk_grouped_launch l;

	memset(&l, 0, sizeof(l));
	l.a = x->d_a;
	l.b = x->d_b;
	l.c = x->d_c;
	l.offsets = x->d_off;
	l.num_experts = x->ne;
	l.max_rows = x->max_rows;
	l.n = x->tc->n;
	l.k = x->tc->k;
	l.b_layout = x->b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN;
	return l;
}

/* Reference rows: all, or a sample that always has each expert's first and last two rows and
 * the rows around every 64-row edge inside it. */
static void t_pick_ref_rows(struct t_ctx *x)
{
	const int sample = x->tc->sample;
	char *pick = (char *)calloc(x->max_rows, 1);

	for (int e = 0; e < x->ne; e++) {
		const int lo = x->lo[e], hi = x->hi[e];

		for (int r = lo; r < hi; r++) {
			const int in = r - lo;
			int take = sample == 0 || in < 2 || hi - r <= 2 || in % 64 <= 1 ||
				   in % 64 >= 62;

			if (!take && sample > 0)
				take = gc_rand() % (unsigned)(x->max_rows + 1) < (unsigned)sample;
			pick[r] = (char)take;
		}
	}
	x->ref_rows = (int *)malloc((size_t)x->max_rows * sizeof(int) + sizeof(int));
	x->nref = 0;
	for (int r = 0; r < x->max_rows; r++)
		if (pick[r])
			x->ref_rows[x->nref++] = r;
	free(pick);
}

static void t_setup(struct t_ctx *x, const struct t_case *tc, int b_nk)
{
	const int ne = tc->ne, n = tc->n, k = tc->k;

	memset(x, 0, sizeof(*x));
	x->tc = tc;
	x->b_nk = b_nk;
	x->ne = ne;
	x->h_off = (int *)malloc((ne + 1) * sizeof(int));
	if (tc->offsets != NULL) {
		memcpy(x->h_off, tc->offsets, (ne + 1) * sizeof(int));
		x->max_rows = tc->max_rows;
	} else {
		x->h_off[0] = tc->first;
		for (int e = 0; e < ne; e++)
			x->h_off[e + 1] = x->h_off[e] + tc->counts[e];
		x->max_rows = x->h_off[ne] + tc->slack;
	}
	x->lo = (int *)malloc(ne * sizeof(int));
	x->hi = (int *)malloc(ne * sizeof(int));
	gc_ranges(x->h_off, ne, x->max_rows, x->lo, x->hi);
	x->row_expert = gc_row_expert(x->lo, x->hi, ne, x->max_rows);
	x->c_elems = (size_t)(x->max_rows + GC_GUARD) * n;

	const size_t a_elems = (size_t)(x->max_rows > 0 ? x->max_rows : 1) * k;
	const size_t b_elems = (size_t)ne * n * k;

	GC_CUDA(cudaMalloc((void **)&x->d_off, (ne + 1) * sizeof(int)));
	GC_CUDA(cudaMalloc((void **)&x->d_a, a_elems * 2 + 16));
	GC_CUDA(cudaMalloc((void **)&x->d_b, b_elems * 2));
	GC_CUDA(cudaMalloc((void **)&x->d_c, x->c_elems * 2));
	GC_CUDA(cudaMemcpy(x->d_off, x->h_off, (ne + 1) * sizeof(int), cudaMemcpyHostToDevice));
	mk_fill_bf16<<<512, 256, 0, t_st>>>(x->d_a, a_elems + 8, 1234u + (uint32_t)ne);
	mk_fill_bf16<<<512, 256, 0, t_st>>>(x->d_b, b_elems, 99u + (uint32_t)(n * 7 + k));
	GC_CUDA(cudaGetLastError());
	x->h_a = (uint16_t *)malloc(a_elems * 2 + 16);
	x->h_b = (uint16_t *)malloc(b_elems * 2);
	GC_CUDA(cudaMemcpyAsync(x->h_a, x->d_a, a_elems * 2 + 16, cudaMemcpyDeviceToHost, t_st));
	GC_CUDA(cudaMemcpyAsync(x->h_b, x->d_b, b_elems * 2, cudaMemcpyDeviceToHost, t_st));
	gc_wait(t_st, t_deadline);

	x->p.a = x->h_a;
	x->p.b = x->h_b;
	x->p.ne = ne;
	x->p.max_rows = x->max_rows;
	x->p.n = n;
	x->p.k = k;
	x->p.b_nk = b_nk;
	x->p.row_expert = x->row_expert;
	t_pick_ref_rows(x);
	x->ref = (float *)malloc((size_t)x->nref * n * sizeof(float) + 4);
	gc_reference(&x->p, x->ref_rows, x->nref, x->ref);

	GC_CUDA(cudaHostAlloc((void **)&x->trace_h, 4096 * MK_GROUPED_TRACE_WORDS * 4,
			      cudaHostAllocMapped));
	GC_CUDA(cudaHostGetDevicePointer((void **)&x->trace_d, x->trace_h, 0));
	GC_CUDA(cudaDeviceGetAttribute(&x->sms, cudaDevAttrMultiProcessorCount, 0));
}

static void t_teardown(struct t_ctx *x)
{
	gc_trace = NULL;
	cudaFree(x->d_off);
	cudaFree(x->d_a);
	cudaFree(x->d_b);
	cudaFree(x->d_c);
	cudaFreeHost(x->trace_h);
	free(x->h_off);
	free(x->lo);
	free(x->hi);
	free(x->row_expert);
	free(x->h_a);
	free(x->h_b);
	free(x->ref_rows);
	free(x->ref);
	free(x->out_hopper);
}

/* Check one output against the reference; returns 1 if right. */
static int t_verdict(struct t_ctx *x, const uint16_t *c, const char *variant, double ms)
{
	struct gc_verdict v;

	gc_compare(c, &x->p, x->lo, x->hi, x->ref_rows, x->nref, x->ref, &v);
	const int ok = v.bad == 0 && v.unwritten == 0 && v.overwritten == 0;

	t_report(ok, "%-34s %-8s %-9s ref rows %6d/%-6d bad %llu unwritten %llu outside %llu "
		 "worst %.3g (%.2f ms)",
		 x->tc->name, x->b_nk ? "B=NxK" : "B=KxN", variant, x->nref, x->max_rows, v.bad,
		 v.unwritten, v.overwritten, v.worst, ms);
	if (v.bad)
		printf("     first wrong: %s\n", v.first_bad);
	if (v.unwritten)
		printf("     first unwritten: %s\n", v.first_unwritten);
	if (v.overwritten)
		printf("     first written outside: %s\n", v.first_overwritten);
	return ok;
}

static int t_same(struct t_ctx *x, const uint16_t *c, const uint16_t *want, const char *variant,
		  const char *against)
{
	char first[256];
	unsigned long long d = gc_bitwise(c, want, &x->p, x->lo, x->hi, first, sizeof(first));

	t_report(d == 0, "%-34s %-8s %-9s bitwise equal to %s: %llu differ", x->tc->name,
		 x->b_nk ? "B=NxK" : "B=KxN", variant, against, d);
	if (d)
		printf("     first difference: %s\n", first);
	return d == 0;
}

/* Untouched outside the experts, also for runs compared bitwise only. */
static void t_outside(struct t_ctx *x, const uint16_t *c, const char *variant)
{
	unsigned long long bad = 0;
	int first = -1;

	for (int row = 0; row < x->max_rows + GC_GUARD; row++) {
		if (row < x->max_rows && x->row_expert[row] >= 0)
			continue;
		for (int col = 0; col < x->tc->n; col++)
			if (c[(size_t)row * x->tc->n + col] != GC_SENTINEL && bad++ == 0)
				first = row;
	}
	if (bad) {
		t_report(0, "%-34s %-8s %-9s %llu elements written outside every expert (first row %d)",
			 x->tc->name, x->b_nk ? "B=NxK" : "B=KxN", variant, bad, first);
	}
}

static double t_ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* Run a variant: poison, launch (timed with the wall clock around a synchronised run), fetch. */
typedef int (*t_run_fn)(struct t_ctx *x, void *arg);

static uint16_t *t_run(struct t_ctx *x, const char *variant, t_run_fn fn, void *arg, int *rc,
		       double *ms)
{
	struct timespec t0;

	snprintf(gc_case, sizeof(gc_case), "%s %s %s", x->tc->name, x->b_nk ? "B=NxK" : "B=KxN",
		 variant);
	t_poison(x);
	gc_wait(t_st, t_deadline);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	*rc = fn(x, arg);
	gc_wait(t_st, t_deadline);
	*ms = t_ms_since(&t0);
	return t_fetch(x);
}

static int t_fn_api(struct t_ctx *x, void *arg)
{
	(void)arg;
	return mkGroupedGemm(x->d_a, x->d_b, x->d_c, x->d_off, x->ne, (size_t)x->max_rows,
			     (size_t)x->tc->n, (size_t)x->tc->k, ncclBfloat16,
			     x->b_nk ? mkLayoutRowMajorNK : mkLayoutRowMajorKN, t_st) == ncclSuccess
		       ? 0
		       : -1;
}

struct t_variant {
	int ctas, no_tma, trace;
};

static int t_fn_hopper(struct t_ctx *x, void *arg)
{
	const struct t_variant *v = (const struct t_variant *)arg;
	struct mk_grouped_launch l = t_launch(x);

	l.ctas = v->ctas;
	l.no_tma_store = v->no_tma;
	if (v->trace) {
		const int grid = v->ctas > 0 ? v->ctas : x->sms;

		memset(x->trace_h, 0, 4096 * MK_GROUPED_TRACE_WORDS * 4);
		l.trace = x->trace_d;
		gc_trace = x->trace_h;
		gc_trace_ctas = grid;
	}
	return mk_grouped_run(&l, t_st);
}

static int t_fn_portable(struct t_ctx *x, void *arg)
{
	struct mk_grouped_launch l = t_launch(x);

	(void)arg;
	return mk_grouped_portable_run(&l, t_st);
}

/* The dense engine once per expert on its rows (rows of empty experts: nothing). */
static int t_fn_engine(struct t_ctx *x, void *arg)
{
	const int n = x->tc->n, k = x->tc->k;

	(void)arg;
	for (int e = 0; e < x->ne; e++) {
		struct mk_gemm_launch l;
		const int rows = x->hi[e] - x->lo[e];
		int rc;

		if (rows == 0)
			continue;
		memset(&l, 0, sizeof(l));
		l.a = x->d_a + (size_t)x->lo[e] * k;
		l.b = x->d_b + (size_t)e * n * k;
		mk_gemm_args_init(&l.args, rows, n, k, x->b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN,
				  x->d_c + (size_t)x->lo[e] * n);
		rc = mk_gemm_run(&l, t_st);
		if (rc)
			return rc;
	}
	return 0;
}

static void t_one(const struct t_case *tc, int b_nk)
{
	struct t_ctx x;
	struct timespec t0;
	uint16_t *c;
	int rc;
	double ms;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	t_setup(&x, tc, b_nk);
	printf("# %s, %s: %d experts, max rows %d, N %d, K %d, reference rows %d (%.0f ms setup)\n",
	       tc->name, b_nk ? "B=NxK" : "B=KxN", tc->ne, x.max_rows, tc->n, tc->k, x.nref,
	       t_ms_since(&t0));

	const struct mk_grouped_launch probe = t_launch(&x);
	const char *why = NULL;
	const int hopper = t_hopper_ok && mk_grouped_check(&probe, &why) == 0;

	if (hopper) {
		struct t_variant v = { 0, 0, 1 };

		c = t_run(&x, "hopper", t_fn_hopper, &v, &rc, &ms);
		if (rc)
			t_report(0, "%s hopper: launch returned %d", tc->name, rc);
		else
			t_verdict(&x, c, "hopper", ms);
		x.out_hopper = c;
	} else {
		printf("     (Hopper kernel not run: %s)\n",
		       t_hopper_ok ? why : "device is not sm_90");
	}

	c = t_run(&x, "api", t_fn_api, NULL, &rc, &ms);
	if (rc) {
		t_report(0, "%s api: mkGroupedGemm failed", tc->name);
	} else {
		t_verdict(&x, c, "api", ms);
		if (hopper && !t_expect_portable)
			t_same(&x, c, x.out_hopper, "api", "the Hopper kernel (fast path ran)");
	}
	uint16_t *api_out = c;

	if (hopper) {
		struct t_variant nt = { 0, 1, 1 }, c1 = { 1, 0, 1 }, c7 = { 7, 0, 1 };

		c = t_run(&x, "no-tma", t_fn_hopper, &nt, &rc, &ms);
		if (rc == 0) {
			t_same(&x, c, x.out_hopper, "no-tma", "hopper");
			t_outside(&x, c, "no-tma");
		} else {
			t_report(0, "%s no-tma: launch returned %d", tc->name, rc);
		}
		free(c);
		if (!t_quick || tc->ne <= 16) {
			c = t_run(&x, "ctas=1", t_fn_hopper, &c1, &rc, &ms);
			if (rc == 0) {
				t_same(&x, c, x.out_hopper, "ctas=1", "hopper");
				t_outside(&x, c, "ctas=1");
			}
			free(c);
		}
		c = t_run(&x, "ctas=7", t_fn_hopper, &c7, &rc, &ms);
		if (rc == 0) {
			t_same(&x, c, x.out_hopper, "ctas=7", "hopper");
			t_outside(&x, c, "ctas=7");
		}
		free(c);
		gc_trace = NULL;
	}

	c = t_run(&x, "portable", t_fn_portable, NULL, &rc, &ms);
	if (rc) {
		t_report(0, "%s portable: launch returned %d", tc->name, rc);
	} else {
		t_verdict(&x, c, "portable", ms);
		if (t_expect_portable)
			t_same(&x, api_out, c, "api", "the portable kernel (forced)");
	}
	free(c);
	free(api_out);

	/* The engine's tiles: dense rules hold where the grouped ones do (16-byte A row bases). */
	if (hopper && tc->offsets == NULL) {
		c = t_run(&x, "engine", t_fn_engine, NULL, &rc, &ms);
		if (rc == 0)
			t_same(&x, c, x.out_hopper, "engine", "the dense engine per expert");
		else
			printf("     (dense engine per expert not run: %d)\n", rc);
		free(c);
	}
	t_teardown(&x);
}

/*
 * CUDA graph: one mkGroupedGemm captured, then replayed after new offsets were written into the
 * same device array (by a kernel-free copy on the stream): each replay follows the offsets of
 * the moment.
 */
static void t_graph(void)
{
	static int counts1[8] = { 100, 0, 300, 5, 128, 0, 64, 1 };
	static int counts2[8] = { 0, 500, 0, 0, 7, 129, 0, 250 };
	/* max_rows 998 holds both routings (598 and 891 rows). */
	static const struct t_case tc = { "graph", 8, 384, 256, counts1, NULL, 0, 400, 0, 0, 3 };
	struct t_ctx x;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	int off2[9];

	snprintf(gc_case, sizeof(gc_case), "graph capture");
	t_setup(&x, &tc, 1);
	off2[0] = 0;
	for (int e = 0; e < 8; e++)
		off2[e + 1] = off2[e] + counts2[e];
	/* Global mode, as PyTorch captures: any capture-unsafe call would invalidate it. */
	GC_CUDA(cudaStreamBeginCapture(t_st, cudaStreamCaptureModeGlobal));
	ncclResult_t r = mkGroupedGemm(x.d_a, x.d_b, x.d_c, x.d_off, 8, (size_t)x.max_rows, 384,
				       256, ncclBfloat16, mkLayoutRowMajorNK, t_st);
	GC_CUDA(cudaStreamEndCapture(t_st, &graph));
	t_report(r == ncclSuccess, "graph: mkGroupedGemm captured (%d)", (int)r);
	GC_CUDA(cudaGraphInstantiate(&exec, graph, 0));

	for (int replay = 0; replay < 2; replay++) {
		const int *off = replay == 0 ? x.h_off : off2;
		uint16_t *c;

		snprintf(gc_case, sizeof(gc_case), "graph replay %d", replay);
		GC_CUDA(cudaMemcpyAsync(x.d_off, off, 9 * sizeof(int), cudaMemcpyHostToDevice, t_st));
		t_poison(&x);
		GC_CUDA(cudaGraphLaunch(exec, t_st));
		gc_wait(t_st, t_deadline);
		c = t_fetch(&x);
		/* New ranges and reference for this replay's offsets. */
		gc_ranges(off, 8, x.max_rows, x.lo, x.hi);
		free(x.row_expert);
		x.row_expert = gc_row_expert(x.lo, x.hi, 8, x.max_rows);
		x.p.row_expert = x.row_expert;
		free(x.ref_rows);
		free(x.ref);
		t_pick_ref_rows(&x);
		x.ref = (float *)malloc((size_t)x.nref * 384 * sizeof(float) + 4);
		gc_reference(&x.p, x.ref_rows, x.nref, x.ref);
		t_verdict(&x, c, replay == 0 ? "replay 1" : "replay 2", 0);
		free(c);
	}
	cudaGraphExecDestroy(exec);
	cudaGraphDestroy(graph);
	t_teardown(&x);
}

/* Argument errors: ncclInvalidArgument and nothing written. */
static void t_api_errors(void)
{
	static int counts[4] = { 10, 20, 0, 30 };
	static const struct t_case tc = { "api-errors", 4, 64, 64, counts, NULL, 0, 0, 0, 0, 3 };
	struct t_ctx x;
	int host_off[5] = { 0, 10, 30, 30, 60 };
	const mkLayout_t nk = mkLayoutRowMajorNK;
	uint16_t *c;
	int untouched = 1;

	snprintf(gc_case, sizeof(gc_case), "api errors");
	t_setup(&x, &tc, 1);
	t_poison(&x);
	gc_wait(t_st, t_deadline);
	t_report(mkGroupedGemm(x.d_a, x.d_b, x.d_c, host_off, 4, 60, 64, 64, ncclBfloat16, nk,
			       t_st) == ncclInvalidArgument,
		 "api: offsets in pageable host memory -> ncclInvalidArgument");
	t_report(mkGroupedGemm(x.d_a, x.d_b, x.d_c, x.d_off, 4, 60, 64, 64, ncclFloat16, nk, t_st) ==
			 ncclInvalidArgument,
		 "api: float16 -> ncclInvalidArgument");
	t_report(mkGroupedGemm(x.d_a, x.d_b, NULL, x.d_off, 4, 60, 64, 64, ncclBfloat16, nk, t_st) ==
			 ncclInvalidArgument,
		 "api: NULL C -> ncclInvalidArgument");
	t_report(mkGroupedGemm(x.d_a, x.d_b, x.d_c, x.d_off, 0, 60, 64, 64, ncclBfloat16, nk, t_st) ==
			 ncclInvalidArgument,
		 "api: 0 experts -> ncclInvalidArgument");
	t_report(mkGroupedGemm(x.d_a, x.d_b, x.d_c, x.d_off, 4, 0, 64, 64, ncclBfloat16, nk, t_st) ==
			 ncclSuccess,
		 "api: maxRows 0 -> ncclSuccess, nothing to do");
	gc_wait(t_st, t_deadline);
	c = t_fetch(&x);
	for (size_t i = 0; i < x.c_elems; i++)
		untouched &= c[i] == GC_SENTINEL;
	t_report(untouched, "api: nothing written by the refused calls and the empty one");
	free(c);
	t_teardown(&x);
}

/* A misaligned A (2-byte, not 16-byte aligned): the API's portable path, still right. */
static void t_misaligned(void)
{
	static int counts[3] = { 70, 0, 200 };
	static const struct t_case tc = { "misaligned-a", 3, 136, 64, counts, NULL, 0, 0, 0, 0, 3 };
	struct t_ctx x;
	uint16_t *c;
	int rc;
	double ms;

	t_setup(&x, &tc, 1);
	/* Shift A by one element on both sides: the reference reads the shifted host copy. */
	x.d_a = x.d_a + 1;
	x.h_a = x.h_a + 1;
	x.p.a = x.h_a;
	gc_reference(&x.p, x.ref_rows, x.nref, x.ref);
	c = t_run(&x, "api", t_fn_api, NULL, &rc, &ms);
	if (rc)
		t_report(0, "misaligned-a api: mkGroupedGemm failed");
	else
		t_verdict(&x, c, "api", ms);
	free(c);
	x.d_a = x.d_a - 1;
	x.h_a = x.h_a - 1;
	t_teardown(&x);
}

int main(int argc, char **argv)
{
	static const int uni[8] = { 256, 256, 256, 256, 256, 256, 256, 256 };
	static const int hot[8] = { 2, 0, 1, 2000, 3, 0, 1, 0 };
	static const int empty[12] = { 0, 130, 1, 7, 0, 0, 0, 0, 200, 64, 129, 0 };
	static const int none[5] = { 0, 0, 0, 0, 0 };
	static const int edges[14] = { 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257,
				       0 };
	static const int small[4] = { 100, 37, 0, 100 };
	static const int bad_off[6] = { 0, 500, 200, 900, 100, 1000 };
	static const int past_end[6] = { -40, 100, 5000, 7000, 9000, 9000 };
	static int multi[16], many[256], big[8], hot_last[33];
	const struct t_case cases[] = {
		{ "uniform 8x256", 8, 512, 512, uni, NULL, 0, 0, 0, 0, 3 },
		{ "multinomial 16 experts", 16, 768, 1024, multi, NULL, 0, 0, 0, 0, 3 },
		{ "one hot expert, N and K tails", 8, 1000, 520, hot, NULL, 0, 0, 0, 0, 3 },
		{ "empty experts, offsets[0]=3", 12, 256, 128, empty, NULL, 3, 50, 0, 0, 3 },
		{ "all experts empty", 5, 256, 64, none, NULL, 0, 100, 0, 0, 3 },
		{ "counts at tile edges, N=264", 14, 264, 72, edges, NULL, 5, 77, 0, 0, 3 },
		{ "K=8", 4, 256, 8, small, NULL, 0, 0, 0, 0, 3 },
		{ "odd N=1001 (per-thread stores)", 4, 1001, 64, small, NULL, 0, 9, 0, 0, 2 },
		{ "256 experts", 256, 384, 256, many, NULL, 0, 0, 0, 0, 3 },
		{ "hot last of 33 experts", 33, 512, 192, hot_last, NULL, 0, 0, 0, 0, 3 },
		{ "offsets not a partition", 5, 300, 128, NULL, bad_off, 0, 0, 1000, 0, 3 },
		{ "offsets past max_rows, negative", 5, 256, 64, NULL, past_end, 0, 0, 4096, 0, 3 },
		{ "K=7168 N=2048, sampled", 8, 2048, 7168, big, NULL, 0, 0, 0, 300, 3 },
		{ "K=2048 N=7168, sampled", 8, 7168, 2048, big, NULL, 0, 0, 0, 300, 3 },
	};
	int ndev = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			t_quick = 1;
		else if (!strcmp(argv[i], "--expect-portable"))
			t_expect_portable = 1;
		else if (!strcmp(argv[i], "--deadline") && i + 1 < argc)
			t_deadline = atof(argv[++i]);
	}
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	GC_CUDA(cudaStreamCreate(&t_st));
	t_hopper_ok = mk_gemm_device_ok();
	{
		cudaDeviceProp prop;

		GC_CUDA(cudaGetDeviceProperties(&prop, 0));
		printf("# %s, %d SMs, Hopper grouped GEMM %s%s\n", prop.name,
		       prop.multiProcessorCount, t_hopper_ok ? "runs" : "not supported",
		       t_expect_portable ? ", API expected on the portable kernel" : "");
	}
	gc_rand_state = 12345;
	gc_counts_multinomial(multi, 16, 3100);
	for (int e = 0; e < 256; e++)
		many[e] = gc_rand() % 3 == 0 ? 0 : (int)(gc_rand() % 40);
	gc_counts_multinomial(big, 8, 1500);
	hot_last[32] = 3000;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (t_quick && (i == 1 || i == 8 || i >= 12))
			continue;
		for (int b_nk = 0; b_nk < 2; b_nk++)
			if (cases[i].layouts & (1 << b_nk))
				t_one(&cases[i], b_nk);
	}
	t_graph();
	t_api_errors();
	t_misaligned();

	cudaStreamDestroy(t_st);
	printf("%d passed, %d failed\n", t_passed, t_failed);
	return t_failed ? 1 : 0;
}
