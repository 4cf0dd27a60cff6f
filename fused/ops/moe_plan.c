// SPDX-License-Identifier: Apache-2.0
/*
 * Host side of the MoE plan (moe_plan.h): the config rules, the layout and workspace maps, and
 * the unfused path's complete plan of one rank (it reads the counts on the host anyway).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/moe_plan.h"

int mk_moe_geom_init(struct mk_moe_geom *g, int nranks, int rank, int nnodes, int nlocal, int node,
		     int local, int ne, int topk, size_t hidden, size_t inter, size_t max_tokens,
		     size_t max_recv, int w_nk, const char **why)
{
	const char *r = NULL;

	memset(g, 0, sizeof(*g));
	if (nranks < 1 || rank < 0 || rank >= nranks)
		r = "bad comm";
	else if (ne < 1 || ne % nranks)
		r = "numExperts must be a positive multiple of the comm's rank count";
	else if (topk < 1 || topk > MK_MOE_TOPK_MAX)
		r = "topk must be in [1, 16]";
	else if (hidden < 1 || hidden > INT_MAX || inter < 1 || inter > INT_MAX)
		r = "hidden and inter must be in [1, INT_MAX]";
	else if (max_tokens > INT_MAX / MK_MOE_TOPK_MAX || max_recv > INT_MAX)
		r = "maxTokensPerRank (x topk) and maxRecv must stay below INT_MAX";
	else if (max_recv < 1)
		r = "maxRecv must be >= 1";
	if (why != NULL)
		*why = r;
	if (r != NULL)
		return -EINVAL;
	g->nranks = nranks;
	g->rank = rank;
	g->nnodes = nnodes;
	g->nlocal = nlocal;
	g->node = node;
	g->local = local;
	g->ne = ne;
	g->eloc = ne / nranks;
	g->topk = topk;
	g->hidden = (int)hidden;
	g->inter = (int)inter;
	g->max_tokens = (int)max_tokens;
	g->max_recv = (int)max_recv;
	g->w_nk = w_nk;
	return 0;
}

int mk_moe_same_exchange(const struct mk_moe_geom *a, const struct mk_moe_geom *b)
{
	struct mk_moe_geom x = *a, y = *b;

	x.inter = y.inter = 0;
	return memcmp(&x, &y, sizeof(x)) == 0;
}

void mk_moe_lmap_init(const struct mk_moe_geom *g, struct mk_moe_lmap *m)
{
	const size_t pairs = (size_t)g->max_tokens * g->topk, n = (size_t)g->nnodes;
	size_t o = 0;

	m->recv_off = o;
	o = mk_moe_align(o + ((size_t)g->eloc + 1) * 4);
	m->hdr = o;
	o = mk_moe_align(o + sizeof(struct mk_moe_lhdr));
	m->pair_q = o;
	o = mk_moe_align(o + pairs * 4);
	m->pair_row = o;
	o = mk_moe_align(o + pairs * 4);
	m->pair_w = o;
	o = mk_moe_align(o + pairs * 4);
	m->node_slot = o;
	o = mk_moe_align(o + (size_t)g->max_tokens * n * 4);
	m->send_list = o;
	o = mk_moe_align(o + n * g->max_tokens * 4);
	m->send_count = o;
	o = mk_moe_align(o + n * 4);
	m->in_count = o;
	o = mk_moe_align(o + n * 4);
	m->inbound = o;
	o = mk_moe_align(o + n * g->max_tokens * mk_moe_entry_ints(g->topk) * 4);
	m->unf_pos = o;
	o = mk_moe_align(o + pairs * 4);
	m->unf_count = o;
	o = mk_moe_align(o + 2 * (size_t)g->nranks * 4);
	m->unf_scatter = o;
	o = mk_moe_align(o + (size_t)g->max_recv * 4);
	m->bytes = o;
}

void mk_moe_wmap_init(const struct mk_moe_geom *g, struct mk_moe_wmap *m)
{
	const size_t n = (size_t)g->nnodes, t = (size_t)g->max_tokens, h = (size_t)g->hidden;
	size_t o = 0;

	m->cnt_ints = (g->ne + g->nnodes + 2 + 3) & ~3;
	m->nblk = (g->max_recv + MK_MOE_BLK - 1) / MK_MOE_BLK;
	m->entry_bytes = (size_t)mk_moe_entry_ints(g->topk) * 4 + ((h * 2 + 15) & ~(size_t)15);
	m->cnt = o;
	o = mk_moe_align(o + 2 * (size_t)g->nranks * m->cnt_ints * 4);
	m->recv_x = o;
	o = mk_moe_align(o + (size_t)g->max_recv * h * 2);
	m->recv_blk = o;
	o = mk_moe_align(o + (size_t)m->nblk * 4);
	m->inbound = o;
	o = mk_moe_align(o + n * t * m->entry_bytes);
	m->stage = o;
	o = mk_moe_align(o + n * t * m->entry_bytes);
	m->yrows = o;
	o = mk_moe_align(o + (size_t)g->max_recv * h * 2);
	m->y_flag = o;
	o = mk_moe_align(o + (size_t)m->nblk * 4);
	m->part = o;
	o = mk_moe_align(o + n * t * h * 2);
	m->land = o;
	o = mk_moe_align(o + n * t * h * 2);
	m->ctl = o;
	o = mk_moe_align(o + sizeof(struct mk_moe_ctl));
	m->blk_cnt = o;
	o = mk_moe_align(o + (size_t)m->nblk * 4);
	m->bytes = o;
}

long long mk_moe_worst_recv(const struct mk_moe_geom *g)
{
	const int per_token = g->topk < g->eloc ? g->topk : g->eloc;

	return (long long)g->nranks * g->max_tokens * per_token;
}

int mk_moe_count(const struct mk_moe_geom *g, const int32_t *topk_idx, int ntok, int32_t *cnt,
		 int *first_bad)
{
	int bad = 0;

	memset(cnt, 0, (size_t)g->ne * sizeof(*cnt));
	*first_bad = -1;
	for (int i = 0; i < ntok * g->topk; i++) {
		const int e = topk_idx[i];

		if (e == -1)
			continue;
		if (e < -1 || e >= g->ne) {
			if (bad++ == 0)
				*first_bad = i;
			continue;
		}
		cnt[e]++;
	}
	return bad;
}

int mk_moe_plan_unfused(const struct mk_moe_geom *g, const int32_t *topk_idx, const float *topk_w,
			int ntok, const int32_t *cnt_all, size_t stride, void *lay, int32_t *gather,
			int *needed)
{
	struct mk_moe_lmap m;
	char *base = (char *)lay;
	const int k = g->topk, n = g->nranks, me = g->rank;
	int32_t *off = (int32_t *)(base), *pq, *prow, *pos, *ucount, *scatter;
	float *pw;
	struct mk_moe_lhdr *hdr;
	int32_t *seen, *send_off, *before_e;
	int rc = 0;

	mk_moe_lmap_init(g, &m);
	memset(lay, 0, m.bytes);
	hdr = (struct mk_moe_lhdr *)(base + m.hdr);
	pq = (int32_t *)(base + m.pair_q);
	prow = (int32_t *)(base + m.pair_row);
	pw = (float *)(base + m.pair_w);
	pos = (int32_t *)(base + m.unf_pos);
	ucount = (int32_t *)(base + m.unf_count);
	scatter = (int32_t *)(base + m.unf_scatter);

	*needed = 0;
	for (int q = 0; q < n; q++) {
		int total = 0;

		for (int l = 0; l < g->eloc; l++)
			total += mk_moe_expert_rows(cnt_all, stride, n, q * g->eloc + l);
		if (total > *needed)
			*needed = total;
	}
	hdr->total_recv = mk_moe_recv_off(g, cnt_all, stride, me, off);
	hdr->ntok = ntok;
	hdr->needed = *needed;
	hdr->bad = hdr->bad_rank = -1;
	hdr->path = MK_MOE_PATH_UNFUSED;
	if (*needed > g->max_recv) {
		hdr->status = MK_MOE_ST_OVERFLOW;
		return -EOVERFLOW;
	}

	seen = calloc((size_t)g->ne, sizeof(*seen));
	send_off = calloc((size_t)n + 1, sizeof(*send_off));
	before_e = calloc((size_t)g->ne, sizeof(*before_e));
	if (seen == NULL || send_off == NULL || before_e == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	/* Send buffer: by destination rank, then expert, then (token, slot). */
	for (int q = 0; q < n; q++) {
		int rows = 0;

		for (int l = 0; l < g->eloc; l++) {
			const int e = q * g->eloc + l;

			before_e[e] = rows;
			rows += cnt_all[(size_t)me * stride + e];
		}
		ucount[q] = rows;
		send_off[q + 1] = send_off[q] + rows;
	}
	for (int t = 0; t < ntok; t++) {
		for (int j = 0; j < k; j++) {
			const int i = t * k + j, e = topk_idx[i];
			int q, p;

			pw[i] = topk_w != NULL ? topk_w[i] : 0.0f;
			if (e < 0 || e >= g->ne) {
				pq[i] = -1;
				prow[i] = -1;
				pos[i] = -1;
				continue;
			}
			q = mk_moe_owner(g, e);
			pq[i] = q;
			prow[i] = mk_moe_pair_base(g, cnt_all, stride, me, e) + seen[e];
			p = send_off[q] + before_e[e] + seen[e];
			pos[i] = p;
			gather[p] = t;
			seen[e]++;
		}
	}
	for (int t = ntok; t < g->max_tokens; t++)
		for (int j = 0; j < k; j++) {
			pq[t * k + j] = prow[t * k + j] = pos[t * k + j] = -1;
		}
	/* Received rows: blocks by source rank, inside a block expert-major. */
	{
		int r = 0;

		for (int s = 0; s < n; s++) {
			int rows = 0;

			for (int l = 0; l < g->eloc; l++) {
				const int e = me * g->eloc + l, c = cnt_all[(size_t)s * stride + e];
				const int first = mk_moe_pair_base(g, cnt_all, stride, s, e);

				for (int i = 0; i < c; i++)
					scatter[r++] = first + i;
				rows += c;
			}
			ucount[n + s] = rows;
		}
		for (; r < g->max_recv; r++)
			scatter[r] = -1;
	}
out:
	free(seen);
	free(send_off);
	free(before_e);
	return rc;
}
