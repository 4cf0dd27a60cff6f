// SPDX-License-Identifier: Apache-2.0
/* Host side of the role framework: the initial split and the controller's bounds (roles.h). */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fused/runtime/roles.h"
#include "fused/runtime/runtime_params.h"
#include "mk/log.h"

/* Scale counts given for `from` SMs to `to` CTAs, keeping the sum exact and nonzero entries > 0. */
static void roles_scale(const int in[MK_ROLES], int from, uint32_t to, int32_t out[MK_ROLES])
{
	int64_t sum = 0;
	int big = 0;

	for (int r = 0; r < MK_ROLES; r++) {
		out[r] = from > 0 ? (int32_t)(((int64_t)in[r] * to + from / 2) / from) : 0;
		if (in[r] > 0 && out[r] == 0)
			out[r] = 1;
		sum += out[r];
		if (out[r] > out[big])
			big = r;
	}
	out[big] += (int32_t)((int64_t)to - sum);
	if (out[big] < 0)
		out[big] = 0;
}

int mk_roles_setup(struct mk_roles_state *s, uint32_t nworkers, const uint32_t ntasks[MK_ROLES],
		   const int sms[MK_ROLES], const int min_sms[MK_ROLES],
		   const int max_sms[MK_ROLES], int window, int max_step)
{
	const char *env = mk_param_role_split();
	int split[MK_ROLES], total = 0;

	if (nworkers < 1 || max_step < 1)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	memcpy(split, sms, sizeof(split));
	if (env != NULL && env[0] != '\0' &&
	    sscanf(env, "%d,%d,%d,%d", &split[0], &split[1], &split[2], &split[3]) != 4)
		return -EINVAL;
	for (int r = 0; r < MK_ROLES; r++) {
		if (split[r] < 0 || min_sms[r] < 0 || max_sms[r] < 0)
			return -EINVAL;
		total += split[r];
	}
	if (total < 1)
		return -EINVAL;
	roles_scale(split, total, nworkers, s->init);
	for (int r = 0; r < MK_ROLES; r++) {
		int64_t mn = (int64_t)min_sms[r] * nworkers / total;
		int64_t mx = max_sms[r] > 0 ? ((int64_t)max_sms[r] * nworkers + total - 1) / total
					    : nworkers;

		s->ntasks[r] = ntasks[r];
		s->active[r] = s->init[r];
		s->target[r] = s->init[r];
		s->min[r] = (int32_t)(mn < s->init[r] ? mn : s->init[r]);
		s->max[r] = (int32_t)(mx > nworkers ? nworkers : mx);
		if (s->max[r] < s->init[r])
			s->max[r] = s->init[r];
	}
	s->nworkers = nworkers;
	s->window = window > 0 ? (uint32_t)window : 1;
	s->max_step = max_step;
	return 0;
}

int mk_roles_adaptive(int policy)
{
	const char *v = mk_param_sm_policy();

	if (v == NULL || v[0] == '\0')
		return policy;
	if (strcmp(v, "adaptive") == 0)
		return 1;
	if (strcmp(v, "static") == 0)
		return 0;
	MK_WARN_ONCE("MKERNEL_SM_POLICY=%s: expected 'static' or 'adaptive'; the policy "
		     "engine decides",
		     v);
	return policy;
}
