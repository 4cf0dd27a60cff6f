/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkGemmAllReduce's plan (gemm_allreduce_plan.c), plain C so it is unit-tested on any machine:
 * the order the compute role produces tiles in, the CTAs per role from the policy engine's
 * split, and the adaptive controller's rule (also compiled into the kernel, which runs it
 * between calls).
 */
#ifndef MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H
#define MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H

#include "fused/ops/signals.h"

#ifdef __CUDACC__
#define MK_GAR_HD static inline __host__ __device__
#else
#define MK_GAR_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Tile rows of a slice the compute order works through together (L2 reuse of A and B panels
 * against how soon a whole row is ready to reduce and send). */
#define MK_GAR_BAND 8

/*
 * order[0 .. tiles_m * tiles_n): tile ids (tm * tiles_n + tn), the slice of local rank
 * `local_rank` first (tile rows tm % nlocal == local_rank), then the next local ranks' slices
 * in turn; within a slice, bands of MK_GAR_BAND rows in ascending order, each band column by
 * column. A permutation of all tiles.
 */
void mk_gar_tile_order(int tiles_m, int tiles_n, int local_rank, int nlocal, int *order);

/* Tile rows of local rank `local_rank`'s slice of tiles_m rows (rows tm % nlocal == it). */
int mk_gar_rows(int tiles_m, int local_rank, int nlocal);

/*
 * Tile rows of the largest slice (local rank 0's): every rank sizes its landing area and flags
 * for it, so that every rank asks the symmetric heap for the same bytes and the pieces sit at
 * the same offsets everywhere (mkMemAlloc refuses anything else).
 */
int mk_gar_rows_max(int tiles_m, int nlocal);

/* CTAs of one rank: its share of the GPU's `sms` when `gpu_share` ranks share the GPU. */
int mk_gar_share(int sms, int gpu_share);

/* The kernel's roles, in the policy engine's order (enum mk_sm_role). */
enum mk_gar_role {
	MK_GAR_COMPUTE = 0, /* GEMM tiles */
	MK_GAR_INTRA = 1,   /* sum the node's partials of my slice */
	MK_GAR_SEND = 2,    /* put my slice's node sums to the other nodes */
	MK_GAR_REDUCE = 3,  /* add the other nodes' sums (several nodes), then publish */
	MK_GAR_ROLES = 4,
};

struct mk_gar_split {
	int sms[MK_GAR_ROLES]; /* starting CTAs per role; they sum to the share */
	int min[MK_GAR_ROLES]; /* the adaptive controller's bounds */
	int max[MK_GAR_ROLES];
	int max_step; /* most communication CTAs the controller adds or removes per call */
};

/*
 * The split for one rank's share of the SMs, from the policy engine's answer for that share
 * (`policy_sms`, `policy_min`, `policy_max`, `max_step`: struct mk_policy_sm_split) or from
 * `role_split` ("compute,intra,send,reduce", MKERNEL_ROLE_SPLIT) when it holds four numbers
 * >= 0: its communication counts are taken as given and compute gets the rest. Roles the
 * layout does not use (intra with one rank per node, send with one node, every communication
 * role with one rank in all) give their CTAs to compute. 0, or -EINVAL when no CTA is left for
 * compute.
 */
int mk_gar_split_plan(const int policy_sms[MK_GAR_ROLES], const int policy_min[MK_GAR_ROLES],
		      const int policy_max[MK_GAR_ROLES], int max_step, int share, int nnodes,
		      int nlocal, const char *role_split, struct mk_gar_split *out);

/*
 * How many CTAs the adaptive controller could move between compute and communication: the
 * communication roles' room between their bounds. 0 (one rank in all, or bounds pinned by
 * MKERNEL_ROLE_SPLIT's extremes) leaves it nothing to decide, and a call that would only pay
 * for its timing and bookkeeping runs static.
 */
int mk_gar_split_room(const struct mk_gar_split *sp);

/* Whether a call with split sp runs the adaptive controller: `wanted` (mk_roles_adaptive) where
 * the split has room (above), else 0: mkGemmAllReduce and the seqpar ops ask this. */
int mk_gar_split_adaptive(const struct mk_gar_split *sp, int wanted);

/*
 * The search's constants. WARM: calls at the starting count before the first probe, so that the
 * run-to-run spread is known before any probe is judged against it. PROBE_MAX: pairs of calls
 * (probe, best) a probe may take before it is given up. SIGMAS: how many spreads of the pairs'
 * mean difference the probe must gain by (the spread of one call being the mean absolute
 * deviation at the best count; that of a difference, sqrt(2) times it; of a mean of n, over
 * sqrt(n)).
 */
#define MK_GAR_WARM	 8
#define MK_GAR_PROBE_MAX 16
#define MK_GAR_SIGMAS	 2

/* The adaptive controller's state per shape (device memory; zero = nothing measured yet). */
struct mk_gar_ctl {
	unsigned long long best_t; /* duration of a call with best_c communication CTAs, ns */
	unsigned long long noise;  /* run-to-run spread at best_c: mean |t - best_t|, ns */
	unsigned long long pend_t; /* the probe's durations so far, summed */
	unsigned long long pend_b; /* the durations of the calls at best_c paired with them */
	int best_c;		   /* the best count found so far */
	int step;		   /* distance of the next probe from best_c; 0 = settled */
	int up;			   /* 0: the next probe is below best_c, 1: above */
	int pend_c;		   /* the probe's count + 1 while it is being measured; 0: none */
	int pend_n;		   /* calls at the probe, each paired with one at best_c */
	int warm;		   /* calls measured at the starting count (up to MK_GAR_WARM) */
};

/*
 * A probe is judged on pairs: each call at the probe is followed by one at the best count, and
 * the gain is the mean of the pairs' differences. Ranks that share a GPU slow each other by
 * what the other is doing at the time (probing a poor count, say), so a probe compared with
 * the best's time from earlier calls could win by the other's change alone; within a pair both
 * calls see nearly the same neighbour. The spread of a difference of two calls is sqrt(2) that
 * of one.
 */
MK_GAR_HD double mk_gar_gain(const struct mk_gar_ctl *s)
{
	return ((double)s->pend_b - (double)s->pend_t) / s->pend_n;
}

/*
 * The probe beats the best: by 0.5 % at least, and by MK_GAR_SIGMAS spreads of a mean of
 * pend_n differences; squared, so that the device needs no square root.
 */
MK_GAR_HD int mk_gar_faster(const struct mk_gar_ctl *s)
{
	const double gain = mk_gar_gain(s), bar = (double)MK_GAR_SIGMAS * (double)s->noise;

	return gain * 200.0 > (double)s->pend_b / s->pend_n &&
	       gain * gain * s->pend_n > 2.0 * bar * bar;
}

/* The probe will not win: the pairs' mean is not in its favour by even one spread of it. */
MK_GAR_HD int mk_gar_hopeless(const struct mk_gar_ctl *s)
{
	const double gain = mk_gar_gain(s), noise = (double)s->noise;

	return gain <= 0.0 && gain * gain * s->pend_n >= 2.0 * noise * noise;
}

/* How much slower than the best's time a call counts at most: two spreads, or an eighth. */
MK_GAR_HD unsigned long long mk_gar_slack(const struct mk_gar_ctl *s)
{
	return 2 * s->noise > s->best_t / 8 ? 2 * s->noise : s->best_t / 8;
}

MK_GAR_HD unsigned long long mk_gar_clamp(const struct mk_gar_ctl *s, unsigned long long t)
{
	const unsigned long long most = s->best_t + mk_gar_slack(s);

	return t > most ? most : t;
}

/* A probe that did not win: try the other side, then halve the step. */
MK_GAR_HD void mk_gar_lost(struct mk_gar_ctl *s)
{
	s->pend_c = 0;
	if (!s->up) {
		s->up = 1;
	} else {
		s->up = 0;
		s->step /= 2;
	}
}

/*
 * One more call at the best count: its time and spread, as running means while warming up. A
 * call far slower than the best's time counts as at most two spreads (or an eighth) slower, and
 * a warm-up call far faster starts the warm-up again from it: ranks sharing a GPU wait on each
 * other's kernels (on layout b a call's p90 was 3.7 times its median), and one such call would
 * lift the best's time until any probe beat it.
 */
MK_GAR_HD void mk_gar_at_best(struct mk_gar_ctl *s, unsigned long long t)
{
	const unsigned long long slack = mk_gar_slack(s);
	unsigned long long dev;

	if (s->warm < MK_GAR_WARM && t + slack < s->best_t) {
		/* the calls before were the slow ones: the warm-up starts again from this one */
		s->best_t = t;
		s->noise = 0;
		s->warm = 0;
		return;
	}
	t = mk_gar_clamp(s, t);
	dev = t > s->best_t ? t - s->best_t : s->best_t - t;

	if (s->warm < MK_GAR_WARM) {
		s->warm++;
		s->noise = (s->noise * (unsigned long long)(s->warm - 1) + dev) /
			   (unsigned long long)s->warm;
		s->best_t = (s->best_t * (unsigned long long)s->warm + t) /
			    (unsigned long long)(s->warm + 1);
		return;
	}
	s->noise = (3 * s->noise + dev) / 4;
	s->best_t = (3 * s->best_t + t) / 4;
}

/*
 * The search's first step from the starting count `cur`: as far as the start itself (the first
 * probe below is then out of range, so the first one doubles it), or a quarter of the range when
 * that is more. The start (the static split: calibrated on one machine, from the table on
 * others) can be several times too small, and under several per cent of run-to-run noise a step
 * of a few CTAs gains too little to be told from noise, so the search stayed near it: on 2 nodes
 * x 2 ranks at M 4096 (docs/benchmarks.md, section 7) 4 CTAs against the best static split's 12,
 * at 0.924 of its speed. With half the start as the first step, 26 % of simulated searches on
 * that curve under +-5 % noise ended below 0.95 of the best (test_gar_plan.c).
 */
MK_GAR_HD int mk_gar_first_step(int cur, int lo, int hi)
{
	const int step = cur > (hi - lo) / 4 ? cur : (hi - lo) / 4;

	return step > 0 ? step : 1;
}

/*
 * The controller's search over the number of communication CTAs, fed with each call's
 * duration `t` (ns) at `cur` CTAs. The first measured call's count is the best so far (the
 * static split, calibrated where measured); it runs MK_GAR_WARM more times, which gives its
 * time and the run-to-run spread. Then probes go `step` below it, then above. A probe whose
 * first call is slower than the best by twice the spread is lost at once; otherwise calls
 * alternate between the best count and the probe, up to MK_GAR_PROBE_MAX pairs, and the probe
 * becomes the best once the mean of the pairs' differences beats the best by MK_GAR_SIGMAS
 * spreads of that mean (a 4 % better count under 5 % noise is found; one lucky call, or a
 * neighbour's change between calls, cannot move the split), or is lost once that mean is not
 * even one spread in its favour. Every call at the best count keeps its time and spread
 * current. The search goes on the winning way with the same step; two lost probes halve the
 * step, and a step of 0 settles. Returns the count for the next call.
 */
MK_GAR_HD int mk_gar_climb_next(struct mk_gar_ctl *s, int cur, unsigned long long t, int lo, int hi)
{
	if (s->pend_c != 0 && cur != s->pend_c - 1 && cur != s->best_c)
		s->pend_c = 0; /* the call ran elsewhere: forget the probe */
	if (s->best_t == 0) {
		s->best_t = t;
		s->best_c = cur;
		s->noise = 0;
		s->warm = 0;
		s->step = mk_gar_first_step(cur, lo, hi);
		s->up = 0;
	} else if (s->pend_c != 0 && cur != s->best_c) {
		s->pend_t += mk_gar_clamp(s, t); /* a probe's call: its pair at the best follows */
		s->pend_n++;
		return s->best_c;
	} else if (s->pend_c != 0) {
		s->pend_b += mk_gar_clamp(s, t); /* the pair complete: judge the probe */
		mk_gar_at_best(s, t);
		if (mk_gar_faster(s)) {
			s->best_t = s->pend_t / (unsigned long long)s->pend_n;
			s->best_c = s->pend_c - 1;
			s->pend_c = 0;
		} else if (s->pend_n >= MK_GAR_PROBE_MAX || mk_gar_hopeless(s)) {
			mk_gar_lost(s);
		} else {
			return s->pend_c - 1; /* another pair */
		}
	} else if (cur == s->best_c) {
		mk_gar_at_best(s, t);
	} else if (t <= s->best_t + 2 * s->noise) {
		s->pend_c = cur + 1; /* not clearly slower: measured in pairs with the best */
		s->pend_t = mk_gar_clamp(s, t);
		s->pend_b = 0;
		s->pend_n = 1;
		return s->best_c;
	} else {
		mk_gar_lost(s);
		return s->best_c;
	}
	if (s->warm < MK_GAR_WARM)
		return s->best_c;
	while (s->step > 0) {
		const int next = s->best_c + (s->up ? s->step : -s->step);

		if (next >= lo && next <= hi)
			return next;
		mk_gar_lost(s); /* no room on this side */
	}
	return s->best_c;
}

/*
 * The search is over: warmed up, no probe pending, step 0. Nothing moves a settled split again
 * (mk_gar_climb_next returns best_c for ever), so the kernels stop measuring: a settled call
 * runs as a static one at the settled split, without the duration's atomic, the busy sums and
 * the last CTA's step.
 */
MK_GAR_HD int mk_gar_settled(const struct mk_gar_ctl *s)
{
	return s->best_t != 0 && s->warm >= MK_GAR_WARM && s->step == 0 && s->pend_c == 0;
}

/*
 * Whether a call measures for the controller (the kernels' thread 0, after the entry's wait):
 * adaptive, on the node's leader (local rank 0), and the search not settled. One search per
 * node: ranks of a node wait on each other's tiles, so a call lasts as long on each of them and
 * every rank runs the split the leader's search wrote (its split words, read after the entry
 * waited for the leader's previous call); with a search on every rank, each took the others'
 * probes for its own and they settled on splits that were slower together (GEMM+ReduceScatter
 * on layout b at 4096: 0.64 of the best static split, docs/benchmarks.md, section 13).
 */
MK_GAR_HD int mk_gar_measures(int adaptive, int local_rank, const struct mk_gar_ctl *ctl)
{
	return adaptive && local_rank == 0 && !mk_gar_settled(ctl);
}

/*
 * The split a call of `grid` CTAs runs with, into split: the node leader's words `lead` when
 * adaptive, the static split otherwise; returns whether the call measures for the controller
 * (mk_gar_measures). A rank whose grid the leader's split does not fill (another share of its
 * GPU's SMs than the leader's) runs its static split and does not measure: the leader's counts
 * are for the leader's grid.
 */
MK_GAR_HD int mk_gar_split_pick(int adaptive, int local_rank, const int *lead,
				const struct mk_gar_split *sp, const struct mk_gar_ctl *ctl,
				int grid, int *split)
{
	int sum = 0;

	for (int r = 0; r < MK_GAR_ROLES; r++) {
		split[r] = adaptive ? lead[r] : sp->sms[r];
		sum += split[r];
	}
	if (sum == grid)
		return mk_gar_measures(adaptive, local_rank, ctl);
	for (int r = 0; r < MK_GAR_ROLES; r++)
		split[r] = sp->sms[r];
	return 0;
}

/* The search's next count (unchanged for an unmeasured call), kept within [lo, hi]. */
MK_GAR_HD int mk_gar_climb(struct mk_gar_ctl *s, int cur, unsigned long long t, int lo, int hi)
{
	const int next = t == 0 ? cur : mk_gar_climb_next(s, cur, t, lo, hi);

	return next < lo ? lo : next > hi ? hi : next;
}

/*
 * The adaptive controller, run by the last CTA of a call: the search above picks how many
 * CTAs communicate (within the bounds, compute keeps its minimum); they are shared among the
 * communication roles by what the call measured of each, `busy[r]` (ns CTAs spent working, not
 * waiting, in role r), after each role's minimum. `cur` (the split the call ran with) is
 * rewritten in place with the next call's split.
 */
MK_GAR_HD void mk_gar_adapt(const unsigned long long busy[MK_GAR_ROLES],
			    const struct mk_gar_split *b, int grid, struct mk_gar_ctl *ctl,
			    unsigned long long t, int cur[MK_GAR_ROLES])
{
	unsigned long long comm = 0;
	int now = 0, want, lo = 0, hi = 0, left;

	for (int r = 1; r < MK_GAR_ROLES; r++) {
		comm += busy[r];
		now += cur[r];
		lo += b->min[r];
		hi += b->max[r];
	}
	if (hi > grid - b->min[MK_GAR_COMPUTE])
		hi = grid - b->min[MK_GAR_COMPUTE];
	want = mk_gar_climb(ctl, now, t, lo, hi);
	/* Every role its minimum, then the rest in proportion to busy time, within max (cur is
	 * rewritten in place: no scratch array, so the kernel keeps it in shared memory). */
	left = want;
	for (int r = 1; r < MK_GAR_ROLES; r++) {
		cur[r] = b->min[r];
		left -= cur[r];
	}
	for (int r = 1; r < MK_GAR_ROLES && comm > 0; r++) {
		int more = (int)(((unsigned long long)(want - lo) * busy[r] + comm / 2) / comm);

		if (more > left)
			more = left;
		if (cur[r] + more > b->max[r])
			more = b->max[r] - cur[r];
		if (more > 0) {
			cur[r] += more;
			left -= more;
		}
	}
	/* Rounding leftovers (or everything, when nothing was measured) go to the busiest role
	 * with room, the one with fewer CTAs on ties. */
	while (left > 0) {
		int best = -1;

		for (int r = 1; r < MK_GAR_ROLES; r++) {
			if (cur[r] < b->max[r] && (best < 0 || busy[r] > busy[best] ||
						   (busy[r] == busy[best] && cur[r] < cur[best])))
				best = r;
		}
		if (best < 0)
			break;
		cur[best]++;
		left--;
	}
	cur[MK_GAR_COMPUTE] = grid - (want - left);
}

/*
 * mkGemmAllReduce's signal words end at mk_sig_gar_end (fused/ops/signals.h: the map of every
 * op's range); the one-shot path takes the last `nnodes` of them (node n's put raises
 * mk_gar1_sig_end(nsignals) - nnodes + n), the fused kernel the ones before.
 */
MK_GAR_HD unsigned int mk_gar1_sig_end(unsigned int nsignals)
{
	return mk_sig_gar_end(nsignals);
}

#define MK_GAR1_THREADS	    256 /* threads per CTA of the one-shot kernel, one LL line each */
#define MK_GAR1_SHARED_CTAS 16

/*
 * The one-shot kernel's CTAs for `lines` LL lines (a slice's with several nodes): one per
 * MK_GAR1_THREADS lines, within the rank's `share` of the SMs, within `cap` when it is positive
 * (MKERNEL_GEMM_AR_ONESHOT_CTAS), else within MK_GAR1_SHARED_CTAS where `gpu_share` ranks share
 * the GPU; at least 1. Why the shared cap: every CTA may spin-wait on another rank's kernel, and a
 * cooperative launch keeps only its own CTAs co-resident; on one H200 under MPS, 64-66 CTAs per
 * rank stalled calls for 1-54 ms and summed stale slices across fake nodes, 4 and 16 never did,
 * and 16 was as fast as 66 up to M = 16 (docs/benchmarks.md, section 7).
 */
int mk_gar1_grid(int lines, int share, int gpu_share, int cap);

/*
 * The one-shot path's slices: local rank j sums (with several nodes) and receives lines
 * [mk_gar1_slice(lines, nlocal, j), mk_gar1_slice(lines, nlocal, j + 1)); the slices cover every
 * line once and differ in length by at most one.
 */
MK_GAR_HD int mk_gar1_slice(int lines, int nlocal, int j)
{
	return (int)((long long)lines * j / nlocal);
}

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H */
