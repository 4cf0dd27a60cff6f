// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce: argument checks and the choice of path: the fused kernel (its memory and
 * launch: gemm_allreduce_mem.c), the one-shot exchange after the GEMM (decode sizes:
 * gemm_allreduce_oneshot.cu) or the unfused path (gemm_allreduce_fallback.c), the cheapest by
 * the policy engine's calibrated cost model that can run the call, with the SM split from the
 * policy engine and the plan (gemm_allreduce_plan.c). The path and why are said at INFO; errors
 * are WARNed and converted once (mk_result_api).
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "fused/ops/gemm_allreduce.h"
#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/runtime/comm.h"
#include "fused/runtime/roles.h"
#include "fused/runtime/runtime_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/result.h"
#include "tuner/model.h"
#include "tuner/policy.h"

MK_PARAM_DECLARE_STR(gemm_ar_path); /* fused/gemm/gemm_params.c */

/* Why the fused kernel cannot run this call, or NULL (its split and adaptive setting set). */
static const char *gar_fused_no(const struct mk_comm *c, const void *a, const void *b, void *cc,
				int m, int n, int k, int b_layout,
				const struct mk_policy_sm_split *ps, struct mk_gar_split *sp,
				int *adaptive)
{
	static __thread char why[200];
	const int share = mk_gar_share(c->sms, c->gpu_share);
	const int tiles_m = (m + MK_GEMM_BM - 1) / MK_GEMM_BM;
	const int alone = c->nranks == 1;
	struct mk_gemm_args g;
	const char *rule = NULL;
	uint64_t words;

	/* mkGemmAllReduce's signal words come after mkAllToAll's and end at mk_gar1_sig_end
	 * (fused/ops/signals.h), its last nnodes the one-shot path's */
	words = 2ull * (uint64_t)c->nranks + (uint64_t)c->topo.nnodes +
		(uint64_t)c->topo.nnodes *
			(uint64_t)mk_gar_rows(tiles_m, c->topo.local_rank, c->topo.nlocal);
	if (c->topo.nnodes > 1 && words + (uint64_t)c->topo.nnodes > mk_gar1_sig_end(c->nsignals))
		return "more tile rows x nodes than the comm has signal words";
	/* The kernel stores into W in the heap (256-byte aligned), or into C when alone. */
	mk_gemm_args_init(&g, m, n, k, b_layout, alone ? cc : (void *)c->heap);
	if (mk_gemm_check(a, b, &g, &rule) != 0) {
		snprintf(why, sizeof(why), "the GEMM engine cannot run it: %s", rule);
		return why;
	}
	if (mk_gar_split_plan(ps->sms, ps->min_sms, ps->max_sms, ps->max_step, share,
			      c->topo.nnodes, c->topo.nlocal, mk_param_role_split(), sp) != 0)
		return "MKERNEL_ROLE_SPLIT leaves no CTA for compute";
	*adaptive = mk_gar_split_adaptive(sp, mk_roles_adaptive(ps->adaptive));
	return NULL;
}

/* Why the one-shot exchange cannot run this call, or NULL. */
static const char *gar_oneshot_no(const struct mk_comm *c, int m, int n)
{
	if (c->nranks == 1)
		return "one rank: nothing to exchange";
	if ((uint64_t)m * (uint64_t)n * 2 > MK_MODEL_ONESHOT_MAX_BYTES)
		return "the output is larger than the one-shot buffers "
		       "(MK_MODEL_ONESHOT_MAX_BYTES)";
	return NULL;
}

/* The path a knob forces (MKERNEL_GEMM_AR_PATH, else MKERNEL_GEMM_AR_FUSED), or -1. */
static int gar_forced(void)
{
	const char *v = mk_param_gemm_ar_path();
	const int fused = (int)mk_param_gemm_ar_fused();

	if (v != NULL && v[0] != '\0') {
		if (strcmp(v, "unfused") == 0)
			return MK_PATH_UNFUSED;
		if (strcmp(v, "fused") == 0)
			return MK_PATH_FUSED;
		if (strcmp(v, "oneshot") == 0)
			return MK_PATH_ONESHOT;
		MK_WARN_ONCE(
			"MKERNEL_GEMM_AR_PATH=%s: expected unfused, fused or oneshot; the cost "
			"model decides",
			v);
	}
	return fused == 0 ? MK_PATH_UNFUSED : fused > 0 ? MK_PATH_FUSED : -1;
}

/* What ran last on this thread (tests and benchmarks read it). */
static __thread int gar_last_path = -1;
static __thread const char *gar_last_why;

int mk_gar_last_path(const char **why)
{
	if (why != NULL)
		*why = gar_last_why;
	return gar_last_path;
}

/*
 * The path for this call: a knob's, else the cost model's cheapest (calibrated: tuner/model.c),
 * restricted to what can run it. *why says why (static or thread-local text).
 */
static int gar_choose(const struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n,
		      int k, int b_layout, ncclDataType_t type, struct mk_gar_split *sp,
		      int *adaptive, const char **why)
{
	static __thread char text[400];
	const int forced = gar_forced(), share = mk_gar_share(c->sms, c->gpu_share);
	const char *no_fused = NULL, *no_one = NULL;
	struct mk_policy_op_query q;
	struct mk_policy_sm_split ps;
	int path;

	if (forced == MK_PATH_UNFUSED) {
		*why = "forced by MKERNEL_GEMM_AR_PATH or MKERNEL_GEMM_AR_FUSED=0";
		return MK_PATH_UNFUSED;
	}
	if (type != ncclBfloat16) {
		*why = "the fused paths are bf16 only";
		return MK_PATH_UNFUSED;
	}
	if (!mk_gemm_device_ok()) {
		*why = "the device is not sm_90";
		return MK_PATH_UNFUSED;
	}
	if (c->topo.nlocal > MK_MAX_LOCAL) {
		*why = "more ranks per node than the fused paths map (8)";
		return MK_PATH_UNFUSED;
	}
	/* the same local rank must own the same slice on every node */
	if (!c->topo.uniform) {
		*why = "nodes have different numbers of ranks";
		return MK_PATH_UNFUSED;
	}
	/* The model never fuses one rank; at decode sizes the query and its text cost the call
	 * about as much as the GEMM it would choose, so one rank left to it skips them. */
	if (c->nranks == 1 && forced < 0) {
		*why = "one rank: the GEMM alone (nothing to reduce)";
		return MK_PATH_UNFUSED;
	}
	memset(&q, 0, sizeof(q));
	q.op = MK_FUSED_GEMM_ALLREDUCE;
	q.m = (uint64_t)m;
	q.n = (uint64_t)n;
	q.k = (uint64_t)k;
	q.dtype_bytes = 2;
	q.nnodes = c->topo.nnodes;
	q.nranks = c->nranks;
	q.ranks_per_node = c->topo.nlocal;
	q.sms = share;
	if (mk_policy_sm_split(&q, &ps) != 0) {
		*why = "the policy engine has no split for this GPU share (fewer than 8 SMs)";
		return MK_PATH_UNFUSED;
	}
	no_fused = gar_fused_no(c, a, b, cc, m, n, k, b_layout, &ps, sp, adaptive);
	no_one = gar_oneshot_no(c, m, n);
	if (forced == MK_PATH_FUSED || forced == MK_PATH_ONESHOT) {
		const char *no = forced == MK_PATH_FUSED ? no_fused : no_one;

		if (no == NULL) {
			*why = "forced by a knob";
			return forced;
		}
		snprintf(text, sizeof(text), "the forced path cannot run: %s", no);
		*why = text;
		return MK_PATH_UNFUSED;
	}
	/* the model's cheapest path that can run */
	path = ps.path;
	if (path == MK_PATH_ONESHOT && no_one != NULL)
		path = no_fused == NULL && ps.fused_us < ps.unfused_us ? MK_PATH_FUSED
								       : MK_PATH_UNFUSED;
	if (path == MK_PATH_FUSED && no_fused != NULL)
		path = no_one == NULL && ps.oneshot_us >= 0 && ps.oneshot_us < ps.unfused_us
			       ? MK_PATH_ONESHOT
			       : MK_PATH_UNFUSED;
	snprintf(text, sizeof(text),
		 "cost model: unfused %.1f us, fused %.1f us%s%.160s, one-shot %.1f us%s%s",
		 ps.unfused_us, ps.fused_us, no_fused != NULL ? " (cannot: " : "",
		 no_fused != NULL ? no_fused : "", ps.oneshot_us,
		 no_one != NULL && c->nranks > 1 ? " (cannot)" : "", no_fused != NULL ? ")" : "");
	*why = text;
	return path;
}

/*
 * A new shape allocates its memory collectively and synchronises the host, which a stream
 * under CUDA-graph capture cannot do: that call takes the unfused path (capturable), the same
 * on every rank since they capture the same calls.
 */
static const char *gar_why_not_now(const struct mk_comm *c, int path, int m, int n,
				   cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (path == MK_PATH_FUSED ? mk_gar_shape_ready(c, m, n) : mk_gar_oneshot_ready(c, m, n))
		return NULL;
	if (cudaStreamIsCapturing(stream, &cap) == cudaSuccess &&
	    cap == cudaStreamCaptureStatusNone)
		return NULL;
	return "first call of this output shape under CUDA-graph capture (its fused memory is set "
	       "up outside capture: call once before capturing)";
}

static ncclResult_t gar_invalid(const char *what)
{
	MK_WARN("mkGemmAllReduce: %s; nothing launched", what);
	return mk_result_api(-EINVAL);
}

MK_API ncclResult_t mkGemmAllReduce(const void *a, const void *b, void *c, size_t m, size_t n,
				    size_t k, ncclDataType_t type, mkLayout_t bLayout,
				    mkComm_t comm, cudaStream_t stream)
{
	const size_t esz = type == ncclFloat32 ? 4 : 2;
	struct mk_gar_split sp;
	const char *why;
	int dev = -1, adaptive = 0, rc, path;

	if (comm == NULL || a == NULL || b == NULL || c == NULL)
		return gar_invalid("NULL comm or buffer");
	if (comm->magic != MK_COMM_MAGIC)
		return gar_invalid("comm is not one mkCommInit made, or it was destroyed");
	if (m == 0 || n == 0 || k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
	    m * n > (size_t)INT_MAX * 64)
		return gar_invalid("M, N and K must be in [1, INT_MAX]");
	if (type != ncclBfloat16 && type != ncclFloat16 && type != ncclFloat32)
		return gar_invalid("type must be ncclBfloat16, ncclFloat16 or ncclFloat32");
	if (bLayout != mkLayoutRowMajorKN && bLayout != mkLayoutRowMajorNK)
		return gar_invalid("unknown B layout");
	if ((uintptr_t)a % esz || (uintptr_t)b % esz || (uintptr_t)c % esz)
		return gar_invalid("A, B and C must be aligned to their element size");
	if (cudaGetDevice(&dev) != cudaSuccess || dev != comm->cuda_dev)
		return gar_invalid("the comm belongs to another CUDA device than the current one");
	path = gar_choose(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, type, &sp, &adaptive,
			  &why);
	if (path != MK_PATH_UNFUSED) {
		const char *now = gar_why_not_now(comm, path, (int)m, (int)n, stream);

		if (now != NULL) {
			why = now;
			path = MK_PATH_UNFUSED;
		}
	}
	if (path == MK_PATH_FUSED) {
		MK_INFO(MK_SUBSYS_INIT,
			"mkGemmAllReduce(M %zu, N %zu, K %zu): fused kernel, %s split %d/%d/%d/%d "
			"(compute/intra/send/reduce); %s",
			m, n, k, adaptive ? "adaptive from" : "static", sp.sms[0], sp.sms[1],
			sp.sms[2], sp.sms[3], why);
		rc = mk_gar_fused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, &sp, adaptive,
				  stream);
	} else if (path == MK_PATH_ONESHOT) {
		MK_INFO(MK_SUBSYS_INIT,
			"mkGemmAllReduce(M %zu, N %zu, K %zu): one-shot exchange; %s", m, n, k,
			why);
		rc = mk_gar_oneshot(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, stream);
	} else {
		rc = -EAGAIN; /* the unfused path below */
	}
	if (rc == 0)
		goto out;
	if (rc != -EAGAIN && rc != -ENOMEM) {
		MK_WARN("mkGemmAllReduce: %s path failed (%s)",
			path == MK_PATH_FUSED ? "fused" : "one-shot", mk_strerror(rc));
		return mk_result_api(rc);
	}
	if (rc == -ENOMEM)
		why = "the symmetric heap is too small for this shape";
	path = MK_PATH_UNFUSED;
	MK_INFO(MK_SUBSYS_INIT, "mkGemmAllReduce(M %zu, N %zu, K %zu): GEMM + ncclAllReduce: %s", m,
		n, k, why);
	rc = mk_gar_unfused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, type, stream);
	if (rc) {
		MK_WARN("mkGemmAllReduce: unfused path failed (%s)", mk_strerror(rc));
		return mk_result_api(rc);
	}
out:
	gar_last_path = path;
	gar_last_why = why;
	return ncclSuccess;
}
