// SPDX-License-Identifier: Apache-2.0
/*
 * The built-in cost model. Collectives: ring and tree time per protocol from a per-step latency
 * (link latency per hop plus the protocol's own synchronisation cost) and a data term (bytes
 * each rank moves over the slowest link divided by the protocol's usable share of its
 * bandwidth). Fused ops: the static per-op split table and the controller bounds around it.
 * Pure functions, no state, no logging.
 */
#include <errno.h>
#include <math.h>

#include "model.h"

/* Share of link bandwidth a protocol delivers: LL sends a flag with every 4-byte word, LL128
 * one flag word per 128-byte line; SIMPLE moves payload only. */
static const double proto_eff[MK_PROTO_COUNT] = { 0.5, 0.92, 1.0 };

/* Protocol cost per pipeline step in us on top of the link latency: LL polls flags inline,
 * LL128 needs 128-byte stores to land, SIMPLE synchronises through fences and counters. */
static const double proto_step_us[MK_PROTO_COUNT] = { 0.5, 1.0, 3.0 };

/* Tree moves every byte up and down through a chain inside the node: a little below the link. */
#define MODEL_TREE_EFF 0.9

/* The reference split: tuned at 132 SMs on 2 nodes of 8 GPUs. */
#define MODEL_REF_SMS 132

static const int ref_split[MK_FUSED_OP_COUNT][MK_ROLE_COUNT] = {
	/*				compute intra send reduce */
	[MK_FUSED_GEMM_ALLREDUCE] = { 116, 12, 4, 0 },
	/* mKernel's (120, 0, 4, 8) reduced within the node in its reduce role; here the
	 * intra role sums the node's partials and reduce adds the other nodes' sums */
	[MK_FUSED_GEMM_REDUCESCATTER] = { 116, 8, 4, 4 },
	[MK_FUSED_ALLGATHER_GEMM] = { 120, 8, 4, 0 },
	[MK_FUSED_RING_ATTENTION] = { 104, 12, 8, 8 },
	[MK_FUSED_MOE_DISPATCH] = { 72, 44, 8, 8 },
	/* the expert GEMM first, its rows pulled and summed within the node, partials sent */
	[MK_FUSED_MOE_COMBINE] = { 100, 24, 4, 4 },
};

static int model_rpn(const struct mk_policy_topo *t)
{
	int nodes = t->nnodes > 0 ? t->nnodes : 1;

	if (t->ranks_per_node > 0)
		return t->ranks_per_node;
	return (t->nranks + nodes - 1) / nodes;
}

static double model_ring_us(const struct mk_policy_topo *t, const struct mk_model_links *l,
			    int coll, int proto, double bytes, double bw)
{
	double p = t->nranks, steps, factor;
	double hop = t->nnodes > 1 ? l->net_lat_us : l->nvl_lat_us;

	switch (coll) {
	case MK_COLL_ALLREDUCE:
		steps = 2 * (p - 1);
		factor = 2 * (p - 1) / p;
		break;
	case MK_COLL_ALLGATHER:
	case MK_COLL_REDUCESCATTER:
		steps = p - 1;
		factor = (p - 1) / p;
		break;
	case MK_COLL_BROADCAST:
	case MK_COLL_REDUCE:
		steps = p - 1;
		factor = 1;
		break;
	default:
		return -1;
	}
	return steps * (hop + proto_step_us[proto]) + factor * bytes / (proto_eff[proto] * bw);
}

static double model_tree_us(const struct mk_policy_topo *t, const struct mk_model_links *l,
			    int proto, double bytes, double bw)
{
	double depth = t->nnodes > 1 ? ceil(log2((double)t->nnodes)) : 0;
	double chain = model_rpn(t) - 1;
	double lat = depth * (l->net_lat_us + proto_step_us[proto]) +
		     chain * (l->nvl_lat_us + proto_step_us[proto]);

	return 2 * lat + 2 * bytes / (MODEL_TREE_EFF * proto_eff[proto] * bw);
}

double mk_model_coll_us(const struct mk_policy_topo *t, const struct mk_model_links *l, int coll,
			int algo, int proto, uint64_t nbytes)
{
	double bw;

	if (proto < 0 || proto >= MK_PROTO_COUNT || t->nranks < 1)
		return -1;
	if (t->nranks == 1)
		return algo == MK_ALGO_RING && proto == MK_PROTO_SIMPLE ? 0 : -1;
	/* GB/s -> bytes per us; the slowest link a ring or tree crosses. */
	bw = 1e3 * (t->nnodes > 1 ? fmin(l->net_gbps, l->nvl_gbps) : l->nvl_gbps);
	if (bw <= 0)
		return -1;
	if (algo == MK_ALGO_RING)
		return model_ring_us(t, l, coll, proto, (double)nbytes, bw);
	if (algo == MK_ALGO_TREE && coll == MK_COLL_ALLREDUCE)
		return model_tree_us(t, l, proto, (double)nbytes, bw);
	return -1;
}

int mk_model_sm_split(int op, int sms, int nnodes, int ranks_per_node,
		      struct mk_policy_sm_split *out)
{
	int split[MK_ROLE_COUNT], comm = 0;

	if (op < 0 || op >= MK_FUSED_OP_COUNT || sms < MK_ROLE_COUNT)
		return -EINVAL;
	for (int r = 0; r < MK_ROLE_COUNT; r++)
		split[r] = ref_split[op][r];
	/* One node: nothing crosses the network; its SMs move to the intra-node role. */
	if (nnodes <= 1) {
		split[MK_ROLE_INTRA] += split[MK_ROLE_SEND] + split[MK_ROLE_REDUCE];
		split[MK_ROLE_SEND] = split[MK_ROLE_REDUCE] = 0;
	}
	/* One GPU per node: no NVLink peers; intra-node SMs go back to compute. */
	if (ranks_per_node <= 1 && nnodes > 1) {
		split[MK_ROLE_COMPUTE] += split[MK_ROLE_INTRA];
		split[MK_ROLE_INTRA] = 0;
	}
	for (int r = MK_ROLE_INTRA; r < MK_ROLE_COUNT; r++) {
		if (split[r] > 0) {
			split[r] = (split[r] * sms + MODEL_REF_SMS / 2) / MODEL_REF_SMS;
			if (split[r] < 1)
				split[r] = 1;
		}
		comm += split[r];
	}
	out->sms[MK_ROLE_COMPUTE] = sms - comm;
	for (int r = MK_ROLE_INTRA; r < MK_ROLE_COUNT; r++)
		out->sms[r] = split[r];
	return 0;
}

int mk_model_gemm_coll_us(const struct mk_policy_topo *topo, const struct mk_model_links *links,
			  int op, uint64_t m, uint64_t n, uint64_t k, int dtype_bytes, int sms,
			  int compute_sms, double tflops, double overhead_us, double *fused_us,
			  double *unfused_us)
{
	const double gemm_us = 2.0 * (double)m * (double)n * (double)k / (tflops * 1e6);
	double coll_us = 0, gemm_fused_us;
	int coll;
	uint64_t bytes;

	/* The collective the fused op hides: all-reduce and reduce-scatter of the product,
	 * all-gather of A (bytes of the whole buffer, as NCCL's tuner sees them). */
	switch (op) {
	case MK_FUSED_GEMM_ALLREDUCE:
		coll = MK_COLL_ALLREDUCE;
		bytes = m * n;
		break;
	case MK_FUSED_GEMM_REDUCESCATTER:
		coll = MK_COLL_REDUCESCATTER;
		bytes = m * n;
		break;
	case MK_FUSED_ALLGATHER_GEMM:
		coll = MK_COLL_ALLGATHER;
		bytes = m * k;
		break;
	default:
		return -1;
	}
	if (topo->nranks > 1) {
		coll_us = mk_model_coll_us(topo, links, coll, MK_ALGO_RING, MK_PROTO_SIMPLE,
					   bytes * (uint64_t)dtype_bytes);
		if (coll_us < 0)
			coll_us = 0;
	}
	gemm_fused_us = compute_sms > 0 ? gemm_us * sms / compute_sms : gemm_us;
	*unfused_us = gemm_us + coll_us;
	*fused_us = (gemm_fused_us > coll_us ? gemm_fused_us : coll_us) + overhead_us;
	return 0;
}

void mk_model_moe_us(const struct mk_policy_topo *topo, const struct mk_model_links *links,
		     uint64_t pairs, uint64_t hidden, uint64_t inter, int dtype_bytes, int sms,
		     int compute_sms, double tflops, double overhead_us, double host_us,
		     double *fused_us, double *unfused_us)
{
	const double gemm_us =
		2.0 * (double)pairs * (double)hidden * (double)inter / (tflops * 1e6);
	const double p = topo->nranks, rpn = model_rpn(topo);
	double a2a_us = 0, gemm_fused_us;

	if (topo->nranks > 1) {
		/* rows leaving the GPU: those of other node ranks over NVLink, of other nodes over
		 * the network (once per node), each side at its own rate */
		const double bytes = (double)pairs * (double)hidden * dtype_bytes;
		const double nvl = bytes * (rpn - 1) / p, net = bytes * (p - rpn) / p;

		a2a_us = nvl / (links->nvl_gbps * 1e3) + links->nvl_lat_us;
		if (topo->nnodes > 1) {
			const double t = net / (links->net_gbps * 1e3) + links->net_lat_us;

			a2a_us = a2a_us > t ? a2a_us : t;
		}
	}
	gemm_fused_us = compute_sms > 0 ? gemm_us * sms / compute_sms : gemm_us;
	*unfused_us = gemm_us + a2a_us + host_us;
	*fused_us = (gemm_fused_us > a2a_us ? gemm_fused_us : a2a_us) + overhead_us;
}

void mk_model_controller(int sms, struct mk_policy_sm_split *out)
{
	int comm_min = 0;

	for (int r = MK_ROLE_INTRA; r < MK_ROLE_COUNT; r++) {
		int used = out->sms[r] > 0;

		out->min_sms[r] = used;
		out->max_sms[r] = used ? sms / 2 : 0;
		if (out->max_sms[r] < out->sms[r])
			out->max_sms[r] = out->sms[r];
		comm_min += out->min_sms[r];
	}
	/* Compute never drops below half the GPU (or its initial share, if smaller). */
	out->min_sms[MK_ROLE_COMPUTE] = sms / 2;
	if (out->min_sms[MK_ROLE_COMPUTE] > out->sms[MK_ROLE_COMPUTE])
		out->min_sms[MK_ROLE_COMPUTE] = out->sms[MK_ROLE_COMPUTE];
	out->max_sms[MK_ROLE_COMPUTE] = sms - comm_min;
	/* The work-balance controller's cadence: window max(N/16, 2), step max(N/4, 4). */
	out->window = sms / 16 > 2 ? sms / 16 : 2;
	out->max_step = sms / 4 > 4 ? sms / 4 : 4;
}
