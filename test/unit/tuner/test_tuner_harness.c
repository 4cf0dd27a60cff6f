// SPDX-License-Identifier: Apache-2.0
/*
 * CPU harness: dlopen the built tuner library (path in argv[1]) and drive it the way NCCL 2.28
 * does: look up ncclTunerPlugin_v5 (then v4), init per communicator with NCCL's logger, fill a
 * cost table with estimates and -1 entries, call getCollInfo, read the smallest non-negative
 * entry, finalize. The environment (rules file, budget) is set before the first init because
 * the library reads it once per process, as it would under NCCL.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log_capture.h"
#include "mk_nccl/tuner_v4.h"
#include "mk_nccl/tuner_v5.h"

#define NA MK_NCCL_NUM_ALGORITHMS
#define NP MK_NCCL_NUM_PROTOCOLS

static const char *lib_path;
static void *lib;
static const struct mk_nccl_tuner_v5 *v5;
static const struct mk_nccl_tuner_v4 *v4;
static char rules_path[64];

/* NCCL's table for a multi-node comm without collnet/NVLS. */
static void nccl_table(float t[NA][NP], size_t nbytes)
{
	for (int a = 0; a < NA; a++)
		for (int p = 0; p < NP; p++)
			t[a][p] = -1.0f;
	for (int a = MK_NCCL_ALGO_TREE; a <= MK_NCCL_ALGO_RING; a++)
		for (int p = 0; p < NP; p++)
			t[a][p] = 8.0f + 2.0f * (float)p + (float)nbytes / 1e4f;
}

/* What NCCL does after the call: the smallest non-negative entry, lowest index on ties. */
static void nccl_pick(float t[NA][NP], int *algo, int *proto)
{
	float best = -1.0f;

	*algo = *proto = -1;
	for (int a = 0; a < NA; a++) {
		for (int p = 0; p < NP; p++) {
			if (t[a][p] < 0.0f || (best >= 0.0f && t[a][p] >= best))
				continue;
			best = t[a][p];
			*algo = a;
			*proto = p;
		}
	}
}

static void call5(void *ctx, enum mk_nccl_func f, size_t nbytes, float t[NA][NP], int *algo,
		  int *proto, int *nch)
{
	float *flat = &t[0][0];

	*nch = 0;
	assert_int_equal(v5->getCollInfo(ctx, f, nbytes, 1, (float **)flat, NA, NP, 0, nch),
			 ncclSuccess);
	nccl_pick(t, algo, proto);
}

static void test_exports_only_tuner_tables(void **state)
{
	(void)state;
	assert_non_null(v5);
	assert_non_null(v4);
	assert_string_equal(v5->name, "mkernel");
	assert_string_equal(v4->name, "mkernel");
	assert_non_null(v5->init);
	assert_non_null(v5->getCollInfo);
	assert_non_null(v5->finalize);
	assert_non_null(v4->destroy);
	/* Internals stay hidden. */
	assert_null(dlsym(lib, "mk_policy_create"));
	assert_null(dlsym(lib, "mk_rules_parse"));
	assert_null(dlsym(lib, "mk_log_sink"));
}

static void test_v5_init_logs_and_keeps_constants(void **state)
{
	struct mk_nccl_nvl_domain_info_v5 nvl = { 2, 1, 1 };
	struct mk_nccl_tuner_constants_v5 c, before;
	void *ctx = NULL;

	(void)state;
	memset(&c, 0x5a, sizeof(c));
	memcpy(&before, &c, sizeof(c));
	assert_int_equal(v5->init(&ctx, 0x1234, 2, 2, log_capture, &nvl, &c), ncclSuccess);
	assert_non_null(ctx);
	assert_memory_equal(&before, &c, sizeof(c));
	/* The bad line of the rules file was reported through NCCL's logger with file:line. */
	assert_non_null(strstr(log_text, ":4: unknown protocol"));
	assert_non_null(strstr(log_text, "tuner ready for comm 0x1234"));
	assert_int_equal(v5->finalize(ctx), ncclSuccess);
	/* A second finalize of the same context is refused, without touching the freed one. */
	assert_int_equal(v5->finalize(ctx), ncclInternalError);
	assert_non_null(strstr(log_text, "not a live tuner context"));
	assert_int_equal(v4->destroy(ctx), ncclInternalError);
	/* nNodes > nRanks is not a topology: an init error, not a crash. */
	assert_int_equal(v5->init(&ctx, 1, 2, 3, log_capture, NULL, NULL), ncclInternalError);
	assert_null(ctx);
}

/* Cost model through the ABI, across sizes; -1 entries never chosen nor rewritten. */
static void test_v5_allreduce_sweep_like_nccl(void **state)
{
	static const struct {
		size_t bytes;
		int algo, proto;
	} want[] = {
		{ 8, MK_NCCL_ALGO_RING, MK_NCCL_PROTO_LL },
		{ 32 << 10, MK_NCCL_ALGO_RING, MK_NCCL_PROTO_LL },
		{ 1 << 20, MK_NCCL_ALGO_RING, MK_NCCL_PROTO_LL128 },
		{ 256 << 20, MK_NCCL_ALGO_RING, MK_NCCL_PROTO_SIMPLE },
	};
	float t[NA][NP];
	void *ctx = NULL;
	int algo, proto, nch;

	(void)state;
	assert_int_equal(v5->init(&ctx, 7, 2, 2, log_capture, NULL, NULL), ncclSuccess);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		nccl_table(t, want[i].bytes);
		call5(ctx, MK_NCCL_FUNC_ALLREDUCE, want[i].bytes, t, &algo, &proto, &nch);
		assert_int_equal(algo, want[i].algo);
		assert_int_equal(proto, want[i].proto);
		assert_true(t[algo][proto] == 0.0f);
		assert_int_equal(nch, 3); /* MKERNEL_TUNER_MAX_CHANNELS budget */
		for (int a = MK_NCCL_ALGO_COLLNET_DIRECT; a < NA; a++)
			for (int p = 0; p < NP; p++)
				assert_true(t[a][p] == -1.0f);
	}
	assert_int_equal(v5->finalize(ctx), ncclSuccess);
}

/* Rules through the ABI: a forced choice is obeyed; one NCCL excluded falls back. */
static void test_v5_rules_obeyed_and_exclusions_respected(void **state)
{
	float t[NA][NP];
	void *ctx = NULL;
	int algo, proto, nch, warns;

	(void)state;
	assert_int_equal(v5->init(&ctx, 8, 2, 2, log_capture, NULL, NULL), ncclSuccess);
	nccl_table(t, 4096);
	call5(ctx, MK_NCCL_FUNC_REDUCESCATTER, 4096, t, &algo, &proto, &nch);
	assert_int_equal(algo, MK_NCCL_ALGO_RING);
	assert_int_equal(proto, MK_NCCL_PROTO_SIMPLE);
	assert_int_equal(nch, 2);

	/* NCCL_PROTO=^SIMPLE: the rule cannot be obeyed; WARN once, model picks among the rest. */
	warns = log_warns;
	for (int i = 0; i < 2; i++) {
		nccl_table(t, 4096);
		for (int a = 0; a < NA; a++)
			t[a][MK_NCCL_PROTO_SIMPLE] = -1.0f;
		call5(ctx, MK_NCCL_FUNC_REDUCESCATTER, 4096, t, &algo, &proto, &nch);
		assert_int_equal(algo, MK_NCCL_ALGO_RING);
		assert_int_equal(proto, MK_NCCL_PROTO_LL);
		assert_true(t[MK_NCCL_ALGO_RING][MK_NCCL_PROTO_SIMPLE] == -1.0f);
	}
	assert_int_equal(log_warns, warns + 1);
	assert_non_null(strstr(log_text, "line 2 forces reducescatter"));
	assert_int_equal(v5->finalize(ctx), ncclSuccess);

	/* The 4-node rule does not apply to this 2-node comm but does to a 4-node one. */
	assert_int_equal(v5->init(&ctx, 9, 4, 4, log_capture, NULL, NULL), ncclSuccess);
	nccl_table(t, 4096);
	call5(ctx, MK_NCCL_FUNC_ALLREDUCE, 4096, t, &algo, &proto, &nch);
	assert_int_equal(algo, MK_NCCL_ALGO_TREE);
	assert_int_equal(proto, MK_NCCL_PROTO_LL128);
	assert_int_equal(v5->finalize(ctx), ncclSuccess);
}

/* v4 gives the same decisions as v5 for the same inputs. */
static void test_v4_adapter_matches_v5(void **state)
{
	static const size_t sizes[] = { 64, 8 << 10, 2 << 20, 64 << 20 };
	float t4[NA][NP], t5[NA][NP];
	void *c4 = NULL, *c5 = NULL;
	int nch4, nch5;

	(void)state;
	assert_int_equal(v4->init(2, 2, log_capture, &c4), ncclSuccess);
	assert_non_null(c4);
	assert_int_equal(v5->init(&c5, 10, 2, 2, log_capture, NULL, NULL), ncclSuccess);
	for (int f = MK_NCCL_FUNC_BROADCAST; f <= MK_NCCL_FUNC_ALLREDUCE; f++) {
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			nccl_table(t4, sizes[i]);
			nccl_table(t5, sizes[i]);
			nch4 = nch5 = 0;
			assert_int_equal(v4->getCollInfo(c4, (enum mk_nccl_func)f, sizes[i], 1,
							 (float **)&t4[0][0], NA, NP, 0, &nch4),
					 ncclSuccess);
			assert_int_equal(v5->getCollInfo(c5, (enum mk_nccl_func)f, sizes[i], 1,
							 (float **)&t5[0][0], NA, NP, 0, &nch5),
					 ncclSuccess);
			assert_memory_equal(t4, t5, sizeof(t4));
			assert_int_equal(nch4, nch5);
		}
	}
	assert_int_equal(v4->destroy(c4), ncclSuccess);
	assert_int_equal(v5->finalize(c5), ncclSuccess);
	assert_int_equal(v4->init(2, 1, NULL, NULL), ncclInternalError);
}

/* Odd calls NCCL should not make still leave the table alone and succeed. */
static void test_v5_odd_calls_never_fail(void **state)
{
	float t[NA][NP], before[NA][NP];
	void *ctx = NULL;
	int nch = 5;

	(void)state;
	assert_int_equal(v5->init(&ctx, 11, 2, 2, log_capture, NULL, NULL), ncclSuccess);
	nccl_table(t, 4096);
	memcpy(before, t, sizeof(t));
	assert_int_equal(v5->getCollInfo(ctx, MK_NCCL_FUNC_SENDRECV, 4096, 1, (float **)&t[0][0],
					 NA, NP, 0, &nch),
			 ncclSuccess);
	assert_int_equal(v5->getCollInfo(ctx, MK_NCCL_FUNC_ALLREDUCE, 4096, 1, (float **)&t[0][0],
					 NA, 2, 0, &nch),
			 ncclSuccess);
	assert_memory_equal(before, t, sizeof(t));
	assert_int_equal(nch, 5);
	assert_int_equal(v5->finalize(ctx), ncclSuccess);
}

static int write_rules(void)
{
	FILE *f;
	int fd;

	snprintf(rules_path, sizeof(rules_path), "/tmp/mk-harness-XXXXXX");
	fd = mkstemp(rules_path);
	if (fd < 0)
		return -1;
	f = fdopen(fd, "w");
	if (f == NULL)
		return -1;
	fputs("# harness rules\n"
	      "reducescatter * nodes=2 -> algo=ring proto=simple channels=2\n"
	      "allreduce 0-64K nodes=4 -> algo=tree proto=ll128\n"
	      "allgather * -> proto=turbo\n",
	      f);
	return fclose(f);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exports_only_tuner_tables),
		cmocka_unit_test(test_v5_init_logs_and_keeps_constants),
		cmocka_unit_test(test_v5_allreduce_sweep_like_nccl),
		cmocka_unit_test(test_v5_rules_obeyed_and_exclusions_respected),
		cmocka_unit_test(test_v4_adapter_matches_v5),
		cmocka_unit_test(test_v5_odd_calls_never_fail),
	};
	int rc;

	if (argc < 2) {
		fprintf(stderr, "usage: %s <tuner library .so>\n", argv[0]);
		return 2;
	}
	lib_path = argv[1];
	if (write_rules()) {
		perror("rules file");
		return 1;
	}
	setenv("MKERNEL_TUNER_CONFIG", rules_path, 1);
	setenv("MKERNEL_TUNER_MAX_CHANNELS", "3", 1);
	unsetenv("MKERNEL_TUNER_ALGO");
	unsetenv("MKERNEL_TUNER_PROTO");
	unsetenv("MKERNEL_TUNER_CHANNELS");
	unsetenv("MKERNEL_TUNER_MODEL");
	lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		fprintf(stderr, "dlopen %s: %s\n", lib_path, dlerror());
		unlink(rules_path);
		return 1;
	}
	v5 = dlsym(lib, "ncclTunerPlugin_v5");
	v4 = dlsym(lib, "ncclTunerPlugin_v4");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	dlclose(lib);
	unlink(rules_path);
	return rc;
}
