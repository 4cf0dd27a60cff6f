/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The adaptive controller's step at the end of a fused call (device side of
 * gemm_allreduce_plan.h's rule), shared by mkGemmAllReduce, the seqpar ops and ring attention.
 */
#ifndef MK_FUSED_OPS_ADAPT_DEV_CUH
#define MK_FUSED_OPS_ADAPT_DEV_CUH

#include "fused/common/ptx.cuh"
#include "fused/common/wait.cuh"
#include "fused/ops/gemm_allreduce_plan.h"

/* The split a call runs with (its CTAs' thread 0, after the entry's wait): mk_gar_split_pick
 * over this launch's grid. */
MK_DEV int mk_gar_split_take(int adaptive, int local_rank, const int *lead,
			     const struct mk_gar_split *sp, const struct mk_gar_ctl *ctl,
			     int *split_s)
{
	return mk_gar_split_pick(adaptive, local_rank, lead, sp, ctl, (int)gridDim.x, split_s);
}

/* A CTA's busy time per role into the call's sums (thread 0 of a measured call). */
MK_DEV void mk_gar_busy_add(unsigned long long *sum, const unsigned long long *busy)
{
#pragma unroll
	for (int r = 0; r < MK_GAR_ROLES; r++) {
		if (busy[r] != 0)
			atomicAdd(&sum[r], busy[r]);
	}
}

/*
 * Run by one thread of the last CTA out. `busy`: each role's busy time, summed by the CTAs
 * (zeroed here for the next call); `t0`: when the call's first CTA passed its entry wait (0 or
 * ~0: the first call of a shape, nothing measured); `ran`: the split the call ran with; `next`:
 * where the next call reads its split. The search's state is worked on in shared memory and
 * written back once, so that its dependent reads and writes do not each wait a round trip to
 * global memory while the call's last CTA holds its SM. Only measured calls run it
 * (mk_gar_measures: the node's leader, until its search settles).
 */
MK_DEV void mk_gar_adapt_last(unsigned long long *busy, const struct mk_gar_split *sp,
			      struct mk_gar_ctl *ctl, unsigned long long t0, const int *ran,
			      int *next)
{
	/* shared, not local: the rule indexes them at run time */
	__shared__ unsigned long long busy_s[MK_GAR_ROLES];
	__shared__ int cur_s[MK_GAR_ROLES];
	__shared__ struct mk_gar_ctl ctl_s;
	const unsigned long long t = t0 != 0 && t0 != ~0ull ? mk_globaltimer_ns() - t0 : 0;

	for (int r = 0; r < MK_GAR_ROLES; r++) {
		busy_s[r] = atomicExch(&busy[r], 0ull);
		cur_s[r] = ran[r];
	}
	ctl_s = *ctl;
	mk_gar_adapt(busy_s, sp, (int)gridDim.x, &ctl_s, t, cur_s);
	*ctl = ctl_s;
	for (int r = 0; r < MK_GAR_ROLES; r++)
		next[r] = cur_s[r];
}

#endif
