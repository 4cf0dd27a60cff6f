// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component gemm: the engine's host-side rules, which run without a GPU. Tile counts
 * from mk_gemm_args_init() and every alignment and argument rule of mk_gemm_check() with the
 * reason it names (mkGemm's argument errors are test/unit/ops/test_ops_api.c's). Pointers are
 * addresses only: nothing here dereferences them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "fused/gemm/gemm.h"

#define A_PTR ((const void *)(uintptr_t)0x10000)
#define B_PTR ((const void *)(uintptr_t)0x20000)
#define C_PTR ((void *)(uintptr_t)0x30000)

static int check(const struct mk_gemm_args *args, const void *a, const void *b, const char *want)
{
	const char *why = "unset";
	int rc = mk_gemm_check(a, b, args, &why);

	if (want == NULL) {
		assert_int_equal(rc, 0);
		assert_null(why);
	} else {
		assert_int_equal(rc, -EINVAL);
		assert_non_null(why);
		assert_non_null(strstr(why, want));
	}
	return rc;
}

static void test_args_init_tails_round_up(void **state)
{
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 128, 256, 64, MK_GEMM_B_NK, C_PTR);
	assert_int_equal(g.tiles_m, 1);
	assert_int_equal(g.tiles_n, 1);
	mk_gemm_args_init(&g, 129, 257, 8, MK_GEMM_B_NK, C_PTR);
	assert_int_equal(g.tiles_m, 2);
	assert_int_equal(g.tiles_n, 2);
	mk_gemm_args_init(&g, 1, 1, 8, MK_GEMM_B_KN, C_PTR);
	assert_int_equal(g.tiles_m, 1);
	assert_int_equal(g.tiles_n, 1);
	assert_ptr_equal(g.epi.out[0], C_PTR);
	assert_int_equal(g.epi.ld[0], 1);
	assert_null(g.epi.out[1]);
	assert_null(g.epi.ready);
	assert_null(g.sched.order);
	assert_null(g.sched.counter);
}

static void test_check_aligned_shapes_pass(void **state)
{
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 8192, 8192, 8192, MK_GEMM_B_NK, C_PTR);
	check(&g, A_PTR, B_PTR, NULL);
	/* Tails in M and N are the engine's job, also an odd N when B is N x K. */
	mk_gemm_args_init(&g, 1001, 999, 520, MK_GEMM_B_NK, C_PTR);
	check(&g, A_PTR, B_PTR, NULL);
	mk_gemm_args_init(&g, 1, 8, 8, MK_GEMM_B_KN, C_PTR);
	check(&g, A_PTR, B_PTR, NULL);
}

static void test_check_k_not_multiple_of_8_names_rule(void **state)
{
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 256, 384, 1, MK_GEMM_B_NK, C_PTR);
	check(&g, A_PTR, B_PTR, "K must be a multiple of 8");
	mk_gemm_args_init(&g, 256, 384, 1001, MK_GEMM_B_KN, C_PTR);
	check(&g, A_PTR, B_PTR, "K must be a multiple of 8");
}

static void test_check_kn_odd_n_names_rule(void **state)
{
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 1001, 999, 520, MK_GEMM_B_KN, C_PTR);
	check(&g, A_PTR, B_PTR, "N must be a multiple of 8");
}

static void test_check_misaligned_operands_fail(void **state)
{
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 64, 64, 64, MK_GEMM_B_NK, C_PTR);
	check(&g, (const char *)A_PTR + 2, B_PTR, "16-byte aligned");
	check(&g, A_PTR, (const char *)B_PTR + 8, "16-byte aligned");
	check(&g, NULL, B_PTR, "must not be NULL");
}

static void test_check_bad_sizes_and_layout_fail(void **state)
{
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 0, 64, 64, MK_GEMM_B_NK, C_PTR);
	check(&g, A_PTR, B_PTR, ">= 1");
	mk_gemm_args_init(&g, 64, 64, 64, 5, C_PTR);
	check(&g, A_PTR, B_PTR, "unknown B layout");
	mk_gemm_args_init(&g, 300, 300, 64, MK_GEMM_B_NK, C_PTR);
	g.tiles_m = 2; /* 300 rows need 3 tiles of 128 */
	check(&g, A_PTR, B_PTR, "tile counts");
}

static void test_check_epilogue_rules(void **state)
{
	struct mk_gemm_args g;
	unsigned int flags[4];

	(void)state;
	mk_gemm_args_init(&g, 64, 64, 64, MK_GEMM_B_NK, C_PTR);
	g.epi.ld[0] = 32;
	check(&g, A_PTR, B_PTR, "row stride >= N");

	mk_gemm_args_init(&g, 64, 64, 64, MK_GEMM_B_NK, (char *)C_PTR + 1);
	check(&g, A_PTR, B_PTR, "2-byte alignment");

	mk_gemm_args_init(&g, 64, 64, 64, MK_GEMM_B_NK, C_PTR);
	g.epi.mode[0] = 9;
	check(&g, A_PTR, B_PTR, "unknown epilogue mode");

	mk_gemm_args_init(&g, 64, 64, 64, MK_GEMM_B_NK, NULL);
	check(&g, A_PTR, B_PTR, "no destination");
	/* Flags alone are a valid request (a tile-readiness probe). */
	g.epi.ready = flags;
	check(&g, A_PTR, B_PTR, NULL);

	/* A second destination is checked like the first. */
	mk_gemm_args_init(&g, 64, 64, 64, MK_GEMM_B_NK, C_PTR);
	g.epi.out[1] = C_PTR;
	g.epi.ld[1] = 63;
	check(&g, A_PTR, B_PTR, "row stride >= N");
	g.epi.ld[1] = 64;
	g.epi.mode[1] = MK_GEMM_EPI_ATOMIC_ADD;
	check(&g, A_PTR, B_PTR, NULL);
}

static void test_variant_tile_counts_and_stages(void **state)
{
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 65, 300, 512, MK_GEMM_B_NK, C_PTR);
	assert_int_equal(g.tile, MK_GEMM_TILE_128x256);
	assert_int_equal(g.splits, 1);
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x256, 1);
	assert_int_equal(g.tiles_m, 2); /* 65 rows: two 64-row tiles */
	assert_int_equal(g.tiles_n, 2);
	check(&g, A_PTR, B_PTR, NULL);
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x128, 1);
	assert_int_equal(g.tiles_m, 2);
	assert_int_equal(g.tiles_n, 3); /* 300 columns: three of 128 */
	mk_gemm_args_variant(&g, MK_GEMM_TILE_128x128, 1);
	assert_int_equal(g.tiles_m, 1);
	assert_int_equal(g.tiles_n, 3);
	check(&g, A_PTR, B_PTR, NULL);
	/* A tile count of another variant is refused, as is an unknown variant. */
	g.tiles_n = 2;
	check(&g, A_PTR, B_PTR, "tile counts");
	mk_gemm_args_init(&g, 65, 300, 512, MK_GEMM_B_NK, C_PTR);
	g.tile = 7;
	check(&g, A_PTR, B_PTR, "unknown tile shape");

	/* Every variant fits the shared memory a block may have, with >= 4 stages; the default
	 * keeps the size fused kernels reserve. */
	for (int t = 0; t < MK_GEMM_TILE_COUNT; t++) {
		const int bm = mk_gemm_tile_bm(t), bn = mk_gemm_tile_bn(t);

		assert_true(MK_GEMM_SMEM_BYTES_OF(bm, bn) <= MK_GEMM_SMEM_MAX);
		assert_true(MK_GEMM_STAGES_OF(bm, bn) >= 4);
		assert_true(MK_GEMM_STAGES_OF(bm, bn) <= MK_GEMM_MAX_STAGES);
		/* stage bases stay 1024-byte aligned (128-byte swizzle atoms) */
		assert_int_equal(MK_GEMM_A_STAGE_OF(bm) % 1024, 0);
		assert_int_equal(MK_GEMM_B_STAGE_OF(bn) % 1024, 0);
	}
	assert_int_equal(MK_GEMM_SMEM_BYTES_OF(MK_GEMM_BM, MK_GEMM_BN), MK_GEMM_SMEM_BYTES);
	assert_int_equal(MK_GEMM_STAGES_OF(MK_GEMM_BM, MK_GEMM_BN), MK_GEMM_STAGES);
	assert_int_equal(MK_GEMM_THREADS_OF(MK_GEMM_BM), MK_GEMM_THREADS);
	assert_int_equal(MK_GEMM_THREADS_OF(64), 256);
}

static void test_split_rules_and_workspace(void **state)
{
	/* an address only: nothing is dereferenced */
	char *ws = (char *)(uintptr_t)0x100000;
	struct mk_gemm_args g;

	(void)state;
	mk_gemm_args_init(&g, 16, 4096, 4096, MK_GEMM_B_NK, C_PTR);
	assert_int_equal(mk_gemm_split_ws_bytes(&g), 0);
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x256, 8);
	/* 16 tiles x 8 splits x one warpgroup x 64 x 256 fp32, after the counters */
	assert_int_equal(mk_gemm_split_ws_bytes(&g),
			 MK_GEMM_SPLIT_COUNT_BYTES + (size_t)16 * 8 * 64 * 256 * 4);
	check(&g, A_PTR, B_PTR, "needs a workspace");
	mk_gemm_args_split_ws(&g, ws);
	assert_ptr_equal(g.split_count, (unsigned int *)ws);
	assert_ptr_equal((char *)g.split_ws, ws + MK_GEMM_SPLIT_COUNT_BYTES);
	check(&g, A_PTR, B_PTR, NULL);
	/* two consumer warpgroups: twice the partial per tile */
	mk_gemm_args_variant(&g, MK_GEMM_TILE_128x128, 4);
	assert_int_equal(mk_gemm_split_ws_bytes(&g),
			 MK_GEMM_SPLIT_COUNT_BYTES + (size_t)32 * 4 * 128 * 128 * 4);
	/* variant() drops the workspace: it depends on the tile count */
	assert_null(g.split_ws);

	mk_gemm_args_init(&g, 16, 4096, 256, MK_GEMM_B_NK, C_PTR);
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x256, 5); /* K = 256: 4 k-blocks */
	mk_gemm_args_split_ws(&g, ws);
	check(&g, A_PTR, B_PTR, "more k-splits than k-blocks");
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x256, 4);
	mk_gemm_args_split_ws(&g, ws);
	check(&g, A_PTR, B_PTR, NULL);
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x256, 17);
	mk_gemm_args_split_ws(&g, ws);
	check(&g, A_PTR, B_PTR, "1 .. 16");
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x256, 2);
	mk_gemm_args_split_ws(&g, ws + 4); /* partials misaligned */
	check(&g, A_PTR, B_PTR, "16-byte aligned");
	/* more tiles than counters */
	mk_gemm_args_init(&g, 64 * 200, 128 * 100, 256, MK_GEMM_B_NK, C_PTR);
	mk_gemm_args_variant(&g, MK_GEMM_TILE_64x128, 2);
	mk_gemm_args_split_ws(&g, ws);
	check(&g, A_PTR, B_PTR, "too many tiles");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_args_init_tails_round_up),
		cmocka_unit_test(test_check_aligned_shapes_pass),
		cmocka_unit_test(test_check_k_not_multiple_of_8_names_rule),
		cmocka_unit_test(test_check_kn_odd_n_names_rule),
		cmocka_unit_test(test_check_misaligned_operands_fail),
		cmocka_unit_test(test_check_bad_sizes_and_layout_fail),
		cmocka_unit_test(test_check_epilogue_rules),
		cmocka_unit_test(test_variant_tile_counts_and_stages),
		cmocka_unit_test(test_split_rules_and_workspace),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
