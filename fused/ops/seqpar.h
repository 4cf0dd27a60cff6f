/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the sequence-parallel kernels (gemm_rs.cu, ag_gemm.cu) share with their host sides: the
 * per-call words of a shape's workspace, the comm-lifetime words, and the launch fields common
 * to both (struct mk_sp_common, the first member of each op's launch). Plain C.
 *
 * Signal words: each op has its own window of the comm's words (reduce-scatter the third
 * quarter, all-gather the last), so calls of different ops never meet:
 *   sig_done + n            node n's peer of my local rank finished a call (all calls);
 *   sig_land + n * nch + c  chunk c from node n landed at me (all calls; `seen` counts the
 *                           arrivals earlier calls consumed).
 */
#ifndef MK_FUSED_OPS_SEQPAR_H
#define MK_FUSED_OPS_SEQPAR_H

#include <stdint.h>

#include "fused/ops/seqpar_plan.h"
#include "fused/runtime/dev_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ticket counters (the all-gather uses all, the reduce-scatter the first three). */
enum { MK_SP_T0, MK_SP_T1, MK_SP_T2, MK_SP_T3, MK_SP_T4, MK_SP_TICKETS };

/* Per-CTA timestamps when tracing (ns, GPU global timer): [0] start, [1] entry passed,
 * [2 .. 6] the end of each stage (up to five), [7] exit. */
#define MK_SP_TRACE_WORDS 8

/* Most nodes the fused kernels add up at once (the reduce role's sources). */
#define MK_SP_MAX_NODES 16

/* Which quarter of the comm's signal words an op owns. */
#define MK_SP_SIG_QUARTER_GRS 2
#define MK_SP_SIG_QUARTER_AGG 3

struct mk_sp_ws {
	/* the shape's workspace: my heap (node peers' at the same offsets); zeroed per shape */
	unsigned int *calls;			/* my completed calls on this workspace */
	unsigned int *peer_calls[MK_MAX_LOCAL]; /* node peers' (mine at my local rank) */
	unsigned int *exits;			/* CTAs that left the current call */
	unsigned int *tickets;			/* [MK_SP_TICKETS] */
	int *split; /* [MK_GAR_ROLES]: the split calls run with (the node leader's words) */
	unsigned long long *busy;    /* [MK_GAR_ROLES]: ns worked in the current call */
	unsigned long long *t_start; /* first CTA past the entry wait */
	struct mk_gar_ctl *ctl;	     /* the adaptive controller's search */
	/* the comm's lifetime (device memory) */
	const int *remote;	  /* [nnodes]: rank of my local rank on node n */
	unsigned long long *seen; /* [words of the window]: arrivals consumed per signal word */
	unsigned int *total;	  /* my completed calls of this op on this comm, all shapes */
	uint32_t sig_base;	  /* first word of the op's window (seen[0]) */
	uint32_t sig_done;
	uint32_t sig_land;
	int *error; /* the comm's error word (mapped host) */
	uint64_t timeout_ns;
};

struct mk_sp_common {
	int local_rank, nlocal, node, nnodes;
	int adaptive;		   /* 1: the split comes from ws.split, the controller updates it */
	struct mk_gar_split split; /* starting split (static) and the controller's bounds */
	struct mk_sp_geom geom;
	unsigned long long *trace; /* device [CTAs][MK_SP_TRACE_WORDS], or NULL */
	struct mk_sp_ws ws;
	struct mk_dev_comm dc; /* puts and signals to other nodes */
};

/* First word of an op's window (fused/ops/signals.h) and the words it needs (done words, then
 * landing words). */
static inline uint32_t mk_sp_sig_base(uint32_t nsignals, int quarter)
{
	return nsignals / 4 * (uint32_t)quarter;
}

static inline uint64_t mk_sp_sig_words(int nnodes, int nch)
{
	return (uint64_t)nnodes * (1 + (uint64_t)nch);
}

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_SEQPAR_H */
