// SPDX-License-Identifier: Apache-2.0
/* The loopback harness's verdict of a two-peer case (test/loopback/case_verdict.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../../loopback/case_verdict.h"

static void test_failure_beats_skip(void **state)
{
	(void)state;
	/* a failing peer next to a skipping one: the case fails, on either side */
	assert_int_equal(mk_test_case_verdict(1, MK_TEST_EXIT_SKIP), 1);
	assert_int_equal(mk_test_case_verdict(MK_TEST_EXIT_SKIP, 1), 1);
	/* a peer killed by a signal (128 + n) is a failure too */
	assert_int_equal(mk_test_case_verdict(MK_TEST_EXIT_SKIP, 128 + 11), 1);
	assert_int_equal(mk_test_case_verdict(0, 2), 1);
}

static void test_skip_and_pass(void **state)
{
	(void)state;
	assert_int_equal(mk_test_case_verdict(0, 0), 0);
	assert_int_equal(mk_test_case_verdict(0, MK_TEST_EXIT_SKIP), MK_TEST_EXIT_SKIP);
	assert_int_equal(mk_test_case_verdict(MK_TEST_EXIT_SKIP, 0), MK_TEST_EXIT_SKIP);
	assert_int_equal(mk_test_case_verdict(MK_TEST_EXIT_SKIP, MK_TEST_EXIT_SKIP),
			 MK_TEST_EXIT_SKIP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_failure_beats_skip),
		cmocka_unit_test(test_skip_and_pass),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
