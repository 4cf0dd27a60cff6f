// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce: argument checks, the choice between the fused kernel (gemm_allreduce.cu) and
 * the unfused path (cuBLAS, then ncclAllReduce on the same stream), the SM split from the policy
 * engine, and the fused kernel's memory.
 *
 * Memory. Per comm, for the comm's life: `seen` (what every signal word's arrivals earlier calls
 * consumed), the call total, and the rank of my local rank on every node (device memory). Per
 * output shape, one at a time, in the symmetric heap: W (my bf16 partial, M x N), R (results
 * of my slice for my node peers, with several ranks per node), the landing area (other nodes'
 * sums of my slice, with several nodes), then the flag words. Offsets are symmetric, so a node
 * peer's W, R and flags are its mapped heap plus the same offsets. A new shape replaces the
 * shape's memory: the ranks allocate the same sizes in the same order (collective,
 * host-synchronising: warm up before graph capture), zero the flags and pass a barrier before
 * any kernel can read them.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/gemm_fallback.h"
#include "fused/ops/gemm_allreduce.h"
#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/runtime/comm.h"
#include "fused/runtime/runtime_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/result.h"
#include "tuner/policy.h"

struct mk_gar_shape {
	int m, n, tiles, rows;
	void *w, *r, *land, *flags; /* in my heap; a node peer's are at the same offsets */
	int *order_d;		    /* compute order, my slice first */
};

struct mk_gar_state {
	unsigned long long *seen; /* device [nsignals], then the call total */
	int *remote_d;		  /* device [nnodes] */
	unsigned long long *trace;
	int trace_on;
	struct mk_gar_shape *shape;
};

/* Flag words of a shape (u32 indices), then the controller's words (byte offsets). */
struct gar_words {
	size_t ready, final, calls, exits, tickets, split, row_done;
	size_t busy_bytes, t_start_bytes, ctl_bytes, bytes;
};

static struct gar_words gar_words_of(int tiles, int rows)
{
	struct gar_words w;

	w.ready = 0;
	w.final = (size_t)tiles;
	w.calls = 2 * (size_t)tiles;
	w.exits = w.calls + 1;
	w.tickets = w.exits + 1;
	w.split = w.tickets + MK_GAR_TICKETS;
	w.row_done = w.split + MK_GAR_ROLES;
	w.busy_bytes = ((w.row_done + (size_t)rows) * sizeof(unsigned int) + 7) & ~(size_t)7;
	w.t_start_bytes = w.busy_bytes + MK_GAR_ROLES * sizeof(unsigned long long);
	w.ctl_bytes = w.t_start_bytes + sizeof(unsigned long long);
	w.bytes = w.ctl_bytes + sizeof(struct mk_gar_ctl);
	return w;
}

/* Tile rows of local rank `lr`'s slice. */
static int gar_rows(int tiles_m, int lr, int nlocal)
{
	return lr < tiles_m ? (tiles_m - lr + nlocal - 1) / nlocal : 0;
}

static void gar_shape_free(struct mk_comm *c, struct mk_gar_shape *s)
{
	if (s == NULL)
		return;
	if (s->w != NULL)
		mkMemFree(c, s->w);
	if (s->r != NULL)
		mkMemFree(c, s->r);
	if (s->land != NULL)
		mkMemFree(c, s->land);
	if (s->flags != NULL)
		mkMemFree(c, s->flags);
	cudaFree(s->order_d);
	free(s);
}

static void gar_state_free(struct mk_comm *c)
{
	struct mk_gar_state *st = c->gar;

	if (st == NULL)
		return;
	gar_shape_free(c, st->shape);
	cudaFree(st->seen);
	cudaFree(st->remote_d);
	cudaFree(st->trace);
	free(st);
	c->gar = NULL;
}

static int gar_state_get(struct mk_comm *c, struct mk_gar_state **out)
{
	struct mk_gar_state *st = c->gar;
	int *remote = NULL, rc = -EIO;

	if (st != NULL) {
		*out = st;
		return 0;
	}
	st = calloc(1, sizeof(*st));
	remote = malloc((size_t)c->topo.nnodes * sizeof(int));
	if (st == NULL || remote == NULL) {
		free(st);
		free(remote);
		return -ENOMEM;
	}
	c->gar = st;
	c->op_free = gar_state_free;
	for (int nn = 0; nn < c->topo.nnodes; nn++)
		remote[nn] = -1;
	for (int r = 0; r < c->nranks; r++) {
		if (c->topo.local_of[r] == c->topo.local_rank)
			remote[c->topo.node_of[r]] = r;
	}
	if (cudaMalloc((void **)&st->seen, (c->nsignals + 1) * sizeof(unsigned long long)) ==
		    cudaSuccess &&
	    cudaMemset(st->seen, 0, (c->nsignals + 1) * sizeof(unsigned long long)) ==
		    cudaSuccess &&
	    cudaMalloc((void **)&st->remote_d, (size_t)c->topo.nnodes * sizeof(int)) ==
		    cudaSuccess &&
	    cudaMemcpy(st->remote_d, remote, (size_t)c->topo.nnodes * sizeof(int),
		       cudaMemcpyHostToDevice) == cudaSuccess)
		rc = 0;
	free(remote);
	if (rc) {
		gar_state_free(c);
		return rc;
	}
	*out = st;
	return 0;
}

/* The compute order (gemm_allreduce_plan.c) in device memory. */
static int gar_order(struct mk_comm *c, struct mk_gar_shape *s, int tiles_m, int tiles_n)
{
	int *h = malloc((size_t)s->tiles * sizeof(int));
	int rc = -EIO;

	if (h == NULL)
		return -ENOMEM;
	mk_gar_tile_order(tiles_m, tiles_n, c->topo.local_rank, c->topo.nlocal, h);
	if (cudaMalloc((void **)&s->order_d, (size_t)s->tiles * sizeof(int)) == cudaSuccess &&
	    cudaMemcpy(s->order_d, h, (size_t)s->tiles * sizeof(int), cudaMemcpyHostToDevice) ==
		    cudaSuccess)
		rc = 0;
	free(h);
	return rc;
}

/* Heap pieces of a shape; -ENOMEM (WARN said how much) when the heap is too small. */
static int gar_shape_alloc(struct mk_comm *c, struct mk_gar_shape *s)
{
	const size_t mat = (size_t)s->m * s->n * 2;
	const size_t land = (size_t)(c->topo.nnodes - 1) * s->rows * MK_GEMM_BM * s->n * 2;
	const size_t flags = gar_words_of(s->tiles, s->rows).bytes;

	/* One rank in all: the engine stores straight into C, nothing else is needed. */
	if (c->nranks == 1)
		return mkMemAlloc(c, flags, &s->flags) == ncclSuccess ? 0 : -ENOMEM;
	if (mkMemAlloc(c, mat, &s->w) == ncclSuccess &&
	    (c->topo.nlocal == 1 || mkMemAlloc(c, mat, &s->r) == ncclSuccess) &&
	    (c->topo.nnodes == 1 || mkMemAlloc(c, land, &s->land) == ncclSuccess) &&
	    mkMemAlloc(c, flags, &s->flags) == ncclSuccess)
		return 0;
	MK_WARN("mkGemmAllReduce M %d x N %d needs %zu bytes of symmetric heap (partials %zu, "
		"results %zu, landing area %zu, flags %zu): raise MKERNEL_SYMM_HEAP or "
		"mkConfig_t.heapBytes; running cuBLAS + ncclAllReduce instead",
		s->m, s->n,
		mat + (c->topo.nlocal > 1 ? mat : 0) + (c->topo.nnodes > 1 ? land : 0) + flags, mat,
		c->topo.nlocal > 1 ? mat : 0, c->topo.nnodes > 1 ? land : 0, flags);
	return -ENOMEM;
}

static int gar_shape_get(struct mk_comm *c, struct mk_gar_state *st, int m, int n,
			 const struct mk_gar_split *sp, struct mk_gar_shape **out)
{
	const int tiles_m = (m + MK_GEMM_BM - 1) / MK_GEMM_BM,
		  tiles_n = (n + MK_GEMM_BN - 1) / MK_GEMM_BN;
	struct mk_gar_shape *s = st->shape;
	struct gar_words wd;
	int rc;

	if (s != NULL && s->m == m && s->n == n) {
		*out = s;
		return 0;
	}
	/* Peers' kernels of the old shape may still read my W and R: everyone drains first. */
	if (s != NULL && (cudaDeviceSynchronize() != cudaSuccess || mk_comm_barrier(c) != 0))
		return -EIO;
	gar_shape_free(c, s);
	st->shape = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->m = m;
	s->n = n;
	s->tiles = tiles_m * tiles_n;
	s->rows = gar_rows(tiles_m, c->topo.local_rank, c->topo.nlocal);
	wd = gar_words_of(s->tiles, s->rows);
	rc = gar_shape_alloc(c, s);
	if (rc == 0)
		rc = mk_gar_prepare(); /* shared-memory limit; loads the kernel before it is needed
					*/
	if (rc == 0)
		rc = gar_order(c, s, tiles_m, tiles_n);
	/* Flags from an earlier use of this heap range must be gone before any peer reads them;
	 * the adaptive controller starts from the static split. */
	if (rc == 0 && (cudaMemset(s->flags, 0, wd.bytes) != cudaSuccess ||
			cudaMemcpy((unsigned int *)s->flags + wd.split, sp->sms, sizeof(sp->sms),
				   cudaMemcpyHostToDevice) != cudaSuccess ||
			cudaDeviceSynchronize() != cudaSuccess))
		rc = -EIO;
	if (rc == 0)
		rc = mk_comm_barrier(c);
	if (rc) {
		gar_shape_free(c, s);
		return rc;
	}
	st->shape = s;
	*out = s;
	return 0;
}

/* The address in node peer p's mapped heap of what `mine` is in my heap (symmetric offsets). */
static void *gar_at_peer(const struct mk_comm *c, int p, const void *mine)
{
	return c->peer_base[p] + ((const char *)mine - c->heap);
}

static int gar_share(const struct mk_comm *c)
{
	return c->sms / (c->gpu_share > 0 ? c->gpu_share : 1);
}

/* Per-CTA timestamps for benchmarks (gemm_allreduce.h); 0 or -errno. */
int mk_gar_trace(struct mk_comm *c, int on)
{
	struct mk_gar_state *st;
	int rc = gar_state_get(c, &st);

	if (rc)
		return rc;
	if (on && st->trace == NULL &&
	    cudaMalloc((void **)&st->trace, (size_t)gar_share(c) * MK_GAR_TRACE_WORDS *
						    sizeof(unsigned long long)) != cudaSuccess)
		return -ENOMEM;
	st->trace_on = on;
	return 0;
}

int mk_gar_trace_read(struct mk_comm *c, unsigned long long *out, int *ctas)
{
	if (c->gar == NULL || c->gar->trace == NULL)
		return -EINVAL;
	*ctas = gar_share(c);
	return cudaMemcpy(out, c->gar->trace,
			  (size_t)*ctas * MK_GAR_TRACE_WORDS * sizeof(unsigned long long),
			  cudaMemcpyDeviceToHost) == cudaSuccess
		       ? 0
		       : -EIO;
}

int mk_gar_split_now(struct mk_comm *c, int out[MK_GAR_ROLES])
{
	struct mk_gar_shape *s = c->gar != NULL ? c->gar->shape : NULL;

	if (s == NULL)
		return -EINVAL;
	return cudaMemcpy(out, (unsigned int *)s->flags + gar_words_of(s->tiles, s->rows).split,
			  MK_GAR_ROLES * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess
		       ? 0
		       : -EIO;
}

static int gar_fused(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
		     int b_layout, const struct mk_gar_split *sp, int adaptive, cudaStream_t stream)
{
	struct mk_gar_launch l;
	struct mk_gar_state *st;
	struct mk_gar_shape *s;
	struct gar_words wd;
	unsigned int *flags;
	int rc;

	rc = gar_state_get(c, &st);
	if (rc == 0)
		rc = gar_shape_get(c, st, m, n, sp, &s);
	if (rc)
		return rc;
	wd = gar_words_of(s->tiles, s->rows);
	memset(&l, 0, sizeof(l));
	l.a = a;
	l.b = b;
	l.c = cc;
	l.m = m;
	l.n = n;
	l.k = k;
	l.b_layout = b_layout;
	l.local_rank = c->topo.local_rank;
	l.nlocal = c->topo.nlocal;
	l.node = c->topo.node;
	l.nnodes = c->topo.nnodes;
	l.rows = s->rows;
	l.adaptive = adaptive;
	l.split = *sp;
	l.order = s->order_d;
	l.trace = st->trace_on ? st->trace : NULL;
	for (int p = 0; p < c->topo.nlocal; p++) {
		unsigned int *pf = gar_at_peer(c, p, s->flags);

		l.ws.w[p] = s->w != NULL ? gar_at_peer(c, p, s->w) : NULL;
		l.ws.r[p] = s->r != NULL ? gar_at_peer(c, p, s->r) : NULL;
		l.ws.ready[p] = pf + wd.ready;
		l.ws.final[p] = pf + wd.final;
		l.ws.peer_calls[p] = pf + wd.calls;
	}
	flags = s->flags;
	l.ws.calls = flags + wd.calls;
	l.ws.exits = flags + wd.exits;
	l.ws.tickets = flags + wd.tickets;
	l.ws.split = (int *)(flags + wd.split);
	l.ws.row_done = flags + wd.row_done;
	l.ws.busy = (unsigned long long *)((char *)s->flags + wd.busy_bytes);
	l.ws.t_start = (unsigned long long *)((char *)s->flags + wd.t_start_bytes);
	l.ws.ctl = (struct mk_gar_ctl *)((char *)s->flags + wd.ctl_bytes);
	l.ws.w_off = s->w != NULL ? (uint64_t)((char *)s->w - c->heap) : 0;
	l.ws.land_off = s->land != NULL ? (uint64_t)((char *)s->land - c->heap) : 0;
	l.ws.remote = st->remote_d;
	l.ws.seen = st->seen;
	l.ws.total = (unsigned int *)(st->seen + c->nsignals);
	l.ws.sig_done = 2 * (uint32_t)c->nranks; /* after mkAllToAll's words */
	l.ws.sig_rows = l.ws.sig_done + (uint32_t)c->topo.nnodes;
	l.ws.error = c->kerr;
	l.ws.timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
	mk_comm_dev(c, &l.dc);
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

/* MKERNEL_SM_POLICY: 1 adaptive, 0 static, the policy engine's answer when unset. */
static int gar_adaptive(int policy)
{
	const char *v = mk_param_sm_policy();

	if (v == NULL || v[0] == '\0')
		return policy;
	if (strcmp(v, "adaptive") == 0)
		return 1;
	if (strcmp(v, "static") == 0)
		return 0;
	MK_WARN_ONCE("MKERNEL_SM_POLICY=%s: expected 'static' or 'adaptive'; the policy "
		     "engine decides",
		     v);
	return policy;
}

/*
 * Why the fused kernel cannot or should not run this call, or NULL when it runs (*sp and
 * *adaptive set).
 */
static const char *gar_why_not(const struct mk_comm *c, const void *a, const void *b, void *cc,
			       int m, int n, int k, int b_layout, ncclDataType_t type,
			       struct mk_gar_split *sp, int *adaptive)
{
	static __thread char why[200];
	const int force = (int)mk_param_gemm_ar_fused(), share = gar_share(c);
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
			(uint64_t)gar_rows(tiles_m, c->topo.local_rank, c->topo.nlocal);
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
	*adaptive = gar_adaptive(ps.adaptive);
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
	const struct mk_gar_shape *s = c->gar != NULL ? c->gar->shape : NULL;
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (s != NULL && s->m == m && s->n == n)
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
		rc = gar_fused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, &sp, adaptive,
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
	rc = gar_unfused(comm, a, b, c, (int)m, (int)n, (int)k, bLayout, type, stream);
	if (rc) {
		MK_WARN("mkGemmAllReduce: unfused path failed (%s)", mk_strerror(rc));
		return mk_result_api(rc);
	}
	return ncclSuccess;
}
