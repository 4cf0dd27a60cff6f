/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gemm op's paths and the choice between them (plain C host code): mkernel's engine in one
 * of its variants (fused/gemm/gemm.h) or cuBLASLt, chosen per shape from measured data
 * (tuner/calib.h), with the device memory both need (a workspace per stream, gemm_mem.c). mkGemm
 * (gemm_api.c) and other ops' GEMMs call mk_gemm_dispatch(); tests and tools force a path and
 * read which one ran. The cuBLAS paths are in gemm_fallback.h.
 */
#ifndef MK_FUSED_OPS_GEMM_DISPATCH_H
#define MK_FUSED_OPS_GEMM_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <library_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Key of the per-thread caches of plans and decisions: device, shape and two more words. */
struct mk_gemm_key {
	int dev, m, n, k, b_nk, x0, x1;
};

/* One step of 64-bit FNV-1a over a word, from MK_GEMM_HASH_SEED: the caches' slots. */
#define MK_GEMM_HASH_SEED 1469598103934665603ull

static inline unsigned long long mk_gemm_hash(unsigned long long h, unsigned long long w)
{
	return (h ^ w) * 1099511628211ull;
}

static inline unsigned long long mk_gemm_key_hash(const struct mk_gemm_key *key)
{
	const int *w = &key->dev;
	unsigned long long h = MK_GEMM_HASH_SEED;

	for (size_t i = 0; i < sizeof(*key) / sizeof(int); i++)
		h = mk_gemm_hash(h, (unsigned int)w[i]);
	return h;
}

/*
 * A slot out of `slots` for hash `h`. One FNV step per 64-bit word mixes poorly: a product's
 * low bits depend only on the words' low bits, which shapes (multiples of 64) and device
 * pointers (512-byte aligned) leave equal, and its sparse prime carries a pointer's middle bits
 * (buffers 96 KiB apart) hardly anywhere. So the slot comes after a full 64-bit mix (the
 * finaliser of MurmurHash3), which every input bit reaches; without it, 32 buffers of one
 * shape all landed in one set of the graph cache.
 */
static inline unsigned int mk_gemm_slot(unsigned long long h, unsigned int slots)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (unsigned int)(h % slots);
}

/*
 * The hash of a call with its pointers (the graph cache's key): layers of one shape with their
 * own weights are different keys.
 */
static inline unsigned long long mk_gemm_call_hash(const struct mk_gemm_key *shape, const void *a,
						   const void *b, const void *c)
{
	unsigned long long h = mk_gemm_key_hash(shape);

	h = mk_gemm_hash(h, (uintptr_t)a);
	h = mk_gemm_hash(h, (uintptr_t)b);
	return mk_gemm_hash(h, (uintptr_t)c);
}

static inline unsigned int mk_gemm_key_slot(const struct mk_gemm_key *key, unsigned int slots)
{
	return mk_gemm_slot(mk_gemm_key_hash(key), slots);
}

static inline int mk_gemm_key_eq(const struct mk_gemm_key *x, const struct mk_gemm_key *y)
{
	return x->dev == y->dev && x->m == y->m && x->n == y->n && x->k == y->k &&
	       x->b_nk == y->b_nk && x->x0 == y->x0 && x->x1 == y->x1;
}

/*
 * The caches (decisions, cuBLASLt plans, replayed graphs) are set-associative, MK_GEMM_WAYS
 * entries a set, a new key taking a free way or the least recently used one: a decode step's
 * GEMMs come back at every step, and two of them whose keys share a slot evicted each other at
 * every call when a set was one entry (a new cuBLASLt heuristic query, a new decision, no graph
 * replay).
 */
#define MK_GEMM_WAYS 4

/* What each cache entry keeps for that: whether it holds a key, and when it was last used. */
struct mk_gemm_way {
	unsigned long long used; /* its cache's clock at its last use */
	int valid;
};

/* The entry of way w of a set: entries `stride` bytes apart, their mk_gemm_way `off` bytes in. */
static inline const struct mk_gemm_way *mk_gemm_way_at(const void *set, size_t stride, size_t off,
						       int w)
{
	return (const struct mk_gemm_way *)((const char *)set + (size_t)w * stride + off);
}

/* The way a new key takes in a set: a free one, else the least recently used. */
static inline int mk_gemm_way_victim(const void *set, size_t stride, size_t off)
{
	int victim = 0;

	for (int w = 0; w < MK_GEMM_WAYS; w++) {
		const struct mk_gemm_way *x = mk_gemm_way_at(set, stride, off, w);

		if (!x->valid)
			return w;
		if (x->used < mk_gemm_way_at(set, stride, off, victim)->used)
			victim = w;
	}
	return victim;
}

/* The way of a set whose entry holds `key` (its mk_gemm_key `key_off` bytes in), or -1. */
static inline int mk_gemm_way_find(const void *set, size_t stride, size_t off, size_t key_off,
				   const struct mk_gemm_key *key)
{
	for (int w = 0; w < MK_GEMM_WAYS; w++) {
		const char *e = (const char *)set + (size_t)w * stride;

		if (mk_gemm_way_at(set, stride, off, w)->valid &&
		    mk_gemm_key_eq((const struct mk_gemm_key *)(e + key_off), key))
			return w;
	}
	return -1;
}

enum mk_gemm_path {
	MK_GEMM_PATH_AUTO = 0,	   /* the calibration decides (requests only) */
	MK_GEMM_PATH_ENGINE = 1,   /* mkernel's engine, variant tile x splits */
	MK_GEMM_PATH_CUBLASLT = 2, /* cublasLtMatmul with the heuristic's algorithm */
	MK_GEMM_PATH_CUBLAS = 3,   /* cublasGemmEx (no workspace: under capture, other types) */
	MK_GEMM_PATH_SKINNY = 4,   /* the skinny kernel: M <= 16, B N x K (fused/gemm/skinny.h) */
};

/* A path to run (requests) or the path that ran. */
struct mk_gemm_pick {
	int path;   /* enum mk_gemm_path */
	int tile;   /* engine: enum mk_gemm_tile */
	int splits; /* engine: k-splits (1 = none) */
};

/* What a dispatch did, for tests and logs. */
struct mk_gemm_ran {
	struct mk_gemm_pick pick;
	const char *why; /* static text: why this path */
	int graph;	 /* cuBLASLt, replayed from its captured graph (gemm_graph.h) */
};

/*
 * C (row-major m x n, bf16) = A (row-major m x k) @ B (k x n, or n x k when b_nk), fp32
 * accumulation, on `stream`. `force` (NULL = auto) runs the given path when it can run this
 * call, else the next one as auto would; `ran` (may be NULL) says what ran. 0, or -errno:
 * -EIO when a launch failed. Sizes and pointers are the caller's to check (>= 1, not NULL).
 */
int mk_gemm_dispatch(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		     cudaStream_t stream, const struct mk_gemm_pick *force,
		     struct mk_gemm_ran *ran);

/*
 * An op's plain GEMM (what its unfused path runs): bf16 through mk_gemm_dispatch (the faster of
 * the engine and cuBLAS for the shape), fp16 and fp32 (type CUDA_R_16F, CUDA_R_32F; C of the same
 * type) through cublasGemmEx. 0 or -errno.
 */
int mk_gemm_plain(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		  cudaDataType_t type, cudaStream_t stream);

/* The last dispatch of this thread (what ran and why), for tests. */
void mk_gemm_dispatch_last(struct mk_gemm_ran *ran);

/*
 * "cublas", "cublaslt", "skinny", "engine" (the default variant) or "eBMxBNsS" into *out. 0 or
 * -EINVAL. Names MKERNEL_GEMM_PATH and the tools' --path take.
 */
int mk_gemm_pick_parse(const char *s, struct mk_gemm_pick *out);

/* "cublaslt", "e64x256s8", ... into buf. */
const char *mk_gemm_pick_name(const struct mk_gemm_pick *p, char *buf, size_t len);

/*
 * The workspace of `stream` on the current device: MKERNEL_GEMM_WORKSPACE bytes, allocated and
 * zeroed (ordered on the stream) at the first request, kept for the process. The first
 * MK_GEMM_SPLIT_COUNT_BYTES hold split-K counters; the rest is shared by split-K partials and
 * cuBLASLt (stream order keeps them apart). 0, -EBUSY (the stream is capturing and has no
 * workspace yet: nothing may be allocated now), -ENOSPC (too many streams), -ENOMEM.
 */
int mk_gemm_ws_get(cudaStream_t stream, void **ws, size_t *bytes);

/* The same for device `dev`, which the caller has already asked for (mkGemm's per-call path: a
 * thread's last (device, stream) is answered without the table's lock). */
int mk_gemm_ws_get_on(int dev, cudaStream_t stream, void **ws, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_DISPATCH_H */
