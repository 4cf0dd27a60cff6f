// SPDX-License-Identifier: Apache-2.0
/* Shards, chunks and the role split shared by the sequence-parallel ops (seqpar_plan.h). */
#include <errno.h>

#include "fused/ops/seqpar_plan.h"

int mk_sp_geom_init(struct mk_sp_geom *g, int m, int n, int nranks)
{
	if (m < 1 || n < 1 || nranks < 1 || m % nranks != 0)
		return -EINVAL;
	g->m = m;
	g->n = n;
	g->nranks = nranks;
	g->ms = m / nranks;
	g->nch = (g->ms + MK_SP_CHUNK - 1) / MK_SP_CHUNK;
	g->tiles_m = (m + MK_SP_TILE_M - 1) / MK_SP_TILE_M;
	g->tiles_n = (n + MK_SP_TILE_N - 1) / MK_SP_TILE_N;
	return 0;
}

int mk_sp_split_fix(struct mk_gar_split *s, const int used[MK_GAR_ROLES], int needed)
{
	for (int r = 1; r < MK_GAR_ROLES; r++) {
		if (used[r])
			continue;
		s->sms[MK_GAR_COMPUTE] += s->sms[r];
		s->sms[r] = s->min[r] = s->max[r] = 0;
	}
	if (needed > 0 && needed < MK_GAR_ROLES) {
		int share = 0;

		for (int r = 0; r < MK_GAR_ROLES; r++)
			share += s->sms[r];
		/* A role the layout rule dropped (the copy stage with one rank per node still fills
		 * my own buffer): a 32nd of the share, at least one CTA, the controller up to a
		 * quarter. */
		if (s->sms[needed] < 1) {
			s->sms[needed] = share / 32 > 1 ? share / 32 : 1;
			s->sms[MK_GAR_COMPUTE] -= s->sms[needed];
			if (s->max[needed] < share / 4)
				s->max[needed] = share / 4;
		}
		s->min[needed] = s->min[needed] < 1 ? 1 : s->min[needed];
		s->max[needed] = s->max[needed] < s->sms[needed] ? s->sms[needed] : s->max[needed];
	}
	if (s->min[MK_GAR_COMPUTE] > s->sms[MK_GAR_COMPUTE])
		s->min[MK_GAR_COMPUTE] = s->sms[MK_GAR_COMPUTE];
	return s->sms[MK_GAR_COMPUTE] >= 1 ? 0 : -EINVAL;
}
