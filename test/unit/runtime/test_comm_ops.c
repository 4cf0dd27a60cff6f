// SPDX-License-Identifier: Apache-2.0
/*
 * The ops' hooks on a comm (fused/runtime/comm_ops.h): every op linked in is found through its
 * record without a list, comm_init runs for each and the first error stops mkCommInit, an op's
 * state stays in its own slot, a full table refuses a new op, and release hands every state to
 * its op's state_free once. The ops here are this test's own records.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "fused/runtime/comm_ops.h"

static int inits_a, inits_b, fail_b, freed[4];

static int op_a_init(struct mk_comm *c)
{
	(void)c;
	inits_a++;
	return 0;
}

static int op_b_init(struct mk_comm *c)
{
	(void)c;
	inits_b++;
	return fail_b;
}

static void op_free(struct mk_comm *c, void *state)
{
	(void)c;
	freed[*(int *)state]++;
}

MK_COMM_OP(test_a, .comm_init = op_a_init, .state_free = op_free);
MK_COMM_OP(test_b, .comm_init = op_b_init, .state_free = op_free);
MK_COMM_OP(test_c, .state_free = op_free); /* no comm_init: skipped */

static int setup(void **state)
{
	(void)state;
	inits_a = inits_b = fail_b = 0;
	memset(freed, 0, sizeof(freed));
	return 0;
}

static void test_comm_ops_init_runs_every_linked_op(void **state)
{
	struct mk_comm *c = (struct mk_comm *)(uintptr_t)0x1000; /* only passed through */

	(void)state;
	assert_int_equal(mk_comm_ops_init(c), 0);
	assert_int_equal(inits_a, 1);
	assert_int_equal(inits_b, 1);
	fail_b = -EIO;
	assert_int_equal(mk_comm_ops_init(c), -EIO);
	assert_int_equal(inits_b, 2);
}

static void test_comm_ops_state_per_op_and_release(void **state)
{
	struct mk_comm_op_slots t;
	int sa = 1, sb = 2, sb2 = 3;

	(void)state;
	memset(&t, 0, sizeof(t));
	assert_null(mk_comm_op_get(&t, &mk_comm_op_test_a));
	assert_int_equal(mk_comm_op_put(&t, &mk_comm_op_test_a, &sa), 0);
	assert_int_equal(mk_comm_op_put(&t, &mk_comm_op_test_b, &sb), 0);
	assert_ptr_equal(mk_comm_op_get(&t, &mk_comm_op_test_a), &sa);
	assert_ptr_equal(mk_comm_op_get(&t, &mk_comm_op_test_b), &sb);
	assert_null(mk_comm_op_get(&t, &mk_comm_op_test_c));
	/* a second put replaces the op's state in its own slot */
	assert_int_equal(mk_comm_op_put(&t, &mk_comm_op_test_b, &sb2), 0);
	assert_ptr_equal(mk_comm_op_get(&t, &mk_comm_op_test_b), &sb2);
	mk_comm_ops_release(NULL, &t);
	assert_int_equal(freed[1], 1);
	assert_int_equal(freed[2], 0);
	assert_int_equal(freed[3], 1);
	assert_null(mk_comm_op_get(&t, &mk_comm_op_test_a));
	/* released slots are empty: a second release frees nothing again */
	mk_comm_ops_release(NULL, &t);
	assert_int_equal(freed[1], 1);
	assert_int_equal(freed[3], 1);
}

static void test_comm_ops_full_table_refuses_a_new_op(void **state)
{
	struct mk_comm_op fakes[MK_COMM_OP_SLOTS + 1];
	struct mk_comm_op_slots t;
	int s = 0;

	(void)state;
	memset(&t, 0, sizeof(t));
	memset(fakes, 0, sizeof(fakes));
	for (int i = 0; i < MK_COMM_OP_SLOTS; i++)
		assert_int_equal(mk_comm_op_put(&t, &fakes[i], &s), 0);
	assert_int_equal(mk_comm_op_put(&t, &fakes[MK_COMM_OP_SLOTS], &s), -ENOSPC);
	assert_null(mk_comm_op_get(&t, &fakes[MK_COMM_OP_SLOTS]));
	assert_ptr_equal(mk_comm_op_get(&t, &fakes[MK_COMM_OP_SLOTS - 1]), &s);
	mk_comm_ops_release(NULL, &t); /* no state_free: nothing to call */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_comm_ops_init_runs_every_linked_op, setup),
		cmocka_unit_test_setup(test_comm_ops_state_per_op_and_release, setup),
		cmocka_unit_test_setup(test_comm_ops_full_table_refuses_a_new_op, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
