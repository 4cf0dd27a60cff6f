/* SPDX-License-Identifier: Apache-2.0 */
/* Monotonic time for deadlines and timeouts (vDSO: no syscall); usable from C and CUDA host code.
 */
#ifndef MK_CLOCK_H
#define MK_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mk_now_ms(void)
{
	return mk_now_ns() / 1000000u;
}

#endif /* MK_CLOCK_H */
