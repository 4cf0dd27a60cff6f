// SPDX-License-Identifier: Apache-2.0
/* mkGemmAllReduce's tile order and role split (see gemm_allreduce_plan.h). */
#include <errno.h>
#include <stdio.h>

#include "fused/ops/gemm_allreduce_plan.h"

int mk_gar_rows(int tiles_m, int local_rank, int nlocal)
{
	return local_rank < tiles_m ? (tiles_m - local_rank + nlocal - 1) / nlocal : 0;
}

int mk_gar_rows_max(int tiles_m, int nlocal)
{
	return mk_gar_rows(tiles_m, 0, nlocal);
}

int mk_gar1_grid(int lines, int share, int gpu_share, int cap)
{
	int grid = (int)(((long long)lines + MK_GAR1_THREADS - 1) / MK_GAR1_THREADS);

	if (grid > share)
		grid = share;
	if (cap <= 0 && gpu_share > 1)
		cap = MK_GAR1_SHARED_CTAS;
	if (cap > 0 && grid > cap)
		grid = cap;
	return grid < 1 ? 1 : grid;
}

int mk_gar_share(int sms, int gpu_share)
{
	return sms / (gpu_share > 0 ? gpu_share : 1);
}

void mk_gar_tile_order(int tiles_m, int tiles_n, int local_rank, int nlocal, int *order)
{
	int k = 0;

	for (int d = 0; d < nlocal; d++) {
		const int first = (local_rank + d) % nlocal;

		/* bands of MK_GAR_BAND rows of the slice, column by column inside a band */
		for (int b0 = first; b0 < tiles_m; b0 += MK_GAR_BAND * nlocal) {
			for (int tn = 0; tn < tiles_n; tn++) {
				for (int i = 0; i < MK_GAR_BAND; i++) {
					const int tm = b0 + i * nlocal;

					if (tm < tiles_m)
						order[k++] = tm * tiles_n + tn;
				}
			}
		}
	}
}

/* MKERNEL_ROLE_SPLIT: four numbers >= 0, or nothing (the policy's split stands). */
static int gar_env_split(const char *s, int out[MK_GAR_ROLES])
{
	char tail;

	if (s == NULL || s[0] == '\0' ||
	    sscanf(s, "%d,%d,%d,%d%c", &out[0], &out[1], &out[2], &out[3], &tail) != 4)
		return 0;
	for (int r = 0; r < MK_GAR_ROLES; r++) {
		if (out[r] < 0)
			return 0;
	}
	return 1;
}

int mk_gar_split_plan(const int policy_sms[MK_GAR_ROLES], const int policy_min[MK_GAR_ROLES],
		      const int policy_max[MK_GAR_ROLES], int max_step, int share, int nnodes,
		      int nlocal, const char *role_split, struct mk_gar_split *out)
{
	int env[MK_GAR_ROLES], used[MK_GAR_ROLES], comm = 0;

	used[MK_GAR_COMPUTE] = 1;
	used[MK_GAR_INTRA] = nlocal > 1;
	used[MK_GAR_SEND] = nnodes > 1;
	/* reduce CTAs add remote sums (several nodes) or copy node peers' results (one node) */
	used[MK_GAR_REDUCE] = nnodes > 1 || nlocal > 1;
	if (!gar_env_split(role_split, env)) {
		for (int r = 0; r < MK_GAR_ROLES; r++)
			env[r] = policy_sms[r];
	}
	for (int r = 1; r < MK_GAR_ROLES; r++) {
		out->sms[r] = used[r] ? env[r] : 0;
		out->min[r] = used[r] ? policy_min[r] : 0;
		out->max[r] = used[r] ? policy_max[r] : 0;
		if (out->max[r] < out->sms[r])
			out->max[r] = out->sms[r];
		if (out->min[r] > out->sms[r])
			out->min[r] = out->sms[r];
		comm += out->sms[r];
	}
	out->sms[MK_GAR_COMPUTE] = share - comm;
	out->min[MK_GAR_COMPUTE] = policy_min[MK_GAR_COMPUTE] < out->sms[MK_GAR_COMPUTE]
					   ? policy_min[MK_GAR_COMPUTE]
					   : out->sms[MK_GAR_COMPUTE];
	if (out->min[MK_GAR_COMPUTE] < 1)
		out->min[MK_GAR_COMPUTE] = 1;
	out->max[MK_GAR_COMPUTE] = share;
	out->max_step = max_step > 0 ? max_step : 1;
	return out->sms[MK_GAR_COMPUTE] >= 1 ? 0 : -EINVAL;
}

int mk_gar_split_room(const struct mk_gar_split *sp)
{
	int room = 0;

	for (int r = 1; r < MK_GAR_ROLES; r++)
		room += sp->max[r] - sp->min[r];
	return room;
}

int mk_gar_split_adaptive(const struct mk_gar_split *sp, int wanted)
{
	return wanted && mk_gar_split_room(sp) > 0;
}
