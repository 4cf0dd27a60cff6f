// SPDX-License-Identifier: Apache-2.0
/* mkAllGatherGemm's arrival and compute orders (ag_gemm_plan.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/ops/ag_gemm_plan.h"

void mk_agg_row_want(const struct mk_sp_geom *g, unsigned int *want)
{
	memset(want, 0, (size_t)g->tiles_m * sizeof(*want));
	for (int s = 0; s < g->nranks; s++) {
		for (int c = 0; c < g->nch; c++) {
			int tm0, tm1;

			mk_sp_chunk_tiles(g, s, c, &tm0, &tm1);
			for (int tm = tm0; tm <= tm1; tm++)
				want[tm]++;
		}
	}
}

int mk_agg_arrival(const struct mk_sp_geom *g, int node, int nnodes, int local, int nlocal,
		   const int *rank_at, int *arrival)
{
	int k = 0;

	if (nnodes < 1 || nlocal < 1 || nnodes * nlocal != g->nranks || node < 0 ||
	    node >= nnodes || local < 0 || local >= nlocal)
		return -EINVAL;
	for (int c = 0; c < g->nch; c++)
		arrival[k++] = rank_at[node * nlocal + local] * g->nch + c;
	for (int c = 0; c < g->nch; c++) {
		for (int d = 1; d < nlocal; d++)
			arrival[k++] = rank_at[node * nlocal + (local + d) % nlocal] * g->nch + c;
	}
	for (int c = 0; c < g->nch; c++) {
		for (int dn = 1; dn < nnodes; dn++) {
			const int w = (node - dn + nnodes) % nnodes;

			for (int d = 0; d < nlocal; d++)
				arrival[k++] =
					rank_at[w * nlocal + (local + d) % nlocal] * g->nch + c;
		}
	}
	return 0;
}

int mk_agg_tile_order(const struct mk_sp_geom *g, const int *arrival, const unsigned int *want,
		      int *order)
{
	unsigned int *seen = calloc((size_t)g->tiles_m, sizeof(*seen));
	int *rows = malloc((size_t)g->tiles_m * sizeof(*rows));
	int nrows = 0, k = 0;

	if (seen == NULL || rows == NULL) {
		free(seen);
		free(rows);
		return -ENOMEM;
	}
	for (int i = 0; i < g->nranks * g->nch; i++) {
		int tm0, tm1;

		mk_sp_chunk_tiles(g, arrival[i] / g->nch, arrival[i] % g->nch, &tm0, &tm1);
		for (int tm = tm0; tm <= tm1; tm++) {
			if (++seen[tm] == want[tm])
				rows[nrows++] = tm;
		}
	}
	for (int b0 = 0; nrows == g->tiles_m && b0 < nrows; b0 += MK_SP_BAND) {
		const int b1 = b0 + MK_SP_BAND < nrows ? b0 + MK_SP_BAND : nrows;

		for (int tn = 0; tn < g->tiles_n; tn++) {
			for (int i = b0; i < b1; i++)
				order[k++] = rows[i] * g->tiles_n + tn;
		}
	}
	free(seen);
	free(rows);
	return k == g->tiles_m * g->tiles_n ? 0 : -EINVAL;
}
