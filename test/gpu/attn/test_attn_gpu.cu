/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu suite, component attn: the attention engine and mkAttention on the device, built so that
 * one run says as much as possible.
 *
 * 1. Building blocks, each in a kernel of its own (sm_90 only): the TMA load of a Q and a K block
 *    into swizzled shared memory (raw bytes un-swizzled on the host, zero fill past the end);
 *    one S = Q K^T tile by wgmma against the CPU; O = P V with P packed from the accumulator
 *    layout into wgmma A registers; the masked online-softmax statistics over two key blocks.
 * 2. The whole kernel against an fp64 CPU reference on small shapes (D 64 / 128, causal or not,
 *    GQA, lengths 1, 63, 127, 129, 1000, Sq != Skv): this test's own copy of the kernel, whose
 *    mbarrier waits are bounded and report which wait of which thread timed out; the library's
 *    kernel (must be bitwise equal to it); the portable kernel.
 * 3. A probe with q = 0: every visible key weighs 1, so LSE must be ln(visible keys) to fp32
 *    precision and O the mean of the visible V rows: one missing or extra key fails, at any
 *    length (4k, 8k, offsets, Sq != Skv), with no reference to trust.
 * 4. The ring's epilogue modes: keys split in three calls (partial, merge, merge-out) with key
 *    position offsets, and a query sub-range with its own row strides, against the reference.
 * 5. Large shapes: the Hopper kernel against the portable kernel.
 * 6. Schedule variants (dynamic unit counter, CTA subsets): bitwise equal to the default; three
 *    jobs in one launch (the ring's step list: a K/V source through job maps, written by a
 *    concurrent kernel behind a gate, partials merged in job order by a counter) bitwise equal
 *    to the same jobs as single-job launches.
 * 7. mkAttention: the Hopper path really ran (bitwise equal to the direct launch), argument
 *    errors, and CUDA-graph capture and replay.
 * Hangs: before any launch, each kernel's register split is checked against the registers it
 * holds at launch (an over-allocation waits forever at setmaxnreg.inc, where no bound reaches;
 * such a kernel is not launched). Every case is printed before its launch ("# > ..."). This
 * test's copy of the kernel gives up on any mbarrier wait after 1 s and reports the role
 * (loader, scheduler, consumer warpgroup and warp), the barrier, its stage or slot and parity;
 * its warps also leave marks (barriers initialised, past setmaxnreg, done). A watchdog thread
 * ends a case still running after 20 s with the case's name, that report and the marks.
 *
 * Tolerances: O within 4e-3 max|V| + 2^-7 |ref| (P is rounded to bf16 before P V: at most
 * 2^-9 max|V| off, plus the bf16 rounding of O); LSE within 1e-4 (1 + |ref|) of fp64 (fp32 sums
 * and the hardware exp2); the probe's LSE within 1e-6 relative (its sums are exact integers).
 *
 * Usage: test-attn-gpu [--quick] [--sanitize] [--expect-portable]
 *   --quick: building blocks and small shapes only
 *   --sanitize: bounded waits 64 times longer, the watchdog 30 times (under compute-sanitizer)
 *   --expect-portable: run with MKERNEL_ATTN_FORCE_PORTABLE=1; mkAttention must match the
 *   portable kernel bitwise
 * Exit: 0 pass, 1 fail, 77 no CUDA device.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mkernel.h"
#include "fused/attn/attn.h"
#include "fused/attn/attn_ptx.cuh"
#include "fused/bench/fill.cuh"
#include "attn_ref.h"

/* ---- bounded waits with a report, and marks (this test's copy of the engine only) ---- */

struct t_hang {
	unsigned int hit, id, parity, block, thread, nthreads;
	unsigned int off; /* barrier's offset from the engine's 1024-aligned shared-memory base */
	unsigned long long state, waited_ns;
};

static __device__ struct t_hang *t_hang_rec; /* host-mapped */
static __device__ unsigned int t_hang_claim;
/* Per block (the first T_MARK_BLOCKS) and warp: the last MK_ATTN_MARK lane 0 passed
 * (host-mapped, read by the watchdog while a kernel hangs). */
#define T_MARK_BLOCKS 256
#define T_MARK_WARPS  16
static __device__ unsigned char *t_marks;

/* 1 s of the global timer: a legitimate wait is microseconds (--sanitize: 64 times longer) */
static __device__ unsigned long long t_wait_ns = 1000000000ull;

extern __shared__ unsigned char t_dyn_any[]; /* the dynamic shared memory of any kernel here */

/* Record the first wait that gave up (role, barrier, raw barrier word) and stop the kernel. Out
 * of line: the report's registers stay out of the producer's small budget. */
static __device__ __noinline__ void t_wait_give_up(uint32_t bar, uint32_t parity, int id,
						   unsigned long long waited)
{
	struct t_hang *h = t_hang_rec;

	if (h != NULL && atomicCAS(&t_hang_claim, 0u, 1u) == 0) {
		const uint32_t base = mk_smem_u32(
			(void *)(((uintptr_t)t_dyn_any + 1023) & ~(uintptr_t)1023));
		unsigned long long st;

		/* the raw barrier word, for the report only */
		asm volatile("ld.volatile.shared.u64 %0, [%1];" : "=l"(st) : "r"(bar) : "memory");
		h->id = (unsigned int)id;
		h->parity = parity;
		h->block = blockIdx.x;
		h->thread = threadIdx.x;
		h->nthreads = blockDim.x;
		h->off = bar - base;
		h->state = st;
		h->waited_ns = waited;
		__threadfence_system();
		*(volatile unsigned int *)&h->hit = 1;
		__threadfence_system();
	}
	__trap();
}

static __device__ __forceinline__ void t_wait(uint32_t bar, uint32_t parity, int id)
{
	uint64_t t0, waited;

	if (mk_mbar_test_a(bar, parity))
		return;
	t0 = mk_globaltimer_ns();
	while (!mk_mbar_test_a(bar, parity)) {
		waited = mk_globaltimer_ns() - t0;
		if (waited > t_wait_ns)
			t_wait_give_up(bar, parity, id, waited);
	}
}

static __device__ __forceinline__ void t_mark(int id)
{
	unsigned char *m = t_marks;

	if (m != NULL && (threadIdx.x & 31) == 0 && blockIdx.x < T_MARK_BLOCKS) {
		((volatile unsigned char *)m)[blockIdx.x * T_MARK_WARPS + (threadIdx.x >> 5)] =
			(unsigned char)id;
		__threadfence_system();
	}
}

#define MK_ATTN_WAIT(bar, parity, id) t_wait((bar), (parity), (id))
#define MK_ATTN_MARK(id)	      t_mark(id)
#include "fused/attn/attn_engine.cuh"

/* ---- reporting ---- */

static int t_failed, t_passed, t_quick, t_expect_portable, t_sanitize, t_sms, t_hopper, t_threads;
static cudaStream_t t_st;
static struct t_hang *t_hang_host;
static unsigned char *t_marks_host;
/* The case running now (printed before its launch) and since when; what the watchdog names. */
static pthread_mutex_t t_case_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *t_phase = "start";
static char t_case_label[256] = "start";
static struct timespec t_case_start;
static int t_marks_grid, t_marks_threads; /* the bounded-wait launch being marked (0: none) */

/* A case that runs longer than this is a hang: a 1x1 case takes milliseconds, the largest a
 * second or two (--sanitize: 30 times longer, compute-sanitizer is that much slower). */
#define T_CASE_SECONDS 20
static int t_case_seconds = T_CASE_SECONDS;

static const char *const t_wait_names[] = { "?",       "item_full", "item_empty", "q_full",
					    "q_empty", "k_full",    "k_empty",	  "v_full",
					    "v_empty" };

/* Offset in struct mk_attn_bars of each wait id's barrier (its element 0). */
static const size_t t_bar_fields[] = {
	0,
	offsetof(struct mk_attn_bars, item_full),
	offsetof(struct mk_attn_bars, item_empty),
	offsetof(struct mk_attn_bars, q_full),
	offsetof(struct mk_attn_bars, q_empty),
	offsetof(struct mk_attn_bars, k_full),
	offsetof(struct mk_attn_bars, k_empty),
	offsetof(struct mk_attn_bars, v_full),
	offsetof(struct mk_attn_bars, v_empty),
};

/* The role of a thread of the engine's CTA. */
static void t_role_name(unsigned int thread, char *buf, size_t n)
{
	if (thread == 0)
		snprintf(buf, n, "loader (thread 0)");
	else if (thread == 32)
		snprintf(buf, n, "scheduler (thread 32)");
	else if (thread < 128)
		snprintf(buf, n, "producer warpgroup thread %u", thread);
	else
		snprintf(buf, n, "consumer warpgroup %u warp %u (thread %u)", thread / 128 - 1,
			 (thread % 128) / 32, thread);
}

/* What the first bounded wait that gave up recorded: role, barrier, stage, parity. */
static void t_report_hang(void)
{
	const struct t_hang *h = t_hang_host;
	char role[96], where[64] = "";

	if (h == NULL || !*(volatile const unsigned int *)&h->hit)
		return;
	if (h->id >= MK_ATTN_W_ITEM_FULL && h->id <= MK_ATTN_W_V_EMPTY &&
	    (h->nthreads == MK_ATTN_THREADS(64) || h->nthreads == MK_ATTN_THREADS(128))) {
		const int hd = h->nthreads == MK_ATTN_THREADS(64) ? 64 : 128;
		/* where mk_attn_bars_addr() puts the barriers: after Q and the K and V stages */
		const long long bars = (long long)MK_ATTN_BM(hd) * hd * 2 +
				       2ll * MK_ATTN_STAGES(hd) * MK_ATTN_BN * hd * 2;
		const long long i = ((long long)h->off - bars - (long long)t_bar_fields[h->id]) / 8;

		t_role_name(h->thread, role, sizeof(role));
		if (h->id == MK_ATTN_W_ITEM_FULL || h->id == MK_ATTN_W_ITEM_EMPTY)
			snprintf(where, sizeof(where), " slot %lld", i);
		else if (h->id >= MK_ATTN_W_K_FULL)
			snprintf(where, sizeof(where), " stage %lld of %d", i, MK_ATTN_STAGES(hd));
		printf("HANG: %s of block %u (D %d kernel) gave up after %.2f s waiting for %s%s, "
		       "parity %u; barrier word 0x%016llx at offset %u\n",
		       role, h->block, hd, h->waited_ns * 1e-9, t_wait_names[h->id], where,
		       h->parity, h->state, h->off);
	} else {
		printf("HANG: building-block wait %u of block %u thread %u gave up after %.2f s, "
		       "parity %u; barrier word 0x%016llx\n",
		       h->id, h->block, h->thread, h->waited_ns * 1e-9, h->parity, h->state);
	}
}

/* How far every warp of the marked launch got: waits no bound covers (setmaxnreg, named
 * barriers) show as warps stopped at an earlier mark. */
static void t_report_marks(void)
{
	const int blocks = t_marks_grid < T_MARK_BLOCKS ? t_marks_grid : T_MARK_BLOCKS;
	const int warps = t_marks_threads / 32;
	int stuck = 0;

	if (t_marks_host == NULL || blocks == 0) {
		printf("marks: none (the case's launch is not the bounded-wait kernel)\n");
		return;
	}
	for (int b = 0; b < blocks; b++) {
		const volatile unsigned char *m = t_marks_host + b * T_MARK_WARPS;
		char line[T_MARK_WARPS * 2 + 1];
		int done = 1;

		for (int w = 0; w < warps; w++) {
			line[2 * w] = " SRD"[m[w] < 4 ? m[w] : 0];
			line[2 * w + 1] = ' ';
			done &= m[w] == MK_ATTN_M_DONE;
		}
		line[2 * warps - 1] = 0;
		if (!done && stuck++ < 4)
			printf("marks: block %d, warps 0..%d (0 loader, 1 scheduler, 4.. "
			       "consumers): %s\n",
			       b, warps - 1, line);
	}
	printf("marks: %d of %d blocks with warps not done (' ' not started, S barriers "
	       "initialised, R past setmaxnreg, D done)\n",
	       stuck, blocks);
}

#define T_CHECK_CUDA(x)                                                                            \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			printf("FAIL %s:%d (%s, case %s): %s: %s\n", __FILE__, __LINE__, t_phase,  \
			       t_case_label, #x, cudaGetErrorString(e_));                          \
			t_report_hang();                                                           \
			t_report_marks();                                                          \
			fflush(stdout);                                                            \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

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

/* Name the case about to run and print it before anything is launched: the last such line of a
 * log that stops is the case that hung. Restarts the watchdog's clock. */
static void t_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void t_case(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&t_case_lock);
	va_start(ap, fmt);
	vsnprintf(t_case_label, sizeof(t_case_label), fmt, ap);
	va_end(ap);
	clock_gettime(CLOCK_MONOTONIC, &t_case_start);
	t_marks_grid = 0;
	printf("# > %s\n", t_case_label);
	fflush(stdout);
	pthread_mutex_unlock(&t_case_lock);
}

static void t_enter(const char *phase)
{
	printf("# %s\n", phase);
	pthread_mutex_lock(&t_case_lock);
	t_phase = phase;
	pthread_mutex_unlock(&t_case_lock);
	t_case("%s: setup", phase);
}

static void *t_watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec now;

		usleep(200 * 1000);
		clock_gettime(CLOCK_MONOTONIC, &now);
		pthread_mutex_lock(&t_case_lock);
		if (now.tv_sec - t_case_start.tv_sec > t_case_seconds) {
			printf("FAIL watchdog: case '%s' (phase '%s') still running after %d s\n",
			       t_case_label, t_phase, t_case_seconds);
			t_report_hang();
			t_report_marks();
			fflush(stdout);
			_exit(1);
		}
		pthread_mutex_unlock(&t_case_lock);
	}
	return NULL;
}

/* ---- comparisons ---- */

/* Layout of an array for messages: O is [B][rows][H][D], LSE [B][H][ld]. */
struct t_layout {
	int is_lse;
	long long rows; /* O: rows per batch; LSE: ld */
	int h, d;
};

static void t_where(const struct t_layout *l, long long i, char *buf, size_t n)
{
	if (l->is_lse) {
		long long s = i % l->rows, bh = i / l->rows;

		snprintf(buf, n, "b %lld h %lld s %lld", bh / l->h, bh % l->h, s);
	} else {
		long long d = i % l->d, r = i / l->d, h = r % l->h, rs = r / l->h;

		snprintf(buf, n, "b %lld s %lld h %lld d %lld", rs / l->rows, rs % l->rows, h, d);
	}
}

/* Compare got with ref elementwise (|got - ref| <= atol + rtol |ref|, -inf only with -inf);
 * report the count, the worst error and the first mismatch. Returns the mismatch count. */
static long long t_cmp(const char *what, const float *got, const float *ref, long long n,
		       double atol, double rtol, const struct t_layout *lay)
{
	long long bad = 0, first = -1, worst_i = -1;
	double worst = 0;
	char where[96];

	for (long long i = 0; i < n; i++) {
		double g = got[i], r = ref[i], e;

		if (isinf(r) || isinf(g)) {
			e = (g == r) ? 0 : INFINITY;
		} else {
			e = fabs(g - r);
			if (isnan(e))
				e = INFINITY;
		}
		if (e > worst) {
			worst = e;
			worst_i = i;
		}
		if (!(e <= atol + rtol * fabs(r))) {
			if (first < 0)
				first = i;
			bad++;
		}
	}
	if (bad) {
		t_where(lay, first, where, sizeof(where));
		t_report(0, "%s: %lld of %lld outside tolerance; first at %lld (%s): got %.7g want %.7g",
			 what, bad, n, first, where, got[first], ref[first]);
	} else {
		where[0] = 0;
		if (worst_i >= 0)
			t_where(lay, worst_i, where, sizeof(where));
		t_report(1, "%s: %lld elements, worst error %.3g (%s)", what, n, worst, where);
	}
	return bad;
}

static int t_bitwise(const void *dx, const void *dy, size_t bytes)
{
	void *hx = malloc(bytes), *hy = malloc(bytes);
	int eq;

	T_CHECK_CUDA(cudaMemcpy(hx, dx, bytes, cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(hy, dy, bytes, cudaMemcpyDeviceToHost));
	eq = memcmp(hx, hy, bytes) == 0;
	free(hx);
	free(hy);
	return eq;
}

static float *t_download_bf16(const void *d, long long n)
{
	uint16_t *h16 = (uint16_t *)malloc(n * 2);
	float *f = (float *)malloc(n * sizeof(float));

	T_CHECK_CUDA(cudaMemcpy(h16, d, n * 2, cudaMemcpyDeviceToHost));
	for (long long i = 0; i < n; i++)
		f[i] = t_bf16(h16[i]);
	free(h16);
	return f;
}

static float *t_download_f32(const void *d, long long n)
{
	float *f = (float *)malloc(n * sizeof(float));

	T_CHECK_CUDA(cudaMemcpy(f, d, n * sizeof(float), cudaMemcpyDeviceToHost));
	return f;
}

static uint16_t *t_download_u16(const void *d, long long n)
{
	uint16_t *h = (uint16_t *)malloc(n * 2);

	T_CHECK_CUDA(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
	return h;
}

/* ---- a problem on the device ---- */

struct t_case {
	int B, Hq, Hkv, Sq, Skv, D, causal;
	long long nq, nkv, nlse;
	void *q, *k, *v, *o;
	float *lse;
	uint16_t *hq, *hk, *hv; /* host copies of the inputs */
	float vmax;
};

enum { T_UNIFORM = 0, T_NORMAL = 1, T_ZERO_Q = 2 };

static void t_case_alloc(struct t_case *c, int B, int Hq, int Hkv, int Sq, int Skv, int D,
			 int causal, int dist, uint32_t seed, int host_copy)
{
	memset(c, 0, sizeof(*c));
	c->B = B;
	c->Hq = Hq;
	c->Hkv = Hkv;
	c->Sq = Sq;
	c->Skv = Skv;
	c->D = D;
	c->causal = causal;
	c->nq = (long long)B * Sq * Hq * D;
	c->nkv = (long long)B * Skv * Hkv * D;
	c->nlse = (long long)B * Hq * Sq;
	T_CHECK_CUDA(cudaMalloc(&c->q, c->nq * 2));
	T_CHECK_CUDA(cudaMalloc(&c->k, c->nkv * 2));
	T_CHECK_CUDA(cudaMalloc(&c->v, c->nkv * 2));
	T_CHECK_CUDA(cudaMalloc(&c->o, c->nq * 2));
	T_CHECK_CUDA(cudaMalloc((void **)&c->lse, c->nlse * 4));
	if (dist == T_NORMAL) {
		mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)c->q, c->nq, seed);
		mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)c->k, c->nkv, seed * 3 + 1);
		mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)c->v, c->nkv, seed * 5 + 2);
	} else {
		mk_fill_bf16<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)c->q, c->nq, seed);
		mk_fill_bf16<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)c->k, c->nkv, seed * 3 + 1);
		mk_fill_bf16<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)c->v, c->nkv, seed * 5 + 2);
	}
	if (dist == T_ZERO_Q)
		T_CHECK_CUDA(cudaMemsetAsync(c->q, 0, c->nq * 2, t_st));
	T_CHECK_CUDA(cudaGetLastError());
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	c->vmax = 1.0f;
	if (host_copy) {
		c->hq = t_download_u16(c->q, c->nq);
		c->hk = t_download_u16(c->k, c->nkv);
		c->hv = t_download_u16(c->v, c->nkv);
		c->vmax = 0;
		for (long long i = 0; i < c->nkv; i++)
			c->vmax = fmaxf(c->vmax, fabsf(t_bf16(c->hv[i])));
	} else if (dist == T_NORMAL) {
		c->vmax = 5.0f;
	}
}

static void t_case_free(struct t_case *c)
{
	cudaFree(c->q);
	cudaFree(c->k);
	cudaFree(c->v);
	cudaFree(c->o);
	cudaFree(c->lse);
	free(c->hq);
	free(c->hk);
	free(c->hv);
}

static void t_case_args(const struct t_case *c, struct mk_attn_args *a)
{
	mk_attn_args_init(a, c->q, c->k, c->v, c->o, c->lse, c->B, c->Hq, c->Hkv, c->Sq, c->Skv,
			  c->D, c->causal);
}

static void t_poison(const struct t_case *c)
{
	T_CHECK_CUDA(cudaMemsetAsync(c->o, 0xFF, c->nq * 2, t_st)); /* bf16 NaN */
	T_CHECK_CUDA(cudaMemsetAsync(c->lse, 0xFF, c->nlse * 4, t_st));
}

static struct t_ref_prob t_prob_of(const struct t_case *c)
{
	struct t_ref_prob p = { c->B,	   c->Hq,  c->Hkv, c->Sq,  c->Skv,
				c->D,	   c->causal, c->Skv - c->Sq, c->Sq, c->Skv,
				c->Sq };

	return p;
}

/* ---- this test's kernels: the engine with bounded waits ---- */

extern "C" __global__ void __launch_bounds__(MK_ATTN_THREADS(128), 1)
	t_attn_d128(const __grid_constant__ struct mk_attn_tmaps maps,
		    const __grid_constant__ struct mk_attn_args args)
{
	extern __shared__ unsigned char t_dyn_attn[];

	mk_attn_role(&args, &maps, blockIdx.x, gridDim.x, t_dyn_attn, 128);
}

extern "C" __global__ void __launch_bounds__(MK_ATTN_THREADS(64), 1)
	t_attn_d64(const __grid_constant__ struct mk_attn_tmaps maps,
		   const __grid_constant__ struct mk_attn_args args)
{
	extern __shared__ unsigned char t_dyn_attn[];

	mk_attn_role(&args, &maps, blockIdx.x, gridDim.x, t_dyn_attn, 64);
}

/* Whether this test's kernels' register splits fit what they hold at launch (index: D 64, D 128);
 * one that does not would wait forever at setmaxnreg.inc, so it is never launched. */
static int t_kernel_ok[2];

/* Launch this test's kernel for a planned role with its maps; its warps' marks start cleared. */
static int t_launch_role(const struct mk_attn_args *a, const struct mk_attn_tmaps *maps, int ctas,
			 cudaStream_t st)
{
	const int grid = ctas > 0 ? ctas : (a->units < t_sms ? a->units : t_sms);

	if (!t_kernel_ok[a->head_dim == 128])
		return -ENOEXEC;
	memset(t_marks_host, 0, T_MARK_BLOCKS * T_MARK_WARPS);
	pthread_mutex_lock(&t_case_lock);
	t_marks_grid = grid;
	t_marks_threads = MK_ATTN_THREADS(a->head_dim);
	pthread_mutex_unlock(&t_case_lock);
	if (a->head_dim == 128)
		t_attn_d128<<<grid, MK_ATTN_THREADS(128), MK_ATTN_SMEM_BYTES(128), st>>>(*maps, *a);
	else
		t_attn_d64<<<grid, MK_ATTN_THREADS(64), MK_ATTN_SMEM_BYTES(64), st>>>(*maps, *a);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

static int t_run_debug(const struct mk_attn_args *in, int ctas)
{
	struct mk_attn_args a = *in;
	struct mk_attn_tmaps maps;
	int rc = mk_attn_plan(&a, MK_ATTN_BM(in->head_dim), NULL);

	if (rc)
		return rc;
	/* the library's choice of static schedule (pairs or longest-first blocks), as mkAttention */
	if (ctas <= 0)
		ctas = mk_attn_schedule_static(&a, t_sms);
	rc = mk_attn_make_tensor_maps(&a, &maps);
	if (rc)
		return rc;
	return t_launch_role(&a, &maps, ctas, t_st);
}

/* Before any launch: each kernel's register split against what it holds at launch (the pool
 * setmaxnreg.inc draws from). This test's kernels directly; the library's through
 * mk_attn_run_hopper(), which refuses (-ENOEXEC) a kernel that does not fit. */
static void t_check_regs(void)
{
	for (int d = 64; d <= 128; d += 64) {
		int regs = 0;
		const int rc = mk_attn_check_kernel(d == 64 ? (const void *)t_attn_d64
							    : (const void *)t_attn_d128,
						    d, &regs);

		t_kernel_ok[d == 128] = rc == 0;
		t_report(rc == 0,
			 "register split D %d (bounded-wait kernel): 128 x %d + %d x %d = %d "
			 "registers after setmaxnreg, %d x %d = %d held at launch%s",
			 d, MK_ATTN_PRODUCER_REGS(d), MK_ATTN_THREADS(d) - 128,
			 MK_ATTN_CONSUMER_REGS(d), MK_ATTN_SPLIT_REGS(d), MK_ATTN_THREADS(d), regs,
			 MK_ATTN_THREADS(d) * regs,
			 rc == -ENOEXEC ? ": setmaxnreg.inc would wait forever, not launched"
			 : rc		? ": attributes unreadable, not launched"
					: "");
	}
}

/* Which kernel a comparison runs. */
enum { K_DEBUG = 0, K_HOPPER = 1, K_PORTABLE = 2 };
static const char *const t_kernel_names[] = { "hopper-debug", "hopper", "portable" };

static int t_run(int kernel, const struct mk_attn_args *a)
{
	static const char *const epi[] = { "", " partial", " merge", " merge-out" };
	int rc;

	t_case("%s B %d Hq %d Hkv %d Sq %d Skv %d D %d %s%s", t_kernel_names[kernel], a->batch,
	       a->heads_q, a->heads_kv, a->sq, a->skv, a->head_dim, a->causal ? "causal" : "full",
	       a->epi >= 0 && a->epi < 4 ? epi[a->epi] : " ?");
	if (kernel == K_DEBUG)
		rc = t_run_debug(a, 0);
	else if (kernel == K_HOPPER)
		rc = mk_attn_run_hopper(a, 0, t_st);
	else
		rc = mk_attn_run_portable(a, t_st);
	if (rc == 0)
		T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	return rc;
}

/* ---- 1. building blocks ---- */

/* The single mbarrier of a building-block kernel: initialised by thread 0, seen by all. */
static __device__ __forceinline__ uint32_t t_bar_setup(uint64_t *bar)
{
	if (threadIdx.x == 0) {
		mk_mbar_init(bar, 1);
		mk_fence_mbar_init();
	}
	__syncthreads();
	return mk_smem_u32(bar);
}

/* Accumulator layout <-> row-major 64 x cols (ld floats a row): element 4j + e of a thread is
 * row 16 warp + lane/4 + 8 (e/2), column 8j + 2 (lane%4) + e%2 (the engine's layout). */
static __device__ __forceinline__ long long t_acc_index(int jb, int e, int ld)
{
	const int lane = threadIdx.x & 31, warp = (threadIdx.x & 127) >> 5;

	return (long long)(warp * 16 + (lane >> 2) + 8 * (e >> 1)) * ld + 8 * jb +
	       2 * (lane & 3) + (e & 1);
}

static __device__ __forceinline__ void t_acc_store(const float *acc, float *out, int ld, int cols)
{
#pragma unroll
	for (int jb = 0; jb < 16; jb++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			if (8 * jb < cols)
				out[t_acc_index(jb, e, ld)] = acc[4 * jb + e];
}

static __device__ __forceinline__ void t_acc_load(float *acc, const float *in, int ld)
{
#pragma unroll
	for (int jb = 0; jb < 16; jb++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			acc[4 * jb + e] = in[t_acc_index(jb, e, ld)];
}

/* mk_attn_load_rows() with the head dim as the compile-time constant it needs. */
static __device__ __forceinline__ void t_load_rows(uint32_t dst, const CUtensorMap *map,
						   uint32_t bar, int rows, int row0, int head,
						   int b, int hd)
{
	if (hd == 128)
		mk_attn_load_rows(dst, map, bar, rows, row0, head, b, 128);
	else
		mk_attn_load_rows(dst, map, bar, rows, row0, head, b, 64);
}

/* One TMA load of a block (Q when is_q, else K) into shared memory; raw bytes out. */
__global__ void t_tma_kernel(const __grid_constant__ struct mk_attn_tmaps maps, int is_q,
			     int rows, int row0, int head, int b, int hd, unsigned char *out)
{
	extern __shared__ unsigned char t_dyn[];
	__shared__ uint64_t bar;
	unsigned char *base = mk_attn_smem_base(t_dyn);
	const uint32_t b32 = t_bar_setup(&bar);

	if (threadIdx.x == 0) {
		mk_mbar_arrive_expect_tx_a(b32, rows * hd * 2);
		t_load_rows(mk_smem_u32(base), is_q ? &maps.q : &maps.k, b32, rows, row0, head, b,
			    hd);
	}
	t_wait(b32, 0, 99);
	for (int i = threadIdx.x; i < rows * hd * 2; i += blockDim.x)
		out[i] = base[i];
}

/* Byte offset of element (r, col) in a block of `rows` rows as TMA writes it: boxes of 64
 * columns, 128-byte rows, 16-byte chunk c of row r at chunk c ^ (r % 8). */
static long long t_swz(int rows, int r, int col)
{
	int box = col / 64, c = (col % 64) / 8, e = col % 8;

	return (long long)box * rows * 128 + (long long)r * 128 + ((c ^ (r & 7)) * 16) + e * 2;
}

static void t_unit_tma(int hd)
{
	struct t_case c;
	struct mk_attn_args a;
	struct mk_attn_tmaps maps;
	unsigned char *dout, *hout;
	const int bm = MK_ATTN_BM(hd);
	int rc;

	t_case_alloc(&c, 2, 3, 3, 2 * bm - 5, 300, hd, 0, T_UNIFORM, 71, 1);
	t_case_args(&c, &a);
	rc = mk_attn_plan(&a, bm, NULL);
	rc = rc ? rc : mk_attn_make_tensor_maps(&a, &maps);
	if (rc) {
		t_report(0, "tma D %d: plan / tensor maps failed (%d)", hd, rc);
		t_case_free(&c);
		return;
	}
	T_CHECK_CUDA(cudaMalloc((void **)&dout, bm * hd * 2));
	hout = (unsigned char *)malloc(bm * hd * 2);
	T_CHECK_CUDA(cudaFuncSetAttribute((const void *)t_tma_kernel,
					  cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
	/* {is_q, rows, row0, head, b}: a K block with the key tail (rows 256..299 of 300, the
	 * rest zero), a Q block straddling the end of the queries, a full K block of head 2 */
	const int cases[3][5] = { { 0, MK_ATTN_BN, 256, 1, 1 },
				  { 1, bm, bm, 2, 0 },
				  { 0, MK_ATTN_BN, 0, 2, 1 } };

	for (int t = 0; t < 3; t++) {
		const int is_q = cases[t][0], rows = cases[t][1], row0 = cases[t][2];
		const int head = cases[t][3], b = cases[t][4];
		const int total = is_q ? c.Sq : c.Skv, heads = is_q ? c.Hq : c.Hkv;
		const uint16_t *src = is_q ? c.hq : c.hk;
		long long bad = 0, first = -1;
		uint16_t got = 0, want = 0;

		t_case("tma D %d %s block rows %d..%d (head %d, batch %d)", hd, is_q ? "Q" : "K",
		       row0, row0 + rows - 1, head, b);
		T_CHECK_CUDA(cudaMemset(dout, 0xAB, bm * hd * 2));
		t_tma_kernel<<<1, 128, 64 * 1024, t_st>>>(maps, is_q, rows, row0, head, b, hd, dout);
		T_CHECK_CUDA(cudaGetLastError());
		T_CHECK_CUDA(cudaStreamSynchronize(t_st));
		T_CHECK_CUDA(cudaMemcpy(hout, dout, rows * hd * 2, cudaMemcpyDeviceToHost));
		for (int r = 0; r < rows; r++)
			for (int col = 0; col < hd; col++) {
				uint16_t w = 0, g;
				int s = row0 + r;

				if (s < total)
					w = src[(((long long)b * total + s) * heads + head) * hd + col];
				memcpy(&g, hout + t_swz(rows, r, col), 2);
				if (g != w) {
					if (first < 0) {
						first = (long long)r * hd + col;
						got = g;
						want = w;
					}
					bad++;
				}
			}
		if (bad)
			t_report(0,
				 "tma D %d %s block rows %d..%d of %d (head %d, batch %d): %lld "
				 "elements wrong, first (row %lld, col %lld) got 0x%04x want 0x%04x",
				 hd, is_q ? "Q" : "K", row0, row0 + rows - 1, total, head, b, bad,
				 first / hd, first % hd, got, want);
		else
			t_report(1,
				 "tma D %d %s block rows %d..%d of %d (head %d, batch %d): every "
				 "element at its swizzled place, zeros past the end",
				 hd, is_q ? "Q" : "K", row0, row0 + rows - 1, total, head, b);
	}
	cudaFree(dout);
	free(hout);
	t_case_free(&c);
}

/* S for the first warpgroup of query block 0 against key block n (one warpgroup, 64-row Q). */
__global__ void t_qk_kernel(const __grid_constant__ struct mk_attn_tmaps maps, int hd, int n,
			    int b, int h, int kvh, float *s_out)
{
	extern __shared__ unsigned char t_dyn[];
	__shared__ uint64_t bar;
	unsigned char *base = mk_attn_smem_base(t_dyn);
	const uint32_t qa = mk_smem_u32(base), ka = qa + 64 * hd * 2, b32 = t_bar_setup(&bar);
	float sc[64];

	if (threadIdx.x == 0) {
		mk_mbar_arrive_expect_tx_a(b32, (64 + MK_ATTN_BN) * hd * 2);
		t_load_rows(qa, &maps.q, b32, 64, 0, h, b, hd);
		t_load_rows(ka, &maps.k, b32, MK_ATTN_BN, n * MK_ATTN_BN, kvh, b, hd);
	}
	t_wait(b32, 0, 98);
	mk_wgmma_fence();
	if (hd == 128)
		mk_attn_qk(sc, qa, 64, ka, 128);
	else
		mk_attn_qk(sc, qa, 64, ka, 64);
	mk_wgmma_commit();
	mk_wgmma_wait(0);
	mk_attn_keep_f(sc, 64);
	t_acc_store(sc, s_out, MK_ATTN_BN, MK_ATTN_BN);
}

static void t_unit_qk(int hd)
{
	struct t_case c;
	struct mk_attn_args a;
	struct mk_attn_tmaps maps;
	float *ds, *hs, *ref;
	const int n = 1, b = 1, h = 3, kvh = 1; /* GQA 4 -> 2 */
	int rc;

	t_case_alloc(&c, 2, 4, 2, 64, 300, hd, 0, T_NORMAL, 5, 1);
	t_case_args(&c, &a);
	rc = mk_attn_plan(&a, 64, NULL);
	rc = rc ? rc : mk_attn_make_tensor_maps(&a, &maps);
	T_CHECK_CUDA(cudaMalloc((void **)&ds, 64 * MK_ATTN_BN * 4));
	hs = (float *)malloc(64 * MK_ATTN_BN * 4);
	ref = (float *)malloc(64 * MK_ATTN_BN * 4);
	T_CHECK_CUDA(cudaFuncSetAttribute((const void *)t_qk_kernel,
					  cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
	T_CHECK_CUDA(cudaMemset(ds, 0xFF, 64 * MK_ATTN_BN * 4));
	t_case("wgmma S = Q K^T tile D %d", hd);
	if (rc == 0)
		t_qk_kernel<<<1, 128, 64 * 1024, t_st>>>(maps, hd, n, b, h, kvh, ds);
	T_CHECK_CUDA(cudaGetLastError());
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	T_CHECK_CUDA(cudaMemcpy(hs, ds, 64 * MK_ATTN_BN * 4, cudaMemcpyDeviceToHost));
	for (int i = 0; i < 64; i++)
		for (int j = 0; j < MK_ATTN_BN; j++) {
			int key = n * MK_ATTN_BN + j;
			double acc = 0;

			for (int d = 0; d < hd; d++)
				acc += (double)t_bf16(c.hq[(((long long)b * c.Sq + i) * c.Hq + h) * hd +
							  d]) *
				       t_bf16(c.hk[(((long long)b * c.Skv + key) * c.Hkv + kvh) * hd +
						   d]);
			ref[i * MK_ATTN_BN + j] = (float)acc;
		}
	struct t_layout lay = { 0, 64, 1, MK_ATTN_BN };
	char what[96];

	snprintf(what, sizeof(what), "wgmma S = Q K^T tile D %d (64 x 128, GQA head %d -> %d)", hd,
		 h, kvh);
	if (rc)
		t_report(0, "%s: plan / tensor maps failed (%d)", what, rc);
	else
		t_cmp(what, hs, ref, 64 * MK_ATTN_BN, 1e-4, 1e-5, &lay);
	cudaFree(ds);
	free(hs);
	free(ref);
	t_case_free(&c);
}

/* O = P V for one warpgroup: P (64 x 128 fp32) given in the accumulator layout, packed to the
 * wgmma A registers by the engine, V block n from TMA. */
__global__ void t_pv_kernel(const __grid_constant__ struct mk_attn_tmaps maps, int hd, int n,
			    int b, int kvh, const float *p_in, float *o_out)
{
	extern __shared__ unsigned char t_dyn[];
	__shared__ uint64_t bar;
	unsigned char *base = mk_attn_smem_base(t_dyn);
	const uint32_t va = mk_smem_u32(base), b32 = t_bar_setup(&bar);
	float sc[64], o[64];
	uint32_t p[32];

	if (threadIdx.x == 0) {
		mk_mbar_arrive_expect_tx_a(b32, MK_ATTN_BN * hd * 2);
		t_load_rows(va, &maps.v, b32, MK_ATTN_BN, n * MK_ATTN_BN, kvh, b, hd);
	}
	t_acc_load(sc, p_in, MK_ATTN_BN);
#pragma unroll
	for (int i = 0; i < 64; i++)
		o[i] = 0.0f;
	mk_attn_pack_p(p, sc);
	t_wait(b32, 0, 97);
	mk_wgmma_fence();
	if (hd == 128)
		mk_attn_pv(o, p, va, 128);
	else
		mk_attn_pv(o, p, va, 64);
	mk_wgmma_commit();
	mk_wgmma_wait(0);
	mk_attn_keep_f(o, 64);
	t_acc_store(o, o_out, hd, hd);
}

static void t_unit_pv(int hd)
{
	struct t_case c;
	struct mk_attn_args a;
	struct mk_attn_tmaps maps;
	float *dp, *dout, *hp, *hout, *ref;
	const int n = 2, b = 0, kvh = 1;
	int rc;

	t_case_alloc(&c, 1, 2, 2, 64, 300, hd, 0, T_UNIFORM, 9, 1);
	t_case_args(&c, &a);
	rc = mk_attn_plan(&a, 64, NULL);
	rc = rc ? rc : mk_attn_make_tensor_maps(&a, &maps);
	hp = (float *)malloc(64 * MK_ATTN_BN * 4);
	hout = (float *)malloc(64 * hd * 4);
	ref = (float *)malloc(64 * hd * 4);
	srand(3);
	for (int i = 0; i < 64 * MK_ATTN_BN; i++)
		hp[i] = (float)(rand() % 1000) / 1000.0f;
	T_CHECK_CUDA(cudaMalloc((void **)&dp, 64 * MK_ATTN_BN * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&dout, 64 * hd * 4));
	T_CHECK_CUDA(cudaMemcpy(dp, hp, 64 * MK_ATTN_BN * 4, cudaMemcpyHostToDevice));
	T_CHECK_CUDA(cudaMemset(dout, 0xFF, 64 * hd * 4));
	T_CHECK_CUDA(cudaFuncSetAttribute((const void *)t_pv_kernel,
					  cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
	t_case("wgmma O = P V tile D %d", hd);
	if (rc == 0)
		t_pv_kernel<<<1, 128, 64 * 1024, t_st>>>(maps, hd, n, b, kvh, dp, dout);
	T_CHECK_CUDA(cudaGetLastError());
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	T_CHECK_CUDA(cudaMemcpy(hout, dout, 64 * hd * 4, cudaMemcpyDeviceToHost));
	for (int i = 0; i < 64; i++)
		for (int d = 0; d < hd; d++) {
			double acc = 0;

			for (int j = 0; j < MK_ATTN_BN; j++) {
				int key = n * MK_ATTN_BN + j;
				/* P goes through bf16; V rows past the end are zero-filled */
				float pb = __bfloat162float(__float2bfloat16_rn(hp[i * MK_ATTN_BN + j]));
				float vv = key < c.Skv ? t_bf16(c.hv[(((long long)b * c.Skv + key) *
									     c.Hkv +
								     kvh) * hd + d])
						       : 0.0f;

				acc += (double)pb * vv;
			}
			ref[i * hd + d] = (float)acc;
		}
	struct t_layout lay = { 0, 64, 1, hd };
	char what[96];

	snprintf(what, sizeof(what),
		 "wgmma O = P V tile D %d (P from registers, V block with key tail)", hd);
	if (rc)
		t_report(0, "%s: plan / tensor maps failed (%d)", what, rc);
	else
		t_cmp(what, hout, ref, 64 * hd, 1e-4, 1e-5, &lay);
	cudaFree(dp);
	cudaFree(dout);
	free(hp);
	free(hout);
	free(ref);
	t_case_free(&c);
}

/* The online softmax over nblk key blocks (first_n, first_n - 1, ...) of one warpgroup whose
 * first row is row0: masks, p, alpha per block, final m and quad-reduced l. */
__global__ void t_softmax_kernel(const struct mk_attn_args a, const float *s_in, int nblk,
				 int first_n, int row0, float *p_out, float *alpha_out,
				 float *m_out, float *l_out)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
	const int r = warp * 16 + (lane >> 2);
	float sc[64], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f }, alpha[2];

	for (int blk = 0; blk < nblk; blk++) {
		const int n = first_n - blk;

		t_acc_load(sc, s_in + (long long)blk * 64 * MK_ATTN_BN, MK_ATTN_BN);
		if (mk_attn_needs_mask(&a.job[0], n, row0))
			mk_attn_mask(sc, &a.job[0], n, row0 + r, t);
		mk_attn_softmax(sc, m, l, a.scale_log2, alpha);
		t_acc_store(sc, p_out + (long long)blk * 64 * MK_ATTN_BN, MK_ATTN_BN, MK_ATTN_BN);
		if (t == 0) {
			alpha_out[blk * 64 + r] = alpha[0];
			alpha_out[blk * 64 + r + 8] = alpha[1];
		}
	}
	for (int i = 0; i < 2; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
	}
	if (t == 0) {
		m_out[r] = m[0];
		m_out[r + 8] = m[1];
		l_out[r] = l[0];
		l_out[r + 8] = l[1];
	}
}

static void t_unit_softmax(void)
{
	/* Causal, diag 0, 200 keys: rows 128..191 against key block 1 (the causal edge and the
	 * key tail 128..199) then block 0 (fully visible); one row (first) sees block 1 only
	 * partly, rows past the tail see no more. Scores large enough to need the max shift. */
	struct mk_attn_args a;
	const int nblk = 2, first_n = 1, row0 = 128;
	const long long ns = (long long)nblk * 64 * MK_ATTN_BN;
	float *hs = (float *)malloc(ns * 4), *hp = (float *)malloc(ns * 4);
	float *rp = (float *)malloc(ns * 4), halpha[2 * 64], ralpha[2 * 64];
	float hm[64], hl[64], rm[64], rl[64];
	float *ds, *dp, *dalpha, *dm, *dl;

	mk_attn_args_init(&a, (void *)16, (void *)16, (void *)16, (void *)16, NULL, 1, 1, 1, 300,
			  200, 128, 1);
	a.q_pos = a.k_pos = 0;
	if (mk_attn_plan(&a, 64, NULL)) {
		t_report(0, "softmax: plan failed");
		return;
	}
	srand(5);
	for (long long i = 0; i < ns; i++)
		hs[i] = (float)(rand() % 4000 - 2000) / 40.0f; /* |s| <= 50: scaled up to ~4.4 */
	T_CHECK_CUDA(cudaMalloc((void **)&ds, ns * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&dp, ns * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&dalpha, 2 * 64 * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&dm, 64 * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&dl, 64 * 4));
	T_CHECK_CUDA(cudaMemcpy(ds, hs, ns * 4, cudaMemcpyHostToDevice));
	t_case("online softmax, two masked blocks");
	t_softmax_kernel<<<1, 128, 0, t_st>>>(a, ds, nblk, first_n, row0, dp, dalpha, dm, dl);
	T_CHECK_CUDA(cudaGetLastError());
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	T_CHECK_CUDA(cudaMemcpy(hp, dp, ns * 4, cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(halpha, dalpha, sizeof(halpha), cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(hm, dm, sizeof(hm), cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(hl, dl, sizeof(hl), cudaMemcpyDeviceToHost));
	/* the same recurrence in double */
	for (int r = 0; r < 64; r++) {
		double m = -INFINITY, l = 0;

		for (int blk = 0; blk < nblk; blk++) {
			int n = first_n - blk;
			double mx = m, base, alpha;

			for (int j = 0; j < MK_ATTN_BN; j++) {
				float s = hs[((long long)blk * 64 + r) * MK_ATTN_BN + j];

				if (mk_attn_visible(&a.job[0], row0 + r, n * MK_ATTN_BN + j) && s > mx)
					mx = s;
			}
			base = mx == -INFINITY ? 0 : mx;
			alpha = mx == -INFINITY ? 1 : exp2((m - mx) * a.scale_log2);
			l *= alpha;
			for (int j = 0; j < MK_ATTN_BN; j++) {
				long long x = ((long long)blk * 64 + r) * MK_ATTN_BN + j;
				double p = mk_attn_visible(&a.job[0], row0 + r, n * MK_ATTN_BN + j)
						   ? exp2((hs[x] - base) * a.scale_log2)
						   : 0;

				rp[x] = (float)p;
				l += p;
			}
			ralpha[blk * 64 + r] = (float)alpha;
			m = mx;
		}
		rm[r] = (float)m;
		rl[r] = (float)l;
	}
	struct t_layout lp = { 0, 64 * nblk, 1, MK_ATTN_BN }, lr = { 0, 64 * nblk, 1, 1 };

	t_cmp("online softmax: p of two masked blocks", hp, rp, ns, 1e-7, 2e-5, &lp);
	t_cmp("online softmax: alpha per block and row", halpha, ralpha, 2 * 64, 1e-7, 2e-5, &lr);
	t_cmp("online softmax: row max m (exact)", hm, rm, 64, 0, 0, &lr);
	t_cmp("online softmax: row sum l (quad-reduced)", hl, rl, 64, 1e-6, 2e-5, &lr);
	cudaFree(ds);
	cudaFree(dp);
	cudaFree(dalpha);
	cudaFree(dm);
	cudaFree(dl);
	free(hs);
	free(hp);
	free(rp);
}

/* ---- 2. whole kernels against the CPU ---- */

static void t_check_outputs(const char *what, const struct t_case *c, const float *ro,
			    const float *rl, double oscale)
{
	float *go = t_download_bf16(c->o, c->nq), *gl = t_download_f32(c->lse, c->nlse);
	struct t_layout lo = { 0, c->Sq, c->Hq, c->D }, ll = { 1, c->Sq, c->Hq, 1 };
	char w[256];

	snprintf(w, sizeof(w), "%s O", what);
	t_cmp(w, go, ro, c->nq, 4e-3 * c->vmax * oscale, 1.0 / 128, &lo);
	snprintf(w, sizeof(w), "%s LSE", what);
	t_cmp(w, gl, rl, c->nlse, 1e-4 * oscale, 1e-4 * oscale, &ll);
	free(go);
	free(gl);
}

static void t_full_small(void)
{
	static const int shapes[][5] = {
		/* B, Hq, Hkv, Sq, Skv */
		{ 1, 1, 1, 1, 1 },     { 1, 2, 1, 63, 63 },    { 2, 2, 2, 127, 129 },
		{ 1, 4, 2, 129, 127 }, { 1, 1, 1, 128, 128 },  { 1, 3, 3, 193, 385 },
		{ 1, 2, 2, 1000, 1000 }, { 2, 4, 1, 300, 1000 }, { 1, 2, 2, 1000, 300 },
		{ 1, 2, 1, 1, 777 },   { 1, 1, 1, 640, 17 },
	};
	const size_t nshapes = t_quick ? 5 : sizeof(shapes) / sizeof(shapes[0]);

	for (size_t s = 0; s < nshapes; s++)
		for (int d = 64; d <= 128; d += 64)
			for (int causal = 0; causal < 2; causal++) {
				struct t_case c;
				struct mk_attn_args a;
				struct t_ref_prob p;
				float *ro, *rl;
				void *first_o = NULL;
				char what[160];

				t_case_alloc(&c, shapes[s][0], shapes[s][1], shapes[s][2],
					     shapes[s][3], shapes[s][4], d, causal,
					     (s & 1) ? T_NORMAL : T_UNIFORM, (uint32_t)(s * 31 + d),
					     1);
				p = t_prob_of(&c);
				ro = (float *)malloc(c.nq * 4);
				rl = (float *)malloc(c.nlse * 4);
				t_ref_attention(&p, c.hq, c.hk, c.hv, ro, rl, t_threads);
				t_case_args(&c, &a);
				for (int k = t_hopper ? K_DEBUG : K_PORTABLE; k <= K_PORTABLE; k++) {
					int rc;

					t_poison(&c);
					rc = t_run(k, &a);
					snprintf(what, sizeof(what),
						 "%-12s B %d Hq %d Hkv %d Sq %4d Skv %4d D %3d %s",
						 t_kernel_names[k], c.B, c.Hq, c.Hkv, c.Sq, c.Skv, d,
						 causal ? "causal" : "full  ");
					if (rc) {
						t_report(0, "%s: launch failed (%d)", what, rc);
						continue;
					}
					t_check_outputs(what, &c, ro, rl, 1.0);
					if (k == K_DEBUG) {
						T_CHECK_CUDA(cudaMalloc(&first_o, c.nq * 2));
						T_CHECK_CUDA(cudaMemcpy(first_o, c.o, c.nq * 2,
									cudaMemcpyDeviceToDevice));
					} else if (k == K_HOPPER) {
						t_report(t_bitwise(first_o, c.o, c.nq * 2),
							 "%s: library kernel bitwise equal to the "
							 "bounded-wait copy",
							 what);
					}
				}
				cudaFree(first_o);
				free(ro);
				free(rl);
				t_case_free(&c);
			}
}

/* ---- 3. the uniform probe ---- */

static void t_probe(void)
{
	static const int shapes[][6] = {
		/* B, Hq, Hkv, Sq, Skv, causal */
		{ 2, 4, 2, 4096, 4096, 1 }, { 1, 2, 1, 1000, 3000, 1 }, { 1, 2, 2, 3000, 1000, 1 },
		{ 1, 1, 1, 8191, 8191, 1 }, { 2, 2, 2, 777, 5000, 0 },	{ 1, 3, 1, 129, 65, 1 },
	};
	const size_t nshapes = t_quick ? 2 : sizeof(shapes) / sizeof(shapes[0]);

	for (size_t s = 0; s < nshapes; s++)
		for (int d = 64; d <= 128; d += 64) {
			struct t_case c;
			struct mk_attn_args a;
			struct t_ref_prob p;
			float *ro, *rl;
			char what[160];

			t_case_alloc(&c, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
				     shapes[s][4], d, shapes[s][5], T_ZERO_Q, (uint32_t)(s + 100), 1);
			p = t_prob_of(&c);
			ro = (float *)malloc(c.nq * 4);
			rl = (float *)malloc(c.nlse * 4);
			t_ref_uniform(&p, c.hv, ro, rl);
			t_case_args(&c, &a);
			for (int k = t_hopper ? K_DEBUG : K_PORTABLE; k <= K_PORTABLE; k++) {
				float *go, *gl;
				struct t_layout lo = { 0, c.Sq, c.Hq, c.D }, ll = { 1, c.Sq, c.Hq, 1 };

				t_poison(&c);
				if (t_run(k, &a)) {
					t_report(0, "probe %s: launch failed", t_kernel_names[k]);
					continue;
				}
				go = t_download_bf16(c.o, c.nq);
				gl = t_download_f32(c.lse, c.nlse);
				snprintf(what, sizeof(what),
					 "probe q=0 %-12s B %d Hq %d Hkv %d Sq %d Skv %d D %d %s: LSE = "
					 "ln(visible keys)",
					 t_kernel_names[k], c.B, c.Hq, c.Hkv, c.Sq, c.Skv, d,
					 c.causal ? "causal" : "full");
				t_cmp(what, gl, rl, c.nlse, 1e-6, 1e-6, &ll);
				snprintf(what, sizeof(what),
					 "probe q=0 %-12s B %d Hq %d Sq %d Skv %d D %d: O = mean of "
					 "visible V",
					 t_kernel_names[k], c.B, c.Hq, c.Sq, c.Skv, d);
				t_cmp(what, go, ro, c.nq, 1e-4, 1.0 / 128, &lo);
				free(go);
				free(gl);
			}
			free(ro);
			free(rl);
			t_case_free(&c);
		}
}

/* ---- 4. the ring's epilogue modes ---- */

/*
 * Keys [0, Skv) in three calls, [0, s1) partial, [s1, s2) merge, [s2, Skv) merge-out, each with
 * its key position; queries the sub-range [q0, q1) of a larger buffer (own batch stride and
 * lse row stride). The result must match the reference of the whole problem on those rows.
 */
static void t_modes(void)
{
	const int B = 2, Hq = 4, Hkv = 2, Sq = 700, Skv = 1500, s1 = 300, s2 = 1100;
	const int q0 = 100, q1 = 600;

	for (int d = 64; d <= 128; d += 64)
		for (int causal = 0; causal < 2; causal++) {
			struct t_case c;
			struct t_ref_prob p;
			float *ro, *rl, *acc;

			t_case_alloc(&c, B, Hq, Hkv, Sq, Skv, d, causal, T_NORMAL, 77 + d + causal, 1);
			p = t_prob_of(&c);
			ro = (float *)malloc(c.nq * 4);
			rl = (float *)malloc(c.nlse * 4);
			t_ref_attention(&p, c.hq, c.hk, c.hv, ro, rl, t_threads);
			T_CHECK_CUDA(cudaMalloc((void **)&acc, c.nq * 4));
			for (int k = t_hopper ? K_DEBUG : K_PORTABLE; k <= K_PORTABLE; k++) {
				const int lo[3] = { 0, s1, s2 }, hi[3] = { s1, s2, Skv };
				const int modes[3] = { MK_ATTN_EPI_PARTIAL, MK_ATTN_EPI_MERGE,
						       MK_ATTN_EPI_MERGE_OUT };
				const long long qoff = (long long)q0 * Hq * d;
				int rc = 0;

				t_poison(&c);
				T_CHECK_CUDA(cudaMemsetAsync(acc, 0xFF, c.nq * 4, t_st));
				for (int part = 0; part < 3 && rc == 0; part++) {
					struct mk_attn_args a;
					const long long koff = (long long)lo[part] * Hkv * d;

					t_case_args(&c, &a);
					a.q = (const char *)c.q + qoff * 2;
					a.o = (char *)c.o + qoff * 2;
					a.acc = acc + qoff;
					a.lse = c.lse + q0;
					a.sq = q1 - q0;
					a.q_batch_rows = Sq;
					a.lse_ld = Sq;
					a.k = (const char *)c.k + koff * 2;
					a.v = (const char *)c.v + koff * 2;
					a.skv = hi[part] - lo[part];
					a.kv_batch_rows = Skv;
					a.q_pos = (long long)(Skv - Sq) + q0;
					a.k_pos = lo[part];
					a.epi = modes[part];
					rc = t_run(k, &a);
				}
				char what[160];

				snprintf(what, sizeof(what),
					 "modes %-12s partial+merge+merge-out, rows %d..%d, D %d %s",
					 t_kernel_names[k], q0, q1 - 1, d, causal ? "causal" : "full");
				if (rc) {
					t_report(0, "%s: launch failed (%d)", what, rc);
					continue;
				}
				/* compare only rows [q0, q1); others must be untouched (NaN) */
				float *go = t_download_bf16(c.o, c.nq), *gl = t_download_f32(c.lse, c.nlse);
				long long untouched = 0;

				for (int b = 0; b < B; b++)
					for (int i = 0; i < Sq; i++) {
						int in = i >= q0 && i < q1;

						for (int h = 0; h < Hq; h++) {
							long long lx = ((long long)b * Hq + h) * Sq + i;

							if (!in) {
								untouched += isnan(gl[lx]);
								gl[lx] = rl[lx];
							}
							for (int e = 0; e < d; e++) {
								long long ox =
									(((long long)b * Sq + i) * Hq +
									 h) * d + e;

								if (!in) {
									untouched += isnan(go[ox]);
									go[ox] = ro[ox];
								}
							}
						}
					}
				struct t_layout lo_ = { 0, Sq, Hq, d }, ll = { 1, Sq, Hq, 1 };
				char w[256];

				snprintf(w, sizeof(w), "%s O", what);
				t_cmp(w, go, ro, c.nq, 4e-3 * c.vmax, 1.0 / 128, &lo_);
				snprintf(w, sizeof(w), "%s LSE", what);
				t_cmp(w, gl, rl, c.nlse, 1e-4, 1e-4, &ll);
				t_report(untouched == (long long)B * (Sq - (q1 - q0)) * Hq * (d + 1),
					 "%s: rows outside the range untouched (%lld NaN kept)", what,
					 untouched);
				free(go);
				free(gl);
			}
			cudaFree(acc);
			free(ro);
			free(rl);
			t_case_free(&c);
		}
}

/* ---- 5. large shapes: Hopper against portable ---- */

static void t_large(void)
{
	static const int shapes[][5] = {
		{ 2, 16, 16, 4096, 4096 }, { 1, 16, 4, 3000, 5000 }, { 2, 8, 8, 2048, 2048 },
		{ 1, 8, 1, 8192, 8192 },
	};

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int d = 64; d <= 128; d += 64)
			for (int causal = 0; causal < 2; causal++) {
				struct t_case c;
				struct mk_attn_args a;
				float *po, *pl, *ho, *hl;
				char what[160];

				t_case_alloc(&c, shapes[s][0], shapes[s][1], shapes[s][2],
					     shapes[s][3], shapes[s][4], d, causal, T_NORMAL,
					     (uint32_t)(s * 7 + d + causal), 0);
				t_case_args(&c, &a);
				t_poison(&c);
				if (t_run(K_PORTABLE, &a)) {
					t_report(0, "large: portable launch failed");
					t_case_free(&c);
					continue;
				}
				po = t_download_bf16(c.o, c.nq);
				pl = t_download_f32(c.lse, c.nlse);
				t_poison(&c);
				if (t_run(K_DEBUG, &a)) {
					t_report(0, "large: hopper launch failed");
					free(po);
					free(pl);
					t_case_free(&c);
					continue;
				}
				ho = t_download_bf16(c.o, c.nq);
				hl = t_download_f32(c.lse, c.nlse);
				struct t_layout lo = { 0, c.Sq, c.Hq, d }, ll = { 1, c.Sq, c.Hq, 1 };

				snprintf(what, sizeof(what),
					 "hopper vs portable B %d Hq %d Hkv %d Sq %d Skv %d D %d %s O",
					 c.B, c.Hq, c.Hkv, c.Sq, c.Skv, d, causal ? "causal" : "full");
				t_cmp(what, ho, po, c.nq, 8e-3 * c.vmax, 1.0 / 64, &lo);
				snprintf(what, sizeof(what),
					 "hopper vs portable B %d Hq %d Hkv %d Sq %d Skv %d D %d %s LSE",
					 c.B, c.Hq, c.Hkv, c.Sq, c.Skv, d, causal ? "causal" : "full");
				t_cmp(what, hl, pl, c.nlse, 2e-4, 5e-5, &ll);
				free(po);
				free(pl);
				free(ho);
				free(hl);
				t_case_free(&c);
			}
}

/* ---- 6. schedule variants ---- */

static void t_schedule(void)
{
	struct t_case c;
	struct mk_attn_args a;
	void *ref;
	unsigned int *counter;
	const int ctas[] = { 1, 7, 66, 131 };

	for (int causal = 0; causal < 2; causal++) {
		t_case_alloc(&c, 2, 4, 2, 1500, 1500, 128, causal, T_NORMAL, 900 + causal, 0);
		t_case_args(&c, &a);
		T_CHECK_CUDA(cudaMalloc(&ref, c.nq * 2));
		T_CHECK_CUDA(cudaMalloc((void **)&counter, 4));
		if (t_run(K_HOPPER, &a) == 0)
			T_CHECK_CUDA(cudaMemcpy(ref, c.o, c.nq * 2, cudaMemcpyDeviceToDevice));
		for (size_t i = 0; i < sizeof(ctas) / sizeof(ctas[0]); i++)
			for (int dyn = 0; dyn < 2; dyn++) {
				struct mk_attn_args v = a;
				int rc;

				v.counter = dyn ? counter : NULL;
				T_CHECK_CUDA(cudaMemsetAsync(counter, 0, 4, t_st));
				t_poison(&c);
				t_case("hopper schedule %s, %d CTAs, %s units",
				       causal ? "causal" : "full", ctas[i],
				       dyn ? "dynamic" : "static");
				rc = mk_attn_run_hopper(&v, ctas[i], t_st);
				T_CHECK_CUDA(cudaStreamSynchronize(t_st));
				t_report(rc == 0 && t_bitwise(ref, c.o, c.nq * 2),
					 "schedule %s, %3d CTAs, %s units: bitwise equal to the "
					 "default",
					 causal ? "causal" : "full  ", ctas[i],
					 dyn ? "dynamic" : "static ");
			}
		cudaFree(ref);
		cudaFree(counter);
		t_case_free(&c);
	}
}

/* ---- 6b. several jobs in one launch (what a ring step list needs) ---- */

/* Another agent producing K/V while the attention kernel runs: wait ~2 ms, copy the data in,
 * then release the gate. A kernel that did not wait for the gate reads the poison. */
__global__ void t_late_producer(void *dst_k, void *dst_v, const void *src_k, const void *src_v,
				size_t bytes, unsigned int *gate)
{
	const long long t0 = clock64();

	while (clock64() - t0 < 4000000ll)
		;
	for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
		((uint4 *)dst_k)[i] = ((const uint4 *)src_k)[i];
		((uint4 *)dst_v)[i] = ((const uint4 *)src_v)[i];
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence_system();
		asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(gate), "r"(1u) : "memory");
	}
}

/*
 * Three jobs as a ring step list would chain them, B 2, Hq 4, Hkv 2, S 1000:
 *   0: q against (K1, V1), causal, the role's maps, every row fresh;
 *   1: q against keys [0, 700) of (K2, V2) through job maps, gated, rows [0, 500) final;
 *   2: rows [500, 1000) against keys [700, 1500) of (K2, V2), gated, final.
 * One launch with a done counter, K2/V2 written by a concurrent kernel that then opens the
 * gate; compared bitwise with the same three jobs as single-job launches one after another, and
 * with the portable kernel's (within tolerance).
 */
static void t_jobs(int d)
{
	const int B = 2, Hq = 4, Hkv = 2, S = 1000, S2 = 1500;
	const size_t nq = (size_t)B * S * Hq * d, nk = (size_t)B * S * Hkv * d;
	const size_t nk2 = (size_t)B * S2 * Hkv * d;
	void *q, *k1, *v1, *k2, *v2, *k2src, *v2src, *o_ref, *o_fused;
	float *acc, *lse_ref, *lse_fused;
	unsigned int *words; /* done, gate */
	int *err_host = NULL, *err_dev = NULL;
	CUtensorMap *maps2_d, maps2_h[2];
	struct mk_attn_args a;
	struct mk_attn_tmaps maps;
	cudaStream_t side;
	int rc = 0;

	T_CHECK_CUDA(cudaMalloc(&q, nq * 2));
	T_CHECK_CUDA(cudaMalloc(&k1, nk * 2));
	T_CHECK_CUDA(cudaMalloc(&v1, nk * 2));
	T_CHECK_CUDA(cudaMalloc(&k2, nk2 * 2));
	T_CHECK_CUDA(cudaMalloc(&v2, nk2 * 2));
	T_CHECK_CUDA(cudaMalloc(&k2src, nk2 * 2));
	T_CHECK_CUDA(cudaMalloc(&v2src, nk2 * 2));
	T_CHECK_CUDA(cudaMalloc(&o_ref, nq * 2));
	T_CHECK_CUDA(cudaMalloc(&o_fused, nq * 2));
	T_CHECK_CUDA(cudaMalloc((void **)&acc, nq * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&lse_ref, (size_t)B * Hq * S * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&lse_fused, (size_t)B * Hq * S * 4));
	T_CHECK_CUDA(cudaMalloc((void **)&words, 2 * sizeof(unsigned int)));
	T_CHECK_CUDA(cudaMalloc((void **)&maps2_d, sizeof(maps2_h)));
	T_CHECK_CUDA(cudaHostAlloc((void **)&err_host, sizeof(int), cudaHostAllocMapped));
	T_CHECK_CUDA(cudaHostGetDevicePointer((void **)&err_dev, err_host, 0));
	T_CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
	mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)q, nq, 501 + d);
	mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)k1, nk, 502 + d);
	mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)v1, nk, 503 + d);
	mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)k2src, nk2, 504 + d);
	mk_fill_bf16_normal<<<256, 256, 0, t_st>>>((__nv_bfloat16 *)v2src, nk2, 505 + d);
	T_CHECK_CUDA(cudaGetLastError());

	/* the job list, and the same jobs as single-job calls */
	struct mk_attn_job jobs[3];

	memset(jobs, 0, sizeof(jobs));
	jobs[0].sq = S;
	jobs[0].skv = S;
	jobs[0].causal = 1;
	jobs[0].fresh_hi = S;
	jobs[1].sq = S;
	jobs[1].skv = 700;
	jobs[1].final_hi = 500;
	jobs[2].q_row0 = 500;
	jobs[2].sq = 500;
	jobs[2].kv_row0 = 700;
	jobs[2].skv = S2 - 700;
	jobs[2].final_hi = 500;
	for (int kind = K_HOPPER; kind <= K_PORTABLE; kind++) {
		void *out = kind == K_HOPPER ? o_ref : o_fused; /* portable: scratch */
		float *lout = kind == K_HOPPER ? lse_ref : lse_fused;

		T_CHECK_CUDA(cudaMemcpy(k2, k2src, nk2 * 2, cudaMemcpyDeviceToDevice));
		T_CHECK_CUDA(cudaMemcpy(v2, v2src, nk2 * 2, cudaMemcpyDeviceToDevice));
		T_CHECK_CUDA(cudaMemset(out, 0xFF, nq * 2));
		for (int jn = 0; jn < 3 && rc == 0; jn++) {
			mk_attn_args_init(&a, q, jn ? k2 : k1, jn ? v2 : v1, out, lout, B, Hq, Hkv, S,
					  jn ? S2 : S, d, 0);
			a.acc = acc;
			a.njobs = 1;
			a.job[0] = jobs[jn];
			t_case("jobs D %d: %s, job %d as a single-job launch", d,
			       t_kernel_names[kind], jn);
			rc = kind == K_HOPPER ? mk_attn_run_hopper(&a, 0, t_st)
					      : mk_attn_run_portable(&a, t_st);
		}
		T_CHECK_CUDA(cudaStreamSynchronize(t_st));
		if (kind == K_PORTABLE && rc == 0) {
			float *gh = t_download_bf16(o_ref, nq), *gp = t_download_bf16(o_fused, nq);
			float *lh = t_download_f32(lse_ref, (size_t)B * Hq * S);
			float *lp = t_download_f32(lse_fused, (size_t)B * Hq * S);
			struct t_layout lo = { 0, S, Hq, d }, ll = { 1, S, Hq, 1 };
			char w[128];

			snprintf(w, sizeof(w), "jobs D %d: single-job chain, hopper vs portable O", d);
			t_cmp(w, gh, gp, nq, 8e-3 * 5, 1.0 / 64, &lo);
			snprintf(w, sizeof(w), "jobs D %d: single-job chain, hopper vs portable LSE", d);
			t_cmp(w, lh, lp, (long long)B * Hq * S, 2e-4, 5e-5, &ll);
			free(gh);
			free(gp);
			free(lh);
			free(lp);
		}
	}
	if (rc) {
		t_report(0, "jobs D %d: single-job chain failed (%d)", d, rc);
		goto undo;
	}

	/* one launch: poisoned K2/V2 until the late producer writes them and opens the gate */
	T_CHECK_CUDA(cudaMemset(k2, 0xFF, nk2 * 2));
	T_CHECK_CUDA(cudaMemset(v2, 0xFF, nk2 * 2));
	T_CHECK_CUDA(cudaMemset(o_fused, 0xFF, nq * 2));
	T_CHECK_CUDA(cudaMemset(lse_fused, 0xFF, (size_t)B * Hq * S * 4));
	T_CHECK_CUDA(cudaMemset(acc, 0xFF, nq * 4));
	T_CHECK_CUDA(cudaMemset(words, 0, 2 * sizeof(unsigned int)));
	*err_host = 0;
	mk_attn_args_init(&a, q, k1, v1, o_fused, lse_fused, B, Hq, Hkv, S, S, d, 0);
	a.acc = acc;
	a.njobs = 3;
	memcpy(a.job, jobs, sizeof(jobs));
	a.job[1].kv_maps = maps2_d;
	a.job[2].kv_maps = maps2_d;
	a.job[1].gate = a.job[2].gate = &words[1];
	a.job[1].gate_value = a.job[2].gate_value = 1;
	a.done = &words[0];
	a.error = err_dev;
	a.timeout_ns = 5000000000ull;
	rc = mk_attn_plan(&a, MK_ATTN_BM(d), NULL);
	rc = rc ? rc : mk_attn_encode_map(&maps.q, q, d, Hq, S, S, B, MK_ATTN_BM(d));
	rc = rc ? rc : mk_attn_encode_map(&maps.k, k1, d, Hkv, S, S, B, MK_ATTN_BN);
	rc = rc ? rc : mk_attn_encode_map(&maps.v, v1, d, Hkv, S, S, B, MK_ATTN_BN);
	rc = rc ? rc : mk_attn_encode_map(&maps2_h[0], k2, d, Hkv, S2, S2, B, MK_ATTN_BN);
	rc = rc ? rc : mk_attn_encode_map(&maps2_h[1], v2, d, Hkv, S2, S2, B, MK_ATTN_BN);
	if (rc) {
		t_report(0, "jobs D %d: plan / maps failed (%d)", d, rc);
		goto undo;
	}
	T_CHECK_CUDA(cudaMemcpy(maps2_d, maps2_h, sizeof(maps2_h), cudaMemcpyHostToDevice));
	T_CHECK_CUDA(cudaDeviceSynchronize());
	t_case("jobs D %d: hopper-debug, 3 jobs in one launch, gated source written meanwhile", d);
	t_late_producer<<<1, 256, 0, side>>>(k2, v2, k2src, v2src, nk2 * 2, &words[1]);
	T_CHECK_CUDA(cudaGetLastError());
	rc = t_launch_role(&a, &maps, t_sms - 2, t_st); /* room for the producer's SM */
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	T_CHECK_CUDA(cudaStreamSynchronize(side));
	{
		unsigned int h_words[2];

		T_CHECK_CUDA(cudaMemcpy(h_words, words, sizeof(h_words), cudaMemcpyDeviceToHost));
		t_report(rc == 0 && *err_host == 0 &&
				 h_words[0] == (unsigned int)a.items * MK_ATTN_NWG(d) &&
				 t_bitwise(o_ref, o_fused, nq * 2) &&
				 t_bitwise(lse_ref, lse_fused, (size_t)B * Hq * S * 4),
			 "jobs D %d: 3 jobs in one launch (gated sources written meanwhile, merge "
			 "order by counter) bitwise equal to 3 single-job launches (error %d, done "
			 "%u of %u)",
			 d, *err_host, h_words[0], (unsigned int)a.items * MK_ATTN_NWG(d));
	}
undo:
	cudaStreamDestroy(side);
	cudaFreeHost(err_host);
	cudaFree(q);
	cudaFree(k1);
	cudaFree(v1);
	cudaFree(k2);
	cudaFree(v2);
	cudaFree(k2src);
	cudaFree(v2src);
	cudaFree(o_ref);
	cudaFree(o_fused);
	cudaFree(acc);
	cudaFree(lse_ref);
	cudaFree(lse_fused);
	cudaFree(words);
	cudaFree(maps2_d);
}

/* ---- 7. mkAttention ---- */

static void t_api(void)
{
	struct t_case c;
	struct mk_attn_args a;
	void *ref;
	float *ref_lse;
	ncclResult_t r;
	cudaGraph_t graph;
	cudaGraphExec_t exec;

	t_case_alloc(&c, 2, 8, 2, 999, 1234, 128, 1, T_NORMAL, 4321, 0);
	t_case_args(&c, &a);
	T_CHECK_CUDA(cudaMalloc(&ref, c.nq * 2));
	T_CHECK_CUDA(cudaMalloc((void **)&ref_lse, c.nlse * 4));
	/* what the path mkAttention should take produces */
	int want = (t_hopper && !t_expect_portable) ? K_HOPPER : K_PORTABLE;

	t_poison(&c);
	if (t_run(want, &a))
		t_report(0, "api: reference launch failed");
	T_CHECK_CUDA(cudaMemcpy(ref, c.o, c.nq * 2, cudaMemcpyDeviceToDevice));
	T_CHECK_CUDA(cudaMemcpy(ref_lse, c.lse, c.nlse * 4, cudaMemcpyDeviceToDevice));
	t_poison(&c);
	t_case("mkAttention B %d Hq %d Hkv %d Sq %d Skv %d D %d causal", c.B, c.Hq, c.Hkv, c.Sq,
	       c.Skv, c.D);
	r = mkAttention(c.q, c.k, c.v, c.o, c.lse, c.B, c.Hq, c.Hkv, c.Sq, c.Skv, c.D, 1, t_st);
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	t_report(r == ncclSuccess && t_bitwise(ref, c.o, c.nq * 2) &&
			 t_bitwise(ref_lse, c.lse, c.nlse * 4),
		 "mkAttention took the %s path (bitwise equal to a direct %s run)",
		 t_kernel_names[want], t_kernel_names[want]);

	/* lse may be NULL */
	t_poison(&c);
	t_case("mkAttention with lse NULL");
	r = mkAttention(c.q, c.k, c.v, c.o, NULL, c.B, c.Hq, c.Hkv, c.Sq, c.Skv, c.D, 1, t_st);
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	t_report(r == ncclSuccess && t_bitwise(ref, c.o, c.nq * 2), "mkAttention with lse NULL");

	t_report(mkAttention(c.q, c.k, c.v, c.o, c.lse, c.B, c.Hq, 3, c.Sq, c.Skv, c.D, 1, t_st) ==
			 ncclInvalidArgument,
		 "mkAttention Hq %% Hkv != 0 -> ncclInvalidArgument");
	t_report(mkAttention(c.q, c.k, c.v, c.o, c.lse, c.B, c.Hq, c.Hkv, c.Sq, c.Skv, 80, 1,
			     t_st) == ncclInvalidArgument,
		 "mkAttention D 80 -> ncclInvalidArgument");

	/* CUDA-graph capture and replay */
	t_case("mkAttention captured in a CUDA graph, replayed twice");
	t_poison(&c);
	T_CHECK_CUDA(cudaStreamSynchronize(t_st));
	T_CHECK_CUDA(cudaStreamBeginCapture(t_st, cudaStreamCaptureModeThreadLocal));
	r = mkAttention(c.q, c.k, c.v, c.o, c.lse, c.B, c.Hq, c.Hkv, c.Sq, c.Skv, c.D, 1, t_st);
	T_CHECK_CUDA(cudaStreamEndCapture(t_st, &graph));
	T_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
	int ok = r == ncclSuccess;

	for (int i = 0; i < 2; i++) {
		t_poison(&c);
		T_CHECK_CUDA(cudaGraphLaunch(exec, t_st));
		T_CHECK_CUDA(cudaStreamSynchronize(t_st));
		ok &= t_bitwise(ref, c.o, c.nq * 2) && t_bitwise(ref_lse, c.lse, c.nlse * 4);
	}
	t_report(ok, "mkAttention captured in a CUDA graph, replayed twice: bitwise equal");
	cudaGraphExecDestroy(exec);
	cudaGraphDestroy(graph);
	cudaFree(ref);
	cudaFree(ref_lse);
	t_case_free(&c);
}

int main(int argc, char **argv)
{
	int ndev = 0, major = 0, minor = 0;
	cudaDeviceProp prop;
	pthread_t wd;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			t_quick = 1;
		else if (!strcmp(argv[i], "--expect-portable"))
			t_expect_portable = 1;
		else if (!strcmp(argv[i], "--sanitize"))
			t_sanitize = 1;
	}
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	if (t_sanitize)
		t_case_seconds = 30 * T_CASE_SECONDS;
	t_case("device setup");
	pthread_create(&wd, NULL, t_watchdog, NULL);
	T_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
	T_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
	T_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
	t_sms = prop.multiProcessorCount;
	t_hopper = mk_attn_device_ok();
	t_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	printf("# %s, compute capability %d.%d, %d SMs; Hopper kernel %s; %d CPU threads for the "
	       "reference%s\n",
	       prop.name, major, minor, t_sms, t_hopper ? "runs" : "not supported here", t_threads,
	       t_expect_portable ? "; expecting the portable path" : "");
	T_CHECK_CUDA(cudaStreamCreate(&t_st));
	T_CHECK_CUDA(cudaHostAlloc((void **)&t_hang_host, sizeof(*t_hang_host), cudaHostAllocMapped));
	memset(t_hang_host, 0, sizeof(*t_hang_host));
	T_CHECK_CUDA(cudaHostAlloc((void **)&t_marks_host, T_MARK_BLOCKS * T_MARK_WARPS,
				   cudaHostAllocMapped));
	memset(t_marks_host, 0, T_MARK_BLOCKS * T_MARK_WARPS);
	{
		struct t_hang *dev = NULL;
		unsigned char *marks = NULL;

		T_CHECK_CUDA(cudaHostGetDevicePointer((void **)&dev, t_hang_host, 0));
		T_CHECK_CUDA(cudaMemcpyToSymbol(t_hang_rec, &dev, sizeof(dev)));
		T_CHECK_CUDA(cudaHostGetDevicePointer((void **)&marks, t_marks_host, 0));
		T_CHECK_CUDA(cudaMemcpyToSymbol(t_marks, &marks, sizeof(marks)));
		if (t_sanitize) {
			unsigned long long ns = 64000000000ull;

			T_CHECK_CUDA(cudaMemcpyToSymbol(t_wait_ns, &ns, sizeof(ns)));
		}
	}
	if (t_hopper) {
		T_CHECK_CUDA(cudaFuncSetAttribute((const void *)t_attn_d128,
						  cudaFuncAttributeMaxDynamicSharedMemorySize,
						  MK_ATTN_SMEM_BYTES(128)));
		T_CHECK_CUDA(cudaFuncSetAttribute((const void *)t_attn_d64,
						  cudaFuncAttributeMaxDynamicSharedMemorySize,
						  MK_ATTN_SMEM_BYTES(64)));
		t_enter("0. register splits");
		t_check_regs();
		t_enter("1. building blocks");
		for (int d = 64; d <= 128; d += 64) {
			t_unit_tma(d);
			t_unit_qk(d);
			t_unit_pv(d);
		}
		t_unit_softmax();
	} else {
		printf("# building blocks and the Hopper kernel not tested: device is not sm_90\n");
	}
	t_enter("2. whole kernels vs CPU reference");
	t_full_small();
	t_enter("3. probe q = 0");
	t_probe();
	t_enter("4. epilogue modes (partial, merge, merge-out)");
	t_modes();
	if (t_hopper && !t_quick) {
		t_enter("5. large shapes: hopper vs portable");
		t_large();
		t_enter("6. schedule variants");
		t_schedule();
	}
	if (t_hopper) {
		t_enter("6b. several jobs in one launch");
		t_jobs(128);
		t_jobs(64);
	}
	t_enter("7. mkAttention");
	t_api();

	printf("%d passed, %d failed\n", t_passed, t_failed);
	return t_failed ? 1 : 0;
}
