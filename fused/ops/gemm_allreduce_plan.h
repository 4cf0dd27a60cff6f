/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkGemmAllReduce's plan (gemm_allreduce_plan.c), plain C so it is unit-tested on any machine:
 * the order the compute role produces tiles in, the CTAs per role from the policy engine's
 * split, and the adaptive controller's rule (also compiled into the kernel, which runs it
 * between calls).
 */
#ifndef MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H
#define MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H

#ifdef __CUDACC__
#define MK_GAR_HD static inline __host__ __device__
#else
#define MK_GAR_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * order[0 .. tiles_m * tiles_n): tile ids (tm * tiles_n + tn), the slice of local rank
 * `local_rank` first (tile rows tm % nlocal == local_rank), then the next local ranks' slices
 * in turn; rows in ascending order within a slice. A permutation of all tiles.
 */
void mk_gar_tile_order(int tiles_m, int tiles_n, int local_rank, int nlocal, int *order);

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
 * The adaptive controller's rule, run by the last CTA of a call on what the call measured:
 * `busy[r]`, the nanoseconds CTAs spent working (not waiting) in role r. Work balance: the
 * communication roles get grid * comm / (compute + comm) CTAs (comm = their busy time), at most
 * max_step more or fewer than now, within the bounds; each communication role gets a share in
 * proportion to its own busy time. `cur` (the split the call ran with) is updated in place.
 */
MK_GAR_HD void mk_gar_adapt(const unsigned long long busy[MK_GAR_ROLES],
			    const struct mk_gar_split *b, int grid, int cur[MK_GAR_ROLES])
{
	unsigned long long comm = 0, total;
	int now = 0, want, lo = 0, hi, left;

	for (int r = 1; r < MK_GAR_ROLES; r++) {
		comm += busy[r];
		now += cur[r];
		lo += b->min[r];
	}
	total = comm + busy[MK_GAR_COMPUTE];
	if (total == 0)
		return; /* nothing measured: keep the split */
	want = (int)((grid * comm + total / 2) / total);
	if (want > now + b->max_step)
		want = now + b->max_step;
	if (want < now - b->max_step)
		want = now - b->max_step;
	hi = grid - b->min[MK_GAR_COMPUTE];
	if (want > hi)
		want = hi;
	if (want < lo)
		want = lo;
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
	/* Rounding leftovers go to the busiest role with room. */
	while (left > 0) {
		int best = -1;

		for (int r = 1; r < MK_GAR_ROLES; r++) {
			if (cur[r] < b->max[r] && (best < 0 || busy[r] > busy[best]))
				best = r;
		}
		if (best < 0)
			break;
		cur[best]++;
		left--;
	}
	cur[MK_GAR_COMPUTE] = grid - (want - left);
}

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H */
