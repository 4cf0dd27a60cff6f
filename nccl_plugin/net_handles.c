// SPDX-License-Identifier: Apache-2.0
/*
 * The handles NCCL holds: every comm and registration the plugin hands out is a token naming a
 * slot of this table and the slot's generation, never a pointer. A token whose slot has since
 * been released (closed comm, deregistered memory) or reused for something else names an older
 * generation and is refused without any object being read, so a stale or repeated call cannot
 * reach freed memory nor act on whatever now lives there. Registrations also remember the comm
 * they were made through and the caller's exact range, so a transfer is checked against both.
 *
 * Token layout (64 bits): 0xa5 in the top byte (never a canonical user-space address, so one
 * dereferenced by mistake faults at once), the slot's generation in bits 24..55, the slot index
 * in bits 0..23. Lookups are lock-free (a generation read before and after the copy); creating
 * and releasing take net_h_lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

#define H_TAG	   0xa5ull
#define H_CHUNK	   4096u
#define H_CHUNKS   4096u /* 16 M slots */
#define H_IDX_BITS 24
#define H_GEN_MASK 0xffffffffull
#define H_NONE	   UINT32_MAX

struct net_hslot {
	uint32_t gen;  /* bumped at every release: older tokens stop matching */
	uint32_t kind; /* enum mk_net_hkind; 0 while free */
	struct mk_net_hent ent;
	uint32_t next_free;
};

static pthread_mutex_t net_h_lock = PTHREAD_MUTEX_INITIALIZER;
static struct net_hslot *net_h_chunks[H_CHUNKS]; /* never freed, never moved */
static uint32_t net_h_used;			 /* slots handed out at least once */
static uint32_t net_h_free = H_NONE;		 /* released slots, most recent first */

static struct net_hslot *net_h_slot(uint32_t idx)
{
	struct net_hslot *c = __atomic_load_n(&net_h_chunks[idx / H_CHUNK], __ATOMIC_ACQUIRE);

	return c != NULL ? &c[idx % H_CHUNK] : NULL;
}

static void *net_h_token(uint32_t idx, uint32_t gen)
{
	return (void *)(uintptr_t)(H_TAG << 56 | ((uint64_t)gen & H_GEN_MASK) << H_IDX_BITS | idx);
}

/* Slot index and generation of a token; -EBADF for anything that is not one of ours. */
static int net_h_parse(const void *handle, uint32_t *idx, uint32_t *gen)
{
	uint64_t v = (uint64_t)(uintptr_t)handle;

	if (v >> 56 != H_TAG)
		return -EBADF;
	*idx = (uint32_t)(v & ((1u << H_IDX_BITS) - 1));
	*gen = (uint32_t)((v >> H_IDX_BITS) & H_GEN_MASK);
	return *idx < __atomic_load_n(&net_h_used, __ATOMIC_ACQUIRE) ? 0 : -EBADF;
}

/* A free slot, under net_h_lock: a released one, else the next never used (growing a chunk). */
static int net_h_alloc(uint32_t *out)
{
	uint32_t idx = net_h_free;
	struct net_hslot *c;

	if (idx != H_NONE) {
		net_h_free = net_h_slot(idx)->next_free;
		*out = idx;
		return 0;
	}
	idx = net_h_used;
	if (idx >= H_CHUNK * H_CHUNKS)
		return -ENOSPC;
	if (net_h_chunks[idx / H_CHUNK] == NULL) {
		c = calloc(H_CHUNK, sizeof(*c));
		if (c == NULL)
			return -ENOMEM;
		__atomic_store_n(&net_h_chunks[idx / H_CHUNK], c, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&net_h_used, idx + 1, __ATOMIC_RELEASE);
	*out = idx;
	return 0;
}

int mk_net_handle_new(const struct mk_net_hent *e, void **handle)
{
	struct net_hslot *s;
	uint32_t idx;
	int rc;

	pthread_mutex_lock(&net_h_lock);
	rc = net_h_alloc(&idx);
	if (rc == 0) {
		s = net_h_slot(idx);
		s->ent = *e;
		__atomic_store_n(&s->kind, (uint32_t)e->kind, __ATOMIC_RELEASE);
		*handle = net_h_token(idx, __atomic_load_n(&s->gen, __ATOMIC_RELAXED));
	}
	pthread_mutex_unlock(&net_h_lock);
	return rc;
}

int mk_net_handle_get(const void *handle, unsigned kinds, struct mk_net_hent *out)
{
	struct net_hslot *s;
	uint32_t idx, gen, g1, g2, kind;

	if (net_h_parse(handle, &idx, &gen))
		return -EBADF;
	s = net_h_slot(idx);
	if (s == NULL)
		return -EBADF;
	g1 = __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE);
	kind = __atomic_load_n(&s->kind, __ATOMIC_ACQUIRE);
	*out = s->ent;
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	g2 = __atomic_load_n(&s->gen, __ATOMIC_RELAXED);
	/* released (or released and reused) while we copied: the copy is not trusted */
	if (g1 != gen || g2 != gen || kind == 0 || !(kinds & (1u << kind)))
		return -EBADF;
	return 0;
}

int mk_net_handle_drop(const void *handle, unsigned kinds, struct mk_net_hent *out)
{
	struct net_hslot *s;
	uint32_t idx, gen;
	int rc = -EBADF;

	if (net_h_parse(handle, &idx, &gen))
		return -EBADF;
	pthread_mutex_lock(&net_h_lock);
	s = net_h_slot(idx);
	if (s != NULL && s->gen == gen && s->kind != 0 && (kinds & (1u << s->kind))) {
		*out = s->ent;
		__atomic_store_n(&s->gen, gen + 1, __ATOMIC_RELEASE);
		__atomic_store_n(&s->kind, 0, __ATOMIC_RELEASE);
		memset(&s->ent, 0, sizeof(s->ent));
		s->next_free = net_h_free;
		net_h_free = idx;
		rc = 0;
	}
	pthread_mutex_unlock(&net_h_lock);
	return rc;
}

int mk_net_handle_drop_owned(const void *owner, struct mk_net_hent *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&net_h_lock);
	for (uint32_t idx = 0; idx < net_h_used && n < max; idx++) {
		struct net_hslot *s = net_h_slot(idx);

		if (s->kind != MK_NET_H_MR || s->ent.owner != owner)
			continue;
		out[n++] = s->ent;
		__atomic_store_n(&s->gen, s->gen + 1, __ATOMIC_RELEASE);
		__atomic_store_n(&s->kind, 0, __ATOMIC_RELEASE);
		memset(&s->ent, 0, sizeof(s->ent));
		s->next_free = net_h_free;
		net_h_free = idx;
	}
	pthread_mutex_unlock(&net_h_lock);
	return n;
}

bool mk_net_handle_tagged(const void *p)
{
	return (uint64_t)(uintptr_t)p >> 56 == H_TAG;
}

void *mk_net_handle_obj(const void *handle)
{
	struct mk_net_hent e;

	return mk_net_handle_get(handle, ~0u, &e) == 0 ? e.obj : NULL;
}
