/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How a loopback test process fails: die() prints "FAIL [<who>]: <why>" and ends the process at
 * once (_exit: a forked peer must not run its parent's exit handlers or flush its stdio twice);
 * expect(cond, fmt, ...) dies when cond is false. A process names itself in mk_lb_who (a peer
 * name, a rank) before it can fail.
 */
#ifndef MK_TEST_LOOPBACK_EXPECT_H
#define MK_TEST_LOOPBACK_EXPECT_H

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static char mk_lb_who[32] = "?";

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL [%s]: ", mk_lb_who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(1);
}

#define expect(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond))                                                                       \
			die(__VA_ARGS__);                                                          \
	} while (0)

#endif
