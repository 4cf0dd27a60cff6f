/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One logging macro family for every component. Inside the NCCL plugins the sink is NCCL's own
 * logger (installed by init), so NCCL_DEBUG / NCCL_DEBUG_SUBSYS filter our lines like NCCL's. In
 * libmkernel.so and the tools the sink prints to stderr, filtered by MKERNEL_DEBUG and
 * MKERNEL_DEBUG_SUBSYS (defaulting to NCCL_DEBUG / NCCL_DEBUG_SUBSYS).
 *
 * Levels and subsystem bits carry NCCL's values so the sink can be NCCL's function unchanged.
 * A translation unit may define MK_LOG_PREFIX before including this header (default "NET/mkernel").
 */
#ifndef MK_LOG_H
#define MK_LOG_H

#include <errno.h>

enum mk_log_level {
	MK_LOG_NONE = 0,
	MK_LOG_VERSION = 1,
	MK_LOG_WARN = 2,
	MK_LOG_INFO = 3,
	MK_LOG_ABORT = 4,
	MK_LOG_TRACE = 5,
};

#define MK_SUBSYS_INIT	 0x1UL
#define MK_SUBSYS_COLL	 0x2UL
#define MK_SUBSYS_P2P	 0x4UL
#define MK_SUBSYS_NET	 0x10UL
#define MK_SUBSYS_GRAPH	 0x20UL
#define MK_SUBSYS_TUNING 0x40UL
#define MK_SUBSYS_ENV	 0x80UL
#define MK_SUBSYS_ALLOC	 0x100UL
#define MK_SUBSYS_PROXY	 0x400UL
#define MK_SUBSYS_ALL	 (~0UL)

/* Same shape as NCCL's ncclDebugLogger_t (its level is a C enum, passed as int). */
typedef void (*mk_log_fn)(int level, unsigned long flags, const char *file, int line,
			  const char *fmt, ...);

/* Never NULL: starts as mk_log_discard, set by a plugin init or by mk_log_use_stderr(). */
extern mk_log_fn mk_log_sink;

void mk_log_discard(int level, unsigned long flags, const char *file, int line, const char *fmt,
		    ...) __attribute__((format(printf, 5, 6)));
void mk_log_stderr(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Install a sink; NULL installs the stderr sink (used by tools, tests and libmkernel.so). */
void mk_log_set_sink(mk_log_fn fn);

#ifndef MK_LOG_PREFIX
#define MK_LOG_PREFIX "NET/mkernel"
#endif

#ifndef MK_ENABLE_TRACE
#define MK_ENABLE_TRACE 0
#endif

#define MK_LOG(level, subsys, fmt, ...)                                                            \
	do {                                                                                       \
		int mk_log_errno_ = errno;                                                         \
		mk_log_sink((level), (subsys), __FILE__, __LINE__, MK_LOG_PREFIX " " fmt,          \
			    ##__VA_ARGS__);                                                        \
		errno = mk_log_errno_;                                                             \
	} while (0)

#define MK_WARN(fmt, ...)	  MK_LOG(MK_LOG_WARN, MK_SUBSYS_ALL, fmt, ##__VA_ARGS__)
#define MK_INFO(subsys, fmt, ...) MK_LOG(MK_LOG_INFO, (subsys), fmt, ##__VA_ARGS__)

/* Warn once per call site: for conditions that repeat on a data path. */
#define MK_WARN_ONCE(fmt, ...)                                                                     \
	do {                                                                                       \
		static int mk_warned_;                                                             \
		if (!__atomic_exchange_n(&mk_warned_, 1, __ATOMIC_RELAXED))                        \
			MK_WARN(fmt, ##__VA_ARGS__);                                               \
	} while (0)

/*
 * Warnings a peer or a stranger can trigger at will (rejected setup requests, stray messages,
 * immediates nobody expects): every one is reported, but at most MK_WARN_BURST lines per call
 * site in MK_WARN_WINDOW_MS; the first line after a quiet stretch says how many were held back.
 */
#define MK_WARN_BURST	  5
#define MK_WARN_WINDOW_MS 10000

struct mk_ratelimit {
	unsigned long long window_ms; /* start of the current window */
	unsigned int n;		      /* lines let through in it */
	unsigned int held;	      /* lines held back since the last one let through */
	int lock;
};

/* 1 when this line may be logged; *held then says how many were held back before it. */
int mk_ratelimit_pass(struct mk_ratelimit *rl, unsigned int *held);

#define MK_WARN_RATELIMITED(fmt, ...)                                                              \
	do {                                                                                       \
		static struct mk_ratelimit mk_rl_;                                                 \
		unsigned int mk_held_ = 0;                                                         \
		if (!mk_ratelimit_pass(&mk_rl_, &mk_held_))                                        \
			break;                                                                     \
		if (mk_held_ > 0)                                                                  \
			MK_WARN(fmt " (%u such lines held back before this one)", ##__VA_ARGS__,   \
				mk_held_);                                                         \
		else                                                                               \
			MK_WARN(fmt, ##__VA_ARGS__);                                               \
	} while (0)

#if MK_ENABLE_TRACE
#define MK_TRACE(subsys, fmt, ...) MK_LOG(MK_LOG_TRACE, (subsys), fmt, ##__VA_ARGS__)
#else
#define MK_TRACE(subsys, fmt, ...)                                                                 \
	do {                                                                                       \
	} while (0)
#endif

#endif /* MK_LOG_H */
