/* SPDX-License-Identifier: Apache-2.0 */
/* 32-bit FNV-1a: handle checksums and stable names (not cryptographic, not for hash tables). */
#ifndef MK_HASH_H
#define MK_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t mk_fnv1a32(const void *buf, size_t len)
{
	const uint8_t *p = (const uint8_t *)buf;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

#endif /* MK_HASH_H */
