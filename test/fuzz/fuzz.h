/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the fuzzers: a xorshift64 stream, reseeded per input so input i of a given seed is
 * the same in every run (a fixed seed is a fixed corpus; "replay: <tool> N SEED" reruns the
 * first N inputs of a failing run).
 */
#ifndef MK_TEST_FUZZ_H
#define MK_TEST_FUZZ_H

#include <stdint.h>

static uint64_t fuzz_rng_state = 1;

static inline uint64_t fuzz_rng(void)
{
	fuzz_rng_state ^= fuzz_rng_state << 13;
	fuzz_rng_state ^= fuzz_rng_state >> 7;
	fuzz_rng_state ^= fuzz_rng_state << 17;
	return fuzz_rng_state;
}

/* Start input i of the corpus named by seed. */
static inline void fuzz_input(uint64_t seed, long i)
{
	fuzz_rng_state = (seed + (uint64_t)i) * 0x9e3779b97f4a7c15ull | 1;
}

#endif /* MK_TEST_FUZZ_H */
