// SPDX-License-Identifier: Apache-2.0
/*
 * The gemm op's per-thread caches (plans, decisions, replayed graphs) pick a slot from a hash of
 * the key. Keys users make differ only in some bits: shapes are multiples of 64, device
 * pointers are 512-byte aligned and small buffers lie a few KiB apart. These tests fail when
 * such keys share a few slots, as they did when the slot came from the hash's low bits (every
 * layer of one shape in one slot) and then from its two halves folded (32 buffers 96 KiB apart
 * in one set of the graph cache: none replayed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fused/ops/gemm_dispatch.h"

#define SLOTS 32
#define SETS  128 /* the graph cache's */

/* How many of `slots` the n slots fill. */
static int distinct(const unsigned int *slot, int n, unsigned int slots)
{
	char used[SETS] = { 0 };
	int count = 0;

	assert_true(slots <= SETS);
	for (int i = 0; i < n; i++) {
		assert_true(slot[i] < slots);
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
	assert_true(distinct(slot, n, SLOTS) >= 12);
}

/*
 * One shape, 32 keys whose pointers differ by `stride` only (an output buffer each, as
 * cudaMalloc hands out small buffers: 96 KiB and a bit apart within one 2 MiB page; or a layer's
 * weights, 32 MiB apart): the graph cache's key, over its 128 sets.
 */
static int pointer_sets(uintptr_t stride, int which)
{
	const struct mk_gemm_key shape = { .dev = 0, .m = 48, .n = 1000, .k = 1032, .b_nk = 1 };
	const uintptr_t base = (uintptr_t)0x7f0000000000ull;
	unsigned int slot[32];

	for (int i = 0; i < 32; i++) {
		uintptr_t p[3] = { base, base + ((uintptr_t)1 << 36), base + ((uintptr_t)1 << 38) };

		p[which] += (uintptr_t)i * stride;
		slot[i] = mk_gemm_slot(mk_gemm_call_hash(&shape, (const void *)p[0],
							 (const void *)p[1], (const void *)p[2]),
				       SETS);
	}
	return distinct(slot, 32, SETS);
}

static void test_pointers_spread(void **state)
{
	static const uintptr_t strides[] = { 0x18200, 2u << 20, 32u << 20, 512 };

	(void)state;
	/* 32 random keys over 128 sets fill about 28; 20 or more means every pointer bit counts */
	for (size_t s = 0; s < sizeof(strides) / sizeof(strides[0]); s++) {
		for (int which = 0; which < 3; which++) {
			const int sets = pointer_sets(strides[s], which);

			if (sets < 20)
				print_message("stride %#lx, pointer %d: %d sets\n",
					      (unsigned long)strides[s], which, sets);
			assert_true(sets >= 20);
		}
	}
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

/* An entry as the caches lay theirs out: other fields around the way and the key. */
struct t_entry {
	int payload;
	struct mk_gemm_key key;
	struct mk_gemm_way way;
};

#define T_FIND(set, k)                                                                             \
	mk_gemm_way_find(set, sizeof(set[0]), offsetof(struct t_entry, way),                       \
			 offsetof(struct t_entry, key), k)
#define T_VICTIM(set) mk_gemm_way_victim(set, sizeof(set[0]), offsetof(struct t_entry, way))

/* One set as a cache uses it: the key's way on a hit, else a free way, else the oldest. */
static int t_use(struct t_entry *set, const struct mk_gemm_key *key, unsigned long long now)
{
	int w = T_FIND(set, key);

	if (w < 0) {
		w = T_VICTIM(set);
		memset(&set[w], 0, sizeof(set[w]));
		set[w].key = *key;
		set[w].way.valid = 1;
	}
	set[w].way.used = now;
	return w;
}

/*
 * MK_GEMM_WAYS keys of one set all stay however they alternate; one more takes the least
 * recently used way, and only that key is missed next.
 */
static void test_ways_keep_a_set(void **state)
{
	struct t_entry set[MK_GEMM_WAYS];
	struct mk_gemm_key keys[MK_GEMM_WAYS + 1];
	unsigned long long now = 0;
	int way_of[MK_GEMM_WAYS];

	(void)state;
	memset(set, 0, sizeof(set));
	for (int i = 0; i <= MK_GEMM_WAYS; i++)
		keys[i] = (struct mk_gemm_key){ .dev = 0, .m = 64 * (i + 1), .n = 4096, .k = 4096 };
	/* a free way for each new key, the ways in order */
	for (int i = 0; i < MK_GEMM_WAYS; i++) {
		assert_int_equal(T_FIND(set, &keys[i]), -1);
		way_of[i] = t_use(set, &keys[i], ++now);
		assert_int_equal(way_of[i], i);
	}
	/* 100 rounds in changing orders: every call a hit, in its own way */
	for (int r = 0; r < 100; r++) {
		for (int j = 0; j < MK_GEMM_WAYS; j++) {
			const int i = (j * (r % 3 + 1) + r) % MK_GEMM_WAYS;

			assert_int_equal(T_FIND(set, &keys[i]), way_of[i]);
			(void)t_use(set, &keys[i], ++now);
		}
	}
	/* touching every key but 2 leaves 2 the least recently used */
	for (int i = 0; i < MK_GEMM_WAYS; i++)
		if (i != 2)
			(void)t_use(set, &keys[i], ++now);
	assert_int_equal(T_VICTIM(set), way_of[2]);
	assert_int_equal(t_use(set, &keys[MK_GEMM_WAYS], ++now), way_of[2]);
	assert_int_equal(T_FIND(set, &keys[2]), -1);
	for (int i = 0; i < MK_GEMM_WAYS; i++)
		if (i != 2)
			assert_int_equal(T_FIND(set, &keys[i]), way_of[i]);
	/* a freed way is taken before any older one */
	set[1].way.valid = 0;
	assert_int_equal(T_VICTIM(set), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shapes_spread),
		cmocka_unit_test(test_pointers_spread),
		cmocka_unit_test(test_slot_stable),
		cmocka_unit_test(test_ways_keep_a_set),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
