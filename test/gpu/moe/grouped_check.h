/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the grouped GEMM's gpu test and benchmark: routings (per-expert row counts), the
 * experts' row ranges as the kernel defines them, a CPU reference (bf16 inputs, fp64 sums,
 * threads over rows), a comparison that names the first wrong (expert, row, column) and what
 * was written outside every expert, and a watchdog wait that turns a hang into a failure with
 * the kernel's progress words printed.
 */
#ifndef MK_TEST_GPU_MOE_GROUPED_CHECK_H
#define MK_TEST_GPU_MOE_GROUPED_CHECK_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#define GC_SENTINEL 0xFFFFu /* bf16 NaN: C is filled with it before every run */
#define GC_GUARD    64	    /* rows after max_rows that nothing may write */

#define GC_CUDA(x)                                                                                 \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s (case %s)\n", __FILE__, __LINE__, #x,       \
				cudaGetErrorString(e_), gc_case);                                  \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* What is running now, for the watchdog and error messages. */
static char gc_case[256] = "setup";

static float gc_bf16(uint16_t v)
{
	uint32_t u = (uint32_t)v << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint32_t gc_rand_state = 1;

static uint32_t gc_rand(void)
{
	gc_rand_state = gc_rand_state * 1664525u + 1013904223u;
	return gc_rand_state >> 8;
}

/* Counts of `rows` tokens routed to `ne` experts at random (multinomial, uniform experts). */
static void gc_counts_multinomial(int *counts, int ne, int rows)
{
	memset(counts, 0, ne * sizeof(int));
	for (int i = 0; i < rows; i++)
		counts[gc_rand() % ne]++;
}

/* Expert ranges exactly as grouped_sched.h defines them (clipped, disjoint). */
static void gc_ranges(const int *off, int ne, int max_rows, int *lo, int *hi)
{
	int floor = 0;

	for (int e = 0; e < ne; e++) {
		int a = off[e] < 0 ? 0 : (off[e] > max_rows ? max_rows : off[e]);
		int b = off[e + 1] < 0 ? 0 : (off[e + 1] > max_rows ? max_rows : off[e + 1]);

		lo[e] = a > floor ? a : floor;
		hi[e] = b > lo[e] ? b : lo[e];
		floor = hi[e];
	}
}

/* Expert of each row of [0, max_rows + GC_GUARD), -1 outside every expert. */
static int *gc_row_expert(const int *lo, const int *hi, int ne, int max_rows)
{
	int *x = (int *)malloc((size_t)(max_rows + GC_GUARD) * sizeof(int));

	for (int r = 0; r < max_rows + GC_GUARD; r++)
		x[r] = -1;
	for (int e = 0; e < ne; e++)
		for (int r = lo[e]; r < hi[e]; r++)
			x[r] = e;
	return x;
}

/* The problem on the host: bf16 bits of A and B as the GPU has them. */
struct gc_problem {
	const uint16_t *a, *b;
	int ne, max_rows, n, k, b_nk;
	const int *row_expert;
};

struct gc_ref_job {
	const struct gc_problem *p;
	const int *rows; /* rows to compute */
	int nrows, first, step;
	float *ref; /* [nrows][n] */
};

static void *gc_ref_worker(void *arg)
{
	struct gc_ref_job *j = (struct gc_ref_job *)arg;
	const struct gc_problem *p = j->p;
	double *acc = (double *)malloc((size_t)p->n * sizeof(double));
	float *arow = (float *)malloc((size_t)p->k * sizeof(float));

	for (int i = j->first; i < j->nrows; i += j->step) {
		const int row = j->rows[i], e = p->row_expert[row];
		const uint16_t *be = p->b + (size_t)e * p->n * p->k;

		for (int kk = 0; kk < p->k; kk++)
			arow[kk] = gc_bf16(p->a[(size_t)row * p->k + kk]);
		if (p->b_nk) {
			for (int col = 0; col < p->n; col++) {
				const uint16_t *bc = be + (size_t)col * p->k;
				double s = 0;

				for (int kk = 0; kk < p->k; kk++)
					s += (double)arow[kk] * gc_bf16(bc[kk]);
				acc[col] = s;
			}
		} else {
			for (int col = 0; col < p->n; col++)
				acc[col] = 0;
			for (int kk = 0; kk < p->k; kk++) {
				const uint16_t *bk = be + (size_t)kk * p->n;
				const double av = arow[kk];

				for (int col = 0; col < p->n; col++)
					acc[col] += av * gc_bf16(bk[col]);
			}
		}
		for (int col = 0; col < p->n; col++)
			j->ref[(size_t)i * p->n + col] = (float)acc[col];
	}
	free(acc);
	free(arow);
	return NULL;
}

/* Reference rows `rows[0..nrows)` (all inside experts) into ref[nrows][n], on every core. */
static void gc_reference(const struct gc_problem *p, const int *rows, int nrows, float *ref)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int nt = ncpu < 1 ? 1 : (ncpu > 64 ? 64 : (int)ncpu);
	pthread_t th[64];
	struct gc_ref_job jobs[64];

	for (int t = 0; t < nt; t++) {
		jobs[t].p = p;
		jobs[t].rows = rows;
		jobs[t].nrows = nrows;
		jobs[t].first = t;
		jobs[t].step = nt;
		jobs[t].ref = ref;
		if (pthread_create(&th[t], NULL, gc_ref_worker, &jobs[t]) != 0) {
			gc_ref_worker(&jobs[t]);
			th[t] = 0;
		}
	}
	for (int t = 0; t < nt; t++)
		if (th[t])
			pthread_join(th[t], NULL);
}

/*
 * Result of comparing one output: elements of reference rows out of bound (first one named),
 * elements of other expert rows left unwritten, elements outside every expert that were written.
 */
struct gc_verdict {
	unsigned long long bad, unwritten, overwritten;
	double worst;
	char first_bad[256], first_unwritten[160], first_overwritten[160];
};

/* Where a row sits: expert, row inside the expert, its tile row and 64-row half. */
static void gc_where(char *buf, size_t len, const int *lo, const int *hi, int e, int row, int col)
{
	const int in = row - lo[e];

	snprintf(buf, len,
		 "expert %d (rows %d..%d, %d rows), row %d = expert row %d (tile row %d, half "
		 "%d%s), "
		 "col %d (column tile %d)",
		 e, lo[e], hi[e] - 1, hi[e] - lo[e], row, in, in / 128, (in % 128) / 64,
		 in / 128 == (hi[e] - lo[e] - 1) / 128 ? ", last tile of the expert" : "", col,
		 col / 256);
}

/*
 * c: max_rows + GC_GUARD rows of bf16 bits. ref_rows/ref: the reference rows. Bound per element:
 * |got - ref| <= 2^-8 |ref| + 1e-5 K (one bf16 rounding, plus fp32 summation-order slack; a
 * lost or repeated k-block moves an element by ~2.7).
 */
static void gc_compare(const uint16_t *c, const struct gc_problem *p, const int *lo, const int *hi,
		       const int *ref_rows, int nref, const float *ref, struct gc_verdict *v)
{
	const double atol = 1e-5 * p->k;
	char *is_ref = (char *)calloc((size_t)p->max_rows + GC_GUARD, 1);

	memset(v, 0, sizeof(*v));
	for (int i = 0; i < nref; i++)
		is_ref[ref_rows[i]] = 1;
	for (int i = 0; i < nref; i++) {
		const int row = ref_rows[i], e = p->row_expert[row];

		for (int col = 0; col < p->n; col++) {
			const uint16_t bits = c[(size_t)row * p->n + col];
			const double want = ref[(size_t)i * p->n + col];
			const double got = gc_bf16(bits);
			const double err = fabs(got - want);

			if (err <= ldexp(fabs(want), -8) + atol) {
				if (err > v->worst)
					v->worst = err;
				continue;
			}
			if (v->bad++ == 0) {
				char w[200];

				gc_where(w, sizeof(w), lo, hi, e, row, col);
				snprintf(v->first_bad, sizeof(v->first_bad),
					 "%s: got %.6g (0x%04x) want %.6g", w, got, bits, want);
			}
		}
	}
	for (int row = 0; row < p->max_rows + GC_GUARD; row++) {
		const int e = row < p->max_rows ? p->row_expert[row] : -1;

		if (e >= 0 && is_ref[row])
			continue;
		for (int col = 0; col < p->n; col++) {
			const uint16_t bits = c[(size_t)row * p->n + col];

			if (e < 0 && bits != GC_SENTINEL) {
				if (v->overwritten++ == 0)
					snprintf(v->first_overwritten, sizeof(v->first_overwritten),
						 "row %d col %d (outside every expert%s) = 0x%04x",
						 row, col,
						 row >= p->max_rows ? ", past max_rows" : "", bits);
			} else if (e >= 0 && (bits & 0x7F80) == 0x7F80) {
				if (v->unwritten++ == 0) {
					char w[150];

					gc_where(w, sizeof(w), lo, hi, e, row, col);
					snprintf(v->first_unwritten, sizeof(v->first_unwritten),
						 "%s = 0x%04x", w, bits);
				}
			}
		}
	}
	free(is_ref);
}

/* Elements of expert rows that differ bitwise between two outputs; first one named. */
static unsigned long long gc_bitwise(const uint16_t *x, const uint16_t *y,
				     const struct gc_problem *p, const int *lo, const int *hi,
				     char *first, size_t len)
{
	unsigned long long diff = 0;

	first[0] = 0;
	for (int row = 0; row < p->max_rows; row++) {
		const int e = p->row_expert[row];

		if (e < 0)
			continue;
		for (int col = 0; col < p->n; col++) {
			const size_t i = (size_t)row * p->n + col;

			if (x[i] == y[i])
				continue;
			if (diff++ == 0) {
				char w[200];

				gc_where(w, sizeof(w), lo, hi, e, row, col);
				snprintf(first, len, "%s: 0x%04x vs 0x%04x", w, x[i], y[i]);
			}
		}
	}
	return diff;
}

/* Progress words of the last traced Hopper launch (host-mapped), for the watchdog. */
static volatile unsigned int *gc_trace;
static int gc_trace_ctas;

static void gc_dump_trace(void)
{
	int shown = 0;

	if (gc_trace == NULL)
		return;
	fprintf(stderr, "progress per CTA (tiles issued / stored by consumer 0 / by consumer 1, "
			"last expert), CTAs that are not done first:\n");
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < gc_trace_ctas && shown < 40; i++) {
			const volatile unsigned int *w = gc_trace + 4 * i;
			/* a finished CTA has stored every tile it issued */
			int behind = w[1] != w[0] || w[2] != w[0];

			if ((pass == 0) != behind)
				continue;
			fprintf(stderr, "  CTA %3d: %u / %u / %u, expert %u\n", i, w[0], w[1], w[2],
				w[3]);
			shown++;
		}
}

/* Wait for `st` with a deadline: a hang or a CUDA error fails the run with what ran. */
static void gc_wait(cudaStream_t st, double seconds)
{
	struct timespec t0, t;
	cudaError_t e;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		e = cudaStreamQuery(st);
		if (e != cudaErrorNotReady)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) + 1e-9 * (t.tv_nsec - t0.tv_nsec) > seconds) {
			fprintf(stderr, "FAIL HANG: %s did not finish in %.0f s\n", gc_case,
				seconds);
			gc_dump_trace();
			fflush(stdout);
			fflush(stderr);
			_exit(3);
		}
		usleep(200);
	}
	if (e != cudaSuccess) {
		fprintf(stderr, "FAIL CUDA error in %s: %s\n", gc_case, cudaGetErrorString(e));
		gc_dump_trace();
		fflush(stdout);
		exit(1);
	}
}

#endif /* MK_TEST_GPU_MOE_GROUPED_CHECK_H */
