// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component moe: the policy engine's rows for the MoE ops (tuner/: split table and
 * cost model). Both ops get a split with compute CTAs and communication CTAs that fills the
 * GPU share; the rules file can name them; the cost model's fusion choice follows its formula
 * (the unfused path pays the exchange, the GEMMs and two host round trips; the fused one the
 * slower of the exchange and the GEMMs on its compute CTAs, plus a fixed cost).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "policy.h"
#include "rules.h"

static void reset(void)
{
	unsetenv("MKERNEL_TUNER_CONFIG");
	unsetenv("MKERNEL_TUNER_SM_SPLIT");
	mk_policy_reload();
}

static int setup(void **state)
{
	(void)state;
	reset();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	reset();
	return 0;
}

static struct mk_policy_op_query query(int op, uint64_t pairs, int nnodes, int nranks, int sms)
{
	struct mk_policy_op_query q;

	memset(&q, 0, sizeof(q));
	q.op = op;
	q.m = pairs;
	q.n = 7168;
	q.k = 2048;
	q.dtype_bytes = 2;
	q.nnodes = nnodes;
	q.nranks = nranks;
	q.ranks_per_node = nranks / nnodes;
	q.sms = sms;
	return q;
}

static void test_splits_fill_the_share(void **state)
{
	const int ops[] = { MK_FUSED_MOE_DISPATCH, MK_FUSED_MOE_COMBINE };
	const int shares[] = { 132, 66, 33, 16 };

	(void)state;
	for (size_t o = 0; o < 2; o++)
		for (size_t i = 0; i < 4; i++) {
			struct mk_policy_op_query q = query(ops[o], 65536, 2, 16, shares[i]);
			struct mk_policy_sm_split s;
			int sum = 0;

			assert_int_equal(mk_policy_sm_split(&q, &s), 0);
			for (int r = 0; r < MK_ROLE_COUNT; r++)
				sum += s.sms[r];
			assert_true(sum <= shares[i]);
			assert_true(s.sms[MK_ROLE_COMPUTE] >= 1);
			assert_true(s.sms[MK_ROLE_COMPUTE] < shares[i]);
		}
	assert_string_equal(mk_rules_op_name(MK_FUSED_MOE_COMBINE), "moe_combine");
	assert_string_equal(mk_rules_op_name(MK_FUSED_MOE_DISPATCH), "moe_dispatch");
}

static void test_combine_keeps_more_compute_than_dispatch(void **state)
{
	struct mk_policy_op_query d = query(MK_FUSED_MOE_DISPATCH, 65536, 2, 16, 132);
	struct mk_policy_op_query c = query(MK_FUSED_MOE_COMBINE, 65536, 2, 16, 132);
	struct mk_policy_sm_split sd, sc;

	(void)state;
	assert_int_equal(mk_policy_sm_split(&d, &sd), 0);
	assert_int_equal(mk_policy_sm_split(&c, &sc), 0);
	assert_true(sc.sms[MK_ROLE_COMPUTE] > sd.sms[MK_ROLE_COMPUTE]);
}

static void test_cost_model_fuses_large_exchanges(void **state)
{
	struct mk_policy_op_query q = query(MK_FUSED_MOE_DISPATCH, 8192 * 8, 2, 16, 132);
	struct mk_policy_sm_split s;

	(void)state;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_true(s.fused_us > 0 && s.unfused_us > 0);
	assert_int_equal(s.fuse, s.fused_us < s.unfused_us);
	assert_int_equal(s.fuse, 1);
	/* the unfused estimate covers at least the GEMMs and the two host round trips */
	{
		const double gemm = 2.0 * 65536 * 7168 * 2048 / 1e6; /* us at 1 TFLOP/s */

		assert_true(s.unfused_us > gemm / 2000.0);
	}
	/* one rank alone: no exchange, still no host round trips on the fused path */
	q = query(MK_FUSED_MOE_COMBINE, 256, 1, 1, 132);
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.fuse, s.fused_us < s.unfused_us);
}

static void test_rules_file_names_moe_ops(void **state)
{
	char path[] = "/tmp/mk-moe-rules-XXXXXX";
	int fd = mkstemp(path);
	const char text[] = "fused moe_combine m>=1024 -> compute=120 intra=8 send=2 reduce=2\n";
	struct mk_policy_op_query q = query(MK_FUSED_MOE_COMBINE, 65536, 2, 16, 132);
	struct mk_policy_sm_split s;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
	close(fd);
	setenv("MKERNEL_TUNER_CONFIG", path, 1);
	mk_policy_reload();
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.src, MK_POLICY_SRC_RULE);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 120);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_splits_fill_the_share, setup, teardown),
		cmocka_unit_test_setup_teardown(test_combine_keeps_more_compute_than_dispatch,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cost_model_fuses_large_exchanges, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rules_file_names_moe_ops, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
