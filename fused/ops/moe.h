/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inside the MoE ops: what the public functions (moe_api.c) share with the unfused path
 * (moe_fallback.c, moe_rows.cu) and the fused path (moe_fused.c, moe_dispatch.cu,
 * moe_combine.cu).
 */
#ifndef MK_FUSED_OPS_MOE_H
#define MK_FUSED_OPS_MOE_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "fused/ops/moe_plan.h"
#include "fused/runtime/dev_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_comm;

/* The fused kernels' argument block (kernel parameter, by value; moe_dev.cuh uses it). */
struct mk_moe_kargs {
	struct mk_dev_comm dc;
	struct mk_moe_geom g;
	struct mk_moe_wmap w;
	struct mk_moe_lmap lm;
	uint64_t ws_off;	/* my workspace's heap offset: the same on every rank */
	char *layout;		/* the caller's layout buffer */
	struct mk_moe_ctl *ctl; /* device memory, this rank only */
	const void *x;		/* dispatch: x */
	const int32_t *topk_idx;
	const float *topk_w;
	void *y; /* combine: y */
	int ntok;
	int ncomm; /* CTAs [0, ncomm) communicate, the others run the grouped GEMM */
	uint32_t sig_count, sig_in, sig_enter, sig_land;
	int16_t rank_at[MK_MOE_FUSED_NODES][MK_MAX_LOCAL];
	int16_t node_of[MK_MOE_FUSED_RANKS];
};

/* One call's arguments, both directions. */
struct mk_moe_call {
	const void *x;		 /* dispatch: bf16 [ntok][hidden] */
	const int32_t *topk_idx; /* dispatch */
	const float *topk_w;	 /* dispatch */
	const void *w;		 /* w_up or w_down: this rank's experts, stacked */
	void *out;		 /* dispatch: bf16 [max_recv][inter]; combine: y */
	const void *h;		 /* combine: bf16 [max_recv][inter] */
	void *layout;		 /* mk_moe_lmap bytes */
	int ntok;		 /* dispatch */
};

/* What a refused call found (filled by the count check; the API words the WARN). */
struct mk_moe_verdict {
	int needed;   /* largest rows any rank needs */
	int bad_rank; /* lowest rank with a bad expert id, -1 none */
	int bad_pair; /* its first bad (token * topk + slot) */
	int bad_id;
};

/* Per-comm state: buffers of the unfused path (grown on demand) and the fused workspace. */
struct mk_moe_state {
	/* unfused path, device */
	int32_t *d_cnt; /* [nranks][cnt_stride]: the all-gathered counts (+ bad, first bad, id) */
	size_t d_cnt_bytes;
	void *d_send, *d_recv, *d_rows; /* exchange buffers and received rows (expert order) */
	size_t d_send_bytes, d_recv_bytes, d_rows_bytes;
	int32_t *d_gather;
	size_t d_gather_bytes;
	/* unfused path, host (pinned) */
	int32_t *h_idx, *h_cnt, *h_gather;
	size_t h_idx_bytes, h_cnt_bytes, h_gather_bytes;
	void *h_lay;
	size_t h_lay_bytes;
	/* fused workspace in the symmetric heap, for one geometry at a time */
	void *ws;
	struct mk_moe_wmap wmap;
	struct mk_moe_geom ws_geom;
	struct mk_moe_ctl *d_ctl; /* device: call numbers and landing totals, for the comm's life */
	/* which path filled a layout (the combine takes the same), most recent first */
	struct {
		const void *layout;
		int path;
	} filled[16];
};

/* Counts on the host: the host-side half of the capacity rule and of the unfused path. Every
 * rank learns every rank's counts (ncclAllGather) and takes the same decision: 0, -EINVAL (a
 * bad expert id somewhere: *v says where), -EOVERFLOW (*v->needed rows needed somewhere). On 0
 * the counts are in st->h_cnt, [nranks][ne + 3]. */
int mk_moe_host_counts(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
		       const struct mk_moe_call *a, cudaStream_t stream, struct mk_moe_verdict *v);

/* The unfused paths (moe_fallback.c; the dispatch after mk_moe_host_counts). 0 or -errno. */
int mk_moe_unfused_dispatch(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			    const struct mk_moe_call *a, cudaStream_t stream);
int mk_moe_unfused_combine(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			   const struct mk_moe_call *a, cudaStream_t stream);

/* The policy engine's answer for op (MK_FUSED_MOE_*) on this comm: split, cost estimates. */
struct mk_policy_sm_split;
int mk_moe_policy(const struct mk_comm *c, const struct mk_moe_geom *g, int op,
		  struct mk_policy_sm_split *ps);
/* This rank's share of its GPU's SMs. */
int mk_moe_share(const struct mk_comm *c);

/* The fused path (moe_fused.c). NULL when this comm and config can take it, else why not. */
const char *mk_moe_fused_why_not(const struct mk_comm *c, const struct mk_moe_geom *g);
/* Workspace for g (the first call of a geometry: collective, synchronises the host; -EAGAIN
 * under CUDA-graph capture, -ENOMEM when the heap is too small, after a WARN). */
int mk_moe_fused_workspace(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			   cudaStream_t stream);
int mk_moe_fused_dispatch(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			  const struct mk_moe_call *a, cudaStream_t stream);
int mk_moe_fused_combine(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			 const struct mk_moe_call *a, cudaStream_t stream);

/* Kernel launchers (moe_dispatch.cu, moe_combine.cu): cooperative, `grid` CTAs. */
struct mk_grouped_args;
struct mk_gemm_tmaps;
int mk_moe_dispatch_launch(const struct mk_moe_kargs *a, const struct mk_grouped_args *ga,
			   const struct mk_gemm_tmaps *maps, int b_nk, int grid,
			   cudaStream_t stream);
int mk_moe_combine_launch(const struct mk_moe_kargs *a, const struct mk_grouped_args *ga,
			  const struct mk_gemm_tmaps *maps, int b_nk, int grid,
			  cudaStream_t stream);
/* Shared-memory limit raised (this also loads the module). 0 or -EIO. */
int mk_moe_dispatch_prepare(void);
int mk_moe_combine_prepare(void);

/* Row kernels of the unfused path (moe_rows.cu). Rows are row_bytes long (even). */
/* dst[r] = src[idx[r]] for r < rows (idx[r] < 0: row left alone). */
int mk_moe_gather_rows(void *dst, const void *src, const int32_t *idx, int rows, size_t row_bytes,
		       cudaStream_t stream);
/* dst[idx[r]] = src[r] for r < rows (idx[r] < 0: skipped). */
int mk_moe_scatter_rows(void *dst, const void *src, const int32_t *idx, int rows, size_t row_bytes,
			cudaStream_t stream);
/* y[t] = sum_j w[t k + j] ret[pos[t k + j]] (fp32 sum, bf16 out), t < the layout's ntok (read
 * on the device); zeros for a token without pairs. */
int mk_moe_weighted_sum(void *y, const void *ret, const void *layout, const struct mk_moe_geom *g,
			cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_MOE_H */
