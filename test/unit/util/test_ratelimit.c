// SPDX-License-Identifier: Apache-2.0
/*
 * The rate limit of warnings a peer or a stranger can trigger at will: a burst per window gets
 * through, the rest are counted, and the first line of the next window says how many were held.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "mk/log.h"

static int lines;
static char last[512];

static void capture(int level, unsigned long flags, const char *file, int line, const char *fmt,
		    ...)
{
	va_list ap;

	(void)level;
	(void)flags;
	(void)file;
	(void)line;
	va_start(ap, fmt);
	vsnprintf(last, sizeof(last), fmt, ap);
	va_end(ap);
	lines++;
}

static void warn_stranger(int i)
{
	MK_WARN_RATELIMITED("dropped message %d", i);
}

static void test_ratelimit_burst_then_count(void **state)
{
	struct mk_ratelimit rl = { 0 };
	unsigned int held = 99;

	(void)state;
	for (int i = 0; i < MK_WARN_BURST; i++) {
		assert_true(mk_ratelimit_pass(&rl, &held));
		assert_int_equal(held, 0);
	}
	for (int i = 0; i < 1000; i++)
		assert_false(mk_ratelimit_pass(&rl, &held));
	/* a new window: the next line goes out and carries the count */
	rl.window_ms -= MK_WARN_WINDOW_MS;
	assert_true(mk_ratelimit_pass(&rl, &held));
	assert_int_equal(held, 1000);
	assert_true(mk_ratelimit_pass(&rl, &held));
	assert_int_equal(held, 0);
}

static void test_ratelimit_macro_logs_a_burst_only(void **state)
{
	(void)state;
	mk_log_set_sink(capture);
	lines = 0;
	for (int i = 0; i < 10000; i++)
		warn_stranger(i);
	assert_int_equal(lines, MK_WARN_BURST);
	assert_non_null(strstr(last, "dropped message 4"));
	mk_log_set_sink(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ratelimit_burst_then_count),
		cmocka_unit_test(test_ratelimit_macro_logs_a_burst_only),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
