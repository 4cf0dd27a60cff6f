/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registration cache shared by every consumer. Ranges are widened to whole pages; a request
 * inside an existing registration of the same device and type is a hit (refcount + 1, no NIC
 * call), so NCCL's per-operation regMr/deregMr on sub-ranges of a buffer registered once
 * (regIsGlobal) costs a lookup. The backend registration is dropped when the count reaches 0.
 */
#ifndef MK_MR_CACHE_H
#define MK_MR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "mk/transport.h"

#define MK_MR_MAGIC 0x6d6b6d72u

struct mk_mr {
	uint32_t magic; /* MK_MR_MAGIC while registered; entries are recycled, never freed */
	const struct mk_transport_ops *ops;
	int dev;
	int type;	 /* MK_PTR_HOST / MK_PTR_CUDA */
	uintptr_t start; /* page-aligned registered range [start, end) */
	uintptr_t end;
	struct mk_bmr *bmr;  /* the backend's registration */
	struct mk_rkey rkey; /* what a peer needs to reach it */
	int refs;	     /* under the cache lock */
	struct mk_mr *next;
};

/* Look up or register [addr, addr+len). Returns 0 and a referenced entry, or -errno. */
int mk_mr_get(const struct mk_transport_ops *ops, int dev, void *addr, size_t len,
	      const struct mk_mr_attr *attr, struct mk_mr **out);

/* Drop one reference; deregisters at 0. -EINVAL for a handle the cache does not know. */
int mk_mr_put(struct mk_mr *mr);

/* Cheap data-path check of a caller-supplied handle: registered and not yet released. */
static inline int mk_mr_valid(const struct mk_mr *mr)
{
	return mr != NULL && __atomic_load_n(&mr->magic, __ATOMIC_RELAXED) == MK_MR_MAGIC;
}

struct mk_mr_stats {
	uint64_t hits;
	uint64_t misses;
	uint64_t live;
};

void mk_mr_get_stats(struct mk_mr_stats *st);

#endif /* MK_MR_CACHE_H */
