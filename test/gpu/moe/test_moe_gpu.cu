/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu suite, component moe: mkMoeDispatchGemm and mkMoeGemmCombine, one process per rank
 * (scripts/gpu/runtime-comm.sh: layouts s, a, b, c), against a CPU reference every rank computes
 * alone: all inputs are deterministic functions of (rank, token, column) or (expert, row,
 * column), so each rank regenerates what the others hold. No PyTorch.
 *
 * Reference. Dispatch: rank q's rows, expert by expert, then source rank, token, slot (found by
 * walking every rank's routing, independently of the library's plan); out[row] = x_s[t] @
 * w_up[e] in fp64; recvOffsets exact; rows past the last expert untouched. Combine: h is a
 * deterministic function of (rank, row) (not the dispatch's out, so the reference needs no GPU
 * value); y_s[t] = sum over slots of w * (h_q[row] @ w_down[e]) in fp64; tokens without experts
 * give zeros; rows past numTokens untouched. Bounds per element: dispatch 2^-8 |ref| + 1e-5 H
 * (one bf16 rounding, fp32 order); combine 3 x 2^-8 x S + 2^-8 |ref| + 1e-5 I, S the sum of the
 * slots' |weighted row| (a rounding of each expert row, of a node's partial, and of the sum).
 *
 * Cases (every rank, same order): top-1, 2, 4, 8; uniform, one hot expert, half the experts
 * empty, -1 slots, a rank without tokens; token counts that differ per rank and are no
 * multiples of the tile; both weight layouts; three calls in a row on the same buffers. Then bad
 * input on every rank (no hang, same answer everywhere): an expert id out of range on one rank
 * only, maxRecv too small, a bad config, numTokens above maxTokensPerRank, capture of a call
 * that must read counts on the host. --kill: the last rank dies while the others are inside a
 * dispatch and every other rank must get an error within the comm's timeout.
 * Each failure names the first wrong element with its expert, source rank, token and slot.
 *
 * usage: test-moe-gpu RANK NRANKS IDFILE NNODES NLOCAL [--kill] [--quick]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "mkernel.h"
#include "fused/ops/moe_plan.h"
#include "fused/runtime/comm.h"
extern "C" {
#include "mk/clock.h"
#include "mk/param.h"
}
#include "rank_check.h"

static int g_nranks, g_quick;

/* ---- deterministic inputs ---- */

static uint32_t hash3(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t x = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca6bu ^ (c + 0x165667b1u) * 0xc2b2ae35u;

	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/* bf16 bits of a uniform value in [-1, 1) (exactly representable: 8 significant bits). */
static uint16_t val_bf16(uint32_t a, uint32_t b, uint32_t c)
{
	float f = (float)(int)(hash3(a, b, c) % 256) / 128.0f - 1.0f;
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

static double bf(uint16_t v)
{
	uint32_t u = (uint32_t)v << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

enum route { RT_UNIFORM, RT_HOT, RT_HALF_EMPTY, RT_NONE_SLOTS };

struct mcase {
	const char *name;
	int ne_per_rank, topk, hidden, inter, tokens, w_nk;
	enum route route;
	int empty_rank; /* rank with no tokens, -1 none */
	int calls;
};

/* Tokens of rank s in a case: differ per rank, no multiple of the tile, never negative (the
 * 40-token cases gave rank 2 of 4 -34 tokens: its calls were refused alone and the other ranks
 * waited for it). */
static int case_tokens(const struct mcase *mc, int s)
{
	const int less = 37 * (s % 3);

	if (s == mc->empty_rank)
		return 0;
	return mc->tokens > less ? mc->tokens - less : mc->tokens - 3 * (s % 3);
}

/* Expert of (rank s, token t, slot j) given the token's earlier slots: distinct unless -1. */
static int pick_slot(const struct mcase *mc, int ne, int s, int t, int j, uint32_t seed,
		     const int *earlier)
{
	if (mc->route == RT_NONE_SLOTS && hash3(seed + 7, s * 131 + t, j) % 3 == 0)
		return -1;
	for (int tries = 0; tries <= 64; tries++) {
		uint32_t h = hash3(seed, (uint32_t)(s * 100003 + t), (uint32_t)(j * 31 + tries));
		int e = (int)(h % (uint32_t)ne), dup = 0;

		if (mc->route == RT_HOT && h % 4 != 0)
			e = 1;
		if (mc->route == RT_HALF_EMPTY)
			e = (e / 2) * 2;
		for (int jj = 0; jj < j; jj++)
			dup |= earlier[jj] == e;
		if (!dup)
			return e;
	}
	return -1; /* a token with fewer usable experts than slots: the slot stays empty */
}

/* Expert of (rank s, token t, slot j). The token's slots are picked in order, each against the
 * ones before it; iteratively, because the first version recursed into every earlier slot on
 * every try and took exponential time on a token with more slots than experts (2 experts,
 * top-8: layout s never finished). */
static int route_of(const struct mcase *mc, int ne, int s, int t, int j, uint32_t seed)
{
	int got[64];

	if (j >= 64)
		return -1;
	for (int jj = 0; jj <= j; jj++)
		got[jj] = pick_slot(mc, ne, s, t, jj, seed, got);
	return got[j];
}

struct problem {
	const struct mcase *mc;
	mkMoeConfig_t cfg;
	int ne, eloc, ntok, max_tokens;
	uint32_t seed;
	/* host routing of every rank */
	int *ntoks;
	int32_t **idx;
	float **w;
	/* device */
	uint16_t *x, *wup, *wdown, *out, *h, *y;
	int32_t *didx;
	float *dw;
	void *layout;
	size_t layout_bytes;
};

static float weight_of(int s, int t, int j, uint32_t seed)
{
	return (float)(hash3(seed + 3, (uint32_t)(s * 7919 + t), (uint32_t)j) % 1000) / 1000.0f;
}

/* w_up of global expert e: KN [H][I] or NK [I][H]; w_down KN [I][H] or NK [H][I]. Element
 * (k, n) of the logical K x N matrix. */
static uint16_t wup_el(const struct problem *p, int e, int k, int n)
{
	(void)p;
	return val_bf16(1000003u + (uint32_t)e, (uint32_t)k, (uint32_t)n);
}

static uint16_t wdown_el(const struct problem *p, int e, int k, int n)
{
	(void)p;
	return val_bf16(2000003u + (uint32_t)e, (uint32_t)k, (uint32_t)n);
}

static uint16_t x_el(int s, int t, int c)
{
	return val_bf16(3000017u + (uint32_t)s, (uint32_t)t, (uint32_t)c);
}

static uint16_t h_el(int q, int row, int c)
{
	return val_bf16(4000037u + (uint32_t)q, (uint32_t)row, (uint32_t)c);
}

static void problem_open(struct problem *p, const struct mcase *mc, mkComm_t comm, uint32_t seed)
{
	const int me = comm->rank, H = mc->hidden, I = mc->inter;

	memset(p, 0, sizeof(*p));
	p->mc = mc;
	p->seed = seed;
	p->ne = mc->ne_per_rank * g_nranks;
	p->eloc = mc->ne_per_rank;
	p->max_tokens = mc->tokens;
	p->ntoks = (int *)calloc(g_nranks, sizeof(int));
	p->idx = (int32_t **)calloc(g_nranks, sizeof(*p->idx));
	p->w = (float **)calloc(g_nranks, sizeof(*p->w));
	for (int s = 0; s < g_nranks; s++) {
		const int nt = case_tokens(mc, s);

		p->ntoks[s] = nt;
		p->idx[s] = (int32_t *)malloc(((size_t)nt * mc->topk + 1) * 4);
		p->w[s] = (float *)malloc(((size_t)nt * mc->topk + 1) * 4);
		for (int t = 0; t < nt; t++)
			for (int j = 0; j < mc->topk; j++) {
				p->idx[s][t * mc->topk + j] = route_of(mc, p->ne, s, t, j, seed);
				p->w[s][t * mc->topk + j] = weight_of(s, t, j, seed);
			}
	}
	p->ntok = p->ntoks[me];
	p->cfg.numExperts = p->ne;
	p->cfg.topk = mc->topk;
	p->cfg.hidden = (size_t)H;
	p->cfg.inter = (size_t)I;
	p->cfg.maxTokensPerRank = (size_t)p->max_tokens;
	/* the worst case: no host round trip needed by the capacity rule */
	p->cfg.maxRecv = (size_t)g_nranks * p->max_tokens *
			 (mc->topk < p->eloc ? mc->topk : p->eloc);
	p->cfg.wLayout = mc->w_nk ? mkLayoutRowMajorNK : mkLayoutRowMajorKN;
	p->cfg.type = ncclBfloat16;

	/* device inputs */
	{
		const size_t xe = (size_t)p->max_tokens * H, we = (size_t)p->eloc * H * I;
		uint16_t *hx = (uint16_t *)calloc(xe + 1, 2), *hu = (uint16_t *)malloc(we * 2),
			 *hd = (uint16_t *)malloc(we * 2);

		for (int t = 0; t < p->ntok; t++)
			for (int c = 0; c < H; c++)
				hx[(size_t)t * H + c] = x_el(me, t, c);
		for (int l = 0; l < p->eloc; l++) {
			const int e = me * p->eloc + l;

			for (int k = 0; k < H; k++)
				for (int n = 0; n < I; n++)
					hu[(size_t)l * H * I + (mc->w_nk ? (size_t)n * H + k
									 : (size_t)k * I + n)] =
						wup_el(p, e, k, n);
			for (int k = 0; k < I; k++)
				for (int n = 0; n < H; n++)
					hd[(size_t)l * H * I + (mc->w_nk ? (size_t)n * I + k
									 : (size_t)k * H + n)] =
						wdown_el(p, e, k, n);
		}
		CK(cudaMalloc((void **)&p->x, xe * 2 + 16));
		CK(cudaMalloc((void **)&p->wup, we * 2));
		CK(cudaMalloc((void **)&p->wdown, we * 2));
		CK(cudaMalloc((void **)&p->didx, ((size_t)p->max_tokens * mc->topk + 1) * 4));
		CK(cudaMalloc((void **)&p->dw, ((size_t)p->max_tokens * mc->topk + 1) * 4));
		CK(cudaMemcpy(p->x, hx, xe * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(p->wup, hu, we * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(p->wdown, hd, we * 2, cudaMemcpyHostToDevice));
		if (p->ntok > 0) {
			CK(cudaMemcpy(p->didx, p->idx[me], (size_t)p->ntok * mc->topk * 4,
				      cudaMemcpyHostToDevice));
			CK(cudaMemcpy(p->dw, p->w[me], (size_t)p->ntok * mc->topk * 4,
				      cudaMemcpyHostToDevice));
		}
		free(hx);
		free(hu);
		free(hd);
	}
	{
		const size_t rows = p->cfg.maxRecv;
		uint16_t *hh = (uint16_t *)malloc((rows * I + 1) * 2);

		for (size_t r = 0; r < rows; r++)
			for (int c = 0; c < I; c++)
				hh[r * I + c] = h_el(me, (int)r, c);
		CK(cudaMalloc((void **)&p->out, (rows * I + 1) * 2));
		CK(cudaMalloc((void **)&p->h, (rows * I + 1) * 2));
		CK(cudaMalloc((void **)&p->y, ((size_t)p->max_tokens * H + 1) * 2));
		CK(cudaMemcpy(p->h, hh, rows * I * 2, cudaMemcpyHostToDevice));
		free(hh);
	}
	NK(mkMoeLayoutSize(&p->cfg, comm, &p->layout_bytes));
	CK(cudaMalloc(&p->layout, p->layout_bytes));
}

static void problem_close(struct problem *p)
{
	for (int s = 0; s < g_nranks; s++) {
		free(p->idx[s]);
		free(p->w[s]);
	}
	free(p->idx);
	free(p->w);
	free(p->ntoks);
	cudaFree(p->x);
	cudaFree(p->wup);
	cudaFree(p->wdown);
	cudaFree(p->didx);
	cudaFree(p->dw);
	cudaFree(p->out);
	cudaFree(p->h);
	cudaFree(p->y);
	cudaFree(p->layout);
}

/* (source, token, slot) of every received row of rank q, in the documented order. */
struct pair_ref {
	int s, t, j, e;
};

static int ref_rows_of(const struct problem *p, int q, struct pair_ref *rows, int32_t *off)
{
	int n = 0;

	for (int l = 0; l < p->eloc; l++) {
		const int e = q * p->eloc + l;

		off[l] = n;
		for (int s = 0; s < g_nranks; s++)
			for (int t = 0; t < p->ntoks[s]; t++)
				for (int j = 0; j < p->mc->topk; j++)
					if (p->idx[s][t * p->mc->topk + j] == e) {
						rows[n].s = s;
						rows[n].t = t;
						rows[n].j = j;
						rows[n].e = e;
						n++;
					}
	}
	off[p->eloc] = n;
	return n;
}

/* Row of (s, t, j) at rank q, or -1. */
static int ref_row_find(const struct pair_ref *rows, int n, int s, int t, int j)
{
	for (int i = 0; i < n; i++)
		if (rows[i].s == s && rows[i].t == t && rows[i].j == j)
			return i;
	return -1;
}

static int check_dispatch(const struct problem *p, int me, const char *what)
{
	const int H = p->mc->hidden, I = p->mc->inter, rows_cap = (int)p->cfg.maxRecv;
	struct pair_ref *rows = (struct pair_ref *)malloc(((size_t)rows_cap + 1) * sizeof(*rows));
	int32_t *off = (int32_t *)malloc((p->eloc + 1) * 4), *goff = (int32_t *)malloc((p->eloc + 1) * 4);
	uint16_t *out = (uint16_t *)malloc(((size_t)rows_cap * I + 1) * 2);
	const int n = ref_rows_of(p, me, rows, off);
	unsigned long long bad = 0, untouched_bad = 0;
	char first[300] = "";
	double worst = 0;
	int offs_ok = 1;

	CK(cudaMemcpy(goff, p->layout, (p->eloc + 1) * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(out, p->out, (size_t)rows_cap * I * 2, cudaMemcpyDeviceToHost));
	for (int l = 0; l <= p->eloc; l++)
		offs_ok &= goff[l] == off[l];
	for (int r = 0; r < n; r++) {
		const struct pair_ref *pr = &rows[r];

		for (int col = 0; col < I; col++) {
			double ref = 0;

			for (int k = 0; k < H; k++)
				ref += bf(x_el(pr->s, pr->t, k)) * bf(wup_el(p, pr->e, k, col));
			const double got = bf(out[(size_t)r * I + col]), err = fabs(got - ref);

			if (err <= ldexp(fabs(ref), -8) + 1e-5 * H) {
				worst = err > worst ? err : worst;
				continue;
			}
			if (bad++ == 0)
				snprintf(first, sizeof(first),
					 "row %d (expert %d = local %d, from rank %d token %d slot %d) "
					 "col %d: got %.5g want %.5g",
					 r, pr->e, pr->e - me * p->eloc, pr->s, pr->t, pr->j, col, got,
					 ref);
		}
	}
	for (size_t i = (size_t)n * I; i < (size_t)rows_cap * I; i++)
		untouched_bad += out[i] != 0xFFFF;
	char msg[600];

	snprintf(msg, sizeof(msg),
		 "%s: dispatch: %d rows, recvOffsets %s, %llu wrong (worst ok err %.3g), %llu "
		 "written past the last expert%s%s",
		 what, n, offs_ok ? "exact" : "WRONG", bad, worst, untouched_bad,
		 bad ? "; first: " : "", first);
	expect(offs_ok && bad == 0 && untouched_bad == 0, msg);
	if (!offs_ok) {
		printf("rank %d:   recvOffsets got", me);
		for (int l = 0; l <= p->eloc; l++)
			printf(" %d", goff[l]);
		printf(", want");
		for (int l = 0; l <= p->eloc; l++)
			printf(" %d", off[l]);
		printf("\n");
	}
	free(rows);
	free(off);
	free(goff);
	free(out);
	return bad == 0 && offs_ok;
}

static int check_combine(const struct problem *p, int me, const char *what)
{
	const int H = p->mc->hidden, I = p->mc->inter, k = p->mc->topk;
	const int cap = (int)p->cfg.maxRecv;
	struct pair_ref **rows = (struct pair_ref **)calloc(g_nranks, sizeof(*rows));
	int *nrows = (int *)calloc(g_nranks, sizeof(int));
	int32_t *off = (int32_t *)malloc((p->eloc + 1) * 4);
	uint16_t *y = (uint16_t *)malloc(((size_t)p->max_tokens * H + 1) * 2);
	unsigned long long bad = 0, untouched_bad = 0;
	char first[300] = "";
	double *acc = (double *)malloc((size_t)H * sizeof(double)),
	       *mag = (double *)malloc((size_t)H * sizeof(double));

	for (int q = 0; q < g_nranks; q++) {
		rows[q] = (struct pair_ref *)malloc(((size_t)cap + 1) * sizeof(struct pair_ref));
		nrows[q] = ref_rows_of(p, q, rows[q], off);
	}
	CK(cudaMemcpy(y, p->y, (size_t)p->max_tokens * H * 2, cudaMemcpyDeviceToHost));
	for (int t = 0; t < p->ntok; t++) {
		for (int c = 0; c < H; c++)
			acc[c] = mag[c] = 0;
		for (int j = 0; j < k; j++) {
			const int e = p->idx[me][t * k + j];

			if (e < 0)
				continue;
			const int q = e / p->eloc, r = ref_row_find(rows[q], nrows[q], me, t, j);
			const double w = p->w[me][t * k + j];

			for (int c = 0; c < H; c++) {
				double v = 0;

				for (int kk = 0; kk < I; kk++)
					v += bf(h_el(q, r, kk)) * bf(wdown_el(p, e, kk, c));
				acc[c] += w * v;
				mag[c] += fabs(w * v);
			}
		}
		for (int c = 0; c < H; c++) {
			const double got = bf(y[(size_t)t * H + c]);
			const double bound = 3 * ldexp(mag[c], -8) + ldexp(fabs(acc[c]), -8) + 1e-5 * I;

			if (fabs(got - acc[c]) <= bound)
				continue;
			if (bad++ == 0) {
				int n = snprintf(first, sizeof(first), "token %d col %d: got %.5g want %.5g, experts", t,
						 c, got, acc[c]);

				for (int j = 0; j < k && n < (int)sizeof(first) - 12; j++)
					n += snprintf(first + n, sizeof(first) - n, " %d",
						      p->idx[me][t * k + j]);
			}
		}
	}
	for (size_t i = (size_t)p->ntok * H; i < (size_t)p->max_tokens * H; i++)
		untouched_bad += y[i] != 0xFFFF;
	char msg[600];

	snprintf(msg, sizeof(msg), "%s: combine: %d tokens, %llu wrong, %llu written past numTokens%s%s",
		 what, p->ntok, bad, untouched_bad, bad ? "; first: " : "", first);
	expect(bad == 0 && untouched_bad == 0, msg);
	for (int q = 0; q < g_nranks; q++)
		free(rows[q]);
	free(rows);
	free(nrows);
	free(off);
	free(y);
	free(acc);
	free(mag);
	return bad == 0;
}

static void set_env(const char *name, const char *value)
{
	setenv(name, value, 1);
	mk_param_reset_all();
}

/* The path the dispatch took, from the layout's header. */
static int layout_path(const struct problem *p, mkComm_t comm)
{
	struct mk_moe_geom g;
	struct mk_moe_lmap m;
	struct mk_moe_lhdr hdr;

	mk_moe_geom_init(&g, comm->nranks, comm->rank, comm->topo.nnodes, comm->topo.nlocal,
			 comm->topo.node, comm->topo.local_rank, p->ne, p->mc->topk,
			 (size_t)p->mc->hidden, (size_t)p->mc->inter, (size_t)p->max_tokens,
			 p->cfg.maxRecv, p->mc->w_nk, NULL);
	mk_moe_lmap_init(&g, &m);
	CK(cudaMemcpy(&hdr, (char *)p->layout + m.hdr, sizeof(hdr), cudaMemcpyDeviceToHost));
	return hdr.path;
}

static const char *path_name(int path)
{
	return path == MK_MOE_PATH_FUSED ? "fused" : path == MK_MOE_PATH_UNFUSED ? "unfused" : "?";
}

/* One dispatch + combine on p, checked; returns the dispatch's out (host copy) or NULL. */
static uint16_t *run_once(mkComm_t comm, struct problem *p, int want_path, const char *what,
			  cudaStream_t st)
{
	const int me = comm->rank;
	const size_t out_bytes = p->cfg.maxRecv * p->mc->inter * 2;
	uint16_t *out = NULL;
	ncclResult_t r;
	uint64_t t0;
	char msg[300];

	CK(cudaMemset(p->out, 0xFF, out_bytes));
	CK(cudaMemset(p->y, 0xFF, (size_t)p->max_tokens * p->mc->hidden * 2));
	CK(cudaDeviceSynchronize());
	t0 = mk_now_ns();
	r = mkMoeDispatchGemm(p->x, p->didx, p->dw, p->wup, p->out, p->layout, (size_t)p->ntok,
			      &p->cfg, comm, st);
	CK(cudaStreamSynchronize(st));
	if (r != ncclSuccess) {
		snprintf(msg, sizeof(msg), "%s: mkMoeDispatchGemm returned %d (%s)", what, (int)r,
			 ncclGetErrorString(r));
		expect(0, msg);
		return NULL;
	}
	const double d_ms = (mk_now_ns() - t0) / 1e6;
	const int path = layout_path(p, comm);

	snprintf(msg, sizeof(msg), "%s: the %s path ran (layout says %s)", what,
		 path_name(want_path), path_name(path));
	expect(path == want_path, msg);
	check_dispatch(p, me, what);
	out = (uint16_t *)malloc(out_bytes + 2);
	CK(cudaMemcpy(out, p->out, out_bytes, cudaMemcpyDeviceToHost));
	t0 = mk_now_ns();
	r = mkMoeGemmCombine(p->h, p->wdown, p->y, p->layout, &p->cfg, comm, st);
	CK(cudaStreamSynchronize(st));
	if (r != ncclSuccess) {
		snprintf(msg, sizeof(msg), "%s: mkMoeGemmCombine returned %d (%s)", what, (int)r,
			 ncclGetErrorString(r));
		expect(0, msg);
		return out;
	}
	printf("rank %d: %s: dispatch %.2f ms, combine %.2f ms (wall, synchronised)\n", me, what,
	       d_ms, (mk_now_ns() - t0) / 1e6);
	check_combine(p, me, what);
	return out;
}

/*
 * A case on both paths: the fused kernels (MKERNEL_MOE_FUSED=1; the layout must say they ran)
 * `calls` times on the same buffers, then the unfused path once. Both outs must be bitwise
 * equal: the same rows in the same order through the same grouped GEMM.
 */
static void run_case(mkComm_t comm, const struct mcase *mc, uint32_t seed)
{
	struct problem p;
	char what[200];
	uint16_t *fused = NULL, *unfused;

	problem_open(&p, mc, comm, seed);
	set_env("MKERNEL_MOE_FUSED", "1");
	for (int call = 0; call < mc->calls; call++) {
		snprintf(what, sizeof(what), "%s (%s, fused, call %d)", mc->name,
			 mc->w_nk ? "NK" : "KN", call + 1);
		free(fused);
		fused = run_once(comm, &p, MK_MOE_PATH_FUSED, what, 0);
	}
	set_env("MKERNEL_MOE_FUSED", "0");
	snprintf(what, sizeof(what), "%s (%s, unfused)", mc->name, mc->w_nk ? "NK" : "KN");
	unfused = run_once(comm, &p, MK_MOE_PATH_UNFUSED, what, 0);
	set_env("MKERNEL_MOE_FUSED", "1");
	if (fused != NULL && unfused != NULL) {
		const size_t n = p.cfg.maxRecv * mc->inter;
		size_t diff = 0, first = 0;

		for (size_t i = 0; i < n; i++)
			if (fused[i] != unfused[i] && diff++ == 0)
				first = i;
		snprintf(what, sizeof(what),
			 "%s (%s): fused and unfused dispatch outputs bitwise equal (%zu differ%s)",
			 mc->name, mc->w_nk ? "NK" : "KN", diff, diff ? ", first at row" : "");
		if (diff)
			snprintf(what + strlen(what), sizeof(what) - strlen(what), " %zu col %zu",
				 first / mc->inter, first % mc->inter);
		expect(diff == 0, what);
	}
	free(fused);
	free(unfused);
	problem_close(&p);
}

/*
 * CUDA graph: a dispatch and its combine captured once (after a first call of the shape set up
 * the workspace), replayed with a new routing written into the same device buffers before each
 * replay: every replay's out and y follow the routing of the moment.
 */
static void check_graph(mkComm_t comm)
{
	static const struct mcase mc = { "graph", 4, 2, 128, 64, 200, 1, RT_UNIFORM, -1, 1 };
	struct problem p;
	cudaStream_t st;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	ncclResult_t r1, r2;
	char what[160];

	set_env("MKERNEL_MOE_FUSED", "1");
	problem_open(&p, &mc, comm, 555);
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	free(run_once(comm, &p, MK_MOE_PATH_FUSED, "graph warm-up", st));
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	r1 = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok, &p.cfg,
			       comm, st);
	r2 = mkMoeGemmCombine(p.h, p.wdown, p.y, p.layout, &p.cfg, comm, st);
	CK(cudaStreamEndCapture(st, &graph));
	expect(r1 == ncclSuccess && r2 == ncclSuccess,
	       "graph: dispatch and combine captured (fused, worst-case capacity)");
	CK(cudaGraphInstantiate(&exec, graph, 0));
	for (int replay = 0; replay < 3; replay++) {
		const int me = comm->rank;

		/* a new routing for every rank, the same on all (they regenerate each other's) */
		for (int s = 0; s < g_nranks; s++)
			for (int t = 0; t < p.ntoks[s]; t++)
				for (int j = 0; j < mc.topk; j++)
					p.idx[s][t * mc.topk + j] =
						route_of(&mc, p.ne, s, t, j, 9000u + (uint32_t)replay);
		if (p.ntok > 0)
			CK(cudaMemcpy(p.didx, p.idx[me], (size_t)p.ntok * mc.topk * 4,
				      cudaMemcpyHostToDevice));
		CK(cudaMemset(p.out, 0xFF, p.cfg.maxRecv * mc.inter * 2));
		CK(cudaMemset(p.y, 0xFF, (size_t)p.max_tokens * mc.hidden * 2));
		CK(cudaDeviceSynchronize());
		CK(cudaGraphLaunch(exec, st));
		CK(cudaStreamSynchronize(st));
		snprintf(what, sizeof(what), "graph replay %d", replay + 1);
		check_dispatch(&p, me, what);
		check_combine(&p, me, what);
	}
	cudaGraphExecDestroy(exec);
	cudaGraphDestroy(graph);
	cudaStreamDestroy(st);
	problem_close(&p);
}

/* Bad input, the same on every rank: an answer everywhere, no hang. */
static void check_refusals(mkComm_t comm)
{
	static const struct mcase mc = { "refusals", 4, 2, 64, 32, 40, 0, RT_UNIFORM, -1, 1 };
	struct problem p;
	const int me = comm->rank;
	ncclResult_t r;

	problem_open(&p, &mc, comm, 77);
	/* an expert id out of range on the last rank only: every rank refuses */
	if (me == g_nranks - 1 && p.ntok > 0) {
		const int bad = p.ne + 5;

		CK(cudaMemcpy(p.didx + 1, &bad, 4, cudaMemcpyHostToDevice));
	}
	{
		/* below the worst case the counts are read on the host: the refusal is synchronous */
		mkMoeConfig_t below = p.cfg;

		below.maxRecv = p.cfg.maxRecv - 1;
		r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok,
				      &below, comm, 0);
		expect(r == ncclInvalidArgument,
		       "an expert id out of range on one rank: ncclInvalidArgument on every rank");
	}
	CK(cudaMemcpy(p.didx, p.idx[me], (size_t)p.ntok * mc.topk * 4, cudaMemcpyHostToDevice));
	/* maxRecv too small for the routing: every rank refuses, naming the rows needed */
	{
		mkMoeConfig_t small = p.cfg;

		small.maxRecv = 3;
		r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok,
				      &small, comm, 0);
		expect(r == ncclInvalidUsage, "maxRecv too small: ncclInvalidUsage on every rank");
	}
	/* local rules, nothing collective */
	{
		mkMoeConfig_t c = p.cfg;

		/* on one rank every count is a multiple of the ranks: 0 experts is what is wrong */
		c.numExperts = g_nranks > 1 ? p.ne + 1 : 0;
		r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok, &c,
				      comm, 0);
		expect(r == ncclInvalidArgument,
		       g_nranks > 1 ? "numExperts not a multiple of the ranks: refused"
				    : "numExperts 0: refused");
		c = p.cfg;
		c.topk = 17;
		r = mkMoeGemmCombine(p.h, p.wdown, p.y, p.layout, &c, comm, 0);
		expect(r == ncclInvalidArgument, "topk 17: refused");
		c = p.cfg;
		c.type = ncclFloat16;
		r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok, &c,
				      comm, 0);
		expect(r == ncclInvalidArgument, "float16: refused");
		r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout,
				      (size_t)p.max_tokens + 1, &p.cfg, comm, 0);
		expect(r == ncclInvalidArgument, "numTokens above maxTokensPerRank: refused");
		r = mkMoeDispatchGemm(p.x, p.didx, p.dw, NULL, p.out, p.layout, (size_t)p.ntok,
				      &p.cfg, comm, 0);
		expect(r == ncclInvalidArgument, "NULL wUp: refused");
		r = mkMoeGemmCombine(p.h, p.wdown, p.y, (char *)p.layout + 4, &p.cfg, comm, 0);
		expect(r == ncclInvalidArgument, "misaligned layout: refused");
	}
	/* A call that must read counts on the host cannot be captured. */
	{
		mkMoeConfig_t small = p.cfg;
		cudaStream_t st;
		cudaGraph_t graph;

		CK(cudaStreamCreate(&st));
		small.maxRecv = p.cfg.maxRecv - 1;
		CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
		r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok,
				      &small, comm, st);
		CK(cudaStreamEndCapture(st, &graph));
		expect(r == ncclInvalidUsage,
		       "capture of a call below the worst-case capacity: ncclInvalidUsage");
		cudaGraphDestroy(graph);
		cudaStreamDestroy(st);
	}
	/* and the comm still works afterwards; out preset as run_once does, so rows past the last
	 * expert are checked against what this call wrote, not against what cudaMalloc left */
	CK(cudaMemset(p.out, 0xFF, p.cfg.maxRecv * mc.inter * 2));
	CK(cudaDeviceSynchronize());
	r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok, &p.cfg,
			      comm, 0);
	CK(cudaStreamSynchronize(0));
	expect(r == ncclSuccess, "a good call after the refusals");
	if (r == ncclSuccess)
		check_dispatch(&p, me, "after refusals");
	problem_close(&p);
}

/*
 * A rank dies while the others are inside the second call of a shape (the workspace set up by
 * the first, as in a running model): every other rank's dispatch must end with an error within
 * the comm's timeout. Every rank has finished the first call before the death (an NCCL
 * all-reduce): node peers read each other's rows until their combine ends.
 */
static void check_killed(mkComm_t comm, ncclComm_t nccl)
{
	static const struct mcase mc = { "killed", 4, 2, 64, 32, 40, 0, RT_UNIFORM, -1, 1 };
	struct problem p;
	ncclResult_t r, ae = ncclSuccess;
	float *one;
	uint64_t t0;
	double s;

	problem_open(&p, &mc, comm, 99);
	free(run_once(comm, &p, MK_MOE_PATH_FUSED, "killed: the call before", 0));
	CK(cudaMalloc((void **)&one, 4));
	NK(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, nccl, 0));
	CK(cudaStreamSynchronize(0));
	if (comm->rank == g_nranks - 1) {
		usleep(500000); /* the others are inside their next dispatch by now */
		printf("rank %d: dying now\n", comm->rank);
		fflush(stdout);
		_exit(0);
	}
	t0 = mk_now_ns();
	r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok, &p.cfg,
			      comm, 0);
	if (r == ncclSuccess) {
		/* the fused path returns at once; its kernel's bounded waits end the call */
		cudaStreamSynchronize(0);
		NK(mkCommGetAsyncError(comm, &ae));
	}
	s = (mk_now_ns() - t0) / 1e9;
	printf("rank %d: dispatch with a dead rank: returned %d (%s), async %d (%s), after %.2f s\n",
	       comm->rank, (int)r, ncclGetErrorString(r), (int)ae, ncclGetErrorString(ae), s);
	expect(r != ncclSuccess || ae != ncclSuccess, "dead rank: an error, no hang");
	expect(s < 20, "dead rank: the error came within the comm's timeout (3 s) plus slack");
	NK(mkCommAbort(comm));
	ncclCommAbort(nccl);
	exit(g_failures ? 1 : 0);
}

/*
 * A bad expert id where nothing reads counts on the host (fused, worst-case capacity): the call
 * returns at once, no token moves on any rank, and every rank's comm reports it. The comm's
 * error is sticky: this runs last.
 */
static void check_async_bad_id(mkComm_t comm)
{
	static const struct mcase mc = { "async bad id", 4, 2, 64, 32, 40, 0, RT_UNIFORM, -1, 1 };
	struct problem p;
	ncclResult_t r, ae = ncclSuccess;
	uint16_t *out;
	int untouched = 1;

	set_env("MKERNEL_MOE_FUSED", "1");
	problem_open(&p, &mc, comm, 78);
	if (comm->rank == g_nranks - 1 && p.ntok > 0) {
		const int bad = -7;

		CK(cudaMemcpy(p.didx + 3, &bad, 4, cudaMemcpyHostToDevice));
	}
	CK(cudaMemset(p.out, 0xFF, p.cfg.maxRecv * mc.inter * 2));
	CK(cudaDeviceSynchronize());
	r = mkMoeDispatchGemm(p.x, p.didx, p.dw, p.wup, p.out, p.layout, (size_t)p.ntok, &p.cfg,
			      comm, 0);
	CK(cudaStreamSynchronize(0));
	NK(mkCommGetAsyncError(comm, &ae));
	out = (uint16_t *)malloc(p.cfg.maxRecv * mc.inter * 2);
	CK(cudaMemcpy(out, p.out, p.cfg.maxRecv * mc.inter * 2, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < p.cfg.maxRecv * mc.inter; i++)
		untouched &= out[i] == 0xFFFF;
	{
		char msg[240];

		snprintf(msg, sizeof(msg),
			 "fused, bad id on one rank: the call returns (got %d, %s), the comm reports "
			 "ncclInvalidUsage (got %d, %s)",
			 (int)r, ncclGetErrorString(r), (int)ae, ncclGetErrorString(ae));
		expect(r == ncclSuccess && ae == ncclInvalidUsage, msg);
	}
	expect(untouched, "fused, bad id on one rank: nothing written into out");
	expect(layout_path(&p, comm) == MK_MOE_PATH_FUSED, "fused, bad id: the fused kernel ran");
	free(out);
	problem_close(&p);
}

int main(int argc, char **argv)
{
	mkConfig_t cfg = MK_CONFIG_INITIALIZER;
	struct rank_args a;
	ncclComm_t nccl;
	mkComm_t comm;
	int rc, kill_last;

	(void)cmp_f; /* rank_check.h's median helper: the benchmark's */
	rc = rank_args_parse(argc, argv, "[--kill] [--quick]", &a);
	if (rc)
		return rc;
	g_nranks = a.nranks;
	g_quick = rank_has_opt(argc, argv, "--quick");
	kill_last = rank_has_opt(argc, argv, "--kill");
	rank_nccl_init(&a, &nccl);
	cfg.heapBytes = (size_t)256 << 20;
	cfg.timeoutMs = kill_last ? 3000 : 20000;
	NK(mkCommInit(nccl, &cfg, &comm));
	printf("rank %d: node %d/%d local %d/%d, %d rank(s) on this GPU\n", a.rank, comm->topo.node,
	       comm->topo.nnodes, comm->topo.local_rank, comm->topo.nlocal, comm->gpu_share);
	set_env("MKERNEL_MOE_FUSED", "1");
	if (kill_last)
		check_killed(comm, nccl);
	{
		static const struct mcase cases[] = {
			{ "uniform top-2", 4, 2, 256, 128, 300, 1, RT_UNIFORM, -1, 3 },
			{ "uniform top-2", 4, 2, 256, 128, 300, 0, RT_UNIFORM, -1, 1 },
			{ "top-1", 4, 1, 128, 192, 257, 1, RT_UNIFORM, -1, 1 },
			{ "top-4, hot expert", 4, 4, 128, 128, 300, 1, RT_HOT, -1, 1 },
			{ "top-8, 8 experts per rank", 8, 8, 128, 64, 200, 1, RT_UNIFORM, -1, 1 },
			{ "top-8 of fewer experts per rank", 2, 8, 64, 64, 150, 0, RT_UNIFORM, -1, 1 },
			{ "half the experts empty", 4, 3, 128, 128, 300, 1, RT_HALF_EMPTY, -1, 1 },
			{ "-1 slots, a rank without tokens", 4, 3, 128, 128, 300, 0, RT_NONE_SLOTS, 1, 1 },
		};
		const int ncases = g_quick ? 3 : (int)(sizeof(cases) / sizeof(cases[0]));

		for (int i = 0; i < ncases; i++)
			run_case(comm, &cases[i], 1234u + (uint32_t)i);
	}
	check_graph(comm);
	check_refusals(comm);
	check_async_bad_id(comm);
	/* the comm carries the bad id's error now: abort rather than a collective destroy */
	NK(mkCommAbort(comm));
	NK(ncclCommDestroy(nccl));
	printf("rank %d: %d failure(s)\n", a.rank, g_failures);
	return g_failures ? 1 : 0;
}
