// SPDX-License-Identifier: Apache-2.0
/*
 * Rules-file parser. It owns the line grammar of MKERNEL_TUNER_CONFIG: collective rules
 * (collective, size range, optional nodes/ranks/pipeops/regbuff matches -> algo, proto,
 * channels) and fused-op rules (op, optional m/n/k/nodes/ranks matches -> SMs per role and
 * controller settings). Every rejected line produces exactly one diagnostic with file, line and
 * reason; nothing here can fail on content, only on memory.
 */
#define MK_LOG_PREFIX "TUNER/mkernel"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mk/log.h"
#include "rules.h"

#define RULES_REASON_MAX 160

struct rules_tok {
	const char *s;
	size_t len;
};

/* Parsing context of one line: where diagnostics go and the reason text buffer. */
struct rules_line {
	char reason[RULES_REASON_MAX];
};

static const char *const coll_names[MK_COLL_COUNT] = {
	[MK_COLL_BROADCAST] = "broadcast", [MK_COLL_REDUCE] = "reduce",
	[MK_COLL_ALLGATHER] = "allgather", [MK_COLL_REDUCESCATTER] = "reducescatter",
	[MK_COLL_ALLREDUCE] = "allreduce",
};

static const char *const algo_names[MK_ALGO_COUNT] = {
	[MK_ALGO_TREE] = "tree",
	[MK_ALGO_RING] = "ring",
	[MK_ALGO_COLLNET_DIRECT] = "collnet_direct",
	[MK_ALGO_COLLNET_CHAIN] = "collnet_chain",
	[MK_ALGO_NVLS] = "nvls",
	[MK_ALGO_NVLS_TREE] = "nvls_tree",
	[MK_ALGO_PAT] = "pat",
};

static const char *const proto_names[MK_PROTO_COUNT] = {
	[MK_PROTO_LL] = "ll",
	[MK_PROTO_LL128] = "ll128",
	[MK_PROTO_SIMPLE] = "simple",
};

static const char *const op_names[MK_FUSED_OP_COUNT] = {
	[MK_FUSED_GEMM_ALLREDUCE] = "gemm_allreduce",
	[MK_FUSED_GEMM_REDUCESCATTER] = "gemm_reducescatter",
	[MK_FUSED_ALLGATHER_GEMM] = "allgather_gemm",
	[MK_FUSED_RING_ATTENTION] = "ring_attention",
	[MK_FUSED_MOE_DISPATCH] = "moe_dispatch",
	[MK_FUSED_MOE_COMBINE] = "moe_combine",
};

static const char *const role_names[MK_ROLE_COUNT] = {
	[MK_ROLE_COMPUTE] = "compute",
	[MK_ROLE_INTRA] = "intra",
	[MK_ROLE_SEND] = "send",
	[MK_ROLE_REDUCE] = "reduce",
};

static const char *rules_name_at(const char *const *names, int n, int i)
{
	return i >= 0 && i < n ? names[i] : NULL;
}

const char *mk_rules_coll_name(int coll)
{
	return rules_name_at(coll_names, MK_COLL_COUNT, coll);
}

const char *mk_rules_algo_name(int algo)
{
	return rules_name_at(algo_names, MK_ALGO_COUNT, algo);
}

const char *mk_rules_proto_name(int proto)
{
	return rules_name_at(proto_names, MK_PROTO_COUNT, proto);
}

const char *mk_rules_op_name(int op)
{
	return rules_name_at(op_names, MK_FUSED_OP_COUNT, op);
}

const char *mk_rules_role_name(int role)
{
	return rules_name_at(role_names, MK_ROLE_COUNT, role);
}

/* Names compare case-insensitively with '_' and '-' ignored: all_reduce = AllReduce. */
static int rules_name_eq(const char *s, size_t len, const char *name)
{
	size_t i = 0;

	for (; *name != '\0'; name++) {
		if (*name == '_')
			continue;
		while (i < len && (s[i] == '_' || s[i] == '-'))
			i++;
		if (i == len || tolower((unsigned char)s[i]) != *name)
			return 0;
		i++;
	}
	while (i < len && (s[i] == '_' || s[i] == '-'))
		i++;
	return i == len;
}

static int rules_lookup(const char *const *names, int n, const char *s, size_t len)
{
	for (int i = 0; i < n; i++)
		if (rules_name_eq(s, len, names[i]))
			return i;
	return -1;
}

int mk_rules_coll_from_name(const char *s, size_t len)
{
	return rules_lookup(coll_names, MK_COLL_COUNT, s, len);
}

int mk_rules_algo_from_name(const char *s, size_t len)
{
	return rules_lookup(algo_names, MK_ALGO_COUNT, s, len);
}

int mk_rules_proto_from_name(const char *s, size_t len)
{
	return rules_lookup(proto_names, MK_PROTO_COUNT, s, len);
}

int mk_rules_op_from_name(const char *s, size_t len)
{
	return rules_lookup(op_names, MK_FUSED_OP_COUNT, s, len);
}

static int rules_is_star(const char *s, size_t len)
{
	return len == 1 && s[0] == '*';
}

int mk_rules_parse_size(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	unsigned int shift = 0;
	size_t i = 0;

	if (len == 0 || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	for (; i < len && isdigit((unsigned char)s[i]); i++) {
		unsigned int d = (unsigned int)(s[i] - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (i < len) {
		switch (toupper((unsigned char)s[i])) {
		case 'K':
			shift = 10;
			break;
		case 'M':
			shift = 20;
			break;
		case 'G':
			shift = 30;
			break;
		case 'T':
			shift = 40;
			break;
		case 'B':
			break;
		default:
			return -EINVAL;
		}
		if (shift != 0) {
			i++;
			if (i < len && toupper((unsigned char)s[i]) == 'I')
				i++;
		}
		if (i < len && toupper((unsigned char)s[i]) == 'B')
			i++;
	}
	if (i != len)
		return -EINVAL;
	if (shift != 0 && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = v << shift;
	return 0;
}

/* "*", "N", "A-B", "A-" and "A-*" (open upper end). */
static int rules_parse_range(const char *s, size_t len, struct mk_range *r)
{
	const char *dash = memchr(s, '-', len);
	size_t left;

	if (rules_is_star(s, len)) {
		r->lo = 0;
		r->hi = UINT64_MAX;
		return 0;
	}
	if (dash == NULL) {
		if (mk_rules_parse_size(s, len, &r->lo))
			return -EINVAL;
		r->hi = r->lo;
		return 0;
	}
	left = (size_t)(dash - s);
	if (mk_rules_parse_size(s, left, &r->lo))
		return -EINVAL;
	s = dash + 1;
	len -= left + 1;
	if (len == 0 || rules_is_star(s, len))
		r->hi = UINT64_MAX;
	else if (mk_rules_parse_size(s, len, &r->hi))
		return -EINVAL;
	return r->lo <= r->hi ? 0 : -EINVAL;
}

/* "=RANGE", ">=N", ">N", "<=N", "<N" after a key. */
static int rules_parse_cmp(const char *op, size_t len, struct mk_range *r)
{
	uint64_t v;

	if (len >= 1 && op[0] == '=')
		return rules_parse_range(op + 1, len - 1, r);
	if (len >= 2 && op[1] == '=') {
		if (mk_rules_parse_size(op + 2, len - 2, &v))
			return -EINVAL;
		r->lo = op[0] == '>' ? v : 0;
		r->hi = op[0] == '>' ? UINT64_MAX : v;
		return 0;
	}
	if (mk_rules_parse_size(op + 1, len - 1, &v))
		return -EINVAL;
	if (op[0] == '>') {
		if (v == UINT64_MAX)
			return -EINVAL;
		r->lo = v + 1;
		r->hi = UINT64_MAX;
		return 0;
	}
	if (v == 0)
		return -EINVAL; /* "< 0" matches nothing */
	r->lo = 0;
	r->hi = v - 1;
	return 0;
}

static size_t rules_split(const char *s, size_t len, struct rules_tok *toks, size_t max)
{
	size_t n = 0, i = 0;

	while (i < len) {
		size_t start;

		while (i < len && isspace((unsigned char)s[i]))
			i++;
		if (i == len)
			break;
		start = i;
		while (i < len && !isspace((unsigned char)s[i]))
			i++;
		if (n == max)
			return max + 1;
		toks[n].s = s + start;
		toks[n].len = i - start;
		n++;
	}
	return n;
}

static int rules_fail(struct rules_line *l, const char *fmt, const struct rules_tok *t)
{
	int len = t != NULL ? (int)(t->len > 40 ? 40 : t->len) : 0;

	snprintf(l->reason, sizeof(l->reason), fmt, len, t != NULL ? t->s : "");
	return -EINVAL;
}

/* One "key<op>value" match on the left side. */
static int rules_parse_match(struct rules_line *l, const struct rules_tok *t, struct mk_rule *r,
			     unsigned int *seen)
{
	static const char *const coll_keys[] = { "nodes", "ranks", "pipeops", "regbuff" };
	static const char *const fused_keys[] = { "nodes", "ranks", "m", "n", "k" };
	const char *const *keys = r->kind == MK_RULE_COLL ? coll_keys : fused_keys;
	int nkeys = r->kind == MK_RULE_COLL ? 4 : 5;
	size_t klen = 0;
	struct mk_range *dst = NULL;
	int key;

	while (klen < t->len && isalpha((unsigned char)t->s[klen]))
		klen++;
	if (klen == 0 || klen == t->len || strchr("=<>", t->s[klen]) == NULL)
		return rules_fail(l, "expected key=value, got '%.*s'", t);
	key = rules_lookup(keys, nkeys, t->s, klen);
	if (key < 0)
		return rules_fail(l, "unknown match key in '%.*s'", t);
	if (*seen & (1u << key))
		return rules_fail(l, "match key repeated in '%.*s'", t);
	*seen |= 1u << key;
	if (strcmp(keys[key], "nodes") == 0)
		dst = &r->nodes;
	else if (strcmp(keys[key], "ranks") == 0)
		dst = &r->ranks;
	else if (strcmp(keys[key], "pipeops") == 0)
		dst = &r->pipeops;
	else if (strcmp(keys[key], "regbuff") == 0)
		dst = &r->regbuff;
	else if (strcmp(keys[key], "m") == 0)
		dst = &r->m;
	else if (strcmp(keys[key], "n") == 0)
		dst = &r->n;
	else
		dst = &r->k;
	if (rules_parse_cmp(t->s + klen, t->len - klen, dst))
		return rules_fail(l, "bad value or empty range in '%.*s'", t);
	return 0;
}

/* An integer action value within [lo, hi]. */
static int rules_action_int(const struct rules_tok *v, int lo, int hi, int *out)
{
	uint64_t x;

	if (mk_rules_parse_size(v->s, v->len, &x) || x < (uint64_t)lo || x > (uint64_t)hi)
		return -EINVAL;
	*out = (int)x;
	return 0;
}

static int rules_action_one(const struct rules_tok *key, const struct rules_tok *val,
			    enum mk_rule_kind kind, struct mk_rule *r, unsigned int *seen,
			    const char **reason)
{
	int role = rules_lookup(role_names, MK_ROLE_COUNT, key->s, key->len);
	int slot;

	if (kind == MK_RULE_COLL && rules_name_eq(key->s, key->len, "algo")) {
		slot = 0;
		r->algo = rules_is_star(val->s, val->len)
				  ? MK_ALGO_ANY
				  : mk_rules_algo_from_name(val->s, val->len);
		if (r->algo < 0 && !rules_is_star(val->s, val->len)) {
			*reason = "unknown algorithm (tree, ring, collnet_direct, collnet_chain, "
				  "nvls, nvls_tree, pat or *)";
			return -EINVAL;
		}
	} else if (kind == MK_RULE_COLL && rules_name_eq(key->s, key->len, "proto")) {
		slot = 1;
		r->proto = rules_is_star(val->s, val->len)
				   ? MK_PROTO_ANY
				   : mk_rules_proto_from_name(val->s, val->len);
		if (r->proto < 0 && !rules_is_star(val->s, val->len)) {
			*reason = "unknown protocol (ll, ll128, simple or *)";
			return -EINVAL;
		}
	} else if (kind == MK_RULE_COLL && rules_name_eq(key->s, key->len, "channels")) {
		slot = 2;
		if (rules_action_int(val, 0, MK_RULES_MAX_CHANNELS, &r->channels)) {
			*reason = "channels must be an integer from 0 to 64";
			return -EINVAL;
		}
	} else if (kind == MK_RULE_FUSED && role >= 0) {
		slot = 3 + role;
		if (rules_action_int(val, 0, MK_RULES_MAX_SMS, &r->sms[role])) {
			*reason = "SM count must be an integer from 0 to 1024";
			return -EINVAL;
		}
	} else if (kind == MK_RULE_FUSED && rules_name_eq(key->s, key->len, "adaptive")) {
		slot = 3 + MK_ROLE_COUNT;
		if (rules_action_int(val, 0, 1, &r->adaptive)) {
			*reason = "adaptive must be 0 or 1";
			return -EINVAL;
		}
	} else if (kind == MK_RULE_FUSED && rules_name_eq(key->s, key->len, "window")) {
		slot = 4 + MK_ROLE_COUNT;
		if (rules_action_int(val, 1, 1 << 16, &r->window)) {
			*reason = "window must be an integer from 1 to 65536";
			return -EINVAL;
		}
	} else {
		*reason =
			kind == MK_RULE_COLL
				? "unknown action (algo, proto, channels)"
				: "unknown action (compute, intra, send, reduce, adaptive, window)";
		return -EINVAL;
	}
	if (*seen & (1u << slot)) {
		*reason = "action given twice";
		return -EINVAL;
	}
	*seen |= 1u << slot;
	return 0;
}

int mk_rules_parse_action(const char *text, enum mk_rule_kind kind, struct mk_rule *r,
			  const char **reason)
{
	struct rules_tok toks[16];
	unsigned int seen = 0;
	size_t n = rules_split(text, strlen(text), toks, 16);

	if (n == 0) {
		*reason = "no action after '->'";
		return -EINVAL;
	}
	if (n > 16) {
		*reason = "too many actions";
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		const char *eq = memchr(toks[i].s, '=', toks[i].len);
		struct rules_tok key, val;

		if (eq == NULL || eq == toks[i].s || eq + 1 == toks[i].s + toks[i].len) {
			*reason = "actions are key=value";
			return -EINVAL;
		}
		key.s = toks[i].s;
		key.len = (size_t)(eq - toks[i].s);
		val.s = eq + 1;
		val.len = toks[i].len - key.len - 1;
		if (rules_action_one(&key, &val, kind, r, &seen, reason))
			return -EINVAL;
	}
	return 0;
}

static void rules_defaults(struct mk_rule *r, enum mk_rule_kind kind, int line)
{
	const struct mk_range any = { 0, UINT64_MAX };

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->line = line;
	r->what = -1;
	r->bytes = r->nodes = r->ranks = r->pipeops = r->regbuff = any;
	r->m = r->n = r->k = any;
	r->algo = MK_ALGO_ANY;
	r->proto = MK_PROTO_ANY;
	for (int i = 0; i < MK_ROLE_COUNT; i++)
		r->sms[i] = -1;
	r->adaptive = -1;
	r->window = -1;
}

/* Left side: "COLL SIZE match..." or "fused OP match...". */
static int rules_parse_left(struct rules_line *l, const char *s, size_t len, struct mk_rule *r)
{
	struct rules_tok toks[16];
	size_t n = rules_split(s, len, toks, 16), first;
	unsigned int seen = 0;

	if (n == 0)
		return rules_fail(l, "nothing before '->'%.*s", NULL);
	if (n > 16)
		return rules_fail(l, "too many match terms%.*s", NULL);
	if (rules_name_eq(toks[0].s, toks[0].len, "fused")) {
		rules_defaults(r, MK_RULE_FUSED, r->line);
		if (n < 2)
			return rules_fail(l, "fused rule without an op name%.*s", NULL);
		r->what = rules_is_star(toks[1].s, toks[1].len)
				  ? -1
				  : mk_rules_op_from_name(toks[1].s, toks[1].len);
		if (r->what < 0 && !rules_is_star(toks[1].s, toks[1].len))
			return rules_fail(l, "unknown fused op '%.*s'", &toks[1]);
		first = 2;
	} else {
		r->what = rules_is_star(toks[0].s, toks[0].len)
				  ? -1
				  : mk_rules_coll_from_name(toks[0].s, toks[0].len);
		if (r->what < 0 && !rules_is_star(toks[0].s, toks[0].len))
			return rules_fail(l, "unknown collective '%.*s'", &toks[0]);
		if (n < 2)
			return rules_fail(l, "missing message-size range%.*s", NULL);
		if (rules_parse_range(toks[1].s, toks[1].len, &r->bytes))
			return rules_fail(l, "bad message-size range '%.*s'", &toks[1]);
		first = 2;
	}
	for (size_t i = first; i < n; i++) {
		/* "fused OP * -> ..." reads naturally: a lone '*' is "any shape". */
		if (r->kind == MK_RULE_FUSED && rules_is_star(toks[i].s, toks[i].len))
			continue;
		if (rules_parse_match(l, &toks[i], r, &seen))
			return -EINVAL;
	}
	return 0;
}

static int rules_parse_line(struct rules_line *l, const char *s, size_t len, struct mk_rule *r)
{
	char right[MK_RULES_MAX_LINE];
	const char *arrow = NULL, *reason = NULL;
	size_t rlen;

	for (size_t i = 0; i + 1 < len; i++) {
		if (s[i] == '-' && s[i + 1] == '>') {
			if (arrow != NULL)
				return rules_fail(l, "more than one '->'%.*s", NULL);
			arrow = s + i;
		}
	}
	if (arrow == NULL)
		return rules_fail(l, "missing '->' between match and action%.*s", NULL);
	if (rules_parse_left(l, s, (size_t)(arrow - s), r))
		return -EINVAL;
	rlen = len - (size_t)(arrow + 2 - s);
	memcpy(right, arrow + 2, rlen);
	right[rlen] = '\0';
	if (mk_rules_parse_action(right, r->kind, r, &reason)) {
		snprintf(l->reason, sizeof(l->reason), "%s", reason);
		return -EINVAL;
	}
	return 0;
}

static void rules_report(mk_rules_diag_fn diag, void *arg, const char *file, int line,
			 const char *reason)
{
	if (diag != NULL)
		diag(arg, file, line, reason);
	else
		MK_WARN("rules file %s:%d: %s; rule ignored", file, line, reason);
}

static int rules_append(struct mk_rules *rs, const struct mk_rule *r)
{
	if (rs->n == rs->cap) {
		size_t cap = rs->cap ? rs->cap * 2 : 16;
		struct mk_rule *v = realloc(rs->v, cap * sizeof(*v));

		if (v == NULL)
			return -ENOMEM;
		rs->v = v;
		rs->cap = cap;
	}
	rs->v[rs->n++] = *r;
	return 0;
}

/* Strip the comment and surrounding blanks; reject control bytes. Returns -EINVAL on bad bytes. */
static int rules_clean(const char *s, size_t *len)
{
	size_t n = *len;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '#') {
			n = i;
			break;
		}
		if ((unsigned char)s[i] < 0x20 && s[i] != '\t' && s[i] != '\r')
			return -EINVAL;
	}
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		n--;
	*len = n;
	return 0;
}

int mk_rules_parse(struct mk_rules *rs, const char *text, size_t len, const char *name,
		   mk_rules_diag_fn diag, void *arg)
{
	size_t pos = 0;
	int line = 0;

	while (pos < len && !rs->truncated) {
		const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
		size_t n = nl != NULL ? (size_t)(nl - s) : len - pos, start = 0;
		struct rules_line l = { { 0 } };
		struct mk_rule r;

		pos += n + 1;
		line++;
		if (n >= MK_RULES_MAX_LINE) {
			rs->bad++;
			rules_report(diag, arg, name, line, "line longer than 1023 bytes");
			continue;
		}
		if (rules_clean(s, &n)) {
			rs->bad++;
			rules_report(diag, arg, name, line, "control character in line");
			continue;
		}
		while (start < n && isspace((unsigned char)s[start]))
			start++;
		if (start == n)
			continue;
		rules_defaults(&r, MK_RULE_COLL, line);
		if (rules_parse_line(&l, s + start, n - start, &r)) {
			rs->bad++;
			rules_report(diag, arg, name, line, l.reason);
			continue;
		}
		if (rs->n == MK_RULES_MAX_RULES) {
			rs->truncated = 1;
			rules_report(diag, arg, name, line,
				     "more than 4096 rules; this and all later lines are ignored");
			break;
		}
		if (rules_append(rs, &r))
			return -ENOMEM;
	}
	return 0;
}

int mk_rules_load(struct mk_rules *rs, const char *path, mk_rules_diag_fn diag, void *arg)
{
	size_t len = 0;
	char *buf;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	buf = malloc(MK_RULES_MAX_FILE);
	if (buf == NULL) {
		rc = -ENOMEM;
		goto undo_open;
	}
	while (len < MK_RULES_MAX_FILE) {
		ssize_t got = read(fd, buf + len, MK_RULES_MAX_FILE - len);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = -errno;
			goto undo_buf;
		}
		if (got == 0)
			break;
		len += (size_t)got;
	}
	if (len == MK_RULES_MAX_FILE) {
		char extra;

		if (read(fd, &extra, 1) == 1) {
			/* Cut at the last complete line so no half rule is parsed. */
			while (len > 0 && buf[len - 1] != '\n')
				len--;
			rules_report(diag, arg, path, 0,
				     "file larger than 16 MiB; only its first 16 MiB are read");
		}
	}
	rc = mk_rules_parse(rs, buf, len, path, diag, arg);
undo_buf:
	free(buf);
undo_open:
	close(fd);
	return rc;
}

static int rules_range_covers(const struct mk_range *outer, const struct mk_range *inner)
{
	return outer->lo <= inner->lo && outer->hi >= inner->hi;
}

static int rules_covers(const struct mk_rule *a, const struct mk_rule *b)
{
	return a->kind == b->kind && (a->what < 0 || a->what == b->what) &&
	       rules_range_covers(&a->bytes, &b->bytes) &&
	       rules_range_covers(&a->nodes, &b->nodes) &&
	       rules_range_covers(&a->ranks, &b->ranks) &&
	       rules_range_covers(&a->pipeops, &b->pipeops) &&
	       rules_range_covers(&a->regbuff, &b->regbuff) && rules_range_covers(&a->m, &b->m) &&
	       rules_range_covers(&a->n, &b->n) && rules_range_covers(&a->k, &b->k);
}

long mk_rules_shadowed_by(const struct mk_rules *rs, size_t i)
{
	for (size_t j = 0; j < i && i < rs->n; j++)
		if (rules_covers(&rs->v[j], &rs->v[i]))
			return (long)j;
	return -1;
}

void mk_rules_init(struct mk_rules *rs)
{
	memset(rs, 0, sizeof(*rs));
}

void mk_rules_free(struct mk_rules *rs)
{
	free(rs->v);
	mk_rules_init(rs);
}
