/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared state of a persistent kernel's roles (roles.cuh), in GPU memory, and the host helper
 * that fills it from the policy engine's SM split (or MKERNEL_ROLE_SPLIT). Plain C.
 */
#ifndef MK_FUSED_RUNTIME_ROLES_H
#define MK_FUSED_RUNTIME_ROLES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MK_ROLES 4 /* compute, intra-node comm, inter-node send, inter-node reduce */

struct mk_roles_state {
	uint32_t next[MK_ROLES]; /* next task per role (claimed by atomicAdd) */
	uint32_t ntasks[MK_ROLES];
	uint32_t done[MK_ROLES]; /* tasks finished per role */
	uint32_t pad0;
	unsigned long long cycles[MK_ROLES]; /* clock cycles spent in each role's tasks */
	int32_t init[MK_ROLES];		     /* initial CTAs per role (sum = nworkers) */
	int32_t active[MK_ROLES];	     /* CTAs in each role now */
	int32_t target[MK_ROLES];	     /* the controller's targets (= init while static) */
	int32_t min[MK_ROLES];
	int32_t max[MK_ROLES];
	uint32_t nworkers;
	uint32_t window;		/* tasks finished before the controller first moves */
	int32_t max_step;		/* most CTAs a target moves per decision */
	uint32_t switches;		/* role changes so far */
	uint32_t rebalances;		/* of which: left a role that still had work (targets) */
	uint32_t exited;		/* workers that left */
	uint32_t controller_saw_exited; /* `exited` when the controller left */
	uint32_t decisions;		/* controller decisions that set targets */
	int32_t error;			/* 0 or -ETIMEDOUT (controller saw no progress) */
};

/*
 * Fill *s for `nworkers` worker CTAs and per-role task counts: initial split, bounds, window and
 * step from sms/min/max (policy engine values for `sms_total` SMs, scaled to nworkers), or from
 * MKERNEL_ROLE_SPLIT="c,i,s,r" when set. 0 or -EINVAL.
 */
int mk_roles_setup(struct mk_roles_state *s, uint32_t nworkers, const uint32_t ntasks[MK_ROLES],
		   const int sms[MK_ROLES], const int min_sms[MK_ROLES],
		   const int max_sms[MK_ROLES], int window, int max_step);

/*
 * MKERNEL_SM_POLICY for a fused op's call: 1 adaptive, 0 static; `policy` (the policy engine's
 * answer) when it is unset, or not understood (WARNed once).
 */
int mk_roles_adaptive(int policy);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_ROLES_H */
