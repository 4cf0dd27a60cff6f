/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkGemmAllReduce's host-side plan (gemm_allreduce_plan.c), plain C so it is unit-tested on any
 * machine: the order the compute role produces tiles in, and the CTAs per role.
 */
#ifndef MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H
#define MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * order[0 .. tiles_m * tiles_n): tile ids (tm * tiles_n + tn), the slice of local rank
 * `local_rank` first (tile rows tm % nlocal == local_rank), then the next local ranks' slices
 * in turn; rows in ascending order within a slice. A permutation of all tiles.
 */
void mk_gar_tile_order(int tiles_m, int tiles_n, int local_rank, int nlocal, int *order);

struct mk_gar_split {
	int compute, reduce, publish;
};

/*
 * CTAs per role on `sms` SMs shared by `gpu_share` ranks: reduce and publish get share / 16
 * (at least 1) unless `role_split` ("compute,intra,send,reduce", MKERNEL_ROLE_SPLIT) names a
 * positive intra (reduce) or reduce (publish) count; compute gets the rest. 0, or -EINVAL when
 * no CTA is left for compute.
 */
int mk_gar_split(int sms, int gpu_share, const char *role_split, struct mk_gar_split *out);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_ALLREDUCE_PLAN_H */
