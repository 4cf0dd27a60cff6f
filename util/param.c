// SPDX-License-Identifier: Apache-2.0
/*
 * The parameter registry behind MK_PARAM_INT / MK_PARAM_STR: resolve a knob from the environment
 * once, cache it, and enumerate every knob linked into this binary through the "mk_params"
 * section (the linker provides __start_/__stop_ symbols for it).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mk/log.h"
#include "mk/param.h"

extern struct mk_param *const __start_mk_params[] __attribute__((weak, visibility("hidden")));
extern struct mk_param *const __stop_mk_params[] __attribute__((weak, visibility("hidden")));

static pthread_mutex_t param_lock = PTHREAD_MUTEX_INITIALIZER;

int mk_param_parse_int(const char *s, int64_t *out)
{
	static const struct {
		const char *word;
		int64_t v;
	} words[] = { { "true", 1 },  { "yes", 1 }, { "on", 1 },
		      { "false", 0 }, { "no", 0 },  { "off", 0 } };
	char *end;
	long long v;

	if (s == NULL)
		return -EINVAL;
	while (isspace((unsigned char)*s))
		s++;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (strcasecmp(s, words[i].word) == 0) {
			*out = words[i].v;
			return 0;
		}
	}
	errno = 0;
	v = strtoll(s, &end, 0);
	if (errno != 0 || end == s)
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		v *= 1LL << 10;
		end++;
		break;
	case 'M':
		v *= 1LL << 20;
		end++;
		break;
	case 'G':
		v *= 1LL << 30;
		end++;
		break;
	default:
		break;
	}
	if (toupper((unsigned char)*end) == 'I') /* KiB, MiB, GiB */
		end++;
	if (toupper((unsigned char)*end) == 'B')
		end++;
	while (isspace((unsigned char)*end))
		end++;
	if (*end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

static void param_resolve(struct mk_param *p)
{
	const char *env;

	pthread_mutex_lock(&param_lock);
	if (p->state == 2)
		goto unlock;
	env = getenv(p->env);
	p->src = MK_PARAM_SRC_DEFAULT;
	p->val_int = p->def_int;
	p->val_str = p->def_str;
	if (env != NULL && p->type == MK_PARAM_TYPE_STR) {
		p->val_str = env;
		p->src = MK_PARAM_SRC_ENV;
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_ENV, "%s set by environment to '%s'", p->env,
			env);
	} else if (env != NULL) {
		int64_t v;

		if (mk_param_parse_int(env, &v) == 0) {
			p->val_int = v;
			p->src = MK_PARAM_SRC_ENV;
			MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_ENV, "%s set by environment to %" PRId64,
				p->env, v);
		} else {
			MK_WARN("%s='%s' is not an integer; using the default %" PRId64, p->env,
				env, p->def_int);
		}
	}
	__atomic_store_n(&p->state, 2, __ATOMIC_RELEASE);
unlock:
	pthread_mutex_unlock(&param_lock);
}

int64_t mk_param_get_int(struct mk_param *p)
{
	if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != 2)
		param_resolve(p);
	return p->val_int;
}

const char *mk_param_get_str(struct mk_param *p)
{
	if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != 2)
		param_resolve(p);
	return p->val_str;
}

void mk_param_reset_all(void)
{
	pthread_mutex_lock(&param_lock);
	for (struct mk_param *const *pp = __start_mk_params; pp != NULL && pp < __stop_mk_params;
	     pp++)
		__atomic_store_n(&(*pp)->state, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&param_lock);
}

static int param_cmp(const void *a, const void *b)
{
	const struct mk_param *pa = *(struct mk_param *const *)a;
	const struct mk_param *pb = *(struct mk_param *const *)b;

	return strcmp(pa->env, pb->env);
}

int mk_param_foreach(void (*fn)(struct mk_param *p, void *arg), void *arg)
{
	size_t n = 0, k = 0;
	struct mk_param **sorted;

	if (__start_mk_params == NULL)
		return 0;
	n = (size_t)(__stop_mk_params - __start_mk_params);
	sorted = calloc(n ? n : 1, sizeof(*sorted));
	if (sorted == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int dup = 0;

		/* A record linked twice (static library in two objects) is listed once. */
		for (size_t j = 0; j < k; j++)
			dup |= strcmp(sorted[j]->env, __start_mk_params[i]->env) == 0;
		if (!dup)
			sorted[k++] = __start_mk_params[i];
	}
	qsort(sorted, k, sizeof(*sorted), param_cmp);
	for (size_t i = 0; i < k; i++) {
		mk_param_get_int(sorted[i]); /* resolve so callers see the effective value */
		fn(sorted[i], arg);
	}
	free(sorted);
	return (int)k;
}

static void param_dump_one(struct mk_param *p, void *arg)
{
	(void)arg;
	if (p->type == MK_PARAM_TYPE_STR)
		MK_INFO(MK_SUBSYS_INIT, "param %s = '%s' (%s)", p->env,
			p->val_str ? p->val_str : "",
			p->src == MK_PARAM_SRC_ENV ? "env" : "default");
	else
		MK_INFO(MK_SUBSYS_INIT, "param %s = %" PRId64 " (%s)", p->env, p->val_int,
			p->src == MK_PARAM_SRC_ENV ? "env" : "default");
}

void mk_param_dump(void)
{
	mk_param_foreach(param_dump_one, NULL);
}
