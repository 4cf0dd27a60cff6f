// SPDX-License-Identifier: Apache-2.0
/*
 * The memory mkGemmReduceScatter and mkAllGatherGemm share (seqpar_host.h).
 *
 * Per op and comm, for the comm's life (the op's slot on the comm, released by mk_comm_free):
 * the op's signal window (`seen`, what each word's arrivals earlier calls consumed, then the
 * op's call total) and the rank of my local rank on every node (device memory). Per shape, one
 * at a time, in the symmetric heap: the op's buffers and the flag words; offsets are symmetric,
 * so a node peer's are its mapped heap plus the same offsets. A new shape replaces the old: the
 * ranks drain, pass a barrier, free and allocate the same sizes in the same order (collective,
 * host-synchronising: warm up before graph capture), zero the words and pass a barrier before
 * any kernel can read them.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fused/gemm/gemm.h"
#include "fused/ops/ag_gemm.h"
#include "fused/ops/gemm_rs.h"
#include "fused/ops/seqpar_host.h"
#include "mk/log.h"

static const int sp_quarter[MK_SP_OPS] = { MK_SP_SIG_QUARTER_GRS, MK_SP_SIG_QUARTER_AGG };

int mk_sp_share(const struct mk_comm *c)
{
	return mk_gar_share(c->sms, c->gpu_share);
}

void mk_sp_rank_at(const struct mk_comm *c, int *rank_at)
{
	for (int r = 0; r < c->nranks; r++)
		rank_at[c->topo.node_of[r] * c->topo.nlocal + c->topo.local_of[r]] = r;
}

static void sp_shape_drop(struct mk_comm *c, struct mk_sp_shape *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < 2; i++)
		mk_comm_heap_free(c, s->mem[i]);
	mk_comm_heap_free(c, s->flags);
	cudaFree(s->order_d);
	cudaFree(s->arrival_d);
	cudaFree(s->want_d);
	free(s);
}

uint32_t mk_sp_window(const struct mk_comm *c)
{
	return c->nsignals / 4;
}

static void sp_state_free(struct mk_comm *c, void *state)
{
	struct mk_sp_state *st = state;

	if (st == NULL)
		return;
	sp_shape_drop(c, st->shape);
	for (int i = 0; i < st->pipe_nev; i++)
		cudaEventDestroy(st->pipe_ev[i]);
	if (st->pipe_stream != NULL)
		cudaStreamDestroy(st->pipe_stream);
	if (st->scratch_pool != NULL)
		cudaMemPoolDestroy(st->scratch_pool); /* deferred while an allocation is out */
	cudaFree(st->seen);
	cudaFree(st->remote_d);
	cudaFree(st->trace);
	free(st);
}

/* The op's scratch pool on the current device, keeping what it holds; NULL where none. */
static cudaMemPool_t sp_pool_make(void)
{
	struct cudaMemPoolProps props;
	cudaMemPool_t pool = NULL;
	uint64_t keep = UINT64_MAX;
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess)
		return NULL;
	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = dev;
	if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
		cudaMemPoolDestroy(pool);
		return NULL;
	}
	return pool;
}

int mk_sp_scratch_alloc(struct mk_sp_state *st, void **p, size_t bytes, cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	*p = NULL;
	if (st != NULL && st->scratch_pool == NULL &&
	    cudaStreamIsCapturing(stream, &cap) == cudaSuccess &&
	    cap == cudaStreamCaptureStatusNone)
		st->scratch_pool = sp_pool_make();
	if (st != NULL && st->scratch_pool != NULL) {
		if (cudaMallocFromPoolAsync(p, bytes, st->scratch_pool, stream) != cudaSuccess)
			return -ENOMEM;
		st->scratch_allocs[1]++;
		return 0;
	}
	if (cudaMallocAsync(p, bytes, stream) != cudaSuccess)
		return -ENOMEM;
	if (st != NULL)
		st->scratch_allocs[0]++;
	return 0;
}

int mk_sp_scratch_free(void *p, cudaStream_t stream)
{
	return p == NULL || cudaFreeAsync(p, stream) == cudaSuccess ? 0 : -EIO;
}

/*
 * At mkCommInit: load both kernels (where the GPU runs them). A kernel loaded lazily at its first
 * launch may wait for this process's kernels already running, and those may be waiting for a
 * peer that waits for this one.
 */
static int sp_comm_init(struct mk_comm *c)
{
	(void)c;
	if (!mk_gemm_device_ok())
		return 0;
	return mk_grs_prepare() == 0 && mk_agg_prepare() == 0 ? 0 : -EIO;
}

/* Each op's record on a comm (its state's slot), released by mk_comm_free. */
MK_COMM_OP(gemm_rs, .comm_init = sp_comm_init, .state_free = sp_state_free);
MK_COMM_OP(ag_gemm, .state_free = sp_state_free);

static const struct mk_comm_op *const sp_records[MK_SP_OPS] = { &mk_comm_op_gemm_rs,
								&mk_comm_op_ag_gemm };

struct mk_sp_state *mk_sp_state_of(const struct mk_comm *c, int op)
{
	return op >= 0 && op < MK_SP_OPS ? mk_comm_op_get(&c->op_slots, sp_records[op]) : NULL;
}

int mk_sp_state_get(struct mk_comm *c, int op, struct mk_sp_state **out)
{
	struct mk_sp_state *st = mk_sp_state_of(c, op);
	int rc;

	if (st != NULL) {
		*out = st;
		return 0;
	}
	st = calloc(1, sizeof(*st));
	if (st == NULL)
		return -ENOMEM;
	st->last_path = -1;
	rc = mk_comm_op_put(&c->op_slots, sp_records[op], st);
	if (rc) {
		free(st);
		return rc;
	}
	*out = st;
	return 0;
}

/*
 * The state's device part, made with the first shape (outside graph capture: the path record
 * of a call under capture must not allocate): `seen` over the window, then the call total, and
 * the rank of my local rank on every node.
 */
static int sp_state_dev(struct mk_comm *c, struct mk_sp_state *st)
{
	const size_t seen_bytes = ((size_t)mk_sp_window(c) + 1) * sizeof(unsigned long long);
	int *remote;
	int rc = -EIO;

	if (st->seen != NULL)
		return 0;
	remote = malloc((size_t)c->topo.nnodes * sizeof(int));
	if (remote == NULL)
		return -ENOMEM;
	for (int nn = 0; nn < c->topo.nnodes; nn++)
		remote[nn] = -1;
	for (int r = 0; r < c->nranks; r++) {
		if (c->topo.local_of[r] == c->topo.local_rank)
			remote[c->topo.node_of[r]] = r;
	}
	if (cudaMalloc((void **)&st->remote_d, (size_t)c->topo.nnodes * sizeof(int)) ==
		    cudaSuccess &&
	    cudaMemcpy(st->remote_d, remote, (size_t)c->topo.nnodes * sizeof(int),
		       cudaMemcpyHostToDevice) == cudaSuccess &&
	    cudaMalloc((void **)&st->seen, seen_bytes) == cudaSuccess) {
		rc = cudaMemset(st->seen, 0, seen_bytes) == cudaSuccess ? 0 : -EIO;
	}
	free(remote);
	if (rc) {
		cudaFree(st->seen);
		cudaFree(st->remote_d);
		st->seen = NULL;
		st->remote_d = NULL;
	}
	return rc;
}

struct mk_sp_words mk_sp_words_of(size_t extra)
{
	struct mk_sp_words w;

	w.calls = 0;
	w.exits = 1;
	w.tickets = 2;
	w.split = w.tickets + MK_SP_TICKETS;
	w.extra = w.split + MK_GAR_ROLES;
	w.busy_bytes = ((w.extra + extra) * sizeof(unsigned int) + 7) & ~(size_t)7;
	w.t_start_bytes = w.busy_bytes + MK_GAR_ROLES * sizeof(unsigned long long);
	w.ctl_bytes = w.t_start_bytes + sizeof(unsigned long long);
	w.bytes = w.ctl_bytes + sizeof(struct mk_gar_ctl);
	return w;
}

/* The current shape (*fresh = 0) or, after draining and releasing the old one, a fresh one for
 * the op to fill (*fresh = 1). */
static int sp_shape_begin(struct mk_comm *c, struct mk_sp_state *st, int m, int n, int k,
			  struct mk_sp_shape **out, int *fresh)
{
	struct mk_sp_shape *s = st->shape;

	*fresh = 0;
	if (s != NULL && s->m == m && s->n == n && s->k == k) {
		*out = s;
		return 0;
	}
	/* Peers' kernels of the old shape may still read my buffers: everyone drains first. */
	if (s != NULL && (cudaDeviceSynchronize() != cudaSuccess || mk_comm_barrier(c) != 0))
		return -EIO;
	sp_shape_drop(c, s);
	st->shape = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->m = m;
	s->n = n;
	s->k = k;
	*out = s;
	*fresh = 1;
	return 0;
}

int mk_sp_shape_mem(struct mk_comm *c, size_t bytes, void **out)
{
	return mkMemAlloc(c, bytes, out) == ncclSuccess ? 0 : -ENOMEM;
}

int mk_sp_shape_upload(const void *host, size_t bytes, void **dev)
{
	if (cudaMalloc(dev, bytes) != cudaSuccess) {
		*dev = NULL;
		return -ENOMEM;
	}
	return cudaMemcpy(*dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -EIO;
}

/* Zero a filled shape's words, start the adaptive split from sp, pass a barrier, make it
 * current; on failure it is released. */
static int sp_shape_commit(struct mk_comm *c, struct mk_sp_state *st, struct mk_sp_shape *s,
			   const struct mk_gar_split *sp)
{
	int rc = 0;

	/* Flags from an earlier use of this heap range must be gone before any peer reads them;
	 * the adaptive controller starts from the static split. */
	if (cudaMemset(s->flags, 0, s->words.bytes) != cudaSuccess ||
	    cudaMemcpy((unsigned int *)s->flags + s->words.split, sp->sms, sizeof(sp->sms),
		       cudaMemcpyHostToDevice) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_comm_barrier(c);
	if (rc) {
		sp_shape_drop(c, s);
		return rc;
	}
	st->shape = s;
	return 0;
}

int mk_sp_shape_get(struct mk_comm *c, int op, int m, int n, int k,
		    int (*fill)(struct mk_comm *c, struct mk_sp_shape *s), int (*prepare)(void),
		    const struct mk_gar_split *sp, struct mk_sp_state **st, struct mk_sp_shape **s)
{
	int fresh, rc;

	rc = mk_sp_state_get(c, op, st);
	if (rc == 0)
		rc = sp_state_dev(c, *st);
	if (rc == 0)
		rc = sp_shape_begin(c, *st, m, n, k, s, &fresh);
	if (rc || !fresh)
		return rc;
	rc = mk_sp_geom_init(&(*s)->geom, m, n, c->nranks);
	if (rc == 0)
		rc = fill(c, *s);
	if (rc == 0)
		rc = prepare(); /* shared-memory limit; loads the kernel before it is needed */
	if (rc) {
		sp_shape_drop(c, *s);
		return rc;
	}
	return sp_shape_commit(c, *st, *s, sp);
}

void *mk_sp_at_peer(const struct mk_comm *c, int p, const void *mine)
{
	return c->peer_base[p] + ((const char *)mine - c->heap);
}

void mk_sp_common_fill(struct mk_comm *c, int op, const struct mk_sp_state *st,
		       const struct mk_sp_shape *s, const struct mk_gar_split *sp, int adaptive,
		       struct mk_sp_common *cm)
{
	const struct mk_sp_words *wd = &s->words;
	unsigned int *flags = s->flags;

	memset(cm, 0, sizeof(*cm));
	cm->local_rank = c->topo.local_rank;
	cm->nlocal = c->topo.nlocal;
	cm->node = c->topo.node;
	cm->nnodes = c->topo.nnodes;
	cm->adaptive = adaptive;
	cm->split = *sp;
	cm->geom = s->geom;
	cm->trace = st->trace_on ? st->trace : NULL;
	for (int p = 0; p < c->topo.nlocal; p++)
		cm->ws.peer_calls[p] = (unsigned int *)mk_sp_at_peer(c, p, flags + wd->calls);
	cm->ws.calls = flags + wd->calls;
	cm->ws.exits = flags + wd->exits;
	cm->ws.tickets = flags + wd->tickets;
	/* the node's leader's: one search per node (fused/ops/adapt_dev.cuh) */
	cm->ws.split = (int *)mk_sp_at_peer(c, 0, flags + wd->split);
	cm->ws.busy = (unsigned long long *)((char *)s->flags + wd->busy_bytes);
	cm->ws.t_start = (unsigned long long *)((char *)s->flags + wd->t_start_bytes);
	cm->ws.ctl = (struct mk_gar_ctl *)((char *)s->flags + wd->ctl_bytes);
	cm->ws.remote = st->remote_d;
	cm->ws.seen = st->seen;
	cm->ws.total = (unsigned int *)(st->seen + mk_sp_window(c));
	cm->ws.sig_base = mk_sp_sig_base(c->nsignals, sp_quarter[op]);
	cm->ws.sig_done = cm->ws.sig_base;
	cm->ws.sig_land = cm->ws.sig_done + (uint32_t)c->topo.nnodes;
	cm->ws.error = c->kerr;
	cm->ws.timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
	mk_comm_dev(c, &cm->dc);
}

int mk_sp_trace(struct mk_comm *c, int op, int on)
{
	struct mk_sp_state *st;
	int rc = mk_sp_state_get(c, op, &st);

	if (rc)
		return rc;
	if (on && st->trace == NULL &&
	    cudaMalloc((void **)&st->trace, (size_t)mk_sp_share(c) * MK_SP_TRACE_WORDS *
						    sizeof(unsigned long long)) != cudaSuccess)
		return -ENOMEM;
	st->trace_on = on;
	return 0;
}

int mk_sp_trace_read(struct mk_comm *c, int op, unsigned long long *out, int *ctas)
{
	const struct mk_sp_state *st = mk_sp_state_of(c, op);

	if (st == NULL || st->trace == NULL)
		return -EINVAL;
	*ctas = mk_sp_share(c);
	return cudaMemcpy(out, st->trace,
			  (size_t)*ctas * MK_SP_TRACE_WORDS * sizeof(unsigned long long),
			  cudaMemcpyDeviceToHost) == cudaSuccess
		       ? 0
		       : -EIO;
}

int mk_sp_split_now(struct mk_comm *c, int op, int out[MK_GAR_ROLES], struct mk_gar_ctl *ctl)
{
	const struct mk_sp_state *st = mk_sp_state_of(c, op);
	const struct mk_sp_shape *s = st != NULL ? st->shape : NULL;
	const char *lead;

	if (s == NULL)
		return -EINVAL;
	/* the node's leader's words: its search drives every rank of the node */
	lead = mk_sp_at_peer(c, 0, s->flags);
	if (cudaMemcpy(out, (const unsigned int *)lead + s->words.split, MK_GAR_ROLES * sizeof(int),
		       cudaMemcpyDeviceToHost) != cudaSuccess ||
	    (ctl != NULL && cudaMemcpy(ctl, lead + s->words.ctl_bytes, sizeof(*ctl),
				       cudaMemcpyDeviceToHost) != cudaSuccess))
		return -EIO;
	return 0;
}
