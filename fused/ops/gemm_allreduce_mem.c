// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce's memory and the launch of its fused kernel (gemm_allreduce.cu).
 *
 * Per comm, for the comm's life (the op's slot on the comm, released by mk_comm_free): `seen`
 * (what every signal word's arrivals earlier calls consumed), the call total, and the rank of my
 * local rank on every node (device memory). Per output shape, one at a time, in the symmetric
 * heap: W (my bf16 partial, M x N), R (results of my slice for my node peers, with several
 * ranks per node), the landing area (other nodes' sums of my slice, with several nodes), then the
 * flag words. Offsets are symmetric, so a node peer's W, R and flags are its mapped heap plus the
 * same offsets. A new shape replaces the shape's memory: the ranks allocate the same sizes in
 * the same order (collective, host-synchronising: warm up before graph capture), zero the flags
 * and pass a barrier before any kernel can read them.
 *
 * The one-shot path keeps its own shape, set up the same way: my partial, my LL lines of it
 * (two parities), and with several nodes my node-sum slice (two parities: the put's source),
 * the landing area (two parities x the other nodes) and the LL lines of my final slice, then
 * three counters. Its signals are the last `nnodes` words of mkGemmAllReduce's half of the
 * comm's (mk_gar1_sig_end: one per source node), which the fused kernel leaves alone.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/gemm_allreduce.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/runtime/comm.h"
#include "fused/runtime/runtime_params.h"
#include "mk/log.h"

struct mk_gar_shape {
	int m, n, tiles, rows;
	void *w, *r, *land, *flags; /* in my heap; a node peer's are at the same offsets */
	int *order_d;		    /* compute order, my slice first */
};

/* The one-shot path's memory for one output shape (all in my heap). */
struct mk_gar1_shape {
	int m, n, lines, slice_lines;
	void *part, *ll, *nsum, *land, *llf, *flags;
};

struct mk_gar_state {
	unsigned long long *seen; /* device [nsignals], then the call total */
	int *remote_d;		  /* device [nnodes] */
	unsigned long long *trace;
	int trace_on;
	struct mk_gar_shape *shape;
	struct mk_gar1_shape *one;
	/* The last output shape of each path that did not fit, with the other path's memory given
	 * back: its calls take another path at once, without a collective attempt each time. */
	int nofit_m, nofit_n, nofit1_m, nofit1_n;
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

/* A shape's heap pieces back to the heap; the shape stays, ready for another allocation. */
static void gar_shape_release(struct mk_comm *c, struct mk_gar_shape *s)
{
	void **const pieces[] = { &s->w, &s->r, &s->land, &s->flags };

	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		mk_comm_heap_free(c, *pieces[i]);
		*pieces[i] = NULL;
	}
}

static void gar_shape_free(struct mk_comm *c, struct mk_gar_shape *s)
{
	if (s == NULL)
		return;
	gar_shape_release(c, s);
	cudaFree(s->order_d);
	free(s);
}

static void gar1_shape_release(struct mk_comm *c, struct mk_gar1_shape *s)
{
	void **const pieces[] = { &s->part, &s->ll, &s->nsum, &s->land, &s->llf, &s->flags };

	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		mk_comm_heap_free(c, *pieces[i]);
		*pieces[i] = NULL;
	}
}

static void gar1_shape_free(struct mk_comm *c, struct mk_gar1_shape *s)
{
	if (s == NULL)
		return;
	gar1_shape_release(c, s);
	free(s);
}

static void gar_state_free(struct mk_comm *c, void *state)
{
	struct mk_gar_state *st = state;

	if (st == NULL)
		return;
	gar_shape_free(c, st->shape);
	gar1_shape_free(c, st->one);
	cudaFree(st->seen);
	cudaFree(st->remote_d);
	cudaFree(st->trace);
	free(st);
}

/* Released by mk_comm_free through this record (fused/runtime/comm_ops.h). */
MK_COMM_OP(gemm_allreduce, .state_free = gar_state_free);

static struct mk_gar_state *gar_state_of(const struct mk_comm *c)
{
	return mk_comm_op_get(&c->op_slots, &mk_comm_op_gemm_allreduce);
}

static int gar_state_get(struct mk_comm *c, struct mk_gar_state **out)
{
	struct mk_gar_state *st = gar_state_of(c);
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
	if (rc == 0)
		rc = mk_comm_op_put(&c->op_slots, &mk_comm_op_gemm_allreduce, st);
	if (rc) {
		gar_state_free(c, st);
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

/*
 * Heap pieces of a shape; -ENOMEM when the heap is too small (with `warn`, a WARN says how much).
 * The landing area and the flags are sized for the largest slice, not mine (mk_gar_rows_max).
 */
static int gar_shape_alloc(struct mk_comm *c, struct mk_gar_shape *s, int warn)
{
	const int rows_max = mk_gar_rows_max((s->m + MK_GEMM_BM - 1) / MK_GEMM_BM, c->topo.nlocal);
	const size_t mat = (size_t)s->m * s->n * 2;
	const size_t land = (size_t)(c->topo.nnodes - 1) * rows_max * MK_GEMM_BM * s->n * 2;
	const size_t flags = gar_words_of(s->tiles, rows_max).bytes;

	/* One rank in all: the engine stores straight into C, nothing else is needed. */
	if (c->nranks == 1)
		return mkMemAlloc(c, flags, &s->flags) == ncclSuccess ? 0 : -ENOMEM;
	if (mkMemAlloc(c, mat, &s->w) == ncclSuccess &&
	    (c->topo.nlocal == 1 || mkMemAlloc(c, mat, &s->r) == ncclSuccess) &&
	    (c->topo.nnodes == 1 || mkMemAlloc(c, land, &s->land) == ncclSuccess) &&
	    mkMemAlloc(c, flags, &s->flags) == ncclSuccess)
		return 0;
	if (warn)
		MK_WARN("mkGemmAllReduce M %d x N %d needs %zu bytes of symmetric heap "
			"(partials %zu, results %zu, landing area %zu, flags %zu): raise "
			"MKERNEL_SYMM_HEAP or mkConfig_t.heapBytes; running cuBLAS + "
			"ncclAllReduce instead",
			s->m, s->n,
			mat + (c->topo.nlocal > 1 ? mat : 0) + (c->topo.nnodes > 1 ? land : 0) +
				flags,
			mat, c->topo.nlocal > 1 ? mat : 0, c->topo.nnodes > 1 ? land : 0, flags);
	return -ENOMEM;
}

/*
 * Make room for one path's shape by giving back the other path's memory (`one`: the one-shot
 * path needs room, the fused kernel's shape goes). Peers' kernels may still read it: everyone
 * drains first. Every rank gets here together (their heaps are in step). 0, -ENOMEM when there
 * is nothing to give back, -EIO.
 */
static int gar_evict_other(struct mk_comm *c, struct mk_gar_state *st, int one)
{
	if ((one ? (void *)st->shape : (void *)st->one) == NULL)
		return -ENOMEM;
	if (cudaDeviceSynchronize() != cudaSuccess || mk_comm_barrier(c) != 0)
		return -EIO;
	if (one) {
		gar_shape_free(c, st->shape);
		st->shape = NULL;
	} else {
		gar1_shape_free(c, st->one);
		st->one = NULL;
	}
	return 0;
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
	if (st->nofit_m == m && st->nofit_n == n)
		return -ENOMEM;
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
	s->rows = mk_gar_rows(tiles_m, c->topo.local_rank, c->topo.nlocal);
	rc = gar_shape_alloc(c, s, st->one == NULL);
	if (rc == -ENOMEM && st->one != NULL) {
		/* the one-shot path's memory may be what is in the way */
		gar_shape_release(c, s);
		rc = gar_evict_other(c, st, 0);
		if (rc == 0)
			rc = gar_shape_alloc(c, s, 1);
	}
	if (rc == -ENOMEM) {
		st->nofit_m = m;
		st->nofit_n = n;
	}
	wd = gar_words_of(s->tiles, s->rows);
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
	return mk_gar_share(c->sms, c->gpu_share);
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
	const struct mk_gar_state *st = gar_state_of(c);

	if (st == NULL || st->trace == NULL)
		return -EINVAL;
	*ctas = gar_share(c);
	return cudaMemcpy(out, st->trace,
			  (size_t)*ctas * MK_GAR_TRACE_WORDS * sizeof(unsigned long long),
			  cudaMemcpyDeviceToHost) == cudaSuccess
		       ? 0
		       : -EIO;
}

int mk_gar_split_now(struct mk_comm *c, int out[MK_GAR_ROLES], struct mk_gar_ctl *ctl)
{
	const struct mk_gar_state *st = gar_state_of(c);
	const struct mk_gar_shape *s = st != NULL ? st->shape : NULL;
	struct gar_words wd;
	const char *lead;

	if (s == NULL)
		return -EINVAL;
	wd = gar_words_of(s->tiles, s->rows);
	/* the node's leader's words: its search drives every rank of the node */
	lead = gar_at_peer(c, 0, s->flags);
	if (cudaMemcpy(out, (unsigned int *)lead + wd.split, MK_GAR_ROLES * sizeof(int),
		       cudaMemcpyDeviceToHost) != cudaSuccess ||
	    (ctl != NULL && cudaMemcpy(ctl, lead + wd.ctl_bytes, sizeof(*ctl),
				       cudaMemcpyDeviceToHost) != cudaSuccess))
		return -EIO;
	return 0;
}

int mk_gar_fused(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
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
	/* the node's leader's: one search per node (fused/ops/adapt_dev.cuh) */
	l.ws.split = (int *)gar_at_peer(c, 0, flags + wd.split);
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

int mk_gar_shape_ready(const struct mk_comm *c, int m, int n)
{
	const struct mk_gar_state *st = gar_state_of(c);

	return st != NULL && st->shape != NULL && st->shape->m == m && st->shape->n == n;
}

/* ---- the one-shot path ---- */

/*
 * Heap pieces of a one-shot shape: zeroed (no line carries an epoch a later call could take for
 * its own, no counter a stale count), allocated in the same order on every rank. -ENOMEM (WARN
 * said how much) when the heap is too small.
 */
static int gar1_shape_alloc(struct mk_comm *c, struct mk_gar1_shape *s, int warn)
{
	const int g = c->topo.nlocal, nodes = c->topo.nnodes;
	const size_t part = (size_t)s->lines * 8, slot = (size_t)s->slice_lines * 8;
	const size_t sizes[] = { part,
				 g > 1 ? 2 * (size_t)s->lines * 16 : 0,
				 nodes > 1 ? 2 * slot : 0,
				 nodes > 1 ? 2 * (size_t)(nodes - 1) * slot : 0,
				 nodes > 1 && g > 1 ? 2 * (size_t)s->slice_lines * 16 : 0,
				 4 * sizeof(unsigned int) };
	void **const where[] = { &s->part, &s->ll, &s->nsum, &s->land, &s->llf, &s->flags };
	size_t total = 0;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		total += sizes[i];
		if (sizes[i] == 0)
			continue;
		if (mkMemAlloc(c, sizes[i], where[i]) != ncclSuccess) {
			if (warn)
				MK_WARN("mkGemmAllReduce M %d x N %d: the one-shot path needs %zu "
					"bytes of symmetric heap or more; raise MKERNEL_SYMM_HEAP "
					"or mkConfig_t.heapBytes; running another path",
					s->m, s->n, total);
			return -ENOMEM;
		}
		if (cudaMemset(*where[i], 0, sizes[i]) != cudaSuccess)
			return -EIO;
	}
	return 0;
}

static int gar1_shape_get(struct mk_comm *c, struct mk_gar_state *st, int m, int n,
			  struct mk_gar1_shape **out)
{
	const long long elems = (long long)m * n;
	struct mk_gar1_shape *s = st->one;
	int rc;

	if (s != NULL && s->m == m && s->n == n) {
		*out = s;
		return 0;
	}
	if (st->nofit1_m == m && st->nofit1_n == n)
		return -ENOMEM;
	/* Peers' kernels of the old shape may still read my lines: everyone drains first. */
	if (s != NULL && (cudaDeviceSynchronize() != cudaSuccess || mk_comm_barrier(c) != 0))
		return -EIO;
	gar1_shape_free(c, s);
	st->one = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->m = m;
	s->n = n;
	s->lines = (int)((elems + 3) / 4);
	s->slice_lines = (s->lines + c->topo.nlocal - 1) / c->topo.nlocal;
	rc = gar1_shape_alloc(c, s, st->shape == NULL);
	if (rc == -ENOMEM && st->shape != NULL) {
		/* the fused kernel's memory may be what is in the way */
		gar1_shape_release(c, s);
		rc = gar_evict_other(c, st, 1);
		if (rc == 0)
			rc = gar1_shape_alloc(c, s, 1);
	}
	if (rc == -ENOMEM) {
		st->nofit1_m = m;
		st->nofit1_n = n;
	}
	if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_comm_barrier(c);
	if (rc) {
		gar1_shape_free(c, s);
		return rc;
	}
	st->one = s;
	*out = s;
	return 0;
}

int mk_gar_oneshot_ready(const struct mk_comm *c, int m, int n)
{
	const struct mk_gar_state *st = gar_state_of(c);

	return st != NULL && st->one != NULL && st->one->m == m && st->one->n == n;
}

int mk_gar_oneshot(struct mk_comm *c, const void *a, const void *b, void *cc, int m, int n, int k,
		   int b_layout, cudaStream_t stream)
{
	struct mk_gar1_launch l;
	struct mk_gar_state *st;
	struct mk_gar1_shape *s;
	unsigned int *flags;
	int rc, grid;

	rc = gar_state_get(c, &st);
	if (rc == 0)
		rc = gar1_shape_get(c, st, m, n, &s);
	if (rc)
		return rc;
	/* The GEMM into my partial: the faster path for the shape (engine or cuBLASLt). */
	rc = mk_gemm_dispatch(a, b, s->part, m, n, k, b_layout == MK_GEMM_B_NK, stream, NULL, NULL);
	if (rc)
		return rc;
	memset(&l, 0, sizeof(l));
	l.c = cc;
	l.elems = (long long)m * n;
	l.lines = s->lines;
	l.slice_lines = s->slice_lines;
	l.local_rank = c->topo.local_rank;
	l.nlocal = c->topo.nlocal;
	l.node = c->topo.node;
	l.nnodes = c->topo.nnodes;
	l.ws.part = s->part;
	for (int p = 0; p < c->topo.nlocal; p++) {
		l.ws.ll[p] = s->ll != NULL ? gar_at_peer(c, p, s->ll) : NULL;
		l.ws.llf[p] = s->llf != NULL ? gar_at_peer(c, p, s->llf) : NULL;
	}
	l.ws.nsum = s->nsum;
	l.ws.nsum_off = s->nsum != NULL ? (uint64_t)((char *)s->nsum - c->heap) : 0;
	l.ws.land_off = s->land != NULL ? (uint64_t)((char *)s->land - c->heap) : 0;
	flags = s->flags;
	l.ws.calls = flags;
	l.ws.arrive = flags + 1;
	l.ws.exits = flags + 2;
	l.ws.remote = st->remote_d;
	l.ws.seen = st->seen;
	l.ws.sig_base = mk_gar1_sig_end((uint32_t)c->nsignals) - (uint32_t)c->topo.nnodes;
	l.ws.error = c->kerr;
	l.ws.timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
	mk_comm_dev(c, &l.dc);
	grid = mk_gar1_grid(c->topo.nnodes > 1 ? s->slice_lines : s->lines, gar_share(c),
			    c->gpu_share, (int)mk_param_gemm_ar_oneshot_ctas());
	return mk_gar1_launch(&l, grid, stream);
}
