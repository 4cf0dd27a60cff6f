/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkGemmAllReduce's pieces as they see each other: the API and path choice
 * (gemm_allreduce_api.c), the fused kernel's memory and launch (gemm_allreduce_mem.c), the
 * unfused path (gemm_allreduce_fallback.c) and the fused kernel (gemm_allreduce.cu): one
 * persistent cooperative kernel per call, CTAs in the roles of gemm_allreduce_plan.h.
 * My slice is the tile rows tm with tm % nlocal == my local rank; with several nodes the same
 * local rank of every node owns the same slice.
 *   compute: the GEMM engine, my slice's tiles first, each tile stored into my partial W in the
 *            symmetric heap, then its ready flag raised;
 *   intra:   (several ranks per node) per tile of my slice, wait for every node peer's ready
 *            flag and add their W tiles in fp32 through the CUDA IPC maps; one node: into my R
 *            and C, then the final flag; several nodes: the node sum back into my W;
 *   send:    (several nodes) per tile row of my slice once it is summed, one put_signal to the
 *            same local rank of every other node, into its landing area for my node;
 *   reduce:  (several nodes) per tile of my slice, wait for the other nodes' rows, add them to
 *            my node sum, store into C (and into R with node peers, then the final flag);
 *   publish: (several ranks per node) copy the node peers' R tiles into C once final.
 * Every CTA starts in one role and then takes the later roles' work in this order (tickets),
 * so every piece of work is taken by a CTA that only waits for earlier roles.
 * Flags only grow: a call waits for count + 1 and the last CTA out stores the new count, so
 * CUDA-graph replays stay in step; signals across nodes are compared with what earlier calls
 * consumed (`seen`). A call starts only after every node peer and every same-local-rank peer on
 * the other nodes finished the previous one.
 *
 * The one-shot path (gemm_allreduce_oneshot.cu, decode sizes): the GEMM by the gemm op's path
 * choice into my partial, then one kernel that exchanges partials with flags packed in the data
 * (LL lines of 16 bytes: 8 of data, the call's epoch twice), so a step costs one write and one
 * poll: every rank writes its partial as LL lines into its own heap and reads its node peers'
 * through the mapped heaps, summing in fp32. One node: every rank sums every line into C. Several
 * nodes: every rank sums its 1/G slice of lines, puts it to its local rank on every other node
 * (one put per node), adds what the other nodes put, and the node's final slices are gathered
 * the same one-shot way. Buffers of consecutive calls alternate (parity of the epoch): a rank
 * can only be one call ahead of a peer, since a call needs every peer's contribution of it.
 */
#ifndef MK_FUSED_OPS_GEMM_ALLREDUCE_H
#define MK_FUSED_OPS_GEMM_ALLREDUCE_H

#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "fused/gemm/gemm.h"
#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/runtime/dev_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ticket counters: one per role after compute, then publish. */
enum { MK_GAR_T_INTRA, MK_GAR_T_SEND, MK_GAR_T_REDUCE, MK_GAR_T_PUBLISH, MK_GAR_TICKETS };

/* Per-CTA timestamps (ns, GPU global timer) when tracing: start, entry passed, then the end of
 * compute, intra, send, reduce and publish, and the exit. */
#define MK_GAR_TRACE_WORDS 8

/* Workspace words (symmetric heap unless noted; zeroed per shape). */
struct mk_gar_ws_dev {
	uint16_t *w[MK_MAX_LOCAL]; /* node peers' bf16 partial buffers (mine at local rank) */
	uint16_t *r[MK_MAX_LOCAL]; /* node peers' bf16 result buffers (several ranks per node) */
	unsigned int *ready[MK_MAX_LOCAL];	/* per tile: partial stored (the engine's flag) */
	unsigned int *final[MK_MAX_LOCAL];	/* per tile: owner's result stored */
	unsigned int *calls;			/* my completed calls on this workspace */
	unsigned int *peer_calls[MK_MAX_LOCAL]; /* node peers' (mine at my local rank) */
	unsigned int *exits;			/* CTAs that left the current call */
	unsigned int *tickets;			/* [MK_GAR_TICKETS] */
	unsigned int *row_done;			/* per row of my slice: tiles summed, all calls */
	int *split; /* [MK_GAR_ROLES]: the split calls run with (the node leader's words) */
	unsigned long long *busy;    /* [MK_GAR_ROLES]: ns worked in the current call */
	unsigned long long *t_start; /* first CTA past the entry wait (global timer) */
	struct mk_gar_ctl *ctl;	     /* the adaptive controller's search */
	/* across nodes */
	uint64_t w_off;		  /* heap offset of my W */
	uint64_t land_off;	  /* heap offset of the landing area: (nnodes - 1) x my slice */
	const int *remote;	  /* device [nnodes]: rank of my local rank on node n */
	unsigned long long *seen; /* device [nsignals]: arrivals consumed per signal word */
	unsigned int *total;	  /* device: my completed calls on this comm, all shapes */
	uint32_t sig_done;	  /* signal word of "node n finished a call": sig_done + n */
	uint32_t sig_rows;	  /* row i of my slice from node n: sig_rows + n * rows + i */
	int *error;		  /* comm's error word (mapped host) */
	uint64_t timeout_ns;
};

struct mk_gar_launch {
	const void *a, *b;
	void *c;
	int m, n, k, b_layout;
	int local_rank, nlocal, node, nnodes;
	int rows;     /* tile rows in my slice */
	int adaptive; /* 1: the split comes from ws.split and the controller updates it */
	struct mk_gar_split split; /* starting split (static) and the controller's bounds */
	const int *order;	   /* compute tile order (device), my slice first */
	unsigned long long *trace; /* device [CTAs][MK_GAR_TRACE_WORDS], or NULL */
	struct mk_gar_ws_dev ws;
	struct mk_dev_comm dc; /* puts and signals to other nodes */
};

/* ---- the one-shot path ---- */

/* Where the one-shot kernel finds its buffers (heap pointers and offsets; gemm_allreduce_mem.c). */
struct mk_gar1_ws_dev {
	const uint16_t *part; /* my bf16 partial, `lines` x 4 elements (the GEMM's output) */
	/* node peers' LL copies of their partial, [2 parities][lines] (mine at my local rank) */
	uint4 *ll[MK_MAX_LOCAL];
	/* node peers' LL copies of their final slice, [2][slice_lines] (several nodes) */
	uint4 *llf[MK_MAX_LOCAL];
	uint16_t *nsum;	      /* my slice summed over my node, [2][slice_lines x 4] (put source) */
	uint64_t nsum_off;    /* its heap offset */
	uint64_t land_off;    /* heap offset of [2][nnodes - 1][slice_lines x 4]: what arrives */
	unsigned int *calls;  /* my completed calls (the epoch of the next is calls + 1) */
	unsigned int *arrive; /* CTAs that wrote their part of my node-sum slice */
	unsigned int *exits;  /* CTAs that left the current call */
	const int *remote;    /* device [nnodes]: rank of my local rank on node n */
	unsigned long long *seen; /* arrivals consumed per signal word (the comm's) */
	uint32_t sig_base;	  /* node n's put to me raises signal sig_base + n */
	int *error;
	uint64_t timeout_ns;
};

struct mk_gar1_launch {
	void *c;	 /* the result, bf16, M x N row-major */
	long long elems; /* M x N */
	int lines;	 /* ceil(elems / 4) */
	int slice_lines; /* the largest slice: ceil(lines / nlocal) */
	int local_rank, nlocal, node, nnodes;
	struct mk_gar1_ws_dev ws;
	struct mk_dev_comm dc; /* puts and signals to other nodes */
};

/* Enqueue the one-shot kernel (cooperative, `grid` CTAs of MK_GAR1_THREADS). 0 or -EIO. */
int mk_gar1_launch(const struct mk_gar1_launch *l, int grid, cudaStream_t stream);

struct mk_comm;
struct mk_comm_op;

/* Benchmarks and tests: record per-CTA timestamps in later calls (on = 1), and read the last
 * call's ([ctas][MK_GAR_TRACE_WORDS], ctas = the grid). 0 or -errno. */
int mk_gar_trace(struct mk_comm *c, int on);
int mk_gar_trace_read(struct mk_comm *c, unsigned long long *out, int *ctas);
/* The split the next call of the current shape starts from (the adaptive controller's), and
 * the controller's state when `ctl` is not NULL. */
int mk_gar_split_now(struct mk_comm *c, int out[MK_GAR_ROLES], struct mk_gar_ctl *ctl);

/* gemm_allreduce_mem.c: the op's record on a comm (its state's slot). */
extern const struct mk_comm_op mk_comm_op_gemm_allreduce;

/*
 * gemm_allreduce_mem.c: run the fused kernel with split *sp (adaptive: the controller updates
 * it), setting up this shape's memory first when it is new (collective). 0, -ENOMEM when the
 * symmetric heap is too small for the shape (nothing launched: take the unfused path), -errno.
 */
int mk_gar_fused(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
		 int b_layout, const struct mk_gar_split *sp, int adaptive, cudaStream_t stream);
/* 1 when the memory of output shape m x n is set up (a call needs no collective set-up). */
int mk_gar_shape_ready(const struct mk_comm *c, int m, int n);

/*
 * gemm_allreduce_mem.c: the one-shot path: the GEMM (gemm op's choice) into my partial, then the
 * exchange kernel. The first call of an output shape sets up its memory (collective,
 * host-synchronising). 0, -ENOMEM (heap too small: WARNed) or -errno.
 */
int mk_gar_oneshot(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
		   int b_layout, cudaStream_t stream);
/* 1 when the one-shot memory of output shape m x n is set up. */
int mk_gar_oneshot_ready(const struct mk_comm *c, int m, int n);

/*
 * gemm_allreduce_fallback.c: the GEMM (the gemm op's path choice for bf16), then ncclAllReduce
 * in place on the stream; with one rank the GEMM alone. 0 or -errno.
 */
int mk_gar_unfused(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
		   int b_layout, ncclDataType_t type, cudaStream_t stream);

/* The path the last mkGemmAllReduce of this thread took (enum mk_policy_path, -1 before any)
 * and why (tests and benchmarks). */
int mk_gar_last_path(const char **why);

/* Raise the kernel's shared-memory limit and load it (call once per device). 0 or -EIO. */
int mk_gar_prepare(void);

/* Enqueue the fused kernel on `stream` (cooperative launch). 0, -EINVAL, -ENOSYS or -EIO. */
int mk_gar_launch(const struct mk_gar_launch *l, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_ALLREDUCE_H */
