// SPDX-License-Identifier: Apache-2.0
/*
 * mkRingAttention end to end, one process per rank (scripts/gpu/runtime-comm.sh on the layouts
 * s, a, b, c). Every input element is a function of (case, tensor, batch, global position, head,
 * column), so each rank builds its own shard (zigzag rows when causal) and, from the whole
 * sequence, the reference: mkAttention over all R x seqLocal tokens on this GPU, whose rows of
 * this rank's positions the ring's output must match.
 *
 * Every case prints one line: ok/FAIL, the path the call took (asserted: a silent fallback fails
 * the case), elements outside tolerance with the first one (batch, row, head, column, got, want),
 * the largest error and the wall time; a watchdog (SIGALRM) names a case that hangs.
 *
 * Tolerances: O within 8e-3 max|V| + 2^-6 |ref|, LSE within 2e-4 + 5e-5 |ref|: both sides round
 * P to bf16 before P V, in different groupings (the ring per step, the reference per block of
 * the whole row), and the ring merges fp32 partials; a missing or doubled step moves O by the
 * step's share of the row and LSE by ln of it, far outside.
 *
 * Cases: bad arguments (ncclInvalidArgument, before anything runs); per shape (D 64 and 128,
 * causal and not, GQA, seqLocal 2, 130, 256, 1000, 4096) the fused path forced and the unfused
 * path forced; 20 fused calls back to back into 20 poisoned outputs, each checked; a fused call
 * captured in a CUDA graph and replayed three times (poisoned before each); a new shape under
 * capture (ncclInvalidUsage, nothing launched); ranks calling with different shapes
 * (ncclInvalidArgument on every rank). --kill: the last rank dies while the others are inside a
 * fused call; they must see an async error within the timeout. --bench: B 4, H 16, D 128, causal
 * and not, seqLocal 1536..12288: the fused call against ncclAllGather + the attention engine and
 * against a ring of ncclSend/ncclRecv + the engine per step, interleaved, medians of the slowest
 * rank, JSON lines from rank 0 (emulated: ranks share one GPU).
 *
 * usage: test-ring-attention-gpu RANK NRANKS IDFILE NNODES NLOCAL [--quick] [--kill] [--bench]
 * Exit: 0 pass, 1 fail, 3 watchdog, 77 no CUDA device.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "mkernel.h"
#include "fused/attn/attn.h"
#include "fused/bench/fill.cuh"
#include "fused/ops/ring_attention_host.h"
#include "fused/runtime/comm.h"
extern "C" {
#include "mk/clock.h"
#include "mk/param.h"
}

#include "rank_check.h"

typedef __nv_bfloat16 bf16;

enum { PATH_UNFUSED = 0, PATH_FUSED = 1, PATH_AUTO = -1 };

static int g_nranks;
static mkComm_t g_comm;
static ncclComm_t g_nccl;

/* ---- watchdog: a case that does not finish in time is named, and the rank exits 3 ---- */

static char g_dog_msg[320];
static size_t g_dog_len;
static uint64_t g_case_t0;

static void dog_bark(int sig)
{
	(void)sig;
	if (write(1, g_dog_msg, g_dog_len) < 0 || write(2, g_dog_msg, g_dog_len) < 0)
		_exit(3);
	_exit(3);
}

static void case_begin(const char *name, unsigned int seconds)
{
	int n = snprintf(g_dog_msg, sizeof(g_dog_msg),
			 "rank %d: FAIL WATCHDOG: '%s' still running after %u s\n", g_rank, name,
			 seconds);

	g_dog_len = n < (int)sizeof(g_dog_msg) ? (size_t)n : sizeof(g_dog_msg) - 1;
	g_case_t0 = mk_now_ns();
	alarm(seconds);
}

static double case_end(void)
{
	alarm(0);
	return (mk_now_ns() - g_case_t0) / 1e9;
}

static void set_path(int path)
{
	if (path == PATH_AUTO)
		unsetenv("MKERNEL_RING_ATTN_FUSED");
	else
		setenv("MKERNEL_RING_ATTN_FUSED", path == PATH_FUSED ? "1" : "0", 1);
	mk_param_reset_all();
}

/* ---- one problem: the whole sequence (reference) and my shard ---- */

struct prob {
	int B, Hq, Hkv, sl, D, causal;
	long long S;	      /* whole sequence */
	size_t nq, nkv, nlse; /* my shard's elements */
	size_t fq, fkv, flse; /* the whole sequence's */
	bf16 *q, *k, *v, *o;  /* my shard */
	float *lse;
	bf16 *q_f, *k_f, *v_f, *o_f; /* whole sequence (reference) */
	float *lse_f;
	bf16 *o_ref; /* the reference's rows of my positions */
	float *lse_ref;
	int *pos_d; /* global position of my row i */
	float vmax;
};

/* Element (b, global row p, h, d) of tensor t of case `seed`: N(0, 1)-like, the same on every
 * rank. Written where row `row` of a [B][rows][H][D] tensor lives. */
__global__ void shard_fill(bf16 *out, int B, int rows, int H, int D, const int *pos, uint32_t seed)
{
	const size_t n = (size_t)B * rows * H * D;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t d = i % D, h = (i / D) % H, r = (i / D / H) % rows,
			     b = i / D / H / rows;
		const long long p = pos != NULL ? pos[r] : (long long)r;
		const uint32_t key =
			(uint32_t)(((b * 1000003ull + (uint64_t)p) * 131ull + h) * 257ull + d);
		const uint32_t x = mk_fill_hash(key ^ seed), y = mk_fill_hash(x ^ 0x9e3779b9u);
		const float u1 = ((float)(x >> 8) + 1.0f) / 16777217.0f,
			    u2 = (float)(y >> 8) / 16777216.0f;

		out[i] = __float2bfloat16(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
	}
}

/* The reference's rows of my positions: o_ref[b][i] = o_f[b][pos[i]], lse likewise. */
__global__ void shard_gather(const bf16 *o_f, const float *lse_f, bf16 *o_ref, float *lse_ref,
			     int B, int rows, long long S, int H, int D, const int *pos)
{
	const size_t n = (size_t)B * rows * H * D;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t d = i % D, h = (i / D) % H, r = (i / D / H) % rows,
			     b = i / D / H / rows;

		o_ref[i] = o_f[((b * S + pos[r]) * H + h) * D + d];
		if (d == 0)
			lse_ref[(b * H + h) * rows + r] = lse_f[(b * H + h) * S + pos[r]];
	}
}

struct chk {
	unsigned long long bad, first;
	unsigned int max_err;
	double se, sw; /* sums of (got - want)^2 and want^2 (O only) */
};

__global__ void chk_o(const bf16 *got, const bf16 *want, size_t n, float atol, float rtol,
		      struct chk *c)
{
	double se = 0, sw = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float g = __bfloat162float(got[i]), w = __bfloat162float(want[i]);
		const float e = fabsf(g - w);

		if (!(e <= atol + rtol * fabsf(w))) {
			atomicAdd(&c->bad, 1ull);
			atomicMin(&c->first, (unsigned long long)i);
		}
		if (e == e)
			atomicMax(&c->max_err, __float_as_uint(e));
		se += (double)e * e;
		sw += (double)w * w;
	}
	atomicAdd(&c->se, se);
	atomicAdd(&c->sw, sw);
}

__global__ void chk_lse(const float *got, const float *want, size_t n, struct chk *c)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float g = got[i], w = want[i];
		const float e = (isinf(g) || isinf(w)) ? (g == w ? 0.0f : INFINITY) : fabsf(g - w);

		if (!(e <= 2e-4f + 5e-5f * fabsf(w))) {
			atomicAdd(&c->bad, 1ull);
			atomicMin(&c->first, (unsigned long long)i);
		}
		if (e == e && e != INFINITY)
			atomicMax(&c->max_err, __float_as_uint(e));
	}
}

static struct chk *g_chk;

static void prob_open(struct prob *p, int B, int Hq, int Hkv, int sl, int D, int causal,
		      uint32_t seed)
{
	struct mk_ring_geom g;
	struct mk_ring_call x;
	int *pos;

	memset(p, 0, sizeof(*p));
	memset(&x, 0, sizeof(x));
	x.batch = B;
	x.heads_q = Hq;
	x.heads_kv = Hkv;
	x.seq_local = sl;
	x.head_dim = D;
	x.causal = causal;
	p->B = B;
	p->Hq = Hq;
	p->Hkv = Hkv;
	p->sl = sl;
	p->D = D;
	p->causal = causal;
	p->S = (long long)sl * g_nranks;
	p->nq = (size_t)B * sl * Hq * D;
	p->nkv = (size_t)B * sl * Hkv * D;
	p->nlse = (size_t)B * Hq * sl;
	p->fq = (size_t)B * p->S * Hq * D;
	p->fkv = (size_t)B * p->S * Hkv * D;
	p->flse = (size_t)B * Hq * p->S;
	p->vmax = 5.0f;
	CK(cudaMalloc((void **)&p->q, p->nq * 2));
	CK(cudaMalloc((void **)&p->k, p->nkv * 2));
	CK(cudaMalloc((void **)&p->v, p->nkv * 2));
	CK(cudaMalloc((void **)&p->o, p->nq * 2));
	CK(cudaMalloc((void **)&p->lse, p->nlse * 4));
	CK(cudaMalloc((void **)&p->o_ref, p->nq * 2));
	CK(cudaMalloc((void **)&p->lse_ref, p->nlse * 4));
	CK(cudaMalloc((void **)&p->pos_d, (size_t)sl * sizeof(int)));
	pos = (int *)malloc((size_t)sl * sizeof(int));
	mk_ring_geom_of(g_comm, &x, &g);
	for (int i = 0; i < sl; i++)
		pos[i] = (int)mk_ring_pos(&g, g_rank, i);
	CK(cudaMemcpy(p->pos_d, pos, (size_t)sl * sizeof(int), cudaMemcpyHostToDevice));
	free(pos);
	shard_fill<<<1024, 256>>>(p->q, B, sl, Hq, D, p->pos_d, seed * 3 + 1);
	shard_fill<<<1024, 256>>>(p->k, B, sl, Hkv, D, p->pos_d, seed * 3 + 2);
	shard_fill<<<1024, 256>>>(p->v, B, sl, Hkv, D, p->pos_d, seed * 3 + 3);
	/* the reference: the whole sequence on this GPU */
	CK(cudaMalloc((void **)&p->q_f, p->fq * 2));
	CK(cudaMalloc((void **)&p->k_f, p->fkv * 2));
	CK(cudaMalloc((void **)&p->v_f, p->fkv * 2));
	CK(cudaMalloc((void **)&p->o_f, p->fq * 2));
	CK(cudaMalloc((void **)&p->lse_f, p->flse * 4));
	shard_fill<<<1024, 256>>>(p->q_f, B, (int)p->S, Hq, D, NULL, seed * 3 + 1);
	shard_fill<<<1024, 256>>>(p->k_f, B, (int)p->S, Hkv, D, NULL, seed * 3 + 2);
	shard_fill<<<1024, 256>>>(p->v_f, B, (int)p->S, Hkv, D, NULL, seed * 3 + 3);
	CK(cudaGetLastError());
	NK(mkAttention(p->q_f, p->k_f, p->v_f, p->o_f, p->lse_f, B, Hq, Hkv, (int)p->S, (int)p->S,
		       D, causal, 0));
	shard_gather<<<1024, 256>>>(p->o_f, p->lse_f, p->o_ref, p->lse_ref, B, sl, p->S, Hq, D,
				    p->pos_d);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	cudaFree(p->q_f);
	cudaFree(p->k_f);
	cudaFree(p->v_f);
	cudaFree(p->o_f);
	cudaFree(p->lse_f);
	p->q_f = p->k_f = p->v_f = p->o_f = NULL;
	p->lse_f = NULL;
}

static void prob_close(struct prob *p)
{
	cudaFree(p->q);
	cudaFree(p->k);
	cudaFree(p->v);
	cudaFree(p->o);
	cudaFree(p->lse);
	cudaFree(p->o_ref);
	cudaFree(p->lse_ref);
	cudaFree(p->pos_d);
}

static void poison(const struct prob *p, bf16 *o, float *lse, cudaStream_t st)
{
	CK(cudaMemsetAsync(o, 0xFF, p->nq * 2, st));
	CK(cudaMemsetAsync(lse, 0xFF, p->nlse * 4, st));
}

static ncclResult_t run_ring(const struct prob *p, bf16 *o, float *lse, cudaStream_t st)
{
	return mkRingAttention(p->q, p->k, p->v, o, lse, p->B, p->Hq, p->Hkv, p->sl, p->D,
			       p->causal, g_comm, st);
}

/* 0 when o and lse match the reference; else a description of the first mismatch in d. */
static int check_out(const struct prob *p, const bf16 *o, const float *lse, char *d, size_t len)
{
	struct chk h[2];

	for (int w = 0; w < 2; w++) {
		const struct chk init = { 0, ~0ull, 0, 0.0, 0.0 };

		CK(cudaMemcpy(g_chk, &init, sizeof(init), cudaMemcpyHostToDevice));
		if (w == 0)
			chk_o<<<512, 256>>>(o, p->o_ref, p->nq, 8e-3f * p->vmax, 1.0f / 64, g_chk);
		else
			chk_lse<<<512, 256>>>(lse, p->lse_ref, p->nlse, g_chk);
		CK(cudaGetLastError());
		CK(cudaMemcpy(&h[w], g_chk, sizeof(h[w]), cudaMemcpyDeviceToHost));
	}
	/* The elementwise bound is loose for small |O| (long rows average V to near 0); the
	 * relative Frobenius error catches a wrong or missing step's share there (bf16 rounding
	 * stays near 2^-9, a step's share is tens of percent). */
	const double rel = sqrt(h[0].se / (h[0].sw > 0 ? h[0].sw : 1.0));

	if (h[0].bad == 0 && h[1].bad == 0 && rel < 1e-2) {
		float eo, el;

		memcpy(&eo, &h[0].max_err, 4);
		memcpy(&el, &h[1].max_err, 4);
		snprintf(d, len, "max error O %.3g (relative Frobenius %.2g), LSE %.3g", eo, rel,
			 el);
		return 0;
	}
	if (h[0].bad == 0 && h[1].bad == 0) {
		snprintf(d, len,
			 "O's relative Frobenius error %.3g above 1e-2 (elementwise in bounds)",
			 rel);
		return 1;
	}
	for (int w = 0; w < 2; w++) {
		if (h[w].bad == 0)
			continue;
		const size_t i = h[w].first;
		char where[120];

		if (w == 0) {
			bf16 g, want;

			CK(cudaMemcpy(&g, o + i, 2, cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(&want, p->o_ref + i, 2, cudaMemcpyDeviceToHost));
			snprintf(where, sizeof(where),
				 "O (b %zu, row %zu, h %zu, d %zu): got %.5g want %.5g",
				 i / p->D / p->Hq / p->sl, (i / p->D / p->Hq) % p->sl,
				 (i / p->D) % p->Hq, i % p->D, __bfloat162float(g),
				 __bfloat162float(want));
		} else {
			float g, want;

			CK(cudaMemcpy(&g, lse + i, 4, cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(&want, p->lse_ref + i, 4, cudaMemcpyDeviceToHost));
			snprintf(where, sizeof(where),
				 "LSE (b %zu, h %zu, row %zu): got %.6g want %.6g",
				 i / p->sl / p->Hq, (i / p->sl) % p->Hq, i % p->sl, g, want);
		}
		snprintf(d, len, "%llu of %zu bad, first %s", h[w].bad, w ? p->nlse : p->nq, where);
		return 1;
	}
	return 1;
}

static void shape_name(const struct prob *p, char *s, size_t len)
{
	snprintf(s, len, "B %d H %d/%d seqLocal %d (S %lld) D %d %s", p->B, p->Hq, p->Hkv, p->sl,
		 p->S, p->D, p->causal ? "causal" : "full");
}

/* One call on the forced path, checked; the path it took asserted. */
static void case_path(struct prob *p, int path)
{
	char d[300], s[120], what[480];
	int took, bad;
	double t;
	ncclResult_t r;

	set_path(path);
	shape_name(p, s, sizeof(s));
	case_begin(s, 120);
	poison(p, p->o, p->lse, 0);
	r = run_ring(p, p->o, p->lse, 0);
	CK(cudaStreamSynchronize(0));
	t = case_end();
	took = mk_ring_last_path(g_comm, NULL, 0);
	bad = r != ncclSuccess || check_out(p, p->o, p->lse, d, sizeof(d));
	if (r != ncclSuccess)
		snprintf(d, sizeof(d), "returned %d (%s)", (int)r, ncclGetErrorString(r));
	snprintf(what, sizeof(what), "%s path %s (took %s): %s, %.2f s", s,
		 path == PATH_FUSED ? "fused" : "unfused",
		 took == PATH_FUSED	? "fused"
		 : took == PATH_UNFUSED ? "unfused"
					: "none",
		 d, t);
	expect(!bad && took == path, what);
}

/* 20 fused calls back to back, each into its own poisoned output, checked afterwards. */
static void case_back_to_back(struct prob *p)
{
	const int n = 20;
	bf16 *o[20];
	float *lse[20];
	char d[300], what[400];
	int bad = 0;

	set_path(PATH_FUSED);
	for (int i = 0; i < n; i++) {
		CK(cudaMalloc((void **)&o[i], p->nq * 2));
		CK(cudaMalloc((void **)&lse[i], p->nlse * 4));
		poison(p, o[i], lse[i], 0);
	}
	case_begin("back to back", 240);
	for (int i = 0; i < n; i++)
		bad |= run_ring(p, o[i], lse[i], 0) != ncclSuccess;
	CK(cudaStreamSynchronize(0));
	case_end();
	for (int i = 0; i < n && !bad; i++)
		bad |= check_out(p, o[i], lse[i], d, sizeof(d));
	snprintf(what, sizeof(what), "%d fused calls back to back, no host sync: %s", n,
		 bad ? d : "every output right");
	expect(!bad && mk_ring_last_path(g_comm, NULL, 0) == PATH_FUSED, what);
	for (int i = 0; i < n; i++) {
		cudaFree(o[i]);
		cudaFree(lse[i]);
	}
}

/* A fused call captured in a CUDA graph and replayed three times; then a new shape under capture
 * is refused with ncclInvalidUsage and nothing is captured. */
static void case_graph(struct prob *p)
{
	cudaStream_t st;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	ncclResult_t r;
	char d[300], what[400];
	int bad = 0;

	set_path(PATH_FUSED);
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	NK(run_ring(p, p->o, p->lse, st)); /* the shape is set up outside capture */
	CK(cudaStreamSynchronize(st));
	case_begin("graph", 240);
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	r = run_ring(p, p->o, p->lse, st);
	CK(cudaStreamEndCapture(st, &graph));
	CK(cudaGraphInstantiate(&exec, graph, 0));
	for (int i = 0; i < 3 && !bad; i++) {
		poison(p, p->o, p->lse, st);
		CK(cudaGraphLaunch(exec, st));
		CK(cudaStreamSynchronize(st));
		bad |= check_out(p, p->o, p->lse, d, sizeof(d));
	}
	case_end();
	snprintf(what, sizeof(what), "fused call captured in a CUDA graph, replayed 3 times: %s",
		 r != ncclSuccess ? "capture failed"
		 : bad		  ? d
				  : "right each time");
	expect(r == ncclSuccess && !bad, what);
	cudaGraphExecDestroy(exec);
	cudaGraphDestroy(graph);
	/* a shape no rank has used: refused under capture */
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	r = mkRingAttention(p->q, p->k, p->v, p->o, p->lse, 1, p->Hq, p->Hkv, 2, p->D, p->causal,
			    g_comm, st);
	CK(cudaStreamEndCapture(st, &graph));
	{
		size_t nodes = 0;

		CK(cudaGraphGetNodes(graph, NULL, &nodes));
		snprintf(what, sizeof(what),
			 "a new shape under capture: %s (%d), %zu graph nodes captured",
			 ncclGetErrorString(r), (int)r, nodes);
		expect(r == ncclInvalidUsage && nodes == 0, what);
	}
	cudaGraphDestroy(graph);
	CK(cudaStreamDestroy(st));
}

static void case_bad_args(void)
{
	bf16 *x;
	char what[200];

	CK(cudaMalloc((void **)&x, 1 << 20));
	snprintf(what, sizeof(what), "bad arguments -> ncclInvalidArgument, nothing launched");
	expect(mkRingAttention(x, x, x, x, NULL, 1, 4, 4, 64, 96, 0, g_comm, 0) ==
			       ncclInvalidArgument &&
		       mkRingAttention(x, x, x, x, NULL, 1, 4, 4, 63, 128, 1, g_comm, 0) ==
			       ncclInvalidArgument &&
		       mkRingAttention(x, x, x, x, NULL, 1, 4, 3, 64, 128, 0, g_comm, 0) ==
			       ncclInvalidArgument &&
		       mkRingAttention(NULL, x, x, x, NULL, 1, 4, 4, 64, 128, 0, g_comm, 0) ==
			       ncclInvalidArgument &&
		       mkRingAttention(x, x, x, x, NULL, 1, 4, 4, 64, 128, 0, NULL, 0) ==
			       ncclInvalidArgument,
	       what);
	cudaFree(x);
}

/* Ranks calling with different shapes: every rank gets ncclInvalidArgument (a new shape's first
 * call compares them), none hangs. */
static void case_mismatch(void)
{
	const int sl = g_rank == 0 ? 96 : 64;
	bf16 *x;
	ncclResult_t r;
	char what[200];

	if (g_nranks == 1)
		return;
	set_path(PATH_FUSED);
	CK(cudaMalloc((void **)&x, 1 << 22));
	case_begin("mismatch", 120);
	r = mkRingAttention(x, x, x, x, NULL, 1, 4, 4, sl, 128, 0, g_comm, 0);
	cudaDeviceSynchronize();
	case_end();
	snprintf(what, sizeof(what), "ranks with different seqLocal (mine %d): %s", sl,
		 ncclGetErrorString(r));
	expect(r == ncclInvalidArgument, what);
	cudaFree(x);
}

/* ---- a rank dies mid-call ---- */

static int run_kill(double timeout_s)
{
	struct prob p;
	ncclResult_t ae = ncclSuccess;
	char d[300], what[400];
	float *one;
	uint64_t t0;

	set_path(PATH_FUSED);
	prob_open(&p, 1, 4, 4, 1024, 128, 1, 77);
	NK(run_ring(&p, p.o, p.lse, 0));
	CK(cudaStreamSynchronize(0));
	expect(check_out(&p, p.o, p.lse, d, sizeof(d)) == 0 &&
		       mk_ring_last_path(g_comm, NULL, 0) == PATH_FUSED,
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
	NK(run_ring(&p, p.o, p.lse, 0));
	cudaStreamSynchronize(0);
	NK(run_ring(&p, p.o, p.lse, 0));
	cudaStreamSynchronize(0);
	NK(mkCommGetAsyncError(g_comm, &ae));
	case_end();
	snprintf(what, sizeof(what),
		 "dead peer mid-call: both calls ended after %.2f s (timeout %.1f s), async error "
		 "%d (%s)",
		 (mk_now_ns() - t0) / 1e9, timeout_s, (int)ae, ncclGetErrorString(ae));
	expect(ae != ncclSuccess && (mk_now_ns() - t0) / 1e9 < 4 * timeout_s + 5, what);
	NK(mkCommAbort(g_comm));
	ncclCommAbort(g_nccl);
	printf("rank %d: %d failure(s)\n", g_rank, g_failures);
	return g_failures ? 1 : 0;
}

/* ---- benchmark ---- */

static cudaEvent_t g_e0, g_e1;

enum { B_FUSED, B_AG, B_P2P, B_STEPS };
static const char *const b_names[B_STEPS] = { "fused", "allgather_engine", "p2p_ring_engine" };

/*
 * The ring of ncclSend / ncclRecv the ring-flash-attention pattern uses: R - 1 steps, each
 * passing the current K, V block to rank + 1 while the engine computes on it (two buffers),
 * partials merged in step order through the engine's fp32 epilogue modes. Non-causal only: the
 * step list is the contiguous ring's.
 */
static void p2p_ring(const struct prob *p, bf16 *kv[2][2], float *acc, cudaStream_t comp,
		     cudaStream_t comm, cudaEvent_t *ev)
{
	const int R = g_nranks, next = (g_rank + 1) % R, prev = (g_rank + R - 1) % R;
	const size_t blk = p->nkv;

	CK(cudaMemcpyAsync(kv[0][0], p->k, blk * 2, cudaMemcpyDeviceToDevice, comp));
	CK(cudaMemcpyAsync(kv[0][1], p->v, blk * 2, cudaMemcpyDeviceToDevice, comp));
	for (int s = 0; s < R; s++) {
		const int cur = s & 1;
		struct mk_attn_args a;

		CK(cudaEventRecord(ev[0], comp));
		if (s + 1 < R) {
			CK(cudaStreamWaitEvent(comm, ev[0], 0));
			NK(ncclGroupStart());
			for (int t = 0; t < 2; t++) {
				NK(ncclSend(kv[cur][t], blk, ncclBfloat16, next, g_nccl, comm));
				NK(ncclRecv(kv[cur ^ 1][t], blk, ncclBfloat16, prev, g_nccl, comm));
			}
			NK(ncclGroupEnd());
		}
		mk_attn_args_init(&a, p->q, kv[cur][0], kv[cur][1], p->o, p->lse, p->B, p->Hq,
				  p->Hkv, p->sl, p->sl, p->D, 0);
		a.acc = acc;
		a.epi = s == 0	     ? MK_ATTN_EPI_PARTIAL
			: s + 1 == R ? MK_ATTN_EPI_MERGE_OUT
				     : MK_ATTN_EPI_MERGE;
		if (R == 1)
			a.epi = MK_ATTN_EPI_STORE;
		if (mk_attn_run(&a, comp, NULL) != 0)
			exit(1);
		if (s + 1 < R) {
			CK(cudaEventRecord(ev[1], comm));
			CK(cudaStreamWaitEvent(comp, ev[1], 0));
		}
	}
}

static void bench(int quick)
{
	static const int sls[] = { 1536, 3072, 6144, 12288 };
	const int rounds = 3, reps = 3;
	cudaStream_t comm;
	cudaEvent_t ev[2];

	CK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming));
	CK(cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming));
	for (int causal = 0; causal < 2; causal++) {
		for (size_t si = 0; si < sizeof(sls) / sizeof(sls[0]); si++) {
			struct prob p;
			bf16 *kv[2][2];
			float *acc, t[B_STEPS][rounds * reps], med[B_STEPS], all[B_STEPS];
			char d[300];
			int n[B_STEPS] = { 0 };

			if (quick && sls[si] > 3072)
				continue;
			prob_open(&p, 4, 16, 16, sls[si], 128, causal, 500 + sls[si]);
			for (int i = 0; i < 2; i++)
				for (int j = 0; j < 2; j++)
					CK(cudaMalloc((void **)&kv[i][j], p.nkv * 2));
			CK(cudaMalloc((void **)&acc, p.nq * 4));
			/* warm up every step; the fused one is checked */
			set_path(PATH_FUSED);
			NK(run_ring(&p, p.o, p.lse, 0));
			CK(cudaStreamSynchronize(0));
			expect(check_out(&p, p.o, p.lse, d, sizeof(d)) == 0 &&
				       mk_ring_last_path(g_comm, NULL, 0) == PATH_FUSED,
			       "bench: fused call right before timing");
			set_path(PATH_UNFUSED);
			NK(run_ring(&p, p.o, p.lse, 0));
			if (!causal) {
				poison(&p, p.o, p.lse, 0);
				p2p_ring(&p, kv, acc, 0, comm, ev);
				CK(cudaDeviceSynchronize());
				expect(check_out(&p, p.o, p.lse, d, sizeof(d)) == 0,
				       "bench: the ncclSend/ncclRecv ring baseline is right");
			}
			CK(cudaDeviceSynchronize());
			for (int r = 0; r < rounds; r++) {
				for (int step = 0; step < B_STEPS; step++) {
					if (step == B_P2P && causal)
						continue;
					set_path(step == B_FUSED ? PATH_FUSED : PATH_UNFUSED);
					for (int i = 0; i < reps; i++) {
						float ms;

						NK(ncclAllReduce(acc, acc, 1, ncclFloat32, ncclSum,
								 g_nccl, 0)); /* start together */
						CK(cudaEventRecord(g_e0, 0));
						if (step == B_P2P)
							p2p_ring(&p, kv, acc, 0, comm, ev);
						else
							NK(run_ring(&p, p.o, p.lse, 0));
						CK(cudaEventRecord(g_e1, 0));
						CK(cudaEventSynchronize(g_e1));
						CK(cudaEventElapsedTime(&ms, g_e0, g_e1));
						t[step][n[step]++] = ms;
					}
				}
			}
			for (int step = 0; step < B_STEPS; step++) {
				med[step] = 0;
				if (n[step] == 0)
					continue;
				qsort(t[step], n[step], sizeof(float), cmp_f);
				med[step] = t[step][n[step] / 2];
			}
			/* the slowest rank's median */
			CK(cudaMemcpy(acc, med, sizeof(med), cudaMemcpyHostToDevice));
			NK(ncclAllReduce(acc, acc, B_STEPS, ncclFloat32, ncclMax, g_nccl, 0));
			CK(cudaMemcpy(all, acc, sizeof(all), cudaMemcpyDeviceToHost));
			if (g_rank == 0) {
				const double flops = 4.0 * p.B * p.Hq * (double)p.S * p.S * p.D *
						     (causal ? 0.5 : 1.0) / g_nranks;

				printf("{\"bench\":\"ring_attention\",\"emulated\":true,\"nranks\":"
				       "%d,"
				       "\"nnodes\":%d,\"nlocal\":%d,\"B\":%d,\"H\":%d,\"D\":%d,"
				       "\"causal\":%d,\"seq_local\":%d,\"seq_total\":%lld",
				       g_nranks, g_comm->topo.nnodes, g_comm->topo.nlocal, p.B,
				       p.Hq, p.D, causal, p.sl, p.S);
				for (int step = 0; step < B_STEPS; step++)
					if (all[step] > 0)
						printf(",\"%s_ms\":%.3f,\"%s_tflops_per_rank\":%."
						       "1f",
						       b_names[step], all[step], b_names[step],
						       flops / (all[step] * 1e-3) / 1e12);
				printf(",\"speedup_vs_allgather\":%.3f", all[B_AG] / all[B_FUSED]);
				if (all[B_P2P] > 0)
					printf(",\"speedup_vs_p2p_ring\":%.3f",
					       all[B_P2P] / all[B_FUSED]);
				printf("}\n");
				fflush(stdout);
			}
			for (int i = 0; i < 2; i++)
				for (int j = 0; j < 2; j++)
					cudaFree(kv[i][j]);
			cudaFree(acc);
			prob_close(&p);
		}
	}
	cudaStreamDestroy(comm);
}

/* ---- the test cases ---- */

static void tests(int quick)
{
	static const int shapes[][6] = {
		/* B, Hq, Hkv, seqLocal, D, causal */
		{ 2, 4, 4, 256, 128, 1 },  { 2, 4, 4, 256, 128, 0 }, { 1, 4, 2, 130, 64, 1 },
		{ 2, 2, 1, 1000, 128, 1 }, { 1, 8, 8, 512, 64, 0 },  { 1, 2, 2, 2, 128, 1 },
		{ 1, 4, 4, 4096, 128, 1 }, { 1, 4, 4, 4096, 64, 0 },
	};
	const size_t n = quick ? 4 : sizeof(shapes) / sizeof(shapes[0]);
	struct prob p;

	case_bad_args();
	for (size_t s = 0; s < n; s++) {
		prob_open(&p, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
			  shapes[s][5], (uint32_t)(s + 1));
		if (g_nranks > 1)
			case_path(&p, PATH_FUSED);
		case_path(&p, PATH_UNFUSED);
		if (s == 0 && g_nranks > 1) {
			case_back_to_back(&p);
			case_graph(&p);
		}
		prob_close(&p);
	}
	case_mismatch();
}

int main(int argc, char **argv)
{
	mkConfig_t cfg = MK_CONFIG_INITIALIZER;
	int rc, quick, kill, do_bench;
	struct rank_args a;

	rc = rank_args_parse(argc, argv, "[--quick] [--kill] [--bench]", &a);
	if (rc)
		return rc;
	g_nranks = a.nranks;
	quick = rank_has_opt(argc, argv, "--quick");
	kill = rank_has_opt(argc, argv, "--kill");
	do_bench = rank_has_opt(argc, argv, "--bench");
	signal(SIGALRM, dog_bark);
	rank_nccl_init(&a, &g_nccl);
	/* bench: my K, V block and a landing slot per other node at seqLocal 12288, B 4, H 16 */
	cfg.heapBytes = do_bench ? ((size_t)2 * a.nnodes * 4 * 12288 * 16 * 128 * 2 + (64u << 20))
				 : (256u << 20);
	cfg.timeoutMs = kill ? 3000 : 20000; /* a hang fails well inside the launcher's limit */
	NK(mkCommInit(g_nccl, &cfg, &g_comm));
	CK(cudaMalloc((void **)&g_chk, sizeof(*g_chk)));
	CK(cudaEventCreate(&g_e0));
	CK(cudaEventCreate(&g_e1));
	printf("rank %d: ring attention, node %d/%d local %d/%d, %d rank(s) on this GPU, heap %zu "
	       "MiB\n",
	       a.rank, g_comm->topo.node, g_comm->topo.nnodes, g_comm->topo.local_rank,
	       g_comm->topo.nlocal, g_comm->gpu_share, cfg.heapBytes >> 20);
	fflush(stdout);
	expect(g_comm->topo.nnodes == a.nnodes && g_comm->topo.nlocal == a.nlocal,
	       "node discovery agrees with the launcher's layout");
	if (kill)
		return run_kill(cfg.timeoutMs / 1e3);
	if (do_bench)
		bench(quick);
	else
		tests(quick);
	NK(mkCommDestroy(g_comm));
	NK(ncclCommDestroy(g_nccl));
	printf("rank %d: %d failure(s)\n", a.rank, g_failures);
	return g_failures ? 1 : 0;
}
