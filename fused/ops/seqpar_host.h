/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host side shared by mkGemmReduceScatter (gemm_rs_*.c) and mkAllGatherGemm (ag_gemm_*.c):
 * argument checks, the path choice (what keeps a call off the fused kernel, with the reason
 * logged at INFO) and the path the last call took, for tests (seqpar_api.c); the op's state on
 * the comm (signal window, `seen`, the rank of my local rank on every node), one shape's
 * workspace at a time (collective, host-synchronising), traces and the adaptive split, for
 * benchmarks (seqpar_mem.c).
 */
#ifndef MK_FUSED_OPS_SEQPAR_HOST_H
#define MK_FUSED_OPS_SEQPAR_HOST_H

#include <stddef.h>

#include "fused/ops/seqpar.h"
#include "fused/runtime/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mk_sp_op { MK_SP_GRS = 0, MK_SP_AGG = 1, MK_SP_OPS = 2 };

/* Workspace words of a shape (u32 offsets unless _bytes): the common per-call words, the op's
 * `extra` words, then the controller's (8-byte aligned). */
struct mk_sp_words {
	size_t calls, exits, tickets, split, extra;
	size_t busy_bytes, t_start_bytes, ctl_bytes, bytes;
};

struct mk_sp_shape {
	int m, n, k; /* the key (k = 0 when the workspace does not depend on it) */
	struct mk_sp_geom geom;
	void *mem[2]; /* heap pieces (op's meaning), NULL if unused */
	void *flags;  /* the words, in the heap */
	struct mk_sp_words words;
	int *order_d;	      /* compute order (device) */
	int *arrival_d;	      /* arrival order (device; all-gather) */
	unsigned int *want_d; /* chunks per tile row (device; all-gather) */
};

/* the all-gather's unfused pipeline: fork/join + MK_AGG_PIPE_PIECES (ag_gemm_fallback.c) */
#define MK_SP_PIPE_EVENTS 5

struct mk_sp_state {
	/* device, made with the first shape */
	unsigned long long *seen; /* [window words + 1]: consumed arrivals, then the call total */
	int *remote_d;		  /* [nnodes] */
	unsigned long long *trace;
	int trace_on;
	struct mk_sp_shape *shape;
	int last_path; /* the last call: 1 fused, 0 unfused, -1 none yet */
	char last_why[256];
	/* the all-gather's unfused pipeline (ag_gemm_fallback.c), made at its first use */
	cudaStream_t pipe_stream;
	cudaEvent_t pipe_ev[MK_SP_PIPE_EVENTS]; /* [0] fork and join, [1 + p] piece p in */
	int pipe_nev;
	int pipe_pieces; /* pieces the last unfused call was gathered in; 0: one collective */
	/* the unfused paths' scratch (mk_sp_scratch_alloc), made at its first use */
	cudaMemPool_t scratch_pool;
	unsigned long scratch_allocs[2]; /* scratch taken from [0] the default pool, [1] ours */
};

/*
 * Stream-ordered scratch for an unfused path (GEMM+RS's partial product, the all-gather's
 * gathered A or staging). From the op's own pool, which keeps its memory between calls: the
 * device's default pool releases it at every synchronisation (release threshold 0), so each
 * call after one would map its scratch again. The pool is made at the first call outside graph
 * capture; before it (or when st is NULL) the scratch comes from the default pool. Under capture
 * the allocation becomes a node of the graph either way. 0 or -ENOMEM; free with
 * mk_sp_scratch_free on the same stream.
 */
int mk_sp_scratch_alloc(struct mk_sp_state *st, void **p, size_t bytes, cudaStream_t stream);
int mk_sp_scratch_free(void *p, cudaStream_t stream);

/* "mkGemmReduceScatter" or "mkAllGatherGemm". */
const char *mk_sp_name(int op);

/* The op's state on the comm, made at its first call (its slot on the comm: comm_ops.h; host
 * memory only, so a call under graph capture may make it). 0, -ENOMEM or -ENOSPC (no slot). */
int mk_sp_state_get(struct mk_comm *c, int op, struct mk_sp_state **out);
/* The op's state, or NULL before its first call. */
struct mk_sp_state *mk_sp_state_of(const struct mk_comm *c, int op);
/* Signal words each op owns (a quarter of the comm's). */
uint32_t mk_sp_window(const struct mk_comm *c);

/* This rank's share of its GPU's SMs (ranks sharing a GPU split it). */
int mk_sp_share(const struct mk_comm *c);

/* rank_at[w * nlocal + p] = the rank of local rank p on node w (nnodes * nlocal entries). */
void mk_sp_rank_at(const struct mk_comm *c, int *rank_at);

struct mk_sp_words mk_sp_words_of(size_t extra);

/*
 * The op's state and its workspace for (m, n, k) (k = 0 when the workspace does not depend on
 * it). A new shape replaces the current one: the device drains and every rank passes a barrier
 * (peers' kernels may still read the old one), then `fill` makes the op's pieces (the geometry is
 * set), `prepare` readies the kernel, the words are zeroed, the adaptive split starts from `sp`
 * and every rank passes a barrier again. 0, -ENOMEM (the heap is too small: fill said so), -EIO.
 */
int mk_sp_shape_get(struct mk_comm *c, int op, int m, int n, int k,
		    int (*fill)(struct mk_comm *c, struct mk_sp_shape *s), int (*prepare)(void),
		    const struct mk_gar_split *sp, struct mk_sp_state **st, struct mk_sp_shape **s);
/* A heap piece of the shape (collective); -ENOMEM when the heap is too small. */
int mk_sp_shape_mem(struct mk_comm *c, size_t bytes, void **out);
/* Copy `bytes` of a host array into a new device array of the shape. 0, -ENOMEM or -EIO. */
int mk_sp_shape_upload(const void *host, size_t bytes, void **dev);

/* The address in node peer p's mapped heap of what `mine` is in my heap. */
void *mk_sp_at_peer(const struct mk_comm *c, int p, const void *mine);

/* Fill the launch fields both kernels share from the state and the current shape. */
void mk_sp_common_fill(struct mk_comm *c, int op, const struct mk_sp_state *st,
		       const struct mk_sp_shape *s, const struct mk_gar_split *sp, int adaptive,
		       struct mk_sp_common *cm);

/*
 * Bad arguments, or NULL: the rules of mkGemmAllReduce (NULL comm or buffers, a comm that
 * mkCommInit did not make or that was destroyed, sizes outside [1, INT_MAX], another type, an
 * unknown layout, buffers misaligned for their element size, a comm of another device) plus
 * M % nranks == 0. `opt` is an optional buffer (NULL allowed) checked for alignment.
 */
const char *mk_sp_bad_args(const struct mk_comm *c, const void *a, const void *b, const void *cc,
			   const void *opt, size_t m, size_t n, size_t k, ncclDataType_t type,
			   mkLayout_t layout);

/* One call's arguments, as the API got them. */
struct mk_sp_args {
	const void *a, *b; /* A (or aShard) and B */
	void *c;
	void *gathered; /* aGathered (all-gather), or NULL */
	int m, n, k, b_layout;
	ncclDataType_t type;
};

/* The unfused paths' GEMM type and element size for the call's type (bf16, fp16 or fp32). */
static inline cudaDataType_t mk_sp_cuda_type(ncclDataType_t t)
{
	return t == ncclBfloat16 ? CUDA_R_16BF : t == ncclFloat16 ? CUDA_R_16F : CUDA_R_32F;
}

static inline size_t mk_sp_esz(ncclDataType_t t)
{
	return t == ncclFloat32 ? 4 : 2;
}

/* What differs between the two ops' API functions. */
struct mk_sp_op_ops {
	const char *unfused;	/* "cuBLAS + ncclReduceScatter", ... */
	int64_t (*force)(void); /* the op's MKERNEL_*_FUSED knob */
	int shape_k;		/* 1: the workspace depends on K */
	int alone_direct;	/* 1: one rank alone keeps no workspace (runs the engine as is) */
	/* the fused kernel (0, -ENOMEM when the heap is too small, or -errno) */
	int (*fused)(struct mk_comm *c, const struct mk_sp_args *x, const struct mk_gar_split *sp,
		     int adaptive, cudaStream_t stream);
	/* cuBLAS and NCCL on the stream (0 or -errno) */
	int (*unfused_run)(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream);
};

/*
 * The API call after its argument checks: the path choice (mk_sp_why_not, mk_sp_why_not_now)
 * with the engine reading `a_engine`, the fused kernel or the unfused path with the reason at
 * INFO, the path recorded for mk_sp_last_path, errors converted once.
 */
ncclResult_t mk_sp_run(struct mk_comm *c, int op, const struct mk_sp_op_ops *ops,
		       const struct mk_sp_args *x, const void *a_engine, cudaStream_t stream);

/*
 * The path the op's last call on this comm took: 1 fused, 0 unfused (why says why), -1 none
 * yet or no state. For tests: a silent fallback must not pass as the fused path.
 */
int mk_sp_last_path(struct mk_comm *c, int op, char *why, size_t len);
/* Pieces the op's last unfused call was pipelined in (0: one collective), -1 no state. */
int mk_sp_last_pipe_pieces(struct mk_comm *c, int op);
/* Scratch allocations of the op's unfused calls so far: [0] default pool, [1] the op's own
 * (mk_sp_scratch_alloc). -1 without state. For tests: a call outside capture uses the op's. */
int mk_sp_scratch_counts(struct mk_comm *c, int op, unsigned long counts[2]);

/* Benchmarks: record per-CTA timestamps in later calls (on = 1), read the last call's
 * ([ctas][MK_SP_TRACE_WORDS]); the split the next call of the current shape starts from, and
 * the adaptive controller's state when `ctl` is not NULL. */
int mk_sp_trace(struct mk_comm *c, int op, int on);
int mk_sp_trace_read(struct mk_comm *c, int op, unsigned long long *out, int *ctas);
int mk_sp_split_now(struct mk_comm *c, int op, int out[MK_GAR_ROLES], struct mk_gar_ctl *ctl);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_SEQPAR_HOST_H */
