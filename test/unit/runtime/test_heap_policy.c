// SPDX-License-Identifier: Apache-2.0
/*
 * The heap-sharing choice: knob parsing, and knob x per-rank VMM support x node layout ->
 * VMM, legacy or an error that every rank of the comm reaches alike.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "fused/runtime/heap_policy.h"

#define AUTO   MK_HEAP_KNOB_AUTO
#define VMM    MK_HEAP_KNOB_VMM
#define LEGACY MK_HEAP_KNOB_LEGACY

static void test_knob_parse(void **state)
{
	(void)state;
	assert_int_equal(mk_heap_knob_parse(""), AUTO);
	assert_int_equal(mk_heap_knob_parse(NULL), AUTO);
	assert_int_equal(mk_heap_knob_parse("auto"), AUTO);
	assert_int_equal(mk_heap_knob_parse("vmm"), VMM);
	assert_int_equal(mk_heap_knob_parse("legacy"), LEGACY);
	assert_int_equal(mk_heap_knob_parse("VMM"), -EINVAL);
	assert_int_equal(mk_heap_knob_parse("ipc"), -EINVAL);
	assert_string_equal(mk_heap_share_name(MK_HEAP_SHARE_VMM), "CUDA VMM");
	assert_string_equal(mk_heap_share_name(MK_HEAP_SHARE_LEGACY), "legacy CUDA IPC");
}

/* Every rank computes its own node's answer; the error case must hit every rank. */
static int choose(const struct mk_heap_vote *v, const int *node_of, int n, int rank, char *why)
{
	return mk_heap_share_choose(v, node_of, n, node_of[rank], why, 160);
}

static void test_auto_all_supported_is_vmm(void **state)
{
	const struct mk_heap_vote v[4] = { { AUTO, 1 }, { AUTO, 1 }, { AUTO, 1 }, { AUTO, 1 } };
	const int node_of[4] = { 0, 0, 1, 1 };
	char why[160];

	(void)state;
	for (int r = 0; r < 4; r++)
		assert_int_equal(choose(v, node_of, 4, r, why), MK_HEAP_SHARE_VMM);
	assert_non_null(strstr(why, "every rank"));
}

/* One rank without VMM puts its own node on legacy; the other node keeps VMM. */
static void test_auto_one_unsupported_is_legacy_for_its_node(void **state)
{
	const struct mk_heap_vote v[4] = { { AUTO, 1 }, { AUTO, 1 }, { AUTO, 1 }, { AUTO, 0 } };
	const int node_of[4] = { 0, 0, 1, 1 };
	char why[160];

	(void)state;
	assert_int_equal(choose(v, node_of, 4, 0, why), MK_HEAP_SHARE_VMM);
	assert_int_equal(choose(v, node_of, 4, 1, why), MK_HEAP_SHARE_VMM);
	assert_int_equal(choose(v, node_of, 4, 2, why), MK_HEAP_SHARE_LEGACY);
	assert_non_null(strstr(why, "rank 3"));
	assert_int_equal(choose(v, node_of, 4, 3, why), MK_HEAP_SHARE_LEGACY);
}

static void test_legacy_knob_on_one_rank_wins_for_its_node(void **state)
{
	const struct mk_heap_vote v[2] = { { AUTO, 1 }, { LEGACY, 1 } };
	const int node_of[2] = { 0, 0 };
	char why[160];

	(void)state;
	assert_int_equal(choose(v, node_of, 2, 0, why), MK_HEAP_SHARE_LEGACY);
	assert_non_null(strstr(why, "MKERNEL_HEAP_SHARE=legacy"));
	assert_int_equal(choose(v, node_of, 2, 1, why), MK_HEAP_SHARE_LEGACY);
}

static void test_vmm_knob_supported_is_vmm(void **state)
{
	const struct mk_heap_vote v[2] = { { VMM, 1 }, { VMM, 1 } };
	const int node_of[2] = { 0, 0 };
	char why[160];

	(void)state;
	assert_int_equal(choose(v, node_of, 2, 0, why), MK_HEAP_SHARE_VMM);
	assert_int_equal(choose(v, node_of, 2, 1, why), MK_HEAP_SHARE_VMM);
}

/* A demand for VMM that its node cannot meet fails every rank, other nodes' too. */
static void test_vmm_knob_unsupported_fails_every_rank(void **state)
{
	const struct mk_heap_vote v[4] = { { VMM, 1 }, { AUTO, 0 }, { AUTO, 1 }, { AUTO, 1 } };
	const int node_of[4] = { 0, 0, 1, 1 };
	char why[160];

	(void)state;
	for (int r = 0; r < 4; r++) {
		assert_int_equal(choose(v, node_of, 4, r, why), -EINVAL);
		assert_non_null(strstr(why, "rank 0 asks for CUDA VMM"));
		assert_non_null(strstr(why, "rank 1 of its node cannot"));
	}
}

static void test_vmm_and_legacy_knobs_on_one_node_fail(void **state)
{
	const struct mk_heap_vote v[2] = { { LEGACY, 1 }, { VMM, 1 } };
	const int node_of[2] = { 0, 0 };
	char why[160];

	(void)state;
	assert_int_equal(choose(v, node_of, 2, 0, why), -EINVAL);
	assert_int_equal(choose(v, node_of, 2, 1, why), -EINVAL);
	assert_non_null(strstr(why, "asks for legacy"));
}

/* vmm on one node and legacy on another node do not conflict: each node maps its own. */
static void test_knobs_differ_between_nodes(void **state)
{
	const struct mk_heap_vote v[2] = { { VMM, 1 }, { LEGACY, 0 } };
	const int node_of[2] = { 0, 1 };
	char why[160];

	(void)state;
	assert_int_equal(choose(v, node_of, 2, 0, why), MK_HEAP_SHARE_VMM);
	assert_int_equal(choose(v, node_of, 2, 1, why), MK_HEAP_SHARE_LEGACY);
}

/* A lone rank without VMM support and no demand: legacy (its cudaMalloc heap). */
static void test_single_rank(void **state)
{
	const struct mk_heap_vote yes = { AUTO, 1 }, no = { AUTO, 0 }, want = { VMM, 0 };
	const int node_of[1] = { 0 };
	char why[160];

	(void)state;
	assert_int_equal(choose(&yes, node_of, 1, 0, why), MK_HEAP_SHARE_VMM);
	assert_int_equal(choose(&no, node_of, 1, 0, why), MK_HEAP_SHARE_LEGACY);
	assert_int_equal(choose(&want, node_of, 1, 0, why), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_knob_parse),
		cmocka_unit_test(test_auto_all_supported_is_vmm),
		cmocka_unit_test(test_auto_one_unsupported_is_legacy_for_its_node),
		cmocka_unit_test(test_legacy_knob_on_one_rank_wins_for_its_node),
		cmocka_unit_test(test_vmm_knob_supported_is_vmm),
		cmocka_unit_test(test_vmm_knob_unsupported_fails_every_rank),
		cmocka_unit_test(test_vmm_and_legacy_knobs_on_one_node_fail),
		cmocka_unit_test(test_knobs_differ_between_nodes),
		cmocka_unit_test(test_single_rank),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
