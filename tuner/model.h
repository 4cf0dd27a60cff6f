/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Built-in cost model, private to tuner/: time estimates for ring and tree collectives per
 * protocol from link bandwidth and per-hop latency, and the static per-op SM split table for
 * fused kernels.
 */
#ifndef MK_TUNER_MODEL_H
#define MK_TUNER_MODEL_H

#include <stdint.h>

#include "policy.h"

/* Link parameters (from MKERNEL_TUNER_{NVL,NET}_{GBPS,LAT_NS}). */
struct mk_model_links {
	double nvl_gbps;   /* intra-node bandwidth per GPU and direction, GB/s */
	double nvl_lat_us; /* intra-node latency per hop, us */
	double net_gbps;   /* network bandwidth per GPU and direction, GB/s */
	double net_lat_us; /* network latency per hop, us */
};

/*
 * Estimated time in us of one collective of nbytes with algo/proto on topo, or a negative value
 * when the model does not cover the combination (only ring and tree are modelled; tree only
 * for allreduce).
 */
double mk_model_coll_us(const struct mk_policy_topo *topo, const struct mk_model_links *links,
			int coll, int algo, int proto, uint64_t nbytes);

/*
 * The static split of op on a GPU with sms SMs and nnodes nodes of ranks_per_node GPUs: the
 * tuned reference split at 132 SMs, scaled to sms, with roles that have no peers folded into
 * the others. Fills out->sms[] only. 0, or -EINVAL for an unknown op.
 */
int mk_model_sm_split(int op, int sms, int nnodes, int ranks_per_node,
		      struct mk_policy_sm_split *out);

/*
 * A GEMM of m x n x k followed by the collective `op` fuses with it (all-reduce or
 * reduce-scatter of the m x n product, all-gather of the m x k A) on topo: unfused = GEMM on all
 * `sms`, then the ring collective; fused = the GEMM on `compute_sms` overlapped with the same
 * collective, plus `overhead_us`. `tflops` is the GEMM rate on all SMs. Sets both estimates
 * (us); 0, or -1 for an op that is not a GEMM + collective.
 */
int mk_model_gemm_coll_us(const struct mk_policy_topo *topo, const struct mk_model_links *links,
			  int op, uint64_t m, uint64_t n, uint64_t k, int dtype_bytes, int sms,
			  int compute_sms, double tflops, double overhead_us, double *fused_us,
			  double *unfused_us);

/*
 * A MoE dispatch or combine of `pairs` (token, expert) rows of `hidden` elements per rank,
 * expert GEMMs hidden x inter: unfused = the exchange (rows to node peers over NVLink, to other
 * nodes over the network, the slower side) plus the GEMMs plus `host_us` (the unfused path
 * reads the counts on the host); fused = the GEMMs on `compute_sms` overlapped with the
 * exchange, plus `overhead_us`.
 */
void mk_model_moe_us(const struct mk_policy_topo *topo, const struct mk_model_links *links,
		     uint64_t pairs, uint64_t hidden, uint64_t inter, int dtype_bytes, int sms,
		     int compute_sms, double tflops, double overhead_us, double host_us,
		     double *fused_us, double *unfused_us);

/* Fill min/max/window/max_step of out around its sms[] (controller bounds). */
void mk_model_controller(int sms, struct mk_policy_sm_split *out);

#endif /* MK_TUNER_MODEL_H */
