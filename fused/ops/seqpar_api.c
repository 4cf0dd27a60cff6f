// SPDX-License-Identifier: Apache-2.0
/*
 * What the API functions of mkGemmReduceScatter and mkAllGatherGemm share (seqpar_host.h):
 * argument checks, the path choice (every reason not to fuse said at INFO), the run of one call
 * on the chosen path, and the record of the path for tests. Errors are WARNed and converted once
 * (mk_result_api).
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "fused/gemm/gemm.h"
#include "fused/ops/seqpar_host.h"
#include "fused/runtime/roles.h"
#include "fused/runtime/runtime_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/result.h"
#include "tuner/policy.h"

static const char *const sp_names[MK_SP_OPS] = { "mkGemmReduceScatter", "mkAllGatherGemm" };
static const int sp_policy_op[MK_SP_OPS] = { MK_FUSED_GEMM_REDUCESCATTER, MK_FUSED_ALLGATHER_GEMM };

const char *mk_sp_name(int op)
{
	return sp_names[op];
}

const char *mk_sp_bad_args(const struct mk_comm *c, const void *a, const void *b, const void *cc,
			   const void *opt, size_t m, size_t n, size_t k, ncclDataType_t type,
			   mkLayout_t layout)
{
	const size_t esz = mk_sp_esz(type);
	int dev = -1;

	if (c == NULL || a == NULL || b == NULL || cc == NULL)
		return "NULL comm or buffer";
	if (c->magic != MK_COMM_MAGIC)
		return "comm is not one mkCommInit made, or it was destroyed";
	if (m == 0 || n == 0 || k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
	    m * n > (size_t)INT_MAX * 64 || m * k > (size_t)INT_MAX * 64)
		return "M, N and K must be in [1, INT_MAX]";
	if (type != ncclBfloat16 && type != ncclFloat16 && type != ncclFloat32)
		return "type must be ncclBfloat16, ncclFloat16 or ncclFloat32";
	if (layout != mkLayoutRowMajorKN && layout != mkLayoutRowMajorNK)
		return "unknown B layout";
	if ((uintptr_t)a % esz || (uintptr_t)b % esz || (uintptr_t)cc % esz || (uintptr_t)opt % esz)
		return "buffers must be aligned to their element size";
	if (m % (size_t)c->nranks != 0)
		return "M must be a multiple of the number of ranks (every rank holds M / nranks "
		       "rows)";
	if (cudaGetDevice(&dev) != cudaSuccess || dev != c->cuda_dev)
		return "the comm belongs to another CUDA device than the current one";
	return NULL;
}

/*
 * Why the fused kernel cannot or should not run (the reason, for INFO), or NULL with *sp and
 * *adaptive set: type, device, layout of the nodes, signal words, the engine's rules (checked on
 * `a_engine`, the A the engine will read, and b), the policy engine's split (fixed for the
 * op's roles) and its cost model, unless `force` (the op's MKERNEL_*_FUSED knob) says 0 or 1.
 */
static const char *sp_why_not(const struct mk_comm *c, int op, int force, const void *a_engine,
			      const void *b, int m, int n, int k, int b_layout, ncclDataType_t type,
			      struct mk_gar_split *sp, int *adaptive)
{
	static __thread char why[240];
	const int share = mk_sp_share(c), nnodes = c->topo.nnodes, nlocal = c->topo.nlocal;
	/* reduce-scatter: intra sums node partials, send and reduce cross nodes; all-gather: the
	 * copy stage always (it fills my own buffer), send and forward cross nodes */
	const int used[MK_SP_OPS][MK_GAR_ROLES] = {
		{ 1, nlocal > 1, nnodes > 1, nnodes > 1 },
		{ 1, 1, nnodes > 1, nnodes > 1 },
	};
	struct mk_policy_op_query q;
	struct mk_policy_sm_split ps;
	struct mk_sp_geom g;
	struct mk_gemm_args ga;
	const char *rule = NULL;

	if (force == 0)
		return op == MK_SP_GRS ? "MKERNEL_GEMM_RS_FUSED=0" : "MKERNEL_AG_GEMM_FUSED=0";
	if (type != ncclBfloat16)
		return "the fused kernel is bf16 only";
	if (!mk_gemm_device_ok())
		return "the device is not sm_90";
	if (nlocal > MK_MAX_LOCAL)
		return "more ranks per node than the fused kernel maps (8)";
	if (nnodes > MK_SP_MAX_NODES)
		return "more nodes than the fused kernel adds up (16)";
	/* the same local rank must own the same shards' work on every node */
	if (!c->topo.uniform)
		return "nodes have different numbers of ranks";
	if (mk_sp_geom_init(&g, m, n, c->nranks) != 0)
		return "M is not a multiple of the ranks";
	if (mk_sp_sig_words(nnodes, g.nch) > mk_sp_window(c))
		return "more chunks x nodes than the op's share of the comm's signal words";
	/* mkAllToAll uses the first 2 x nranks words */
	if (2ull * (uint64_t)c->nranks > mk_sp_sig_base(c->nsignals, MK_SP_SIG_QUARTER_GRS))
		return "too many ranks for the op's signal words (mkAllToAll's come first)";
	/* The engine reads A (aShard's gather buffer or A) and B, and stores into the heap or C. */
	mk_gemm_args_init(&ga, m, n, k, b_layout, (void *)c->heap);
	if (mk_gemm_check(a_engine, b, &ga, &rule) != 0) {
		snprintf(why, sizeof(why), "the GEMM engine cannot run it: %s", rule);
		return why;
	}
	/* the cost model never fuses one rank: skip its query (host time at small shapes); the
	 * shape rules above still say why a forced or default call cannot fuse */
	if (c->nranks == 1 && force < 0)
		return "one rank: the GEMM alone (nothing to exchange)";
	memset(&q, 0, sizeof(q));
	q.op = sp_policy_op[op];
	q.m = (uint64_t)m;
	q.n = (uint64_t)n;
	q.k = (uint64_t)k;
	q.dtype_bytes = 2;
	q.nnodes = nnodes;
	q.nranks = c->nranks;
	q.ranks_per_node = nlocal;
	q.sms = share;
	if (mk_policy_sm_split(&q, &ps) != 0)
		return "the policy engine has no split for this GPU share (fewer than 8 SMs)";
	if (mk_gar_split_plan(ps.sms, ps.min_sms, ps.max_sms, ps.max_step, share, nnodes, nlocal,
			      mk_param_role_split(), sp) != 0 ||
	    mk_sp_split_fix(sp, used[op], op == MK_SP_AGG && c->nranks > 1 ? MK_GAR_INTRA : 0) != 0)
		return "MKERNEL_ROLE_SPLIT leaves no CTA for compute";
	*adaptive = mk_gar_split_adaptive(sp, mk_roles_adaptive(ps.adaptive));
	if (force < 0 && !ps.fuse) {
		snprintf(
			why, sizeof(why),
			"the policy engine's cost model expects it to win (%.0f us against %.0f us "
			"fused; %s=1 forces the fused kernel)",
			ps.unfused_us, ps.fused_us,
			op == MK_SP_GRS ? "MKERNEL_GEMM_RS_FUSED" : "MKERNEL_AG_GEMM_FUSED");
		return why;
	}
	return NULL;
}

/* A new shape's workspace is set up outside CUDA-graph capture: the reason when this call
 * cannot (a new shape on a capturing stream), else NULL. */
static const char *sp_why_not_now(const struct mk_comm *c, int op, int m, int n, int k,
				  cudaStream_t stream)
{
	const struct mk_sp_shape *s =
		mk_sp_state_of(c, op) != NULL ? mk_sp_state_of(c, op)->shape : NULL;
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (s != NULL && s->m == m && s->n == n && s->k == k)
		return NULL;
	if (cudaStreamIsCapturing(stream, &cap) == cudaSuccess &&
	    cap == cudaStreamCaptureStatusNone)
		return NULL;
	return "first call of this shape under CUDA-graph capture (its fused memory is set up "
	       "outside capture: call once before capturing)";
}

static void sp_record(struct mk_comm *c, int op, int fused, const char *why)
{
	struct mk_sp_state *st;

	if (mk_sp_state_get(c, op, &st) != 0)
		return;
	st->last_path = fused;
	snprintf(st->last_why, sizeof(st->last_why), "%s", why != NULL ? why : "");
}

ncclResult_t mk_sp_run(struct mk_comm *c, int op, const struct mk_sp_op_ops *ops,
		       const struct mk_sp_args *x, const void *a_engine, cudaStream_t stream)
{
	const int key_k = ops->shape_k ? x->k : 0;
	struct mk_gar_split sp;
	const char *why;
	int adaptive = 0, rc;

	why = sp_why_not(c, op, (int)ops->force(), a_engine, x->b, x->m, x->n, x->k, x->b_layout,
			 x->type, &sp, &adaptive);
	if (why == NULL && !(ops->alone_direct && c->nranks == 1))
		why = sp_why_not_now(c, op, x->m, x->n, key_k, stream);
	if (why == NULL) {
		MK_INFO(MK_SUBSYS_INIT,
			"%s(M %d, N %d, K %d): fused kernel, %s split %d/%d/%d/%d "
			"(compute/intra/send/reduce)",
			sp_names[op], x->m, x->n, x->k, adaptive ? "adaptive from" : "static",
			sp.sms[0], sp.sms[1], sp.sms[2], sp.sms[3]);
		rc = ops->fused(c, x, &sp, adaptive, stream);
		if (rc == 0) {
			sp_record(c, op, 1, adaptive ? "adaptive" : "static");
			return ncclSuccess;
		}
		if (rc != -ENOMEM) {
			MK_WARN("%s: fused kernel failed (%s)", sp_names[op], mk_strerror(rc));
			return mk_result_api(rc);
		}
		why = "the symmetric heap is too small for this shape";
	}
	MK_INFO(MK_SUBSYS_INIT, "%s(M %d, N %d, K %d): %s: %s", sp_names[op], x->m, x->n, x->k,
		ops->unfused, why);
	sp_record(c, op, 0, why);
	rc = ops->unfused_run(c, x, stream);
	if (rc) {
		MK_WARN("%s: unfused path failed (%s)", sp_names[op], mk_strerror(rc));
		return mk_result_api(rc);
	}
	return ncclSuccess;
}

int mk_sp_last_path(struct mk_comm *c, int op, char *why, size_t len)
{
	const struct mk_sp_state *st = mk_sp_state_of(c, op);

	if (why != NULL && len > 0)
		snprintf(why, len, "%s", st != NULL ? st->last_why : "no call yet");
	return st != NULL ? st->last_path : -1;
}

int mk_sp_last_pipe_pieces(struct mk_comm *c, int op)
{
	const struct mk_sp_state *st = mk_sp_state_of(c, op);

	return st != NULL ? st->pipe_pieces : -1;
}

int mk_sp_scratch_counts(struct mk_comm *c, int op, unsigned long counts[2])
{
	const struct mk_sp_state *st = mk_sp_state_of(c, op);

	if (st == NULL)
		return -1;
	counts[0] = st->scratch_allocs[0];
	counts[1] = st->scratch_allocs[1];
	return 0;
}
