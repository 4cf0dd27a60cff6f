// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component attn: the attention engine's host-side planning, which the kernels share
 * (attn.h compiles the same functions for host and device). Checked against brute force: the key
 * blocks each query block loads (causal, bottom-right and arbitrary position offsets, tails), the
 * blocks that need a mask, the schedule (every item exactly once, pairs of near-equal work, CTA
 * balance of the static schedule on the benchmark shapes), the longest-first order of the
 * portable kernel, the log-sum-exp merge of partials, every planning rule with the reason it
 * names, and mkAttention's argument errors (returned before any CUDA call). Pointers are
 * addresses only: nothing here dereferences them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mkernel.h"
#include "fused/attn/attn.h"
#include "fused/runtime/comm.h"

#define Q_PTR ((const void *)(uintptr_t)0x10000)
#define K_PTR ((const void *)(uintptr_t)0x20000)
#define V_PTR ((const void *)(uintptr_t)0x30000)
#define O_PTR ((void *)(uintptr_t)0x40000)
#define A_PTR ((float *)(uintptr_t)0x50000)
#define L_PTR ((float *)(uintptr_t)0x60000)

static void init(struct mk_attn_args *a, int b, int hq, int hkv, int sq, int skv, int d, int causal)
{
	mk_attn_args_init(a, Q_PTR, K_PTR, V_PTR, O_PTR, L_PTR, b, hq, hkv, sq, skv, d, causal);
}

static void plan_ok(struct mk_attn_args *a, int block_m)
{
	const char *why = "unset";

	assert_int_equal(mk_attn_plan(a, block_m, &why), 0);
	assert_null(why);
}

static void plan_fails(struct mk_attn_args *a, const char *want)
{
	const char *why = NULL;

	assert_int_equal(mk_attn_plan(a, 128, &why), -EINVAL);
	assert_non_null(why);
	assert_non_null(strstr(why, want));
}

/* ---- planning rules ---- */

static void test_plan_rules_name_the_reason(void **state)
{
	struct mk_attn_args a;

	(void)state;
	init(&a, 0, 16, 16, 128, 128, 128, 0);
	plan_fails(&a, "batch and head counts");
	init(&a, 1, 16, 0, 128, 128, 128, 0);
	plan_fails(&a, "batch and head counts");
	init(&a, 1, 16, 3, 128, 128, 128, 0);
	plan_fails(&a, "multiple of key/value heads");
	init(&a, 1, 16, 16, 128, 128, 96, 0);
	plan_fails(&a, "head dim must be 64 or 128");
	init(&a, 1, 16, 16, 128, 128, 256, 0);
	plan_fails(&a, "head dim must be 64 or 128");
	init(&a, 1, 16, 16, 0, 128, 128, 0);
	plan_fails(&a, "sequence lengths must be >= 1");
	init(&a, 1, 16, 16, 128, 0, 128, 0);
	plan_fails(&a, "sequence lengths must be >= 1");
	init(&a, 1, 1, 1, 1 << 30, 16, 128, 0);
	plan_fails(&a, "below 2^30");
	init(&a, 1, 1, 1, 16, 16, 128, 1);
	a.q_pos = 1ll << 31;
	plan_fails(&a, "below 2^30");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.q_batch_rows = 100;
	plan_fails(&a, "batch strides");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.kv_batch_rows = 127;
	plan_fails(&a, "batch strides");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.k = NULL;
	plan_fails(&a, "q, k and v must not be NULL");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.o = NULL;
	plan_fails(&a, "final rows need o");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.epi = MK_ATTN_EPI_PARTIAL;
	plan_fails(&a, "partial and merge rows need acc and lse");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.epi = MK_ATTN_EPI_MERGE;
	a.acc = A_PTR;
	a.lse = NULL;
	plan_fails(&a, "partial and merge rows need acc and lse");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.epi = MK_ATTN_EPI_MERGE_OUT;
	a.acc = A_PTR;
	a.o = NULL;
	plan_fails(&a, "final rows need o");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.epi = 9;
	plan_fails(&a, "unknown epilogue mode");
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.lse_ld = 64;
	plan_fails(&a, "lse row stride must cover the rows");
	/* lse may be NULL in store mode (inference needs no statistics). */
	init(&a, 1, 16, 16, 128, 128, 128, 0);
	a.lse = NULL;
	plan_ok(&a, 128);
}

static void test_plan_derived_fields(void **state)
{
	struct mk_attn_args a;

	(void)state;
	init(&a, 4, 32, 8, 1000, 777, 128, 1);
	plan_ok(&a, 128);
	assert_int_equal(a.njobs, 1);
	assert_int_equal(a.job[0].tiles_m, 8);
	assert_int_equal(a.job[0].kv_blocks, 7);
	assert_int_equal(a.bh, 128);
	assert_int_equal(a.group, 4);
	assert_int_equal(a.items, 128 * 8);
	assert_int_equal(a.units, 128 * 4);
	assert_int_equal(a.job[0].units, 128 * 4);
	assert_int_equal(a.job[0].diag, 777 - 1000);
	/* STORE: every row fresh and final */
	assert_int_equal(a.job[0].fresh_lo, 0);
	assert_int_equal(a.job[0].fresh_hi, 1000);
	assert_int_equal(a.job[0].final_lo, 0);
	assert_int_equal(a.job[0].final_hi, 1000);
	assert_true(fabs(a.scale - 1.0 / sqrt(128.0)) < 1e-7);
	assert_true(fabs(a.scale_log2 - 1.4426950408889634 / sqrt(128.0)) < 1e-7);
	/* Sections hold whole GQA groups and fit the L2 budget. */
	assert_int_equal(a.job[0].section % a.group, 0);
	init(&a, 4, 16, 16, 8192, 8192, 128, 1);
	plan_ok(&a, 128);
	assert_true((long long)a.job[0].section * 8192 * 128 * 4 <= MK_ATTN_L2_SECTION_BYTES);
	assert_true((long long)(a.job[0].section + 1) * 8192 * 128 * 4 > MK_ATTN_L2_SECTION_BYTES);
	/* One K/V head larger than the budget still makes a section. */
	init(&a, 1, 8, 2, 1 << 20, 1 << 20, 128, 1);
	plan_ok(&a, 128);
	assert_int_equal(a.job[0].section, 4);
	/* Non-causal: one query block per unit, odd tile counts too. */
	init(&a, 2, 3, 1, 129, 5, 64, 0);
	plan_ok(&a, 192);
	assert_int_equal(a.job[0].tiles_m, 1);
	assert_int_equal(a.units, 6);
	assert_int_equal(a.job[0].kv_blocks, 1);
	/* The other epilogue modes as fresh / final rows. */
	init(&a, 1, 1, 1, 300, 300, 64, 0);
	a.acc = A_PTR;
	a.epi = MK_ATTN_EPI_PARTIAL;
	plan_ok(&a, 128);
	assert_true(a.job[0].fresh_hi == 300 && a.job[0].final_hi == a.job[0].final_lo);
	init(&a, 1, 1, 1, 300, 300, 64, 0);
	a.acc = A_PTR;
	a.epi = MK_ATTN_EPI_MERGE;
	plan_ok(&a, 128);
	assert_true(a.job[0].fresh_hi == a.job[0].fresh_lo && a.job[0].final_hi == 0);
	init(&a, 1, 1, 1, 300, 300, 64, 0);
	a.acc = A_PTR;
	a.epi = MK_ATTN_EPI_MERGE_OUT;
	plan_ok(&a, 128);
	assert_true(a.job[0].fresh_hi == 0 && a.job[0].final_lo == 0 && a.job[0].final_hi == 300);
}

/* ---- several jobs (a ring's steps) ---- */

/* Three jobs as a ring step list: the local causal block, then two sources read through maps. */
static void jobs3(struct mk_attn_args *a)
{
	static const unsigned int gate_word = 0;

	init(a, 2, 4, 2, 1000, 1000, 128, 1);
	a->acc = A_PTR;
	a->done = (unsigned int *)(uintptr_t)0x70000;
	a->timeout_ns = 1000000000ull;
	a->njobs = 3;
	a->job[0] = (struct mk_attn_job){ .sq = 1000, .skv = 1000, .causal = 1, .fresh_hi = 1000 };
	a->job[1] = (struct mk_attn_job){ .sq = 1000,
					  .skv = 500,
					  .kv_maps = (const void *)64,
					  .gate = &gate_word,
					  .gate_value = 1 };
	a->job[2] = (struct mk_attn_job){ .q_row0 = 500,
					  .sq = 500,
					  .kv_row0 = 0,
					  .skv = 1000,
					  .kv_maps = (const void *)128,
					  .final_hi = 500 };
}

static void test_jobs_plan_order_and_units(void **state)
{
	struct mk_attn_args a;

	(void)state;
	jobs3(&a);
	plan_ok(&a, 128);
	assert_int_equal(a.njobs, 3);
	/* units: causal pairs of 8 blocks, then full rows, then 4 blocks of the second half */
	assert_int_equal(a.job[0].units, 8 * 4);
	assert_int_equal(a.job[1].units, 8 * 8);
	assert_int_equal(a.job[2].units, 8 * 4);
	assert_int_equal(a.job[0].unit0, 0);
	assert_int_equal(a.job[1].unit0, 32);
	assert_int_equal(a.job[2].unit0, 96);
	assert_int_equal(a.units, 128);
	/* merge order in warpgroup items (2 warpgroups of 64 rows at block_m 128) */
	assert_int_equal(a.job[0].wg_items0, 0);
	assert_int_equal(a.job[1].wg_items0, 8 * 8 * 2);
	assert_int_equal(a.job[2].wg_items0, (8 * 8 + 8 * 8) * 2);
	assert_int_equal(a.items, 8 * 8 + 8 * 8 + 8 * 4);
	for (int u = 0; u < a.units; u++) {
		int j = mk_attn_job_of(&a, u);

		assert_true(u >= a.job[j].unit0 && u < a.job[j].unit0 + a.job[j].units);
	}
	/* each job's units cover its items once */
	for (int j = 0; j < 3; j++) {
		unsigned char seen[8 * 8] = { 0 };

		for (int u = 0; u < a.job[j].units; u++) {
			int bh, mb[2], n = mk_attn_unit(&a, &a.job[j], u, &bh, mb);

			for (int i = 0; i < n; i++) {
				assert_int_equal(seen[bh * a.job[j].tiles_m + mb[i]], 0);
				seen[bh * a.job[j].tiles_m + mb[i]] = 1;
			}
		}
		for (int i = 0; i < a.bh * a.job[j].tiles_m; i++)
			assert_int_equal(seen[i], 1);
	}
}

static void test_jobs_plan_rules(void **state)
{
	struct mk_attn_args a;
	const char *why = NULL;

	(void)state;
	jobs3(&a);
	a.done = NULL;
	plan_fails(&a, "need the done counter");
	jobs3(&a);
	a.timeout_ns = 0;
	plan_fails(&a, "a gated job needs a timeout");
	jobs3(&a);
	a.job[2].final_hi = 501;
	plan_fails(&a, "fresh and final rows must be ranges");
	jobs3(&a);
	a.job[1].fresh_lo = 10;
	a.job[1].fresh_hi = 5;
	plan_fails(&a, "fresh and final rows must be ranges");
	jobs3(&a);
	a.job[2].q_row0 = 600;
	plan_fails(&a, "batch strides must cover the rows");
	jobs3(&a);
	a.job[0].kv_row0 = 1;
	plan_fails(&a, "batch strides must cover the rows");
	/* a job reading through its own maps may address rows past k's batch stride */
	jobs3(&a);
	a.job[1].kv_row0 = 5000;
	plan_ok(&a, 128);
	jobs3(&a);
	a.job[1].diag = 1 << 30;
	plan_fails(&a, "below 2^30");
	jobs3(&a);
	a.njobs = MK_ATTN_MAX_JOBS + 1;
	plan_fails(&a, "job count out of range");
	/* only fresh jobs after the first: no order to keep, no counter needed */
	jobs3(&a);
	a.done = NULL;
	a.job[1].fresh_hi = 1000;
	a.job[2].fresh_hi = 500;
	assert_int_equal(mk_attn_plan(&a, 128, &why), 0);
}

/* ---- key ranges and masks against brute force ---- */

static const int lens[] = { 1, 2, 63, 64, 65, 127, 128, 129, 200, 383, 1000 };
static const int diags[] = { 0, 1, -1, 127, 128, -128, -129, 300, -700, 5000 };
static const int bms[] = { 64, 128, 192, 32 };

/* Largest key index some row of [r0, r1) sees, or -1. */
static int brute_last_key(const struct mk_attn_args *a, int r0, int r1)
{
	int best = -1;

	for (int i = r0; i < r1; i++)
		for (int j = a->skv - 1; j > best; j--)
			if (mk_attn_visible(&a->job[0], i, j)) {
				best = j;
				break;
			}
	return best;
}

static void check_ranges(struct mk_attn_args *a)
{
	for (int mb = 0; mb < a->job[0].tiles_m; mb++) {
		int r0 = mb * a->block_m;
		int r1 = r0 + a->block_m < a->sq ? r0 + a->block_m : a->sq;
		int last = brute_last_key(a, r0, r1);
		int want = last < 0 ? 0 : last / MK_ATTN_BN + 1;
		int end = mk_attn_kv_end(&a->job[0], a->block_m, mb);

		if (end != want)
			fail_msg("sq %d skv %d diag %d causal %d bm %d mb %d: kv_end %d, brute %d",
				 a->sq, a->skv, a->job[0].diag, a->causal, a->block_m, mb, end,
				 want);
		/* Per warpgroup of 64 rows: a block without a mask is fully visible to all its
		 * rows, even rows past sq (they are computed, never stored). */
		for (int w0 = r0; w0 < r0 + a->block_m; w0 += MK_ATTN_WG_ROWS) {
			for (int n = 0; n < end; n++) {
				int full = 1, masked = mk_attn_needs_mask(&a->job[0], n, w0);

				for (int i = w0; i < w0 + MK_ATTN_WG_ROWS && full; i++)
					for (int j = n * MK_ATTN_BN; j < (n + 1) * MK_ATTN_BN; j++)
						if (!mk_attn_visible(&a->job[0], i, j)) {
							full = 0;
							break;
						}
				if (!masked && !full)
					fail_msg("sq %d skv %d diag %d bm %d rows %d.. block %d: "
						 "unmasked but not fully visible",
						 a->sq, a->skv, a->job[0].diag, a->block_m, w0, n);
				/* Tight at the first row: a masked block hides something from it.
				 */
				if (masked && full)
					fail_msg("sq %d skv %d diag %d bm %d rows %d.. block %d: "
						 "masked although fully visible",
						 a->sq, a->skv, a->job[0].diag, a->block_m, w0, n);
			}
		}
	}
}

static void test_kv_end_and_masks_match_brute_force(void **state)
{
	struct mk_attn_args a;
	int cases = 0;

	(void)state;
	for (size_t s = 0; s < sizeof(lens) / sizeof(lens[0]); s++)
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
			for (size_t m = 0; m < sizeof(bms) / sizeof(bms[0]); m++)
				for (int causal = 0; causal < 2; causal++) {
					/* mkAttention's bottom-right alignment */
					init(&a, 1, 1, 1, lens[s], lens[k], 64, causal);
					plan_ok(&a, bms[m]);
					check_ranges(&a);
					cases++;
					if (!causal)
						continue;
					/* ring steps: arbitrary position offsets */
					for (size_t d = 0; d < sizeof(diags) / sizeof(diags[0]);
					     d++) {
						init(&a, 1, 1, 1, lens[s], lens[k], 64, 1);
						a.q_pos = 100000 + diags[d];
						a.k_pos = 100000;
						plan_ok(&a, bms[m]);
						assert_int_equal(a.job[0].diag, diags[d]);
						check_ranges(&a);
						cases++;
					}
				}
	print_message("%d planned calls checked\n", cases);
}

static void test_causal_skips_blocks_above_diagonal(void **state)
{
	struct mk_attn_args a;
	long long loaded = 0;

	(void)state;
	/* Sq = Skv = 8192: about half the blocks (the diagonal ones plus the lower triangle). */
	init(&a, 1, 1, 1, 8192, 8192, 128, 1);
	plan_ok(&a, 128);
	for (int mb = 0; mb < a.job[0].tiles_m; mb++)
		loaded += mk_attn_kv_end(&a.job[0], a.block_m, mb);
	assert_int_equal(loaded, 64 * 65 / 2);
	/* Queries that precede every key (Sq > Skv, bottom-right) load nothing. */
	init(&a, 1, 1, 1, 1000, 100, 128, 1);
	plan_ok(&a, 128);
	assert_int_equal(mk_attn_kv_end(&a.job[0], a.block_m, 0), 0);
	assert_int_equal(mk_attn_kv_end(&a.job[0], a.block_m, 6), 0);
	assert_int_equal(mk_attn_kv_end(&a.job[0], a.block_m, 7), 1);
}

/* ---- schedule ---- */

static void check_units_cover(struct mk_attn_args *a)
{
	unsigned char *seen = calloc((size_t)a->items, 1);
	int lo = 1 << 30, hi = -1;

	assert_non_null(seen);
	for (int u = 0; u < a->units; u++) {
		int bh, mb[2], n = mk_attn_unit(a, &a->job[0], u, &bh, mb), work = 0;

		assert_true(n == 1 || n == 2);
		assert_true(bh >= 0 && bh < a->bh);
		for (int i = 0; i < n; i++) {
			assert_true(mb[i] >= 0 && mb[i] < a->job[0].tiles_m);
			assert_int_equal(seen[bh * a->job[0].tiles_m + mb[i]], 0);
			seen[bh * a->job[0].tiles_m + mb[i]] = 1;
			work += mk_attn_kv_end(&a->job[0], a->block_m, mb[i]);
		}
		if (n == 2) {
			/* longest first */
			assert_true(mk_attn_kv_end(&a->job[0], a->block_m, mb[0]) >=
				    mk_attn_kv_end(&a->job[0], a->block_m, mb[1]));
			if (work < lo)
				lo = work;
			if (work > hi)
				hi = work;
		}
	}
	for (int i = 0; i < a->items; i++)
		assert_int_equal(seen[i], 1);
	free(seen);
	/* Pairs of a causal Sq == Skv problem carry the same number of key blocks, +-1. */
	if (a->causal && a->sq == a->skv && a->block_m == MK_ATTN_BN && hi >= 0)
		assert_true(hi - lo <= 1);
}

static void test_units_cover_every_item_once(void **state)
{
	static const int shapes[][5] = {
		/* B, Hq, Hkv, Sq, Skv */
		{ 4, 16, 16, 8192, 8192 }, { 2, 8, 2, 1000, 1000 }, { 3, 5, 5, 129, 129 },
		{ 1, 1, 1, 1, 1 },	   { 2, 6, 3, 700, 300 },   { 1, 48, 8, 4096, 4096 },
	};

	(void)state;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int causal = 0; causal < 2; causal++)
			for (int d = 64; d <= 128; d += 64) {
				struct mk_attn_args a;

				init(&a, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
				     shapes[s][4], d, causal);
				plan_ok(&a, MK_ATTN_BM(d));
				check_units_cover(&a);
				plan_ok(&a, MK_ATTN_BN);
				check_units_cover(&a);
			}
}

static void test_static_schedule_deals_each_unit_once(void **state)
{
	static const int counts[] = { 1, 2, 7, 66, 131, 132, 1000 };

	(void)state;
	for (int snake = 0; snake < 2; snake++)
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
			const int units = 1001, count = counts[c];
			unsigned char seen[1001] = { 0 };

			for (int r = 0; r < count; r++) {
				int prev = -1;

				for (int it = 0;; it++) {
					int u = mk_attn_static_unit(it, r, count, units, snake);

					if (u < 0)
						break;
					assert_true(u > prev);
					/* snake: odd rounds reversed */
					assert_int_equal(u % count,
							 snake && (it & 1) ? count - 1 - r : r);
					prev = u;
					assert_int_equal(seen[u], 0);
					seen[u] = 1;
				}
			}
			for (int u = 0; u < units; u++)
				assert_int_equal(seen[u], 1);
		}
}

/*
 * Per-CTA work of the static schedule that mk_attn_schedule_static picks on the benchmark shapes
 * (132 CTAs of an H200), in key blocks plus a per-item overhead of a third of a block (Q load and
 * epilogue): the busiest CTA within 6% of the mean, so the causal kernel is not held up by one
 * long tail. The pairs alone left 13% at S 4096, D 64 (5.3 rounds of equal pairs), which the
 * longest-first single blocks bring to about 2%; where the pairs are better they stay.
 */
static void test_static_schedule_balances_causal_work(void **state)
{
	static const int seqs[] = { 4096, 8192, 16384, 32768, 65536 };
	const int ctas = 132;

	(void)state;
	for (size_t s = 0; s < sizeof(seqs) / sizeof(seqs[0]); s++) {
		for (int d = 64; d <= 128; d += 64) {
			struct mk_attn_args a;
			double pairs, picked;
			int grid, pairs_grid;

			init(&a, 4, 16, 16, seqs[s], seqs[s], d, 1);
			plan_ok(&a, MK_ATTN_BM(d));
			pairs_grid = a.units < ctas ? a.units : ctas;
			pairs = mk_attn_static_imbalance(&a, pairs_grid);
			grid = mk_attn_schedule_static(&a, ctas);
			assert_int_equal(grid, a.units < ctas ? a.units : ctas);
			picked = mk_attn_static_imbalance(&a, grid);
			print_message(
				"causal S %d D %d: busiest CTA / mean = %.3f (pairs %.3f, %s)\n",
				seqs[s], d, picked, pairs,
				a.job[0].lpt ? "longest first" : "pairs");
			/* the busiest CTA's work (imbalance x total / grid) is never more than the
			 * pairs' */
			assert_true(picked / grid <= pairs / pairs_grid);
			assert_true(picked <= 1.06);
			/* the picked schedule still covers every item once */
			check_units_cover(&a);
			if (seqs[s] == 4096 && d == 64) {
				assert_true(pairs > 1.10);
				assert_true(picked < 1.03);
				assert_int_equal(a.job[0].lpt, 1);
				assert_int_equal(a.snake, 1);
				assert_int_equal(a.units, a.items);
			}
		}
	}
	/* Not causal, or a dynamic schedule: left as planned. */
	{
		struct mk_attn_args a;
		unsigned int word = 0;

		init(&a, 4, 16, 16, 4096, 4096, 64, 0);
		plan_ok(&a, MK_ATTN_BM(64));
		assert_int_equal(mk_attn_schedule_static(&a, 132), 132);
		assert_int_equal(a.job[0].lpt, 0);
		assert_int_equal(a.snake, 0);
		init(&a, 4, 16, 16, 4096, 4096, 64, 1);
		a.counter = &word;
		plan_ok(&a, MK_ATTN_BM(64));
		mk_attn_schedule_static(&a, 132);
		assert_int_equal(a.job[0].lpt, 0);
		assert_int_equal(a.units, 64 * 11);
	}
}

static void test_portable_order_is_longest_first(void **state)
{
	struct mk_attn_args a;

	(void)state;
	for (int causal = 0; causal < 2; causal++) {
		init(&a, 2, 12, 4, 3000, 3000, 128, causal);
		plan_ok(&a, MK_ATTN_P_BLOCK);
		unsigned char *seen = calloc((size_t)a.items, 1);
		int prev_work = 1 << 30, prev_first = -1;

		assert_non_null(seen);
		for (int t = 0; t < a.items; t++) {
			int bh, mb;

			mk_attn_item(&a, &a.job[0], t, &bh, &mb);
			assert_true(bh >= 0 && bh < a.bh && mb >= 0 && mb < a.job[0].tiles_m);
			assert_int_equal(seen[bh * a.job[0].tiles_m + mb], 0);
			seen[bh * a.job[0].tiles_m + mb] = 1;
			if (!causal)
				continue;
			int first = bh / a.job[0].section,
			    work = mk_attn_kv_end(&a.job[0], a.block_m, mb);

			if (first == prev_first)
				assert_true(work <= prev_work);
			prev_first = first;
			prev_work = work;
		}
		free(seen);
	}
}

/* ---- log-sum-exp merge ---- */

/* ln(sum exp(s)) over s[lo, hi) and the softmax-weighted mean of v, in double. */
static double part(const double *s, const double *v, int lo, int hi, double *o)
{
	double m = -INFINITY, l = 0, acc = 0;

	for (int i = lo; i < hi; i++)
		m = s[i] > m ? s[i] : m;
	if (m == -INFINITY) {
		*o = 0;
		return -INFINITY;
	}
	for (int i = lo; i < hi; i++) {
		l += exp(s[i] - m);
		acc += exp(s[i] - m) * v[i];
	}
	*o = acc / l;
	return m + log(l);
}

static void test_lse_merge_matches_full_softmax(void **state)
{
	double s[64], v[64];

	(void)state;
	srand(11);
	for (int trial = 0; trial < 200; trial++) {
		int cut1 = rand() % 65, cut2 = cut1 + rand() % (65 - cut1);
		double o_full, oa, ob, oc;
		double l_full, la, lb, lc;
		float wa, wb, l, l2, o;

		for (int i = 0; i < 64; i++) {
			s[i] = (rand() % 2000 - 1000) / 100.0;
			v[i] = (rand() % 2000 - 1000) / 500.0;
		}
		/* some masked keys */
		if (trial % 3 == 0)
			for (int i = 0; i < 64; i += 5)
				s[i] = -INFINITY;
		l_full = part(s, v, 0, 64, &o_full);
		la = part(s, v, 0, cut1, &oa);
		lb = part(s, v, cut1, cut2, &ob);
		lc = part(s, v, cut2, 64, &oc);
		/* a chain of merges, as a ring does, in fp32 */
		l = mk_attn_lse_merge((float)la, (float)lb, &wa, &wb);
		o = wa * (float)oa + wb * (float)ob;
		l2 = mk_attn_lse_merge(l, (float)lc, &wa, &wb);
		o = wa * o + wb * (float)oc;
		if (l_full == -INFINITY) {
			assert_true(l2 == -INFINITY);
			assert_true(o == 0.0f);
			continue;
		}
		assert_true(fabs(l2 - l_full) <= 1e-5 * (1 + fabs(l_full)));
		assert_true(fabs(o - o_full) <= 1e-5 * (1 + fabs(o_full)));
	}
}

static void test_lse_merge_empty_partials(void **state)
{
	float wa = -1, wb = -1, l;

	(void)state;
	l = mk_attn_lse_merge(-INFINITY, -INFINITY, &wa, &wb);
	assert_true(l == -INFINITY && wa == 0.0f && wb == 0.0f);
	l = mk_attn_lse_merge(-INFINITY, 2.5f, &wa, &wb);
	assert_true(l == 2.5f && wa == 0.0f && wb == 1.0f);
	l = mk_attn_lse_merge(1.25f, -INFINITY, &wa, &wb);
	assert_true(l == 1.25f && wa == 1.0f && wb == 0.0f);
	/* far apart: no overflow, the larger dominates */
	l = mk_attn_lse_merge(1000.0f, -1000.0f, &wa, &wb);
	assert_true(l == 1000.0f && wa == 1.0f && wb == 0.0f);
	l = mk_attn_lse_merge(3.0f, 3.0f, &wa, &wb);
	assert_true(fabsf(l - (3.0f + logf(2.0f))) < 1e-6f && wa == 0.5f && wb == 0.5f);
}

/* ---- mkAttention argument errors (before any CUDA call) ---- */

static void test_api_rejects_bad_arguments(void **state)
{
	float *lse = L_PTR;

	(void)state;
	assert_int_equal(
		mkAttention(NULL, K_PTR, V_PTR, O_PTR, lse, 1, 16, 16, 128, 128, 128, 0, NULL),
		ncclInvalidArgument);
	assert_int_equal(
		mkAttention(Q_PTR, K_PTR, V_PTR, NULL, lse, 1, 16, 16, 128, 128, 128, 0, NULL),
		ncclInvalidArgument);
	assert_int_equal(
		mkAttention(Q_PTR, K_PTR, V_PTR, O_PTR, lse, 1, 16, 16, 128, 128, 96, 0, NULL),
		ncclInvalidArgument);
	assert_int_equal(
		mkAttention(Q_PTR, K_PTR, V_PTR, O_PTR, lse, 1, 16, 5, 128, 128, 128, 0, NULL),
		ncclInvalidArgument);
	assert_int_equal(
		mkAttention(Q_PTR, K_PTR, V_PTR, O_PTR, lse, 1, 16, 16, 0, 128, 128, 0, NULL),
		ncclInvalidArgument);
	assert_int_equal(
		mkAttention(Q_PTR, K_PTR, V_PTR, O_PTR, lse, 0, 16, 16, 128, 128, 128, 0, NULL),
		ncclInvalidArgument);
	assert_int_equal(
		mkAttention(Q_PTR, K_PTR, V_PTR, O_PTR, lse, 1, 16, 16, 128, 128, 128, 2, NULL),
		ncclInvalidArgument);
	assert_int_equal(mkAttention((const char *)Q_PTR + 1, K_PTR, V_PTR, O_PTR, lse, 1, 16, 16,
				     128, 128, 128, 0, NULL),
			 ncclInvalidArgument);
	assert_int_equal(mkAttention(Q_PTR, K_PTR, V_PTR, O_PTR, (float *)((char *)lse + 2), 1, 16,
				     16, 128, 128, 128, 0, NULL),
			 ncclInvalidArgument);
}

/* mkRingAttention: every rule refused before any CUDA call (a comm that looks live, of 4 ranks,
 * is never used; one that is not live is refused by its magic word). */
static void test_ring_api_rejects_bad_arguments(void **state)
{
	const void *q = Q_PTR, *k = K_PTR, *v = V_PTR;
	void *o = O_PTR;
	float *lse = L_PTR;
	struct mk_comm fake;

	(void)state;
	memset(&fake, 0, sizeof(fake));
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 1, 16, 16, 128, 128, 0, NULL, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 1, 16, 16, 128, 128, 0, &fake, 0),
			 ncclInvalidArgument);
	fake.magic = MK_COMM_MAGIC;
	fake.nranks = 4;
	assert_int_equal(mkRingAttention(NULL, k, v, o, lse, 1, 16, 16, 128, 128, 0, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, NULL, lse, 1, 16, 16, 128, 128, 0, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 0, 16, 16, 128, 128, 0, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 1, 16, 5, 128, 128, 0, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 1, 16, 16, 128, 96, 0, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 1, 16, 16, 128, 128, 2, &fake, 0),
			 ncclInvalidArgument);
	/* zigzag needs two chunks per rank */
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 1, 16, 16, 127, 128, 1, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, o, lse, 1, 16, 16, 1 << 28, 128, 0, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention((const char *)q + 1, k, v, o, lse, 1, 16, 16, 128, 128, 0,
					 &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkRingAttention(q, k, v, o, (float *)((char *)lse + 2), 1, 16, 16, 128,
					 128, 0, &fake, 0),
			 ncclInvalidArgument);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan_rules_name_the_reason),
		cmocka_unit_test(test_plan_derived_fields),
		cmocka_unit_test(test_jobs_plan_order_and_units),
		cmocka_unit_test(test_jobs_plan_rules),
		cmocka_unit_test(test_kv_end_and_masks_match_brute_force),
		cmocka_unit_test(test_causal_skips_blocks_above_diagonal),
		cmocka_unit_test(test_units_cover_every_item_once),
		cmocka_unit_test(test_static_schedule_deals_each_unit_once),
		cmocka_unit_test(test_static_schedule_balances_causal_work),
		cmocka_unit_test(test_portable_order_is_longest_first),
		cmocka_unit_test(test_lse_merge_matches_full_softmax),
		cmocka_unit_test(test_lse_merge_empty_partials),
		cmocka_unit_test(test_api_rejects_bad_arguments),
		cmocka_unit_test(test_ring_api_rejects_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
