// SPDX-License-Identifier: Apache-2.0
/*
 * Host-side planning of an attention role: argument rules, a single call as one job, the derived
 * tile counts, the causal schedule's L2 sections, the order of several jobs and the softmax
 * scale. Plain C, no CUDA calls, so the unit suite checks it without a GPU.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attn.h"

/* Positions and lengths stay below 2^30 so row + diag never overflows an int on the device. */
#define ATTN_MAX_ROWS (1ll << 30)

static const char *attn_rule_common(const struct mk_attn_args *a, int block_m)
{
	if (a->batch < 1 || a->heads_q < 1 || a->heads_kv < 1)
		return "batch and head counts must be >= 1";
	if (a->heads_q % a->heads_kv)
		return "query heads must be a multiple of key/value heads";
	if (a->head_dim != 64 && a->head_dim != 128)
		return "head dim must be 64 or 128";
	/* (at least the rows of the jobs: checked with them) */
	if (a->q_batch_rows >= ATTN_MAX_ROWS * 4 || a->kv_batch_rows >= ATTN_MAX_ROWS * 4)
		return "batch strides must stay below 2^32 rows";
	if ((double)a->batch * a->q_batch_rows * a->heads_q * a->head_dim > (double)(1ll << 62) ||
	    (double)a->batch * a->kv_batch_rows * a->heads_kv * a->head_dim > (double)(1ll << 62))
		return "tensor too large";
	if (a->q == NULL || a->k == NULL || a->v == NULL)
		return "q, k and v must not be NULL";
	if (block_m < 1)
		return "block_m must be >= 1";
	if (a->njobs < 0 || a->njobs > MK_ATTN_MAX_JOBS)
		return "job count out of range";
	return NULL;
}

/* Rules of the one-call fields (njobs = 0). */
static const char *attn_rule_single(const struct mk_attn_args *a)
{
	long long diag = a->q_pos - a->k_pos;

	if (a->sq < 1 || a->skv < 1)
		return "sequence lengths must be >= 1";
	if (a->sq >= ATTN_MAX_ROWS || a->skv >= ATTN_MAX_ROWS || diag >= ATTN_MAX_ROWS ||
	    diag <= -ATTN_MAX_ROWS)
		return "sequence lengths and positions must stay below 2^30";
	if (a->q_batch_rows < a->sq || a->kv_batch_rows < a->skv)
		return "batch strides must cover the rows of the call";
	if (a->epi < MK_ATTN_EPI_STORE || a->epi > MK_ATTN_EPI_MERGE_OUT)
		return "unknown epilogue mode";
	return NULL;
}

static int attn_range_ok(int lo, int hi, int n)
{
	return 0 <= lo && lo <= hi && hi <= n;
}

static const char *attn_rule_job(const struct mk_attn_args *a, const struct mk_attn_job *j,
				 int block_m)
{
	const int all_fresh = j->fresh_lo == 0 && j->fresh_hi == j->sq;
	const int all_final = j->final_lo == 0 && j->final_hi == j->sq;

	if (j->sq < 1 || j->skv < 1)
		return "sequence lengths must be >= 1";
	if (j->sq >= ATTN_MAX_ROWS || j->skv >= ATTN_MAX_ROWS || j->diag >= ATTN_MAX_ROWS ||
	    j->diag <= -ATTN_MAX_ROWS)
		return "sequence lengths and positions must stay below 2^30";
	if (j->q_row0 < 0 || j->kv_row0 < 0 || j->q_row0 + (long long)j->sq > a->q_batch_rows ||
	    (j->kv_maps == NULL && j->kv_row0 + (long long)j->skv > a->kv_batch_rows))
		return "batch strides must cover the rows of the call";
	if (!attn_range_ok(j->fresh_lo, j->fresh_hi, j->sq) ||
	    !attn_range_ok(j->final_lo, j->final_hi, j->sq))
		return "fresh and final rows must be ranges inside the job's rows";
	if (j->final_hi > j->final_lo && a->o == NULL)
		return "final rows need o";
	if ((!all_final || !all_fresh) && (a->acc == NULL || a->lse == NULL))
		return "partial and merge rows need acc and lse";
	if (a->lse != NULL && a->lse_ld < j->q_row0 + (long long)j->sq)
		return "lse row stride must cover the rows of the call";
	if ((double)a->batch * a->heads_q * ((j->sq + block_m - 1) / block_m) > INT_MAX / 4)
		return "too many work items";
	if (j->gate != NULL && a->timeout_ns == 0)
		return "a gated job needs a timeout";
	return NULL;
}

/*
 * (b, h) pairs per section of the causal schedule: as many K/V heads as fit the L2 budget (at
 * least one), times the query heads that share each.
 */
static int attn_section(const struct mk_attn_args *a, const struct mk_attn_job *j)
{
	long long kv_head_bytes = (long long)j->skv * a->head_dim * 2 * 2;
	long long heads = MK_ATTN_L2_SECTION_BYTES / kv_head_bytes;
	long long s;

	if (heads < 1)
		heads = 1;
	s = heads * a->group;
	return s < a->bh ? (int)s : a->bh;
}

void mk_attn_job_single(const struct mk_attn_args *a, struct mk_attn_job *j)
{
	const int fresh = a->epi == MK_ATTN_EPI_STORE || a->epi == MK_ATTN_EPI_PARTIAL;
	const int final = a->epi == MK_ATTN_EPI_STORE || a->epi == MK_ATTN_EPI_MERGE_OUT;

	memset(j, 0, sizeof(*j));
	j->sq = a->sq;
	j->skv = a->skv;
	j->causal = a->causal != 0;
	j->diag = (int)(a->q_pos - a->k_pos);
	j->fresh_hi = fresh ? a->sq : 0;
	j->final_hi = final ? a->sq : 0;
}

int mk_attn_plan(struct mk_attn_args *a, int block_m, const char **why)
{
	const char *r = attn_rule_common(a, block_m);
	long long units = 0, wg_items = 0;
	const int nwg = block_m >= MK_ATTN_WG_ROWS ? block_m / MK_ATTN_WG_ROWS : 1;

	if (r == NULL && a->njobs == 0) {
		r = attn_rule_single(a);
		if (r == NULL) {
			mk_attn_job_single(a, &a->job[0]);
			a->njobs = 1;
		}
	}
	for (int i = 0; r == NULL && i < a->njobs; i++) {
		r = attn_rule_job(a, &a->job[i], block_m);
		/* a later job that merges must wait for the jobs before it */
		if (r == NULL && i > 0 && a->done == NULL &&
		    !(a->job[i].fresh_lo == 0 && a->job[i].fresh_hi == a->job[i].sq))
			r = "jobs that merge after the first need the done counter";
		if (r == NULL && i > 0 && a->timeout_ns == 0 && a->done != NULL)
			r = "ordered jobs need a timeout";
	}
	if (why != NULL)
		*why = r;
	if (r != NULL)
		return -EINVAL;
	a->scale = (float)(1.0 / sqrt((double)a->head_dim));
	a->scale_log2 = (float)(1.4426950408889634 / sqrt((double)a->head_dim));
	a->block_m = block_m;
	a->bh = a->batch * a->heads_q;
	a->group = a->heads_q / a->heads_kv;
	for (int i = 0; i < a->njobs; i++) {
		struct mk_attn_job *j = &a->job[i];
		int items;

		j->tiles_m = (j->sq + block_m - 1) / block_m;
		j->kv_blocks = (j->skv + MK_ATTN_BN - 1) / MK_ATTN_BN;
		j->section = j->causal ? attn_section(a, j) : a->bh;
		items = a->bh * j->tiles_m;
		j->units = j->causal ? a->bh * ((j->tiles_m + 1) / 2) : items;
		j->unit0 = (int)units;
		j->wg_items0 = (int)wg_items;
		units += j->units;
		wg_items += (long long)items * nwg;
	}
	if (units > INT_MAX / 2 || wg_items > INT_MAX) {
		if (why != NULL)
			*why = "too many work items";
		return -EINVAL;
	}
	a->units = (int)units;
	a->items = (int)(wg_items / nwg);
	return 0;
}

void mk_attn_args_init(struct mk_attn_args *a, const void *q, const void *k, const void *v, void *o,
		       float *lse, int batch, int heads_q, int heads_kv, int sq, int skv,
		       int head_dim, int causal)
{
	memset(a, 0, sizeof(*a));
	a->batch = batch;
	a->heads_q = heads_q;
	a->heads_kv = heads_kv;
	a->head_dim = head_dim;
	a->sq = sq;
	a->skv = skv;
	a->q_batch_rows = sq;
	a->kv_batch_rows = skv;
	a->lse_ld = sq;
	a->q = q;
	a->k = k;
	a->v = v;
	a->o = o;
	a->lse = lse;
	a->epi = MK_ATTN_EPI_STORE;
	a->causal = causal != 0;
	a->q_pos = (long long)skv - sq; /* bottom-right aligned */
	a->k_pos = 0;
}

/* A CTA's cost of one item beyond its key blocks (Q load, epilogue), in key blocks. */
#define ATTN_ITEM_OVERHEAD    (1.0 / 3)
/* Schedules longer than this many rounds are left as planned: their last round is a small share. */
#define ATTN_BALANCE_ROUNDS   32
#define ATTN_BALANCE_MAX_CTAS 1024

double mk_attn_static_imbalance(const struct mk_attn_args *a, int ctas)
{
	const struct mk_attn_job *j = &a->job[0];
	double load[ATTN_BALANCE_MAX_CTAS] = { 0 }, total = 0, worst = 0;

	if (ctas < 1 || ctas > ATTN_BALANCE_MAX_CTAS)
		return 1.0;
	for (int it = 0;; it++) {
		int any = 0;

		for (int r = 0; r < ctas; r++) {
			int u = mk_attn_static_unit(it, r, ctas, j->units, a->snake), bh, mb[2], n;

			if (u < 0)
				continue;
			any = 1;
			n = mk_attn_unit(a, j, u, &bh, mb);
			for (int i = 0; i < n; i++)
				load[r] +=
					mk_attn_kv_end(j, a->block_m, mb[i]) + ATTN_ITEM_OVERHEAD;
		}
		if (!any)
			break;
	}
	for (int r = 0; r < ctas; r++) {
		total += load[r];
		if (load[r] > worst)
			worst = load[r];
	}
	return total > 0 ? worst / (total / ctas) : 1.0;
}

static int attn_grid(const struct mk_attn_args *a, int sms)
{
	return a->units < sms ? a->units : sms;
}

/*
 * Pairs (tiles_m - 1 - k, k) carry about the same work, so dealt round-robin they balance every
 * full round, and the last round is as long as a full one however few CTAs it fills: with 5.3
 * rounds (B 4, H 16, S 4096, D 64 on 132 SMs) the busiest CTA does 13% more than the mean.
 * Single blocks longest first, dealt in snake order, end with the shortest blocks instead, but
 * every L2 section restarts the order, which can unbalance other shapes: the plan's own count
 * decides between the two. 1 when the single blocks win; a is left with the pairs.
 */
static int attn_lpt_wins(struct mk_attn_args *a, int sms)
{
	struct mk_attn_job *j = &a->job[0];
	const int pair_units = a->units, pairs_grid = attn_grid(a, sms);
	const double pairs = mk_attn_static_imbalance(a, pairs_grid);
	double lpt;
	int lpt_grid;

	j->lpt = 1;
	a->snake = 1;
	j->units = a->units = a->items;
	lpt_grid = attn_grid(a, sms);
	lpt = mk_attn_static_imbalance(a, lpt_grid);
	j->lpt = 0;
	a->snake = 0;
	j->units = a->units = pair_units;
	/* same total work: the busiest CTA's is imbalance x total / grid */
	return lpt / lpt_grid < pairs / pairs_grid;
}

/*
 * The pick per shape, memoised per thread: counting both schedules walks every unit twice (tens
 * of us at S 16384), host time each call would spend again for the same answer.
 */
#define ATTN_MEMO 8

struct attn_memo {
	int batch, heads_q, heads_kv, head_dim, sq, skv, diag, block_m, sms, lpt;
};

static __thread struct attn_memo attn_memo[ATTN_MEMO];
static __thread unsigned int attn_memo_next;

static int attn_lpt_pick(struct mk_attn_args *a, int sms)
{
	const struct mk_attn_job *j = &a->job[0];
	const struct attn_memo key = { a->batch, a->heads_q, a->heads_kv, a->head_dim, j->sq,
				       j->skv,	 j->diag,    a->block_m,  sms,	       0 };
	struct attn_memo *e;

	for (int i = 0; i < ATTN_MEMO; i++) {
		e = &attn_memo[i];
		if (e->sms != 0 && e->batch == key.batch && e->heads_q == key.heads_q &&
		    e->heads_kv == key.heads_kv && e->head_dim == key.head_dim && e->sq == key.sq &&
		    e->skv == key.skv && e->diag == key.diag && e->block_m == key.block_m &&
		    e->sms == key.sms)
			return e->lpt;
	}
	e = &attn_memo[attn_memo_next++ % ATTN_MEMO];
	*e = key;
	e->lpt = attn_lpt_wins(a, sms);
	return e->lpt;
}

int mk_attn_schedule_static(struct mk_attn_args *a, int sms)
{
	struct mk_attn_job *j = &a->job[0];

	if (a->njobs != 1 || !j->causal || a->counter != NULL || sms < 1 ||
	    a->units > ATTN_BALANCE_ROUNDS * attn_grid(a, sms) || !attn_lpt_pick(a, sms))
		return attn_grid(a, sms);
	j->lpt = 1;
	a->snake = 1;
	j->units = a->units = a->items;
	return attn_grid(a, sms);
}
