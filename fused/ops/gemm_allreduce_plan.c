// SPDX-License-Identifier: Apache-2.0
/* mkGemmAllReduce's tile order and role split (see gemm_allreduce_plan.h). */
#include <errno.h>
#include <stdio.h>

#include "fused/ops/gemm_allreduce_plan.h"

void mk_gar_tile_order(int tiles_m, int tiles_n, int local_rank, int nlocal, int *order)
{
	int k = 0;

	for (int d = 0; d < nlocal; d++) {
		for (int tm = (local_rank + d) % nlocal; tm < tiles_m; tm += nlocal) {
			for (int tn = 0; tn < tiles_n; tn++)
				order[k++] = tm * tiles_n + tn;
		}
	}
}

int mk_gar_split(int sms, int gpu_share, const char *role_split, struct mk_gar_split *out)
{
	int want[4] = { 0, 0, 0, 0 };
	int share = sms / (gpu_share > 0 ? gpu_share : 1);

	out->reduce = share / 16 > 0 ? share / 16 : 1;
	out->publish = out->reduce;
	if (role_split != NULL && role_split[0] != '\0' &&
	    sscanf(role_split, "%d,%d,%d,%d", &want[0], &want[1], &want[2], &want[3]) == 4) {
		if (want[1] > 0)
			out->reduce = want[1];
		if (want[3] > 0)
			out->publish = want[3];
	}
	out->compute = share - out->reduce - out->publish;
	return out->compute >= 1 ? 0 : -EINVAL;
}
