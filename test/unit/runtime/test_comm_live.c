// SPDX-License-Identifier: Apache-2.0
/*
 * The live set of mkComm_t values (fused/runtime/comm_live.c): a destroyed, twice-destroyed or
 * foreign pointer is refused after a lookup that reads nothing behind it, and a destroyed comm's
 * header is kept, never freed nor handed out again. Run under ASan (suite sanitize): any read of
 * freed memory fails the test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/runtime/comm_live.h"

struct hdr {
	uint32_t magic;
	char body[60];
};

static void test_comm_live_destroy_twice_refused(void **state)
{
	struct hdr *c = calloc(1, sizeof(*c)), *d = calloc(1, sizeof(*d));

	(void)state;
	assert_int_equal(mk_comm_live_add(c), 0);
	assert_int_equal(mk_comm_live_add(c), -EEXIST);
	assert_int_equal(mk_comm_live_check(c), 0);
	assert_int_equal(mk_comm_live_check(d), -EBADF); /* never made */
	assert_int_equal(mk_comm_live_check(NULL), -EBADF);
	/* destroy: taken once, then stale */
	assert_int_equal(mk_comm_live_take(c), 0);
	assert_int_equal(mk_comm_live_take(c), -EBADF);
	assert_int_equal(mk_comm_live_check(c), -EBADF);
	assert_int_equal(mk_comm_live_take(NULL), -EBADF);
	/* the header is kept: a stale reader sees a dead comm, not freed memory */
	memset(c, 0, sizeof(*c));
	mk_comm_quarantine(c);
	assert_int_equal(c->magic, 0);
	free(d);
}

static void test_comm_live_many_and_reuse(void **state)
{
	struct hdr *v[100];

	(void)state;
	for (int i = 0; i < 100; i++) {
		v[i] = calloc(1, sizeof(*v[i]));
		assert_int_equal(mk_comm_live_add(v[i]), 0);
	}
	for (int i = 0; i < 100; i += 2)
		assert_int_equal(mk_comm_live_take(v[i]), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(mk_comm_live_check(v[i]), i % 2 ? 0 : -EBADF);
	for (int i = 1; i < 100; i += 2)
		assert_int_equal(mk_comm_live_take(v[i]), 0);
	for (int i = 0; i < 100; i++)
		mk_comm_quarantine(v[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_comm_live_destroy_twice_refused),
		cmocka_unit_test(test_comm_live_many_and_reuse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
