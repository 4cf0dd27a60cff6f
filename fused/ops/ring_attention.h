/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkRingAttention's fused kernel (ring_attention.cu) as its host side (ring_attention_mem.c)
 * sees it: one persistent cooperative kernel per call, every CTA with the attention engine's
 * threads and shared memory, CTAs starting in the roles below and all ending in compute:
 *   publish: copy my k, v into my heap (node peers read it there, the sends leave from it),
 *            then announce it (published = call number);
 *   send:    (several nodes) put my block, in chunks, to my local rank's peer on every other
 *            node, into that peer's landing slot for my node, once that peer said the slot is
 *            free; the last chunk carries the arrival signal; then wait until the puts left;
 *   land:    (several nodes) tell my local rank's peer on every other node that my slot for
 *            its node is free, then per node wait for its block's signal, land it (host mirror
 *            -> heap) and announce it (landed[slot] = call number) to my node;
 *   compute: the attention engine's role over the ring's steps (ring_attention_plan.h), each
 *            gated on its block: mine at once, a node peer's once published, another node's
 *            once landed at the rank of my node that holds it; partials merged in step order.
 * A call starts only after every node peer finished the previous one (its call counter), so my
 * published block and my landing slots are not rewritten while a peer still reads them; the
 * senders wait for the receivers' "slot free" signal. Signals only grow (`seen` counts what
 * earlier calls consumed). The last CTA out resets the call's counters, runs the adaptive
 * controller and stores the call number node peers wait for. Every wait is bounded by the comm's
 * timeout; the first error goes to the comm's error word and every later wait gives up at once.
 */
#ifndef MK_FUSED_OPS_RING_ATTENTION_H
#define MK_FUSED_OPS_RING_ATTENTION_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "fused/attn/attn.h"
#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/ops/ring_attention_plan.h"
#include "fused/runtime/dev_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Roles, in the policy engine's order: compute, intra (publish), send, reduce (land). */
enum { MK_RING_COMPUTE = 0, MK_RING_PUBLISH = 1, MK_RING_SEND = 2, MK_RING_LAND = 3 };

/* Flag words of a shape (my heap; a node peer's at the same offset of its heap), zeroed when
 * the shape is set up. */
struct mk_ring_flags {
	unsigned int calls;	 /* my completed calls on this shape */
	unsigned int published;	 /* call number whose K, V copy is in my heap */
	unsigned int copied;	 /* publish CTAs done in this call */
	unsigned int exits;	 /* CTAs out of this call */
	unsigned int units;	 /* the compute role's unit counter */
	unsigned int done;	 /* the compute role's merge-order counter */
	int split[MK_GAR_ROLES]; /* the split calls run with (adaptive controller's) */
	unsigned int landed[MK_RING_MAX_RANKS]; /* [slot]: call number whose block landed there */
	unsigned long long busy[MK_GAR_ROLES];	/* ns worked per role in this call */
	unsigned long long t_start;		/* first CTA past the entry (global timer) */
	struct mk_gar_ctl ctl;			/* the adaptive controller's search */
};

struct mk_ring_launch {
	struct mk_attn_args attn; /* the compute role: planned steps, gates, counters */
	const void *k, *v;	  /* my block (the caller's K and V) */
	uint64_t blk;		  /* bytes of K (and of V) */
	uint64_t kv_off;	  /* heap offset of my published K (V follows) */
	uint64_t land_off;	  /* heap offset of the landing slots (2 blk each) */
	uint64_t chunk;		  /* bytes per put to another node */
	int nnodes, node, nlocal, local;
	int adaptive;
	struct mk_gar_split split;		/* the static split and the controller's bounds */
	struct mk_ring_flags *flags;		/* mine */
	const struct mk_ring_flags *lead;	/* the node leader's: its split drives us all */
	unsigned int *peer_calls[MK_MAX_LOCAL]; /* node peers' call counters (mine at local) */
	unsigned long long *seen;  /* [2 nnodes]: arrivals consumed, kv then free words */
	const int *remote;	   /* device [nnodes]: rank of my local index on node n */
	uint32_t sig_kv, sig_free; /* first word of each group (mk_ring_sig_*) */
	struct mk_dev_comm dc;
};

/* Raise both kernels' shared-memory limit and load them (once per device). 0 or -EIO. */
int mk_ring_prepare(void);

/* Enqueue the fused kernel on `stream` (cooperative launch of `ctas` CTAs: the split's sum), with
 * the role's tensor maps (Q, my K and V). 0, -EINVAL or -EIO. */
int mk_ring_launch(const struct mk_ring_launch *l, const struct mk_attn_tmaps *maps,
		   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_RING_ATTENTION_H */
