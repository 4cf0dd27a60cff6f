// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component tuner: calibration data (tuner/calib.h). The parser (every record
 * kind, each malformed record rejected with its line and reason, the file rejected as a whole),
 * the built-in table, MKERNEL_CALIBRATION (a valid file is used, a corrupt or missing one is a
 * WARN and the built-in table), and the shape-class lookup behind mkGemm's path choice: M
 * buckets, nearest N and K, ties, limits, the engine's noise margin against cuBLAS, paths the
 * caller cannot run, and the time estimate the cost model scales.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib.h"
#include "mk/log.h"
#include "mk/param.h"

#include "log_capture.h"

static int parse(const char *text, struct mk_calib *c, int *line, const char **why)
{
	return mk_calib_parse(text, strlen(text), c, line, why);
}

/* The text must be accepted; a rejection fails the test with its line and reason. */
static void parse_ok(const char *text, struct mk_calib *c)
{
	const char *why = NULL;
	int line = -1;

	if (parse(text, c, &line, &why) != 0)
		fail_msg("rejected at line %d: %s", line, why != NULL ? why : "(no reason)");
}

/* The text must be rejected at `want_line` with a reason containing `want`. */
static void reject(const char *text, int want_line, const char *want)
{
	struct mk_calib c;
	const char *why = NULL;
	int line = -1;

	assert_int_equal(parse(text, &c, &line, &why), -EINVAL);
	assert_int_equal(line, want_line);
	assert_non_null(why);
	if (strstr(why, want) == NULL)
		fail_msg("reason '%s' lacks '%s'", why, want);
	assert_null(c.gemm);
	assert_int_equal(c.ngemm, 0);
}

#define HEADER "mkernel-calibration 1\n"

static void test_parse_every_record(void **state)
{
	struct mk_calib c;

	(void)state;
	parse_ok("# a comment\n\n" HEADER "device 132 NVIDIA H200   # trailing\n"
		 "gemm 16 4096 4096 nk cublas 11.5\n"
		 "gemm 16 4096 4096 nk e64x256s8 9.25\n"
		 "gemm 1 1024 1024 kn e128x128s1 5\r\n"
		 "link nvl 1.5 380\n"
		 "link net 8 45.5\n"
		 "fused gemm_allreduce 6.5\n",
		 &c);
	assert_int_equal(c.ngemm, 3);
	assert_int_equal(c.sms, 132);
	assert_string_equal(c.device, "NVIDIA H200");
	/* sorted by layout first: the kn record leads */
	assert_int_equal(c.gemm[0].b_nk, 0);
	assert_int_equal(c.gemm[0].m, 1);
	assert_int_equal(c.gemm[0].engine, 1);
	assert_int_equal(c.gemm[0].bm, 128);
	assert_int_equal(c.gemm[0].bn, 128);
	assert_int_equal(c.gemm[0].splits, 1);
	assert_int_equal(c.gemm[1].engine, 0); /* cuBLAS before the engine in a class */
	assert_true(fabsf(c.gemm[1].us - 11.5f) < 1e-6f);
	assert_int_equal(c.gemm[2].bm, 64);
	assert_int_equal(c.gemm[2].bn, 256);
	assert_int_equal(c.gemm[2].splits, 8);
	assert_true(c.link_set[MK_CALIB_NVL] && c.link_set[MK_CALIB_NET]);
	assert_true(fabs(c.lat_us[MK_CALIB_NVL] - 1.5) < 1e-9);
	assert_true(fabs(c.gbps[MK_CALIB_NET] - 45.5) < 1e-9);
	assert_true(c.overhead_set[0]);
	assert_true(fabs(c.overhead_us[0] - 6.5) < 1e-9);
	mk_calib_free(&c);
}

static void test_parse_rejects_malformed_records(void **state)
{
	(void)state;
	reject("gemm 1 1 1 nk cublas 1\n", 1, "first record");
	reject("mkernel-calibration 2\n", 1, "first record");
	reject("", 0, "no 'mkernel-calibration 1'");
	reject(HEADER "gemm 1 1 nk cublas 1\n", 2, "expected 'gemm");
	reject(HEADER "gemm 0 1 1 nk cublas 1\n", 2, "M, N and K");
	reject(HEADER "gemm 1 2147483648 1 nk cublas 1\n", 2, "M, N and K");
	reject(HEADER "gemm -1 1 1 nk cublas 1\n", 2, "M, N and K");
	reject(HEADER "gemm 1 1 1 nt cublas 1\n", 2, "layout");
	reject(HEADER "\ngemm 1 1 1 nk e96x256s1 1\n", 3, "path");
	reject(HEADER "gemm 1 1 1 nk e128x256s0 1\n", 2, "path");
	reject(HEADER "gemm 1 1 1 nk e128x256s17 1\n", 2, "path");
	reject(HEADER "gemm 1 1 1 nk e128x256s1x 1\n", 2, "path");
	reject(HEADER "gemm 1 1 1 nk cuBLAS 1\n", 2, "path");
	reject(HEADER "gemm 1 1 1 nk cublas 0\n", 2, "microseconds");
	reject(HEADER "gemm 1 1 1 nk cublas -3\n", 2, "microseconds");
	reject(HEADER "gemm 1 1 1 nk cublas nan\n", 2, "microseconds");
	reject(HEADER "gemm 1 1 1 nk cublas 5us\n", 2, "microseconds");
	reject(HEADER "link pcie 1 1\n", 2, "link record");
	reject(HEADER "link nvl 1 0\n", 2, "link record");
	reject(HEADER "fused gemm_allgather 3\n", 2, "known op");
	reject(HEADER "fused gemm_allreduce\n", 2, "known op");
	reject(HEADER "device x NVIDIA\n", 2, "device record");
	reject(HEADER "coll allreduce nccl 1 2 8192\n", 2, "coll record");
	reject(HEADER "coll alltoall nccl 1 2 8192 5\n", 2, "coll record");
	reject(HEADER "coll allreduce mpi 1 2 8192 5\n", 2, "coll record");
	reject(HEADER "coll allreduce nccl 1 2 0 5\n", 2, "coll record");
	reject(HEADER "coll allreduce nccl 1 2 8192 0\n", 2, "coll record");
	reject(HEADER "split gemm_allreduce 1 2 2048 66 4 0\n", 2, "split record");
	reject(HEADER "split gemm_allgather 1 2 2048 66 4 0 0\n", 2, "split record");
	reject(HEADER "split gemm_allreduce 0 2 2048 66 4 0 0\n", 2, "split record");
	reject(HEADER "split gemm_allreduce 1 2 2048 4 1 0 0\n", 2, "split record");
	reject(HEADER "split gemm_allreduce 1 2 2048 66 30 30 6\n", 2, "split record");
	reject(HEADER "gemms 1 1 1 nk cublas 1\n", 2, "unknown record");
	reject(HEADER "a b c d e f g h i j k l m n o p q\n", 2, "16 fields");
	/* the same measurement twice: the file cannot say which one holds */
	reject(HEADER "gemm 8 8 8 nk cublas 1\ngemm 8 8 8 nk cublas 2\n", 0, "twice");
	{
		char line[400];

		memset(line, 'x', sizeof(line));
		memcpy(line, HEADER, strlen(HEADER));
		line[sizeof(line) - 1] = '\0';
		reject(line, 2, "255 bytes");
	}
	{
		static const char nul[] = HEADER "gemm 1 1 1 nk\0 cublas 1\n";
		struct mk_calib c;
		const char *why;
		int line;

		assert_int_equal(mk_calib_parse(nul, sizeof(nul) - 1, &c, &line, &why), -EINVAL);
		assert_int_equal(line, 2);
		assert_non_null(strstr(why, "NUL"));
	}
}

/* The table compiled into the library parses and holds cuBLAS, engine and skinny records. */
static void test_builtin_table_is_valid(void **state)
{
	struct mk_calib c;
	struct mk_calib_choice ch;
	int engine = 0, blas = 0, skinny = 0;

	(void)state;
	parse_ok(mk_calib_builtin, &c);
	assert_true(c.ngemm >= 2);
	for (size_t i = 0; i < c.ngemm; i++) {
		engine += c.gemm[i].engine == 1;
		skinny += c.gemm[i].engine == MK_CALIB_SKINNY;
		blas += !c.gemm[i].engine;
	}
	assert_true(engine > 0 && blas > 0 && skinny > 0);
	/* one decode row against a 1024 x 1024 weight: the skinny kernel, measured at 2x cuBLAS */
	assert_int_equal(mk_calib_gemm_choose(&c, 1, 1024, 1024, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.engine, MK_CALIB_SKINNY);
	assert_true(c.sms > 0);
	mk_calib_free(&c);
}

static char calib_path[64];

static int setup_env(void **state)
{
	(void)state;
	mk_test_log_capture_reset();
	mk_log_set_sink(log_capture);
	snprintf(calib_path, sizeof(calib_path), "/tmp/mk-calib-test-%d.txt", (int)getpid());
	return 0;
}

static int teardown_env(void **state)
{
	(void)state;
	unsetenv("MKERNEL_CALIBRATION");
	mk_param_reset_all();
	mk_calib_reload();
	unlink(calib_path);
	mk_log_set_sink(mk_log_discard);
	return 0;
}

static void use_file(const char *text)
{
	FILE *f;

	if (text != NULL) {
		f = fopen(calib_path, "w");
		assert_non_null(f);
		fputs(text, f);
		fclose(f);
	}
	setenv("MKERNEL_CALIBRATION", calib_path, 1);
	mk_param_reset_all();
	mk_calib_reload();
	mk_test_log_capture_reset();
}

static void test_env_file_used_when_valid(void **state)
{
	const struct mk_calib *c;

	(void)state;
	use_file(HEADER "device 100 test GPU\ngemm 64 64 64 nk cublas 3\n");
	c = mk_calib_get();
	assert_string_equal(c->source, calib_path);
	assert_int_equal(c->ngemm, 1);
	assert_int_equal(c->sms, 100);
	assert_int_equal(log_warns, 0);
	/* read once: a second call returns the same copy */
	assert_ptr_equal(mk_calib_get(), c);
}

static void test_env_corrupt_file_warns_and_uses_builtin(void **state)
{
	const struct mk_calib *c;

	(void)state;
	use_file(HEADER "gemm 64 64 64 nk cublas 3\ngemm 64 64 oops nk cublas 3\n");
	c = mk_calib_get();
	assert_string_equal(c->source, "built-in");
	assert_true(c->ngemm >= 2);
	assert_int_equal(log_warns, 1);
	assert_non_null(strstr(log_text, calib_path));
	assert_non_null(strstr(log_text, ":3:")); /* the line */
	assert_non_null(strstr(log_text, "ignored"));

	unlink(calib_path);
	use_file(NULL); /* missing file */
	c = mk_calib_get();
	assert_string_equal(c->source, "built-in");
	assert_int_equal(log_warns, 1);
	assert_non_null(strstr(log_text, "cannot open"));
}

/* A grid of classes for the lookup tests. */
static const char grid[] = HEADER "gemm 1 4096 4096 nk cublas 10\n"
				  "gemm 1 4096 4096 nk e64x256s8 8\n"
				  "gemm 16 4096 4096 nk cublas 12\n"
				  "gemm 16 4096 4096 nk e64x256s8 12.5\n"
				  "gemm 16 4096 4096 nk e64x128s4 11.8\n" /* 1.7 % faster */
				  "gemm 16 14336 4096 nk cublas 30\n"
				  "gemm 16 14336 4096 nk e64x128s2 25\n"
				  "gemm 128 4096 4096 nk cublas 20\n"
				  "gemm 128 4096 4096 nk e128x128s2 18\n"
				  "gemm 128 4096 4096 nk e64x256s4 17\n"
				  "gemm 128 2048 2048 nk cublas 10\n"
				  "gemm 128 1024 16384 nk cublas 40\n"
				  "gemm 128 16384 1024 nk cublas 41\n"
				  "gemm 4096 4096 4096 nk e128x256s1 190\n" /* no cuBLAS here */
				  "gemm 4096 4096 4096 kn cublas 200\n";

static struct mk_calib lookup_cal;

static int setup_grid(void **state)
{
	const char *why;
	int line;

	(void)state;
	return parse(grid, &lookup_cal, &line, &why);
}

static int teardown_grid(void **state)
{
	(void)state;
	mk_calib_free(&lookup_cal);
	return 0;
}

static struct mk_calib_choice choose(uint64_t m, uint64_t n, uint64_t k, int b_nk, int want_rc)
{
	struct mk_calib_choice ch;

	assert_int_equal(mk_calib_gemm_choose(&lookup_cal, m, n, k, b_nk, NULL, NULL, &ch),
			 want_rc);
	return ch;
}

static void test_lookup_m_bucket_is_the_next_measured_m(void **state)
{
	struct mk_calib_choice ch;

	(void)state;
	ch = choose(1, 4096, 4096, 1, 0);
	assert_int_equal(ch.m, 1);
	assert_int_equal(ch.engine, 1); /* 8 < 10 * 0.98 */
	assert_int_equal(ch.bm, 64);
	assert_int_equal(ch.splits, 8);
	ch = choose(9, 4096, 4096, 1, 0); /* 9 -> 16 */
	assert_int_equal(ch.m, 16);
	/* 17 -> 128 is a factor of 7.5: beyond the limit, no class */
	choose(17, 4096, 4096, 1, -ENOENT);
	ch = choose(100, 4096, 4096, 1, 0); /* 100 -> 128 */
	assert_int_equal(ch.m, 128);
	/* above every class: the largest M of the layout */
	ch = choose(100000, 4096, 4096, 1, 0);
	assert_int_equal(ch.m, 4096);
	/* 2 -> 16 is a factor of 8: no class, cuBLAS */
	ch = choose(2, 4096, 4096, 1, -ENOENT);
	assert_int_equal(ch.engine, 0);
}

static void test_lookup_nearest_n_k_and_ties(void **state)
{
	struct mk_calib_choice ch;

	(void)state;
	/* N = 12000 is nearer 14336 than 4096 in log2 */
	ch = choose(16, 12000, 4096, 1, 0);
	assert_int_equal(ch.n, 14336);
	assert_int_equal(ch.engine, 1);
	assert_int_equal(ch.bn, 128);
	/* tails: N = 4000, K = 4100 belong to 4096 x 4096 */
	ch = choose(16, 4000, 4100, 1, 0);
	assert_int_equal(ch.n, 4096);
	assert_int_equal(ch.k, 4096);
	/* 2048 x 4096 is 1 from 2048 x 2048 and from 4096 x 4096: the larger N K wins */
	ch = choose(128, 2048, 4096, 1, 0);
	assert_int_equal(ch.n, 4096);
	assert_int_equal(ch.k, 4096);
	/* 2048 x 8192 is 2 from 4096 x 4096 and from 1024 x 16384 (the same N K): larger N */
	ch = choose(128, 2048, 8192, 1, 0);
	assert_int_equal(ch.n, 4096);
	assert_int_equal(ch.k, 4096);
	/* too far from every class of the bucket (4 from each of three, 5 and more) */
	choose(128, 16384, 16384, 1, -ENOENT);
	choose(16, 128, 4096, 1, -ENOENT);
	choose(16, 4096, 100000, 1, -ENOENT);
}

static void test_lookup_noise_margin_and_missing_paths(void **state)
{
	struct mk_calib_choice ch;

	(void)state;
	/* M 16: the best engine path is 1.7 % faster than cuBLAS: inside the margin, cuBLAS */
	ch = choose(16, 4096, 4096, 1, 0);
	assert_int_equal(ch.engine, 0);
	assert_true(fabs(ch.us - 12) < 1e-6);
	assert_true(fabs(ch.cublas_us - 12) < 1e-6);
	/* M 128: the fastest engine path wins */
	ch = choose(128, 4096, 4096, 1, 0);
	assert_int_equal(ch.engine, 1);
	assert_int_equal(ch.bm, 64);
	assert_int_equal(ch.bn, 256);
	assert_int_equal(ch.splits, 4);
	assert_true(fabs(ch.us - 17) < 1e-6);
	/* a class without cuBLAS: the engine */
	ch = choose(4096, 4096, 4096, 1, 0);
	assert_int_equal(ch.engine, 1);
	assert_true(ch.cublas_us == 0);
	/* a class without the engine: cuBLAS */
	ch = choose(128, 1024, 16384, 1, 0);
	assert_int_equal(ch.engine, 0);
	assert_true(fabs(ch.us - 40) < 1e-6);
}

/* The KN layout was measured at one class only; a query of the layout uses it. */
static void test_lookup_layout_kept_apart(void **state)
{
	struct mk_calib_choice ch;

	(void)state;
	ch = choose(4096, 4096, 4096, 0, 0);
	assert_int_equal(ch.engine, 0); /* the kn class holds cuBLAS only */
	/* kn has no M = 16 class within reach */
	choose(16, 4096, 4096, 0, -ENOENT);
}

/* Paths the caller cannot run (here: no split-K) are skipped; the next best engine path or
 * cuBLAS takes the call. */
static int no_splits(const struct mk_calib_gemm *p, void *arg)
{
	int *calls = arg;

	(*calls)++;
	return p->splits == 1;
}

static void test_lookup_skips_paths_the_caller_cannot_run(void **state)
{
	struct mk_calib_choice ch;
	int calls = 0;

	(void)state;
	assert_int_equal(
		mk_calib_gemm_choose(&lookup_cal, 128, 4096, 4096, 1, no_splits, &calls, &ch), 0);
	assert_int_equal(ch.engine, 0); /* both engine paths split */
	assert_int_equal(calls, 2);
	assert_int_equal(
		mk_calib_gemm_choose(&lookup_cal, 4096, 4096, 4096, 1, no_splits, &calls, &ch), 0);
	assert_int_equal(ch.engine, 1);
	assert_int_equal(ch.bm, 128);
	assert_int_equal(ch.bn, 256);
}

/* Measured static splits: the nearest M of the same op and layout, scaled to the SM share. */
static void test_split_records(void **state)
{
	struct mk_calib c;
	int comm[3];

	(void)state;
	parse_ok(HEADER "split gemm_allreduce 1 2 2048 66 4 0 0\n"
			"split gemm_allreduce 1 2 16384 66 2 0 0\n"
			"split gemm_allreduce 2 2 2048 33 0 1 1\n",
		 &c);
	assert_int_equal(c.nsplit, 3);
	assert_int_equal(mk_calib_split_get(&c, 0, 1, 2, 3000, 66, comm), 0);
	assert_int_equal(comm[0], 4); /* 3000 is nearer 2048 than 16384 */
	assert_int_equal(comm[1], 0);
	assert_int_equal(mk_calib_split_get(&c, 0, 1, 2, 12000, 132, comm), 0);
	assert_int_equal(comm[0], 4); /* 2 of 66, on 132 SMs */
	assert_int_equal(mk_calib_split_get(&c, 0, 2, 2, 1, 8, comm), 0);
	assert_int_equal(comm[1], 1); /* 0.24 rounds to 0: a measured role keeps one CTA */
	assert_int_equal(comm[2], 1);
	assert_int_equal(comm[0], 0);
	/* another layout or op was not measured */
	assert_int_equal(mk_calib_split_get(&c, 0, 2, 1, 2048, 66, comm), -ENOENT);
	assert_int_equal(mk_calib_split_get(&c, 1, 1, 2, 2048, 66, comm), -ENOENT);
	mk_calib_free(&c);
}

/*
 * With the device's SMs known, a split measured with ranks sharing the GPU holds for that share
 * alone (the emulation's 4 ranks of 33 SMs must not give a rank of a real cluster 32 CTAs per
 * role); one measured on the whole GPU is scaled to any share.
 */
static void test_split_records_of_a_shared_gpu(void **state)
{
	struct mk_calib c;
	int comm[3];

	(void)state;
	parse_ok(HEADER "device 132 NVIDIA H200\n"
			"split gemm_allreduce 2 2 4096 33 8 8 8\n"
			"split gemm_allreduce 1 2 4096 66 2 0 2\n"
			"split gemm_allreduce 1 8 4096 132 16 0 8\n",
		 &c);
	assert_int_equal(mk_calib_split_get(&c, 0, 2, 2, 4096, 33, comm), 0);
	assert_int_equal(comm[0], 8);
	assert_int_equal(comm[2], 8);
	assert_int_equal(mk_calib_split_get(&c, 0, 2, 2, 4096, 132, comm), -ENOENT);
	assert_int_equal(mk_calib_split_get(&c, 0, 2, 2, 4096, 66, comm), -ENOENT);
	assert_int_equal(mk_calib_split_get(&c, 0, 1, 2, 2048, 66, comm), 0);
	assert_int_equal(comm[0], 2);
	assert_int_equal(mk_calib_split_get(&c, 0, 1, 2, 2048, 132, comm), -ENOENT);
	/* the whole GPU's: scaled */
	assert_int_equal(mk_calib_split_get(&c, 0, 1, 8, 4096, 66, comm), 0);
	assert_int_equal(comm[0], 8);
	assert_int_equal(comm[2], 4);
	mk_calib_free(&c);
}

/* Measured collectives: interpolated in log2(bytes), floors and bandwidth beyond the ends. */
static void test_coll_records(void **state)
{
	struct mk_calib c;

	(void)state;
	parse_ok(HEADER "coll allreduce nccl 1 2 1024 10\n"
			"coll allreduce nccl 1 2 4096 30\n"
			"coll allreduce nccl 1 2 1048576 100\n"
			"coll allreduce oneshot 1 2 1024 4\n"
			"coll allreduce fused 1 2 1024 7\n",
		 &c);
	assert_int_equal(c.ncoll, 5);
	assert_true(fabs(mk_calib_coll_us(&c, 4, MK_CALIB_FUSED, 1, 2, 512) - 7) < 1e-9);
	/* exact, between (2048: halfway in log2 from 1024 to 4096), below, above */
	assert_true(fabs(mk_calib_coll_us(&c, 4, MK_CALIB_NCCL, 1, 2, 4096) - 30) < 1e-9);
	assert_true(fabs(mk_calib_coll_us(&c, 4, MK_CALIB_NCCL, 1, 2, 2048) - 20) < 1e-9);
	assert_true(fabs(mk_calib_coll_us(&c, 4, MK_CALIB_NCCL, 1, 2, 16) - 10) < 1e-9);
	assert_true(fabs(mk_calib_coll_us(&c, 4, MK_CALIB_NCCL, 1, 2, 2097152) - 200) < 1e-9);
	/* the other implementation and other layouts are apart */
	assert_true(fabs(mk_calib_coll_us(&c, 4, MK_CALIB_ONESHOT, 1, 2, 4096) - 16) < 1e-9);
	assert_true(mk_calib_coll_us(&c, 4, MK_CALIB_NCCL, 2, 2, 4096) < 0);
	assert_true(mk_calib_coll_us(&c, 2, MK_CALIB_NCCL, 1, 2, 4096) < 0);
	mk_calib_free(&c);
}

static void test_time_estimate_scales_from_the_class(void **state)
{
	(void)state;
	/* the class's best time */
	assert_true(fabs(mk_calib_gemm_us(&lookup_cal, 128, 4096, 4096, 1) - 17) < 1e-6);
	/* N x 0.75 */
	assert_true(fabs(mk_calib_gemm_us(&lookup_cal, 128, 3072, 4096, 1) - 12.75) < 1e-6);
	/* M inside the bucket: the bucket's time; above the largest: scaled by M */
	assert_true(fabs(mk_calib_gemm_us(&lookup_cal, 100, 4096, 4096, 1) - 17) < 1e-6);
	assert_true(fabs(mk_calib_gemm_us(&lookup_cal, 8192, 4096, 4096, 1) - 380) < 1e-6);
	assert_true(mk_calib_gemm_us(&lookup_cal, 2, 4096, 4096, 1) < 0);
}

/* cuBLAS has two calls: the faster of cuBLASLt and cublasGemmEx at a class stands for cuBLAS, and
 * the engine must beat that one. */
static void test_choose_faster_cublas_call(void **state)
{
	struct mk_calib c;
	struct mk_calib_choice ch;

	(void)state;
	parse_ok(HEADER "gemm 1024 1024 1024 nk cublas 47.7\n"
			"gemm 1024 1024 1024 nk gemmex 35.0\n"
			"gemm 1024 1024 1024 nk e128x128s1 40.0\n"
			"gemm 4096 4096 4096 nk cublas 190\n"
			"gemm 4096 4096 4096 nk gemmex 210\n"
			"gemm 256 4096 4096 nk cublas 18.66\n"
			"gemm 256 4096 4096 nk gemmex 18.30\n",
		 &c);
	assert_int_equal(c.ngemm, 7);
	assert_int_equal(mk_calib_gemm_choose(&c, 1001, 1003, 1000, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.engine, 0); /* 40 us loses to gemmex's 35 */
	assert_int_equal(ch.gemmex, 1);
	assert_true(fabs(ch.us - 35.0) < 1e-6 && fabs(ch.cublas_us - 35.0) < 1e-6);
	assert_int_equal(mk_calib_gemm_choose(&c, 4096, 4096, 4096, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.engine, 0);
	assert_int_equal(ch.gemmex, 0); /* Lt is the faster call here */
	assert_true(fabs(ch.cublas_us - 190.0) < 1e-6);
	/* GemmEx 2 % ahead is within MK_CALIB_GEMMEX_MARGIN: Lt, whose plan is kept */
	assert_int_equal(mk_calib_gemm_choose(&c, 256, 4096, 4096, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.gemmex, 0);
	assert_int_equal(ch.unaligned, 0);
	assert_true(fabs(ch.cublas_us - 18.66) < 1e-6);
	/* the same class for rows that are not 16-byte aligned (N 4100, then K 4100): GemmEx */
	assert_int_equal(mk_calib_gemm_choose(&c, 256, 4100, 4096, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.gemmex, 1);
	assert_int_equal(ch.unaligned, 1);
	assert_int_equal(mk_calib_gemm_choose(&c, 256, 4096, 4100, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.gemmex, 1);
	/* no class near (M 1: the nearest is 256 rows): still GemmEx for unaligned rows, cuBLASLt
	 * otherwise */
	assert_int_equal(mk_calib_gemm_choose(&c, 1, 4096, 4100, 1, NULL, NULL, &ch), -ENOENT);
	assert_int_equal(ch.gemmex, 1);
	assert_int_equal(mk_calib_gemm_choose(&c, 1, 4096, 4096, 1, NULL, NULL, &ch), -ENOENT);
	assert_int_equal(ch.gemmex, 0);
	mk_calib_free(&c);
	/* the same path twice in one class is still a malformed file */
	reject(HEADER "gemm 1 1 1 nk gemmex 1\ngemm 1 1 1 nk gemmex 2\n", 0, "measured twice");
}

static int refuse_skinny(const struct mk_calib_gemm *g, void *arg)
{
	(void)arg;
	return g->engine != MK_CALIB_SKINNY;
}

/* `skinny` records: the skinny kernel is one more path of a class, chosen when it is the
 * fastest that the caller can run, else the next one. */
static void test_skinny_records(void **state)
{
	struct mk_calib c;
	struct mk_calib_choice ch;

	(void)state;
	parse_ok(HEADER "gemm 16 4096 4096 nk cublas 13.1\n"
			"gemm 16 4096 4096 nk gemmex 12.5\n"
			"gemm 16 4096 4096 nk skinny 9.0\n"
			"gemm 16 4096 4096 nk e64x128s1 11.0\n"
			"gemm 16 1024 1024 nk gemmex 7.0\n"
			"gemm 16 1024 1024 nk skinny 6.98\n",
		 &c);
	assert_int_equal(mk_calib_gemm_choose(&c, 7, 4000, 4096, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.engine, MK_CALIB_SKINNY);
	/* cuBLAS stands as Lt's 13.1: GemmEx's 12.5 is within MK_CALIB_GEMMEX_MARGIN */
	assert_true(fabs(ch.us - 9.0) < 1e-6 && fabs(ch.cublas_us - 13.1) < 1e-6);
	/* the caller cannot run it (alignment, K): the engine's 11 us beats cuBLAS */
	assert_int_equal(mk_calib_gemm_choose(&c, 7, 4000, 4096, 1, refuse_skinny, NULL, &ch), 0);
	assert_int_equal(ch.engine, 1);
	assert_int_equal(ch.bm, 64);
	/* within the noise margin of cuBLAS: cuBLAS */
	assert_int_equal(mk_calib_gemm_choose(&c, 16, 1024, 1024, 1, NULL, NULL, &ch), 0);
	assert_int_equal(ch.engine, 0);
	assert_int_equal(ch.gemmex, 1);
	mk_calib_free(&c);
	reject(HEADER "gemm 1 1 8 nk skinnyx 1\n", 2, "skinny");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_every_record),
		cmocka_unit_test(test_parse_rejects_malformed_records),
		cmocka_unit_test(test_builtin_table_is_valid),
		cmocka_unit_test(test_choose_faster_cublas_call),
		cmocka_unit_test(test_skinny_records),
		cmocka_unit_test(test_split_records),
		cmocka_unit_test(test_split_records_of_a_shared_gpu),
		cmocka_unit_test(test_coll_records),
		cmocka_unit_test_setup_teardown(test_env_file_used_when_valid, setup_env,
						teardown_env),
		cmocka_unit_test_setup_teardown(test_env_corrupt_file_warns_and_uses_builtin,
						setup_env, teardown_env),
		cmocka_unit_test_setup_teardown(test_lookup_m_bucket_is_the_next_measured_m,
						setup_grid, teardown_grid),
		cmocka_unit_test_setup_teardown(test_lookup_nearest_n_k_and_ties, setup_grid,
						teardown_grid),
		cmocka_unit_test_setup_teardown(test_lookup_noise_margin_and_missing_paths,
						setup_grid, teardown_grid),
		cmocka_unit_test_setup_teardown(test_lookup_layout_kept_apart, setup_grid,
						teardown_grid),
		cmocka_unit_test_setup_teardown(test_lookup_skips_paths_the_caller_cannot_run,
						setup_grid, teardown_grid),
		cmocka_unit_test_setup_teardown(test_time_estimate_scales_from_the_class,
						setup_grid, teardown_grid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
