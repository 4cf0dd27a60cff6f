// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce: argument checks, the choice between the fused kernel (gemm_allreduce.cu) and
 * the unfused path (cuBLAS, then ncclAllReduce on the same stream), and the fused kernel's
 * workspace in the symmetric heap.
 *
 * Workspace, per comm, for one output shape at a time: W (this rank's bf16 partial, M x N), R
 * (the bf16 results of the tiles this rank owns, M x N), then per tile a ready and a final flag,
 * then the call and exit counters and two work-ticket counters. Offsets are symmetric, so a node
 * peer's W, R and flags are its mapped heap plus the same offsets. A new shape replaces the
 * workspace: the ranks allocate the same sizes in the same order (collective, host-synchronising:
 * warm up before graph capture), zero the flags and pass a barrier before any kernel can read them.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fused/fallback.h"
#include "fused/ops/gemm_allreduce.h"
#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/runtime/comm.h"
#include "fused/runtime/runtime_params.h"
#include "mk/err.h"
#include "mk/log.h"

struct mk_gar_ws {
	int m, n, tiles;
	void *w, *r, *flags; /* in my heap; a node peer's are at the same offsets in its heap */
	int *order_d;	     /* compute order, my slice first */
};

static size_t gar_flag_bytes(int tiles)
{
	return (size_t)(2 * tiles + 4) * sizeof(unsigned int);
}

static void gar_ws_free(struct mk_comm *c)
{
	struct mk_gar_ws *ws = c->gar;

	if (ws == NULL)
		return;
	if (ws->w != NULL)
		mkMemFree(c, ws->w);
	if (ws->r != NULL)
		mkMemFree(c, ws->r);
	if (ws->flags != NULL)
		mkMemFree(c, ws->flags);
	cudaFree(ws->order_d);
	free(ws);
	c->gar = NULL;
}

/* The compute order (gemm_allreduce_plan.c) in device memory. */
static int gar_order(struct mk_comm *c, struct mk_gar_ws *ws, int tiles_m, int tiles_n)
{
	int *h = malloc((size_t)ws->tiles * sizeof(int));
	int rc = -EIO;

	if (h == NULL)
		return -ENOMEM;
	mk_gar_tile_order(tiles_m, tiles_n, c->topo.local_rank, c->topo.nlocal, h);
	if (cudaMalloc((void **)&ws->order_d, (size_t)ws->tiles * sizeof(int)) == cudaSuccess &&
	    cudaMemcpy(ws->order_d, h, (size_t)ws->tiles * sizeof(int), cudaMemcpyHostToDevice) ==
		    cudaSuccess)
		rc = 0;
	free(h);
	return rc;
}

static int gar_ws_get(struct mk_comm *c, int m, int n, struct mk_gar_ws **out)
{
	const int tiles_m = (m + MK_GEMM_BM - 1) / MK_GEMM_BM,
		  tiles_n = (n + MK_GEMM_BN - 1) / MK_GEMM_BN;
	const size_t mat = (size_t)m * n * 2;
	struct mk_gar_ws *ws = c->gar;
	int rc;

	if (ws != NULL && ws->m == m && ws->n == n) {
		*out = ws;
		return 0;
	}
	/* Peers' kernels of the old shape may still read my W and R: everyone drains first. */
	if (ws != NULL && (cudaDeviceSynchronize() != cudaSuccess || mk_comm_barrier(c) != 0))
		return -EIO;
	gar_ws_free(c);
	ws = calloc(1, sizeof(*ws));
	if (ws == NULL)
		return -ENOMEM;
	c->gar = ws;
	c->op_free = gar_ws_free;
	ws->m = m;
	ws->n = n;
	ws->tiles = tiles_m * tiles_n;
	if (mkMemAlloc(c, mat, &ws->w) != ncclSuccess ||
	    mkMemAlloc(c, mat, &ws->r) != ncclSuccess ||
	    mkMemAlloc(c, gar_flag_bytes(ws->tiles), &ws->flags) != ncclSuccess) {
		MK_WARN("mkGemmAllReduce needs 2 x %zu bytes plus flags of symmetric heap for M %d "
			"x N %d (MKERNEL_SYMM_HEAP, mkConfig_t.heapBytes)",
			mat, m, n);
		gar_ws_free(c);
		return -ENOMEM;
	}
	rc = mk_gar_prepare(); /* shared-memory limit, and loads the kernel before it is needed */
	if (rc == 0)
		rc = gar_order(c, ws, tiles_m, tiles_n);
	/* Flags from an earlier use of this heap range must be gone before any peer reads them. */
	if (rc == 0 && cudaMemset(ws->flags, 0, gar_flag_bytes(ws->tiles)) != cudaSuccess)
		rc = -EIO;
	if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_comm_barrier(c);
	if (rc) {
		gar_ws_free(c);
		return rc;
	}
	*out = ws;
	return 0;
}

/* CTAs per role within my share of the GPU's SMs (gemm_allreduce_plan.c). */
static int gar_roles(const struct mk_comm *c, struct mk_gar_launch *l)
{
	struct mk_gar_split sp;
	int rc;

	rc = mk_gar_split(c->sms, c->gpu_share, mk_param_role_split(), &sp);
	l->compute = sp.compute;
	l->reduce = sp.reduce;
	l->publish = sp.publish;
	return rc;
}

/* The address in node peer p's mapped heap of what `mine` is in my heap (symmetric offsets). */
static void *gar_at_peer(const struct mk_comm *c, int p, const void *mine)
{
	return c->peer_base[p] + ((const char *)mine - c->heap);
}

static int gar_fused(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
		     int b_layout, cudaStream_t stream)
{
	struct mk_gar_launch l;
	struct mk_gar_ws *ws;
	int rc;

	memset(&l, 0, sizeof(l));
	rc = gar_roles(c, &l);
	if (rc)
		return rc;
	rc = gar_ws_get(c, m, n, &ws);
	if (rc)
		return rc;
	l.a = a;
	l.b = b;
	l.c = cc;
	l.m = m;
	l.n = n;
	l.k = k;
	l.b_layout = b_layout;
	l.local_rank = c->topo.local_rank;
	l.nlocal = c->topo.nlocal;
	l.order = ws->order_d;
	for (int p = 0; p < c->topo.nlocal; p++) {
		unsigned int *flags = gar_at_peer(c, p, ws->flags);

		l.ws.w[p] = gar_at_peer(c, p, ws->w);
		l.ws.r[p] = gar_at_peer(c, p, ws->r);
		l.ws.ready[p] = flags;
		l.ws.final[p] = flags + ws->tiles;
		l.ws.peer_calls[p] = flags + 2 * ws->tiles;
	}
	l.ws.calls = (unsigned int *)ws->flags + 2 * ws->tiles;
	l.ws.exits = l.ws.calls + 1;
	l.ws.tickets = l.ws.calls + 2;
	l.ws.error = c->kerr;
	l.ws.timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
	return mk_gar_launch(&l, stream);
}

static int gar_unfused(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n,
		       int k, int b_layout, ncclDataType_t type, cudaStream_t stream)
{
	const cudaDataType_t ct = type == ncclBfloat16	? CUDA_R_16BF
				  : type == ncclFloat16 ? CUDA_R_16F
							: CUDA_R_32F;
	int rc = mk_fallback_gemm(a, b, cc, m, n, k, b_layout, ct, ct, stream);

	if (rc)
		return rc;
	if (ncclAllReduce(cc, cc, (size_t)m * n, type, ncclSum, c->nccl, stream) != ncclSuccess)
		return -EIO;
	return 0;
}

/* Why the fused kernel cannot run this call, or NULL when it can. */
static const char *gar_why_not(const struct mk_comm *c, const void *a, const void *b, int m, int n,
			       int k, int b_layout, ncclDataType_t type)
{
	static __thread char why[160];
	struct mk_gemm_args g;
	const char *rule = NULL;

	if (!mk_param_gemm_ar_fused())
		return "the fused kernel is opt-in in this version (MKERNEL_GEMM_AR_FUSED=1)";
	if (type != ncclBfloat16)
		return "the fused kernel is bf16 only";
	if (!mk_gemm_device_ok())
		return "the device is not sm_90";
	if (c->topo.nnodes > 1)
		return "ranks span several nodes: the fused inter-node stage is not built yet";
	/* The kernel stores into W in the heap (256-byte aligned): check with that destination. */
	mk_gemm_args_init(&g, m, n, k, b_layout, c->heap);
	if (mk_gemm_check(a, b, &g, &rule) != 0) {
		snprintf(why, sizeof(why), "the GEMM engine cannot run it: %s", rule);
		return why;
	}
	return NULL;
}

static ncclResult_t gar_invalid(const char *what)
{
	MK_WARN("mkGemmAllReduce: %s; nothing launched", what);
	return ncclInvalidArgument;
}

MK_API ncclResult_t mkGemmAllReduce(const void *a, const void *b, void *c, size_t m, size_t n,
				    size_t k, ncclDataType_t type, mkLayout_t bLayout,
				    mkComm_t comm, cudaStream_t stream)
{
	const size_t esz = type == ncclFloat32 ? 4 : 2;
	const char *why;
	int dev = -1, rc;

	if (comm == NULL || a == NULL || b == NULL || c == NULL)
		return gar_invalid("NULL comm or buffer");
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
	why = gar_why_not(comm, a, b, (int)m, (int)n, (int)k, bLayout, type);
	if (why == NULL) {
		MK_INFO(MK_SUBSYS_INIT, "mkGemmAllReduce(M %zu, N %zu, K %zu): fused kernel", m, n,
			k);
		rc = gar_fused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, stream);
		if (rc == 0)
			return ncclSuccess;
		MK_WARN("mkGemmAllReduce: fused kernel failed (%s)", mk_strerror(rc));
		return rc == -ENOMEM ? ncclInvalidUsage : ncclUnhandledCudaError;
	}
	MK_INFO(MK_SUBSYS_INIT, "mkGemmAllReduce(M %zu, N %zu, K %zu): cuBLAS + ncclAllReduce: %s",
		m, n, k, why);
	rc = gar_unfused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, type, stream);
	if (rc) {
		MK_WARN("mkGemmAllReduce: unfused path failed (%s)", mk_strerror(rc));
		return ncclUnhandledCudaError;
	}
	return ncclSuccess;
}
