// SPDX-License-Identifier: Apache-2.0
/*
 * What the policy engine makes of a calibration file, so that the tests of scripts/retune.py
 * check its output with the parser and the policy that will read it, not with a copy of them:
 *   calib-probe FILE                               parse it: "ok splits N colls N nvl LAT GBPS"
 *                                                  ("nvl - -" when the file has no nvl link)
 *   calib-probe FILE split OP NODES LOCAL M SMS    mk_calib_split_get: "INTRA SEND REDUCE",
 *                                                  or "none"
 *   calib-probe FILE policy OP NODES NRANKS M SMS  mk_policy_sm_split with MKERNEL_CALIBRATION
 *                                                  = FILE: "COMPUTE INTRA SEND REDUCE"
 *   calib-probe FILE path OP NODES NRANKS M SMS    the same call's path: "fused", "unfused" or
 *                                                  "oneshot"
 * Exit: 0; 1 when the file does not parse (its line and why on stderr) or the policy fails;
 * 2 on bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "policy.h"
#include "rules.h"

static int probe_usage(void)
{
	fprintf(stderr, "usage: calib-probe FILE [split OP NODES LOCAL M SMS | "
			"policy|path OP NODES NRANKS M SMS]\n");
	return 2;
}

/* The whole file into a heap buffer (*len bytes), or NULL. */
static char *probe_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return buf;
}

static int probe_policy(const char *file, int op, char **v, int path)
{
	static const char *const paths[] = { [MK_PATH_UNFUSED] = "unfused",
					     [MK_PATH_FUSED] = "fused",
					     [MK_PATH_ONESHOT] = "oneshot" };
	struct mk_policy_op_query q = { 0 };
	struct mk_policy_sm_split s;

	/* only the calibration decides: no rules file, no forced split */
	unsetenv("MKERNEL_TUNER_CONFIG");
	unsetenv("MKERNEL_TUNER_SM_SPLIT");
	if (setenv("MKERNEL_CALIBRATION", file, 1) != 0)
		return 1;
	q.op = (enum mk_fused_op)op;
	q.nnodes = atoi(v[0]);
	q.nranks = atoi(v[1]);
	q.m = strtoull(v[2], NULL, 10);
	q.n = q.m;
	q.k = q.m / 16 > 0 ? q.m / 16 : 1;
	q.sms = atoi(v[3]);
	if (mk_policy_sm_split(&q, &s) != 0) {
		fprintf(stderr, "calib-probe: mk_policy_sm_split failed\n");
		return 1;
	}
	if (path)
		printf("%s\n", (unsigned)s.path <= MK_PATH_ONESHOT ? paths[s.path] : "?");
	else
		printf("%d %d %d %d\n", s.sms[MK_ROLE_COMPUTE], s.sms[MK_ROLE_INTRA],
		       s.sms[MK_ROLE_SEND], s.sms[MK_ROLE_REDUCE]);
	return 0;
}

int main(int argc, char **argv)
{
	const char *why = NULL;
	struct mk_calib c;
	int line = 0, op, comm[3], rc = 0;
	size_t len = 0;
	char *text;

	if (argc != 2 && argc != 8)
		return probe_usage();
	text = probe_read(argv[1], &len);
	if (text == NULL) {
		fprintf(stderr, "calib-probe: cannot read %s\n", argv[1]);
		return 1;
	}
	if (mk_calib_parse(text, len, &c, &line, &why) != 0) {
		fprintf(stderr, "calib-probe: %s:%d: %s\n", argv[1], line, why != NULL ? why : "?");
		free(text);
		return 1;
	}
	free(text);
	if (argc == 2) {
		printf("ok splits %zu colls %zu nvl", c.nsplit, c.ncoll);
		if (c.link_set[MK_CALIB_NVL])
			printf(" %.2f %.1f\n", c.lat_us[MK_CALIB_NVL], c.gbps[MK_CALIB_NVL]);
		else
			printf(" - -\n");
		goto undo_calib;
	}
	op = mk_rules_op_from_name(argv[3], strlen(argv[3]));
	if (op < 0) {
		rc = probe_usage();
		goto undo_calib;
	}
	if (strcmp(argv[2], "split") == 0) {
		if (mk_calib_split_get(&c, op, atoi(argv[4]), atoi(argv[5]),
				       strtoull(argv[6], NULL, 10), atoi(argv[7]), comm) == 0)
			printf("%d %d %d\n", comm[0], comm[1], comm[2]);
		else
			printf("none\n");
	} else if (strcmp(argv[2], "policy") == 0 || strcmp(argv[2], "path") == 0) {
		rc = probe_policy(argv[1], op, &argv[4], strcmp(argv[2], "path") == 0);
	} else {
		rc = probe_usage();
	}
undo_calib:
	mk_calib_free(&c);
	return rc;
}
