// SPDX-License-Identifier: Apache-2.0
/*
 * Policy engine: precedence (env > rules file > cost model > NCCL), cost-table writes (only the
 * chosen entry, never a negative one, NCCL_ALGO/NCCL_PROTO exclusions respected), channel
 * budget, the cost model's choices on known cases, and fused-op SM splits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log_capture.h"
#include "mk/log.h"
#include "model.h"
#include "policy.h"

#define NA MK_ALGO_COUNT
#define NP MK_PROTO_COUNT

static const char *const knobs[] = {
	"MKERNEL_TUNER_CONFIG",
	"MKERNEL_TUNER_ALGO",
	"MKERNEL_TUNER_PROTO",
	"MKERNEL_TUNER_CHANNELS",
	"MKERNEL_TUNER_MAX_CHANNELS",
	"MKERNEL_TUNER_MODEL",
	"MKERNEL_TUNER_NVL_GBPS",
	"MKERNEL_TUNER_NVL_LAT_NS",
	"MKERNEL_TUNER_NET_GBPS",
	"MKERNEL_TUNER_NET_LAT_NS",
	"MKERNEL_TUNER_GPU_SMS",
	"MKERNEL_TUNER_SM_SPLIT",
	"MKERNEL_TUNER_ADAPTIVE",
	"MKERNEL_TUNER_WINDOW",
	"MKERNEL_TUNER_LOG_DECISIONS",
	"MKERNEL_TUNER_GEMM_TFLOPS",
	"MKERNEL_TUNER_FUSED_OVERHEAD_US",
};

static char rules_path[64];
static int setup(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		unsetenv(knobs[i]);
	rules_path[0] = '\0';
	mk_test_log_capture_reset();
	mk_log_set_sink(log_capture);
	mk_policy_reload();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (rules_path[0] != '\0')
		unlink(rules_path);
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		unsetenv(knobs[i]);
	mk_log_set_sink(mk_log_discard);
	mk_policy_reload();
	return 0;
}

static void use_rules(const char *text)
{
	FILE *f;
	int fd;

	snprintf(rules_path, sizeof(rules_path), "/tmp/mk-policy-XXXXXX");
	fd = mkstemp(rules_path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	setenv("MKERNEL_TUNER_CONFIG", rules_path, 1);
	mk_policy_reload();
}

static void use_env(const char *name, const char *value)
{
	setenv(name, value, 1);
	mk_policy_reload();
}

/* What NCCL hands over on 2+ nodes without collnet/NVLS: tree and ring, all protocols. */
static void nccl_table(float t[NA][NP], uint64_t nbytes)
{
	for (int a = 0; a < NA; a++)
		for (int p = 0; p < NP; p++)
			t[a][p] = -1.0f;
	for (int a = MK_ALGO_TREE; a <= MK_ALGO_RING; a++)
		for (int p = 0; p < NP; p++)
			t[a][p] = 10.0f + 3.0f * (float)p + (float)a + (float)nbytes / 2e4f;
}

static struct mk_policy *make(int nranks, int nnodes)
{
	struct mk_policy_topo topo = { .nranks = nranks, .nnodes = nnodes };
	struct mk_policy *p = NULL;

	assert_int_equal(mk_policy_create(&topo, &p), 0);
	assert_non_null(p);
	return p;
}

/* Decide and check the table: chosen entry 0, negative entries bit-identical, others as given
 * (or raised from 0); returns the choice. */
static struct mk_policy_choice decide(struct mk_policy *p, int coll, uint64_t nbytes,
				      float t[NA][NP], int *nch)
{
	float before[NA][NP];
	struct mk_policy_choice c;

	memcpy(before, t, sizeof(before));
	mk_policy_coll(p, coll, nbytes, 1, 0, &t[0][0], NA, NP, nch, &c);
	for (int a = 0; a < NA; a++) {
		for (int pr = 0; pr < NP; pr++) {
			if (before[a][pr] < 0) {
				assert_memory_equal(&before[a][pr], &t[a][pr], sizeof(float));
			} else if (c.src != MK_POLICY_SRC_NONE && a == c.algo && pr == c.proto) {
				assert_true(t[a][pr] == 0.0f);
			} else if (before[a][pr] == 0.0f && c.src != MK_POLICY_SRC_NONE) {
				assert_true(t[a][pr] > 0.0f);
			} else {
				assert_true(t[a][pr] == before[a][pr]);
			}
		}
	}
	return c;
}

static void expect(struct mk_policy_choice c, enum mk_policy_src src, int algo, int proto)
{
	if (c.src != src || c.algo != algo || c.proto != proto)
		fail_msg("got src %d algo %d proto %d, expected src %d algo %d proto %d", c.src,
			 c.algo, c.proto, src, algo, proto);
}

/* Known cases with the default links (NET 50 GB/s, 5 us; NVLink 450 GB/s, 1 us). */
static void test_model_two_nodes_protocol_crossovers(void **state)
{
	struct mk_policy *p = make(2, 2);
	float t[NA][NP];
	int nch = -7;

	(void)state;
	nccl_table(t, 1024);
	expect(decide(p, MK_COLL_ALLREDUCE, 1024, t, &nch), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_LL);
	nccl_table(t, 1 << 20);
	expect(decide(p, MK_COLL_ALLREDUCE, 1 << 20, t, &nch), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_LL128);
	nccl_table(t, 64 << 20);
	expect(decide(p, MK_COLL_ALLREDUCE, 64 << 20, t, &nch), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	assert_int_equal(nch, -7); /* no channel input: NCCL's value untouched */
	mk_policy_destroy(p);
}

static void test_model_tree_wins_small_at_scale(void **state)
{
	struct mk_policy *p = make(16, 2);
	float t[NA][NP];

	(void)state;
	nccl_table(t, 4096);
	expect(decide(p, MK_COLL_ALLREDUCE, 4096, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_TREE,
	       MK_PROTO_LL);
	nccl_table(t, 256 << 20);
	expect(decide(p, MK_COLL_ALLREDUCE, 256 << 20, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	/* Tree is not modelled for allgather: ring even where NCCL's tree entry is cheaper. */
	nccl_table(t, 4096);
	t[MK_ALGO_TREE][MK_PROTO_LL] = 0.5f;
	expect(decide(p, MK_COLL_ALLGATHER, 4096, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_LL);
	mk_policy_destroy(p);
}

static void test_model_values_follow_formula(void **state)
{
	struct mk_policy_topo topo = { .nranks = 2, .nnodes = 2 };
	struct mk_model_links l = { 450, 1, 50, 5 };
	double small =
		mk_model_coll_us(&topo, &l, MK_COLL_ALLREDUCE, MK_ALGO_RING, MK_PROTO_SIMPLE, 0);
	double big = mk_model_coll_us(&topo, &l, MK_COLL_ALLREDUCE, MK_ALGO_RING, MK_PROTO_SIMPLE,
				      50000000);

	(void)state;
	/* 2 steps x (5 us + 3 us) and 1 x 50 MB / 50 GB/s = 1000 us. */
	assert_float_equal(small, 16.0, 1e-9);
	assert_float_equal(big, 1016.0, 1e-6);
	assert_true(mk_model_coll_us(&topo, &l, MK_COLL_ALLGATHER, MK_ALGO_TREE, 0, 1) < 0);
	assert_true(mk_model_coll_us(&topo, &l, MK_COLL_ALLREDUCE, MK_ALGO_PAT, 0, 1) < 0);
	topo.nranks = 1;
	topo.nnodes = 1;
	assert_true(mk_model_coll_us(&topo, &l, MK_COLL_ALLREDUCE, MK_ALGO_RING, 2, 1) == 0);
	assert_true(mk_model_coll_us(&topo, &l, MK_COLL_ALLREDUCE, MK_ALGO_TREE, 2, 1) < 0);
}

/* One rank: NCCL sets only ring/simple = 0.0; that stays the choice. */
static void test_single_rank_keeps_ring_simple(void **state)
{
	struct mk_policy *p = make(1, 1);
	float t[NA][NP];

	(void)state;
	for (int a = 0; a < NA; a++)
		for (int pr = 0; pr < NP; pr++)
			t[a][pr] = -1.0f;
	t[MK_ALGO_RING][MK_PROTO_SIMPLE] = 0.0f;
	expect(decide(p, MK_COLL_ALLREDUCE, 1 << 20, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	mk_policy_destroy(p);
}

/* NCCL_PROTO excluded LL128 (column -1): the model's next best is taken. */
static void test_exclusion_proto_column_respected(void **state)
{
	struct mk_policy *p = make(2, 2);
	float t[NA][NP];

	(void)state;
	nccl_table(t, 1 << 20);
	for (int a = 0; a < NA; a++)
		t[a][MK_PROTO_LL128] = -1.0f;
	expect(decide(p, MK_COLL_ALLREDUCE, 1 << 20, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	mk_policy_destroy(p);
}

/* A rule forcing what NCCL_ALGO excluded: one WARN, then the model decides. */
static void test_rule_forcing_excluded_entry_falls_back(void **state)
{
	struct mk_policy *p;
	float t[NA][NP];

	(void)state;
	use_rules("allreduce * -> algo=tree proto=simple\n");
	p = make(2, 2);
	for (int i = 0; i < 3; i++) {
		nccl_table(t, 1024);
		for (int pr = 0; pr < NP; pr++)
			t[MK_ALGO_TREE][pr] = -1.0f;
		expect(decide(p, MK_COLL_ALLREDUCE, 1024, t, NULL), MK_POLICY_SRC_MODEL,
		       MK_ALGO_RING, MK_PROTO_LL);
	}
	assert_int_equal(log_warns, 1);
	assert_non_null(strstr(log_text, "rules file line 1"));
	assert_non_null(strstr(log_text, "unusable"));
	mk_policy_destroy(p);
}

/* Nothing usable that the model covers and no rule: table untouched, no failure. */
static void test_undecided_leaves_table_alone(void **state)
{
	struct mk_policy *p = make(2, 2);
	float t[NA][NP], before[NA][NP];
	struct mk_policy_choice c;

	(void)state;
	for (int a = 0; a < NA; a++)
		for (int pr = 0; pr < NP; pr++)
			t[a][pr] = -1.0f;
	t[MK_ALGO_PAT][MK_PROTO_SIMPLE] = 12.0f;
	memcpy(before, t, sizeof(t));
	assert_int_equal(
		mk_policy_coll(p, MK_COLL_ALLGATHER, 4096, 1, 0, &t[0][0], NA, NP, NULL, &c),
		MK_POLICY_SRC_NONE);
	assert_memory_equal(before, t, sizeof(t));
	/* Unknown collective index (p2p) and a missing table: also untouched. */
	assert_int_equal(mk_policy_coll(p, 7, 4096, 1, 0, &t[0][0], NA, NP, NULL, &c),
			 MK_POLICY_SRC_NONE);
	assert_int_equal(mk_policy_coll(p, MK_COLL_ALLREDUCE, 4096, 1, 0, NULL, NA, NP, NULL, &c),
			 MK_POLICY_SRC_NONE);
	assert_memory_equal(before, t, sizeof(t));
	mk_policy_destroy(p);
}

static void test_model_off_means_nccl_choice(void **state)
{
	struct mk_policy *p;
	float t[NA][NP], before[NA][NP];

	(void)state;
	use_env("MKERNEL_TUNER_MODEL", "0");
	p = make(2, 2);
	nccl_table(t, 1024);
	memcpy(before, t, sizeof(t));
	expect(decide(p, MK_COLL_ALLREDUCE, 1024, t, NULL), MK_POLICY_SRC_NONE, MK_ALGO_ANY,
	       MK_PROTO_ANY);
	assert_memory_equal(before, t, sizeof(t));
	mk_policy_destroy(p);
}

/* env > rules > model, each level checked by removing the one above it. */
static void test_precedence_env_rule_model(void **state)
{
	struct mk_policy *p;
	float t[NA][NP];

	(void)state;
	use_rules("allreduce * -> algo=ring proto=simple\n");
	use_env("MKERNEL_TUNER_ALGO", "allgather:ring, allreduce:tree");
	use_env("MKERNEL_TUNER_PROTO", "ll128");
	p = make(2, 2);
	nccl_table(t, 1024);
	expect(decide(p, MK_COLL_ALLREDUCE, 1024, t, NULL), MK_POLICY_SRC_ENV, MK_ALGO_TREE,
	       MK_PROTO_LL128);
	mk_policy_destroy(p);

	unsetenv("MKERNEL_TUNER_ALGO");
	unsetenv("MKERNEL_TUNER_PROTO");
	mk_policy_reload();
	p = make(2, 2);
	nccl_table(t, 1024);
	expect(decide(p, MK_COLL_ALLREDUCE, 1024, t, NULL), MK_POLICY_SRC_RULE, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	mk_policy_destroy(p);

	unsetenv("MKERNEL_TUNER_CONFIG");
	mk_policy_reload();
	p = make(2, 2);
	nccl_table(t, 1024);
	expect(decide(p, MK_COLL_ALLREDUCE, 1024, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_LL);
	mk_policy_destroy(p);
	assert_int_equal(log_warns, 0);
}

/* Env forcing only a protocol: the algorithm comes from the model among that column. */
static void test_env_proto_only_and_bad_items(void **state)
{
	struct mk_policy *p;
	float t[NA][NP];

	(void)state;
	use_env("MKERNEL_TUNER_PROTO", "simple,bogus,alltoall:ll");
	p = make(16, 2);
	nccl_table(t, 4096);
	expect(decide(p, MK_COLL_ALLREDUCE, 4096, t, NULL), MK_POLICY_SRC_ENV, MK_ALGO_TREE,
	       MK_PROTO_SIMPLE);
	nccl_table(t, 4096);
	expect(decide(p, MK_COLL_BROADCAST, 4096, t, NULL), MK_POLICY_SRC_ENV, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	assert_int_equal(log_warns, 2);
	assert_non_null(strstr(log_text, "'bogus'"));
	assert_non_null(strstr(log_text, "'alltoall:ll'"));
	mk_policy_destroy(p);
}

/* Overlapping ranges: the first rule that matches wins; the later one keeps the rest. */
static void test_rules_first_match_wins_on_overlap(void **state)
{
	struct mk_policy *p;
	struct mk_policy_choice c;
	float t[NA][NP];

	(void)state;
	use_rules("# overlapping\n"
		  "allreduce 0-1M -> algo=ring proto=simple\n"
		  "allreduce 512K-4M -> algo=tree proto=ll\n"
		  "allreduce * nodes=4 -> algo=tree proto=simple\n"
		  "* * pipeops>=2 -> proto=ll128\n"
		  "allgather * regbuff=1 -> algo=ring proto=ll\n");
	p = make(2, 2);
	nccl_table(t, 768 << 10);
	c = decide(p, MK_COLL_ALLREDUCE, 768 << 10, t, NULL);
	expect(c, MK_POLICY_SRC_RULE, MK_ALGO_RING, MK_PROTO_SIMPLE);
	assert_int_equal(c.rule_line, 2);
	nccl_table(t, 2 << 20);
	c = decide(p, MK_COLL_ALLREDUCE, 2 << 20, t, NULL);
	expect(c, MK_POLICY_SRC_RULE, MK_ALGO_TREE, MK_PROTO_LL);
	assert_int_equal(c.rule_line, 3);
	/* 8M: line 4 is for 4-node comms only; line 5 needs 2 pipelined ops. */
	nccl_table(t, 8 << 20);
	expect(decide(p, MK_COLL_ALLREDUCE, 8 << 20, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	nccl_table(t, 8 << 20);
	mk_policy_coll(p, MK_COLL_ALLREDUCE, 8 << 20, 2, 0, &t[0][0], NA, NP, NULL, &c);
	expect(c, MK_POLICY_SRC_RULE, MK_ALGO_RING, MK_PROTO_LL128);
	nccl_table(t, 4096);
	mk_policy_coll(p, MK_COLL_ALLGATHER, 4096, 1, 1, &t[0][0], NA, NP, NULL, &c);
	expect(c, MK_POLICY_SRC_RULE, MK_ALGO_RING, MK_PROTO_LL);
	assert_int_equal(c.rule_line, 6);
	mk_policy_destroy(p);

	p = make(8, 4);
	nccl_table(t, 8 << 20);
	c = decide(p, MK_COLL_ALLREDUCE, 8 << 20, t, NULL);
	expect(c, MK_POLICY_SRC_RULE, MK_ALGO_TREE, MK_PROTO_SIMPLE);
	assert_int_equal(c.rule_line, 4);
	mk_policy_destroy(p);
}

/* A broken rules file never stops decisions: bad lines WARN with file:line, good ones apply. */
static void test_bad_rules_file_warns_and_keeps_working(void **state)
{
	struct mk_policy *p;
	float t[NA][NP];
	char where[96];

	(void)state;
	use_rules("allreduce 0-1K -> algo=ring proto=simple\n"
		  "allreduce 2K- -> algo=sideways\n"
		  "total nonsense\n");
	p = make(2, 2);
	assert_int_equal(log_warns, 2);
	snprintf(where, sizeof(where), "%s:2: unknown algorithm", rules_path);
	assert_non_null(strstr(log_text, where));
	snprintf(where, sizeof(where), "%s:3: missing '->'", rules_path);
	assert_non_null(strstr(log_text, where));
	nccl_table(t, 512);
	expect(decide(p, MK_COLL_ALLREDUCE, 512, t, NULL), MK_POLICY_SRC_RULE, MK_ALGO_RING,
	       MK_PROTO_SIMPLE);
	nccl_table(t, 1 << 20);
	expect(decide(p, MK_COLL_ALLREDUCE, 1 << 20, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_LL128);
	mk_policy_destroy(p);

	/* Missing file: one WARN, the model still decides. */
	setenv("MKERNEL_TUNER_CONFIG", "/nonexistent/mkernel.rules", 1);
	mk_policy_reload();
	mk_test_log_capture_reset();
	p = make(2, 2);
	assert_int_equal(log_warns, 1);
	assert_non_null(strstr(log_text, "/nonexistent/mkernel.rules: cannot read it"));
	nccl_table(t, 512);
	expect(decide(p, MK_COLL_ALLREDUCE, 512, t, NULL), MK_POLICY_SRC_MODEL, MK_ALGO_RING,
	       MK_PROTO_LL);
	mk_policy_destroy(p);
}

/* NCCL's zero-cost entries cannot win the tie against a forced choice. */
static void test_zero_entries_raised_for_forced_choice(void **state)
{
	struct mk_policy *p;
	float t[NA][NP];

	(void)state;
	use_env("MKERNEL_TUNER_ALGO", "ring");
	p = make(2, 2);
	nccl_table(t, 1024);
	t[MK_ALGO_TREE][MK_PROTO_LL] = 0.0f;
	expect(decide(p, MK_COLL_ALLREDUCE, 1024, t, NULL), MK_POLICY_SRC_ENV, MK_ALGO_RING,
	       MK_PROTO_LL);
	assert_true(t[MK_ALGO_TREE][MK_PROTO_LL] > 0.0f);
	mk_policy_destroy(p);
}

/* Channels: env > rule; the budget caps both and applies alone; nothing -> untouched. */
static void test_channels_precedence_and_budget(void **state)
{
	struct mk_policy *p;
	float t[NA][NP];
	int nch;

	(void)state;
	use_rules("allreduce 0-1M -> channels=4\nallreduce 1M- -> channels=16\n");
	p = make(2, 2);
	nch = 0;
	nccl_table(t, 4096);
	decide(p, MK_COLL_ALLREDUCE, 4096, t, &nch);
	assert_int_equal(nch, 4);
	nch = 0;
	nccl_table(t, 4096);
	decide(p, MK_COLL_ALLGATHER, 4096, t, &nch);
	assert_int_equal(nch, 0);
	mk_policy_destroy(p);

	use_env("MKERNEL_TUNER_MAX_CHANNELS", "8");
	p = make(2, 2);
	nch = 0;
	nccl_table(t, 4096);
	decide(p, MK_COLL_ALLREDUCE, 4096, t, &nch);
	assert_int_equal(nch, 4);
	nccl_table(t, 4 << 20);
	decide(p, MK_COLL_ALLREDUCE, 4 << 20, t, &nch);
	assert_int_equal(nch, 8);
	nch = 0;
	nccl_table(t, 4096);
	decide(p, MK_COLL_ALLGATHER, 4096, t, &nch);
	assert_int_equal(nch, 8);
	mk_policy_destroy(p);

	use_env("MKERNEL_TUNER_CHANNELS", "2");
	p = make(2, 2);
	nccl_table(t, 4 << 20);
	decide(p, MK_COLL_ALLREDUCE, 4 << 20, t, &nch);
	assert_int_equal(nch, 2);
	mk_policy_destroy(p);

	use_env("MKERNEL_TUNER_CHANNELS", "99");
	assert_int_equal(log_warns, 0);
	p = make(2, 2);
	assert_int_equal(log_warns, 1);
	nch = 0;
	nccl_table(t, 4 << 20);
	decide(p, MK_COLL_ALLREDUCE, 4 << 20, t, &nch);
	assert_int_equal(nch, 8);
	mk_policy_destroy(p);
}

static void test_create_rejects_bad_topology(void **state)
{
	struct mk_policy_topo topo = { .nranks = 2, .nnodes = 3 };
	struct mk_policy *p = NULL;

	(void)state;
	assert_int_equal(mk_policy_create(&topo, &p), -EINVAL);
	topo.nranks = 0;
	assert_int_equal(mk_policy_create(&topo, &p), -EINVAL);
	assert_int_equal(mk_policy_create(NULL, &p), -EINVAL);
	assert_null(p);
	mk_policy_destroy(NULL);
}

/* ---- fused ops ------------------------------------------------------------------------ */

static void check_split_invariants(const struct mk_policy_sm_split *s, int sms)
{
	int sum = 0;

	for (int r = 0; r < MK_ROLE_COUNT; r++) {
		sum += s->sms[r];
		assert_true(s->min_sms[r] <= s->sms[r]);
		assert_true(s->sms[r] <= s->max_sms[r]);
		assert_true(s->max_sms[r] <= sms);
	}
	assert_true(sum <= sms);
	assert_true(s->sms[MK_ROLE_COMPUTE] >= 1);
	assert_true(s->window >= 2);
	assert_true(s->max_step >= 4);
}

/* GEMM + all-reduce of 8192 x 8192 x 512 on 2 nodes x 8 GPUs of 132 SMs. */
static const struct mk_policy_op_query gar_2x8 = { .op = MK_FUSED_GEMM_ALLREDUCE,
						   .m = 8192,
						   .n = 8192,
						   .k = 512,
						   .nnodes = 2,
						   .nranks = 16,
						   .sms = 132 };

/* The cost model's fusion choice for GEMM + all-reduce: estimates follow the formula's parts. */
static void test_gemm_ar_fuse_choice(void **state)
{
	struct mk_policy_op_query q = gar_2x8;
	struct mk_policy_sm_split s;
	const double gemm_us = 2.0 * 8192 * 8192 * 512 / 631e6;

	(void)state;
	/* big: the all-reduce hides the GEMM; fused pays the overhead once */
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_true(s.unfused_us > gemm_us);
	assert_true(s.fused_us < s.unfused_us);
	assert_true(s.fused_us >= 30.0 + gemm_us);
	assert_int_equal(s.fuse, 1);
	/* tiny: the fixed overhead cannot be won back */
	q.m = q.n = 256;
	q.k = 16;
	q.nnodes = 1;
	q.nranks = 2;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.fuse, 0);
	assert_true(s.fused_us > s.unfused_us);
	/* one rank: nothing to overlap */
	q.m = q.n = 16384;
	q.k = 1024;
	q.nranks = 1;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.fuse, 0);
	/* a larger measured overhead moves the choice (MKERNEL_TUNER_FUSED_OVERHEAD_US) */
	q = gar_2x8;
	setenv("MKERNEL_TUNER_FUSED_OVERHEAD_US", "100000", 1);
	mk_policy_reload();
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.fuse, 0); /* teardown unsets the knob */
}

static void test_sm_split_table_and_topology(void **state)
{
	struct mk_policy_op_query q = gar_2x8;
	struct mk_policy_sm_split s;

	(void)state;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.src, MK_POLICY_SRC_MODEL);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 116);
	assert_int_equal(s.sms[MK_ROLE_INTRA], 12);
	assert_int_equal(s.sms[MK_ROLE_SEND], 4);
	assert_int_equal(s.sms[MK_ROLE_REDUCE], 0);
	assert_int_equal(s.max_sms[MK_ROLE_REDUCE], 0);
	assert_int_equal(s.window, 8);
	assert_int_equal(s.max_step, 33);
	assert_int_equal(s.adaptive, 0);
	check_split_invariants(&s, 132);

	/* One node: nothing to send across; those SMs go to the intra-node role. */
	q.op = MK_FUSED_GEMM_REDUCESCATTER;
	q.nnodes = 1;
	q.nranks = 8;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.sms[MK_ROLE_SEND], 0);
	assert_int_equal(s.sms[MK_ROLE_REDUCE], 0);
	assert_int_equal(s.sms[MK_ROLE_INTRA], 16);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 116);

	/* One GPU per node: no NVLink peers. Smaller GPU: scaled. */
	q.op = MK_FUSED_RING_ATTENTION;
	q.nnodes = 2;
	q.nranks = 2;
	q.sms = 66;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.sms[MK_ROLE_INTRA], 0);
	assert_int_equal(s.sms[MK_ROLE_SEND], 4);
	assert_int_equal(s.sms[MK_ROLE_REDUCE], 4);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 58);
	check_split_invariants(&s, 66);

	for (int op = 0; op < MK_FUSED_OP_COUNT; op++) {
		for (int sms = 8; sms <= 160; sms += 19) {
			q.op = op;
			q.sms = sms;
			q.nranks = 16;
			assert_int_equal(mk_policy_sm_split(&q, &s), 0);
			check_split_invariants(&s, sms);
		}
	}
	q.op = MK_FUSED_OP_COUNT;
	assert_int_equal(mk_policy_sm_split(&q, &s), -EINVAL);
	q.op = MK_FUSED_MOE_DISPATCH;
	q.sms = 4;
	assert_int_equal(mk_policy_sm_split(&q, &s), -EINVAL);
	q.sms = 132;
	q.nranks = 1;
	assert_int_equal(mk_policy_sm_split(&q, &s), -EINVAL);
	assert_int_equal(mk_policy_sm_split(NULL, &s), -EINVAL);
}

static void test_sm_split_rules_env_precedence(void **state)
{
	struct mk_policy_op_query q = { .op = MK_FUSED_GEMM_ALLREDUCE,
					.m = 16384,
					.n = 16384,
					.k = 1024,
					.nnodes = 2,
					.nranks = 16,
					.sms = 132 };
	struct mk_policy_sm_split s;

	(void)state;
	use_rules("fused gemm_allreduce m<8192 -> compute=100 intra=20 send=12\n"
		  "fused gemm_allreduce m>=8192 nodes=2 -> send=8 reduce=2 adaptive=1 window=5\n"
		  "fused allgather_gemm * -> compute=130 intra=10\n"
		  "fused * -> intra=1\n");
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.src, MK_POLICY_SRC_RULE);
	assert_int_equal(s.rule_line, 2);
	assert_int_equal(s.sms[MK_ROLE_SEND], 8);
	assert_int_equal(s.sms[MK_ROLE_REDUCE], 2);
	assert_int_equal(s.sms[MK_ROLE_INTRA], 12);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 110);
	assert_int_equal(s.adaptive, 1);
	assert_int_equal(s.window, 5);
	check_split_invariants(&s, 132);

	q.m = 4096;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.rule_line, 1);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 100);
	assert_int_equal(s.sms[MK_ROLE_REDUCE], 0);

	/* 130 + 10 + 4 > 132: WARN, the table's split stays. */
	q.op = MK_FUSED_ALLGATHER_GEMM;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.src, MK_POLICY_SRC_MODEL);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 120);
	assert_int_equal(log_warns, 1);
	assert_non_null(strstr(log_text, "rules file line 3: split"));

	q.op = MK_FUSED_MOE_DISPATCH;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.rule_line, 4);
	assert_int_equal(s.sms[MK_ROLE_INTRA], 1);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 132 - 1 - 8 - 8);

	/* The environment beats the rule; ADAPTIVE and WINDOW beat it too. */
	use_env("MKERNEL_TUNER_SM_SPLIT", "compute=96 send=16");
	use_env("MKERNEL_TUNER_ADAPTIVE", "0");
	use_env("MKERNEL_TUNER_WINDOW", "3");
	q.op = MK_FUSED_GEMM_ALLREDUCE;
	q.m = 16384;
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.src, MK_POLICY_SRC_ENV);
	assert_int_equal(s.sms[MK_ROLE_COMPUTE], 96);
	assert_int_equal(s.sms[MK_ROLE_SEND], 16);
	assert_int_equal(s.sms[MK_ROLE_REDUCE], 2);
	assert_int_equal(s.adaptive, 0);
	assert_int_equal(s.window, 3);
	check_split_invariants(&s, 132);

	use_env("MKERNEL_TUNER_SM_SPLIT", "compute=x");
	assert_int_equal(mk_policy_sm_split(&q, &s), 0);
	assert_int_equal(s.src, MK_POLICY_SRC_RULE);
	assert_non_null(strstr(log_text, "MKERNEL_TUNER_SM_SPLIT='compute=x':"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_model_values_follow_formula, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_two_nodes_protocol_crossovers, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_model_tree_wins_small_at_scale, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_single_rank_keeps_ring_simple, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_exclusion_proto_column_respected, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rule_forcing_excluded_entry_falls_back, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_undecided_leaves_table_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_off_means_nccl_choice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_precedence_env_rule_model, setup, teardown),
		cmocka_unit_test_setup_teardown(test_env_proto_only_and_bad_items, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rules_first_match_wins_on_overlap, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_rules_file_warns_and_keeps_working, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_zero_entries_raised_for_forced_choice, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_channels_precedence_and_budget, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_create_rejects_bad_topology, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sm_split_table_and_topology, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gemm_ar_fuse_choice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sm_split_rules_env_precedence, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
