// SPDX-License-Identifier: Apache-2.0
/*
 * Node discovery (host identity exactly as NCCL builds it, NCCL_HOSTID override, node and
 * local-rank assignment) and the symmetric-heap offset allocator (deterministic first fit,
 * alignment, coalescing, exhaustion, bad frees).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fused/runtime/symm.h"
#include "mk/param.h"
#include "fused/runtime/topo.h"

static void test_host_id_override_replaces_whole_string(void **state)
{
	char id[256];

	setenv("NCCL_HOSTID", "fake-node-7", 1);
	assert_int_equal(mk_topo_host_id(id, sizeof(id)), 0);
	assert_string_equal(id, "fake-node-7");
	assert_true(mk_topo_host_hash() == mk_topo_hash_str("fake-node-7"));
	setenv("NCCL_HOSTID", "fake-node-8", 1);
	assert_true(mk_topo_host_hash() != mk_topo_hash_str("fake-node-7"));
	unsetenv("NCCL_HOSTID");
}

/* mkernel's own identity wins over NCCL's; empty means unset. */
static void test_mkernel_host_id_overrides_nccl_for_mkernel_only(void **state)
{
	char id[256];

	/* MKERNEL_* knobs are read once per process: reset the cache after each change. */
	setenv("NCCL_HOSTID", "fake-node-3", 1);
	setenv("MKERNEL_HOSTID", "mk-node-1", 1);
	mk_param_reset_all();
	assert_int_equal(mk_topo_host_id(id, sizeof(id)), 0);
	assert_string_equal(id, "mk-node-1");
	assert_true(mk_topo_host_hash() == mk_topo_hash_str("mk-node-1"));
	setenv("MKERNEL_HOSTID", "", 1);
	mk_param_reset_all();
	assert_int_equal(mk_topo_host_id(id, sizeof(id)), 0);
	assert_string_equal(id, "fake-node-3");
	unsetenv("MKERNEL_HOSTID");
	unsetenv("NCCL_HOSTID");
	mk_param_reset_all();
}

static void test_host_id_default_is_hostname_and_boot_id(void **state)
{
	char id[512], want[512] = "", boot[64] = "";
	FILE *f;

	unsetenv("NCCL_HOSTID");
	unsetenv("MKERNEL_HOSTID");
	assert_int_equal(gethostname(want, sizeof(want)), 0);
	f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f != NULL) {
		if (fgets(boot, sizeof(boot), f) == NULL)
			boot[0] = '\0';
		fclose(f);
	}
	boot[strcspn(boot, "\n")] = '\0';
	strcat(want, boot);
	assert_int_equal(mk_topo_host_id(id, sizeof(id)), 0);
	assert_string_equal(id, want);
	/* An empty override is no override. */
	setenv("NCCL_HOSTID", "", 1);
	assert_int_equal(mk_topo_host_id(id, sizeof(id)), 0);
	assert_string_equal(id, want);
	unsetenv("NCCL_HOSTID");
}

static void test_assign_nodes_in_rank_order(void **state)
{
	const uint64_t h[] = { 10, 20, 10, 30, 20, 10 };
	const int node[] = { 0, 1, 0, 2, 1, 0 }, local[] = { 0, 0, 1, 0, 1, 2 };
	const int nlocal[] = { 3, 2, 3, 1, 2, 3 };

	for (int r = 0; r < 6; r++) {
		struct mk_topo t;

		assert_int_equal(mk_topo_assign(h, 6, r, &t), 0);
		assert_int_equal(t.nnodes, 3);
		assert_int_equal(t.node, node[r]);
		assert_int_equal(t.local_rank, local[r]);
		assert_int_equal(t.nlocal, nlocal[r]);
		assert_false(t.uniform); /* nodes of 3, 2 and 1 ranks */
		for (int q = 0; q < 6; q++) {
			assert_int_equal(t.node_of[q], node[q]);
			assert_int_equal(t.local_of[q], local[q]);
		}
		mk_topo_fini(&t);
	}
}

static void test_assign_one_node_and_all_distinct(void **state)
{
	const uint64_t same[] = { 5, 5, 5, 5 }, distinct[] = { 1, 2, 3, 4 };
	struct mk_topo t;

	assert_int_equal(mk_topo_assign(same, 4, 3, &t), 0);
	assert_int_equal(t.nnodes, 1);
	assert_int_equal(t.local_rank, 3);
	assert_int_equal(t.nlocal, 4);
	assert_true(t.uniform);
	mk_topo_fini(&t);
	assert_int_equal(mk_topo_assign(distinct, 4, 2, &t), 0);
	assert_int_equal(t.nnodes, 4);
	assert_int_equal(t.node, 2);
	assert_int_equal(t.local_rank, 0);
	assert_int_equal(t.nlocal, 1);
	assert_true(t.uniform);
	mk_topo_fini(&t);
	assert_int_equal(mk_topo_assign(distinct, 4, 4, &t), -EINVAL);
	assert_int_equal(mk_topo_assign(NULL, 4, 0, &t), -EINVAL);
}

static void test_symm_first_fit_aligned_and_deterministic(void **state)
{
	struct mk_symm a, b;
	uint64_t oa[6], ob[6];
	const uint64_t len[] = { 1, 300, 4096, 17, 65536, 256 };

	assert_int_equal(mk_symm_init(&a, 1 << 20), 0);
	assert_int_equal(mk_symm_init(&b, 1 << 20), 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(mk_symm_alloc(&a, len[i], &oa[i]), 0);
		assert_int_equal(mk_symm_alloc(&b, len[i], &ob[i]), 0);
		assert_int_equal(oa[i], ob[i]);
		assert_int_equal(oa[i] % MK_SYMM_ALIGN, 0);
		assert_true(mk_symm_size(&a, oa[i]) >= len[i]);
	}
	assert_int_equal(oa[0], 0);
	assert_int_equal(oa[1], 256);
	assert_int_equal(oa[2], 768);
	/* Free the middle and reuse it first fit. */
	assert_int_equal(mk_symm_free(&a, oa[2]), 0);
	assert_int_equal(mk_symm_alloc(&a, 1000, &oa[2]), 0);
	assert_int_equal(oa[2], 768);
	assert_true(mk_symm_contains(&a, oa[4] + 100, 65536 - 100));
	assert_false(mk_symm_contains(&a, oa[4] + 100, 65536));
	mk_symm_fini(&a);
	mk_symm_fini(&b);
}

static void test_symm_exhaustion_coalescing_bad_free(void **state)
{
	struct mk_symm s;
	uint64_t o[8], big;

	assert_int_equal(mk_symm_init(&s, 8 * 1024), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(mk_symm_alloc(&s, 1024, &o[i]), 0);
	assert_int_equal(mk_symm_alloc(&s, 1, &big), -ENOMEM);
	assert_int_equal(mk_symm_alloc(&s, 0, &big), -EINVAL);
	assert_int_equal(mk_symm_free(&s, 5), -EINVAL);
	/* Free 2, 4, then 3: the three merge into one 3 KiB block. */
	assert_int_equal(mk_symm_free(&s, o[2]), 0);
	assert_int_equal(mk_symm_free(&s, o[4]), 0);
	assert_int_equal(mk_symm_alloc(&s, 2048, &big), -ENOMEM);
	assert_int_equal(mk_symm_free(&s, o[3]), 0);
	assert_int_equal(mk_symm_free(&s, o[3]), -EINVAL); /* double free */
	assert_int_equal(mk_symm_alloc(&s, 3072, &big), 0);
	assert_int_equal(big, o[2]);
	for (int i = 0; i < 8; i++) {
		if (i < 2 || i > 4)
			assert_int_equal(mk_symm_free(&s, o[i]), 0);
	}
	assert_int_equal(mk_symm_free(&s, big), 0);
	assert_int_equal(mk_symm_alloc(&s, 8 * 1024, &big), 0); /* all one block again */
	assert_int_equal(big, 0);
	mk_symm_fini(&s);
}

/* Many blocks: the block array grows. */
static void test_symm_many_blocks(void **state)
{
	struct mk_symm s;
	uint64_t off;

	assert_int_equal(mk_symm_init(&s, 1 << 20), 0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(mk_symm_alloc(&s, 256, &off), 0);
		assert_int_equal(off, (uint64_t)i * 256);
	}
	mk_symm_fini(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_id_override_replaces_whole_string),
		cmocka_unit_test(test_mkernel_host_id_overrides_nccl_for_mkernel_only),
		cmocka_unit_test(test_host_id_default_is_hostname_and_boot_id),
		cmocka_unit_test(test_assign_nodes_in_rank_order),
		cmocka_unit_test(test_assign_one_node_and_all_distinct),
		cmocka_unit_test(test_symm_first_fit_aligned_and_deterministic),
		cmocka_unit_test(test_symm_exhaustion_coalescing_bad_free),
		cmocka_unit_test(test_symm_many_blocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
