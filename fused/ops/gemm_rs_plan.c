// SPDX-License-Identifier: Apache-2.0
/* mkGemmReduceScatter's compute order (gemm_rs_plan.h). */
#include <errno.h>
#include <stdlib.h>

#include "fused/ops/gemm_rs_plan.h"

int mk_grs_tile_order(const struct mk_sp_geom *g, int node, int nnodes, int nlocal,
		      const int *rank_at, int *order)
{
	const int tiles = g->tiles_m * g->tiles_n, len = nnodes * g->nch;
	const int band = mk_grs_band(nlocal);
	char *done = calloc((size_t)tiles, 1);
	int k = 0;

	if (done == NULL)
		return -ENOMEM;
	for (int b0 = 0; b0 < len; b0 += band) {
		const int b1 = b0 + band < len ? b0 + band : len;

		for (int tn = 0; tn < g->tiles_n; tn++) {
			for (int i = b0; i < b1; i++) {
				const int w = mk_grs_list_node(node, nnodes, i / g->nch);

				for (int p = 0; p < nlocal; p++) {
					int tm0, tm1;

					mk_sp_chunk_tiles(g, rank_at[w * nlocal + p], i % g->nch,
							  &tm0, &tm1);
					for (int tm = tm0; tm <= tm1; tm++) {
						const int t = tm * g->tiles_n + tn;

						if (!done[t]) {
							done[t] = 1;
							order[k++] = t;
						}
					}
				}
			}
		}
	}
	free(done);
	return k == tiles ? 0 : -EINVAL;
}
