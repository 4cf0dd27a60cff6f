// SPDX-License-Identifier: Apache-2.0
/*
 * The built-in cost model. Collectives: ring and tree time per protocol from a per-step latency
 * (link latency per hop plus the protocol's own synchronisation cost) and a data term (bytes
 * each rank moves over the slowest link divided by the protocol's usable share of its
 * bandwidth). Fused ops: the static per-op split table and the controller bounds around it, and
 * per op (a table of rows) the estimate of each path from measured inputs. Pure functions, no
 * state, no logging.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

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

void mk_model_ring_attn_us(const struct mk_policy_topo *topo, const struct mk_model_links *links,
			   uint64_t m, uint64_t n, uint64_t k, uint64_t kv_n, int causal,
			   int dtype_bytes, int sms, int compute_sms, double tflops,
			   double overhead_us, double *fused_us, double *unfused_us)
{
	const double R = (double)topo->nranks, G = (double)model_rpn(topo);
	const double flops =
		4.0 * (double)k * (double)n * (double)m * (double)m * R * (causal ? 0.5 : 1.0);
	const double attn_us = flops / (tflops * 1e6);
	/* my K and V: what every other rank needs of me */
	const double kv = 2.0 * (double)k * (double)m * (double)(kv_n > 0 ? kv_n : n) * dtype_bytes;
	double ag_us = 0, intra_us = 0, inter_us = 0, comm_us, attn_fused_us;

	if (topo->nranks > 1) {
		ag_us = mk_model_coll_us(topo, links, MK_COLL_ALLGATHER, MK_ALGO_RING,
					 MK_PROTO_SIMPLE, (uint64_t)(kv * R));
		if (ag_us < 0)
			ag_us = 0;
		/* GB/s = bytes per ns: x 1e3 bytes per us */
		if (links->nvl_gbps > 0)
			intra_us = (G - 1) * kv / (links->nvl_gbps * 1e3);
		if (links->net_gbps > 0)
			inter_us = (double)(topo->nnodes - 1) * kv / (links->net_gbps * 1e3);
	}
	comm_us = fmax(intra_us, inter_us);
	/*
	 * Every CTA ends in the compute role: the communication roles' SMs compute too once their
	 * blocks are through, so they cost their share of the SMs only while the traffic lasts.
	 * The last block's step (1/R of the work, on all SMs) cannot start before it arrived.
	 */
	attn_fused_us = attn_us;
	if (compute_sms > 0 && compute_sms < sms)
		attn_fused_us += comm_us * (double)(sms - compute_sms) / (double)sms;
	*unfused_us = ag_us + attn_us;
	*fused_us = fmax(attn_fused_us, comm_us + attn_us / R) + overhead_us;
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

void mk_model_links_calibrated(const struct mk_model_links *knobs, const struct mk_calib *c,
			       struct mk_model_links *out)
{
	*out = *knobs;
	if (c == NULL)
		return;
	if (c->link_set[MK_CALIB_NVL]) {
		out->nvl_gbps = c->gbps[MK_CALIB_NVL];
		out->nvl_lat_us = c->lat_us[MK_CALIB_NVL];
	}
	if (c->link_set[MK_CALIB_NET]) {
		out->net_gbps = c->gbps[MK_CALIB_NET];
		out->net_lat_us = c->lat_us[MK_CALIB_NET];
	}
}

/* ---- rows: shapes ---- */

static int model_bytes_of(const struct mk_policy_op_query *q)
{
	return q->dtype_bytes > 0 ? q->dtype_bytes : 2;
}

/* GEMM + all-reduce / reduce-scatter: the local M x N x K GEMM, then M x N over the ranks. */
static void model_shape_gemm_out(const struct mk_policy_op_query *q, uint64_t mnk[3],
				 uint64_t *bytes)
{
	mnk[0] = q->m;
	mnk[1] = q->n;
	mnk[2] = q->k;
	*bytes = q->m * q->n * (uint64_t)model_bytes_of(q);
}

/* All-gather + GEMM: the gathered A (M x K) travels, then the M x N x K GEMM. */
static void model_shape_gather_a(const struct mk_policy_op_query *q, uint64_t mnk[3],
				 uint64_t *bytes)
{
	mnk[0] = q->m;
	mnk[1] = q->n;
	mnk[2] = q->k;
	*bytes = q->m * q->k * (uint64_t)model_bytes_of(q);
}

/* Ring attention (m = tokens per rank, n = heads x head dim, k = batch): this rank's queries
 * against every rank's keys, 4 m (P m) n k flops, written as a GEMM of (k m) x (P m) x 2n; the
 * unfused path gathers K and V of every rank first. */
static void model_shape_attention(const struct mk_policy_op_query *q, uint64_t mnk[3],
				  uint64_t *bytes)
{
	const uint64_t p = (uint64_t)(q->nranks > 0 ? q->nranks : 1);

	mnk[0] = q->k * q->m;
	mnk[1] = p * q->m;
	mnk[2] = 2 * q->n;
	*bytes = 2 * q->k * p * q->m * q->n * (uint64_t)model_bytes_of(q);
}

/* ---- rows: communication ---- */

static double model_bw(double gbps)
{
	return gbps > 0 ? 1e3 * gbps : 1e-9; /* GB/s -> bytes per us */
}

/*
 * The fused GEMM + all-reduce kernel's hierarchy: the node's partials reduced and gathered over
 * NVLink (2 (G-1)/G S), each rank's 1/G slice exchanged across nodes (2 (n-1)/n S/G), the two
 * pipelined: the slower one sets the pace.
 */
static double model_fused_allreduce(const struct mk_policy_topo *t, const struct mk_model_links *l,
				    uint64_t bytes)
{
	const double g = t->ranks_per_node > 0 ? t->ranks_per_node : 1, n = t->nnodes;
	const double s = (double)bytes;
	double intra = 0, inter = 0;

	if (g > 1)
		intra = l->nvl_lat_us + 2 * (g - 1) / g * s / model_bw(l->nvl_gbps);
	if (n > 1)
		inter = l->net_lat_us + 2 * (n - 1) / n * (s / g) / model_bw(l->net_gbps);
	return intra > inter ? intra : inter;
}

/*
 * The one-shot all-reduce after the GEMM (the decode path): every rank pushes its partial to its
 * G - 1 node peers with flags packed in the data (LL: two bytes moved per byte) and sums what it
 * received: one link latency and 2 (G-1) S bytes out of each GPU. Across n nodes each rank then
 * puts its 1/G slice of the node sum to its peer on every other node (one put per node, at the
 * network's latency and bandwidth) and gathers the final slices in the node the same one-shot
 * way.
 */
static double model_oneshot_allreduce(const struct mk_policy_topo *t,
				      const struct mk_model_links *l, uint64_t bytes)
{
	const double g = t->ranks_per_node > 0 ? t->ranks_per_node : 1, n = t->nnodes;
	const double s = (double)bytes, nvl = model_bw(l->nvl_gbps);
	double us = 0;

	if (g > 1)
		us += l->nvl_lat_us + 2 * (g - 1) * s / nvl;
	if (n > 1) {
		us += l->net_lat_us + (n - 1) * (s / g) / model_bw(l->net_gbps);
		if (g > 1)
			us += l->nvl_lat_us + 2 * (g - 1) * (s / g) / nvl;
	}
	return us;
}

/* The ring collective of the op's kind at the protocol NCCL would use for that size. */
static double model_coll_best(const struct mk_policy_topo *t, const struct mk_model_links *l,
			      int coll, uint64_t bytes)
{
	double best = -1;

	for (int algo = MK_ALGO_TREE; algo <= MK_ALGO_RING; algo++) {
		for (int proto = 0; proto < MK_PROTO_COUNT; proto++) {
			double us = mk_model_coll_us(t, l, coll, algo, proto, bytes);

			if (us >= 0 && (best < 0 || us < best))
				best = us;
		}
	}
	return best;
}

static double model_fused_reducescatter(const struct mk_policy_topo *t,
					const struct mk_model_links *l, uint64_t bytes)
{
	return model_coll_best(t, l, MK_COLL_REDUCESCATTER, bytes);
}

static double model_fused_allgather(const struct mk_policy_topo *t, const struct mk_model_links *l,
				    uint64_t bytes)
{
	return model_coll_best(t, l, MK_COLL_ALLGATHER, bytes);
}

/* Fused ops with a model; other engineers' ops add a row here. */
static const struct mk_model_op model_ops[MK_FUSED_OP_COUNT] = {
	[MK_FUSED_GEMM_ALLREDUCE] = { MK_COLL_ALLREDUCE, 1, model_shape_gemm_out,
				      model_fused_allreduce, model_oneshot_allreduce },
	[MK_FUSED_GEMM_REDUCESCATTER] = { MK_COLL_REDUCESCATTER, 1, model_shape_gemm_out,
					  model_fused_reducescatter, NULL },
	[MK_FUSED_ALLGATHER_GEMM] = { MK_COLL_ALLGATHER, 1, model_shape_gather_a,
				      model_fused_allgather, NULL },
	[MK_FUSED_RING_ATTENTION] = { MK_COLL_ALLGATHER, 0, model_shape_attention,
				      model_fused_allgather, NULL },
};

const struct mk_model_op *mk_model_op_row(int op)
{
	if (op < 0 || op >= MK_FUSED_OP_COUNT || model_ops[op].shape == NULL)
		return NULL;
	return &model_ops[op];
}

/* The compute on the whole GPU: the calibration's class (either B layout) or the knob's rate. */
static double model_compute_us(const struct mk_model_op *row, const struct mk_model_env *env,
			       const uint64_t mnk[3])
{
	double us = -1;

	if (row->gemm && env->calib != NULL) {
		us = mk_calib_gemm_us(env->calib, mnk[0], mnk[1], mnk[2], 1);
		if (us < 0)
			us = mk_calib_gemm_us(env->calib, mnk[0], mnk[1], mnk[2], 0);
	}
	if (us < 0)
		us = 2.0 * (double)mnk[0] * (double)mnk[1] * (double)mnk[2] /
		     ((env->tflops > 0 ? env->tflops : 1) * 1e6);
	return us;
}

int mk_model_fused_estimate(const struct mk_policy_op_query *q, const struct mk_model_env *env,
			    int compute_sms, int sms, struct mk_model_estimate *out)
{
	const struct mk_model_op *row = mk_model_op_row(q->op);
	const int nodes = q->nnodes > 0 ? q->nnodes : 1;
	const struct mk_policy_topo t = { q->nranks, nodes,
					  q->ranks_per_node > 0 ? q->ranks_per_node
								: (q->nranks + nodes - 1) / nodes };
	uint64_t mnk[3], bytes;
	int fused_measured = 0;

	memset(out, 0, sizeof(*out));
	out->oneshot_us = -1;
	out->path = MK_PATH_UNFUSED;
	if (row == NULL || q->m == 0 || q->n == 0 || q->k == 0 || q->nranks < 1)
		return -ENOENT;
	row->shape(q, mnk, &bytes);
	out->compute_us = model_compute_us(row, env, mnk);
	if (q->nranks > 1) {
		/* NCCL's time as measured on this layout, else the link model's */
		out->coll_us = env->calib != NULL
				       ? mk_calib_coll_us(env->calib, row->coll, MK_CALIB_NCCL,
							  t.nnodes, t.ranks_per_node, bytes)
				       : -1;
		if (out->coll_us < 0)
			out->coll_us = model_coll_best(&t, &env->links, row->coll, bytes);
		if (out->coll_us < 0)
			out->coll_us = 0;
	}
	out->unfused_us = out->compute_us + out->coll_us;
	{
		const double compute = compute_sms > 0 && compute_sms < sms
					       ? out->compute_us * sms / compute_sms
					       : out->compute_us;
		const double comm = q->nranks > 1 ? row->fused_comm_us(&t, &env->links, bytes) : 0;
		/* what the fused kernel was measured to take beyond the GEMM on this layout */
		const double beyond =
			env->calib != NULL && q->nranks > 1
				? mk_calib_coll_us(env->calib, row->coll, MK_CALIB_FUSED, t.nnodes,
						   t.ranks_per_node, bytes)
				: -1;

		out->fused_us = beyond >= 0 ? out->compute_us + beyond
					    : (compute > comm ? compute : comm) + env->overhead_us;
		fused_measured = beyond >= 0;
	}
	if (row->oneshot_comm_us != NULL && q->nranks > 1 && bytes <= env->oneshot_max_bytes) {
		double x = env->calib != NULL
				   ? mk_calib_coll_us(env->calib, row->coll, MK_CALIB_ONESHOT,
						      t.nnodes, t.ranks_per_node, bytes)
				   : -1;

		if (x < 0)
			x = row->oneshot_comm_us(&t, &env->links, bytes);
		out->oneshot_us = out->compute_us + x;
	}
	/*
	 * One rank: nothing to exchange, nothing to overlap: the compute alone. A fused time that
	 * was measured (a `coll ... fused` record) must win by MK_MODEL_MEASURED_MARGIN:
	 * measurements within that of each other are a tie on the links they came from (2 emulated
	 * nodes over loopback: 0.77-1.02 of cuBLAS + NCCL for one cell in three runs), and ties go
	 * unfused.
	 */
	if (q->nranks > 1 &&
	    out->fused_us * (fused_measured ? MK_MODEL_MEASURED_MARGIN : 1.0) < out->unfused_us)
		out->path = MK_PATH_FUSED;
	/* across nodes its exchange rides the network's measurements, whose ties it lost */
	if (out->oneshot_us >= 0 &&
	    out->oneshot_us * (t.nnodes > 1 ? MK_MODEL_ONESHOT_NET_MARGIN : 1.0) <
		    (out->path == MK_PATH_FUSED ? out->fused_us : out->unfused_us))
		out->path = MK_PATH_ONESHOT;
	return 0;
}
