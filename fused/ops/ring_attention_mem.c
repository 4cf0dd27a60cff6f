// SPDX-License-Identifier: Apache-2.0
/*
 * mkRingAttention's memory and the launch of its fused kernel (ring_attention.cu).
 *
 * Per comm, for the comm's life (the op's slot, released by mk_comm_free): `seen` (what every
 * ring signal word's arrivals earlier calls consumed), the rank of my local index on every node,
 * and per-rank scratch (fp32 partials, an LSE row when the caller gives none, the unfused path's
 * gathered K and V). Per shape, one at a time, in the symmetric heap (ring_attention_plan.h:
 * struct mk_ring_mem): my published K and V, the landing slots, the flag words. Offsets are
 * symmetric, so a node peer's block, slots and flags are its mapped heap plus the same offsets;
 * each step's K and V tensor maps point there (device memory, built once per shape). A new shape
 * replaces the old one collectively (host-synchronising: warm up before graph capture): the ranks
 * first check they all called with the same shape, then allocate the same sizes in the same
 * order, zero the flags and pass a barrier before any kernel can read them.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/ring_attention.h"
#include "fused/ops/ring_attention_host.h"
#include "fused/runtime/comm.h"
#include "mk/log.h"

/* Bytes per put to another node: big enough to amortise a command, small enough to pipeline. */
#define RING_CHUNK (4ull << 20)

static void ring_shape_free(struct mk_comm *c, struct mk_ring_shape *s)
{
	if (s == NULL)
		return;
	mk_comm_heap_free(c, s->heap);
	cudaFree(s->maps_d);
	free(s);
}

static void ring_state_free(struct mk_comm *c, void *state)
{
	struct mk_ring_state *st = state;

	if (st == NULL)
		return;
	ring_shape_free(c, st->shape);
	cudaFree(st->seen);
	cudaFree(st->remote_d);
	cudaFree(st->acc);
	cudaFree(st->lse);
	cudaFree(st->kg);
	cudaFree(st->vg);
	free(st);
}

/* Released by mk_comm_free through this record (fused/runtime/comm_ops.h). */
MK_COMM_OP(ring_attention, .state_free = ring_state_free);

struct mk_ring_state *mk_ring_state_of(const struct mk_comm *c)
{
	return mk_comm_op_get(&c->op_slots, &mk_comm_op_ring_attention);
}

int mk_ring_state_get(struct mk_comm *c, struct mk_ring_state **out)
{
	struct mk_ring_state *st = mk_ring_state_of(c);
	const int nn = c->topo.nnodes;
	int *remote = NULL, rc = -EIO;

	if (st != NULL) {
		*out = st;
		return 0;
	}
	st = calloc(1, sizeof(*st));
	remote = malloc((size_t)nn * sizeof(int));
	if (st == NULL || remote == NULL) {
		free(st);
		free(remote);
		return -ENOMEM;
	}
	st->last_path = -1;
	for (int n = 0; n < nn; n++)
		remote[n] = -1;
	for (int r = 0; r < c->nranks; r++) {
		if (c->topo.local_of[r] == c->topo.local_rank)
			remote[c->topo.node_of[r]] = r;
	}
	if (cudaMalloc((void **)&st->seen, 2 * (size_t)nn * sizeof(unsigned long long)) ==
		    cudaSuccess &&
	    cudaMemset(st->seen, 0, 2 * (size_t)nn * sizeof(unsigned long long)) == cudaSuccess &&
	    cudaMalloc((void **)&st->remote_d, (size_t)nn * sizeof(int)) == cudaSuccess &&
	    cudaMemcpy(st->remote_d, remote, (size_t)nn * sizeof(int), cudaMemcpyHostToDevice) ==
		    cudaSuccess)
		rc = 0;
	free(remote);
	if (rc == 0)
		rc = mk_comm_op_put(&c->op_slots, &mk_comm_op_ring_attention, st);
	if (rc) {
		ring_state_free(c, st);
		return rc;
	}
	*out = st;
	return 0;
}

static int ring_capturing(cudaStream_t stream);

static int ring_grow(void **p, size_t *have, size_t want, cudaStream_t stream)
{
	if (want <= *have)
		return 0;
	if (ring_capturing(stream))
		return -EOPNOTSUPP;
	cudaFree(*p);
	*p = NULL;
	*have = 0;
	if (cudaMalloc(p, want) != cudaSuccess) {
		*p = NULL;
		return -ENOMEM;
	}
	*have = want;
	return 0;
}

int mk_ring_scratch(struct mk_ring_state *st, size_t acc, size_t lse, size_t gathered,
		    cudaStream_t stream)
{
	int rc = ring_grow((void **)&st->acc, &st->acc_bytes, acc, stream);

	if (rc == 0)
		rc = ring_grow((void **)&st->lse, &st->lse_bytes, lse, stream);
	if (rc == 0 && gathered > st->g_bytes) {
		size_t kb = st->g_bytes;

		rc = ring_grow(&st->kg, &kb, gathered, stream);
		if (rc == 0)
			rc = ring_grow(&st->vg, &st->g_bytes, gathered, stream);
	}
	return rc;
}

void mk_ring_geom_of(const struct mk_comm *c, const struct mk_ring_call *x, struct mk_ring_geom *g)
{
	memset(g, 0, sizeof(*g));
	g->nranks = c->nranks;
	g->rank = c->rank;
	g->nnodes = c->topo.nnodes;
	g->node = c->topo.node;
	g->nlocal = c->topo.nlocal;
	g->local = c->topo.local_rank;
	g->node_of = c->topo.node_of;
	g->local_of = c->topo.local_of;
	g->causal = x->causal;
	g->seq_local = x->seq_local;
}

static int ring_same_key(const struct mk_ring_shape *s, const struct mk_ring_call *x)
{
	return s != NULL && s->batch == x->batch && s->heads_q == x->heads_q &&
	       s->heads_kv == x->heads_kv && s->seq_local == x->seq_local &&
	       s->head_dim == x->head_dim && s->causal == x->causal;
}

int mk_ring_shape_ready(const struct mk_comm *c, const struct mk_ring_call *x)
{
	const struct mk_ring_state *st = mk_ring_state_of(c);

	return st != NULL && ring_same_key(st->shape, x);
}

/* The address in node peer p's mapped heap of what `mine` is in my heap (symmetric offsets). */
static char *ring_at_peer(const struct mk_comm *c, int p, const void *mine)
{
	return c->peer_base[p] + ((const char *)mine - c->heap);
}

/* Every step's K and V maps where the step reads them from: a node peer's published block or a
 * landing slot at the rank of my node that holds it (my own block: the role's maps per call). */
static int ring_maps(struct mk_comm *c, const struct mk_ring_call *x, struct mk_ring_shape *s)
{
	const int R = c->nranks, sl = x->seq_local;
	CUtensorMap *h = calloc(2 * (size_t)R, sizeof(*h));
	int rc = 0;

	if (h == NULL)
		return -ENOMEM;
	for (int k = 0; k < R && rc == 0; k++) {
		const struct mk_ring_step *st = &s->steps[k];
		const char *src;

		if (st->where == MK_RING_SELF)
			continue;
		src = ring_at_peer(c, st->holder, s->heap) +
		      (st->where == MK_RING_PEER
			       ? s->mem.kv_off
			       : s->mem.land_off + (size_t)st->slot * 2 * s->mem.blk);
		rc = mk_attn_encode_map(&h[2 * k], src, x->head_dim, x->heads_kv, sl, sl, x->batch,
					MK_ATTN_BN);
		if (rc == 0)
			rc = mk_attn_encode_map(&h[2 * k + 1], src + s->mem.blk, x->head_dim,
						x->heads_kv, sl, sl, x->batch, MK_ATTN_BN);
	}
	if (rc == 0 &&
	    (cudaMalloc((void **)&s->maps_d, 2 * (size_t)R * sizeof(*h)) != cudaSuccess ||
	     cudaMemcpy(s->maps_d, h, 2 * (size_t)R * sizeof(*h), cudaMemcpyHostToDevice) !=
		     cudaSuccess))
		rc = -EIO;
	free(h);
	return rc;
}

/* Under CUDA-graph capture nothing that synchronises the host may run. */
static int ring_capturing(cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	return cudaStreamIsCapturing(stream, &cap) != cudaSuccess ||
	       cap != cudaStreamCaptureStatusNone;
}

int mk_ring_check_key(struct mk_comm *c, struct mk_ring_state *st, const struct mk_ring_call *x,
		      cudaStream_t stream)
{
	const int key[MK_RING_KEY] = { x->batch,     x->heads_q,  x->heads_kv,
				       x->seq_local, x->head_dim, x->causal };
	int *all, rc;

	if (st->key_ok && memcmp(st->key, key, sizeof(key)) == 0)
		return 0;
	if (ring_capturing(stream))
		return -EOPNOTSUPP;
	all = malloc((size_t)c->nranks * sizeof(key));
	if (all == NULL)
		return -ENOMEM;
	rc = mk_comm_allgather(c, key, all, sizeof(key));
	for (int r = 0; rc == 0 && r < c->nranks; r++) {
		const int *k = &all[MK_RING_KEY * r];

		if (memcmp(k, key, sizeof(key)) != 0) {
			MK_WARN("mkRingAttention: rank %d called with (B %d, Hq %d, Hkv %d, S_l "
				"%d, D %d, causal %d), rank %d with (B %d, Hq %d, Hkv %d, S_l %d, "
				"D %d, causal %d): every rank must pass the same shape",
				c->rank, key[0], key[1], key[2], key[3], key[4], key[5], r, k[0],
				k[1], k[2], k[3], k[4], k[5]);
			rc = -EINVAL;
		}
	}
	free(all);
	if (rc == 0) {
		memcpy(st->key, key, sizeof(key));
		st->key_ok = 1;
	}
	return rc;
}

/*
 * A new shape: every rank must have called with the same one (checked first, so a mismatch is an
 * error on every rank, not a hang), then the collective allocation, maps, zeroed flags, barrier.
 */
static int ring_shape_get(struct mk_comm *c, struct mk_ring_state *st, const struct mk_ring_call *x,
			  const struct mk_gar_split *sp, cudaStream_t stream,
			  struct mk_ring_shape **out)
{
	struct mk_ring_geom g;
	struct mk_ring_shape *s = st->shape;
	int rc;

	if (ring_same_key(s, x)) {
		*out = s;
		return 0;
	}
	rc = mk_ring_check_key(c, st, x, stream);
	if (rc)
		return rc;
	/* Peers' kernels of the old shape may still read my block and slots: everyone drains. */
	if (s != NULL && (cudaDeviceSynchronize() != cudaSuccess || mk_comm_barrier(c) != 0))
		return -EIO;
	ring_shape_free(c, s);
	st->shape = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->batch = x->batch;
	s->heads_q = x->heads_q;
	s->heads_kv = x->heads_kv;
	s->seq_local = x->seq_local;
	s->head_dim = x->head_dim;
	s->causal = x->causal;
	mk_ring_geom_of(c, x, &g);
	rc = mk_ring_steps(&g, s->steps, NULL);
	if (rc == 0)
		rc = mk_ring_mem_plan(x->batch, x->seq_local, x->heads_kv, x->head_dim,
				      c->topo.nnodes, sizeof(struct mk_ring_flags), &s->mem);
	if (rc == 0 && mkMemAlloc(c, s->mem.bytes, (void **)&s->heap) != ncclSuccess) {
		MK_WARN("mkRingAttention (B %d, Hkv %d, seqLocal %d, D %d) needs %zu bytes of "
			"symmetric heap (my K and V %zu, landing slots %zu, flags %zu): raise "
			"MKERNEL_SYMM_HEAP or mkConfig_t.heapBytes; running ncclAllGather + the "
			"attention engine instead",
			x->batch, x->heads_kv, x->seq_local, x->head_dim, s->mem.bytes,
			2 * s->mem.blk, s->mem.flags_off - s->mem.land_off,
			sizeof(struct mk_ring_flags));
		s->heap = NULL;
		rc = -ENOMEM;
	}
	if (rc == 0)
		rc = mk_ring_prepare(); /* shared-memory limit; loads the kernel before it is needed
					 */
	if (rc == 0)
		rc = ring_maps(c, x, s);
	/* Flags from an earlier use of this heap range must be gone before any peer reads them;
	 * the adaptive controller starts from the static split. */
	if (rc == 0) {
		struct mk_ring_flags *f = (struct mk_ring_flags *)(s->heap + s->mem.flags_off);

		if (cudaMemset(f, 0, sizeof(*f)) != cudaSuccess ||
		    cudaMemcpy(f->split, sp->sms, sizeof(sp->sms), cudaMemcpyHostToDevice) !=
			    cudaSuccess ||
		    cudaDeviceSynchronize() != cudaSuccess)
			rc = -EIO;
	}
	if (rc == 0)
		rc = mk_comm_barrier(c);
	if (rc) {
		ring_shape_free(c, s);
		return rc;
	}
	st->shape = s;
	*out = s;
	return 0;
}

/* The compute role's steps: the plan's, each with its source's maps and readiness gate. */
static void ring_jobs(const struct mk_comm *c, const struct mk_ring_shape *s,
		      struct mk_attn_args *a)
{
	a->njobs = c->nranks;
	for (int k = 0; k < c->nranks; k++) {
		const struct mk_ring_step *st = &s->steps[k];
		struct mk_attn_job *j = &a->job[k];
		const struct mk_ring_flags *hf =
			(const struct mk_ring_flags *)(ring_at_peer(c, st->holder, s->heap) +
						       s->mem.flags_off);

		memset(j, 0, sizeof(*j));
		j->q_row0 = st->q_row0;
		j->sq = st->sq;
		j->kv_row0 = st->kv_row0;
		j->skv = st->skv;
		j->causal = st->causal;
		j->diag = st->diag;
		j->fresh_lo = st->fresh_lo;
		j->fresh_hi = st->fresh_hi;
		j->final_lo = st->final_lo;
		j->final_hi = st->final_hi;
		if (st->where == MK_RING_SELF)
			continue;
		j->kv_maps = &s->maps_d[2 * k];
		j->gate = st->where == MK_RING_PEER ? &hf->published : &hf->landed[st->slot];
		j->gate_value = 1; /* this call's number: the role's gate base is my call count */
	}
}

int mk_ring_fused(struct mk_comm *c, const struct mk_ring_call *x, const struct mk_gar_split *sp,
		  int adaptive, cudaStream_t stream)
{
	const size_t rows = (size_t)x->batch * x->seq_local;
	struct mk_ring_launch *l;
	struct mk_attn_tmaps maps;
	struct mk_ring_state *st;
	struct mk_ring_shape *s;
	struct mk_ring_flags *f;
	int rc;

	rc = mk_ring_state_get(c, &st);
	if (rc == 0)
		rc = ring_shape_get(c, st, x, sp, stream, &s);
	if (rc == 0)
		rc = mk_ring_scratch(st, rows * x->heads_q * x->head_dim * sizeof(float),
				     x->lse == NULL ? rows * x->heads_q * sizeof(float) : 0, 0,
				     stream);
	if (rc)
		return rc;
	l = calloc(1, sizeof(*l)); /* large (the jobs): not on the stack */
	if (l == NULL)
		return -ENOMEM;
	f = (struct mk_ring_flags *)(s->heap + s->mem.flags_off);
	mk_attn_args_init(&l->attn, x->q, x->k, x->v, x->o, x->lse != NULL ? x->lse : st->lse,
			  x->batch, x->heads_q, x->heads_kv, x->seq_local, x->seq_local,
			  x->head_dim, 0);
	l->attn.acc = st->acc;
	ring_jobs(c, s, &l->attn);
	l->attn.gate_base = &f->calls;
	l->attn.done = &f->done;
	l->attn.counter = &f->units;
	l->attn.error = c->kerr;
	l->attn.timeout_ns = (unsigned long long)c->timeout_ms * 1000000ull;
	rc = mk_attn_plan(&l->attn, MK_ATTN_BM(x->head_dim), NULL);
	if (rc == 0)
		rc = mk_attn_encode_map(&maps.q, x->q, x->head_dim, x->heads_q, x->seq_local,
					x->seq_local, x->batch, MK_ATTN_BM(x->head_dim));
	if (rc == 0)
		rc = mk_attn_encode_map(&maps.k, x->k, x->head_dim, x->heads_kv, x->seq_local,
					x->seq_local, x->batch, MK_ATTN_BN);
	if (rc == 0)
		rc = mk_attn_encode_map(&maps.v, x->v, x->head_dim, x->heads_kv, x->seq_local,
					x->seq_local, x->batch, MK_ATTN_BN);
	if (rc == 0) {
		l->k = x->k;
		l->v = x->v;
		l->blk = s->mem.blk;
		l->kv_off = (uint64_t)(s->heap - c->heap) + s->mem.kv_off;
		l->land_off = (uint64_t)(s->heap - c->heap) + s->mem.land_off;
		l->chunk = RING_CHUNK;
		l->nnodes = c->topo.nnodes;
		l->node = c->topo.node;
		l->nlocal = c->topo.nlocal;
		l->local = c->topo.local_rank;
		l->adaptive = adaptive;
		l->split = *sp;
		l->flags = f;
		l->lead = (const struct mk_ring_flags *)(ring_at_peer(c, 0, s->heap) +
							 s->mem.flags_off);
		for (int p = 0; p < c->topo.nlocal; p++)
			l->peer_calls[p] = &((struct mk_ring_flags *)(ring_at_peer(c, p, s->heap) +
								      s->mem.flags_off))
						    ->calls;
		l->seen = st->seen;
		l->remote = st->remote_d;
		l->sig_kv = mk_ring_sig_kv(c->nsignals, c->topo.nnodes, 0);
		l->sig_free = mk_ring_sig_free(c->nsignals, c->topo.nnodes, 0);
		mk_comm_dev(c, &l->dc);
		rc = mk_ring_launch(l, &maps, stream);
	}
	free(l);
	return rc;
}
