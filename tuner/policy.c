// SPDX-License-Identifier: Apache-2.0
/*
 * The policy engine: combines the environment, the rules file and the cost model in that order
 * of precedence, for NCCL collectives (cost table + channels) and for fused-op SM splits. The
 * inputs are read once per process into a reference-counted snapshot; each communicator's
 * policy keeps the rules that can match its topology so a decision scans a few entries only.
 */
#define MK_LOG_PREFIX "TUNER/mkernel"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "mk/log.h"
#include "model.h"
#include "policy.h"
#include "rules.h"
#include "tuner_params.h"

/* Tie breaker written over NCCL's zero-cost entries so the chosen 0.0 stays the minimum. */
#define POLICY_TIE_COST 1e-3f

/* Everything read from the environment and the rules file, shared by all policies. */
struct policy_inputs {
	int refs;
	struct mk_rules rules;
	int env_algo[MK_COLL_COUNT]; /* MK_ALGO_ANY when not forced */
	int env_proto[MK_COLL_COUNT];
	int channels;
	int max_channels;
	int model;
	int log_decisions;
	int gpu_sms;
	int adaptive;  /* -1 = not forced */
	int window;    /* 0 = not forced */
	int split_set; /* MKERNEL_TUNER_SM_SPLIT parsed into split */
	struct mk_rule split;
	struct mk_model_links links;
	double gemm_tflops; /* fused ops' cost model */
	double attn_tflops;
	double fused_overhead_us;
};

struct mk_policy {
	struct policy_inputs *in;
	struct mk_policy_topo topo;
	const struct mk_rule **rules[MK_COLL_COUNT]; /* rules that can match this comm */
	size_t nrules[MK_COLL_COUNT];
	const struct mk_rule **store;
	unsigned int warned; /* one bit per (source, collective) */
	int undecided_logged;
	int last_coll; /* last decision logged (MKERNEL_TUNER_LOG_DECISIONS) */
	uint64_t last_bytes;
	struct mk_policy *next; /* on policies_live */
};

static pthread_mutex_t inputs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct policy_inputs *inputs_cur;
/*
 * Live policies, under inputs_lock: a context NCCL finalizes twice (or never had) is looked up
 * here instead of being read, and the last one out releases inputs_cur.
 */
static struct mk_policy *policies_live;

static const char *const src_names[] = { "nccl", "env", "rule", "model" };

/* "ring" or "allreduce:tree,allgather:ring" into per-collective values. */
static void inputs_parse_force(const char *env, const char *val, int *out,
			       int (*lookup)(const char *, size_t))
{
	const char *s = val;

	for (int c = 0; c < MK_COLL_COUNT; c++)
		out[c] = -1;
	while (s != NULL && *s != '\0') {
		size_t len = strcspn(s, ", ");
		const char *colon = memchr(s, ':', len);
		int coll = -1, v;

		if (len == 0) {
			s++;
			continue;
		}
		if (colon != NULL)
			coll = mk_rules_coll_from_name(s, (size_t)(colon - s));
		v = colon != NULL ? lookup(colon + 1, len - (size_t)(colon + 1 - s))
				  : lookup(s, len);
		if (v < 0 || (colon != NULL && coll < 0)) {
			MK_WARN("%s: cannot parse '%.*s'; item ignored", env, (int)len, s);
		} else {
			for (int c = 0; c < MK_COLL_COUNT; c++)
				if (coll < 0 || c == coll)
					out[c] = v;
		}
		s += len;
	}
}

/* A rule an earlier one always beats is a mistake worth seeing, not an error. */
static void inputs_report_shadowed(const struct mk_rules *rs, const char *path)
{
	int shown = 0;

	for (size_t i = 1; i < rs->n && shown < 16; i++) {
		long j = mk_rules_shadowed_by(rs, i);

		if (j < 0)
			continue;
		shown++;
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_TUNING,
			"rules file %s:%d never matches: line %d comes first and covers it "
			"(first match wins)",
			path, rs->v[i].line, rs->v[j].line);
	}
}

static void inputs_read_rules(struct policy_inputs *in)
{
	const char *path = mk_param_tuner_config();
	int rc;

	if (path == NULL || *path == '\0')
		return;
	rc = mk_rules_load(&in->rules, path, NULL, NULL);
	if (rc)
		MK_WARN("rules file %s: cannot read it (%s); continuing without rules", path,
			strerror(-rc));
	else
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_TUNING,
			"rules file %s: %zu rules, %d lines ignored", path, in->rules.n,
			in->rules.bad);
	inputs_report_shadowed(&in->rules, path);
}

static void inputs_read_split(struct policy_inputs *in)
{
	const char *val = mk_param_tuner_sm_split();
	const char *reason = NULL;

	if (val == NULL || *val == '\0')
		return;
	memset(&in->split, 0, sizeof(in->split));
	for (int r = 0; r < MK_ROLE_COUNT; r++)
		in->split.sms[r] = -1;
	in->split.adaptive = -1;
	in->split.window = -1;
	if (mk_rules_parse_action(val, MK_RULE_FUSED, &in->split, &reason))
		MK_WARN("MKERNEL_TUNER_SM_SPLIT='%s': %s; ignored", val, reason);
	else
		in->split_set = 1;
}

static struct policy_inputs *inputs_read(void)
{
	struct policy_inputs *in = calloc(1, sizeof(*in));

	if (in == NULL)
		return NULL;
	in->refs = 1;
	mk_rules_init(&in->rules);
	inputs_parse_force("MKERNEL_TUNER_ALGO", mk_param_tuner_algo(), in->env_algo,
			   mk_rules_algo_from_name);
	inputs_parse_force("MKERNEL_TUNER_PROTO", mk_param_tuner_proto(), in->env_proto,
			   mk_rules_proto_from_name);
	in->channels = (int)mk_param_tuner_channels();
	in->max_channels = (int)mk_param_tuner_max_channels();
	if (in->channels < 0 || in->channels > MK_RULES_MAX_CHANNELS) {
		MK_WARN("MKERNEL_TUNER_CHANNELS=%d is outside 0..64; ignored", in->channels);
		in->channels = 0;
	}
	if (in->max_channels < 0) {
		MK_WARN("MKERNEL_TUNER_MAX_CHANNELS=%d is negative; ignored", in->max_channels);
		in->max_channels = 0;
	}
	in->model = mk_param_tuner_model() != 0;
	in->log_decisions = mk_param_tuner_log_decisions() != 0;
	in->gpu_sms = (int)mk_param_tuner_gpu_sms();
	in->adaptive = (int)mk_param_tuner_adaptive();
	in->window = (int)mk_param_tuner_window();
	in->links.nvl_gbps = (double)mk_param_tuner_nvl_gbps();
	in->links.nvl_lat_us = (double)mk_param_tuner_nvl_lat_ns() / 1e3;
	in->links.net_gbps = (double)mk_param_tuner_net_gbps();
	in->links.net_lat_us = (double)mk_param_tuner_net_lat_ns() / 1e3;
	in->gemm_tflops =
		mk_param_tuner_gemm_tflops() > 0 ? (double)mk_param_tuner_gemm_tflops() : 631.0;
	in->attn_tflops =
		mk_param_tuner_attn_tflops() > 0 ? (double)mk_param_tuner_attn_tflops() : 600.0;
	in->fused_overhead_us = (double)mk_param_tuner_fused_overhead_us();
	inputs_read_rules(in);
	inputs_read_split(in);
	return in;
}

static struct policy_inputs *inputs_get(void)
{
	struct policy_inputs *in;

	pthread_mutex_lock(&inputs_lock);
	if (inputs_cur == NULL)
		inputs_cur = inputs_read();
	in = inputs_cur;
	if (in != NULL)
		__atomic_add_fetch(&in->refs, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&inputs_lock);
	return in;
}

static void inputs_put(struct policy_inputs *in)
{
	if (in == NULL || __atomic_sub_fetch(&in->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	mk_rules_free(&in->rules);
	free(in);
}

void mk_policy_reload(void)
{
	struct policy_inputs *old;

	pthread_mutex_lock(&inputs_lock);
	old = inputs_cur;
	inputs_cur = NULL;
	mk_param_reset_all();
	mk_calib_reload();
	pthread_mutex_unlock(&inputs_lock);
	inputs_put(old);
}

/* Keep, per collective, the rules whose collective, nodes and ranks can match this comm. */
static int policy_filter_rules(struct mk_policy *p)
{
	const struct mk_rules *rs = &p->in->rules;
	size_t used = 0;

	p->store = calloc(rs->n * MK_COLL_COUNT + 1, sizeof(*p->store));
	if (p->store == NULL)
		return -ENOMEM;
	for (int c = 0; c < MK_COLL_COUNT; c++) {
		p->rules[c] = p->store + used;
		for (size_t i = 0; i < rs->n; i++) {
			const struct mk_rule *r = &rs->v[i];

			if (r->kind != MK_RULE_COLL || (r->what >= 0 && r->what != c) ||
			    !mk_range_has(&r->nodes, (uint64_t)p->topo.nnodes) ||
			    !mk_range_has(&r->ranks, (uint64_t)p->topo.nranks))
				continue;
			p->store[used++] = r;
			p->nrules[c]++;
		}
	}
	return 0;
}

int mk_policy_create(const struct mk_policy_topo *topo, struct mk_policy **out)
{
	struct mk_policy *p;
	int rc;

	if (topo == NULL || topo->nranks < 1 || topo->nnodes < 1 || topo->nnodes > topo->nranks)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return -ENOMEM;
	p->topo = *topo;
	if (p->topo.ranks_per_node <= 0)
		p->topo.ranks_per_node = (topo->nranks + topo->nnodes - 1) / topo->nnodes;
	p->last_coll = -1;
	p->in = inputs_get();
	if (p->in == NULL) {
		rc = -ENOMEM;
		goto undo_alloc;
	}
	rc = policy_filter_rules(p);
	if (rc)
		goto undo_inputs;
	pthread_mutex_lock(&inputs_lock);
	p->next = policies_live;
	policies_live = p;
	pthread_mutex_unlock(&inputs_lock);
	*out = p;
	return 0;

undo_inputs:
	inputs_put(p->in);
undo_alloc:
	free(p);
	return rc;
}

int mk_policy_destroy(struct mk_policy *p)
{
	struct policy_inputs *cache = NULL;
	struct mk_policy **pp;

	if (p == NULL)
		return 0;
	pthread_mutex_lock(&inputs_lock);
	for (pp = &policies_live; *pp != NULL && *pp != p; pp = &(*pp)->next)
		;
	if (*pp == NULL) {
		pthread_mutex_unlock(&inputs_lock);
		return -EBADF;
	}
	*pp = p->next;
	if (policies_live == NULL) {
		cache = inputs_cur; /* the snapshot's own reference goes with the last policy */
		inputs_cur = NULL;
	}
	pthread_mutex_unlock(&inputs_lock);
	free(p->store);
	inputs_put(p->in);
	inputs_put(cache);
	free(p);
	return 0;
}

static const struct mk_rule *policy_match(const struct mk_policy *p, int coll, uint64_t nbytes,
					  int pipeops, int regbuff)
{
	for (size_t i = 0; i < p->nrules[coll]; i++) {
		const struct mk_rule *r = p->rules[coll][i];

		if (mk_range_has(&r->bytes, nbytes) &&
		    mk_range_has(&r->pipeops, (uint64_t)(pipeops < 0 ? 0 : pipeops)) &&
		    mk_range_has(&r->regbuff, (uint64_t)(regbuff < 0 ? 0 : regbuff)))
			return r;
	}
	return NULL;
}

/*
 * Best usable entry among those matching algo/proto (ANY = all). Modelled entries are ranked
 * by the model when it is on; otherwise (or if none is modelled) by NCCL's own estimate, unless
 * modelled_only. Returns 0 and sets *a_out, *p_out, or -ENOENT.
 */
static int policy_pick(const struct mk_policy *p, int coll, uint64_t nbytes, const float *table,
		       int nalgo, int nproto, int algo, int proto, int modelled_only, int *a_out,
		       int *p_out)
{
	double best_model = -1, best_table = -1;
	int bm_a = -1, bm_p = -1, bt_a = -1, bt_p = -1;

	for (int a = 0; a < nalgo && a < MK_ALGO_COUNT; a++) {
		if (algo != MK_ALGO_ANY && a != algo)
			continue;
		for (int pr = 0; pr < nproto && pr < MK_PROTO_COUNT; pr++) {
			float cost = table[a * nproto + pr];
			double m;

			if ((proto != MK_PROTO_ANY && pr != proto) || !(cost >= 0.0f))
				continue;
			m = p->in->model
				    ? mk_model_coll_us(&p->topo, &p->in->links, coll, a, pr, nbytes)
				    : -1;
			if (m >= 0 && (bm_a < 0 || m < best_model)) {
				best_model = m;
				bm_a = a;
				bm_p = pr;
			}
			if (bt_a < 0 || cost < best_table) {
				best_table = cost;
				bt_a = a;
				bt_p = pr;
			}
		}
	}
	if (bm_a >= 0) {
		*a_out = bm_a;
		*p_out = bm_p;
		return 0;
	}
	if (bt_a < 0 || modelled_only)
		return -ENOENT;
	*a_out = bt_a;
	*p_out = bt_p;
	return 0;
}

static void policy_write(float *table, int nalgo, int nproto, int algo, int proto)
{
	for (int i = 0; i < nalgo * nproto; i++)
		if (table[i] == 0.0f)
			table[i] = POLICY_TIE_COST;
	table[algo * nproto + proto] = 0.0f;
}

static void policy_warn_unusable(struct mk_policy *p, enum mk_policy_src src, int coll, int algo,
				 int proto, int line)
{
	unsigned int bit = 1u << (src * MK_COLL_COUNT + coll);

	if (p->warned & bit)
		return;
	p->warned |= bit;
	MK_WARN("%s%.0d forces %s algo %s proto %s, which NCCL's table marks unusable (excluded by "
		"NCCL_ALGO/NCCL_PROTO or unsupported); using the next input",
		src == MK_POLICY_SRC_ENV ? "MKERNEL_TUNER_ALGO/PROTO" : "rules file line ", line,
		mk_rules_coll_name(coll), algo < 0 ? "*" : mk_rules_algo_name(algo),
		proto < 0 ? "*" : mk_rules_proto_name(proto));
}

static int policy_channels(const struct mk_policy *p, const struct mk_rule *rule,
			   enum mk_policy_src *src)
{
	int ch = 0;

	*src = MK_POLICY_SRC_NONE;
	if (p->in->channels > 0) {
		ch = p->in->channels;
		*src = MK_POLICY_SRC_ENV;
	} else if (rule != NULL && rule->channels > 0) {
		ch = rule->channels;
		*src = MK_POLICY_SRC_RULE;
	}
	if (p->in->max_channels > 0 && (ch == 0 || ch > p->in->max_channels)) {
		ch = p->in->max_channels;
		*src = MK_POLICY_SRC_ENV;
	}
	return ch;
}

static void policy_log_decision(struct mk_policy *p, int coll, uint64_t nbytes,
				const struct mk_policy_choice *c)
{
	if (!p->in->log_decisions || (p->last_coll == coll && p->last_bytes == nbytes))
		return;
	p->last_coll = coll;
	p->last_bytes = nbytes;
	MK_INFO(MK_SUBSYS_TUNING,
		"decision %s %" PRIu64 " bytes nodes %d ranks %d -> algo %s proto %s channels %d "
		"(algo from %s, channels from %s, rule line %d)",
		mk_rules_coll_name(coll), nbytes, p->topo.nnodes, p->topo.nranks,
		c->algo < 0 ? "nccl" : mk_rules_algo_name(c->algo),
		c->proto < 0 ? "nccl" : mk_rules_proto_name(c->proto), c->channels,
		src_names[c->src], src_names[c->channels_src], c->rule_line);
}

enum mk_policy_src mk_policy_coll(struct mk_policy *p, int coll, uint64_t nbytes, int pipeops,
				  int regbuff, float *table, int nalgo, int nproto, int *nchannels,
				  struct mk_policy_choice *choice)
{
	struct mk_policy_choice c = { MK_POLICY_SRC_NONE, MK_ALGO_ANY,
				      MK_PROTO_ANY,	  0,
				      MK_POLICY_SRC_NONE, 0 };
	const struct mk_rule *rule;
	int a, pr;

	if (p == NULL || coll < 0 || coll >= MK_COLL_COUNT || table == NULL || nalgo <= 0 ||
	    nproto <= 0) {
		MK_WARN_ONCE("cannot decide collective %d (table %p, %dx%d); NCCL's choice stands",
			     coll, (void *)table, nalgo, nproto);
		goto out;
	}
	rule = policy_match(p, coll, nbytes, pipeops, regbuff);
	c.rule_line = rule != NULL ? rule->line : 0;
	c.channels = policy_channels(p, rule, &c.channels_src);
	if (c.channels > 0 && nchannels != NULL)
		*nchannels = c.channels;

	a = p->in->env_algo[coll];
	pr = p->in->env_proto[coll];
	if (a != MK_ALGO_ANY || pr != MK_PROTO_ANY) {
		if (policy_pick(p, coll, nbytes, table, nalgo, nproto, a, pr, 0, &c.algo,
				&c.proto) == 0) {
			c.src = MK_POLICY_SRC_ENV;
			goto chosen;
		}
		policy_warn_unusable(p, MK_POLICY_SRC_ENV, coll, a, pr, 0);
	}
	if (rule != NULL && (rule->algo != MK_ALGO_ANY || rule->proto != MK_PROTO_ANY)) {
		if (policy_pick(p, coll, nbytes, table, nalgo, nproto, rule->algo, rule->proto, 0,
				&c.algo, &c.proto) == 0) {
			c.src = MK_POLICY_SRC_RULE;
			goto chosen;
		}
		policy_warn_unusable(p, MK_POLICY_SRC_RULE, coll, rule->algo, rule->proto,
				     rule->line);
	}
	if (p->in->model && policy_pick(p, coll, nbytes, table, nalgo, nproto, MK_ALGO_ANY,
					MK_PROTO_ANY, 1, &c.algo, &c.proto) == 0) {
		c.src = MK_POLICY_SRC_MODEL;
		goto chosen;
	}
	if (!p->undecided_logged) {
		p->undecided_logged = 1;
		MK_INFO(MK_SUBSYS_TUNING,
			"no input decides %s of %" PRIu64
			" bytes; NCCL's choice stands (logged once)",
			mk_rules_coll_name(coll), nbytes);
	}
	goto log;

chosen:
	policy_write(table, nalgo, nproto, c.algo, c.proto);
log:
	policy_log_decision(p, coll, nbytes, &c);
out:
	if (choice != NULL)
		*choice = c;
	return c.src;
}

/* ---- fused ops ------------------------------------------------------------------------ */

static const struct mk_rule *policy_match_fused(const struct policy_inputs *in,
						const struct mk_policy_op_query *q)
{
	for (size_t i = 0; i < in->rules.n; i++) {
		const struct mk_rule *r = &in->rules.v[i];

		if (r->kind == MK_RULE_FUSED && (r->what < 0 || r->what == (int)q->op) &&
		    mk_range_has(&r->m, q->m) && mk_range_has(&r->n, q->n) &&
		    mk_range_has(&r->k, q->k) && mk_range_has(&r->nodes, (uint64_t)q->nnodes) &&
		    mk_range_has(&r->ranks, (uint64_t)q->nranks))
			return r;
	}
	return NULL;
}

/*
 * Lay the roles a rule (or the environment) gives over split; compute, when not given, takes
 * what the other roles leave. Rejects a result that needs more SMs than the GPU has or leaves
 * no compute SM.
 */
static int policy_overlay(const struct mk_rule *r, int sms, struct mk_policy_sm_split *split)
{
	int next[MK_ROLE_COUNT], sum = 0, any = 0;

	for (int i = 0; i < MK_ROLE_COUNT; i++) {
		next[i] = r->sms[i] >= 0 ? r->sms[i] : split->sms[i];
		any |= r->sms[i] >= 0;
	}
	if (!any)
		return 0;
	if (r->sms[MK_ROLE_COMPUTE] < 0) {
		next[MK_ROLE_COMPUTE] = sms;
		for (int i = MK_ROLE_INTRA; i < MK_ROLE_COUNT; i++)
			next[MK_ROLE_COMPUTE] -= next[i];
	}
	for (int i = 0; i < MK_ROLE_COUNT; i++)
		sum += next[i];
	if (sum > sms || next[MK_ROLE_COMPUTE] < 1)
		return -EINVAL;
	memcpy(split->sms, next, sizeof(next));
	return 1;
}

/* A best static split measured for this op and layout (calib.h) replaces the table's. */
static void policy_calibrated_split(const struct mk_policy_op_query *q, int sms, int rpn,
				    struct mk_policy_sm_split *s)
{
	int comm[3], sum = 0;

	if (mk_calib_split_get(mk_calib_get(), q->op, q->nnodes, rpn, q->m, sms, comm) != 0)
		return;
	for (int r = 0; r < 3; r++)
		sum += comm[r];
	if (sum >= sms)
		return;
	for (int r = 0; r < 3; r++)
		s->sms[MK_ROLE_INTRA + r] = comm[r];
	s->sms[MK_ROLE_COMPUTE] = sms - sum;
}

/* The cost model's paths for ops it covers (model.h), from the calibration and the knobs. */
static void policy_estimate(const struct policy_inputs *in, const struct mk_policy_op_query *q,
			    int sms, struct mk_policy_sm_split *s)
{
	const struct mk_calib *cal = mk_calib_get();
	struct mk_model_estimate e;
	struct mk_model_env env;

	s->path = MK_PATH_UNFUSED;
	s->oneshot_us = -1;
	mk_model_links_calibrated(&in->links, cal, &env.links);
	env.calib = cal;
	env.tflops = in->gemm_tflops;
	env.overhead_us = (int)q->op < MK_CALIB_MAX_OPS && cal->overhead_set[q->op]
				  ? cal->overhead_us[q->op]
				  : in->fused_overhead_us;
	env.oneshot_max_bytes = MK_MODEL_ONESHOT_MAX_BYTES;
	if (mk_model_fused_estimate(q, &env, s->sms[MK_ROLE_COMPUTE], sms, &e) != 0)
		return;
	s->fused_us = e.fused_us;
	s->unfused_us = e.unfused_us;
	s->oneshot_us = e.oneshot_us;
	s->path = e.path;
	s->fuse = e.path == MK_PATH_FUSED;
}

int mk_policy_sm_split(const struct mk_policy_op_query *q, struct mk_policy_sm_split *out)
{
	struct policy_inputs *in;
	const struct mk_rule *rule;
	struct mk_policy_sm_split s;
	int sms, rpn, rc;

	if (q == NULL || out == NULL || (int)q->op < 0 || q->op >= MK_FUSED_OP_COUNT ||
	    q->nnodes < 1 || q->nranks < q->nnodes)
		return -EINVAL;
	in = inputs_get();
	if (in == NULL)
		return -ENOMEM;
	sms = q->sms > 0 ? q->sms : in->gpu_sms;
	rpn = q->ranks_per_node > 0 ? q->ranks_per_node : (q->nranks + q->nnodes - 1) / q->nnodes;
	memset(&s, 0, sizeof(s));
	rc = sms >= 8 && sms <= MK_RULES_MAX_SMS ? mk_model_sm_split(q->op, sms, q->nnodes, rpn, &s)
						 : -EINVAL;
	if (rc)
		goto out;
	policy_calibrated_split(q, sms, rpn, &s);
	s.src = MK_POLICY_SRC_MODEL;
	s.adaptive = 0;
	rule = policy_match_fused(in, q);
	if (rule != NULL) {
		s.rule_line = rule->line;
		rc = policy_overlay(rule, sms, &s);
		if (rc > 0)
			s.src = MK_POLICY_SRC_RULE;
		else if (rc < 0)
			MK_WARN_ONCE(
				"rules file line %d: split for %s needs more than the %d SMs of "
				"this GPU or leaves no compute SM; using the table",
				rule->line, mk_rules_op_name(q->op), sms);
		if (rule->adaptive >= 0)
			s.adaptive = rule->adaptive;
	}
	if (in->split_set) {
		rc = policy_overlay(&in->split, sms, &s);
		if (rc > 0)
			s.src = MK_POLICY_SRC_ENV;
		else if (rc < 0)
			MK_WARN_ONCE(
				"MKERNEL_TUNER_SM_SPLIT needs more than the %d SMs of this GPU "
				"or leaves no compute SM; ignored",
				sms);
	}
	mk_model_controller(sms, &s);
	policy_estimate(in, q, sms, &s);
	/* Ring attention has its own model (attention rate, K/V traffic), not a GEMM row. */
	if (q->op == MK_FUSED_RING_ATTENTION && q->m > 0 && q->n > 0 && q->k > 0) {
		const struct mk_policy_topo topo = { q->nranks, q->nnodes, rpn };

		mk_model_ring_attn_us(&topo, &in->links, q->m, q->n, q->k, q->kv_n, q->causal,
				      q->dtype_bytes > 0 ? q->dtype_bytes : 2, sms,
				      s.sms[MK_ROLE_COMPUTE], in->attn_tflops,
				      in->fused_overhead_us, &s.fused_us, &s.unfused_us);
		s.fuse = q->nranks > 1 && s.fused_us < s.unfused_us;
		s.path = s.fuse ? MK_PATH_FUSED : MK_PATH_UNFUSED;
	}
	if ((q->op == MK_FUSED_MOE_DISPATCH || q->op == MK_FUSED_MOE_COMBINE) && q->m > 0 &&
	    q->n > 0 && q->k > 0) {
		const struct mk_policy_topo topo = { q->nranks, q->nnodes, rpn };

		/* the unfused path waits on the host twice per call (counts, then the exchange) */
		mk_model_moe_us(&topo, &in->links, q->m, q->n, q->k,
				q->dtype_bytes > 0 ? q->dtype_bytes : 2, sms,
				s.sms[MK_ROLE_COMPUTE], in->gemm_tflops, in->fused_overhead_us,
				2 * in->fused_overhead_us, &s.fused_us, &s.unfused_us);
		s.fuse = s.fused_us < s.unfused_us;
		s.path = s.fuse ? MK_PATH_FUSED : MK_PATH_UNFUSED;
	}
	if (rule != NULL && rule->window > 0)
		s.window = rule->window;
	if (in->window > 0)
		s.window = in->window;
	if (in->adaptive >= 0)
		s.adaptive = in->adaptive != 0;
	*out = s;
	rc = 0;
out:
	inputs_put(in);
	return rc;
}
