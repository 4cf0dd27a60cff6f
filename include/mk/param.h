/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Parameter registry. Every MKERNEL_* knob is declared exactly once, next to the code it tunes:
 *
 *	MK_PARAM_INT(ofi_eager_max, "ofi", "MKERNEL_OFI_EAGER_MAX", 8192, "help text");
 *	MK_PARAM_STR(ofi_provider, "ofi", "MKERNEL_OFI_PROVIDER", "", "help text");
 *
 * Each line defines an accessor, mk_param_ofi_eager_max(), that reads the environment on first
 * use, caches the value and logs it at INFO when it differs from the default. Records are
 * collected in the "mk_params" linker section, so mkernel-params and MKERNEL_DUMP_PARAMS=1 list
 * every knob linked into the binary without a central list. Integers accept decimal, 0x hex and
 * K/M/G suffixes (powers of two); booleans are integers (0/1, also true/false/yes/no/on/off).
 */
#ifndef MK_PARAM_H
#define MK_PARAM_H

#include <stddef.h>
#include <stdint.h>

enum mk_param_type {
	MK_PARAM_TYPE_INT,
	MK_PARAM_TYPE_STR,
};

enum mk_param_source {
	MK_PARAM_SRC_DEFAULT,
	MK_PARAM_SRC_ENV,
};

struct mk_param {
	const char *id;	       /* C name, for messages */
	const char *component; /* "core", "ofi", "verbs", "tuner", "fused", ... */
	const char *env;       /* MKERNEL_* */
	enum mk_param_type type;
	int64_t def_int;
	const char *def_str;
	const char *help;
	/* Resolved once, under the registry lock; state 2 = ready (acquire/release). */
	int state;
	enum mk_param_source src;
	int64_t val_int;
	const char *val_str;
};

int64_t mk_param_get_int(struct mk_param *p);
const char *mk_param_get_str(struct mk_param *p);

/* Forget cached values so the next access re-reads the environment (tests only). */
void mk_param_reset_all(void);

/* Visit every registered parameter, sorted by environment name. Returns how many. */
int mk_param_foreach(void (*fn)(struct mk_param *p, void *arg), void *arg);

/* Log the whole table at INFO (MKERNEL_DUMP_PARAMS=1 calls this at init). */
void mk_param_dump(void);

/* Parse an integer with optional K/M/G suffix; 0 or -EINVAL. Exposed for tests. */
int mk_param_parse_int(const char *s, int64_t *out);

#define MK_PARAM_RECORD_(id_, comp_, env_, type_, dint_, dstr_, help_)                             \
	static struct mk_param mk_param_rec_##id_ = {                                              \
		.id = #id_,                                                                        \
		.component = (comp_),                                                              \
		.env = (env_),                                                                     \
		.type = (type_),                                                                   \
		.def_int = (dint_),                                                                \
		.def_str = (dstr_),                                                                \
		.help = (help_),                                                                   \
	};                                                                                         \
	static struct mk_param *const mk_param_ptr_##id_                                           \
		__attribute__((used, section("mk_params"))) = &mk_param_rec_##id_

#define MK_PARAM_INT(id_, comp_, env_, def_, help_)                                                \
	MK_PARAM_RECORD_(id_, comp_, env_, MK_PARAM_TYPE_INT, (def_), NULL, help_);                \
	int64_t mk_param_##id_(void)                                                               \
	{                                                                                          \
		return mk_param_get_int(&mk_param_rec_##id_);                                      \
	}

#define MK_PARAM_STR(id_, comp_, env_, def_, help_)                                                \
	MK_PARAM_RECORD_(id_, comp_, env_, MK_PARAM_TYPE_STR, 0, (def_), help_);                   \
	const char *mk_param_##id_(void)                                                           \
	{                                                                                          \
		return mk_param_get_str(&mk_param_rec_##id_);                                      \
	}

/* Prototypes for accessors defined in another file. */
#define MK_PARAM_DECLARE_INT(id_) int64_t mk_param_##id_(void)
#define MK_PARAM_DECLARE_STR(id_) const char *mk_param_##id_(void)

#endif /* MK_PARAM_H */
