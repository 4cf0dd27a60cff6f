// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce's host-side plan: the compute order is a permutation with this rank's slice
 * first and rows ascending within each slice; the role split fills the SM share, honours
 * MKERNEL_ROLE_SPLIT's reduce and publish counts and refuses a share with no compute CTA left.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fused/ops/gemm_allreduce_plan.h"

static void check_order(int tiles_m, int tiles_n, int lr, int nl)
{
	const int tiles = tiles_m * tiles_n;
	int *order = malloc((size_t)tiles * sizeof(int));
	char *seen = calloc((size_t)tiles, 1);
	int prev_slice = 0, prev_row = -1;

	assert_non_null(order);
	assert_non_null(seen);
	mk_gar_tile_order(tiles_m, tiles_n, lr, nl, order);
	for (int i = 0; i < tiles; i++) {
		int t = order[i], tm = t / tiles_n;
		int slice = (tm % nl - lr + nl) % nl; /* 0 = mine, 1 = the next owner's, ... */

		assert_true(t >= 0 && t < tiles);
		assert_false(seen[t]);
		seen[t] = 1;
		/* slices in turn from mine; rows ascending within one */
		assert_true(slice >= prev_slice);
		if (slice == prev_slice)
			assert_true(tm >= prev_row);
		prev_slice = slice;
		prev_row = tm;
	}
	if (lr < tiles_m)
		assert_int_equal(order[0] / tiles_n % nl, lr);
	free(order);
	free(seen);
}

static void test_order_is_permutation_mine_first(void **state)
{
	(void)state;
	check_order(16, 8, 0, 1);
	check_order(16, 8, 1, 2);
	check_order(13, 5, 2, 4); /* rows not a multiple of the ranks */
	check_order(3, 7, 5, 8);  /* fewer tile rows than ranks: my slice is empty */
	check_order(1, 1, 0, 2);
}

static void test_split_fills_share(void **state)
{
	struct mk_gar_split s;

	(void)state;
	assert_int_equal(mk_gar_split(132, 1, NULL, &s), 0);
	assert_int_equal(s.reduce, 8);
	assert_int_equal(s.publish, 8);
	assert_int_equal(s.compute + s.reduce + s.publish, 132);
	assert_int_equal(mk_gar_split(132, 2, "", &s), 0);
	assert_int_equal(s.compute + s.reduce + s.publish, 66);
	assert_int_equal(s.reduce, 4);
	/* small shares keep one CTA per communication role */
	assert_int_equal(mk_gar_split(8, 1, NULL, &s), 0);
	assert_int_equal(s.reduce, 1);
	assert_int_equal(s.compute, 6);
}

static void test_split_env_and_refusal(void **state)
{
	struct mk_gar_split s;

	(void)state;
	assert_int_equal(mk_gar_split(132, 1, "100,12,0,6", &s), 0);
	assert_int_equal(s.reduce, 12);
	assert_int_equal(s.publish, 6);
	assert_int_equal(s.compute, 114);
	/* zero or malformed fields keep the defaults */
	assert_int_equal(mk_gar_split(132, 1, "0,0,0,0", &s), 0);
	assert_int_equal(s.reduce, 8);
	assert_int_equal(mk_gar_split(132, 1, "garbage", &s), 0);
	assert_int_equal(s.publish, 8);
	/* nothing left for compute */
	assert_int_equal(mk_gar_split(132, 1, "0,70,0,70", &s), -EINVAL);
	assert_int_equal(mk_gar_split(2, 1, NULL, &s), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_is_permutation_mine_first),
		cmocka_unit_test(test_split_fills_share),
		cmocka_unit_test(test_split_env_and_refusal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
