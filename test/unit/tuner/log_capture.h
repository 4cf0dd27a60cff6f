/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A log sink for the tuner's tests, shaped like NCCL's logger (and mk_log_fn): keeps every line
 * in one buffer and counts WARNs, so tests assert on what an operator would see.
 */
#ifndef MK_TEST_TUNER_LOG_CAPTURE_H
#define MK_TEST_TUNER_LOG_CAPTURE_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LOG_CAPTURE_WARN 2 /* NCCL's WARN level */

static char log_text[16384];
static int log_warns;

static inline void mk_test_log_capture_reset(void)
{
	log_text[0] = '\0';
	log_warns = 0;
}

static void __attribute__((format(printf, 5, 6)))
log_capture(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
	size_t used = strlen(log_text);
	va_list ap;
	int n;

	(void)flags;
	(void)file;
	(void)line;
	if (level == LOG_CAPTURE_WARN)
		log_warns++;
	if (used + 2 >= sizeof(log_text))
		return;
	va_start(ap, fmt);
	n = vsnprintf(log_text + used, sizeof(log_text) - used - 1, fmt, ap);
	va_end(ap);
	if (n > 0) {
		used = strlen(log_text);
		log_text[used] = '\n';
		log_text[used + 1] = '\0';
	}
}

#endif /* MK_TEST_TUNER_LOG_CAPTURE_H */
