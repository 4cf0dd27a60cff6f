// SPDX-License-Identifier: Apache-2.0
/* Parameter parsing and registry, backend selection, and the registration cache. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "fake_tp.h"
#include "mk/core_params.h"
#include "mk/mr_cache.h"
#include "mk/param.h"
#include "mk/transport.h"

MK_PARAM_INT(test_knob, "test", "MKERNEL_TEST_KNOB", 42, "a knob only the tests declare")

static int setup(void **state)
{
	fake_tp_reset();
	unsetenv("MKERNEL_TEST_KNOB");
	unsetenv("MKERNEL_MR_CACHE");
	unsetenv("MKERNEL_TRANSPORT");
	mk_param_reset_all();
	mk_transport_override(NULL);
	return 0;
}

static void test_param_parse_int_accepts_suffixes_and_words(void **state)
{
	int64_t v;

	assert_int_equal(mk_param_parse_int("12", &v), 0);
	assert_int_equal(v, 12);
	assert_int_equal(mk_param_parse_int("0x10", &v), 0);
	assert_int_equal(v, 16);
	assert_int_equal(mk_param_parse_int("128K", &v), 0);
	assert_int_equal(v, 131072);
	assert_int_equal(mk_param_parse_int("2MiB", &v), 0);
	assert_int_equal(v, 2 << 20);
	assert_int_equal(mk_param_parse_int("1g", &v), 0);
	assert_int_equal(v, 1 << 30);
	assert_int_equal(mk_param_parse_int("yes", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(mk_param_parse_int("off", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(mk_param_parse_int("-3", &v), 0);
	assert_int_equal(v, -3);
	assert_int_equal(mk_param_parse_int("", &v), -EINVAL);
	assert_int_equal(mk_param_parse_int("12x", &v), -EINVAL);
	assert_int_equal(mk_param_parse_int("K", &v), -EINVAL);
	assert_int_equal(mk_param_parse_int(NULL, &v), -EINVAL);
}

static void test_param_env_read_once_and_bad_value_keeps_default(void **state)
{
	setenv("MKERNEL_TEST_KNOB", "7", 1);
	assert_int_equal(mk_param_test_knob(), 7);
	setenv("MKERNEL_TEST_KNOB", "8", 1);
	assert_int_equal(mk_param_test_knob(), 7); /* cached */
	mk_param_reset_all();
	setenv("MKERNEL_TEST_KNOB", "eight", 1);
	assert_int_equal(mk_param_test_knob(), 42);
}

static void count_param(struct mk_param *p, void *arg)
{
	int *found = arg;

	if (strcmp(p->env, "MKERNEL_TEST_KNOB") == 0 || strcmp(p->env, "MKERNEL_TIMEOUT") == 0)
		(*found)++;
	assert_non_null(p->help);
	assert_true(strncmp(p->env, "MKERNEL_", 8) == 0);
}

static void test_param_registry_lists_every_knob(void **state)
{
	int found = 0;

	assert_true(mk_param_foreach(count_param, &found) >= 6);
	assert_int_equal(found, 2);
}

static void test_registry_unknown_backend_is_invalid(void **state)
{
	const struct mk_transport_ops *ops = NULL;

	setenv("MKERNEL_TRANSPORT", "carrier-pigeon", 1);
	mk_param_reset_all();
	assert_int_equal(mk_transport_get(&ops), -EINVAL);
	assert_null(ops);
	assert_int_equal(mk_transport_find("carrier-pigeon", &ops), -ENOENT);
	assert_non_null(mk_transport_built());
}

static void test_registry_override_returns_the_fake(void **state)
{
	const struct mk_transport_ops *ops = NULL;

	mk_transport_override(&fake_tp_ops);
	assert_int_equal(mk_transport_get(&ops), 0);
	assert_ptr_equal(ops, &fake_tp_ops);
	mk_transport_override(NULL);
}

static void test_mr_cache_hits_inside_a_registered_range(void **state)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	char *buf = aligned_alloc(4096, 4 * 4096);
	struct mk_mr *a, *b, *c;
	struct mk_mr_stats st0, st1;

	mk_mr_get_stats(&st0);
	assert_int_equal(mk_mr_get(&fake_tp_ops, 0, buf + 100, 3 * 4096, &attr, &a), 0);
	assert_true(a->start <= (uintptr_t)buf + 100 && a->end >= (uintptr_t)buf + 100 + 3 * 4096);
	assert_int_equal(a->start % 4096, 0);
	assert_int_equal(mk_mr_get(&fake_tp_ops, 0, buf + 4096, 64, &attr, &b), 0);
	assert_ptr_equal(a, b); /* sub-range: a hit, no new registration */
	attr.type = MK_PTR_CUDA;
	assert_int_equal(mk_mr_get(&fake_tp_ops, 0, buf + 4096, 64, &attr, &c), 0);
	assert_ptr_not_equal(a, c); /* other memory type: its own registration */
	mk_mr_get_stats(&st1);
	assert_int_equal(st1.hits - st0.hits, 1);
	assert_int_equal(st1.misses - st0.misses, 2);
	assert_int_equal(fake_tp_live_regs(), 2);
	assert_int_equal(mk_mr_put(b), 0);
	assert_int_equal(fake_tp_live_regs(), 2); /* still referenced by a */
	assert_int_equal(mk_mr_put(a), 0);
	assert_int_equal(mk_mr_put(c), 0);
	assert_int_equal(fake_tp_live_regs(), 0);
	assert_int_equal(mk_mr_put(a), -EINVAL); /* stale handle refused */
	free(buf);
}

static void test_mr_cache_off_and_failures(void **state)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	char *buf = aligned_alloc(4096, 4096);
	struct mk_mr *a, *b;

	setenv("MKERNEL_MR_CACHE", "0", 1);
	mk_param_reset_all();
	assert_int_equal(mk_mr_get(&fake_tp_ops, 0, buf, 64, &attr, &a), 0);
	assert_int_equal(mk_mr_get(&fake_tp_ops, 0, buf, 64, &attr, &b), 0);
	assert_ptr_not_equal(a, b);
	assert_int_equal(fake_tp_live_regs(), 2);
	mk_mr_put(a);
	mk_mr_put(b);
	fake_tp_faults.fail_reg = -ENOSPC;
	assert_int_equal(mk_mr_get(&fake_tp_ops, 0, buf, 64, &attr, &a), -ENOSPC);
	assert_int_equal(mk_mr_get(&fake_tp_ops, 0, NULL, 64, &attr, &a), -EINVAL);
	assert_int_equal(fake_tp_live_regs(), 0);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_param_parse_int_accepts_suffixes_and_words, setup),
		cmocka_unit_test_setup(test_param_env_read_once_and_bad_value_keeps_default, setup),
		cmocka_unit_test_setup(test_param_registry_lists_every_knob, setup),
		cmocka_unit_test_setup(test_registry_unknown_backend_is_invalid, setup),
		cmocka_unit_test_setup(test_registry_override_returns_the_fake, setup),
		cmocka_unit_test_setup(test_mr_cache_hits_inside_a_registered_range, setup),
		cmocka_unit_test_setup(test_mr_cache_off_and_failures, setup),
	};

	return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
