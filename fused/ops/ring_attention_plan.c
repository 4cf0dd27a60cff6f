// SPDX-License-Identifier: Apache-2.0
/* mkRingAttention's planning (see ring_attention_plan.h). Plain C, no CUDA. */
#include <errno.h>
#include <string.h>

#include "fused/ops/gemm_allreduce_plan.h"
#include "fused/ops/ring_attention_plan.h"

#define RING_MAX_ROWS (1ll << 30)

long long mk_ring_pos(const struct mk_ring_geom *g, int rank, int i)
{
	const int c = g->seq_local / 2;

	if (!g->causal)
		return (long long)rank * g->seq_local + i;
	if (i < c)
		return (long long)rank * c + i;
	return (long long)(2 * g->nranks - 1 - rank) * c + (i - c);
}

/* Rows, keys and mask of my step over src's block (see the header). */
static void ring_step_rows(const struct mk_ring_geom *g, int src, struct mk_ring_step *s)
{
	const int sl = g->seq_local, c = sl / 2;

	s->src = src;
	s->q_row0 = 0;
	s->sq = sl;
	s->kv_row0 = 0;
	s->skv = sl;
	s->causal = 0;
	s->diag = 0;
	if (!g->causal)
		return;
	if (src == g->rank) {
		s->causal = 1;
	} else if (src < g->rank) {
		s->skv = c;
	} else {
		s->q_row0 = c;
		s->sq = c;
	}
}

/*
 * [lo, hi) = rows [a, b) that none of the ranges [r[i].lo, r[i].hi) (i in [from, to)) covers,
 * which must be one interval (true of the ring's ranges: all rows, or one chunk).
 */
static int ring_uncovered(const struct mk_ring_step *st, int from, int to, int a, int b, int *lo,
			  int *hi)
{
	int x = a, y = b, changed = 1;

	/* shrink [x, y) from both ends while a range covers an end; ranges may chain */
	while (changed && x < y) {
		changed = 0;
		for (int i = from; i < to; i++) {
			int r0 = st[i].q_row0, r1 = st[i].q_row0 + st[i].sq;

			if (r0 <= x && r1 > x) {
				x = r1 < y ? r1 : y;
				changed = 1;
			}
			if (r1 >= y && r0 < y && x < y) {
				y = r0 > x ? r0 : x;
				changed = 1;
			}
		}
	}
	if (x >= y) {
		*lo = *hi = 0;
		return 0;
	}
	/* a range strictly inside would split what is left */
	for (int i = from; i < to; i++) {
		int r0 = st[i].q_row0, r1 = st[i].q_row0 + st[i].sq;

		if (r0 < y && r1 > x)
			return -EINVAL;
	}
	*lo = x - a;
	*hi = y - a;
	return 0;
}

static const char *ring_rule(const struct mk_ring_geom *g)
{
	if (g->nranks < 1)
		return "no ranks";
	if (g->rank < 0 || g->rank >= g->nranks || g->nnodes < 1 || g->nlocal < 1 ||
	    g->nnodes * g->nlocal != g->nranks)
		return "nodes must all have the same number of ranks";
	if (g->seq_local < 1 || (long long)g->seq_local * g->nranks >= RING_MAX_ROWS)
		return "the whole sequence must have between 1 and 2^30 rows";
	if (g->causal && g->seq_local % 2)
		return "causal sharding (zigzag) needs an even seqLocal";
	for (int r = 0; r < g->nranks; r++) {
		if (g->node_of[r] < 0 || g->node_of[r] >= g->nnodes || g->local_of[r] < 0 ||
		    g->local_of[r] >= g->nlocal)
			return "rank outside the node layout";
		for (int q = 0; q < r; q++)
			if (g->node_of[q] == g->node_of[r] && g->local_of[q] == g->local_of[r])
				return "two ranks with the same node and local index";
	}
	return NULL;
}

/* The rank of node n with local index l. */
static int ring_rank_at(const struct mk_ring_geom *g, int n, int l)
{
	for (int r = 0; r < g->nranks; r++)
		if (g->node_of[r] == n && g->local_of[r] == l)
			return r;
	return -1;
}

int mk_ring_steps(const struct mk_ring_geom *g, struct mk_ring_step *steps, const char **why)
{
	const char *r = ring_rule(g);
	int k = 0;

	if (why != NULL)
		*why = r;
	if (r != NULL)
		return -EINVAL;
	memset(steps, 0, sizeof(*steps) * (size_t)g->nranks);
	/* my block, then my node peers' from the next local rank on */
	for (int i = 0; i < g->nlocal; i++) {
		const int l = (g->local + i) % g->nlocal;
		struct mk_ring_step *s = &steps[k++];

		ring_step_rows(g, ring_rank_at(g, g->node, l), s);
		s->where = i == 0 ? MK_RING_SELF : MK_RING_PEER;
		s->holder = l;
		s->slot = -1;
	}
	/* then the other nodes', from the next node on; node n's block of local rank l lands at
	 * the rank of my node with local index l */
	for (int j = 1; j < g->nnodes; j++) {
		const int n = (g->node + j) % g->nnodes;

		for (int l = 0; l < g->nlocal; l++) {
			struct mk_ring_step *s = &steps[k++];

			ring_step_rows(g, ring_rank_at(g, n, l), s);
			s->where = MK_RING_LANDED;
			s->holder = l;
			s->slot = mk_ring_slot(n, g->node);
		}
	}
	for (int i = 0; i < k; i++) {
		struct mk_ring_step *s = &steps[i];
		const int a = s->q_row0, b = s->q_row0 + s->sq;

		if (ring_uncovered(steps, 0, i, a, b, &s->fresh_lo, &s->fresh_hi) ||
		    ring_uncovered(steps, i + 1, k, a, b, &s->final_lo, &s->final_hi)) {
			if (why != NULL)
				*why = "internal: rows of a step left split";
			return -EINVAL;
		}
	}
	return 0;
}

int mk_ring_mem_plan(int batch, int seq_local, int heads_kv, int head_dim, int nnodes,
		     size_t flags_bytes, struct mk_ring_mem *m)
{
	if (batch < 1 || seq_local < 1 || heads_kv < 1 || head_dim < 1 || nnodes < 1)
		return -EINVAL;
	m->blk = (size_t)batch * (size_t)seq_local * (size_t)heads_kv * (size_t)head_dim * 2;
	m->kv_off = 0;
	m->land_off = 2 * m->blk;
	m->flags_off = (m->land_off + (size_t)(nnodes - 1) * 2 * m->blk + 255) & ~(size_t)255;
	m->bytes = m->flags_off + flags_bytes;
	return 0;
}

int mk_ring_split_fix(struct mk_gar_split *sp, int nranks, int nnodes)
{
	const int need[MK_GAR_ROLES] = { 1, nranks > 1, nnodes > 1, nnodes > 1 };

	for (int r = 1; r < MK_GAR_ROLES; r++) {
		if (!need[r]) {
			sp->sms[0] += sp->sms[r];
			sp->sms[r] = sp->min[r] = sp->max[r] = 0;
			continue;
		}
		if (sp->sms[r] < 1) {
			sp->sms[r] = 1;
			sp->sms[0] -= 1;
		}
		if (sp->min[r] < 1)
			sp->min[r] = 1;
		if (sp->max[r] < sp->sms[r])
			sp->max[r] = sp->sms[r];
	}
	return sp->sms[0] >= 1 ? 0 : -EINVAL;
}
