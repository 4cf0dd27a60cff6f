// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmReduceScatter (--op rs) and mkAllGatherGemm (--op ag) end to end, one process per rank
 * (started by scripts/gpu/runtime-comm.sh on the layouts s, a, b, c). Every input is a
 * deterministic function of (case, rank, element), so each rank builds the reference of its own
 * output from every rank's inputs with cuBLAS in fp32, without the collective under test.
 *
 * Every case prints one line: ok/FAIL, the path the call took (asserted: a silent fallback fails
 * the case), the elements outside tolerance with the first one (row, column, got, want, bound),
 * the largest error and the wall time; a watchdog (SIGALRM) names a case that hangs.
 *
 * Tolerances, per element, u = the unit roundoff of C's type (2^-8 for bf16, 2^-11 for fp16:
 * round to nearest is off by at most u |x|):
 *   GEMM + reduce-scatter: |C - ref| <= (nranks + 1) u (S + |ref|), S = sum over ranks of |A_r
 *   B_r| (the partials' magnitudes). The fused kernel rounds each partial to bf16 (u S), each
 *   node's sum when it crosses the network (u S) and the result (u |ref|); the unfused path
 *   rounds each partial (u S) and NCCL rounds each of its nranks - 1 additions (u S each): both
 *   within the bound, at least u (S + |ref|) to spare.
 *   All-gather + GEMM: |C - ref| <= u |ref| + 2^-14 |A| |B| (elementwise magnitudes). The output
 *   is rounded once (u |ref|, no margin: C is compared in its own type, never rounded again);
 *   the engine's and cuBLAS' fp32 sums differ in order, which the second term covers (its worst
 *   case, K 2^-24 |A||B| per side, is 2^-8 |A||B| at K = 32768: too loose to catch a stale
 *   k-block; errors of random order grow as sqrt(K) 2^-24 |A||B| < 2^-16 |A||B|, four times
 *   under the term).
 *   The gathered A must be bit-identical to the concatenated shards.
 *
 * Cases: bad arguments (ncclInvalidArgument, M % nranks included); the fused path, static split,
 * on mKernel's sweep shapes (GEMM + RS: M = N, K = N / 16; AG + GEMM: M = K, N = M / nranks) up to
 * 16384 (2048 with --quick, 32768 with --big), both B layouts to 4096; tails (shards that are not a
 * multiple of 128 rows, shards shorter than a tile, N not a multiple of 8); the adaptive controller
 * (three calls per shape); the unfused path forced and chosen (type fp16, K not a multiple of 8
 * with fused asked and with the knob unset, the policy's cost model, a heap too small: one rank
 * alone stays fused there); 100 calls back to back into 100 NaN-poisoned
 * outputs, each checked; a call captured in a CUDA graph and replayed three times (poisoned
 * before each), a new shape captured at its first call. --kill: the last rank dies while the
 * others are inside a fused call; they must see an async error within the timeout.
 * --bench: per shape of the sweep, in interleaved rounds, the fused call, cuBLAS + NCCL (cuBLAS
 * called here, not through this library's dispatch; the NCCL collective on one rank too), the
 * default choice, the GEMM engine alone, the collective alone and this library's unfused path
 * (medians, the slowest rank's),
 * one traced call, and static splits against the adaptive controller; JSON lines from rank 0.
 *
 * --op both: the tests of both ops, one after the other on one comm. --quick: every kind of case
 * once at small sizes (sweep 2048, ten calls back to back), a watchdog of at most 60 s.
 * The last lines of each rank: where its time went (NCCL init, mkCommInit, cases, the rest) and
 * its slowest cases, then its failures.
 *
 * usage: test-seqpar-gpu RANK NRANKS IDFILE NNODES NLOCAL [--op rs|ag|both] [--quick] [--big]
 *        [--bench] [--bottom N] [--top N] [--kill]
 * --bottom N: the benchmark's sweep, or the tests' sweep shapes, from N on.
 * Exit: 0 pass, 1 fail, 3 watchdog, 77 no CUDA device.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "fused/bench/fill.cuh"
#include "fused/ops/ag_gemm_plan.h"
#include "fused/ops/gemm_fallback.h"
#include "fused/gemm/gemm.h"
#include "fused/ops/seqpar_host.h"
#include "fused/runtime/comm.h"
extern "C" {
#include "mk/clock.h"
#include "mk/param.h"
#include "tuner/policy.h"
}

#include "rank_check.h"
#include "split_bench.h"

typedef __nv_bfloat16 bf16;

enum { OP_RS = MK_SP_GRS, OP_AG = MK_SP_AGG };
enum { PATH_UNFUSED = 0, PATH_FUSED = 1, PATH_AUTO = -1 };

static int g_nranks, g_op, g_share;
static mkComm_t g_comm;
static ncclComm_t g_nccl;
static uint32_t g_case_seed = 1;

static const char *op_name(void)
{
	return g_op == OP_RS ? "gemm_rs" : "ag_gemm";
}

/* ---- watchdog: a case that does not finish in time is named, and the rank exits 3 ---- */

static char g_dog_msg[320], g_case_name[200];
static size_t g_dog_len;
static uint64_t g_case_t0;
static unsigned int g_dog_cap; /* most seconds any case may take (0: each case's own) */

/* Time spent in cases, and the slowest ones (printed at the end: where a run's time went). */
#define SLOWEST 4
static double g_cases_s, g_slow_s[SLOWEST];
static char g_slow_name[SLOWEST][200];

static void dog_bark(int sig)
{
	(void)sig;
	if (write(1, g_dog_msg, g_dog_len) < 0 || write(2, g_dog_msg, g_dog_len) < 0)
		_exit(3);
	_exit(3);
}

static void case_begin(const char *name, unsigned int seconds)
{
	int n;

	if (g_dog_cap > 0 && seconds > g_dog_cap)
		seconds = g_dog_cap;
	snprintf(g_case_name, sizeof(g_case_name), "%s", name);
	n = snprintf(g_dog_msg, sizeof(g_dog_msg),
		     "rank %d: FAIL WATCHDOG: '%s' still running after %u s\n", g_rank, name,
		     seconds);

	g_dog_len = n < (int)sizeof(g_dog_msg) ? (size_t)n : sizeof(g_dog_msg) - 1;
	g_case_t0 = mk_now_ns();
	alarm(seconds);
}

static double case_end(void)
{
	const double secs = (mk_now_ns() - g_case_t0) / 1e9;
	int i = SLOWEST;

	alarm(0);
	g_cases_s += secs;
	while (i > 0 && secs > g_slow_s[i - 1])
		i--;
	if (i < SLOWEST) {
		memmove(&g_slow_s[i + 1], &g_slow_s[i], (SLOWEST - 1 - i) * sizeof(g_slow_s[0]));
		memmove(&g_slow_name[i + 1], &g_slow_name[i],
			(SLOWEST - 1 - i) * sizeof(g_slow_name[0]));
		g_slow_s[i] = secs;
		snprintf(g_slow_name[i], sizeof(g_slow_name[i]), "%s", g_case_name);
	}
	return secs;
}

/* "rank R: time ...": the whole run, its parts and the slowest cases. */
static void print_times(double nccl_s, double init_s, double total_s)
{
	printf("rank %d: time %.1f s: NCCL init %.1f s, mkCommInit %.1f s, cases %.1f s, other "
	       "%.1f s; slowest:",
	       g_rank, total_s, nccl_s, init_s, g_cases_s, total_s - nccl_s - init_s - g_cases_s);
	for (int i = 0; i < SLOWEST && g_slow_s[i] > 0; i++)
		printf("%s '%s' %.2f s", i ? "," : "", g_slow_name[i], g_slow_s[i]);
	printf("\n");
	fflush(stdout);
}

/* ---- knobs ---- */

static void set_env(const char *name, const char *value)
{
	if (value == NULL || value[0] == '\0')
		unsetenv(name);
	else
		setenv(name, value, 1);
	mk_param_reset_all();
}

static void set_path(int path)
{
	set_env(g_op == OP_RS ? "MKERNEL_GEMM_RS_FUSED" : "MKERNEL_AG_GEMM_FUSED",
		path == PATH_FUSED ? "1" : path == PATH_UNFUSED ? "0" : "");
}

/* ---- device helpers ---- */

/* Element `first + i` of the matrix with this seed (rows of one rank are a range of it): bf16
 * in [-1, 1). */
__global__ void fill_kernel(bf16 *p, size_t count, uint32_t seed, size_t first)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t j = first + i;
		const uint32_t x =
			mk_fill_hash(seed ^ mk_fill_hash((uint32_t)j ^ mk_fill_hash((uint32_t)(j >> 32) + 7u)));

		p[i] = __float2bfloat16((float)(x >> 8) / (float)(1u << 23) - 1.0f);
	}
}

static void fill(void *p, size_t count, uint32_t seed, size_t first)
{
	fill_kernel<<<1024, 256>>>((bf16 *)p, count, seed, first);
	CK(cudaGetLastError());
}

__global__ void abs_kernel(const bf16 *x, bf16 *y, size_t count)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = __habs(x[i]);
}

__global__ void to_half_kernel(const bf16 *x, __half *y, size_t count)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = __float2half(__bfloat162float(x[i]));
}

__global__ void acc_kernel(const float *p, float *ref, float *mag, size_t count)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		ref[i] += p[i];
		mag[i] += fabsf(p[i]);
	}
}

struct check_out {
	unsigned long long bad, first;
	unsigned int max_err; /* float bits (non-negative: ordered as integers) */
};

/* C's element i as a float (exact): bf16 or, when `half`, fp16. */
__device__ __host__ static float got_at(const void *c, size_t i, int half)
{
	return half ? __half2float(((const __half *)c)[i]) : __bfloat162float(((const bf16 *)c)[i]);
}

__global__ void check_kernel(const void *got, int half, const float *ref, const float *mag,
			     size_t count, float ta, float tm, struct check_out *o)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float g = got_at(got, i, half), w = ref[i], err = fabsf(g - w);

		if (!(err <= ta * fabsf(w) + tm * mag[i] + 1e-6f)) {
			atomicAdd(&o->bad, 1ull);
			atomicMin(&o->first, (unsigned long long)i);
		}
		if (err == err)
			atomicMax(&o->max_err, __float_as_uint(err));
	}
}

__global__ void equal_kernel(const uint16_t *a, const uint16_t *b, size_t count,
			     struct check_out *o)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		if (a[i] != b[i]) {
			atomicAdd(&o->bad, 1ull);
			atomicMin(&o->first, (unsigned long long)i);
		}
	}
}

/* ---- problems ---- */

struct prob {
	int m, n, k, b_nk, ms;
	bf16 *a, *b;	  /* my A (GEMM + RS: M x K; AG + GEMM: my shard) and my B */
	bf16 *afull;	  /* AG + GEMM: the gathered A, for aGathered's check */
	float *ref, *mag; /* my output's reference and the tolerance's magnitudes (device) */
	size_t out;	  /* elements of my C: M / nranks x N (RS) or M x N (AG) */
	float ta, tm;	  /* tolerance: ta |ref| + tm mag */
};

/* The bound for an output of unit roundoff u (see the header comment). */
static void prob_tol(struct prob *p, float u)
{
	if (g_op == OP_RS) {
		p->ta = p->tm = (float)(g_nranks + 1) * u;
	} else {
		p->ta = u;
		p->tm = 1.0f / 16384;
	}
}

static uint32_t seed_of(uint32_t s, int rank, int which)
{
	return s * 2654435761u + (uint32_t)rank * 40503u + (uint32_t)which * 977u + 1u;
}

static void ref_gemm(const void *a, const void *b, float *c, int m, int n, int k, int b_nk)
{
	if (mk_fallback_gemm(a, b, c, m, n, k, b_nk, CUDA_R_16BF, CUDA_R_32F, 0) != 0) {
		expect(0, "reference GEMM (cuBLAS)");
		exit(1);
	}
}

static void prob_open(struct prob *p, int m, int n, int k, int b_nk)
{
	const uint32_t s = g_case_seed++;
	const size_t kn = (size_t)k * n;

	memset(p, 0, sizeof(*p));
	p->m = m;
	p->n = n;
	p->k = k;
	p->b_nk = b_nk;
	p->ms = m / g_nranks;
	CK(cudaMalloc((void **)&p->b, kn * 2));
	fill(p->b, kn, seed_of(s, g_rank, 1), 0);
	if (g_op == OP_RS) {
		const size_t rows = (size_t)p->ms * k;
		bf16 *ta, *tb;
		float *part;

		p->out = (size_t)p->ms * n;
		CK(cudaMalloc((void **)&p->a, (size_t)m * k * 2));
		fill(p->a, (size_t)m * k, seed_of(s, g_rank, 0), 0);
		CK(cudaMalloc((void **)&p->ref, p->out * 4));
		CK(cudaMalloc((void **)&p->mag, p->out * 4));
		CK(cudaMemset(p->ref, 0, p->out * 4));
		CK(cudaMemset(p->mag, 0, p->out * 4));
		CK(cudaMalloc((void **)&ta, rows * 2));
		CK(cudaMalloc((void **)&tb, kn * 2));
		CK(cudaMalloc((void **)&part, p->out * 4));
		/* sum over ranks of (rank r's A, rows of my shard) @ (rank r's B) */
		for (int r = 0; r < g_nranks; r++) {
			fill(ta, rows, seed_of(s, r, 0), (size_t)g_rank * rows);
			fill(tb, kn, seed_of(s, r, 1), 0);
			ref_gemm(ta, tb, part, p->ms, n, k, b_nk);
			acc_kernel<<<1024, 256>>>(part, p->ref, p->mag, p->out);
			CK(cudaGetLastError());
		}
		CK(cudaDeviceSynchronize());
		cudaFree(ta);
		cudaFree(tb);
		cudaFree(part);
		prob_tol(p, 1.0f / 256);
	} else {
		const size_t all = (size_t)m * k;
		bf16 *absa, *absb;

		p->out = (size_t)m * n;
		CK(cudaMalloc((void **)&p->afull, all * 2));
		fill(p->afull, all, seed_of(s, 0, 0), 0);
		CK(cudaMalloc((void **)&p->a, (size_t)p->ms * k * 2));
		CK(cudaMemcpy(p->a, p->afull + (size_t)g_rank * p->ms * k, (size_t)p->ms * k * 2,
			      cudaMemcpyDeviceToDevice));
		CK(cudaMalloc((void **)&p->ref, p->out * 4));
		CK(cudaMalloc((void **)&p->mag, p->out * 4));
		ref_gemm(p->afull, p->b, p->ref, m, n, k, b_nk);
		CK(cudaMalloc((void **)&absa, all * 2));
		CK(cudaMalloc((void **)&absb, kn * 2));
		abs_kernel<<<1024, 256>>>(p->afull, absa, all);
		abs_kernel<<<1024, 256>>>(p->b, absb, kn);
		CK(cudaGetLastError());
		ref_gemm(absa, absb, p->mag, m, n, k, b_nk);
		CK(cudaDeviceSynchronize());
		cudaFree(absa);
		cudaFree(absb);
		prob_tol(p, 1.0f / 256);
	}
}

static void prob_close(struct prob *p)
{
	cudaFree(p->a);
	cudaFree(p->b);
	cudaFree(p->afull);
	cudaFree(p->ref);
	cudaFree(p->mag);
}

static ncclResult_t run_op(const struct prob *p, void *c, void *gathered, cudaStream_t s)
{
	const mkLayout_t l = p->b_nk ? mkLayoutRowMajorNK : mkLayoutRowMajorKN;

	if (g_op == OP_RS)
		return mkGemmReduceScatter(p->a, p->b, c, p->m, p->n, p->k, ncclBfloat16, l, g_comm,
					   s);
	return mkAllGatherGemm(p->a, p->b, c, gathered, p->m, p->n, p->k, ncclBfloat16, l, g_comm,
			       s);
}

static struct check_out *g_chk;

static struct check_out check_run(void)
{
	struct check_out h;

	CK(cudaGetLastError());
	CK(cudaMemcpy(&h, g_chk, sizeof(h), cudaMemcpyDeviceToHost));
	return h;
}

static void check_reset(void)
{
	const struct check_out z = { 0, ~0ull, 0 };

	CK(cudaMemcpy(g_chk, &z, sizeof(z), cudaMemcpyHostToDevice));
}

static float bits_float(unsigned int u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Elements of C (bf16, or fp16 when `half`) outside tolerance; the first one described in
 * `d`. */
static unsigned long long check_c_as(const struct prob *p, const void *c, int half, char *d,
				     size_t len)
{
	struct check_out h;

	check_reset();
	check_kernel<<<1024, 256>>>(c, half, p->ref, p->mag, p->out, p->ta, p->tm, g_chk);
	h = check_run();
	if (h.bad == 0) {
		snprintf(d, len, "max |err| %.3g", (double)bits_float(h.max_err));
	} else {
		uint16_t got;
		float want, mag;

		CK(cudaMemcpy(&got, (const uint16_t *)c + h.first, 2, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(&want, p->ref + h.first, 4, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(&mag, p->mag + h.first, 4, cudaMemcpyDeviceToHost));
		snprintf(d, len,
			 "first at row %llu col %llu: got %g want %g bound %g; max |err| %.3g",
			 h.first / (unsigned long long)p->n, h.first % (unsigned long long)p->n,
			 (double)got_at(&got, 0, half), (double)want,
			 (double)(p->ta * fabsf(want) + p->tm * mag + 1e-6f),
			 (double)bits_float(h.max_err));
	}
	return h.bad;
}

static unsigned long long check_c(const struct prob *p, const void *c, char *d, size_t len)
{
	return check_c_as(p, c, 0, d, len);
}

/*
 * One call of p captured on stream s into a CUDA graph, replayed `n` times into C, NaN-poisoned
 * before each, each result checked: the elements outside tolerance over all replays (d: the
 * first). The op's path record is the captured call's.
 */
static unsigned long long graph_replays(const struct prob *p, void *c, cudaStream_t s, int n,
					char *d, size_t len)
{
	unsigned long long bad = 0;
	cudaGraphExec_t ge;
	cudaGraph_t gr;

	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	NK(run_op(p, c, NULL, s));
	CK(cudaStreamEndCapture(s, &gr));
	CK(cudaGraphInstantiate(&ge, gr, 0));
	for (int i = 0; i < n; i++) {
		CK(cudaMemsetAsync(c, 0xff, p->out * 2, s));
		CK(cudaGraphLaunch(ge, s));
		CK(cudaStreamSynchronize(s));
		bad += check_c(p, c, d, len);
	}
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(gr);
	return bad;
}

/* Elements of aGathered that differ from the concatenated shards. */
static unsigned long long check_gathered(const struct prob *p, const void *g, char *d, size_t len)
{
	struct check_out h;

	check_reset();
	equal_kernel<<<1024, 256>>>((const uint16_t *)g, (const uint16_t *)p->afull,
				    (size_t)p->m * p->k, g_chk);
	h = check_run();
	if (h.bad != 0)
		snprintf(d, len, "aGathered: %llu differ, first at row %llu", h.bad,
			 h.first / (unsigned long long)p->k);
	return h.bad;
}

/* The path the policy's cost model picks for this problem (the default path). */
static int auto_path(const struct prob *p)
{
	struct mk_policy_op_query q;
	struct mk_policy_sm_split s;

	memset(&q, 0, sizeof(q));
	q.op = g_op == OP_RS ? MK_FUSED_GEMM_REDUCESCATTER : MK_FUSED_ALLGATHER_GEMM;
	q.m = (uint64_t)p->m;
	q.n = (uint64_t)p->n;
	q.k = (uint64_t)p->k;
	q.dtype_bytes = 2;
	q.nnodes = g_comm->topo.nnodes;
	q.nranks = g_nranks;
	q.ranks_per_node = g_comm->topo.nlocal;
	q.sms = g_share;
	return mk_policy_sm_split(&q, &s) == 0 && s.fuse ? PATH_FUSED : PATH_UNFUSED;
}

static const char *path_name(int path)
{
	return path == PATH_FUSED ? "fused" : path == PATH_UNFUSED ? "unfused" : "none";
}

/* The MKERNEL_*_FUSED value set_path(path) gives. */
static const char *knob_value(int path)
{
	return path == PATH_FUSED ? "1" : path == PATH_UNFUSED ? "0" : "unset";
}

/*
 * `reps` calls of one problem, C (and aGathered, when asked) NaN-poisoned before each; every
 * result checked. `ask` sets the op's MKERNEL_*_FUSED knob (fused: 1, unfused: 0, auto: unset);
 * the path of every call must be `want` (auto: the cost model's choice), and `why_has` must
 * appear in the recorded reason when given.
 */
static void check_path(const char *label, int m, int n, int k, int b_nk, int ask, int want,
		       int reps, int gathered, const char *why_has)
{
	char name[200], why[256] = "", d[300] = "", gd[120] = "";
	unsigned long long bad = 0, gbad = 0;
	int took = -1, path_ok = 1;
	void *c, *g = NULL;
	ncclResult_t ae;
	struct prob p;

	snprintf(name, sizeof(name), "%s %s M %d N %d K %d B %s%s x%d", op_name(), label, m, n, k,
		 b_nk ? "NxK" : "KxN", gathered ? " +aGathered" : "", reps);
	case_begin(name, 240);
	prob_open(&p, m, n, k, b_nk);
	CK(cudaMalloc(&c, p.out * 2));
	if (gathered)
		CK(cudaMalloc(&g, (size_t)m * k * 2));
	set_path(ask);
	if (want == PATH_AUTO)
		want = auto_path(&p);
	for (int r = 0; r < reps; r++) {
		char d1[300];
		unsigned long long b1;

		CK(cudaMemset(c, 0xff, p.out * 2));
		if (g != NULL)
			CK(cudaMemset(g, 0xff, (size_t)m * k * 2));
		NK(run_op(&p, c, g, 0));
		took = mk_sp_last_path(g_comm, g_op, why, sizeof(why));
		path_ok &= took == want && (why_has == NULL || strstr(why, why_has) != NULL);
		CK(cudaStreamSynchronize(0));
		b1 = check_c(&p, c, d1, sizeof(d1));
		if (bad == 0)
			memcpy(d, d1, sizeof(d));
		bad += b1;
		if (g != NULL)
			gbad += check_gathered(&p, g, gd, sizeof(gd));
	}
	NK(mkCommGetAsyncError(g_comm, &ae));
	{
		char what[900];
		const double secs = case_end();

		snprintf(what, sizeof(what),
			 "%s: knob %s, path %s (want %s; %s), %llu outside tolerance, %s%s%s, "
			 "async %s, %.2f s",
			 name, knob_value(ask), path_name(took), path_name(want), why, bad, d,
			 gbad ? "; " : "", gd, ncclGetErrorString(ae), secs);
		expect(bad == 0 && gbad == 0 && path_ok && ae == ncclSuccess, what);
	}
	set_path(PATH_FUSED);
	cudaFree(c);
	cudaFree(g);
	prob_close(&p);
}

/* A case whose path is the one asked for (or the cost model's choice when the knob is unset). */
static void check_case(const char *label, int m, int n, int k, int b_nk, int path, int reps,
		       int gathered, const char *why_has)
{
	check_path(label, m, n, k, b_nk, path, path, reps, gathered, why_has);
}

/*
 * The unfused paths take their scratch from the op's own pool, which keeps it between calls
 * (mk_sp_scratch_alloc): every call outside capture on several ranks must, none from the
 * default pool, which gives its memory back at each synchronisation.
 */
static unsigned long g_scratch_before[2];

static void scratch_mark(void)
{
	if (mk_sp_scratch_counts(g_comm, g_op, g_scratch_before) != 0)
		g_scratch_before[0] = g_scratch_before[1] = 0;
}

static void scratch_expect(const char *what)
{
	unsigned long now[2] = { 0, 0 };
	char line[300];
	int rc;

	if (g_nranks == 1)
		return; /* one rank: the GEMM goes straight into C, no scratch */
	rc = mk_sp_scratch_counts(g_comm, g_op, now);
	snprintf(line, sizeof(line), "%s %s: scratch from the op's pool %lu, default pool %lu",
		 op_name(), what, rc == 0 ? now[1] - g_scratch_before[1] : 0,
		 rc == 0 ? now[0] - g_scratch_before[0] : 0);
	expect(rc == 0 && now[1] > g_scratch_before[1] && now[0] == g_scratch_before[0], line);
}

/*
 * The all-gather's unfused pipeline (MKERNEL_AG_GEMM_PIPELINE): forced on, the unfused path must
 * gather in mk_agg_pipe_pieces(M / nranks) pieces (0 alone: nothing to gather) and be right with
 * and without aGathered, also when captured in a CUDA graph and replayed; forced off, it must run
 * one collective.
 */
static int pipe_want(int m)
{
	return g_nranks > 1 ? mk_agg_pipe_pieces(m / g_nranks) : 0;
}

static void pipe_expect(const char *what, int m)
{
	const int got = mk_sp_last_pipe_pieces(g_comm, g_op), want = pipe_want(m);
	char line[300];

	snprintf(line, sizeof(line), "%s %s: %d pieces (want %d)", op_name(), what, got, want);
	expect(got == want, line);
}

static void check_pipeline(void)
{
	const int r = g_nranks;
	char what[600], d[300] = "";
	unsigned long long bad;
	cudaStream_t s;
	struct prob p;
	int pieces;
	void *c;

	set_env("MKERNEL_AG_GEMM_PIPELINE", "1");
	/* shards of 1000 rows: 4 uneven pieces (tile rows straddle them) */
	check_case("unfused pipelined", 1000 * r, 1000, 520, 1, PATH_UNFUSED, 2, 1, "FUSED=0");
	pipe_expect("pipelined with aGathered", 1000 * r);
	check_case("unfused pipelined", 512 * r, 768, 256, 0, PATH_UNFUSED, 2, 0, "FUSED=0");
	pipe_expect("pipelined", 512 * r);
	/* shards shorter than a piece's rows: one piece */
	check_case("unfused pipelined", 40 * r, 264, 64, 1, PATH_UNFUSED, 1, 1, "FUSED=0");
	pipe_expect("pipelined, short shards", 40 * r);

	/* captured (the side stream made by the calls above) and replayed */
	case_begin("pipelined graph", 240);
	set_path(PATH_UNFUSED);
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	prob_open(&p, 768 * r, 640, 384, 1);
	CK(cudaMalloc(&c, p.out * 2));
	bad = graph_replays(&p, c, s, 3, d, sizeof(d));
	pieces = mk_sp_last_pipe_pieces(g_comm, g_op);
	snprintf(what, sizeof(what),
		 "%s pipelined CUDA graph, 3 replays: %d pieces (want %d), %llu bad, %s, %.2f s",
		 op_name(), pieces, pipe_want(768 * r), bad, d, case_end());
	expect(bad == 0 && pieces == pipe_want(768 * r), what);
	cudaFree(c);
	prob_close(&p);
	CK(cudaStreamDestroy(s));

	set_env("MKERNEL_AG_GEMM_PIPELINE", "0");
	scratch_mark();
	check_case("unfused one collective", 1000 * r, 1000, 520, 1, PATH_UNFUSED, 1, 0, "FUSED=0");
	scratch_expect("unfused one collective");
	pieces = mk_sp_last_pipe_pieces(g_comm, g_op);
	snprintf(what, sizeof(what), "%s knob 0: %d pieces (want 0)", op_name(), pieces);
	expect(pieces == 0, what);
	set_env("MKERNEL_AG_GEMM_PIPELINE", "");
	set_path(PATH_FUSED);
}

/*
 * A call the fused kernel does not take: fp16 inputs (bf16 only). The inputs are the bf16
 * problem's values (exact in fp16 down to 2^-17; below, fp16's spacing 2^-24 moves a product by
 * far less than the bound's second term). C is compared as fp16, with fp16's unit roundoff:
 * rounding it to bf16 first would add a second rounding (an fp16 value halfway between two bf16
 * values goes to the even one, up to half a bf16 ulp plus half an fp16 ulp off the exact
 * result) that a bound of one bf16 rounding does not hold.
 */
static void check_fp16_fallback(void)
{
	const int m = 512 * g_nranks, n = 512, k = 128;
	char why[256] = "", d[300], what[700];
	__half *a16, *b16, *c16;
	unsigned long long bad;
	size_t acount;
	struct prob p;
	int took;

	case_begin("fp16 fallback", 120);
	prob_open(&p, m, n, k, 1);
	prob_tol(&p, 1.0f / 2048);
	acount = g_op == OP_RS ? (size_t)m * k : (size_t)p.ms * k;
	CK(cudaMalloc((void **)&a16, acount * 2));
	CK(cudaMalloc((void **)&b16, (size_t)k * n * 2));
	CK(cudaMalloc((void **)&c16, p.out * 2));
	to_half_kernel<<<1024, 256>>>(p.a, a16, acount);
	to_half_kernel<<<1024, 256>>>(p.b, b16, (size_t)k * n);
	CK(cudaGetLastError());
	set_path(PATH_FUSED);
	if (g_op == OP_RS)
		NK(mkGemmReduceScatter(a16, b16, c16, m, n, k, ncclFloat16, mkLayoutRowMajorNK,
				       g_comm, 0));
	else
		NK(mkAllGatherGemm(a16, b16, c16, NULL, m, n, k, ncclFloat16, mkLayoutRowMajorNK,
				   g_comm, 0));
	took = mk_sp_last_path(g_comm, g_op, why, sizeof(why));
	CK(cudaDeviceSynchronize());
	bad = check_c_as(&p, c16, 1, d, sizeof(d));
	snprintf(what, sizeof(what), "%s fp16 M %d N %d K %d: path %s (%s), %llu bad, %s, %.2f s",
		 op_name(), m, n, k, path_name(took), why, bad, d, case_end());
	expect(bad == 0 && took == PATH_UNFUSED && strstr(why, "bf16") != NULL, what);
	cudaFree(a16);
	cudaFree(b16);
	cudaFree(c16);
	prob_close(&p);
}

/*
 * A comm of 4 MiB of heap, fused asked for M 2048 x N 2048 (all-gather: K 2048). What the fused
 * path keeps in the heap: reduce-scatter W (M x N x 2 = 8 MiB) with several ranks, plus a
 * landing area of (nodes - 1) x M / nranks x N x 2 across nodes, and the flag words; all-gather
 * G (M x K x 2 = 8 MiB) with several ranks, and the flag words. So several ranks must take the
 * unfused path, saying why, and be right; one rank alone keeps only the reduce-scatter's flag
 * words (a few KiB) and nothing for the all-gather, so it must stay fused.
 */
static void check_small_heap(void)
{
	mkConfig_t cfg = MK_CONFIG_INITIALIZER;
	mkComm_t keep = g_comm, small;

	case_begin("mkCommInit with a 4 MiB heap", 120);
	cfg.heapBytes = (size_t)4 << 20;
	NK(mkCommInit(g_nccl, &cfg, &small));
	case_end();
	g_comm = small;
	if (g_nranks > 1)
		check_path("fused asked, heap 4 MiB", 2048, 2048, g_op == OP_RS ? 128 : 2048, 1,
			   PATH_FUSED, PATH_UNFUSED, 1, 0, "heap is too small");
	else
		check_path("fused asked, heap 4 MiB, one rank", 2048, 2048,
			   g_op == OP_RS ? 128 : 2048, 1, PATH_FUSED, PATH_FUSED, 1, 0, NULL);
	g_comm = keep;
	case_begin("mkCommDestroy of the 4 MiB comm", 120);
	NK(mkCommDestroy(small));
	case_end();
}

/* 100 calls without host synchronisation, two inputs alternating, each into its own poisoned
 * C (and aGathered on every other all-gather call); every one checked afterwards. */
static void check_back_to_back(int calls)
{
	const int m = 1024, n = g_op == OP_RS ? 1024 : 512, k = g_op == OP_RS ? 256 : 512;
	void **c = (void **)calloc((size_t)calls, sizeof(void *));
	void **g = (void **)calloc((size_t)calls, sizeof(void *));
	unsigned long long bad = 0, gbad = 0;
	char d[340] = "", gd[120] = "", why[256], what[900];
	int fused = 0;
	struct prob p[2];

	case_begin("back to back", 300);
	prob_open(&p[0], m, n, k, 1);
	prob_open(&p[1], m, n, k, 1);
	set_path(PATH_FUSED);
	for (int i = 0; i < calls; i++) {
		CK(cudaMalloc(&c[i], p[0].out * 2));
		CK(cudaMemset(c[i], 0xff, p[0].out * 2));
		if (g_op == OP_AG && i % 2) {
			CK(cudaMalloc(&g[i], (size_t)m * k * 2));
			CK(cudaMemset(g[i], 0xff, (size_t)m * k * 2));
		}
	}
	CK(cudaDeviceSynchronize());
	for (int i = 0; i < calls; i++) {
		NK(run_op(&p[i % 2], c[i], g[i], 0));
		fused += mk_sp_last_path(g_comm, g_op, why, sizeof(why)) == PATH_FUSED;
	}
	CK(cudaStreamSynchronize(0));
	for (int i = 0; i < calls; i++) {
		char d1[300];
		unsigned long long b1 = check_c(&p[i % 2], c[i], d1, sizeof(d1));

		if (b1 != 0 && bad == 0)
			snprintf(d, sizeof(d), "call %d: %s", i, d1);
		bad += b1;
		if (g[i] != NULL)
			gbad += check_gathered(&p[i % 2], g[i], gd, sizeof(gd));
		cudaFree(c[i]);
		cudaFree(g[i]);
	}
	snprintf(what, sizeof(what),
		 "%s %d calls back to back (M %d N %d K %d): %d fused, %llu outside tolerance %s%s, "
		 "%.2f s",
		 op_name(), calls, m, n, k, fused, bad, d, gd, case_end());
	expect(bad == 0 && gbad == 0 && fused == calls, what);
	free(c);
	free(g);
	prob_close(&p[0]);
	prob_close(&p[1]);
}

/*
 * One call captured in a CUDA graph and replayed three times (C poisoned before each); a shape
 * never called before, captured at once: its call must be capturable (the unfused path, whose
 * reason names the capture, unless the op keeps no workspace for it) and right on replay.
 */
static void check_graph(void)
{
	const int n0 = g_op == OP_RS ? 1024 : 768, n1 = g_op == OP_RS ? 768 : 512;
	char why[256] = "", d[300] = "", what[900];
	unsigned long long bad;
	cudaStream_t s;
	struct prob p;
	int took, want;
	void *c;

	case_begin("graph", 240);
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	set_path(PATH_FUSED);
	prob_open(&p, 1536, n0, 256, 1);
	CK(cudaMalloc(&c, p.out * 2));
	NK(run_op(&p, c, NULL, s)); /* sets the shape up, outside capture */
	CK(cudaStreamSynchronize(s));
	bad = graph_replays(&p, c, s, 3, d, sizeof(d));
	took = mk_sp_last_path(g_comm, g_op, why, sizeof(why));
	snprintf(what, sizeof(what), "%s CUDA graph, 3 replays: path %s (%s), %llu bad, %s",
		 op_name(), path_name(took), why, bad, d);
	expect(bad == 0 && took == PATH_FUSED, what);
	cudaFree(c);
	prob_close(&p);

	prob_open(&p, 1280, n1, 128, 1);
	CK(cudaMalloc(&c, p.out * 2));
	bad = graph_replays(&p, c, s, 2, d, sizeof(d));
	took = mk_sp_last_path(g_comm, g_op, why, sizeof(why));
	/* one all-gather rank alone runs the engine as is: nothing to set up */
	want = g_op == OP_AG && g_nranks == 1 ? PATH_FUSED : PATH_UNFUSED;
	snprintf(what, sizeof(what),
		 "%s new shape captured first, 2 replays: path %s (%s), %llu bad, %s, %.2f s",
		 op_name(), path_name(took), why, bad, d, case_end());
	expect(bad == 0 && took == want &&
		       (want == PATH_FUSED || strstr(why, "capture") != NULL),
	       what);
	cudaStreamDestroy(s);
	cudaFree(c);
	prob_close(&p);
}

static void check_invalid(void)
{
	const mkLayout_t nk = mkLayoutRowMajorNK;
	const int r = g_nranks;
	struct mk_comm fake;
	void *a, *b, *c;
	int ok = 1;

	case_begin("bad arguments", 60);
	memset(&fake, 0, sizeof(fake));
	CK(cudaMalloc(&a, 1 << 20));
	CK(cudaMalloc(&b, 1 << 20));
	CK(cudaMalloc(&c, 1 << 20));
#define BAD(call) ok &= (call) == ncclInvalidArgument
	if (g_op == OP_RS) {
		BAD(mkGemmReduceScatter(NULL, b, c, 64 * r, 64, 64, ncclBfloat16, nk, g_comm, 0));
		BAD(mkGemmReduceScatter(a, b, c, 0, 64, 64, ncclBfloat16, nk, g_comm, 0));
		BAD(mkGemmReduceScatter(a, b, c, 64 * r, 64, 64, ncclInt32, nk, g_comm, 0));
		BAD(mkGemmReduceScatter((char *)a + 1, b, c, 64 * r, 64, 64, ncclBfloat16, nk,
					g_comm, 0));
		BAD(mkGemmReduceScatter(a, b, c, 64 * r, 64, 64, ncclBfloat16, (mkLayout_t)7, g_comm,
					0));
		BAD(mkGemmReduceScatter(a, b, c, 64 * r, 64, 64, ncclBfloat16, nk, NULL, 0));
		BAD(mkGemmReduceScatter(a, b, c, 64 * r, 64, 64, ncclBfloat16, nk, &fake, 0));
		if (r > 1)
			BAD(mkGemmReduceScatter(a, b, c, 64 * r + 1, 64, 64, ncclBfloat16, nk, g_comm,
						0));
	} else {
		BAD(mkAllGatherGemm(NULL, b, c, NULL, 64 * r, 64, 64, ncclBfloat16, nk, g_comm, 0));
		BAD(mkAllGatherGemm(a, b, c, NULL, 64 * r, 0, 64, ncclBfloat16, nk, g_comm, 0));
		BAD(mkAllGatherGemm(a, b, c, NULL, 64 * r, 64, 64, ncclInt32, nk, g_comm, 0));
		BAD(mkAllGatherGemm(a, b, c, (char *)c + 1, 64 * r, 64, 64, ncclBfloat16, nk, g_comm,
				    0));
		BAD(mkAllGatherGemm(a, b, c, NULL, 64 * r, 64, 64, ncclBfloat16, (mkLayout_t)7,
				    g_comm, 0));
		BAD(mkAllGatherGemm(a, b, c, NULL, 64 * r, 64, 64, ncclBfloat16, nk, NULL, 0));
		BAD(mkAllGatherGemm(a, b, c, NULL, 64 * r, 64, 64, ncclBfloat16, nk, &fake, 0));
		if (r > 1)
			BAD(mkAllGatherGemm(a, b, c, NULL, 64 * r + 1, 64, 64, ncclBfloat16, nk,
					    g_comm, 0));
	}
#undef BAD
	CK(cudaDeviceSynchronize());
	expect(ok && mk_sp_last_path(g_comm, g_op, NULL, 0) == -1,
	       "bad arguments (M % nranks included): ncclInvalidArgument, no path taken");
	case_end();
	cudaFree(a);
	cudaFree(b);
	cudaFree(c);
}

/*
 * The last rank dies while the others are inside a fused call (after one good call): every
 * survivor's call must end (every device wait is bounded) and report an async error within a
 * few timeouts; a second call after that returns at once.
 */
static int run_kill(double timeout_s)
{
	const int m = 2048, n = g_op == OP_RS ? 2048 : 1024, k = g_op == OP_RS ? 128 : 256;
	ncclResult_t ae = ncclSuccess;
	char d[300], what[400];
	struct prob p;
	uint64_t t0;
	float *one;
	void *c;

	set_path(PATH_FUSED);
	prob_open(&p, m, n, k, 1);
	CK(cudaMalloc(&c, p.out * 2));
	NK(run_op(&p, c, NULL, 0));
	CK(cudaStreamSynchronize(0));
	expect(check_c(&p, c, d, sizeof(d)) == 0 &&
		       mk_sp_last_path(g_comm, g_op, NULL, 0) == PATH_FUSED,
	       "kill: the call before the death is fused and right");
	CK(cudaMalloc((void **)&one, 4));
	NK(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, g_nccl, 0));
	CK(cudaStreamSynchronize(0));
	if (g_rank == g_nranks - 1) {
		usleep(500000); /* the others are inside their next call by now */
		printf("rank %d: dying now\n", g_rank);
		fflush(stdout);
		_exit(0);
	}
	case_begin("kill", (unsigned int)(6 * timeout_s) + 30);
	t0 = mk_now_ns();
	NK(run_op(&p, c, NULL, 0));
	cudaStreamSynchronize(0);
	NK(run_op(&p, c, NULL, 0));
	cudaStreamSynchronize(0);
	NK(mkCommGetAsyncError(g_comm, &ae));
	case_end();
	snprintf(what, sizeof(what),
		 "%s dead peer mid-call: both calls ended after %.2f s (timeout %.1f s), async "
		 "error %d (%s)",
		 op_name(), (mk_now_ns() - t0) / 1e9, timeout_s, (int)ae, ncclGetErrorString(ae));
	expect(ae != ncclSuccess && (mk_now_ns() - t0) / 1e9 < 4 * timeout_s + 5, what);
	NK(mkCommAbort(g_comm));
	ncclCommAbort(g_nccl);
	printf("rank %d: %d failure(s)\n", g_rank, g_failures);
	return g_failures ? 1 : 0;
}

/* ---- benchmark ---- */

static cudaEvent_t g_e0, g_e1;

/* What one timed step runs. */
/* ST_BASE is what a user writes without mkernel: cuBLAS, then the NCCL collective (on one rank
 * too); ST_UNFUSED is this library's unfused path forced (on one rank the GEMM alone). */
enum step { ST_FUSED, ST_BASE, ST_AUTO, ST_GEMM, ST_COLL, ST_UNFUSED, ST_STEPS };
static const char *const step_names[ST_STEPS] = { "fused",	"cublas_nccl", "auto",
						  "gemm_only", "coll_only",   "unfused" };

struct bench {
	struct prob p;
	void *c, *big; /* big: M x N (RS: the GEMM alone's output, the collective's input) or
			  M x K (AG: the collective's output) */
	struct mk_gemm_launch gemm;
};

static float time_step(struct bench *x, int step)
{
	const int path = step == ST_FUSED     ? PATH_FUSED
			 : step == ST_UNFUSED ? PATH_UNFUSED
					      : PATH_AUTO;
	float ms;

	/* the knob's setenv and parameter reset are the test's host work, not the call's */
	if (step == ST_FUSED || step == ST_UNFUSED || step == ST_AUTO)
		set_path(path);
	CK(cudaEventRecord(g_e0, 0));
	switch (step) {
	case ST_FUSED:
	case ST_UNFUSED:
	case ST_AUTO:
		NK(run_op(&x->p, x->c, NULL, 0));
		/* a forced path that did not run would time something else under its name */
		if (path != PATH_AUTO && mk_sp_last_path(g_comm, g_op, NULL, 0) != path)
			expect(0, step == ST_FUSED ? "timed call ran the fused kernel"
						   : "timed call ran the unfused path");
		break;
	case ST_BASE:
		if (g_op == OP_RS) {
			if (mk_fallback_gemm_bf16(x->p.a, x->p.b, x->big, x->p.m, x->p.n, x->p.k,
						  x->p.b_nk, 0) != 0)
				expect(0, "cuBLAS GEMM of the baseline");
			NK(ncclReduceScatter(x->big, x->c, x->p.out, ncclBfloat16, ncclSum, g_nccl,
					     0));
		} else {
			NK(ncclAllGather(x->p.a, x->big, (size_t)x->p.ms * x->p.k, ncclBfloat16,
					 g_nccl, 0));
			if (mk_fallback_gemm_bf16(x->big, x->p.b, x->c, x->p.m, x->p.n, x->p.k,
						  x->p.b_nk, 0) != 0)
				expect(0, "cuBLAS GEMM of the baseline");
		}
		break;
	case ST_GEMM:
		if (mk_gemm_run(&x->gemm, 0) != 0)
			expect(0, "GEMM engine alone");
		break;
	default:
		if (g_op == OP_RS)
			NK(ncclReduceScatter(x->big, x->c, x->p.out, ncclBfloat16, ncclSum, g_nccl,
					     0));
		else
			NK(ncclAllGather(x->p.a, x->big, (size_t)x->p.ms * x->p.k, ncclBfloat16,
					 g_nccl, 0));
	}
	CK(cudaEventRecord(g_e1, 0));
	CK(cudaEventSynchronize(g_e1));
	CK(cudaEventElapsedTime(&ms, g_e0, g_e1));
	return ms;
}

/* The slowest rank's value of each of `count` floats (every rank gets them). */
static void max_over_ranks(float *v, int count)
{
	rank_max_f32(v, count, g_nccl);
}

static float median(float *t, int n)
{
	qsort(t, (size_t)n, sizeof(float), cmp_f);
	return t[n / 2];
}

/* One traced fused call: when the last CTA finished each stage (us after the first start). */
static void bench_trace(struct bench *x)
{
	static const char *const rs_names[MK_SP_TRACE_WORDS] = {
		"start", "entry", "compute", "intra", "send", "reduce", "-", "exit"
	};
	static const char *const ag_names[MK_SP_TRACE_WORDS] = {
		"start", "entry", "copy", "send", "forward", "gather", "compute", "exit"
	};
	const char *const *names = g_op == OP_RS ? rs_names : ag_names;
	unsigned long long *tr, t0 = ~0ull;
	int ctas = 0;

	if (mk_sp_trace(g_comm, g_op, 1) != 0) {
		expect(0, "trace buffer");
		return;
	}
	(void)time_step(x, ST_FUSED);
	tr = (unsigned long long *)malloc((size_t)g_share * MK_SP_TRACE_WORDS * 8);
	if (mk_sp_trace_read(g_comm, g_op, tr, &ctas) == 0 && g_rank == 0) {
		for (int b = 0; b < ctas; b++)
			t0 = tr[b * MK_SP_TRACE_WORDS] < t0 ? tr[b * MK_SP_TRACE_WORDS] : t0;
		printf("{\"bench\":\"%s_trace\",\"m\":%d,\"n\":%d,\"k\":%d,\"nnodes\":%d,\"nlocal\":%d,"
		       "\"ctas\":%d",
		       op_name(), x->p.m, x->p.n, x->p.k, g_comm->topo.nnodes, g_comm->topo.nlocal,
		       ctas);
		for (int w = 1; w < MK_SP_TRACE_WORDS; w++) {
			unsigned long long last = 0;

			if (names[w][0] == '-')
				continue;
			for (int b = 0; b < ctas; b++) {
				const unsigned long long v = tr[b * MK_SP_TRACE_WORDS + w];

				last = v > t0 && v - t0 > last ? v - t0 : last;
			}
			printf(",\"%s_us\":%.1f", names[w], last / 1e3);
		}
		printf(",\"emulated\":true}\n");
		fflush(stdout);
	}
	free(tr);
	mk_sp_trace(g_comm, g_op, 0);
}

/*
 * Static splits (communication CTAs per role: share / 32 .. share / 4, MKERNEL_ROLE_SPLIT), the
 * policy's static split and the adaptive controller (split_warm_calls() to settle first), interleaved
 * rounds, medians, and held out (split_bench.h); goal: adaptive within 5 % of the best static
 * split.
 */

static void split_config(int i, int *c)
{
	char s[64];

	*c = 0;
	if (i < 4) {
		*c = g_share / (32 >> i) > 0 ? g_share / (32 >> i) : 1;
		snprintf(s, sizeof(s), "0,%d,%d,%d", *c, *c, *c);
		set_env("MKERNEL_ROLE_SPLIT", s);
		set_env("MKERNEL_SM_POLICY", "static");
		return;
	}
	set_env("MKERNEL_ROLE_SPLIT", "");
	set_env("MKERNEL_SM_POLICY", i == 4 ? "static" : "adaptive");
}

static void bench_splits(struct bench *x)
{
	const int rounds = MK_SPLIT_ROUNDS;
	float t[MK_SPLIT_CONFIGS][MK_SPLIT_ROUNDS], med[MK_SPLIT_CONFIGS], hm[2][MK_SPLIT_CONFIGS];
	float best = 1e30f;
	int best_c = 0, c, now[MK_GAR_ROLES] = { 0, 0, 0, 0 }, settled = 0, searching = 0;
	struct mk_gar_ctl ctl;

	split_config(5, &c);
	{
		/* the slowest rank's call sets how many calls the controller gets to settle */
		float ms[1] = { 0.0f };
		int warm;

		for (int i = 0; i < 3; i++)
			ms[0] = time_step(x, ST_FUSED);
		max_over_ranks(ms, 1);
		warm = split_warm_calls(ms[0]);
		for (int i = 0; i < warm; i++)
			(void)time_step(x, ST_FUSED);
	}
	if (mk_sp_split_now(g_comm, g_op, now, &ctl) == 0)
		settled = mk_gar_settled(&ctl);
	for (int r = 0; r < rounds; r++) {
		for (int j = 0; j < MK_SPLIT_CONFIGS; j++) {
			const int i = (j + r) % MK_SPLIT_CONFIGS; /* each round starts one later */

			split_config(i, &c);
			/* outside the timed window: is this adaptive call a search call (warm-up, a probe
			 * or its pair, a step left), not one at the settled split? */
			if (i == MK_SPLIT_CONFIGS - 1 && mk_sp_split_now(g_comm, g_op, now, &ctl) == 0)
				searching += !mk_gar_settled(&ctl);
			t[i][r] = time_step(x, ST_FUSED);
		}
	}
	split_config(5, &c);
	if (mk_sp_split_now(g_comm, g_op, now, NULL) != 0)
		expect(0, "adaptive split readable");
	split_half_medians(t, rounds, hm); /* before median() sorts the rounds */
	max_over_ranks(hm[0], MK_SPLIT_CONFIGS);
	max_over_ranks(hm[1], MK_SPLIT_CONFIGS);
	for (int i = 0; i < MK_SPLIT_CONFIGS; i++)
		med[i] = median(t[i], rounds);
	max_over_ranks(med, MK_SPLIT_CONFIGS);
	if (g_rank == 0)
		printf("{\"bench\":\"%s_splits\",\"m\":%d,\"n\":%d,\"k\":%d,\"nnodes\":%d,\"nlocal\":%d,"
		       "\"rounds\":%d,\"static\":{",
		       op_name(), x->p.m, x->p.n, x->p.k, g_comm->topo.nnodes, g_comm->topo.nlocal,
		       rounds);
	for (int i = 0; i < 4; i++) {
		split_config(i, &c);
		if (med[i] < best) {
			best = med[i];
			best_c = c;
		}
		if (g_rank == 0)
			printf("%s\"%d\":%.4f", i == 0 ? "" : ",", c, med[i]);
	}
	set_env("MKERNEL_ROLE_SPLIT", "");
	set_env("MKERNEL_SM_POLICY", "static");
	if (g_rank == 0) {
		printf("},\"policy_static_ms\":%.4f,\"best_static_ms\":%.4f,\"best_static_comm\":%d,"
		       "\"adaptive_ms\":%.4f,\"adaptive_split\":[%d,%d,%d,%d],"
		       "\"best_static_over_adaptive\":%.3f,"
		       "\"heldout_best_static_over_adaptive\":%.3f,\"settled_after_warmup\":%d,"
		       "\"adaptive_rounds_searching\":%d,\"emulated\":true}\n",
		       med[4], best, best_c, med[5], now[0], now[1], now[2], now[3], best / med[5],
		       split_heldout_ratio(hm), settled, searching);
		fflush(stdout);
	}
}

static void bench_shape(int m, int n, int k)
{
	const int warm = 3, reps = 11;
	float t[ST_STEPS][16], med[ST_STEPS + 2];
	char d[300], what[500], why[256] = "";
	struct bench x;
	int auto_took = -1;

	case_begin("benchmark shape", 590);
	memset(&x, 0, sizeof(x));
	prob_open(&x.p, m, n, k, 1);
	CK(cudaMalloc(&x.c, x.p.out * 2));
	CK(cudaMalloc(&x.big, (size_t)m * (g_op == OP_RS ? n : k) * 2));
	x.gemm.a = g_op == OP_RS ? (const void *)x.p.a : (const void *)x.p.afull;
	x.gemm.b = x.p.b;
	x.gemm.ctas = g_share;
	mk_gemm_args_init(&x.gemm.args, m, n, k, MK_GEMM_B_NK, g_op == OP_RS ? x.big : x.c);
	set_env("MKERNEL_SM_POLICY", "static");
	/* every round starts one step later, so no step always follows the same one (a step
	 * right after a long collective can find the proxy or the sockets still draining) */
	for (int r = 0; r < warm + reps; r++) {
		for (int i = 0; i < ST_STEPS; i++) {
			const int s = (i + r) % ST_STEPS;
			const float ms = time_step(&x, s);

			if (s == ST_AUTO)
				auto_took = mk_sp_last_path(g_comm, g_op, why, sizeof(why));
			if (r >= warm)
				t[s][r - warm] = ms;
		}
	}
	/* correctness with every benchmark: the fused call once more, checked */
	set_path(PATH_FUSED);
	CK(cudaMemset(x.c, 0xff, x.p.out * 2));
	NK(run_op(&x.p, x.c, NULL, 0));
	CK(cudaStreamSynchronize(0));
	snprintf(what, sizeof(what), "%s benchmark M %d N %d K %d: fused result within tolerance",
		 op_name(), m, n, k);
	expect(check_c(&x.p, x.c, d, sizeof(d)) == 0, what);
	for (int s = 0; s < ST_STEPS; s++)
		med[s] = median(t[s], reps);
	med[ST_STEPS] = t[ST_FUSED][reps / 10];	    /* p10 (sorted by median()) */
	med[ST_STEPS + 1] = t[ST_FUSED][reps * 9 / 10]; /* p90 */
	max_over_ranks(med, ST_STEPS + 2);
	if (g_rank == 0) {
		const float bound = fmaxf(med[ST_GEMM], med[ST_COLL]);

		printf("{\"bench\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"nranks\":%d,\"nnodes\":%d,"
		       "\"nlocal\":%d",
		       op_name(), m, n, k, g_nranks, g_comm->topo.nnodes, g_comm->topo.nlocal);
		for (int s = 0; s < ST_STEPS; s++)
			printf(",\"%s_ms\":%.4f", step_names[s], med[s]);
		printf(",\"fused_p10\":%.4f,\"fused_p90\":%.4f,\"auto_path\":\"%s\","
		       "\"bound_ms\":%.4f,\"fused_over_bound\":%.3f,\"speedup_fused\":%.3f,"
		       "\"speedup_auto\":%.3f,\"emulated\":true}\n",
		       med[ST_STEPS], med[ST_STEPS + 1], path_name(auto_took), bound,
		       med[ST_FUSED] / bound, med[ST_BASE] / med[ST_FUSED],
		       med[ST_BASE] / med[ST_AUTO]);
		fflush(stdout);
	}
	/* one all-gather rank alone runs the engine as is: no roles to trace or split */
	if (g_op == OP_RS || g_nranks > 1) {
		bench_trace(&x);
		bench_splits(&x);
	}
	set_path(PATH_FUSED);
	cudaFree(x.c);
	cudaFree(x.big);
	prob_close(&x.p);
	case_end();
}

/* The sweep from its first size (or `bottom`, to run only the largest sizes) to `top`. */
static void bench(int bottom, int top)
{
	int s = g_op == OP_RS ? 2048 : 4096;

	while (s < bottom)
		s *= 2;
	for (; s <= top; s *= 2) {
		if (g_op == OP_RS)
			bench_shape(s, s, s / 16);
		else
			bench_shape(s, s / g_nranks, s);
	}
}

/* ---- main ---- */

static int opt_int(int argc, char **argv, const char *name, int def)
{
	for (int i = 6; i + 1 < argc; i++) {
		if (strcmp(argv[i], name) == 0)
			return atoi(argv[i + 1]);
	}
	return def;
}

static const char *opt_str(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 6; i + 1 < argc; i++) {
		if (strcmp(argv[i], name) == 0)
			return argv[i + 1];
	}
	return def;
}

/* Symmetric heap the largest shape of the op needs: W and the landing area (reduce-scatter) or
 * G (all-gather), without the room for words and orders (heap_room). */
static size_t heap_for(int op, int top)
{
	const size_t t = (size_t)top;

	if (op == OP_RS)
		return t * t * 2 + t / (size_t)g_nranks * t * 2;
	return t * t * 2;
}

static const size_t heap_room = (size_t)64 << 20;

/* The test cases of one op (see the header comment). */
static void tests(int quick, int big, int bottom)
{
	const int r = g_nranks;
	const int ag = g_op == OP_AG;

	check_invalid();
	set_env("MKERNEL_SM_POLICY", "static");
	/* bottom: the sweep from that size on (32768 alone: BIG=1 BOTTOM=32768, one short call) */
	for (int s = 2048; s <= (quick ? 2048 : big ? 32768 : 16384); s *= 2) {
		const int m = s, n = ag ? s / r : s, k = ag ? s : s / 16;

		if (s < bottom)
			continue;
		/* both B layouts up to 4096 (N a multiple of 8 on the K x N side), then N x K */
		check_case("fused static", m, n, k, 1, PATH_FUSED, 1, 0, NULL);
		if (s <= 4096)
			check_case("fused static", m, n, k, 0, PATH_FUSED, 1, ag, NULL);
	}
	/* tails: shards not a multiple of 128 rows (tile rows straddle shards), shorter than a
	 * tile, N not a multiple of 8 (N x K B only) */
	check_case("fused static tail", 1000 * r, ag ? 1000 : 3000, ag ? 520 : 192, 1, PATH_FUSED,
		   1, ag, NULL);
	check_case("fused static tail", 1000 * r, ag ? 1000 : 3000, ag ? 520 : 192, 0, PATH_FUSED,
		   1, 0, NULL);
	check_case("fused static tail", 40 * r, 1003, 64, 1, PATH_FUSED, 1, ag, NULL);
	check_case("fused static tail", 200 * r, ag ? 264 : 520, 72, 0, PATH_FUSED, 1, 0, NULL);
	/* the adaptive controller moves the split between calls: three calls per shape */
	set_env("MKERNEL_SM_POLICY", "adaptive");
	check_case("fused adaptive", 1000 * r, ag ? 1000 : 3000, ag ? 520 : 192, 0, PATH_FUSED, 3,
		   0, NULL);
	if (!quick) {
		check_case("fused adaptive", 4096, ag ? 4096 / r : 4096, ag ? 4096 : 256, 1,
			   PATH_FUSED, 3, ag, NULL);
		check_case("fused adaptive", 8192, ag ? 8192 / r : 8192, ag ? 8192 : 512, 1,
			   PATH_FUSED, 3, 0, NULL);
	}
	set_env("MKERNEL_SM_POLICY", "static");
	/* the unfused path: forced, chosen by the cost model, for K % 8, for fp16 */
	scratch_mark();
	check_case("unfused forced", 1000 * r, ag ? 1000 : 3000, ag ? 520 : 192, 1, PATH_UNFUSED,
		   1, ag, "FUSED=0");
	if (!ag)
		scratch_expect("unfused forced"); /* the all-gather's writes aGathered here */
	check_case("default (cost model)", 256 * r, 256, 64, 1, PATH_AUTO, 1, 0, NULL);
	check_case("default (cost model)", 4096, ag ? 4096 / r : 4096, ag ? 4096 : 256, 1,
		   PATH_AUTO, 1, 0, NULL);
	/* a shape the engine cannot run says so, whether fused was asked or left to the cost
	 * model (the shape rules come before it) */
	check_path("fused asked, K % 8 != 0", 512 * r, 512, 100, 1, PATH_FUSED, PATH_UNFUSED, 1, 0,
		   "K must be a multiple of 8");
	check_path("default, K % 8 != 0", 512 * r, 512, 100, 1, PATH_AUTO, PATH_UNFUSED, 1, 0,
		   "K must be a multiple of 8");
	if (ag)
		check_pipeline();
	check_fp16_fallback();
	check_small_heap();
	check_back_to_back(quick ? 10 : 100);
	check_graph();
}

int main(int argc, char **argv)
{
	mkConfig_t cfg = MK_CONFIG_INITIALIZER;
	int rc, quick, big, do_bench, kill, top, heap_top, ops[2], nops;
	const uint64_t t0 = mk_now_ns();
	double nccl_s, init_s;
	struct rank_args a;
	const char *op;

	rc = rank_args_parse(argc, argv,
			     "[--op rs|ag|both] [--quick] [--big] [--bench] [--bottom N] [--top N] [--kill]", &a);
	if (rc)
		return rc;
	g_nranks = a.nranks;
	op = opt_str(argc, argv, "--op", "rs");
	quick = rank_has_opt(argc, argv, "--quick");
	big = rank_has_opt(argc, argv, "--big");
	do_bench = rank_has_opt(argc, argv, "--bench");
	kill = rank_has_opt(argc, argv, "--kill");
	/* both: the tests of one op after the other on one comm (one start-up for two ops, and
	 * their workspaces side by side, as an application keeps them) */
	nops = strcmp(op, "both") == 0 ? 2 : 1;
	ops[0] = strcmp(op, "ag") == 0 ? OP_AG : OP_RS;
	ops[1] = OP_AG;
	if (nops == 2 && (kill || do_bench)) {
		fprintf(stderr, "--op both is for the tests: --kill and --bench take rs or ag\n");
		return 2;
	}
	top = opt_int(argc, argv, "--top", quick ? 4096 : g_nranks == 1 || big ? 32768 : 16384);
	/* quick: a first check, every kind of case once at small sizes; a hang is named within a
	 * minute (the launcher's limit for a quick run is short) */
	g_dog_cap = quick ? 60 : 0;
	signal(SIGALRM, dog_bark);
	g_op = ops[0];
	set_path(PATH_FUSED);
	rank_nccl_init(&a, &g_nccl);
	nccl_s = (mk_now_ns() - t0) / 1e9;
	/* the kill's shape is 2048 (a larger heap only costs start-up: a host mirror as large as
	 * the heap where the transport cannot register GPU memory) */
	heap_top = kill ? 2048 : big || do_bench ? top : quick ? 4096 : 16384;
	cfg.heapBytes = heap_room;
	for (int i = 0; i < nops; i++)
		cfg.heapBytes += heap_for(ops[i], heap_top);
	cfg.timeoutMs = kill ? 3000 : 20000; /* a hang fails well inside the launcher's limit */
	NK(mkCommInit(g_nccl, &cfg, &g_comm));
	init_s = (mk_now_ns() - t0) / 1e9 - nccl_s;
	g_share = mk_sp_share(g_comm);
	CK(cudaMalloc((void **)&g_chk, sizeof(*g_chk)));
	CK(cudaEventCreate(&g_e0));
	CK(cudaEventCreate(&g_e1));
	printf("rank %d: %s, node %d/%d local %d/%d, %d rank(s) on this GPU (%d SMs each), heap "
	       "%zu MiB\n",
	       a.rank, nops == 2 ? "gemm_rs and ag_gemm" : op_name(), g_comm->topo.node,
	       g_comm->topo.nnodes, g_comm->topo.local_rank, g_comm->topo.nlocal, g_comm->gpu_share,
	       g_share, cfg.heapBytes >> 20);
	fflush(stdout);
	expect(g_comm->topo.nnodes == a.nnodes && g_comm->topo.nlocal == a.nlocal,
	       "node discovery agrees with the launcher's layout");
	if (kill)
		return run_kill(cfg.timeoutMs / 1e3);
	if (do_bench)
		bench(opt_int(argc, argv, "--bottom", 0), top);
	for (int i = 0; !do_bench && i < nops; i++) {
		g_op = ops[i];
		set_path(PATH_FUSED);
		tests(quick, big, opt_int(argc, argv, "--bottom", 0));
	}
	NK(mkCommDestroy(g_comm));
	NK(ncclCommDestroy(g_nccl));
	print_times(nccl_s, init_s, (mk_now_ns() - t0) / 1e9);
	printf("rank %d: %d failure(s)\n", a.rank, g_failures);
	return g_failures ? 1 : 0;
}
