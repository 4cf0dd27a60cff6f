// SPDX-License-Identifier: Apache-2.0
/*
 * Rules-file parser: good files, every malformed form (one diagnostic with file, line and
 * reason, nothing appended), size suffixes and comparisons, and the limits (long lines, more
 * rules than kept, files larger than read).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log_capture.h"
#include "mk/log.h"
#include "rules.h"

struct diag_log {
	int count;
	int line[8];
	char file[8][64];
	char reason[8][160];
};

static void diag_collect(void *arg, const char *file, int line, const char *reason)
{
	struct diag_log *d = arg;

	if (d->count < 8) {
		d->line[d->count] = line;
		snprintf(d->file[d->count], sizeof(d->file[0]), "%s", file);
		snprintf(d->reason[d->count], sizeof(d->reason[0]), "%s", reason);
	}
	d->count++;
}

static int parse(struct mk_rules *rs, struct diag_log *d, const char *text)
{
	memset(d, 0, sizeof(*d));
	mk_rules_init(rs);
	return mk_rules_parse(rs, text, strlen(text), "test.rules", diag_collect, d);
}

static void test_rules_good_file_all_fields(void **state)
{
	static const char text[] =
		"# comment line\n"
		"\n"
		"   \t  \n"
		"allreduce  0-64K  nodes=2  ranks=*  -> algo=tree proto=ll128 channels=4  # tail\n"
		"all_gather 1M- ranks>=16 pipeops<=2 regbuff=1 -> proto=simple\r\n"
		"*  *  -> algo=ring\n"
		"ReduceScatter 4KiB-8MB nodes=2-4 -> algo=* proto=LL channels=0\n"
		"fused gemm_allreduce M>=8192 nodes=2 -> compute=116 intra=12 send=4 reduce=0\n"
		"fused * m<1024 n>100 k=2K -> send=2 adaptive=1 window=16\n"
		"broadcast 17->channels=64";
	struct mk_rules rs;
	struct diag_log d;
	const struct mk_rule *r;

	(void)state;
	assert_int_equal(parse(&rs, &d, text), 0);
	assert_int_equal(d.count, 0);
	assert_int_equal(rs.bad, 0);
	assert_int_equal(rs.n, 7);

	r = &rs.v[0];
	assert_int_equal(r->kind, MK_RULE_COLL);
	assert_int_equal(r->line, 4);
	assert_int_equal(r->what, MK_COLL_ALLREDUCE);
	assert_int_equal(r->bytes.lo, 0);
	assert_int_equal(r->bytes.hi, 64 << 10);
	assert_int_equal(r->nodes.lo, 2);
	assert_int_equal(r->nodes.hi, 2);
	assert_true(r->ranks.lo == 0 && r->ranks.hi == UINT64_MAX);
	assert_int_equal(r->algo, MK_ALGO_TREE);
	assert_int_equal(r->proto, MK_PROTO_LL128);
	assert_int_equal(r->channels, 4);

	r = &rs.v[1];
	assert_int_equal(r->what, MK_COLL_ALLGATHER);
	assert_int_equal(r->bytes.lo, 1 << 20);
	assert_true(r->bytes.hi == UINT64_MAX);
	assert_int_equal(r->ranks.lo, 16);
	assert_int_equal(r->pipeops.hi, 2);
	assert_int_equal(r->regbuff.lo, 1);
	assert_int_equal(r->regbuff.hi, 1);
	assert_int_equal(r->algo, MK_ALGO_ANY);
	assert_int_equal(r->proto, MK_PROTO_SIMPLE);

	r = &rs.v[2];
	assert_int_equal(r->what, -1);
	assert_int_equal(r->algo, MK_ALGO_RING);
	assert_int_equal(r->channels, 0);

	r = &rs.v[3];
	assert_int_equal(r->what, MK_COLL_REDUCESCATTER);
	assert_int_equal(r->bytes.lo, 4096);
	assert_int_equal(r->bytes.hi, 8 << 20);
	assert_int_equal(r->nodes.lo, 2);
	assert_int_equal(r->nodes.hi, 4);
	assert_int_equal(r->proto, MK_PROTO_LL);

	r = &rs.v[4];
	assert_int_equal(r->kind, MK_RULE_FUSED);
	assert_int_equal(r->what, MK_FUSED_GEMM_ALLREDUCE);
	assert_int_equal(r->m.lo, 8192);
	assert_true(r->m.hi == UINT64_MAX);
	assert_int_equal(r->sms[MK_ROLE_COMPUTE], 116);
	assert_int_equal(r->sms[MK_ROLE_INTRA], 12);
	assert_int_equal(r->sms[MK_ROLE_SEND], 4);
	assert_int_equal(r->sms[MK_ROLE_REDUCE], 0);
	assert_int_equal(r->adaptive, -1);

	r = &rs.v[5];
	assert_int_equal(r->what, -1);
	assert_int_equal(r->m.hi, 1023);
	assert_int_equal(r->n.lo, 101);
	assert_int_equal(r->k.lo, 2048);
	assert_int_equal(r->k.hi, 2048);
	assert_int_equal(r->sms[MK_ROLE_COMPUTE], -1);
	assert_int_equal(r->sms[MK_ROLE_SEND], 2);
	assert_int_equal(r->adaptive, 1);
	assert_int_equal(r->window, 16);

	r = &rs.v[6];
	assert_int_equal(r->line, 10);
	assert_int_equal(r->what, MK_COLL_BROADCAST);
	assert_int_equal(r->bytes.lo, 17);
	assert_int_equal(r->channels, 64);
	mk_rules_free(&rs);
}

/* Each malformed line alone: one diagnostic on line 1 naming the problem, no rule kept. */
static void test_rules_malformed_each_rejected_with_reason(void **state)
{
	static const struct {
		const char *line;
		const char *reason;
	} bad[] = {
		{ "allreduce 0-64K algo=ring", "missing '->'" },
		{ "allreduce 0-64K -> algo=ring -> proto=ll", "more than one '->'" },
		{ "-> algo=ring", "nothing before" },
		{ "allreduce 0-64K ->", "no action" },
		{ "allreduce 0-64K ->   # only a comment", "no action" },
		{ "alltoall 0-64K -> algo=ring", "unknown collective 'alltoall'" },
		{ "allreduce -> algo=ring", "missing message-size" },
		{ "allreduce 64K-1K -> algo=ring", "bad message-size range '64K-1K'" },
		{ "allreduce 12Q -> algo=ring", "bad message-size range" },
		{ "allreduce -5 -> algo=ring", "bad message-size range" },
		{ "allreduce 99999999999999999999 -> algo=ring", "bad message-size range" },
		{ "allreduce 17179869184G -> algo=ring", "bad message-size range" },
		{ "allreduce * nodes -> algo=ring", "expected key=value" },
		{ "allreduce * colour=blue -> algo=ring", "unknown match key" },
		{ "allreduce * nodes=2 nodes=3 -> algo=ring", "repeated" },
		{ "allreduce * nodes=x -> algo=ring", "bad value" },
		{ "allreduce * ranks<0 -> algo=ring", "bad value" },
		{ "allreduce * ranks=4-2 -> algo=ring", "bad value" },
		{ "allreduce * m=4 -> algo=ring", "unknown match key" },
		{ "allreduce * -> algo=butterfly", "unknown algorithm" },
		{ "allreduce * -> proto=ll64", "unknown protocol" },
		{ "allreduce * -> channels=65", "channels must be" },
		{ "allreduce * -> channels=-1", "channels must be" },
		{ "allreduce * -> algo=ring algo=tree", "given twice" },
		{ "allreduce * -> ring", "key=value" },
		{ "allreduce * -> algo=", "key=value" },
		{ "allreduce * -> compute=100", "unknown action" },
		{ "fused -> compute=100", "without an op" },
		{ "fused gemm_alltoall -> compute=100", "unknown fused op" },
		{ "fused * bytes=4 -> compute=100", "unknown match key" },
		{ "fused * -> compute=2000", "SM count" },
		{ "fused * -> adaptive=2", "adaptive must be" },
		{ "fused * -> window=0", "window must be" },
		{ "fused * -> algo=ring", "unknown action" },
		{ "allreduce * a b c d e f g h i j k l m n o p q -> algo=ring", "too many" },
		{ "allreduce \x01 * -> algo=ring", "control character" },
	};
	struct mk_rules rs;
	struct diag_log d;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(&rs, &d, bad[i].line), 0);
		if (d.count != 1 || strstr(d.reason[0], bad[i].reason) == NULL)
			fail_msg("line '%s': %d diagnostics, first '%s', expected '%s'",
				 bad[i].line, d.count, d.count ? d.reason[0] : "", bad[i].reason);
		assert_int_equal(d.line[0], 1);
		assert_string_equal(d.file[0], "test.rules");
		assert_int_equal(rs.n, 0);
		assert_int_equal(rs.bad, 1);
		mk_rules_free(&rs);
	}
}

/* Bad lines among good ones: each reported with its own line number, the good ones kept. */
static void test_rules_bad_lines_skipped_good_kept(void **state)
{
	static const char text[] = "allreduce * -> algo=ring\n"
				   "allreduce * -> algo=wrong\n"
				   "# fine\n"
				   "allgather 1K-2K -> proto=simple\n"
				   "garbage\n";
	struct mk_rules rs;
	struct diag_log d;

	(void)state;
	assert_int_equal(parse(&rs, &d, text), 0);
	assert_int_equal(rs.n, 2);
	assert_int_equal(rs.bad, 2);
	assert_int_equal(d.count, 2);
	assert_int_equal(d.line[0], 2);
	assert_int_equal(d.line[1], 5);
	assert_int_equal(rs.v[1].line, 4);
	mk_rules_free(&rs);
}

/* Without a callback the diagnostic is a WARN naming file, line and reason. */
static void test_rules_default_diag_is_warn(void **state)
{
	static const char text[] = "\nallreduce * -> proto=fast\n";
	struct mk_rules rs;

	(void)state;
	mk_test_log_capture_reset();
	mk_log_set_sink(log_capture);
	mk_rules_init(&rs);
	assert_int_equal(mk_rules_parse(&rs, text, strlen(text), "ops.rules", NULL, NULL), 0);
	mk_log_set_sink(mk_log_discard);
	assert_int_equal(log_warns, 1);
	assert_non_null(strstr(log_text, "ops.rules:2:"));
	assert_non_null(strstr(log_text, "unknown protocol"));
	assert_non_null(strstr(log_text, "ignored"));
	mk_rules_free(&rs);
}

static void test_rules_size_suffixes(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "0", 0 },
		{ "17", 17 },
		{ "1K", 1024 },
		{ "1k", 1024 },
		{ "2KB", 2048 },
		{ "2KiB", 2048 },
		{ "3M", 3 << 20 },
		{ "1G", 1ULL << 30 },
		{ "2T", 2ULL << 40 },
		{ "5B", 5 },
		{ "18446744073709551615", UINT64_MAX },
	};
	static const char *const bad[] = { "",	   "K",		"1KK",
					   "1.5K", "0x10",	"1 K",
					   "-1",   "16777216T", "18446744073709551616",
					   "1Kx" };
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(mk_rules_parse_size(good[i].s, strlen(good[i].s), &v), 0);
		assert_true(v == good[i].v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(mk_rules_parse_size(bad[i], strlen(bad[i]), &v), -EINVAL);
}

static void test_rules_names_and_action_parser(void **state)
{
	struct mk_rule r;
	const char *reason = NULL;

	(void)state;
	assert_int_equal(mk_rules_coll_from_name("All-Reduce", 10), MK_COLL_ALLREDUCE);
	assert_int_equal(mk_rules_coll_from_name("allreducex", 10), -1);
	assert_int_equal(mk_rules_algo_from_name("NVLS_TREE", 9), MK_ALGO_NVLS_TREE);
	assert_int_equal(mk_rules_algo_from_name("nvls", 4), MK_ALGO_NVLS);
	assert_int_equal(mk_rules_proto_from_name("LL128", 5), MK_PROTO_LL128);
	assert_int_equal(mk_rules_proto_from_name("ll12", 4), -1);
	assert_int_equal(mk_rules_op_from_name("RingAttention", 13), MK_FUSED_RING_ATTENTION);
	assert_string_equal(mk_rules_algo_name(MK_ALGO_PAT), "pat");
	assert_null(mk_rules_algo_name(MK_ALGO_COUNT));
	assert_null(mk_rules_proto_name(-1));

	memset(&r, 0, sizeof(r));
	for (int i = 0; i < MK_ROLE_COUNT; i++)
		r.sms[i] = -1;
	assert_int_equal(mk_rules_parse_action("intra=8 send=2", MK_RULE_FUSED, &r, &reason), 0);
	assert_int_equal(r.sms[MK_ROLE_INTRA], 8);
	assert_int_equal(r.sms[MK_ROLE_SEND], 2);
	assert_int_equal(r.sms[MK_ROLE_COMPUTE], -1);
	assert_int_equal(mk_rules_parse_action("intra=8 intra=2", MK_RULE_FUSED, &r, &reason),
			 -EINVAL);
	assert_non_null(strstr(reason, "twice"));
	assert_int_equal(mk_rules_parse_action("", MK_RULE_COLL, &r, &reason), -EINVAL);
}

/* A line of 1024 bytes or more is one diagnostic; the next line still parses. */
static void test_rules_long_line_rejected(void **state)
{
	size_t n = 5000;
	char *text = malloc(n + 64);
	struct mk_rules rs;
	struct diag_log d;

	(void)state;
	assert_non_null(text);
	memcpy(text, "allreduce * ", 12);
	memset(text + 12, ' ', n - 12);
	strcpy(text + n, "-> algo=ring\nallgather * -> algo=ring\n");
	assert_int_equal(parse(&rs, &d, text), 0);
	assert_int_equal(d.count, 1);
	assert_non_null(strstr(d.reason[0], "longer than"));
	assert_int_equal(rs.n, 1);
	assert_int_equal(rs.v[0].what, MK_COLL_ALLGATHER);
	assert_int_equal(rs.v[0].line, 2);
	mk_rules_free(&rs);
	free(text);
}

/* More rules than kept: the first 4096 in order, one diagnostic, parsing stops. */
static void test_rules_huge_file_truncated(void **state)
{
	size_t n = 20000, len = 0, cap = n * 48;
	char *text = malloc(cap);
	struct mk_rules rs;
	struct diag_log d;

	(void)state;
	assert_non_null(text);
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len, "allreduce %zu -> algo=ring\n", i);
	assert_int_equal(parse(&rs, &d, text), 0);
	assert_int_equal(rs.n, MK_RULES_MAX_RULES);
	assert_int_equal(rs.truncated, 1);
	assert_int_equal(d.count, 1);
	assert_int_equal(d.line[0], MK_RULES_MAX_RULES + 1);
	assert_non_null(strstr(d.reason[0], "more than 4096"));
	assert_int_equal(rs.v[MK_RULES_MAX_RULES - 1].bytes.lo, MK_RULES_MAX_RULES - 1);
	mk_rules_free(&rs);
	free(text);
}

static void write_file(const char *path, const char *head, size_t filler)
{
	FILE *f = fopen(path, "w");
	static char line[100];

	assert_non_null(f);
	fputs(head, f);
	memset(line, '#', sizeof(line) - 1);
	line[sizeof(line) - 2] = '\n';
	for (size_t i = 0; i < filler; i++)
		fputs(line, f);
	assert_int_equal(fclose(f), 0);
}

/* Files: missing -> -ENOENT; larger than read -> one diagnostic, the head still parsed. */
static void test_rules_load_files(void **state)
{
	char path[] = "/tmp/mk-rules-XXXXXX";
	struct mk_rules rs;
	struct diag_log d = { 0 };
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	mk_rules_init(&rs);
	assert_int_equal(mk_rules_load(&rs, "/nonexistent/dir/rules", diag_collect, &d), -ENOENT);
	assert_int_equal(rs.n, 0);

	write_file(path, "allreduce 1K -> algo=tree\n", 0);
	assert_int_equal(mk_rules_load(&rs, path, diag_collect, &d), 0);
	assert_int_equal(rs.n, 1);
	assert_int_equal(d.count, 0);
	mk_rules_free(&rs);

	/* 17.5 MiB of comments after one rule. */
	write_file(path, "allreduce 2K -> algo=ring\n", (size_t)(17.5 * (1 << 20) / 99));
	assert_int_equal(mk_rules_load(&rs, path, diag_collect, &d), 0);
	assert_int_equal(rs.n, 1);
	assert_int_equal(rs.v[0].bytes.lo, 2048);
	assert_int_equal(d.count, 1);
	assert_non_null(strstr(d.reason[0], "larger than 16 MiB"));
	assert_string_equal(d.file[0], path);
	mk_rules_free(&rs);
	unlink(path);
}

/* Overlaps: a later rule inside an earlier one is dead; a partial overlap is not. */
static void test_rules_shadowed_detected(void **state)
{
	static const char text[] = "allreduce 0-1M nodes=2 -> algo=ring\n"
				   "allreduce 4K-64K nodes=2 -> algo=tree\n"
				   "allreduce 512K-4M nodes=2 -> algo=tree\n"
				   "* * -> proto=simple\n"
				   "allgather 1K ranks=8 -> proto=ll\n"
				   "fused gemm_allreduce m>=8192 -> send=4\n"
				   "fused gemm_allreduce m>=16384 -> send=8\n"
				   "fused * m>=4096 nodes=2 -> send=2\n";
	struct mk_rules rs;
	struct diag_log d;

	(void)state;
	assert_int_equal(parse(&rs, &d, text), 0);
	assert_int_equal(rs.n, 8);
	assert_int_equal(mk_rules_shadowed_by(&rs, 0), -1);
	assert_int_equal(mk_rules_shadowed_by(&rs, 1), 0);
	assert_int_equal(mk_rules_shadowed_by(&rs, 2), -1);
	assert_int_equal(mk_rules_shadowed_by(&rs, 3), -1);
	assert_int_equal(mk_rules_shadowed_by(&rs, 4), 3);
	assert_int_equal(mk_rules_shadowed_by(&rs, 5), -1);
	assert_int_equal(mk_rules_shadowed_by(&rs, 6), 5);
	assert_int_equal(mk_rules_shadowed_by(&rs, 7), -1);
	assert_int_equal(mk_rules_shadowed_by(&rs, 8), -1);
	mk_rules_free(&rs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rules_size_suffixes),
		cmocka_unit_test(test_rules_names_and_action_parser),
		cmocka_unit_test(test_rules_good_file_all_fields),
		cmocka_unit_test(test_rules_malformed_each_rejected_with_reason),
		cmocka_unit_test(test_rules_bad_lines_skipped_good_kept),
		cmocka_unit_test(test_rules_shadowed_detected),
		cmocka_unit_test(test_rules_default_diag_is_warn),
		cmocka_unit_test(test_rules_long_line_rejected),
		cmocka_unit_test(test_rules_huge_file_truncated),
		cmocka_unit_test(test_rules_load_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
