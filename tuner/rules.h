/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rules file (MKERNEL_TUNER_CONFIG): parser and matcher, private to tuner/. One rule per
 * line, first match wins, '#' starts a comment:
 *
 *	allreduce  0-64K  nodes=2  ranks=*  -> algo=tree proto=ll128 channels=4
 *	fused gemm_allreduce  m>=8192  nodes=2  -> compute=116 intra=12 send=4 reduce=0
 *
 * A malformed line is reported through the diagnostic callback (file, line, reason) and
 * skipped; the parser itself never fails on content. Grammar: docs/tuner.md.
 */
#ifndef MK_TUNER_RULES_H
#define MK_TUNER_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define MK_RULES_MAX_LINE     1024	  /* longer lines are rejected */
#define MK_RULES_MAX_RULES    4096	  /* later rules are ignored, with one diagnostic */
#define MK_RULES_MAX_FILE     (16u << 20) /* bytes read from a file at most */
#define MK_RULES_MAX_CHANNELS 64	  /* NCCL's channel limit */
#define MK_RULES_MAX_SMS      1024	  /* bound on one role's SM count */

/* Inclusive range; the wildcard '*' is [0, UINT64_MAX]. */
struct mk_range {
	uint64_t lo;
	uint64_t hi;
};

enum mk_rule_kind {
	MK_RULE_COLL = 0,
	MK_RULE_FUSED = 1,
};

struct mk_rule {
	enum mk_rule_kind kind;
	int line;	       /* 1-based line in its file */
	int what;	       /* enum mk_coll or enum mk_fused_op; -1 = any */
	struct mk_range bytes; /* collectives: message size in bytes */
	struct mk_range nodes;
	struct mk_range ranks;
	struct mk_range pipeops; /* collectives: ops in the group */
	struct mk_range regbuff; /* collectives: 0 or 1 */
	struct mk_range m, n, k; /* fused: shape */
	int algo;		 /* MK_ALGO_ANY when not given */
	int proto;		 /* MK_PROTO_ANY when not given */
	int channels;		 /* 0 when not given */
	int sms[MK_ROLE_COUNT];	 /* fused: -1 when not given */
	int adaptive;		 /* fused: -1 when not given */
	int window;		 /* fused: -1 when not given */
};

struct mk_rules {
	struct mk_rule *v;
	size_t n;
	size_t cap;
	int bad;       /* lines rejected */
	int truncated; /* 1 when rules past MK_RULES_MAX_RULES were dropped */
};

/* Receives one diagnostic per rejected line; NULL callback = MK_WARN "file:line: reason". */
typedef void (*mk_rules_diag_fn)(void *arg, const char *file, int line, const char *reason);

void mk_rules_init(struct mk_rules *rs);
void mk_rules_free(struct mk_rules *rs);

/* Parse len bytes of text named name (for diagnostics), appending rules. 0 or -ENOMEM. */
int mk_rules_parse(struct mk_rules *rs, const char *text, size_t len, const char *name,
		   mk_rules_diag_fn diag, void *arg);

/* Read and parse a file. 0, or -errno when it cannot be opened or read (nothing appended). */
int mk_rules_load(struct mk_rules *rs, const char *path, mk_rules_diag_fn diag, void *arg);

/*
 * Parse the right-hand side of a rule ("algo=ring proto=simple", "compute=100 send=8") into
 * r's action fields; used for environment values too. 0, or -EINVAL with *reason set.
 */
int mk_rules_parse_action(const char *text, enum mk_rule_kind kind, struct mk_rule *r,
			  const char **reason);

/* Parse one size with K/M/G/T suffixes (powers of two, optional B or iB). 0 or -EINVAL. */
int mk_rules_parse_size(const char *s, size_t len, uint64_t *out);

/*
 * First-match-wins makes a rule dead when an earlier rule of the same kind covers every call it
 * could match. Returns the index of the first such earlier rule for rule i, or -1.
 */
long mk_rules_shadowed_by(const struct mk_rules *rs, size_t i);

/* Names used in rules, env values and logs ("allreduce", "ring", "ll128", "gemm_allreduce",
 * "compute"); NULL for out-of-range values. */
const char *mk_rules_coll_name(int coll);
const char *mk_rules_algo_name(int algo);
const char *mk_rules_proto_name(int proto);
const char *mk_rules_op_name(int op);
const char *mk_rules_role_name(int role);

/* Name lookups shared with the environment parser; -1 when unknown. "*" is not accepted. */
int mk_rules_coll_from_name(const char *s, size_t len);
int mk_rules_algo_from_name(const char *s, size_t len);
int mk_rules_proto_from_name(const char *s, size_t len);
int mk_rules_op_from_name(const char *s, size_t len);

static inline int mk_range_has(const struct mk_range *r, uint64_t v)
{
	return v >= r->lo && v <= r->hi;
}

#endif /* MK_TUNER_RULES_H */
