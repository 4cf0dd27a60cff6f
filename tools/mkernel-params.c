// SPDX-License-Identifier: Apache-2.0
/*
 * mkernel-params: print every MKERNEL_* knob linked into mkernel (name, type, default,
 * effective value, source, help). --markdown prints the README table, which a test keeps in
 * sync with the registry.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "mk/log.h"
#include "mk/param.h"

struct params_opts {
	int markdown;
};

static void params_default(const struct mk_param *p, char *buf, size_t len)
{
	if (p->type == MK_PARAM_TYPE_STR)
		snprintf(buf, len, "%s", p->def_str && *p->def_str ? p->def_str : "(empty)");
	else
		snprintf(buf, len, "%" PRId64, p->def_int);
}

static void params_value(const struct mk_param *p, char *buf, size_t len)
{
	if (p->type == MK_PARAM_TYPE_STR)
		snprintf(buf, len, "%s", p->val_str && *p->val_str ? p->val_str : "(empty)");
	else
		snprintf(buf, len, "%" PRId64, p->val_int);
}

static void params_print(struct mk_param *p, void *arg)
{
	const struct params_opts *o = arg;
	char def[128], val[128];

	params_default(p, def, sizeof(def));
	params_value(p, val, sizeof(val));
	if (o->markdown)
		printf("| `%s` | %s | %s | `%s` | %s |\n", p->env, p->component,
		       p->type == MK_PARAM_TYPE_STR ? "string" : "integer", def, p->help);
	else
		printf("%-28s %-6s %-7s %-16s %-16s %-7s %s\n", p->env, p->component,
		       p->type == MK_PARAM_TYPE_STR ? "string" : "integer", def, val,
		       p->src == MK_PARAM_SRC_ENV ? "env" : "default", p->help);
}

int main(int argc, char **argv)
{
	struct params_opts o = { 0 };

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--markdown") == 0) {
			o.markdown = 1;
		} else {
			fprintf(stderr,
				"usage: %s [--markdown]\n"
				"Lists every MKERNEL_* parameter with its default and the value "
				"the "
				"current environment gives it.\n",
				argv[0]);
			return strcmp(argv[i], "--help") == 0 ? 0 : 2;
		}
	}
	mk_log_set_sink(NULL);
	if (o.markdown) {
		printf("| Variable | Component | Type | Default | Meaning |\n");
		printf("|---|---|---|---|---|\n");
	} else {
		printf("%-28s %-6s %-7s %-16s %-16s %-7s %s\n", "VARIABLE", "COMP", "TYPE",
		       "DEFAULT", "VALUE", "SOURCE", "HELP");
	}
	return mk_param_foreach(params_print, &o) > 0 ? 0 : 1;
}
