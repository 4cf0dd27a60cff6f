// SPDX-License-Identifier: Apache-2.0
/*
 * mkRingAttention: argument checks and the choice of path, the fused kernel (its memory and
 * launch: ring_attention_mem.c) or the unfused one (ring_attention_fallback.c), with the SM
 * split from the policy engine and the plan (ring_attention_plan.c). Every reason not to fuse
 * is said at INFO; errors are WARNed and converted once (mk_result_api).
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fused/ops/ring_attention_host.h"
#include "fused/ops/ring_attention_params.h"
#include "fused/ops/signals.h"
#include "fused/runtime/comm.h"
#include "fused/runtime/roles.h"
#include "fused/runtime/runtime_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/result.h"
#include "tuner/policy.h"

/* fused/ops/signals.h cuts the comm's words in eighths */
_Static_assert(MK_COMM_SIGNALS % 8 == 0, "MK_COMM_SIGNALS must be a multiple of 8");

static const char *ring_bad_args(const struct mk_comm *c, const struct mk_ring_call *x)
{
	int dev = -1;

	if (c == NULL || x->q == NULL || x->k == NULL || x->v == NULL || x->o == NULL)
		return "NULL comm or buffer";
	if (c->magic != MK_COMM_MAGIC)
		return "comm is not one mkCommInit made, or it was destroyed";
	if (x->batch < 1 || x->heads_q < 1 || x->heads_kv < 1 || x->seq_local < 1)
		return "batch, heads and seqLocal must be >= 1";
	if (x->heads_q % x->heads_kv)
		return "headsQ must be a multiple of headsKv";
	if (x->head_dim != 64 && x->head_dim != 128)
		return "headDim must be 64 or 128";
	if (x->causal != 0 && x->causal != 1)
		return "causal must be 0 or 1";
	if (x->causal && x->seq_local % 2)
		return "causal (zigzag sharding: chunks r and 2R-1-r of seqLocal/2 rows) needs an "
		       "even seqLocal";
	if ((long long)x->seq_local * c->nranks >= (1ll << 30))
		return "the whole sequence (seqLocal x ranks) must stay below 2^30 rows";
	if (((uintptr_t)x->q | (uintptr_t)x->k | (uintptr_t)x->v | (uintptr_t)x->o) & 1 ||
	    (uintptr_t)x->lse & 3)
		return "misaligned buffer (bf16 needs 2 bytes, lse 4)";
	if (cudaGetDevice(&dev) != cudaSuccess || dev != c->cuda_dev)
		return "the comm belongs to another CUDA device than the current one";
	return NULL;
}

/*
 * Why the fused kernel cannot or should not run this call, or NULL when it runs (*sp and
 * *adaptive set).
 */
static const char *ring_why_not(const struct mk_comm *c, const struct mk_ring_call *x,
				struct mk_gar_split *sp, int *adaptive)
{
	static __thread char why[240];
	const int force = (int)mk_param_ring_attn_fused();
	const int share = mk_gar_share(c->sms, c->gpu_share);
	const uintptr_t in = (uintptr_t)x->q | (uintptr_t)x->k | (uintptr_t)x->v;
	struct mk_policy_op_query q;
	struct mk_policy_sm_split ps;

	if (c->nranks == 1)
		return "one rank: the whole sequence is here";
	if (force == 0)
		return "MKERNEL_RING_ATTN_FUSED=0";
	if (c->nranks > MK_RING_MAX_RANKS)
		return "more ranks than the fused kernel's steps (16)";
	if (!mk_attn_device_ok())
		return "the device is not sm_90";
	if (c->topo.nlocal > MK_MAX_LOCAL)
		return "more ranks per node than the fused kernel maps (8)";
	if (!c->topo.uniform)
		return "nodes have different numbers of ranks";
	if (2ull * (uint64_t)c->topo.nnodes > mk_sig_eighth(c->nsignals))
		return "more nodes than the op's share of the comm's signal words";
	if ((in & 15) || ((uintptr_t)x->o & 3))
		return "q, k, v not 16-byte aligned or o not 4-byte aligned (TMA)";
	memset(&q, 0, sizeof(q));
	q.op = MK_FUSED_RING_ATTENTION;
	q.m = (uint64_t)x->seq_local;
	q.n = (uint64_t)x->heads_q * (uint64_t)x->head_dim;
	q.k = (uint64_t)x->batch;
	q.kv_n = (uint64_t)x->heads_kv * (uint64_t)x->head_dim;
	q.causal = x->causal;
	q.dtype_bytes = 2;
	q.nnodes = c->topo.nnodes;
	q.nranks = c->nranks;
	q.ranks_per_node = c->topo.nlocal;
	q.sms = share;
	if (mk_policy_sm_split(&q, &ps) != 0)
		return "the policy engine has no split for this GPU share (fewer than 8 SMs)";
	if (mk_gar_split_plan(ps.sms, ps.min_sms, ps.max_sms, ps.max_step, share, c->topo.nnodes,
			      c->topo.nlocal, mk_param_role_split(), sp) != 0 ||
	    mk_ring_split_fix(sp, c->nranks, c->topo.nnodes) != 0)
		return "MKERNEL_ROLE_SPLIT leaves no CTA for compute";
	*adaptive = mk_roles_adaptive(ps.adaptive);
	if (force < 0 && !ps.fuse) {
		snprintf(why, sizeof(why),
			 "the policy engine's cost model expects it to win (%.0f us against %.0f "
			 "us fused; MKERNEL_RING_ATTN_FUSED=1 forces the fused kernel)",
			 ps.unfused_us, ps.fused_us);
		return why;
	}
	return NULL;
}

/* A new shape's workspace is set up outside CUDA-graph capture. */
static const char *ring_why_not_now(const struct mk_comm *c, const struct mk_ring_call *x,
				    cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (mk_ring_shape_ready(c, x))
		return NULL;
	if (cudaStreamIsCapturing(stream, &cap) == cudaSuccess &&
	    cap == cudaStreamCaptureStatusNone)
		return NULL;
	return "first call of this shape under CUDA-graph capture (its fused memory is set up "
	       "outside capture: call once before capturing)";
}

static void ring_record(struct mk_comm *c, int fused, const char *why)
{
	struct mk_ring_state *st;

	if (mk_ring_state_get(c, &st) != 0)
		return;
	st->last_path = fused;
	snprintf(st->last_why, sizeof(st->last_why), "%s", why != NULL ? why : "");
}

int mk_ring_last_path(struct mk_comm *c, char *why, size_t len)
{
	const struct mk_ring_state *st = mk_ring_state_of(c);

	if (why != NULL && len > 0)
		snprintf(why, len, "%s", st != NULL ? st->last_why : "no call yet");
	return st != NULL ? st->last_path : -1;
}

MK_API ncclResult_t mkRingAttention(const void *q, const void *k, const void *v, void *o,
				    float *lse, int batch, int headsQ, int headsKv, int seqLocal,
				    int headDim, int causal, mkComm_t comm, cudaStream_t stream)
{
	const struct mk_ring_call x = { q,	k,	 v,	   o,	    lse,   batch,
					headsQ, headsKv, seqLocal, headDim, causal };
	struct mk_gar_split sp;
	const char *why = ring_bad_args(comm, &x);
	int adaptive = 0, rc;

	if (why != NULL) {
		MK_WARN("mkRingAttention(B %d, Hq %d, Hkv %d, seqLocal %d, D %d, causal %d): %s; "
			"nothing launched",
			batch, headsQ, headsKv, seqLocal, headDim, causal, why);
		return mk_result_api(-EINVAL);
	}
	why = ring_why_not(comm, &x, &sp, &adaptive);
	if (why == NULL)
		why = ring_why_not_now(comm, &x, stream);
	if (why == NULL) {
		MK_INFO(MK_SUBSYS_INIT,
			"mkRingAttention(B %d, H %d/%d, seqLocal %d, D %d, causal %d): "
			"fused kernel, %s split %d/%d/%d/%d (compute/publish/send/land)",
			batch, headsQ, headsKv, seqLocal, headDim, causal,
			adaptive ? "adaptive from" : "static", sp.sms[0], sp.sms[1], sp.sms[2],
			sp.sms[3]);
		rc = mk_ring_fused(comm, &x, &sp, adaptive, stream);
		if (rc == 0) {
			ring_record(comm, 1, adaptive ? "adaptive" : "static");
			return ncclSuccess;
		}
		if (rc != -ENOMEM) {
			MK_WARN("mkRingAttention: fused kernel failed (%s)", mk_strerror(rc));
			return mk_result_api(rc);
		}
		why = "the symmetric heap is too small for this shape";
	}
	MK_INFO(MK_SUBSYS_INIT,
		"mkRingAttention(B %d, H %d/%d, seqLocal %d, D %d, causal %d): ncclAllGather of K, "
		"V + the attention engine: %s",
		batch, headsQ, headsKv, seqLocal, headDim, causal, why);
	ring_record(comm, 0, why);
	rc = mk_ring_unfused(comm, &x, stream);
	if (rc == -EOPNOTSUPP) {
		MK_WARN("mkRingAttention: a shape's first call checks that every rank agrees "
			"on it and sets up its buffers, which CUDA-graph capture does not allow: "
			"call once before capturing; nothing launched");
		return mk_result_api(rc);
	}
	if (rc) {
		MK_WARN("mkRingAttention: unfused path failed (%s)", mk_strerror(rc));
		return mk_result_api(rc);
	}
	return ncclSuccess;
}
