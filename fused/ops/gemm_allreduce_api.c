// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce: argument checks and the choice of path, the fused kernel (its memory and
 * launch: gemm_allreduce_mem.c) or the unfused path (gemm_allreduce_fallback.c), with the SM
 * split from the policy engine and the plan (gemm_allreduce_plan.c). Every reason not to fuse is
 * said at INFO; errors are WARNed and converted once (mk_result_api).
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
#include "tuner/policy.h"

/*
 * Why the fused kernel cannot or should not run this call, or NULL when it runs (*sp and
 * *adaptive set).
 */
static const char *gar_why_not(const struct mk_comm *c, const void *a, const void *b, void *cc,
			       int m, int n, int k, int b_layout, ncclDataType_t type,
			       struct mk_gar_split *sp, int *adaptive)
{
	static __thread char why[200];
	const int force = (int)mk_param_gemm_ar_fused(), share = mk_gar_share(c->sms, c->gpu_share);
	const int tiles_m = (m + MK_GEMM_BM - 1) / MK_GEMM_BM;
	const int alone = c->nranks == 1;
	struct mk_policy_op_query q;
	struct mk_policy_sm_split ps;
	struct mk_gemm_args g;
	const char *rule = NULL;
	uint64_t words;

	if (force == 0)
		return "MKERNEL_GEMM_AR_FUSED=0";
	if (type != ncclBfloat16)
		return "the fused kernel is bf16 only";
	if (!mk_gemm_device_ok())
		return "the device is not sm_90";
	if (c->topo.nlocal > MK_MAX_LOCAL)
		return "more ranks per node than the fused kernel maps (8)";
	/* the same local rank must own the same slice on every node */
	if (!c->topo.uniform)
		return "nodes have different numbers of ranks";
	words = 2ull * (uint64_t)c->nranks + (uint64_t)c->topo.nnodes +
		(uint64_t)c->topo.nnodes *
			(uint64_t)mk_gar_rows(tiles_m, c->topo.local_rank, c->topo.nlocal);
	if (c->topo.nnodes > 1 && words > c->nsignals)
		return "more tile rows x nodes than the comm has signal words";
	/* The kernel stores into W in the heap (256-byte aligned), or into C when alone. */
	mk_gemm_args_init(&g, m, n, k, b_layout, alone ? cc : (void *)c->heap);
	if (mk_gemm_check(a, b, &g, &rule) != 0) {
		snprintf(why, sizeof(why), "the GEMM engine cannot run it: %s", rule);
		return why;
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
	if (mk_policy_sm_split(&q, &ps) != 0)
		return "the policy engine has no split for this GPU share (fewer than 8 SMs)";
	if (mk_gar_split_plan(ps.sms, ps.min_sms, ps.max_sms, ps.max_step, share, c->topo.nnodes,
			      c->topo.nlocal, mk_param_role_split(), sp) != 0)
		return "MKERNEL_ROLE_SPLIT leaves no CTA for compute";
	*adaptive = mk_roles_adaptive(ps.adaptive);
	if (force < 0 && !ps.fuse) {
		snprintf(
			why, sizeof(why),
			"the policy engine's cost model expects it to win (%.0f us against %.0f us "
			"fused; MKERNEL_GEMM_AR_FUSED=1 forces the fused kernel)",
			ps.unfused_us, ps.fused_us);
		return why;
	}
	return NULL;
}

/*
 * A new shape allocates its memory collectively and synchronises the host, which a stream
 * under CUDA-graph capture cannot do: that call takes the unfused path (capturable), the same
 * on every rank since they capture the same calls.
 */
static const char *gar_why_not_now(const struct mk_comm *c, int m, int n, cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (mk_gar_shape_ready(c, m, n))
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
	int dev = -1, adaptive = 0, rc;

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
	why = gar_why_not(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, type, &sp, &adaptive);
	if (why == NULL)
		why = gar_why_not_now(comm, (int)m, (int)n, stream);
	if (why == NULL) {
		MK_INFO(MK_SUBSYS_INIT,
			"mkGemmAllReduce(M %zu, N %zu, K %zu): fused kernel, %s split %d/%d/%d/%d "
			"(compute/intra/send/reduce)",
			m, n, k, adaptive ? "adaptive from" : "static", sp.sms[0], sp.sms[1],
			sp.sms[2], sp.sms[3]);
		rc = mk_gar_fused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, &sp, adaptive,
				  stream);
		if (rc == 0)
			return ncclSuccess;
		if (rc != -ENOMEM) {
			MK_WARN("mkGemmAllReduce: fused kernel failed (%s)", mk_strerror(rc));
			return mk_result_api(rc);
		}
		why = "the symmetric heap is too small for this shape";
	}
	MK_INFO(MK_SUBSYS_INIT, "mkGemmAllReduce(M %zu, N %zu, K %zu): cuBLAS + ncclAllReduce: %s",
		m, n, k, why);
	rc = mk_gar_unfused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, type, stream);
	if (rc) {
		MK_WARN("mkGemmAllReduce: unfused path failed (%s)", mk_strerror(rc));
		return mk_result_api(rc);
	}
	return ncclSuccess;
}
