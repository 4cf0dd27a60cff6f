// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component attn: mkRingAttention's plan against brute force. For every ring size
 * up to 16, every node layout, causal (zigzag) and not, and every rank: the steps cover each
 * (query, key) pair of the global mask exactly once and nothing else; every rank's steps read
 * every rank's block once, its own first; each row is fresh in its first step and final in its
 * last; a block's holder and landing slot are right; causal work is the same on every rank;
 * the heap layout and signal words.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/ops/ring_attention_plan.h"
#include "tuner/policy.h"

struct layout {
	int node_of[MK_RING_MAX_RANKS], local_of[MK_RING_MAX_RANKS];
};

/* Ranks numbered node-major (or, with interleave, local-major: mkComm takes any map). */
static void geom(struct mk_ring_geom *g, struct layout *lay, int nnodes, int nlocal, int rank,
		 int causal, int sl, int interleave)
{
	const int R = nnodes * nlocal;

	for (int r = 0; r < R; r++) {
		lay->node_of[r] = interleave ? r % nnodes : r / nlocal;
		lay->local_of[r] = interleave ? r / nnodes : r % nlocal;
	}
	memset(g, 0, sizeof(*g));
	g->nranks = R;
	g->rank = rank;
	g->nnodes = nnodes;
	g->nlocal = nlocal;
	g->node = lay->node_of[rank];
	g->local = lay->local_of[rank];
	g->node_of = lay->node_of;
	g->local_of = lay->local_of;
	g->causal = causal;
	g->seq_local = sl;
}

/* Steps of one rank, checked; returns the number of (query, key) cells it computes. */
static long long check_rank(const struct mk_ring_geom *g)
{
	struct mk_ring_step st[MK_RING_MAX_RANKS];
	const int R = g->nranks, sl = g->seq_local;
	const char *why = "unset";
	int seen[MK_RING_MAX_RANKS] = { 0 };
	long long cells = 0;

	assert_int_equal(mk_ring_steps(g, st, &why), 0);
	assert_null(why);
	assert_int_equal(st[0].src, g->rank);
	assert_int_equal(st[0].where, MK_RING_SELF);
	for (int i = 0; i < R; i++) {
		const struct mk_ring_step *s = &st[i];
		const int sn = g->node_of[s->src], sloc = g->local_of[s->src];

		assert_int_equal(seen[s->src]++, 0);
		assert_true(s->sq >= 1 && s->skv >= 1);
		assert_true(s->q_row0 >= 0 && s->q_row0 + s->sq <= sl);
		assert_true(s->kv_row0 >= 0 && s->kv_row0 + s->skv <= sl);
		assert_int_equal(s->holder, sloc);
		if (s->src == g->rank) {
			assert_int_equal(s->where, MK_RING_SELF);
		} else if (sn == g->node) {
			assert_int_equal(s->where, MK_RING_PEER);
			/* node peers before any other node's block */
			for (int j = 0; j < i; j++)
				assert_int_not_equal(st[j].where, MK_RING_LANDED);
		} else {
			assert_int_equal(s->where, MK_RING_LANDED);
			assert_int_equal(s->slot, mk_ring_slot(sn, g->node));
			assert_true(s->slot >= 0 && s->slot < g->nnodes - 1);
		}
	}
	/* every (my row, global key) pair: covered exactly as often as the global mask allows */
	for (int i = 0; i < sl; i++) {
		const long long qp = mk_ring_pos(g, g->rank, i);
		int fresh = 0, final = 0, first = -1, last = -1;

		for (int k = 0; k < R; k++) {
			const struct mk_ring_step *s = &st[k];
			const int ii = i - s->q_row0;

			if (ii < 0 || ii >= s->sq)
				continue;
			if (first < 0)
				first = k;
			last = k;
			fresh += ii >= s->fresh_lo && ii < s->fresh_hi;
			final += ii >= s->final_lo && ii < s->final_hi;
			if (ii >= s->fresh_lo && ii < s->fresh_hi)
				assert_int_equal(first, k);
		}
		assert_int_equal(fresh, 1);
		assert_int_equal(final, 1);
		{
			const struct mk_ring_step *s = &st[last];

			assert_true(i - s->q_row0 >= s->final_lo && i - s->q_row0 < s->final_hi);
		}
		for (int src = 0; src < R; src++) {
			for (int j = 0; j < sl; j++) {
				const long long kp = mk_ring_pos(g, src, j);
				const int want = !g->causal || kp <= qp;
				int got = 0;

				for (int k = 0; k < R; k++) {
					const struct mk_ring_step *s = &st[k];
					const int ii = i - s->q_row0, jj = j - s->kv_row0;

					if (s->src != src || ii < 0 || ii >= s->sq || jj < 0 ||
					    jj >= s->skv)
						continue;
					got += !s->causal || jj <= ii + s->diag;
				}
				if (got != want)
					fail_msg("R %d nodes %d causal %d S_l %d rank %d: row %d "
						 "(pos %lld) key %d of rank %d (pos %lld) computed "
						 "%d times, want %d",
						 R, g->nnodes, g->causal, sl, g->rank, i, qp, j,
						 src, kp, got, want);
				cells += got;
			}
		}
	}
	return cells;
}

static void test_ring_steps_cover_the_global_mask(void **state)
{
	static const int sls[] = { 2, 4, 6, 10 };
	int layouts = 0;

	(void)state;
	for (int R = 1; R <= MK_RING_MAX_RANKS; R++)
		for (int nn = 1; nn <= R; nn++) {
			if (R % nn)
				continue;
			for (int interleave = 0; interleave < 2; interleave++)
				for (int causal = 0; causal < 2; causal++)
					for (size_t s = 0; s < sizeof(sls) / sizeof(sls[0]); s++) {
						long long lo = -1, hi = -1;

						if (R > 8 && s > 1)
							continue; /* keep the brute force quick */
						for (int r = 0; r < R; r++) {
							struct mk_ring_geom g;
							struct layout lay;
							long long c;

							geom(&g, &lay, nn, R / nn, r, causal,
							     sls[s], interleave);
							c = check_rank(&g);
							lo = lo < 0 || c < lo ? c : lo;
							hi = c > hi ? c : hi;
						}
						/* zigzag: every rank computes the same cells */
						assert_int_equal(lo, hi);
						layouts++;
					}
		}
	print_message("%d ring layouts checked on every rank\n", layouts);
}

static void test_ring_causal_steps_skip_future_chunks(void **state)
{
	struct mk_ring_geom g;
	struct layout lay;
	struct mk_ring_step st[MK_RING_MAX_RANKS];

	(void)state;
	/* R 4, S_l 8 (chunks of 4), rank 1 holds chunks 1 and 6 */
	geom(&g, &lay, 2, 2, 1, 1, 8, 0);
	assert_int_equal(mk_ring_steps(&g, st, NULL), 0);
	for (int i = 0; i < 4; i++) {
		const struct mk_ring_step *s = &st[i];

		if (s->src == 1) { /* mine: all rows, all keys, causal */
			assert_true(s->causal && s->q_row0 == 0 && s->sq == 8 && s->skv == 8);
		} else if (s->src == 0) { /* rank 0 (chunks 0, 7): all rows x chunk 0 */
			assert_true(!s->causal && s->sq == 8 && s->kv_row0 == 0 && s->skv == 4);
		} else { /* ranks 2, 3: chunk 6 x both of theirs */
			assert_true(!s->causal && s->q_row0 == 4 && s->sq == 4 && s->skv == 8);
		}
	}
	/* the last step of rank 1 is rank 3's (node 1 after node 0): its rows are final; rows 0..3
	 * were final at the last step that covered them (rank 0's) */
	assert_int_equal(st[3].src, 3);
	assert_true(st[3].final_lo == 0 && st[3].final_hi == 4);
}

static void test_ring_rules(void **state)
{
	struct mk_ring_geom g;
	struct layout lay;
	struct mk_ring_step st[MK_RING_MAX_RANKS];
	const char *why = NULL;

	(void)state;
	geom(&g, &lay, 1, 2, 0, 1, 7, 0);
	assert_int_equal(mk_ring_steps(&g, st, &why), -EINVAL);
	assert_non_null(strstr(why, "even seqLocal"));
	geom(&g, &lay, 1, 2, 0, 0, 7, 0);
	assert_int_equal(mk_ring_steps(&g, st, &why), 0);
	geom(&g, &lay, 2, 2, 0, 0, 8, 0);
	g.nnodes = 3;
	assert_int_equal(mk_ring_steps(&g, st, &why), -EINVAL);
	assert_non_null(strstr(why, "same number of ranks"));
	geom(&g, &lay, 1, 2, 0, 0, 1 << 29, 0);
	assert_int_equal(mk_ring_steps(&g, st, &why), -EINVAL);
	assert_non_null(strstr(why, "2^30"));
	geom(&g, &lay, 2, 2, 0, 0, 8, 0);
	lay.local_of[3] = 0; /* two ranks at node 1, local 0 */
	assert_int_equal(mk_ring_steps(&g, st, &why), -EINVAL);
	assert_non_null(strstr(why, "same node and local index"));
}

static void test_ring_mem_and_signals(void **state)
{
	struct mk_ring_mem m;

	(void)state;
	assert_int_equal(mk_ring_mem_plan(4, 12288, 16, 128, 2, 100, &m), 0);
	assert_int_equal(m.blk, (size_t)4 * 12288 * 16 * 128 * 2);
	assert_int_equal(m.kv_off, 0);
	assert_int_equal(m.land_off, 2 * m.blk);
	assert_true(m.flags_off >= 4 * m.blk && m.flags_off % 256 == 0);
	assert_int_equal(m.bytes, m.flags_off + 100);
	assert_int_equal(mk_ring_mem_plan(1, 3, 1, 64, 1, 8, &m), 0);
	assert_int_equal(m.flags_off, 768); /* 2 x 384 bytes, no landing slot, aligned */
	assert_int_equal(mk_ring_mem_plan(0, 3, 1, 64, 1, 8, &m), -EINVAL);
	/* the last 2 x nnodes words of the second quarter, distinct */
	/* the top 2 x nnodes words of the ring's range [S/4, 3S/8), clear of mkGemmAllReduce's
	 * [0, S/4) (whose one-shot words the first version shared) */
	assert_int_equal(mk_ring_sig_kv(8192, 4, 0), 3064);
	assert_int_equal(mk_ring_sig_kv(8192, 4, 3), 3067);
	assert_int_equal(mk_ring_sig_free(8192, 4, 0), 3068);
	assert_int_equal(mk_ring_sig_free(8192, 4, 3), 3071);
	assert_true(mk_ring_sig_kv(8192, 16, 0) >= mk_sig_gar_end(8192));
	assert_int_equal(mk_ring_chunks(0, 8), 1);
	assert_int_equal(mk_ring_chunks(8, 8), 1);
	assert_int_equal(mk_ring_chunks(9, 8), 2);
}

static void test_ring_split(void **state)
{
	struct mk_gar_split sp;

	(void)state;
	/* one rank per node over two nodes: the policy gave intra nothing, publish takes one */
	memset(&sp, 0, sizeof(sp));
	sp.sms[0] = 120;
	sp.sms[2] = 6;
	sp.sms[3] = 6;
	sp.min[2] = sp.min[3] = 1;
	sp.max[2] = sp.max[3] = 66;
	assert_int_equal(mk_ring_split_fix(&sp, 2, 2), 0);
	assert_int_equal(sp.sms[0], 119);
	assert_int_equal(sp.sms[1], 1);
	assert_true(sp.min[1] == 1 && sp.max[1] >= 1);
	assert_int_equal(sp.sms[0] + sp.sms[1] + sp.sms[2] + sp.sms[3], 132);
	/* one node: send and land give theirs to compute */
	assert_int_equal(mk_ring_split_fix(&sp, 2, 1), 0);
	assert_true(sp.sms[2] == 0 && sp.sms[3] == 0 && sp.max[2] == 0 && sp.max[3] == 0);
	assert_int_equal(sp.sms[0] + sp.sms[1], 132);
	/* one rank: compute alone */
	assert_int_equal(mk_ring_split_fix(&sp, 1, 1), 0);
	assert_int_equal(sp.sms[0], 132);
	/* nothing left for compute */
	memset(&sp, 0, sizeof(sp));
	sp.sms[0] = 1;
	assert_int_equal(mk_ring_split_fix(&sp, 4, 2), -EINVAL);
}

/* The policy engine's row: SMs split for the roles, and the cost model's choice. */
static void test_ring_cost_model(void **state)
{
	struct mk_policy_op_query q;
	struct mk_policy_sm_split s, c;
	/* B 4, H 16, D 128, seqLocal 8192 on 8 ranks: 4 B H D S_l S flops at 600 TFLOP/s */
	const double attn_us = 4.0 * 4 * 16 * 128 * 8192.0 * 8192 * 8 / 600e6;

	(void)state;
	memset(&q, 0, sizeof(q));
	q.op = MK_FUSED_RING_ATTENTION;
	q.m = 8192;
	q.n = 16 * 128;
	q.k = 4;
	q.kv_n = 16 * 128;
	q.dtype_bytes = 2;
	q.nnodes = 1;
	q.nranks = 8;
	q.sms = 132;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.fuse, 1);
	assert_true(s.fused_us < s.unfused_us);
	/* the roles' SMs join the compute once the traffic is over: close to the attention */
	assert_true(s.fused_us >= attn_us && s.fused_us < 1.05 * attn_us + 100);
	assert_true(s.unfused_us > attn_us);
	/* causal: half the work */
	q.causal = 1;
	assert_int_equal(mk_policy_sm_split(&q, &c), 0);
	assert_true(c.fused_us > 0.45 * s.fused_us && c.fused_us < 0.55 * s.fused_us);
	/* two nodes of 8: the blocks cross the network once per node, still overlapped */
	q.causal = 0;
	q.nnodes = 2;
	q.nranks = 16;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.fuse, 1);
	assert_true(s.sms[MK_ROLE_SEND] > 0 && s.sms[MK_ROLE_REDUCE] > 0);
	/* GQA: less to move, the same work */
	q.kv_n = 2 * 128;
	assert_int_equal(mk_policy_sm_split(&q, &c), 0);
	assert_true(c.unfused_us < s.unfused_us && c.fused_us <= s.fused_us);
	/* one rank: nothing to fuse */
	q.nnodes = 1;
	q.nranks = 1;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.fuse, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ring_steps_cover_the_global_mask),
		cmocka_unit_test(test_ring_causal_steps_skip_future_chunks),
		cmocka_unit_test(test_ring_rules),
		cmocka_unit_test(test_ring_mem_and_signals),
		cmocka_unit_test(test_ring_split),
		cmocka_unit_test(test_ring_cost_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
