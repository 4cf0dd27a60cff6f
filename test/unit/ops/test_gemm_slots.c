// SPDX-License-Identifier: Apache-2.0
/*
 * The gemm op's per-thread caches (plans, decisions, replayed graphs) pick a slot from a hash of
 * the key. Keys users make differ only in high bits: shapes are multiples of 64 and device
 * pointers are 512-byte aligned. These tests fail when such keys share a few slots, as they did
 * when the slot came from the hash's low bits alone (every layer of one shape in one slot, each
 * call replacing the last and never replaying).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fused/ops/gemm_dispatch.h"

#define SLOTS 32

static int distinct(const unsigned int *slot, int n)
{
	char used[SLOTS] = { 0 };
	int count = 0;

	for (int i = 0; i < n; i++) {
		assert_true(slot[i] < SLOTS);
		count += !used[slot[i]];
		used[slot[i]] = 1;
	}
	return count;
}

/* A transformer's GEMMs at the decode and prefill sizes: 4 shapes x 6 token counts. */
static void test_shapes_spread(void **state)
{
	static const int nk[][2] = {
		{ 4096, 4096 }, { 12288, 4096 }, { 28672, 4096 }, { 4096, 14336 }
	};
	static const int ms[] = { 64, 128, 256, 512, 1024, 4096 };
	unsigned int slot[24];
	int n = 0;

	(void)state;
	for (size_t s = 0; s < 4; s++)
		for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
			struct mk_gemm_key key = {
				.dev = 0, .m = ms[i], .n = nk[s][0], .k = nk[s][1], .b_nk = 1
			};

			slot[n++] = mk_gemm_key_slot(&key, SLOTS);
		}
	/* 24 random keys in 32 slots fill about 17; sharing 8 or fewer means the hash is lost */
	assert_true(distinct(slot, n) >= 12);
}

/* One shape, 32 layers with their own weights and outputs 2 MiB apart: the graph cache's key. */
static void test_pointers_spread(void **state)
{
	const struct mk_gemm_key shape = { .dev = 0, .m = 16, .n = 4096, .k = 4096, .b_nk = 1 };
	const uintptr_t base = (uintptr_t)0x7f0000000000ull;
	unsigned int slot[32];

	(void)state;
	for (int i = 0; i < 32; i++) {
		unsigned long long h = mk_gemm_key_hash(&shape);

		h = mk_gemm_hash(h, base + (uintptr_t)i * (2u << 20));
		h = mk_gemm_hash(h, base + ((uintptr_t)1 << 36) + (uintptr_t)i * (64u << 20));
		h = mk_gemm_hash(h, base + ((uintptr_t)1 << 38) + (uintptr_t)i * (1u << 20));
		slot[i] = mk_gemm_slot(h, SLOTS);
	}
	assert_true(distinct(slot, 32) >= 16);
}

/* The slot is a function of the key alone: the same key finds its entry again. */
static void test_slot_stable(void **state)
{
	struct mk_gemm_key a = { .dev = 1, .m = 7, .n = 4100, .k = 4104, .b_nk = 0, .x0 = 3 };
	struct mk_gemm_key b;

	(void)state;
	memcpy(&b, &a, sizeof(a));
	assert_int_equal(mk_gemm_key_slot(&a, SLOTS), mk_gemm_key_slot(&b, SLOTS));
	assert_true(mk_gemm_key_eq(&a, &b));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shapes_spread),
		cmocka_unit_test(test_pointers_spread),
		cmocka_unit_test(test_slot_stable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
