// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component moe: the MoE plan (fused/ops/moe_plan.{h,c}) on the CPU. Config rules;
 * the placement every rank computes from the count matrix against a brute-force placement from
 * the definition (experts of the owner, then source rank, then token and slot); and the unfused
 * path's whole exchange simulated with token identities: gather at every source, blocks by
 * rank, scatter at every receiver must put each (source, token, slot) at its row, and the way
 * back (the receiver's rows gathered per source, then unf_pos at the source) must return every
 * pair to its token. Routings: uniform, one hot expert, empty experts and ranks, -1 slots,
 * duplicate experts in a token, top-k 1..8, 1..8 ranks, uneven token counts. And the fused
 * kernels' rule for reading chunks of another node whose signal word counts them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/moe_plan.h"

struct routing {
	int nranks, ne, topk, max_tokens;
	int ntok[8];
	int32_t *idx[8];
	float *w[8];
};

static void routing_free(struct routing *r)
{
	for (int s = 0; s < r->nranks; s++) {
		free(r->idx[s]);
		free(r->w[s]);
	}
}

enum { R_UNIFORM, R_HOT, R_EMPTY, R_NONE_SLOTS, R_DUPLICATES };

static void routing_make(struct routing *r, int nranks, int ne, int topk, int max_tokens, int kind,
			 unsigned seed)
{
	srand(seed);
	memset(r, 0, sizeof(*r));
	r->nranks = nranks;
	r->ne = ne;
	r->topk = topk;
	r->max_tokens = max_tokens;
	for (int s = 0; s < nranks; s++) {
		const int nt =
			kind == R_EMPTY && s == 1 ? 0 : max_tokens - rand() % (max_tokens / 3 + 1);

		r->ntok[s] = nt;
		r->idx[s] = malloc(((size_t)nt * topk + 1) * sizeof(int32_t));
		r->w[s] = malloc(((size_t)nt * topk + 1) * sizeof(float));
		for (int t = 0; t < nt; t++) {
			for (int j = 0; j < topk; j++) {
				int e = rand() % ne;

				if (kind == R_HOT && rand() % 4)
					e = 3 % ne;
				if (kind == R_EMPTY)
					e = (e / 2) * 2 %
					    (ne / 2 > 0 ? ne / 2
							: 1); /* odd and upper half empty */
				if (kind == R_NONE_SLOTS && rand() % 3 == 0)
					e = -1;
				if (kind != R_DUPLICATES) {
					/* distinct experts per token, as a router gives (unless -1)
					 */
					for (int jj = 0; jj < j && e >= 0; jj++)
						if (r->idx[s][t * topk + jj] == e) {
							e = (e + 1) % ne;
							jj = -1;
						}
				}
				r->idx[s][t * topk + j] = e;
				r->w[s][t * topk + j] = (float)(rand() % 1000) / 1000.0f;
			}
		}
	}
}

/* Brute force: the row of (s, t, j) at its owner, by walking the owner's experts and sources. */
static int brute_row(const struct routing *r, const struct mk_moe_geom *g, int s0, int t0, int j0)
{
	const int e0 = r->idx[s0][t0 * r->topk + j0], q = e0 / g->eloc;
	int row = 0;

	for (int e = q * g->eloc; e < (q + 1) * g->eloc; e++)
		for (int s = 0; s < r->nranks; s++)
			for (int t = 0; t < r->ntok[s]; t++)
				for (int j = 0; j < r->topk; j++) {
					if (r->idx[s][t * r->topk + j] != e)
						continue;
					if (s == s0 && t == t0 && j == j0)
						return row;
					row++;
				}
	fail_msg("pair not found");
	return -1;
}

struct rank_plan {
	void *lay;
	int32_t *gather;
	struct mk_moe_lmap m;
	struct mk_moe_geom g;
};

#define LAY(p, f, T) ((T *)((char *)(p)->lay + (p)->m.f))

/* Plan every rank, then check placement and simulate the exchange both ways. */
static void check_routing(const struct routing *r, int max_recv_slack)
{
	const int n = r->nranks, k = r->topk;
	int32_t *cnt_all = calloc((size_t)n * r->ne, sizeof(int32_t));
	struct rank_plan p[8];
	int needed = 0, want_needed = 0;

	for (int s = 0; s < n; s++) {
		int first_bad;

		assert_int_equal(mk_moe_geom_init(&p[s].g, n, s, 1, n, 0, s, r->ne, k, 64, 32,
						  r->max_tokens, 1, 0, NULL),
				 0);
		assert_int_equal(mk_moe_count(&p[s].g, r->idx[s], r->ntok[s],
					      cnt_all + (size_t)s * r->ne, &first_bad),
				 0);
		assert_int_equal(first_bad, -1);
	}
	for (int q = 0; q < n; q++) {
		int rows = 0;

		for (int e = q * (r->ne / n); e < (q + 1) * (r->ne / n); e++)
			for (int s = 0; s < n; s++)
				rows += cnt_all[(size_t)s * r->ne + e];
		if (rows > want_needed)
			want_needed = rows;
	}
	/* Too small a capacity: refused with the rows needed. */
	if (want_needed > 1) {
		struct mk_moe_geom g;
		struct mk_moe_lmap m;
		void *lay;
		int32_t *gather = malloc(((size_t)r->max_tokens * k + 1) * 4);

		mk_moe_geom_init(&g, n, 0, 1, n, 0, 0, r->ne, k, 64, 32, r->max_tokens,
				 want_needed - 1, 0, NULL);
		mk_moe_lmap_init(&g, &m);
		lay = malloc(m.bytes);
		assert_int_equal(mk_moe_plan_unfused(&g, r->idx[0], r->w[0], r->ntok[0], cnt_all,
						     (size_t)r->ne, lay, gather, &needed),
				 -EOVERFLOW);
		assert_int_equal(needed, want_needed);
		assert_int_equal(((struct mk_moe_lhdr *)((char *)lay + m.hdr))->status,
				 MK_MOE_ST_OVERFLOW);
		free(lay);
		free(gather);
	}
	for (int s = 0; s < n; s++) {
		mk_moe_geom_init(&p[s].g, n, s, 1, n, 0, s, r->ne, k, 64, 32, r->max_tokens,
				 want_needed + max_recv_slack, 0, NULL);
		mk_moe_lmap_init(&p[s].g, &p[s].m);
		p[s].lay = malloc(p[s].m.bytes);
		p[s].gather = malloc(((size_t)r->max_tokens * k + 1) * 4);
		assert_int_equal(mk_moe_plan_unfused(&p[s].g, r->idx[s], r->w[s], r->ntok[s],
						     cnt_all, (size_t)r->ne, p[s].lay, p[s].gather,
						     &needed),
				 0);
		assert_int_equal(needed, want_needed);
	}
	/* Placement against the brute force; recv_off against the experts' totals. */
	for (int s = 0; s < n; s++) {
		const int32_t *pq = LAY(&p[s], pair_q, int32_t),
			      *prow = LAY(&p[s], pair_row, int32_t);
		const float *pw = LAY(&p[s], pair_w, float);

		for (int t = 0; t < r->max_tokens; t++)
			for (int j = 0; j < k; j++) {
				const int i = t * k + j, e = t < r->ntok[s] ? r->idx[s][i] : -1;

				if (e < 0) {
					assert_int_equal(pq[i], -1);
					continue;
				}
				assert_int_equal(pq[i], e / p[s].g.eloc);
				assert_int_equal(prow[i], brute_row(r, &p[s].g, s, t, j));
				assert_true(pw[i] == r->w[s][i]);
			}
		{
			const int32_t *off = LAY(&p[s], recv_off, int32_t);
			int total = 0;

			for (int l = 0; l < p[s].g.eloc; l++) {
				assert_int_equal(off[l], total);
				for (int ss = 0; ss < n; ss++)
					total += cnt_all[(size_t)ss * r->ne + s * p[s].g.eloc + l];
			}
			assert_int_equal(off[p[s].g.eloc], total);
			assert_int_equal(LAY(&p[s], hdr, struct mk_moe_lhdr)->total_recv, total);
		}
	}
	/*
	 * The exchange with identities: the value of a row is (s << 24 | t << 5 | j). Sources fill
	 * send buffers through gather; block (s -> q) lands in q's receive buffer at its block;
	 * q scatters; every final row must hold the pair prow says.
	 */
	{
		int32_t *final[8], *ret[8];

		for (int q = 0; q < n; q++) {
			const int32_t *cnt = LAY(&p[q], unf_count, int32_t);
			int32_t *recv = malloc(((size_t)p[q].g.max_recv + 1) * 4);
			int rpos = 0;

			final[q] = malloc(((size_t)p[q].g.max_recv + 1) * 4);
			for (int i = 0; i < p[q].g.max_recv; i++)
				final[q][i] = -1;
			for (int s = 0; s < n; s++) {
				const int32_t *scnt = LAY(&p[s], unf_count, int32_t);
				int soff = 0, got = cnt[n + s];

				for (int qq = 0; qq < q; qq++)
					soff += scnt[qq];
				assert_int_equal(scnt[q], got); /* what s sends is what q expects */
				for (int i = 0; i < got; i++) {
					const int row = soff + i, t = p[s].gather[row];
					int j = -1;

					/* which slot of t has this send row */
					for (int jj = 0; jj < k; jj++)
						if (LAY(&p[s], unf_pos, int32_t)[t * k + jj] == row)
							j = jj;
					assert_true(j >= 0);
					recv[rpos++] = (s << 24) | (t << 5) | j;
				}
			}
			for (int i = 0; i < rpos; i++) {
				const int dst = LAY(&p[q], unf_scatter, int32_t)[i];

				assert_true(dst >= 0 &&
					    dst < LAY(&p[q], hdr, struct mk_moe_lhdr)->total_recv);
				assert_int_equal(final[q][dst], -1);
				final[q][dst] = recv[i];
			}
			assert_int_equal(rpos, LAY(&p[q], hdr, struct mk_moe_lhdr)->total_recv);
			free(recv);
		}
		for (int s = 0; s < n; s++)
			for (int t = 0; t < r->ntok[s]; t++)
				for (int j = 0; j < k; j++) {
					const int i = t * k + j, q = LAY(&p[s], pair_q, int32_t)[i];

					if (q < 0)
						continue;
					assert_int_equal(final[q][LAY(&p[s], pair_row, int32_t)[i]],
							 (s << 24) | (t << 5) | j);
				}
		/* Way back: q returns rows in its receive order (gather through scatter), each
		 * source reads its block from every q; unf_pos finds the pair. */
		for (int s = 0; s < n; s++) {
			const int32_t *scnt = LAY(&p[s], unf_count, int32_t);
			int at = 0;

			ret[s] = malloc(((size_t)r->max_tokens * k + 1) * 4);
			for (int q = 0; q < n; q++) {
				const int32_t *qcnt = LAY(&p[q], unf_count, int32_t);
				int roff = 0;

				for (int ss = 0; ss < s; ss++)
					roff += qcnt[n + ss];
				for (int i = 0; i < scnt[q]; i++)
					ret[s][at++] = final[q][LAY(&p[q], unf_scatter,
								    int32_t)[roff + i]];
			}
			for (int t = 0; t < r->ntok[s]; t++)
				for (int j = 0; j < k; j++) {
					const int pos = LAY(&p[s], unf_pos, int32_t)[t * k + j];

					if (pos >= 0)
						assert_int_equal(ret[s][pos],
								 (s << 24) | (t << 5) | j);
				}
		}
		for (int q = 0; q < n; q++) {
			free(final[q]);
			free(ret[q]);
		}
	}
	for (int s = 0; s < n; s++) {
		free(p[s].lay);
		free(p[s].gather);
	}
	free(cnt_all);
}

static void test_geom_rules(void **state)
{
	struct mk_moe_geom g;
	const char *why;

	(void)state;
	assert_int_equal(
		mk_moe_geom_init(&g, 4, 1, 2, 2, 0, 1, 256, 8, 7168, 2048, 8192, 65536, 1, &why),
		0);
	assert_int_equal(g.eloc, 64);
	assert_int_equal(mk_moe_worst_recv(&g), 4LL * 8192 * 8);
	assert_int_equal(mk_moe_geom_init(&g, 3, 0, 1, 3, 0, 0, 256, 8, 64, 64, 8, 8, 0, &why),
			 -EINVAL);
	assert_non_null(strstr(why, "multiple"));
	assert_int_equal(mk_moe_geom_init(&g, 2, 0, 1, 2, 0, 0, 4, 17, 64, 64, 8, 8, 0, &why),
			 -EINVAL);
	assert_non_null(strstr(why, "topk"));
	assert_int_equal(mk_moe_geom_init(&g, 2, 0, 1, 2, 0, 0, 4, 2, 0, 64, 8, 8, 0, &why),
			 -EINVAL);
	assert_int_equal(mk_moe_geom_init(&g, 2, 0, 1, 2, 0, 0, 4, 2, 64, 64, INT_MAX, 8, 0, &why),
			 -EINVAL);
	/* fewer local experts than topk: the worst case is every token on every local expert */
	assert_int_equal(mk_moe_geom_init(&g, 8, 0, 1, 8, 0, 0, 16, 8, 64, 64, 100, 8, 0, &why), 0);
	assert_int_equal(mk_moe_worst_recv(&g), 8LL * 100 * 2);
}

static void test_count_finds_bad_ids(void **state)
{
	struct mk_moe_geom g;
	const int32_t idx[] = { 0, 3, -1, 2, 4, 1, -2, 0 };
	int32_t cnt[4];
	int first;

	(void)state;
	mk_moe_geom_init(&g, 2, 0, 1, 2, 0, 0, 4, 2, 64, 64, 4, 8, 0, NULL);
	assert_int_equal(mk_moe_count(&g, idx, 4, cnt, &first), 2);
	assert_int_equal(first, 4); /* token 2, slot 0: id 4 of 4 experts */
	assert_int_equal(cnt[0], 2);
	assert_int_equal(cnt[1], 1);
	assert_int_equal(cnt[2], 1);
	assert_int_equal(cnt[3], 1);
}

static void test_maps_are_disjoint_and_aligned(void **state)
{
	struct mk_moe_geom g;
	struct mk_moe_lmap l;
	struct mk_moe_wmap w;

	(void)state;
	mk_moe_geom_init(&g, 4, 0, 2, 2, 0, 0, 32, 8, 7168, 2048, 1000, 3000, 1, NULL);
	mk_moe_lmap_init(&g, &l);
	mk_moe_wmap_init(&g, &w);
	assert_int_equal(l.recv_off, 0);
	assert_true(l.hdr >= (size_t)(g.eloc + 1) * 4);
	assert_true(l.pair_q >= l.hdr + sizeof(struct mk_moe_lhdr));
	assert_true(l.pair_row >= l.pair_q + 1000 * 8 * 4);
	assert_true(l.inbound >= l.in_count + 2 * 4);
	assert_true(l.unf_scatter + 3000 * 4 <= l.bytes);
	assert_int_equal(w.nblk, (3000 + 127) / 128);
	assert_int_equal(w.entry_bytes % 16, 0);
	assert_int_equal(w.recv_x % 256, 0);
	assert_true(w.recv_x >= w.cnt + 2 * 4 * (size_t)w.cnt_ints * 4);
	assert_true(w.recv_blk >= w.recv_x + 3000ull * 7168 * 2);
	assert_true(w.yrows >= w.stage + 2ull * 1000 * w.entry_bytes);
	assert_true(w.land >= w.part + 2ull * 1000 * 7168 * 2);
	assert_true(w.blk_cnt >= w.ctl + sizeof(struct mk_moe_ctl));
	assert_int_equal(mk_moe_blk_rows(300, 0), 128);
	assert_int_equal(mk_moe_blk_rows(300, 2), 44);
	assert_int_equal(mk_moe_blk_rows(300, 3), 0);
	assert_int_equal(mk_moe_chunks(0), 0);
	assert_int_equal(mk_moe_chunks(MK_MOE_CHUNK + 1), 2);
}

/* A SwiGLU layer's combine (K = I) follows a dispatch of twice the width (N = 2 I): the layout
 * and workspace maps must not depend on the width, so the combine may reuse the dispatch's. */
static void test_gated_combine_reuses_exchange(void **state)
{
	struct mk_moe_geom up, down, other;
	struct mk_moe_lmap lu, ld;
	struct mk_moe_wmap wu, wd;

	(void)state;
	mk_moe_geom_init(&up, 4, 1, 2, 2, 0, 1, 32, 8, 7168, 4096, 1000, 3000, 1, NULL);
	mk_moe_geom_init(&down, 4, 1, 2, 2, 0, 1, 32, 8, 7168, 2048, 1000, 3000, 1, NULL);
	mk_moe_geom_init(&other, 4, 1, 2, 2, 0, 1, 32, 8, 4096, 2048, 1000, 3000, 1, NULL);
	assert_true(mk_moe_same_exchange(&up, &down));
	assert_false(mk_moe_same_exchange(&down, &other));
	other = down;
	other.max_recv++;
	assert_false(mk_moe_same_exchange(&down, &other));
	mk_moe_lmap_init(&up, &lu);
	mk_moe_lmap_init(&down, &ld);
	mk_moe_wmap_init(&up, &wu);
	mk_moe_wmap_init(&down, &wd);
	assert_memory_equal(&lu, &ld, sizeof(lu));
	assert_memory_equal(&wu, &wd, sizeof(wu));
}

static void test_uniform(void **state)
{
	struct routing r;

	(void)state;
	for (int n = 1; n <= 8; n *= 2) {
		routing_make(&r, n, 8 * n, 4, 40, R_UNIFORM, 1u + n);
		check_routing(&r, 0);
		routing_free(&r);
	}
}

static void test_hot_expert(void **state)
{
	struct routing r;

	(void)state;
	routing_make(&r, 4, 16, 8, 50, R_HOT, 7);
	check_routing(&r, 5);
	routing_free(&r);
}

static void test_empty_experts_and_rank(void **state)
{
	struct routing r;

	(void)state;
	routing_make(&r, 4, 16, 2, 30, R_EMPTY, 9);
	check_routing(&r, 0);
	routing_free(&r);
}

static void test_none_slots_and_duplicates(void **state)
{
	struct routing r;

	(void)state;
	routing_make(&r, 3, 6, 3, 25, R_NONE_SLOTS, 11);
	check_routing(&r, 2);
	routing_free(&r);
	routing_make(&r, 2, 4, 5, 20, R_DUPLICATES, 13);
	check_routing(&r, 0);
	routing_free(&r);
}

static void test_topk_1_to_8(void **state)
{
	struct routing r;

	(void)state;
	for (int k = 1; k <= 8; k++) {
		routing_make(&r, 4, 32, k, 33, R_UNIFORM, 100u + k);
		check_routing(&r, 1);
		routing_free(&r);
	}
}

/* Next permutation of a[0, n) in lexicographic order; 0 after the last. */
static int next_perm(int *a, int n)
{
	int i = n - 2, j = n - 1, t;

	while (i >= 0 && a[i] >= a[i + 1])
		i--;
	if (i < 0)
		return 0;
	while (a[j] <= a[i])
		j--;
	t = a[i];
	a[i] = a[j];
	a[j] = t;
	for (i++, j = n - 1; i < j; i++, j--) {
		t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
	return 1;
}

/*
 * A node's chunk signal word over consecutive calls, its chunks landing in every order: whenever
 * the word has reached mk_moe_chunks_landed(base, n), every chunk of the call has landed (a
 * reader never takes a missing chunk), the word reaches it once they all have (no hang), and the
 * next call's base is that value. The per-chunk rule (base + chunk + 1) is shown unsafe.
 */
static void test_chunk_signal_any_order(void **state)
{
	static const int tokens[] = { 0, 1, 32, 33, 64, 100, 128, 160 };
	uint32_t base = 0, word = 0;
	int per_chunk_unsafe = 0;

	(void)state;
	assert_int_equal(mk_moe_chunks_landed(7, 0), 7); /* nothing to wait for */
	for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
		const int n = tokens[i], nch = mk_moe_chunks(n);
		const uint32_t want = mk_moe_chunks_landed(base, n);
		int order[8];

		assert_true(nch <= 8);
		assert_int_equal(want - base, (uint32_t)nch);
		for (int c = 0; c < nch; c++)
			order[c] = c;
		do {
			int landed[8] = { 0 };

			for (int k = 0; k <= nch; k++) {
				/* k chunks landed: the word is base + k */
				word = base + (uint32_t)k;
				for (int c = 0; c < nch; c++) {
					if (word >= want)
						assert_true(landed[c]);
					if (word >= base + (uint32_t)c + 1 && !landed[c])
						per_chunk_unsafe = 1;
				}
				if (k < nch)
					landed[order[k]] = 1;
			}
			assert_true(word >= want);
		} while (next_perm(order, nch));
		base = want;
	}
	assert_int_equal(word, base);
	assert_true(per_chunk_unsafe);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geom_rules),
		cmocka_unit_test(test_count_finds_bad_ids),
		cmocka_unit_test(test_maps_are_disjoint_and_aligned),
		cmocka_unit_test(test_gated_combine_reuses_exchange),
		cmocka_unit_test(test_uniform),
		cmocka_unit_test(test_hot_expert),
		cmocka_unit_test(test_empty_experts_and_rank),
		cmocka_unit_test(test_none_slots_and_duplicates),
		cmocka_unit_test(test_topk_1_to_8),
		cmocka_unit_test(test_chunk_signal_any_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
