// SPDX-License-Identifier: Apache-2.0
/* Host side of the role framework: initial split scaled to the grid, bounds, env override. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>

#include "fused/runtime/roles.h"
#include "mk/param.h"

static const uint32_t ntasks[MK_ROLES] = { 100, 50, 20, 20 };
static const int none[MK_ROLES] = { 0, 0, 0, 0 };

static int sum_init(const struct mk_roles_state *s)
{
	return s->init[0] + s->init[1] + s->init[2] + s->init[3];
}

static void test_split_scaled_to_grid(void **state)
{
	const int sms[MK_ROLES] = { 116, 12, 4, 0 };
	const int mn[MK_ROLES] = { 58, 6, 2, 0 }, mx[MK_ROLES] = { 132, 24, 8, 0 };
	struct mk_roles_state s;

	unsetenv("MKERNEL_ROLE_SPLIT");
	mk_param_reset_all();
	assert_int_equal(mk_roles_setup(&s, 132, ntasks, sms, mn, mx, 16, 4), 0);
	assert_int_equal(s.init[0], 116);
	assert_int_equal(s.init[1], 12);
	assert_int_equal(s.init[2], 4);
	assert_int_equal(s.init[3], 0);
	assert_int_equal(s.min[0], 58);
	assert_int_equal(s.max[1], 24);
	assert_int_equal(s.max[3], 132); /* unbounded role: up to the whole grid */
	/* Half the grid: proportions kept, sum exact, a nonzero role keeps >= 1 CTA. */
	assert_int_equal(mk_roles_setup(&s, 66, ntasks, sms, mn, mx, 16, 4), 0);
	assert_int_equal(sum_init(&s), 66);
	assert_int_equal(s.init[1], 6);
	assert_int_equal(s.init[2], 2);
	assert_int_equal(mk_roles_setup(&s, 5, ntasks, sms, mn, mx, 16, 4), 0);
	assert_int_equal(sum_init(&s), 5);
	assert_true(s.init[1] >= 1 && s.init[2] >= 1);
	for (int r = 0; r < MK_ROLES; r++) {
		assert_int_equal(s.active[r], s.init[r]);
		assert_int_equal(s.target[r], s.init[r]);
		assert_true(s.min[r] <= s.init[r] && s.init[r] <= s.max[r]);
		assert_int_equal(s.ntasks[r], ntasks[r]);
	}
}

static void test_env_split_overrides_policy(void **state)
{
	const int sms[MK_ROLES] = { 116, 12, 4, 0 };
	struct mk_roles_state s;

	setenv("MKERNEL_ROLE_SPLIT", "1,0,0,0", 1);
	mk_param_reset_all();
	assert_int_equal(mk_roles_setup(&s, 131, ntasks, sms, none, none, 16, 4), 0);
	assert_int_equal(s.init[0], 131);
	assert_int_equal(s.init[1] + s.init[2] + s.init[3], 0);
	setenv("MKERNEL_ROLE_SPLIT", "1,2", 1);
	mk_param_reset_all();
	assert_int_equal(mk_roles_setup(&s, 131, ntasks, sms, none, none, 16, 4), -EINVAL);
	setenv("MKERNEL_ROLE_SPLIT", "1,-2,0,0", 1);
	mk_param_reset_all();
	assert_int_equal(mk_roles_setup(&s, 131, ntasks, sms, none, none, 16, 4), -EINVAL);
	unsetenv("MKERNEL_ROLE_SPLIT");
	mk_param_reset_all();
}

static void test_bad_arguments(void **state)
{
	struct mk_roles_state s;

	assert_int_equal(mk_roles_setup(&s, 0, ntasks, none, none, none, 16, 4), -EINVAL);
	assert_int_equal(mk_roles_setup(&s, 8, ntasks, none, none, none, 16, 4), -EINVAL);
	assert_int_equal(mk_roles_setup(&s, 8, ntasks, (int[]){ 1, 0, 0, 0 }, none, none, 16, 0),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_scaled_to_grid),
		cmocka_unit_test(test_env_split_overrides_policy),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
