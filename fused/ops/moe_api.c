// SPDX-License-Identifier: Apache-2.0
/*
 * mkMoeLayoutSize, mkMoeDispatchGemm, mkMoeGemmCombine: argument checks, the per-comm state, the
 * capacity rule, the path choice, and the one conversion from negative errno to ncclResult_t
 * with a WARN that says what failed and why.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fused/gemm/gemm.h"
#include "fused/ops/moe.h"
#include "fused/runtime/comm.h"
#include "mkernel.h"
#include "tuner/policy.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/compiler.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/param.h"
#include "mk/result.h"

MK_PARAM_DECLARE_INT(moe_fused); /* moe_params.c */

static pthread_once_t moe_once = PTHREAD_ONCE_INIT;

static void moe_log_init(void)
{
	mk_log_set_sink(NULL);
}

static void moe_state_free(struct mk_comm *c, void *state)
{
	struct mk_moe_state *st = state;

	cudaFree(st->d_cnt);
	cudaFree(st->d_send);
	cudaFree(st->d_recv);
	cudaFree(st->d_rows);
	cudaFree(st->d_gather);
	cudaFree(st->d_ctl);
	cudaFreeHost(st->h_idx);
	cudaFreeHost(st->h_cnt);
	cudaFreeHost(st->h_gather);
	cudaFreeHost(st->h_lay);
	mk_comm_heap_free(c, st->ws);
	free(st);
}

/* Raise the fused kernels' shared-memory limit and load them at mkCommInit: with lazy module
 * loading, a first launch while a peer's kernel waits for this rank could stall it. */
static int moe_comm_init(struct mk_comm *c)
{
	(void)c;
	if (!mk_gemm_device_ok())
		return 0;
	return mk_moe_dispatch_prepare() == 0 && mk_moe_combine_prepare() == 0 ? 0 : -EIO;
}

MK_COMM_OP(moe, .comm_init = moe_comm_init, .state_free = moe_state_free);

/* This comm's state, made by the first call; NULL when out of memory. */
static struct mk_moe_state *moe_state(struct mk_comm *c)
{
	struct mk_moe_state *st = mk_comm_op_get(&c->op_slots, &mk_comm_op_moe);

	if (st != NULL)
		return st;
	st = calloc(1, sizeof(*st));
	if (st != NULL && mk_comm_op_put(&c->op_slots, &mk_comm_op_moe, st) != 0) {
		free(st);
		st = NULL;
	}
	return st;
}

/* NULL when the comm and config can run a MoE op (then *g is filled), else the reason. */
static const char *moe_why_invalid(const mkMoeConfig_t *cfg, mkComm_t comm, struct mk_moe_geom *g)
{
	const char *why = NULL;
	int dev = -1;

	if (comm == NULL || cfg == NULL)
		return "NULL comm or config";
	if (comm->magic != MK_COMM_MAGIC)
		return "comm is not one mkCommInit made, or it was destroyed";
	if (cfg->type != ncclBfloat16)
		return "type must be ncclBfloat16";
	if (cfg->wLayout != mkLayoutRowMajorKN && cfg->wLayout != mkLayoutRowMajorNK)
		return "unknown weight layout";
	if (cudaGetDevice(&dev) != cudaSuccess || dev != comm->cuda_dev)
		return "the comm belongs to another CUDA device than the current one";
	if (mk_moe_geom_init(g, comm->nranks, comm->rank, comm->topo.nnodes, comm->topo.nlocal,
			     comm->topo.node, comm->topo.local_rank, cfg->numExperts, cfg->topk,
			     cfg->hidden, cfg->inter, cfg->maxTokensPerRank, cfg->maxRecv,
			     cfg->wLayout == mkLayoutRowMajorNK, &why))
		return why;
	return NULL;
}

static int moe_capturing(cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return cap != cudaStreamCaptureStatusNone;
}

static ncclResult_t moe_refuse(const char *op, ncclResult_t r, const char *what)
{
	MK_WARN("%s: %s; nothing launched", op, what);
	return r;
}

static ncclResult_t moe_failed(const char *op, int rc)
{
	MK_WARN("%s failed: %s", op, mk_strerror(rc));
	return mk_result_api(rc);
}

/* The path that filled a layout, 0 when this comm does not know it. */
static int moe_path_of(const struct mk_moe_state *st, const void *layout)
{
	for (size_t i = 0; i < MK_ARRAY_SIZE(st->filled); i++)
		if (st->filled[i].layout == layout)
			return st->filled[i].path;
	return 0;
}

static void moe_path_set(struct mk_moe_state *st, const void *layout, int path)
{
	size_t i;

	for (i = 0; i < MK_ARRAY_SIZE(st->filled) - 1; i++)
		if (st->filled[i].layout == layout)
			break;
	memmove(&st->filled[1], &st->filled[0], i * sizeof(st->filled[0]));
	st->filled[0].layout = layout;
	st->filled[0].path = path;
}

/* NULL when the fused path takes this call (rules, knob, alignment, cost model), else why not. */
static const char *moe_why_unfused(struct mk_comm *c, const struct mk_moe_geom *g, int op,
				   const void *in, const void *w, const void *out)
{
	static __thread char why[200];
	const int force = (int)mk_param_moe_fused();
	struct mk_policy_sm_split ps;
	const char *r;

	if (force == 0)
		return "MKERNEL_MOE_FUSED=0";
	r = mk_moe_fused_why_not(c, g);
	if (r != NULL)
		return r;
	if ((uintptr_t)in % 16 || (uintptr_t)w % 16 || (uintptr_t)out % 16)
		return "a bf16 buffer is not 16-byte aligned";
	if (force > 0)
		return NULL;
	if (mk_moe_policy(c, g, op, &ps) != 0)
		return "the policy engine has no split for this GPU share (fewer than 8 SMs)";
	if (!ps.fuse) {
		snprintf(why, sizeof(why),
			 "the cost model expects the unfused path to win (%.0f us against %.0f us "
			 "fused; MKERNEL_MOE_FUSED=1 forces the fused kernels)",
			 ps.unfused_us, ps.fused_us);
		return why;
	}
	return NULL;
}

MK_API ncclResult_t mkMoeLayoutSize(const mkMoeConfig_t *cfg, mkComm_t comm, size_t *bytes)
{
	struct mk_moe_geom g;
	struct mk_moe_lmap m;
	const char *why;

	pthread_once(&moe_once, moe_log_init);
	if (bytes == NULL)
		return moe_refuse("mkMoeLayoutSize", ncclInvalidArgument, "NULL bytes");
	why = moe_why_invalid(cfg, comm, &g);
	if (why != NULL)
		return moe_refuse("mkMoeLayoutSize", ncclInvalidArgument, why);
	mk_moe_lmap_init(&g, &m);
	*bytes = m.bytes;
	return ncclSuccess;
}

/* Pointer rules shared by both directions: element alignment, the layout 16-byte aligned. */
static const char *moe_why_misaligned(const void *rows_in, const void *w, const void *rows_out,
				      const void *layout)
{
	if ((uintptr_t)rows_in % 2 || (uintptr_t)w % 2 || (uintptr_t)rows_out % 2)
		return "bf16 buffers must be 2-byte aligned";
	if ((uintptr_t)layout % 16)
		return "layout must be 16-byte aligned";
	return NULL;
}

/* The counts read on the host: the refusals of the capacity rule and of bad expert ids. */
static ncclResult_t moe_counts(const char *op, struct mk_comm *comm, struct mk_moe_state *st,
			       const struct mk_moe_geom *g, const struct mk_moe_call *a,
			       cudaStream_t stream)
{
	struct mk_moe_verdict v;
	int rc = mk_moe_host_counts(comm, st, g, a, stream, &v);

	if (rc == -EINVAL) {
		MK_WARN("%s: expert id %d of token %d, slot %d on rank %d is outside [-1, %d); no "
			"token moved on any rank",
			op, v.bad_id, v.bad_pair / g->topk, v.bad_pair % g->topk, v.bad_rank,
			g->ne);
		return ncclInvalidArgument;
	}
	if (rc == -EOVERFLOW) {
		MK_WARN("%s: a rank would receive %d (token, expert) rows but maxRecv is %d: raise "
			"maxRecv to at least %d; no token moved on any rank",
			op, v.needed, g->max_recv, v.needed);
		return ncclInvalidUsage;
	}
	return rc ? moe_failed(op, rc) : ncclSuccess;
}

static const char moe_capture_host[] =
	"under CUDA-graph capture, but this call must read counts on the host (the unfused path, "
	"or maxRecv below the worst case)";

MK_API ncclResult_t mkMoeDispatchGemm(const void *x, const int *topkIdx, const float *topkWeight,
				      const void *wUp, void *out, void *layout, size_t numTokens,
				      const mkMoeConfig_t *cfg, mkComm_t comm, cudaStream_t stream)
{
	static const char op[] = "mkMoeDispatchGemm";
	struct mk_moe_call a = { 0 };
	struct mk_moe_state *st;
	struct mk_moe_geom g;
	const char *why, *unfused;
	int rc, capturing, counted = 0;
	ncclResult_t r;

	pthread_once(&moe_once, moe_log_init);
	why = moe_why_invalid(cfg, comm, &g);
	if (why == NULL &&
	    (wUp == NULL || out == NULL || layout == NULL ||
	     (numTokens > 0 && (x == NULL || topkIdx == NULL || topkWeight == NULL))))
		why = "NULL x, topkIdx, topkWeight, wUp, out or layout";
	if (why == NULL && numTokens > (size_t)g.max_tokens)
		why = "numTokens above maxTokensPerRank";
	if (why == NULL && ((uintptr_t)topkIdx % 4 || (uintptr_t)topkWeight % 4))
		why = "topkIdx and topkWeight must be 4-byte aligned";
	if (why == NULL)
		why = moe_why_misaligned(x, wUp, out, layout);
	if (why != NULL)
		return moe_refuse(op, ncclInvalidArgument, why);
	st = moe_state(comm);
	if (st == NULL)
		return moe_failed(op, -ENOMEM);
	a.x = x;
	a.topk_idx = topkIdx;
	a.topk_w = topkWeight;
	a.w = wUp;
	a.out = out;
	a.layout = layout;
	a.ntok = (int)numTokens;
	capturing = moe_capturing(stream);
	unfused = moe_why_unfused(comm, &g, MK_FUSED_MOE_DISPATCH, x, wUp, out);
	if (capturing && (unfused != NULL || mk_moe_worst_recv(&g) > g.max_recv))
		return moe_refuse(op, ncclInvalidUsage, moe_capture_host);
	/* The capacity rule: below the worst case the counts are read on the host first. */
	if (unfused != NULL || mk_moe_worst_recv(&g) > g.max_recv) {
		r = moe_counts(op, comm, st, &g, &a, stream);
		if (r != ncclSuccess)
			return r;
		counted = 1;
	}
	if (unfused == NULL) {
		rc = mk_moe_fused_workspace(comm, st, &g, stream);
		if (rc == -EAGAIN)
			return moe_refuse(
				op, ncclInvalidUsage,
				"the first call of this shape sets up the fused workspace "
				"(collective, synchronising): make one before capturing");
		if (rc == -ENOMEM)
			unfused = "the symmetric heap is too small for the fused workspace";
		else if (rc)
			return moe_failed(op, rc);
	}
	if (unfused == NULL) {
		rc = mk_moe_fused_dispatch(comm, st, &g, &a, stream);
		if (rc)
			return moe_failed(op, rc);
		moe_path_set(st, layout, MK_MOE_PATH_FUSED);
		return ncclSuccess;
	}
	if (capturing)
		return moe_refuse(op, ncclInvalidUsage, moe_capture_host);
	if (!counted) {
		r = moe_counts(op, comm, st, &g, &a, stream);
		if (r != ncclSuccess)
			return r;
	}
	MK_INFO(MK_SUBSYS_INIT, "%s(tokens %d, experts %d, top-%d, H %d, I %d): unfused path: %s",
		op, a.ntok, g.ne, g.topk, g.hidden, g.inter, unfused);
	rc = mk_moe_unfused_dispatch(comm, st, &g, &a, stream);
	if (rc)
		return moe_failed(op, rc);
	moe_path_set(st, layout, MK_MOE_PATH_UNFUSED);
	return ncclSuccess;
}

/* The path of the dispatch that filled `layout`: remembered, else read from its header. */
static int moe_layout_path(struct mk_comm *comm, struct mk_moe_state *st,
			   const struct mk_moe_geom *g, const void *layout, int capturing)
{
	struct mk_moe_lmap m;
	struct mk_moe_lhdr hdr;
	int path = moe_path_of(st, layout);

	if (path != 0 || capturing)
		return path;
	mk_moe_lmap_init(g, &m);
	if (cudaMemcpy(&hdr, (const char *)layout + m.hdr, sizeof(hdr), cudaMemcpyDeviceToHost) !=
	    cudaSuccess)
		return 0;
	(void)comm;
	return hdr.path == MK_MOE_PATH_FUSED || hdr.path == MK_MOE_PATH_UNFUSED ? hdr.path : 0;
}

MK_API ncclResult_t mkMoeGemmCombine(const void *h, const void *wDown, void *y, const void *layout,
				     const mkMoeConfig_t *cfg, mkComm_t comm, cudaStream_t stream)
{
	static const char op[] = "mkMoeGemmCombine";
	struct mk_moe_call a = { 0 };
	struct mk_moe_state *st;
	struct mk_moe_geom g;
	const char *why;
	int rc, path, capturing;

	pthread_once(&moe_once, moe_log_init);
	why = moe_why_invalid(cfg, comm, &g);
	if (why == NULL && (h == NULL || wDown == NULL || y == NULL || layout == NULL))
		why = "NULL h, wDown, y or layout";
	if (why == NULL)
		why = moe_why_misaligned(h, wDown, y, layout);
	if (why != NULL)
		return moe_refuse(op, ncclInvalidArgument, why);
	st = moe_state(comm);
	if (st == NULL)
		return moe_failed(op, -ENOMEM);
	a.h = h;
	a.w = wDown;
	a.out = y;
	a.layout = (void *)layout;
	capturing = moe_capturing(stream);
	path = moe_layout_path(comm, st, &g, layout, capturing);
	if (path == 0)
		return moe_refuse(op, capturing ? ncclInvalidUsage : ncclInvalidArgument,
				  "layout was not filled by mkMoeDispatchGemm on this comm");
	if (path == MK_MOE_PATH_FUSED) {
		/* Its workspace holds what the dispatch left for this combine. */
		if (st->ws == NULL || !mk_moe_same_exchange(&st->ws_geom, &g))
			return moe_refuse(
				op, ncclInvalidUsage,
				"the fused dispatch's workspace was replaced by a call of "
				"another shape since");
		if ((uintptr_t)h % 16 || (uintptr_t)wDown % 16 || (uintptr_t)y % 16)
			return moe_refuse(op, ncclInvalidArgument,
					  "the dispatch took the fused path: its combine needs "
					  "16-byte aligned h, wDown and y");
		rc = mk_moe_fused_combine(comm, st, &g, &a, stream);
		return rc ? moe_failed(op, rc) : ncclSuccess;
	}
	if (capturing)
		return moe_refuse(op, ncclInvalidUsage, moe_capture_host);
	MK_INFO(MK_SUBSYS_INIT,
		"%s(experts %d, top-%d, H %d, I %d): unfused path (as its dispatch)", op, g.ne,
		g.topk, g.hidden, g.inter);
	rc = mk_moe_unfused_combine(comm, st, &g, &a, stream);
	return rc ? moe_failed(op, rc) : ncclSuccess;
}
