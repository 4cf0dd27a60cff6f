// SPDX-License-Identifier: Apache-2.0
/*
 * Rules-parser fuzzer: deterministic random mutations (seeded xorshift) of good rules files,
 * fed to the parser for a few seconds. Checks that it never crashes, reports every rejected
 * line with a sane file/line/reason, and only keeps rules whose fields are in range; every
 * 64th input also goes through a policy decision on an NCCL-like table, which must leave
 * negative entries alone and set at most one entry to 0.
 * Usage: fuzz-tuner-rules [seconds] [seed]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mk/log.h"
#include "policy.h"
#include "rules.h"

#define FUZZ_MAX 8192

static const char *const seeds[] = {
	"# rules\nallreduce 0-64K nodes=2 ranks=* -> algo=tree proto=ll128 channels=4\n"
	"allreduce 64K-1M -> algo=ring proto=ll128\n* * -> proto=simple\n",
	"all_gather 1M- ranks>=16 pipeops<=2 regbuff=1 -> proto=simple\r\n"
	"reducescatter 4KiB-8MB nodes=2-4 -> algo=* proto=LL channels=0 # tail\n",
	"fused gemm_allreduce M>=8192 nodes=2 -> compute=116 intra=12 send=4 reduce=0\n"
	"fused * m<1024 n>100 k=2K -> send=2 adaptive=1 window=16\n"
	"fused moe_dispatch * -> intra=44 send=8 reduce=8\n",
	"broadcast 17->channels=64\nreduce * nodes<3 -> algo=ring\n\n\n",
};

static const char *const dict[] = {
	"->",
	"*",
	"=",
	"K",
	"M",
	"G",
	"T",
	"iB",
	"-",
	"nodes=",
	"ranks=",
	"fused ",
	"algo=",
	"proto=",
	"channels=",
	"#",
	"\n",
	"99999999999999999999",
	">=",
	"<",
	">",
	"<=",
	" ",
	"\t",
	"\r",
	"ring",
	"tree",
	"ll128",
	"compute=",
	"window=",
	"0",
	"1024",
	"allreduce ",
	"gemm_allreduce",
	"\x01",
	"\xff",
	"18446744073709551615",
};

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static size_t mutate(char *buf, size_t len)
{
	int n = 1 + (int)(rng() % 8);

	for (int i = 0; i < n; i++) {
		size_t pos = len ? rng() % (len + 1) : 0;
		const char *w;
		size_t wl;

		switch (rng() % 6) {
		case 0: /* flip a byte */
			if (len)
				buf[pos % len] = (char)rng();
			break;
		case 1: /* delete a run */
			if (len) {
				size_t cut = 1 + rng() % 8;

				pos %= len;
				if (cut > len - pos)
					cut = len - pos;
				memmove(buf + pos, buf + pos + cut, len - pos - cut);
				len -= cut;
			}
			break;
		case 2: /* insert a dictionary word */
		case 3:
			w = dict[rng() % (sizeof(dict) / sizeof(dict[0]))];
			wl = strlen(w);
			if (len + wl < FUZZ_MAX) {
				memmove(buf + pos + wl, buf + pos, len - pos);
				memcpy(buf + pos, w, wl);
				len += wl;
			}
			break;
		case 4: /* duplicate a chunk */
			if (len && len * 2 < FUZZ_MAX) {
				static char chunk[FUZZ_MAX];
				size_t from = rng() % len, cl = 1 + rng() % (len - from);

				memcpy(chunk, buf + from, cl);
				memmove(buf + pos + cl, buf + pos, len - pos);
				memcpy(buf + pos, chunk, cl);
				len += cl;
			}
			break;
		default: /* truncate */
			len = pos;
			break;
		}
	}
	return len;
}

struct fuzz_diag {
	int count;
	int bad;
	int last_line;
};

static void fuzz_diag(void *arg, const char *file, int line, const char *reason)
{
	struct fuzz_diag *d = arg;

	d->count++;
	if (file == NULL || strcmp(file, "fuzz") != 0 || line < 1 || line < d->last_line ||
	    reason == NULL || reason[0] == '\0')
		d->bad++;
	d->last_line = line;
}

static int range_ok(const struct mk_range *r)
{
	return r->lo <= r->hi;
}

static int rule_ok(const struct mk_rule *r, int prev_line)
{
	int ok = r->line > prev_line && range_ok(&r->bytes) && range_ok(&r->nodes) &&
		 range_ok(&r->ranks) && range_ok(&r->pipeops) && range_ok(&r->regbuff) &&
		 range_ok(&r->m) && range_ok(&r->n) && range_ok(&r->k) && r->algo >= MK_ALGO_ANY &&
		 r->algo < MK_ALGO_COUNT && r->proto >= MK_PROTO_ANY && r->proto < MK_PROTO_COUNT &&
		 r->channels >= 0 && r->channels <= MK_RULES_MAX_CHANNELS && r->adaptive >= -1 &&
		 r->adaptive <= 1 && (r->window == -1 || (r->window >= 1 && r->window <= 65536));

	if (r->kind == MK_RULE_COLL)
		ok = ok && r->what >= -1 && r->what < MK_COLL_COUNT;
	else
		ok = ok && r->kind == MK_RULE_FUSED && r->what >= -1 && r->what < MK_FUSED_OP_COUNT;
	for (int i = 0; i < MK_ROLE_COUNT; i++)
		ok = ok && r->sms[i] >= -1 && r->sms[i] <= MK_RULES_MAX_SMS;
	return ok;
}

/* The mutated text as a rules file, through a real decision. */
static int fuzz_policy(const char *buf, size_t len, const char *path)
{
	struct mk_policy_topo topo = { .nranks = (int)(1 + rng() % 16), .nnodes = 1 };
	struct mk_policy *p = NULL;
	float t[MK_ALGO_COUNT * MK_PROTO_COUNT], before[MK_ALGO_COUNT * MK_PROTO_COUNT];
	FILE *f = fopen(path, "w");
	int zeros = 0, nch = 0;

	if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
		return -1;
	topo.nnodes = 1 + (int)(rng() % (uint64_t)topo.nranks);
	mk_policy_reload();
	if (mk_policy_create(&topo, &p))
		return -1;
	for (int i = 0; i < MK_ALGO_COUNT * MK_PROTO_COUNT; i++)
		t[i] = rng() % 3 == 0 ? -1.0f : (float)(rng() % 1000) / 10.0f;
	memcpy(before, t, sizeof(t));
	mk_policy_coll(p, (int)(rng() % 6), rng() >> (rng() % 64), (int)(rng() % 4),
		       (int)(rng() % 2), t, MK_ALGO_COUNT, MK_PROTO_COUNT, &nch, NULL);
	mk_policy_destroy(p);
	for (int i = 0; i < MK_ALGO_COUNT * MK_PROTO_COUNT; i++) {
		if (before[i] < 0 && memcmp(&before[i], &t[i], sizeof(float)) != 0)
			return -1;
		zeros += t[i] == 0.0f && before[i] != 0.0f;
	}
	return zeros <= 1 && nch >= 0 && nch <= 64 ? 0 : -1;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	char path[] = "/tmp/mk-fuzz-rules-XXXXXX";
	static char buf[FUZZ_MAX];
	long iters = 0, rules = 0, rejected = 0;
	time_t end;
	int fd;

	rng_state = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x6d6b65726e656cULL;
	if (rng_state == 0)
		rng_state = 1;
	fd = mkstemp(path);
	if (fd < 0) {
		perror("mkstemp");
		return 1;
	}
	close(fd);
	setenv("MKERNEL_TUNER_CONFIG", path, 1);
	end = time(NULL) + (time_t)(seconds > 0 ? seconds : 1);
	printf("fuzz-tuner-rules: seed %#llx, %.1f s\n", (unsigned long long)rng_state, seconds);
	while (time(NULL) < end) {
		const char *s = seeds[rng() % (sizeof(seeds) / sizeof(seeds[0]))];
		struct fuzz_diag d = { 0 };
		struct mk_rules rs;
		size_t len = strlen(s);
		int prev = 0;

		memcpy(buf, s, len);
		len = mutate(buf, len);
		mk_rules_init(&rs);
		if (mk_rules_parse(&rs, buf, len, "fuzz", fuzz_diag, &d)) {
			fprintf(stderr, "parse failed at iteration %ld\n", iters);
			return 1;
		}
		for (size_t i = 0; i < rs.n; i++) {
			if (!rule_ok(&rs.v[i], prev) || d.bad || d.count != rs.bad + rs.truncated) {
				fprintf(stderr,
					"iteration %ld: bad rule %zu or diagnostic in:\n%.*s\n",
					iters, i, (int)len, buf);
				return 1;
			}
			prev = rs.v[i].line;
		}
		rules += (long)rs.n;
		rejected += rs.bad;
		mk_rules_free(&rs);
		if (iters % 64 == 0 && fuzz_policy(buf, len, path)) {
			fprintf(stderr, "iteration %ld: policy broke the table for:\n%.*s\n", iters,
				(int)len, buf);
			return 1;
		}
		iters++;
	}
	unlink(path);
	printf("fuzz-tuner-rules: %ld inputs, %ld rules kept, %ld lines rejected\n", iters, rules,
	       rejected);
	/* A fuzzer that never exercised both outcomes tested nothing. */
	return iters > 100 && rules > 0 && rejected > 0 ? 0 : 1;
}
