// SPDX-License-Identifier: Apache-2.0
/*
 * Log sinks. Plugins install NCCL's logger; everything else prints to stderr with a filter read
 * from MKERNEL_DEBUG / MKERNEL_DEBUG_SUBSYS, falling back to NCCL_DEBUG / NCCL_DEBUG_SUBSYS so one
 * setting covers NCCL and mkernel.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mk/clock.h"
#include "mk/log.h"

mk_log_fn mk_log_sink = mk_log_discard;

void mk_log_discard(int level, unsigned long flags, const char *file, int line, const char *fmt,
		    ...)
{
	(void)level;
	(void)flags;
	(void)file;
	(void)line;
	(void)fmt;
}

static int log_level = -1;
static unsigned long log_mask = MK_SUBSYS_ALL;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const struct {
	const char *name;
	unsigned long bit;
} log_subsys[] = {
	{ "INIT", MK_SUBSYS_INIT }, { "COLL", MK_SUBSYS_COLL },	  { "P2P", MK_SUBSYS_P2P },
	{ "NET", MK_SUBSYS_NET },   { "GRAPH", MK_SUBSYS_GRAPH }, { "TUNING", MK_SUBSYS_TUNING },
	{ "ENV", MK_SUBSYS_ENV },   { "ALLOC", MK_SUBSYS_ALLOC }, { "PROXY", MK_SUBSYS_PROXY },
	{ "ALL", MK_SUBSYS_ALL },
};

static const char *log_env(const char *ours, const char *nccl)
{
	const char *v = getenv(ours);

	return v != NULL ? v : getenv(nccl);
}

/* Same syntax as NCCL_DEBUG_SUBSYS: comma list, a leading '^' inverts it. */
static unsigned long log_parse_mask(const char *s)
{
	unsigned long mask = 0;
	int invert = 0;
	char buf[256], *tok, *save = NULL;

	if (s == NULL || *s == '\0')
		return MK_SUBSYS_ALL;
	if (*s == '^') {
		invert = 1;
		s++;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		for (size_t i = 0; i < sizeof(log_subsys) / sizeof(log_subsys[0]); i++)
			if (strcasecmp(tok, log_subsys[i].name) == 0)
				mask |= log_subsys[i].bit;
	}
	return invert ? ~mask : mask;
}

static void log_init(void)
{
	const char *lvl = log_env("MKERNEL_DEBUG", "NCCL_DEBUG");

	log_level = MK_LOG_NONE;
	if (lvl != NULL) {
		if (strcasecmp(lvl, "VERSION") == 0)
			log_level = MK_LOG_VERSION;
		else if (strcasecmp(lvl, "WARN") == 0)
			log_level = MK_LOG_WARN;
		else if (strcasecmp(lvl, "INFO") == 0)
			log_level = MK_LOG_INFO;
		else if (strcasecmp(lvl, "TRACE") == 0)
			log_level = MK_LOG_TRACE;
	}
	log_mask = log_parse_mask(log_env("MKERNEL_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS"));
}

void mk_log_stderr(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
	static const char *names[] = { "", "VERSION", "WARN", "INFO", "ABORT", "TRACE" };
	char msg[1024];
	va_list ap;

	pthread_once(&log_once, log_init);
	if (level > log_level || level <= MK_LOG_NONE)
		return;
	if (level != MK_LOG_WARN && (flags & log_mask) == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (level == MK_LOG_TRACE)
		fprintf(stderr, "%d:%ld mkernel TRACE %s:%d %s\n", (int)getpid(),
			(long)syscall(SYS_gettid), file, line, msg);
	else
		fprintf(stderr, "%d:%ld mkernel %s %s\n", (int)getpid(), (long)syscall(SYS_gettid),
			names[level < 6 ? level : 0], msg);
}

void mk_log_set_sink(mk_log_fn fn)
{
	mk_log_sink = fn != NULL ? fn : mk_log_stderr;
}

int mk_ratelimit_pass(struct mk_ratelimit *rl, unsigned int *held)
{
	unsigned long long now = mk_now_ms();
	int pass;

	while (__atomic_exchange_n(&rl->lock, 1, __ATOMIC_ACQUIRE))
		;
	if (now - rl->window_ms >= MK_WARN_WINDOW_MS) {
		rl->window_ms = now;
		rl->n = 0;
	}
	pass = rl->n < MK_WARN_BURST;
	if (pass) {
		rl->n++;
		*held = rl->held;
		rl->held = 0;
	} else {
		rl->held++;
	}
	__atomic_store_n(&rl->lock, 0, __ATOMIC_RELEASE);
	return pass;
}
