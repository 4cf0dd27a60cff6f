/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Built-in cost model, private to tuner/: time estimates for ring and tree collectives per
 * protocol from link bandwidth and per-hop latency, the static per-op SM split table for fused
 * kernels, and per fused op the estimates of its paths (unfused, fused, one-shot) from measured
 * inputs: GEMM times per shape class, links and fixed costs from the calibration (calib.h).
 */
#ifndef MK_TUNER_MODEL_H
#define MK_TUNER_MODEL_H

#include <stdint.h>

#include "calib.h"
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

/*
 * Ring attention (mkRingAttention) of m = seqLocal query rows x n = heads x head dim against the
 * whole sequence of nranks x m keys, k = batch, kv_n = key/value heads x head dim: unfused =
 * ring all-gather of every rank's K and V, then attention on all `sms` at `tflops`; fused =
 * attention overlapped with the ring's traffic T (node peers' blocks over NVLink, each block
 * once per other node over the network): the communication roles' SMs (sms - compute_sms)
 * compute too once T is over, and the last block's step (1/nranks of the work) follows T:
 * max(attention + T (sms - compute_sms) / sms, T + attention / nranks) + `overhead_us`. Sets
 * both (us).
 */
void mk_model_ring_attn_us(const struct mk_policy_topo *topo, const struct mk_model_links *links,
			   uint64_t m, uint64_t n, uint64_t k, uint64_t kv_n, int causal,
			   int dtype_bytes, int sms, int compute_sms, double tflops,
			   double overhead_us, double *fused_us, double *unfused_us);

/* Fill min/max/window/max_step of out around its sms[] (controller bounds). */
void mk_model_controller(int sms, struct mk_policy_sm_split *out);

/* Links: the calibration's measured ones where it has them, else `knobs`. */
void mk_model_links_calibrated(const struct mk_model_links *knobs, const struct mk_calib *c,
			       struct mk_model_links *out);

/*
 * Largest output the one-shot path takes: its exchange buffers (flags packed with the data, two
 * sets for consecutive calls) are sized from it; above it the exchange is bandwidth-bound and
 * the ring or the fused kernel wins anyway.
 */
#define MK_MODEL_ONESHOT_MAX_BYTES  (8ull << 20)
/* A measured fused time must be below the unfused one by this factor to be chosen (model.c). */
#define MK_MODEL_MEASURED_MARGIN    1.05
/*
 * The one-shot path across nodes must be estimated below the path it replaces by this factor
 * (model.c). On the H200's 2 fake nodes x 1 rank (d84f138) it lost at every cell where it was
 * estimated 9-12 % ahead (0.73-0.92 of cuBLAS + NCCL at 1 x 8192 x 8192 and 128 x 4096 x 4096/8192)
 * and won where estimated 31 % ahead or more (1.02-1.43, M = 1 and 16); on 2 x 2 every estimate
 * was 33 % ahead or more and won (1.08-2.33).
 */
#define MK_MODEL_ONESHOT_NET_MARGIN 1.15

/* What the fused-op model reads besides the query. */
struct mk_model_env {
	struct mk_model_links links;
	const struct mk_calib *calib; /* GEMM times per class; NULL = none */
	double tflops;		      /* GEMM rate where the calibration has no class near */
	double overhead_us;	      /* a fused call's fixed cost where the calibration has none */
	uint64_t oneshot_max_bytes;   /* largest output the one-shot path takes */
};

/* Estimates of one fused op's paths, in us (a path that does not apply: -1). */
struct mk_model_estimate {
	double compute_us; /* the op's compute on the whole GPU */
	double coll_us;	   /* the unfused path's collective (0 with one rank: none runs) */
	double unfused_us; /* compute, then the collective */
	double fused_us;   /* one persistent kernel, compute and communication overlapped */
	double oneshot_us; /* compute, then a one-shot exchange (GEMM + all-reduce: decode) */
	int path;	   /* enum mk_policy_path: the cheapest */
};

/*
 * One row per fused op (a table indexed by enum mk_fused_op): what its unfused path runs and how
 * its fused paths communicate. An op without a row is not modelled.
 */
struct mk_model_op {
	int coll; /* enum mk_coll the unfused path runs after the compute */
	int gemm; /* 1: the compute is a GEMM (calibrated times); 0: flops at the knob's rate */
	/* the compute as (m, n, k) of a GEMM (2 m n k flops) and the collective's bytes */
	void (*shape)(const struct mk_policy_op_query *q, uint64_t mnk[3], uint64_t *bytes);
	/* communication of the fused kernel, overlapped with the compute */
	double (*fused_comm_us)(const struct mk_policy_topo *t, const struct mk_model_links *l,
				uint64_t bytes);
	/* communication of the one-shot path after the compute, or NULL (no such path) */
	double (*oneshot_comm_us)(const struct mk_policy_topo *t, const struct mk_model_links *l,
				  uint64_t bytes);
};

/* The row of op, or NULL. */
const struct mk_model_op *mk_model_op_row(int op);

/*
 * Estimate the paths of q's op with `compute_sms` of `sms` SMs computing in the fused kernel.
 * 0, or -ENOENT (op not modelled, or a shape of zeros).
 */
int mk_model_fused_estimate(const struct mk_policy_op_query *q, const struct mk_model_env *env,
			    int compute_sms, int sms, struct mk_model_estimate *out);

#endif /* MK_TUNER_MODEL_H */
