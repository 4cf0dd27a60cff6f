/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Offsets inside the symmetric heap. Every rank runs the same sequence of collective
 * allocations and frees, and this allocator is deterministic (first fit over a sorted block
 * list), so a buffer lands at the same offset on every rank; mkMemAlloc checks that it did.
 */
#ifndef MK_FUSED_RUNTIME_SYMM_H
#define MK_FUSED_RUNTIME_SYMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MK_SYMM_ALIGN 256

struct mk_symm_block {
	uint64_t off;
	uint64_t len;
	int used;
};

struct mk_symm {
	uint64_t cap;
	struct mk_symm_block *b; /* sorted by offset, covering [0, cap) */
	int n;
	int max;
};

int mk_symm_init(struct mk_symm *s, uint64_t cap);
void mk_symm_fini(struct mk_symm *s);
/* 0 and *off, -EINVAL for len 0, -ENOMEM when no free block is large enough. */
int mk_symm_alloc(struct mk_symm *s, uint64_t len, uint64_t *off);
/* 0, or -EINVAL when off is not the start of a used block. Neighbouring free blocks merge. */
int mk_symm_free(struct mk_symm *s, uint64_t off);
/* Length of the used block starting at off, 0 if none; and whether [off, off+len) is in one. */
uint64_t mk_symm_size(const struct mk_symm *s, uint64_t off);
int mk_symm_contains(const struct mk_symm *s, uint64_t off, uint64_t len);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_SYMM_H */
