// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component moe: the grouped GEMM's device-side tile schedule (grouped_sched.h,
 * the same code the kernels run), the Hopper kernel's host rules (mk_grouped_check) and
 * mkGroupedGemm's argument errors, on the CPU.
 *
 * The schedule is checked against a reference written here from the definition (experts in
 * order, clipped row ranges, bands of 16 tile rows walked column-major), for every way CTAs take
 * tickets (static strides of several grid sizes, increasing tickets with random gaps), and for
 * the property the kernel's correctness rests on: per column tile, the tiles' rows are disjoint,
 * inside [0, max_rows), inside their expert, and cover every expert row exactly once.
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

#include "mkernel.h"
#include "fused/gemm/grouped.h"
#include "fused/gemm/grouped_sched.h"

#define A_PTR ((const void *)(uintptr_t)0x10000)
#define B_PTR ((const void *)(uintptr_t)0x20000)
#define C_PTR ((void *)(uintptr_t)0x30000)
#define O_PTR ((const int *)(uintptr_t)0x40000)

struct ref_tile {
	int e, row0, rows, n0;
};

/* Expert ranges from the definition in grouped_sched.h. */
static void ref_ranges(const int *off, int ne, int max_rows, int *lo, int *hi)
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

/* Every tile in ticket order; returns the count. */
static int ref_tiles(const int *off, int ne, int max_rows, int n, int bm, int bn,
		     struct ref_tile **out)
{
	int *lo = calloc(ne, sizeof(int)), *hi = calloc(ne, sizeof(int));
	const int tiles_n = (n + bn - 1) / bn;
	int cap = 16, cnt = 0;
	struct ref_tile *t = malloc(cap * sizeof(*t));

	ref_ranges(off, ne, max_rows, lo, hi);
	for (int e = 0; e < ne; e++) {
		const int tiles_m = (hi[e] - lo[e] + bm - 1) / bm;

		for (int first = 0; first < tiles_m; first += MK_GROUPED_GROUP_M) {
			const int band = tiles_m - first < MK_GROUPED_GROUP_M ? tiles_m - first
									      : MK_GROUPED_GROUP_M;

			for (int tn = 0; tn < tiles_n; tn++) {
				for (int tm = first; tm < first + band; tm++) {
					if (cnt == cap) {
						cap *= 2;
						t = realloc(t, cap * sizeof(*t));
					}
					t[cnt].e = e;
					t[cnt].row0 = lo[e] + tm * bm;
					t[cnt].rows =
						hi[e] - t[cnt].row0 < bm ? hi[e] - t[cnt].row0 : bm;
					t[cnt].n0 = tn * bn;
					cnt++;
				}
			}
		}
	}
	free(lo);
	free(hi);
	*out = t;
	return cnt;
}

static void expect_tile(const struct mk_grouped_tile *got, const struct ref_tile *want, int ticket)
{
	if (got->e != want->e || got->row0 != want->row0 || got->rows != want->rows ||
	    got->n0 != want->n0)
		fail_msg(
			"ticket %d: got (e %d, row0 %d, rows %d, n0 %d), want (e %d, row0 %d, rows "
			"%d, n0 %d)",
			ticket, got->e, got->row0, got->rows, got->n0, want->e, want->row0,
			want->rows, want->n0);
}

/* Disjoint, in range, inside the expert, and every expert row covered once per column tile. */
static void check_coverage(const int *off, int ne, int max_rows, int n, int bm, int bn,
			   const struct ref_tile *t, int cnt)
{
	const int tiles_n = (n + bn - 1) / bn;
	int *lo = calloc(ne, sizeof(int)), *hi = calloc(ne, sizeof(int));
	unsigned char *seen = calloc((size_t)(max_rows + 1) * tiles_n, 1);

	ref_ranges(off, ne, max_rows, lo, hi);
	for (int i = 0; i < cnt; i++) {
		assert_true(t[i].rows >= 1 && t[i].rows <= bm);
		assert_true(t[i].row0 >= lo[t[i].e] && t[i].row0 + t[i].rows <= hi[t[i].e]);
		assert_true(t[i].row0 >= 0 && t[i].row0 + t[i].rows <= max_rows);
		assert_true(t[i].n0 % bn == 0 && t[i].n0 < n);
		for (int r = t[i].row0; r < t[i].row0 + t[i].rows; r++) {
			unsigned char *s = &seen[(size_t)r * tiles_n + t[i].n0 / bn];

			assert_int_equal(*s, 0);
			*s = 1;
		}
	}
	for (int e = 0; e < ne; e++)
		for (int r = lo[e]; r < hi[e]; r++)
			for (int tn = 0; tn < tiles_n; tn++)
				assert_int_equal(seen[(size_t)r * tiles_n + tn], 1);
	free(lo);
	free(hi);
	free(seen);
}

/*
 * The schedule against the reference: static tickets for several grid sizes, and one cursor fed
 * increasing tickets with random gaps (an atomic counter shared by CTAs).
 */
static void check_schedule(const int *off, int ne, int max_rows, int n, int bm, int bn)
{
	const struct mk_grouped_shape s = { off, ne, max_rows, (n + bn - 1) / bn, bm, bn };
	struct ref_tile *ref;
	const int cnt = ref_tiles(off, ne, max_rows, n, bm, bn, &ref);
	const int grids[] = { 1, 2, 3, 8, 132, cnt + 5 };

	check_coverage(off, ne, max_rows, n, bm, bn, ref, cnt);
	assert_true(cnt <= mk_grouped_tile_bound(max_rows, ne, s.tiles_n, bm, INT_MAX));
	for (size_t g = 0; g < sizeof(grids) / sizeof(grids[0]); g++) {
		int taken = 0;

		for (int rank = 0; rank < grids[g]; rank++) {
			struct mk_grouped_cursor c = { 0, 0, 0 };
			struct mk_grouped_tile t = { 0 };
			int ticket;

			for (ticket = rank; ticket < cnt; ticket += grids[g]) {
				assert_int_equal(mk_grouped_find(&c, &s, ticket, &t), 1);
				expect_tile(&t, &ref[ticket], ticket);
				taken++;
			}
			assert_int_equal(mk_grouped_find(&c, &s, ticket, &t), 0);
			assert_int_equal(t.e, -1);
		}
		assert_int_equal(taken, cnt);
	}
	{
		struct mk_grouped_cursor c = { 0, 0, 0 };
		struct mk_grouped_tile t = { 0 };
		int ticket = 0;

		while (ticket < cnt) {
			assert_int_equal(mk_grouped_find(&c, &s, ticket, &t), 1);
			expect_tile(&t, &ref[ticket], ticket);
			ticket += 1 + rand() % 40;
		}
		assert_int_equal(mk_grouped_find(&c, &s, ticket, &t), 0);
	}
	free(ref);
}

/* Offsets from counts, starting at `first`. */
static int *offsets_of(const int *counts, int ne, int first)
{
	int *off = malloc((ne + 1) * sizeof(int));

	off[0] = first;
	for (int e = 0; e < ne; e++)
		off[e + 1] = off[e] + counts[e];
	return off;
}

static void check_counts(const int *counts, int ne, int first, int slack, int n)
{
	int *off = offsets_of(counts, ne, first);
	const int max_rows = off[ne] + slack;

	check_schedule(off, ne, max_rows, n, MK_GEMM_BM, MK_GEMM_BN);
	check_schedule(off, ne, max_rows, n, MK_GROUPED_P_BM, MK_GROUPED_P_BN);
	free(off);
}

static void test_uniform_and_deepseek_shapes(void **state)
{
	int counts[32];

	(void)state;
	for (int e = 0; e < 32; e++)
		counts[e] = 256;
	check_counts(counts, 32, 0, 0, 2048); /* up projection, 8192 rows */
	check_counts(counts, 32, 0, 0, 7168); /* down projection */
	for (int e = 0; e < 32; e++)
		counts[e] = 2048;
	check_counts(counts, 32, 0, 0, 2048);
}

static void test_skewed_one_hot_expert(void **state)
{
	int counts[16] = { 0 };

	(void)state;
	counts[5] = 8000;
	check_counts(counts, 16, 0, 192, 1000);
	counts[0] = 3;
	counts[15] = 1;
	check_counts(counts, 16, 0, 0, 256);
	memset(counts, 0, sizeof(counts));
	counts[15] = 4097; /* hot last expert, many empty windows before it */
	check_counts(counts, 16, 0, 0, 512);
}

static void test_empty_experts(void **state)
{
	int counts[20] = { 0, 0, 130, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 1, 0, 0, 0, 0, 0, 0 };
	int none[9] = { 0 };

	(void)state;
	check_counts(counts, 20, 0, 0, 700);
	check_counts(none, 9, 0, 100, 700); /* every expert empty: no tile at all */
	check_counts(none, 1, 0, 0, 8);
}

static void test_odd_counts_at_tile_edges(void **state)
{
	const int counts[] = { 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 7, 300 };
	const int ne = sizeof(counts) / sizeof(counts[0]);

	(void)state;
	check_counts(counts, ne, 0, 0, 1000);
	check_counts(counts, ne, 5, 77, 257); /* rows before the first and after the last */
	check_counts(counts, ne, 0, 0, 8);
}

/* Window edges: expert counts around MK_GROUPED_WINDOW, and many experts (DeepSeek's 256). */
static void test_window_edges_and_many_experts(void **state)
{
	const int sizes[] = { 1, 7, 8, 9, 15, 16, 17, 64, 256, 300 };

	(void)state;
	srand(11);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int *counts = malloc(sizes[i] * sizeof(int));

		for (int e = 0; e < sizes[i]; e++)
			counts[e] = rand() % 3 == 0 ? 0 : rand() % 400;
		check_counts(counts, sizes[i], rand() % 3, rand() % 50, 64 + rand() % 1500);
		free(counts);
	}
}

/* Bands: an expert with more than MK_GROUPED_GROUP_M tile rows, and a partial last band. */
static void test_bands(void **state)
{
	const int counts[] = { 128 * 16 * 2 + 128 * 3 + 5, 128 * 16, 1 };

	(void)state;
	check_counts(counts, 3, 0, 0, 1024);
}

/* Offsets that are not a partition stay inside [0, max_rows) with disjoint expert rows. */
static void test_invalid_offsets_are_clipped(void **state)
{
	const int decreasing[] = { 0, 500, 200, 900, 100, 1000 };
	const int negative[] = { -50, -10, 30, 30, 20, 80 };
	const int past_end[] = { 0, 100, 5000, 7000, 9000, 9000 };
	const int overlapping[] = { 0, 700, 0, 700, 0, 700 };

	(void)state;
	check_schedule(decreasing, 5, 1000, 300, MK_GEMM_BM, MK_GEMM_BN);
	check_schedule(negative, 5, 60, 300, MK_GEMM_BM, MK_GEMM_BN);
	check_schedule(past_end, 5, 4096, 300, MK_GEMM_BM, MK_GEMM_BN);
	check_schedule(overlapping, 5, 700, 256, MK_GEMM_BM, MK_GEMM_BN);
	check_schedule(past_end, 5, 0, 300, MK_GROUPED_P_BM, MK_GROUPED_P_BN);
}

static void test_random_routings(void **state)
{
	(void)state;
	srand(5);
	for (int it = 0; it < 200; it++) {
		const int ne = 1 + rand() % 40;
		int *counts = malloc(ne * sizeof(int));

		for (int e = 0; e < ne; e++)
			counts[e] = rand() % 4 == 0 ? 0 : rand() % (1 + rand() % 600);
		check_counts(counts, ne, rand() % 2 ? 0 : rand() % 200, rand() % 130,
			     1 + rand() % 2000);
		free(counts);
	}
}

static void test_tile_bound(void **state)
{
	(void)state;
	assert_int_equal(mk_grouped_tile_bound(8192, 32, 8, 128, MK_GROUPED_MAX_TILES),
			 (64 + 32) * 8);
	assert_int_equal(mk_grouped_tile_bound(0, 5, 3, 128, MK_GROUPED_MAX_TILES), 15);
	assert_int_equal(mk_grouped_tile_bound(INT_MAX, 1 << 20, 1 << 20, 64, MK_GROUPED_MAX_TILES),
			 -1);
}

static void check_rule(const struct mk_grouped_launch *l, const char *want)
{
	const char *why = "unset";
	int rc = mk_grouped_check(l, &why);

	if (want == NULL) {
		assert_int_equal(rc, 0);
		assert_null(why);
	} else {
		assert_int_equal(rc, -EINVAL);
		assert_non_null(why);
		if (strstr(why, want) == NULL)
			fail_msg("rule '%s' expected, got '%s'", want, why);
	}
}

static struct mk_grouped_launch launch_of(int ne, int rows, int n, int k, int layout)
{
	struct mk_grouped_launch l;

	memset(&l, 0, sizeof(l));
	l.a = A_PTR;
	l.b = B_PTR;
	l.c = C_PTR;
	l.offsets = O_PTR;
	l.num_experts = ne;
	l.max_rows = rows;
	l.n = n;
	l.k = k;
	l.b_layout = layout;
	return l;
}

static void test_hopper_rules(void **state)
{
	struct mk_grouped_launch l;

	(void)state;
	l = launch_of(32, 8192, 2048, 7168, MK_GEMM_B_NK);
	check_rule(&l, NULL);
	l = launch_of(32, 8192, 7168, 2048, MK_GEMM_B_KN);
	check_rule(&l, NULL);
	l = launch_of(3, 0, 1001, 8, MK_GEMM_B_NK); /* odd N with an N x K B, no rows */
	check_rule(&l, NULL);
	l = launch_of(3, 100, 1001, 8, MK_GEMM_B_KN);
	check_rule(&l, "N must be a multiple of 8");
	l = launch_of(3, 100, 64, 12, MK_GEMM_B_NK);
	check_rule(&l, "K must be a multiple of 8");
	l = launch_of(3, 100, 64, 64, MK_GEMM_B_NK);
	l.a = (const char *)A_PTR + 8;
	check_rule(&l, "16-byte aligned");
	l = launch_of(3, 100, 64, 64, MK_GEMM_B_NK);
	l.c = (char *)C_PTR + 1;
	check_rule(&l, "2-byte aligned");
	l = launch_of(3, 100, 64, 64, MK_GEMM_B_NK);
	l.offsets = NULL;
	check_rule(&l, "must not be NULL");
	l = launch_of(0, 100, 64, 64, MK_GEMM_B_NK);
	check_rule(&l, ">= 1");
	l = launch_of(3, 100, 64, 64, 7);
	check_rule(&l, "unknown B layout");
	l = launch_of(1 << 20, INT_MAX, 1 << 20, 64, MK_GEMM_B_NK);
	check_rule(&l, "too many tiles");
}

/* Errors found before any CUDA call: nothing launched, ncclInvalidArgument. */
static void test_api_invalid_arguments(void **state)
{
	const mkLayout_t nk = mkLayoutRowMajorNK;

	(void)state;
	assert_int_equal(
		mkGroupedGemm(NULL, B_PTR, C_PTR, O_PTR, 4, 64, 64, 64, ncclBfloat16, nk, 0),
		ncclInvalidArgument);
	assert_int_equal(
		mkGroupedGemm(A_PTR, B_PTR, C_PTR, NULL, 4, 64, 64, 64, ncclBfloat16, nk, 0),
		ncclInvalidArgument);
	assert_int_equal(
		mkGroupedGemm(A_PTR, B_PTR, C_PTR, O_PTR, 0, 64, 64, 64, ncclBfloat16, nk, 0),
		ncclInvalidArgument);
	assert_int_equal(
		mkGroupedGemm(A_PTR, B_PTR, C_PTR, O_PTR, 4, 64, 0, 64, ncclBfloat16, nk, 0),
		ncclInvalidArgument);
	assert_int_equal(mkGroupedGemm(A_PTR, B_PTR, C_PTR, O_PTR, 4, 64, 64, (size_t)INT_MAX + 1,
				       ncclBfloat16, nk, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGroupedGemm(A_PTR, B_PTR, C_PTR, O_PTR, 4, (size_t)INT_MAX + 1, 64, 64,
				       ncclBfloat16, nk, 0),
			 ncclInvalidArgument);
	assert_int_equal(
		mkGroupedGemm(A_PTR, B_PTR, C_PTR, O_PTR, 4, 64, 64, 64, ncclFloat32, nk, 0),
		ncclInvalidArgument);
	assert_int_equal(mkGroupedGemm(A_PTR, B_PTR, C_PTR, O_PTR, 4, 64, 64, 64, ncclBfloat16,
				       (mkLayout_t)3, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGroupedGemm((const char *)A_PTR + 1, B_PTR, C_PTR, O_PTR, 4, 64, 64, 64,
				       ncclBfloat16, nk, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGroupedGemm(A_PTR, B_PTR, C_PTR, (const int *)((uintptr_t)O_PTR + 2), 4,
				       64, 64, 64, ncclBfloat16, nk, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGroupedGemm(A_PTR, B_PTR, C_PTR, O_PTR, 1 << 20, INT_MAX, 1 << 20, 64,
				       ncclBfloat16, nk, 0),
			 ncclInvalidArgument);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uniform_and_deepseek_shapes),
		cmocka_unit_test(test_skewed_one_hot_expert),
		cmocka_unit_test(test_empty_experts),
		cmocka_unit_test(test_odd_counts_at_tile_edges),
		cmocka_unit_test(test_window_edges_and_many_experts),
		cmocka_unit_test(test_bands),
		cmocka_unit_test(test_invalid_offsets_are_clipped),
		cmocka_unit_test(test_random_routings),
		cmocka_unit_test(test_tile_bound),
		cmocka_unit_test(test_hopper_rules),
		cmocka_unit_test(test_api_invalid_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
