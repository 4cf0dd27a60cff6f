/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What mkRingAttention's host files share (ring_attention_api.c, ring_attention_mem.c,
 * ring_attention_fallback.c): the call, the per-comm state and the per-shape workspace of the fused
 * kernel, the unfused path.
 */
#ifndef MK_FUSED_OPS_RING_ATTENTION_HOST_H
#define MK_FUSED_OPS_RING_ATTENTION_HOST_H

#include <stddef.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "fused/attn/attn.h"
#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/ops/ring_attention_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_comm;

/* One call's arguments (checked by the API). */
struct mk_ring_call {
	const void *q, *k, *v;
	void *o;
	float *lse; /* may be NULL: a scratch row of LSEs is used */
	int batch, heads_q, heads_kv, seq_local, head_dim, causal;
};

/* The fused kernel's memory for one shape (its key: the call's sizes and mask). */
struct mk_ring_shape {
	int batch, heads_q, heads_kv, seq_local, head_dim, causal;
	struct mk_ring_mem mem;
	char *heap;	     /* the shape's symmetric-heap allocation (mkMemAlloc) */
	CUtensorMap *maps_d; /* [2 R]: K then V map of each step's source (device memory) */
	struct mk_ring_step steps[MK_RING_MAX_RANKS];
};

#define MK_RING_KEY 6 /* batch, heads_q, heads_kv, seq_local, head_dim, causal */

/* Per comm (the op's slot): signal bookkeeping, the fused shape, the unfused path's buffers. */
struct mk_ring_state {
	int key[MK_RING_KEY]; /* the last shape every rank was seen to agree on */
	int key_ok;
	unsigned long long *seen; /* device [2 nnodes] */
	int *remote_d;		  /* device [nnodes] */
	struct mk_ring_shape *shape;
	/* per-rank scratch of both paths: fp32 partials, LSE rows, gathered K and V */
	float *acc, *lse;
	size_t acc_bytes, lse_bytes;
	void *kg, *vg;
	size_t g_bytes;
	int last_path; /* the last call: 1 fused, 0 unfused, -1 none yet */
	char last_why[256];
};

/* The op's state on this comm (created on first use). 0 or -errno. */
int mk_ring_state_get(struct mk_comm *c, struct mk_ring_state **out);
/* ... or NULL before the first call. */
struct mk_ring_state *mk_ring_state_of(const struct mk_comm *c);

/* Tests: the path of the last call (1 fused, 0 unfused, -1 none yet) and why (or "static" /
 * "adaptive" for the fused path). */
int mk_ring_last_path(struct mk_comm *c, char *why, size_t len);

/* Scratch of at least these sizes (cudaMalloc, kept). 0, -ENOMEM, or -EOPNOTSUPP under capture
 * when it would have to allocate. */
int mk_ring_scratch(struct mk_ring_state *st, size_t acc, size_t lse, size_t gathered,
		    cudaStream_t stream);

/*
 * Every rank called with the same shape: checked once per new shape with an all-gather (host
 * synchronising), so a mismatch is -EINVAL (WARNed) on every rank instead of a hang. 0, -EINVAL,
 * -EOPNOTSUPP (a new shape under CUDA-graph capture), -EIO.
 */
int mk_ring_check_key(struct mk_comm *c, struct mk_ring_state *st, const struct mk_ring_call *x,
		      cudaStream_t stream);

/* Geometry of this rank in the comm. */
void mk_ring_geom_of(const struct mk_comm *c, const struct mk_ring_call *x, struct mk_ring_geom *g);

/* The fused call: the shape's workspace (set up collectively when new), then the launch. 0,
 * -ENOMEM (heap too small: WARNed with the bytes), -EINVAL (ranks disagree on the shape), -EIO. */
int mk_ring_fused(struct mk_comm *c, const struct mk_ring_call *x, const struct mk_gar_split *sp,
		  int adaptive, cudaStream_t stream);

/* 1 when the current shape matches the call (the fused path enqueues without host sync). */
int mk_ring_shape_ready(const struct mk_comm *c, const struct mk_ring_call *x);

/* The unfused path: ncclAllGather of K and V, then the same steps by the attention engine. */
int mk_ring_unfused(struct mk_comm *c, const struct mk_ring_call *x, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_RING_ATTENTION_HOST_H */
