/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Persistent-kernel role framework (CUDA in C style). A fused kernel is launched on every SM
 * (cooperatively, so all CTAs are co-resident); CTA 0 may be the controller, the others are
 * workers holding one role at a time (compute, intra-node comm, inter-node send, inter-node
 * receive/reduce: enum mk_sm_role of the policy engine). Each role has a task queue (a counter
 * claimed with atomicAdd). The kernel's own loop asks mk_roles_next() for its next (role, task)
 * at every task boundary, runs the task, and reports it with mk_roles_done().
 *
 * Role switching happens only at task boundaries: a worker leaves its role when the role has more
 * CTAs than the controller's target (never below the role's minimum) and another role with work
 * left is below its target, or when its role's queue is empty. Workers never wait for the
 * controller (its targets are advice), so the controller can neither deadlock nor stall them.
 *
 * Controller (work balance): every window it reads, per role, remaining tasks R and the mean
 * measured cost C (cycles per task), and sets targets n_r = N * R_r C_r / sum(R C), clamped to
 * the role's [min, max] and moved at most max_step per window; a role with work keeps >= 1 CTA.
 * It leaves only after every worker has left (it counts them), or after timeout_ns without any
 * task finishing (error recorded), so it never exits before the workers.
 */
#ifndef MK_FUSED_RUNTIME_ROLES_CUH
#define MK_FUSED_RUNTIME_ROLES_CUH

#include <stdint.h>

#include "fused/runtime/device.cuh"
#include "fused/runtime/roles.h"

/* Thread 0 of a worker CTA: where it starts (initial split in worker order). */
MK_DEV int mk_roles_initial(const struct mk_roles_state *s, uint32_t worker)
{
	uint32_t acc = 0;

	for (int r = 0; r < MK_ROLES; r++) {
		acc += (uint32_t)s->init[r];
		if (worker < acc)
			return r;
	}
	return 0;
}

MK_DEV int mk_roles_has_work(struct mk_roles_state *s, int r)
{
	return *(volatile uint32_t *)&s->next[r] < s->ntasks[r];
}

/* Move this CTA from role `from` to `to` (counts only; the caller updates its own role). */
MK_DEV void mk_roles_move(struct mk_roles_state *s, int from, int to)
{
	atomicSub((int *)&s->active[from], 1);
	atomicAdd((int *)&s->active[to], 1);
	atomicAdd(&s->switches, 1u);
}

/*
 * Thread 0 of a worker CTA, at a task boundary. *role is the current role (updated). Returns 1
 * with *task set, or 0 when no role has work left (the worker must call mk_roles_exit()).
 */
MK_DEV int mk_roles_next(struct mk_roles_state *s, int *role, uint32_t *task)
{
	int r = *role;

	/* Leave an over-staffed role for an under-staffed one with work. */
	if (*(volatile int *)&s->active[r] > *(volatile int *)&s->target[r] &&
	    *(volatile int *)&s->active[r] > s->min[r]) {
		for (int q = 0; q < MK_ROLES; q++) {
			if (q != r && mk_roles_has_work(s, q) &&
			    *(volatile int *)&s->active[q] < *(volatile int *)&s->target[q]) {
				mk_roles_move(s, r, q);
				atomicAdd(&s->rebalances, 1u);
				r = q;
				break;
			}
		}
	}
	for (;;) {
		uint32_t t = atomicAdd(&s->next[r], 1u);

		if (t < s->ntasks[r]) {
			*role = r;
			*task = t;
			return 1;
		}
		/* This role's queue is empty: take any role with work left, most remaining first. */
		{
			int best = -1;
			uint32_t most = 0;

			for (int q = 0; q < MK_ROLES; q++) {
				uint32_t nx = *(volatile uint32_t *)&s->next[q];
				uint32_t left = nx < s->ntasks[q] ? s->ntasks[q] - nx : 0;

				if (left > most) {
					most = left;
					best = q;
				}
			}
			if (best < 0) {
				*role = r;
				return 0;
			}
			mk_roles_move(s, r, best);
			r = best;
		}
	}
}

MK_DEV void mk_roles_done(struct mk_roles_state *s, int role, uint64_t cycles)
{
	atomicAdd((unsigned long long *)&s->cycles[role], (unsigned long long)cycles);
	__threadfence();
	atomicAdd(&s->done[role], 1u);
}

MK_DEV void mk_roles_exit(struct mk_roles_state *s, int role)
{
	atomicSub((int *)&s->active[role], 1);
	__threadfence();
	atomicAdd(&s->exited, 1u);
}

/* Thread 0 of the controller CTA. */
MK_DEV void mk_roles_controller(struct mk_roles_state *s, uint64_t timeout_ns)
{
	uint64_t last_change = mk_globaltimer_ns();
	uint32_t last_done = 0;

	while (*(volatile uint32_t *)&s->exited < s->nworkers) {
		uint64_t w[MK_ROLES], total = 0;
		uint32_t done_sum = 0;

		for (int r = 0; r < MK_ROLES; r++) {
			uint32_t nx = *(volatile uint32_t *)&s->next[r];
			uint32_t d = *(volatile uint32_t *)&s->done[r];
			uint64_t cyc = *(volatile unsigned long long *)&s->cycles[r];
			uint64_t rem = nx < s->ntasks[r] ? s->ntasks[r] - nx : 0;
			uint64_t cost = d > 0 ? cyc / d : 1;

			w[r] = rem * (cost > 0 ? cost : 1);
			total += w[r];
			done_sum += d;
		}
		if (done_sum != last_done) {
			last_done = done_sum;
			last_change = mk_globaltimer_ns();
		} else if (mk_globaltimer_ns() - last_change > timeout_ns) {
			atomicExch(&s->error, -MK_DEV_ETIMEDOUT);
			return;
		}
		if (total > 0 && done_sum >= s->window) {
			for (int r = 0; r < MK_ROLES; r++) {
				int cur = *(volatile int *)&s->target[r];
				int want = (int)((s->nworkers * w[r] + total / 2) / total);

				if (w[r] > 0 && want < 1)
					want = 1;
				if (want < s->min[r] && w[r] > 0)
					want = s->min[r];
				if (want > s->max[r])
					want = s->max[r];
				if (want > cur + s->max_step)
					want = cur + s->max_step;
				if (want < cur - s->max_step)
					want = cur - s->max_step;
				*(volatile int *)&s->target[r] = want;
			}
			atomicAdd(&s->decisions, 1u);
		}
		__nanosleep(2000);
	}
	s->controller_saw_exited = *(volatile uint32_t *)&s->exited;
}

#endif /* MK_FUSED_RUNTIME_ROLES_CUH */
