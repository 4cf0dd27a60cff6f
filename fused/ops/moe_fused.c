// SPDX-License-Identifier: Apache-2.0
/*
 * The fused path of the MoE ops on the host: whether this comm and config can take it, the
 * workspace in the symmetric heap (one geometry at a time), the signal words, the SM split, and
 * the launches of moe_dispatch.cu / moe_combine.cu with the grouped GEMM role's arguments.
 *
 * Signal words: the top of the MoE ops' range (fused/ops/signals.h), [end - 2 nranks - 2 nnodes,
 * end):
 * counts from each rank, token chunks from each node, "entered the combine" from each rank,
 * partial chunks from each node. Each only grows; the kernels keep what a call expects in the
 * device control words (struct mk_moe_ctl), which live as long as the comm, so a new workspace
 * does not reset them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fused/gemm/grouped.h"
#include "fused/ops/moe.h"
#include "fused/ops/signals.h"
#include "fused/runtime/comm.h"
#include "tuner/policy.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/err.h"
#include "mk/log.h"

#define MOE_MAX_EXPERTS_FUSED 1024 /* the count phase's shared memory */
#define MOE_MAX_HIDDEN_FUSED  9216 /* fp32 sums per thread in the combine */

static uint32_t moe_sig_base(const struct mk_comm *c)
{
	return mk_sig_moe_end(c->nsignals) - 2 * (uint32_t)c->nranks - 2 * (uint32_t)c->topo.nnodes;
}

const char *mk_moe_fused_why_not(const struct mk_comm *c, const struct mk_moe_geom *g)
{
	if (!mk_gemm_device_ok())
		return "the device is not sm_90";
	if (!c->topo.uniform)
		return "nodes have different numbers of ranks";
	if (c->nranks > MK_MOE_FUSED_RANKS || c->topo.nnodes > MK_MOE_FUSED_NODES ||
	    c->topo.nlocal > MK_MAX_LOCAL)
		return "more than 64 ranks, 16 nodes or 8 ranks per node";
	if (g->ne > MOE_MAX_EXPERTS_FUSED)
		return "more than 1024 experts";
	if (g->hidden % 8 || g->inter % 8)
		return "hidden and inter must be multiples of 8 (16-byte rows, TMA strides)";
	if (g->hidden > MOE_MAX_HIDDEN_FUSED)
		return "hidden above 9216";
	if (mk_sig_eighth(c->nsignals) < 2 * (uint32_t)c->nranks + 2 * (uint32_t)c->topo.nnodes)
		return "too few signal words in the comm";
	return NULL;
}

int mk_moe_fused_workspace(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			   cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	struct mk_moe_wmap w;
	void *ws = NULL;

	if (st->ws != NULL && mk_moe_same_exchange(&st->ws_geom, g))
		return 0;
	if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess)
		(void)cudaGetLastError();
	if (cap != cudaStreamCaptureStatusNone)
		return -EAGAIN;
	mk_moe_wmap_init(g, &w);
	/* Every rank's kernels on the old workspace are done before anyone's offsets move. */
	if (cudaDeviceSynchronize() != cudaSuccess || mk_comm_barrier(c) != 0)
		return -EIO;
	if (st->ws != NULL) {
		mk_comm_heap_free(c, st->ws);
		st->ws = NULL;
	}
	if (st->d_ctl == NULL) {
		if (cudaMalloc((void **)&st->d_ctl, sizeof(*st->d_ctl)) != cudaSuccess ||
		    cudaMemset(st->d_ctl, 0, sizeof(*st->d_ctl)) != cudaSuccess) {
			cudaFree(st->d_ctl);
			st->d_ctl = NULL;
			return -ENOMEM;
		}
	}
	if (mkMemAlloc(c, w.bytes, &ws) != ncclSuccess) {
		MK_WARN("MoE fused path: %zu bytes of symmetric heap needed for %d experts, "
			"top-%d, "
			"hidden %d, %d tokens and %d rows per rank (%zu for the received rows "
			"twice, %zu for the node staging): raise MKERNEL_SYMM_HEAP or "
			"mkConfig_t.heapBytes; taking the unfused path",
			w.bytes, g->ne, g->topk, g->hidden, g->max_tokens, g->max_recv,
			2 * (w.recv_blk - w.recv_x), w.yrows - w.inbound);
		return -ENOMEM;
	}
	/* Zeroed before any peer may write into it (they start after the barrier). */
	if (cudaMemset(ws, 0, w.bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
	    mk_moe_dispatch_prepare() != 0 || mk_moe_combine_prepare() != 0 ||
	    mk_comm_barrier(c) != 0) {
		mk_comm_heap_free(c, ws);
		return -EIO;
	}
	st->ws = ws;
	st->wmap = w;
	st->ws_geom = *g;
	return 0;
}

int mk_moe_policy(const struct mk_comm *c, const struct mk_moe_geom *g, int op,
		  struct mk_policy_sm_split *ps)
{
	struct mk_policy_op_query q;

	memset(&q, 0, sizeof(q));
	q.op = op;
	q.m = (uint64_t)g->max_tokens * g->topk;
	q.n = (uint64_t)g->hidden;
	q.k = (uint64_t)g->inter;
	q.dtype_bytes = 2;
	q.nnodes = c->topo.nnodes;
	q.nranks = c->nranks;
	q.ranks_per_node = c->topo.nlocal;
	q.sms = mk_moe_share(c);
	return mk_policy_sm_split(&q, ps);
}

int mk_moe_share(const struct mk_comm *c)
{
	return c->sms / (c->gpu_share > 0 ? c->gpu_share : 1);
}

/* CTAs of this rank's kernel and how many communicate (the policy engine's split). */
static int moe_split(const struct mk_comm *c, const struct mk_moe_geom *g, int op, int *grid,
		     int *ncomm)
{
	struct mk_policy_sm_split ps;
	const int share = mk_moe_share(c);

	*grid = share;
	if (share < 2)
		return -EINVAL;
	if (mk_moe_policy(c, g, op, &ps) != 0) {
		*ncomm = share / 2;
		return 0;
	}
	*ncomm = share - ps.sms[MK_ROLE_COMPUTE];
	if (*ncomm < 1)
		*ncomm = 1;
	if (*ncomm > share - 1)
		*ncomm = share - 1;
	return 0;
}

static void moe_kargs(const struct mk_comm *c, const struct mk_moe_state *st,
		      const struct mk_moe_geom *g, const struct mk_moe_call *a,
		      struct mk_moe_kargs *k)
{
	const uint32_t base = moe_sig_base(c);

	memset(k, 0, sizeof(*k));
	mk_comm_dev(c, &k->dc);
	k->g = *g;
	k->w = st->wmap;
	mk_moe_lmap_init(g, &k->lm);
	k->ws_off = (uint64_t)((char *)st->ws - c->heap);
	k->layout = (char *)a->layout;
	k->ctl = st->d_ctl;
	k->x = a->x;
	k->topk_idx = a->topk_idx;
	k->topk_w = a->topk_w;
	k->y = a->out;
	k->ntok = a->ntok;
	k->sig_count = base;
	k->sig_in = base + (uint32_t)c->nranks;
	k->sig_enter = k->sig_in + (uint32_t)c->topo.nnodes;
	k->sig_land = k->sig_enter + (uint32_t)c->nranks;
	for (int r = 0; r < c->nranks; r++) {
		k->node_of[r] = (int16_t)c->topo.node_of[r];
		k->rank_at[c->topo.node_of[r]][c->topo.local_of[r]] = (int16_t)r;
	}
}

/* The grouped role's launch: rows of this rank's experts, offsets from the layout. */
static int moe_grouped(const struct mk_moe_geom *g, const void *a_rows, const void *w, void *c_rows,
		       const void *layout, int n, int k, struct mk_grouped_args *ga,
		       struct mk_gemm_tmaps *maps)
{
	struct mk_grouped_launch l;

	memset(&l, 0, sizeof(l));
	l.a = a_rows;
	l.b = w;
	l.c = c_rows;
	l.offsets = (const int *)layout;
	l.num_experts = g->eloc;
	l.max_rows = g->max_recv > 0 ? g->max_recv : 1;
	l.n = n;
	l.k = k;
	l.b_layout = g->w_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN;
	return mk_grouped_prepare(&l, ga, maps);
}

int mk_moe_fused_dispatch(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			  const struct mk_moe_call *a, cudaStream_t stream)
{
	struct mk_moe_kargs k;
	struct mk_grouped_args ga;
	struct mk_gemm_tmaps maps;
	int grid, rc;

	moe_kargs(c, st, g, a, &k);
	if ((rc = moe_split(c, g, MK_FUSED_MOE_DISPATCH, &grid, &k.ncomm)) ||
	    (rc = moe_grouped(g, (char *)st->ws + st->wmap.recv_x, a->w, a->out, a->layout,
			      g->inter, g->hidden, &ga, &maps)))
		return rc;
	ga.row_ready = (const unsigned int *)((char *)st->ws + st->wmap.recv_blk);
	ga.error = k.dc.error;
	ga.timeout_ns = k.dc.timeout_ns;
	MK_INFO(MK_SUBSYS_INIT, "mkMoeDispatchGemm: fused kernel, %d CTAs (%d communicate)", grid,
		k.ncomm);
	return mk_moe_dispatch_launch(&k, &ga, &maps, g->w_nk, grid, stream);
}

int mk_moe_fused_combine(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			 const struct mk_moe_call *a, cudaStream_t stream)
{
	struct mk_moe_kargs k;
	struct mk_grouped_args ga;
	struct mk_gemm_tmaps maps;
	int grid, rc;

	moe_kargs(c, st, g, a, &k);
	if ((rc = moe_split(c, g, MK_FUSED_MOE_COMBINE, &grid, &k.ncomm)) ||
	    (rc = moe_grouped(g, a->h, a->w, (char *)st->ws + st->wmap.yrows, a->layout, g->hidden,
			      g->inter, &ga, &maps)))
		return rc;
	ga.blk_cnt = (unsigned int *)((char *)st->ws + st->wmap.blk_cnt);
	ga.blk_flag = (unsigned int *)((char *)st->ws + st->wmap.y_flag);
	ga.calls = &st->d_ctl->c_calls;
	ga.error = k.dc.error;
	ga.timeout_ns = k.dc.timeout_ns;
	MK_INFO(MK_SUBSYS_INIT, "mkMoeGemmCombine: fused kernel, %d CTAs (%d communicate)", grid,
		k.ncomm);
	return mk_moe_combine_launch(&k, &ga, &maps, g->w_nk, grid, stream);
}
