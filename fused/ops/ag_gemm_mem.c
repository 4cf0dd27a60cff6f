// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllGatherGemm's memory and the launch of its fused kernel (ag_gemm.cu): per shape, in the
 * symmetric heap (seqpar_mem.c keeps one shape at a time), the gather buffer G (M x K: node
 * peers store into it, other nodes' puts land in it), the flag words (arrival flags per tile
 * row, my chunks' counters, the common words) and three orders on the device (compute, arrival,
 * chunks per tile row). One rank alone: the engine reads aShard itself, nothing is kept.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/gemm/gemm.h"
#include "fused/ops/ag_gemm.h"
#include "fused/ops/seqpar_host.h"
#include "mk/log.h"

/* The orders of a shape, built on the host and copied to the device. */
static int agg_orders(struct mk_comm *c, struct mk_sp_shape *s)
{
	const struct mk_sp_geom *g = &s->geom;
	const size_t tiles = (size_t)g->tiles_m * g->tiles_n, chunks = (size_t)c->nranks * g->nch;
	unsigned int *want = malloc((size_t)g->tiles_m * sizeof(*want));
	int *arrival = malloc(chunks * sizeof(int)), *order = malloc(tiles * sizeof(int));
	int *rank_at = malloc((size_t)c->nranks * sizeof(int));
	int rc = want && arrival && order && rank_at ? 0 : -ENOMEM;

	if (rc == 0) {
		mk_sp_rank_at(c, rank_at);
		mk_agg_row_want(g, want);
		rc = mk_agg_arrival(g, c->topo.node, c->topo.nnodes, c->topo.local_rank,
				    c->topo.nlocal, rank_at, arrival);
	}
	if (rc == 0)
		rc = mk_agg_tile_order(g, arrival, want, order);
	if (rc == 0)
		rc = mk_sp_shape_upload(want, (size_t)g->tiles_m * sizeof(*want),
					(void **)&s->want_d);
	if (rc == 0)
		rc = mk_sp_shape_upload(arrival, chunks * sizeof(int), (void **)&s->arrival_d);
	if (rc == 0)
		rc = mk_sp_shape_upload(order, tiles * sizeof(int), (void **)&s->order_d);
	free(want);
	free(arrival);
	free(order);
	free(rank_at);
	return rc;
}

/* G and the words; -ENOMEM (with a WARN) when the heap is too small. */
static int agg_shape_fill(struct mk_comm *c, struct mk_sp_shape *s)
{
	const size_t gbuf = (size_t)s->m * s->k * 2;

	/* words: arrival flags per tile row, then my chunks' counters */
	s->words = mk_sp_words_of((size_t)s->geom.tiles_m + (size_t)s->geom.nch);
	if (mk_sp_shape_mem(c, s->words.bytes, &s->flags) != 0 ||
	    mk_sp_shape_mem(c, gbuf, &s->mem[0]) != 0) {
		MK_WARN("mkAllGatherGemm M %d x K %d needs %zu bytes of symmetric heap (gather "
			"buffer %zu, flags %zu): raise MKERNEL_SYMM_HEAP or mkConfig_t.heapBytes; "
			"running ncclAllGather + GEMM instead",
			s->m, s->k, gbuf + s->words.bytes, gbuf, s->words.bytes);
		return -ENOMEM;
	}
	return agg_orders(c, s);
}

int mk_agg_fused(struct mk_comm *c, const struct mk_sp_args *x, const struct mk_gar_split *sp,
		 int adaptive, cudaStream_t stream)
{
	struct mk_agg_launch l;
	struct mk_sp_state *st;
	struct mk_sp_shape *s;
	unsigned int *extra;
	int rc;

	if (c->nranks == 1) {
		/* Alone: the shard is all of A; the engine reads it where it is. */
		struct mk_gemm_launch gl;

		memset(&gl, 0, sizeof(gl));
		gl.a = x->a;
		gl.b = x->b;
		mk_gemm_args_init(&gl.args, x->m, x->n, x->k, x->b_layout, x->c);
		rc = mk_gemm_run(&gl, stream);
		if (rc == 0 && x->gathered != NULL &&
		    cudaMemcpyAsync(x->gathered, x->a, (size_t)x->m * x->k * 2,
				    cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
			rc = -EIO;
		return rc;
	}
	rc = mk_sp_shape_get(c, MK_SP_AGG, x->m, x->n, x->k, agg_shape_fill, mk_agg_prepare, sp,
			     &st, &s);
	if (rc)
		return rc;
	memset(&l, 0, sizeof(l));
	mk_sp_common_fill(c, MK_SP_AGG, st, s, sp, adaptive, &l.cm);
	l.a_shard = x->a;
	l.b = x->b;
	l.c = x->c;
	l.a_gathered = x->gathered;
	l.m = x->m;
	l.n = x->n;
	l.k = x->k;
	l.b_layout = x->b_layout;
	l.order = s->order_d;
	l.arrival = s->arrival_d;
	l.want = s->want_d;
	extra = (unsigned int *)s->flags + s->words.extra;
	for (int p = 0; p < c->topo.nlocal; p++) {
		l.gbuf[p] = mk_sp_at_peer(c, p, s->mem[0]);
		l.a_ready[p] = mk_sp_at_peer(c, p, extra);
	}
	l.mine_done = extra + s->geom.tiles_m;
	l.gbuf_off = (uint64_t)((char *)s->mem[0] - c->heap);
	return mk_agg_launch(&l, stream);
}
