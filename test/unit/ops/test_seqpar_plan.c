// SPDX-License-Identifier: Apache-2.0
/*
 * Plans of mkGemmReduceScatter and mkAllGatherGemm (seqpar_plan.h, gemm_rs_plan.h,
 * ag_gemm_plan.h): shards and chunks cover the rows exactly; the reduce-scatter's compute order is
 * a permutation that completes every reducer's chunks in the order of its reduce list (the other
 * nodes' shards before its own); the all-gather's arrival order lists every chunk once, mine
 * first, and its compute order takes tile rows in the order their last chunk arrives; the stage
 * tickets cover their work once; the split gives unused roles to compute and keeps the
 * all-gather's first stage. Layouts: nodes x ranks per node from 1 x 1 to 4 x 8, ranks numbered
 * node-major and interleaved, shards of 128-row multiples and not (straddling tile rows, shards
 * shorter than a tile).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fused/ops/ag_gemm_plan.h"
#include "fused/ops/gemm_rs_plan.h"
#include "tuner/policy.h"

/* Layouts (nodes x ranks per node) and shapes the checks sweep. */
static const int layouts[][2] = { { 1, 1 }, { 1, 2 }, { 2, 1 }, { 2, 2 }, { 1, 8 },
				  { 2, 8 }, { 4, 2 }, { 3, 3 }, { 4, 8 } };
static const int shapes[][2] = {
	/* M per rank (times nranks below), N */
	{ 128, 256 }, { 1024, 2048 }, { 1000, 3000 }, { 40, 300 }, { 200, 1003 }, { 4096, 512 },
};

/* rank_at[w * nlocal + p]: node-major (rank = w G + p) or interleaved (rank = p N + w). */
static void fill_rank_at(int nnodes, int nlocal, int interleaved, int *rank_at)
{
	for (int w = 0; w < nnodes; w++) {
		for (int p = 0; p < nlocal; p++)
			rank_at[w * nlocal + p] = interleaved ? p * nnodes + w : w * nlocal + p;
	}
}

static void test_geometry(void **state)
{
	struct mk_sp_geom g;

	(void)state;
	assert_int_equal(mk_sp_geom_init(&g, 1000, 64, 3), -EINVAL); /* M % nranks */
	assert_int_equal(mk_sp_geom_init(&g, 0, 64, 1), -EINVAL);
	assert_int_equal(mk_sp_geom_init(&g, 64, 0, 1), -EINVAL);
	assert_int_equal(mk_sp_geom_init(&g, 2000, 3000, 2), 0);
	assert_int_equal(g.ms, 1000);
	assert_int_equal(g.nch, 8);
	assert_int_equal(g.tiles_m, 16);
	assert_int_equal(g.tiles_n, 12);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		for (int r = 1; r <= 16; r *= 2) {
			int next = 0;

			assert_int_equal(mk_sp_geom_init(&g, shapes[s][0] * r, shapes[s][1], r), 0);
			/* chunks cover the rows in order, without gaps or overlap */
			for (int q = 0; q < r; q++) {
				for (int c = 0; c < g.nch; c++) {
					int r0, rows, tm0, tm1;

					mk_sp_chunk_rows(&g, q, c, &r0, &rows);
					assert_int_equal(r0, next);
					assert_true(rows >= 1 && rows <= MK_SP_CHUNK);
					next = r0 + rows;
					mk_sp_chunk_tiles(&g, q, c, &tm0, &tm1);
					assert_int_equal(tm0, r0 / 128);
					assert_int_equal(tm1, (r0 + rows - 1) / 128);
					assert_true(tm1 < g.tiles_m);
				}
			}
			assert_int_equal(next, g.m);
		}
	}
}

/* Position in `order` of every tile. */
static int *positions(const int *order, int tiles)
{
	int *pos = malloc((size_t)tiles * sizeof(int));

	assert_non_null(pos);
	for (int i = 0; i < tiles; i++)
		pos[i] = -1;
	for (int i = 0; i < tiles; i++) {
		assert_true(order[i] >= 0 && order[i] < tiles);
		assert_int_equal(pos[order[i]], -1); /* each tile once */
		pos[order[i]] = i;
	}
	return pos;
}

/*
 * The reduce-scatter order of one layout and shape: a permutation; tiles come in the order of
 * the band that first needs them (band = MK_SP_BAND / G positions of the G reduce lists), so
 * every chunk of a band is complete before the next band's tiles start; with aligned shards the
 * other nodes' shards are all computed before any tile of my node's.
 */
static void check_rs(int nnodes, int nlocal, int interleaved, int ms, int n)
{
	const int nranks = nnodes * nlocal;
	int rank_at[64];
	struct mk_sp_geom g;
	int *order, *pos, *first, tiles;

	fill_rank_at(nnodes, nlocal, interleaved, rank_at);
	assert_int_equal(mk_sp_geom_init(&g, ms * nranks, n, nranks), 0);
	tiles = g.tiles_m * g.tiles_n;
	order = malloc((size_t)tiles * sizeof(int));
	first = malloc((size_t)tiles * sizeof(int));
	assert_true(order != NULL && first != NULL);
	for (int v = 0; v < nnodes; v++) {
		const int band = mk_grs_band(nlocal), len = nnodes * g.nch;

		assert_int_equal(mk_grs_tile_order(&g, v, nnodes, nlocal, rank_at, order), 0);
		pos = positions(order, tiles);
		/* the last list position is my own node */
		assert_int_equal(mk_grs_list_node(v, nnodes, nnodes - 1), v);
		/* the first band that needs each tile, over every local rank's list */
		for (int t = 0; t < tiles; t++)
			first[t] = -1;
		for (int i = 0; i < len; i++) {
			const int w = mk_grs_list_node(v, nnodes, i / g.nch);

			for (int p = 0; p < nlocal; p++) {
				int tm0, tm1;

				mk_sp_chunk_tiles(&g, rank_at[w * nlocal + p], i % g.nch, &tm0,
						  &tm1);
				for (int tm = tm0; tm <= tm1; tm++) {
					for (int tn = 0; tn < g.tiles_n; tn++) {
						int *f = &first[tm * g.tiles_n + tn];

						if (*f < 0)
							*f = i / band;
					}
				}
			}
		}
		for (int i = 1; i < tiles; i++)
			assert_true(first[order[i]] >= first[order[i - 1]]);
		if (ms % 128 == 0 && nnodes > 1) {
			/* remote shards first: the first (N - 1) / N of the order is theirs */
			const int remote = tiles / nnodes * (nnodes - 1);

			for (int i = 0; i < tiles; i++) {
				const int owner = order[i] / g.tiles_n * 128 / g.ms;
				int owner_node = -1;

				for (int x = 0; x < nranks; x++) {
					if (rank_at[x] == owner)
						owner_node = x / nlocal;
				}
				assert_true((i < remote) == (owner_node != v));
			}
		}
		free(pos);
	}
	free(order);
	free(first);
}

static void test_rs_order(void **state)
{
	(void)state;
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			check_rs(layouts[l][0], layouts[l][1], 0, shapes[s][0], shapes[s][1]);
			check_rs(layouts[l][0], layouts[l][1], 1, shapes[s][0], shapes[s][1]);
		}
	}
}

static void test_rs_bad_layout(void **state)
{
	struct mk_sp_geom g;
	int rank_at[4] = { 0, 0, 0, 0 }; /* shard 1, 2, 3 never listed */
	int order[64];

	(void)state;
	assert_int_equal(mk_sp_geom_init(&g, 512, 256, 4), 0);
	assert_int_equal(mk_grs_tile_order(&g, 0, 2, 2, rank_at, order), -EINVAL);
}

/*
 * The all-gather's plan of one layout and shape: want counts the chunks per tile row; the
 * arrival order lists every chunk once, mine first, node peers' before other nodes', chunk
 * indices rising within each phase; the compute order is a permutation whose tile rows complete
 * (all chunks arrived) in the order they are taken.
 */
static void check_ag(int nnodes, int nlocal, int interleaved, int ms, int n)
{
	const int nranks = nnodes * nlocal;
	int rank_at[64];
	struct mk_sp_geom g;
	unsigned int *want;
	int *arrival, *order, *pos, *at_chunk, tiles;

	fill_rank_at(nnodes, nlocal, interleaved, rank_at);
	assert_int_equal(mk_sp_geom_init(&g, ms * nranks, n, nranks), 0);
	tiles = g.tiles_m * g.tiles_n;
	want = malloc((size_t)g.tiles_m * sizeof(*want));
	arrival = malloc((size_t)nranks * g.nch * sizeof(int));
	at_chunk = malloc((size_t)nranks * g.nch * sizeof(int));
	order = malloc((size_t)tiles * sizeof(int));
	assert_true(want && arrival && order && at_chunk);
	mk_agg_row_want(&g, want);
	for (int tm = 0; tm < g.tiles_m; tm++) {
		unsigned int touching = 0;

		for (int q = 0; q < nranks; q++) {
			for (int c = 0; c < g.nch; c++) {
				int tm0, tm1;

				mk_sp_chunk_tiles(&g, q, c, &tm0, &tm1);
				touching += tm >= tm0 && tm <= tm1;
			}
		}
		assert_int_equal(want[tm], touching);
		if (ms % 128 == 0)
			assert_int_equal(want[tm], 1);
	}
	for (int v = 0; v < nnodes; v++) {
		for (int l = 0; l < nlocal; l++) {
			const int me = rank_at[v * nlocal + l];
			int prev_c = -1, phase = 0;

			assert_int_equal(mk_agg_arrival(&g, v, nnodes, l, nlocal, rank_at, arrival),
					 0);
			for (int i = 0; i < nranks * g.nch; i++)
				at_chunk[i] = -1;
			for (int i = 0; i < nranks * g.nch; i++) {
				const int s = arrival[i] / g.nch, c = arrival[i] % g.nch;
				int sn = -1, ph;

				assert_int_equal(at_chunk[arrival[i]], -1);
				at_chunk[arrival[i]] = i;
				for (int x = 0; x < nranks; x++) {
					if (rank_at[x] == s)
						sn = x / nlocal;
				}
				ph = s == me ? 0 : sn == v ? 1 : 2;
				assert_true(ph >= phase); /* mine, my node's, the others' */
				if (ph != phase)
					prev_c = -1;
				phase = ph;
				assert_true(c >= prev_c); /* chunk-major within a phase */
				prev_c = c;
				if (i < g.nch)
					assert_int_equal(s, me);
			}
			assert_int_equal(mk_agg_tile_order(&g, arrival, want, order), 0);
			pos = positions(order, tiles);
			/* tile rows are taken in the order they complete: by first appearance in
			 * the order, the arrival index of a row's last chunk never goes back */
			for (int i = 0, last = -1; i < tiles; i++) {
				const int tm = order[i] / g.tiles_n;
				int done = -1;

				if (pos[tm * g.tiles_n] < i)
					continue; /* not the row's first tile in the order */
				for (int q = 0; q < nranks; q++) {
					for (int c = 0; c < g.nch; c++) {
						int tm0, tm1;

						mk_sp_chunk_tiles(&g, q, c, &tm0, &tm1);
						if (tm >= tm0 && tm <= tm1 &&
						    at_chunk[q * g.nch + c] > done)
							done = at_chunk[q * g.nch + c];
					}
				}
				assert_true(done >= last);
				last = done;
			}
			free(pos);
		}
	}
	free(want);
	free(arrival);
	free(at_chunk);
	free(order);
}

static void test_ag_plan(void **state)
{
	(void)state;
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			check_ag(layouts[l][0], layouts[l][1], 0, shapes[s][0], shapes[s][1]);
			check_ag(layouts[l][0], layouts[l][1], 1, shapes[s][0], shapes[s][1]);
		}
	}
}

static void test_ag_bad_input(void **state)
{
	struct mk_sp_geom g;
	int rank_at[4] = { 0, 1, 2, 3 }, arrival[64], order[64];
	unsigned int want[8];

	(void)state;
	assert_int_equal(mk_sp_geom_init(&g, 512, 256, 4), 0);
	assert_int_equal(mk_agg_arrival(&g, 0, 2, 0, 1, rank_at, arrival), -EINVAL); /* 2 != 4 */
	assert_int_equal(mk_agg_arrival(&g, 2, 2, 0, 2, rank_at, arrival), -EINVAL);
	/* an arrival list that never completes tile row 3 */
	mk_agg_row_want(&g, want);
	for (int i = 0; i < 4; i++)
		arrival[i] = 0;
	assert_int_equal(mk_agg_tile_order(&g, arrival, want, order), -EINVAL);
}

/* Each stage's tickets name each piece of work once. */
static void test_stage_tickets(void **state)
{
	(void)state;
	for (int nlocal = 1; nlocal <= 8; nlocal++) {
		char seen[16][8] = { { 0 } };

		for (int i = 0; i < 16 * nlocal; i++) {
			int c, d;

			mk_agg_copy_ticket(i, nlocal, &c, &d);
			assert_true(c >= 0 && c < 16 && d >= 0 && d < nlocal);
			assert_false(seen[c][d]);
			seen[c][d] = 1;
			/* chunk-major: my own copy (d = 0) of chunk c comes first */
			assert_int_equal(i % nlocal == 0, d == 0);
		}
	}
	for (int nnodes = 2; nnodes <= 8; nnodes++) {
		char seen[16][8] = { { 0 } };

		for (int i = 0; i < 16 * (nnodes - 1); i++) {
			int c, dn;

			mk_agg_forward_ticket(i, nnodes, &c, &dn);
			assert_true(c >= 0 && c < 16 && dn >= 1 && dn < nnodes);
			assert_false(seen[c][dn]);
			seen[c][dn] = 1;
		}
		for (int v = 0; v < nnodes; v++) {
			char hit[8] = { 0 };

			for (int j = 0; j < nnodes; j++)
				hit[mk_grs_list_node(v, nnodes, j)]++;
			for (int w = 0; w < nnodes; w++)
				assert_int_equal(hit[w], 1);
		}
	}
}

/* The policy's answer for 132 SMs on 2 nodes x 8 (compute, intra, send, reduce). */
static const int pol_sms[4] = { 116, 8, 4, 4 }, pol_min[4] = { 66, 1, 1, 1 },
		 pol_max[4] = { 128, 66, 66, 66 };

static void test_split_fix(void **state)
{
	struct mk_gar_split s;
	const int rs_one_node[4] = { 1, 1, 0, 0 }, ag_alone[4] = { 1, 1, 0, 0 },
		  all[4] = { 1, 1, 1, 1 };

	(void)state;
	/* reduce-scatter on one node: no send, no reduce role; their CTAs compute */
	assert_int_equal(mk_gar_split_plan(pol_sms, pol_min, pol_max, 8, 132, 1, 2, NULL, &s), 0);
	assert_int_equal(mk_sp_split_fix(&s, rs_one_node, 0), 0);
	assert_int_equal(s.sms[MK_GAR_REDUCE] + s.min[MK_GAR_REDUCE] + s.max[MK_GAR_REDUCE], 0);
	assert_int_equal(s.sms[MK_GAR_COMPUTE] + s.sms[MK_GAR_INTRA], 132);
	/* all-gather with one rank per node: the layout rule drops intra, the copy stage needs
	 * one CTA (the controller may not take it away) */
	assert_int_equal(mk_gar_split_plan(pol_sms, pol_min, pol_max, 8, 132, 2, 1, NULL, &s), 0);
	assert_int_equal(s.sms[MK_GAR_INTRA], 0);
	assert_int_equal(mk_sp_split_fix(&s, all, MK_GAR_INTRA), 0);
	assert_int_equal(s.sms[MK_GAR_INTRA], 132 / 32);
	assert_int_equal(s.min[MK_GAR_INTRA], 1);
	assert_int_equal(s.max[MK_GAR_INTRA], 132 / 4);
	assert_int_equal(s.sms[0] + s.sms[1] + s.sms[2] + s.sms[3], 132);
	/* MKERNEL_ROLE_SPLIT's zeros for the needed role are overridden, others honoured */
	assert_int_equal(mk_gar_split_plan(pol_sms, pol_min, pol_max, 8, 66, 1, 2, "0,0,0,0", &s),
			 0);
	assert_int_equal(mk_sp_split_fix(&s, ag_alone, MK_GAR_INTRA), 0);
	assert_int_equal(s.sms[MK_GAR_INTRA], 66 / 32);
	assert_int_equal(s.sms[MK_GAR_COMPUTE], 66 - 66 / 32);
	/* nothing left for compute */
	s.sms[0] = 1;
	s.sms[1] = 0;
	s.sms[2] = s.sms[3] = 0;
	assert_int_equal(mk_sp_split_fix(&s, all, MK_GAR_INTRA), -EINVAL);
}

/*
 * The policy engine's rows for both ops: a split on every layout, the cost model's fusion
 * choice (a large product fuses, a tiny one or one rank alone does not).
 */
static void test_policy_rows(void **state)
{
	static const int ops[2] = { MK_FUSED_GEMM_REDUCESCATTER, MK_FUSED_ALLGATHER_GEMM };

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct mk_policy_op_query q = {
			.op = ops[i], .nnodes = 2, .nranks = 16, .sms = 132
		};
		struct mk_policy_sm_split s;
		int sum = 0;

		/* mKernel's sweep tops: GEMM+RS M = N = 32768, K = 2048; AG+GEMM M = K = 32768,
		 * N = M / 16 */
		q.m = 32768;
		q.n = i == 0 ? 32768 : 2048;
		q.k = i == 0 ? 2048 : 32768;
		assert_int_equal(mk_policy_sm_split(&q, &s), 0);
		for (int r = 0; r < 4; r++)
			sum += s.sms[r];
		assert_int_equal(sum, 132);
		assert_true(s.sms[MK_ROLE_SEND] >= 1);
		assert_true(s.unfused_us > s.fused_us);
		assert_int_equal(s.fuse, 1);
		/* one node: nothing crosses the network */
		q.nnodes = 1;
		q.nranks = 8;
		assert_int_equal(mk_policy_sm_split(&q, &s), 0);
		assert_int_equal(s.sms[MK_ROLE_SEND] + s.sms[MK_ROLE_REDUCE], 0);
		assert_true(s.sms[MK_ROLE_INTRA] >= 1);
		/* tiny: the fixed cost of the fused call is not won back */
		q.m = 256;
		q.n = 256;
		q.k = 64;
		assert_int_equal(mk_policy_sm_split(&q, &s), 0);
		assert_int_equal(s.fuse, 0);
		/* one rank: nothing to overlap */
		q.m = q.n = q.k = 8192;
		q.nranks = 1;
		assert_int_equal(mk_policy_sm_split(&q, &s), 0);
		assert_int_equal(s.fuse, 0);
	}
}

/* The all-gather's unfused pipeline: when it runs, and the pieces it gathers a shard in. */
static void test_ag_pipeline(void **state)
{
	(void)state;
	/* one rank has nothing to gather, whatever the knob */
	assert_int_equal(mk_agg_pipe_pick(1, 32768, 32768, 32768, 1), 0);
	assert_int_equal(mk_agg_pipe_pick(1, 32768, 32768, 32768, -1), 0);
	/* knob 0 never, 1 always with several ranks */
	assert_int_equal(mk_agg_pipe_pick(2, 32768, 16384, 32768, 0), 0);
	assert_int_equal(mk_agg_pipe_pick(2, 16, 16, 16, 1), 1);
	/* the rule: a shard's GEMM of at least 2^34 flop (decode sizes stay one collective) */
	assert_int_equal(mk_agg_pipe_pick(2, 4096, 2048, 4096, -1), 1); /* 2^35 per shard */
	assert_int_equal(mk_agg_pipe_pick(2, 2048, 2048, 2048, -1), 0); /* 2^33 */
	assert_int_equal(mk_agg_pipe_pick(8, 256, 28672, 8192, -1), 0);
	assert_int_equal(mk_agg_pipe_pick(2, 2048, 2048, 4096, -1), 1); /* exactly 2^34 */
	assert_int_equal(mk_agg_pipe_pick(2, 2048, 2048, 4095, -1), 0);
	/* pieces: one for a shard under 2 x 128 rows, at most MK_AGG_PIPE_PIECES */
	assert_int_equal(mk_agg_pipe_pieces(1), 1);
	assert_int_equal(mk_agg_pipe_pieces(255), 1);
	assert_int_equal(mk_agg_pipe_pieces(256), 2);
	assert_int_equal(mk_agg_pipe_pieces(1000), MK_AGG_PIPE_PIECES);
	assert_int_equal(mk_agg_pipe_pieces(16384), MK_AGG_PIPE_PIECES);
	/* the pieces cover the shard in order, none empty, sizes within one row of each other */
	for (int ms = 1; ms <= 2100; ms += 7) {
		const int pieces = mk_agg_pipe_pieces(ms);
		int next = 0, lo = ms, hi = 0;

		for (int p = 0; p < pieces; p++) {
			int row0, rows;

			mk_agg_pipe_rows(ms, pieces, p, &row0, &rows);
			assert_int_equal(row0, next);
			assert_true(rows >= 1);
			next += rows;
			lo = rows < lo ? rows : lo;
			hi = rows > hi ? rows : hi;
		}
		assert_int_equal(next, ms);
		assert_true(hi - lo <= 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geometry),      cmocka_unit_test(test_rs_order),
		cmocka_unit_test(test_rs_bad_layout), cmocka_unit_test(test_ag_plan),
		cmocka_unit_test(test_ag_bad_input),  cmocka_unit_test(test_stage_tickets),
		cmocka_unit_test(test_split_fix),     cmocka_unit_test(test_policy_rows),
		cmocka_unit_test(test_ag_pipeline),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
