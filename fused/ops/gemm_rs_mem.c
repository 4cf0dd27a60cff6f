// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmReduceScatter's memory and the launch of its fused kernel (gemm_rs.cu): per shape, in the
 * symmetric heap (seqpar_mem.c keeps one shape at a time), W (my bf16 partial, M x N), the
 * landing area (several nodes: one slot of M / nranks rows per other node), the flag words (tile
 * ready flags, per reduce-list chunk counters, the common words) and the compute order.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/gemm_rs.h"
#include "fused/ops/seqpar_host.h"
#include "mk/log.h"

/* Extra words: ready flags per tile, then the chunk counters of the reduce list. */
static size_t grs_extra(const struct mk_sp_geom *g, int nnodes)
{
	return (size_t)g->tiles_m * g->tiles_n + (size_t)nnodes * g->nch;
}

/* The shape's heap pieces and compute order; -ENOMEM (with a WARN) when the heap is too small. */
static int grs_shape_fill(struct mk_comm *c, struct mk_sp_shape *s)
{
	const size_t mat = (size_t)s->m * s->n * 2;
	const size_t land = (size_t)(c->topo.nnodes - 1) * s->geom.ms * s->n * 2;
	const int tiles = s->geom.tiles_m * s->geom.tiles_n;
	int *order, *rank_at, rc;

	s->words = mk_sp_words_of(grs_extra(&s->geom, c->topo.nnodes));
	/* One rank in all: the engine stores straight into C; only the words are needed. */
	if (mk_sp_shape_mem(c, s->words.bytes, &s->flags) != 0 ||
	    (c->nranks > 1 && mk_sp_shape_mem(c, mat, &s->mem[0]) != 0) ||
	    (c->topo.nnodes > 1 && mk_sp_shape_mem(c, land, &s->mem[1]) != 0)) {
		MK_WARN("mkGemmReduceScatter M %d x N %d needs %zu bytes of symmetric heap "
			"(partials %zu, landing area %zu, flags %zu): raise MKERNEL_SYMM_HEAP or "
			"mkConfig_t.heapBytes; running GEMM + ncclReduceScatter instead",
			s->m, s->n,
			(c->nranks > 1 ? mat : 0) + (c->topo.nnodes > 1 ? land : 0) +
				s->words.bytes,
			c->nranks > 1 ? mat : 0, c->topo.nnodes > 1 ? land : 0, s->words.bytes);
		return -ENOMEM;
	}
	if (c->nranks == 1)
		return 0; /* the engine's own raster */
	order = malloc((size_t)tiles * sizeof(int));
	rank_at = malloc((size_t)c->nranks * sizeof(int));
	rc = order != NULL && rank_at != NULL ? 0 : -ENOMEM;
	if (rc == 0) {
		mk_sp_rank_at(c, rank_at);
		rc = mk_grs_tile_order(&s->geom, c->topo.node, c->topo.nnodes, c->topo.nlocal,
				       rank_at, order);
	}
	if (rc == 0)
		rc = mk_sp_shape_upload(order, (size_t)tiles * sizeof(int), (void **)&s->order_d);
	free(order);
	free(rank_at);
	return rc;
}

int mk_grs_fused(struct mk_comm *c, const struct mk_sp_args *x, const struct mk_gar_split *sp,
		 int adaptive, cudaStream_t stream)
{
	struct mk_grs_launch l;
	struct mk_sp_state *st;
	struct mk_sp_shape *s;
	unsigned int *extra;
	int rc;

	rc = mk_sp_shape_get(c, MK_SP_GRS, x->m, x->n, 0, grs_shape_fill, mk_grs_prepare, sp, &st,
			     &s);
	if (rc)
		return rc;
	memset(&l, 0, sizeof(l));
	mk_sp_common_fill(c, MK_SP_GRS, st, s, sp, adaptive, &l.cm);
	l.a = x->a;
	l.b = x->b;
	l.c = x->c;
	l.m = x->m;
	l.n = x->n;
	l.k = x->k;
	l.b_layout = x->b_layout;
	l.order = s->order_d;
	extra = (unsigned int *)s->flags + s->words.extra;
	for (int p = 0; p < c->topo.nlocal; p++) {
		l.w[p] = s->mem[0] != NULL ? mk_sp_at_peer(c, p, s->mem[0]) : NULL;
		l.ready[p] = mk_sp_at_peer(c, p, extra);
	}
	l.row_done = extra + (size_t)s->geom.tiles_m * s->geom.tiles_n;
	l.w_off = s->mem[0] != NULL ? (uint64_t)((char *)s->mem[0] - c->heap) : 0;
	l.land_off = s->mem[1] != NULL ? (uint64_t)((char *)s->mem[1] - c->heap) : 0;
	return mk_grs_launch(&l, stream);
}
