// SPDX-License-Identifier: Apache-2.0
/*
 * The built libnccl-net-mkernel.so as NCCL sees it after dlopen: every exported net table has
 * the documented size, name and wiring (required members set, device-offload members NULL),
 * internal symbols stay hidden, and the first calls behave before and without a backend.
 * Usage: test-net-abi path/to/libnccl-net-mkernel.so (or MKERNEL_TEST_PLUGIN).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mk_nccl/net_v10.h"
#include "mk_nccl/net_v11.h"
#include "mk_nccl/net_v8.h"
#include "mk_nccl/net_v9.h"

static const char *plugin_path;
static void *plugin;

static int group_setup(void **state)
{
	/* No backend may be picked up from the host: this test checks the surface only. */
	setenv("MKERNEL_TRANSPORT", "no-such-backend", 1);
	plugin = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
	if (plugin == NULL)
		fprintf(stderr, "dlopen(%s): %s\n", plugin_path, dlerror());
	return plugin == NULL ? -1 : 0;
}

static int group_teardown(void **state)
{
	return dlclose(plugin) == 0 ? 0 : -1;
}

/* Looks up a table and checks the size of the exported object. */
static void *table(const char *sym, size_t size)
{
	const ElfW(Sym) *es = NULL;
	Dl_info info;
	void *p = dlsym(plugin, sym);

	assert_non_null(p);
	assert_int_not_equal(dladdr1(p, &info, (void **)&es, RTLD_DL_SYMENT), 0);
	assert_non_null(es);
	assert_int_equal(es->st_size, size);
	assert_string_equal(info.dli_sname, sym);
	return p;
}

/* The members every version has, in the same order from name to closeListen. */
#define CHECK_COMMON(t)                                                                            \
	do {                                                                                       \
		assert_string_equal((t)->name, "mkernel");                                         \
		assert_non_null((t)->init);                                                        \
		assert_non_null((t)->devices);                                                     \
		assert_non_null((t)->getProperties);                                               \
		assert_non_null((t)->listen);                                                      \
		assert_non_null((t)->connect);                                                     \
		assert_non_null((t)->accept);                                                      \
		assert_non_null((t)->regMr);                                                       \
		assert_non_null((t)->regMrDmaBuf);                                                 \
		assert_non_null((t)->deregMr);                                                     \
		assert_non_null((t)->isend);                                                       \
		assert_non_null((t)->irecv);                                                       \
		assert_non_null((t)->iflush);                                                      \
		assert_non_null((t)->test);                                                        \
		assert_non_null((t)->closeSend);                                                   \
		assert_non_null((t)->closeRecv);                                                   \
		assert_non_null((t)->closeListen);                                                 \
		assert_null((t)->getDeviceMr); /* HOST device type: no offload */                  \
		assert_null((t)->irecvConsumed);                                                   \
	} while (0)

static void test_abi_v11_table_wired(void **state)
{
	struct mk_nccl_net_v11 *t = table("ncclNetPlugin_v11", 176);

	CHECK_COMMON(t);
	assert_null(t->makeVDevice); /* physical devices only */
	assert_non_null(t->finalize);
	assert_non_null(t->setNetAttr);
}

static void test_abi_v10_table_wired(void **state)
{
	struct mk_nccl_net_v10 *t = table("ncclNetPlugin_v10", 160);

	CHECK_COMMON(t);
	assert_null(t->makeVDevice);
}

static void test_abi_v9_table_wired(void **state)
{
	struct mk_nccl_net_v9 *t = table("ncclNetPlugin_v9", 160);

	CHECK_COMMON(t);
	assert_null(t->makeVDevice);
}

static void test_abi_v8_table_wired(void **state)
{
	struct mk_nccl_net_v8 *t = table("ncclNetPlugin_v8", 152);

	CHECK_COMMON(t);
}

static void test_abi_versions_share_one_implementation(void **state)
{
	struct mk_nccl_net_v11 *t11 = dlsym(plugin, "ncclNetPlugin_v11");
	struct mk_nccl_net_v10 *t10 = dlsym(plugin, "ncclNetPlugin_v10");
	struct mk_nccl_net_v9 *t9 = dlsym(plugin, "ncclNetPlugin_v9");
	struct mk_nccl_net_v8 *t8 = dlsym(plugin, "ncclNetPlugin_v8");

	assert_non_null(t11);
	assert_non_null(t10);
	assert_non_null(t9);
	assert_non_null(t8);
	/* members whose signature did not change are the v11 functions themselves */
	assert_ptr_equal(t10->test, t11->test);
	assert_ptr_equal(t9->test, t11->test);
	assert_ptr_equal(t8->test, t11->test);
	assert_ptr_equal(t8->accept, t11->accept);
	assert_ptr_equal(t10->isend, t11->isend);
	assert_ptr_equal(t9->devices, t11->devices);
}

static void test_abi_internal_symbols_hidden(void **state)
{
	static const char *const hidden[] = {
		"mk_net11_init", "mk_result_net", "mk_rdv_isend", "mk_transport_get",
		"mk_log_sink",	 "mk_param_dump", "mk_mr_get",
	};

	for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++)
		assert_null(dlsym(plugin, hidden[i]));
	/* the tuner tables come as a pair or not at all */
	assert_int_equal(dlsym(plugin, "ncclTunerPlugin_v5") == NULL,
			 dlsym(plugin, "ncclTunerPlugin_v4") == NULL);
}

static void test_abi_calls_before_and_without_backend_fail_cleanly(void **state)
{
	struct mk_nccl_net_v11 *t = dlsym(plugin, "ncclNetPlugin_v11");
	struct mk_nccl_net_v8 *t8 = dlsym(plugin, "ncclNetPlugin_v8");
	struct mk_nccl_net_props_v11 props;
	void *ctx = (void *)0x1;
	int n = -1;

	assert_non_null(t);
	assert_int_equal(t->devices(&n), ncclInternalError); /* before any init */
	assert_int_equal(n, -1);
	assert_int_equal(t->getProperties(0, &props), ncclInternalError);
	/* MKERNEL_TRANSPORT names no backend: configuration error, ctx left NULL */
	assert_int_equal(t->init(&ctx, 1, NULL, NULL, NULL), ncclInvalidUsage);
	assert_null(ctx);
	assert_int_equal(t->finalize(ctx), ncclSuccess);
	assert_int_equal(t8->init(NULL), ncclInvalidUsage);
	assert_int_equal(t->listen(NULL, 0, &props, &ctx), ncclInternalError);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_abi_v11_table_wired),
		cmocka_unit_test(test_abi_v10_table_wired),
		cmocka_unit_test(test_abi_v9_table_wired),
		cmocka_unit_test(test_abi_v8_table_wired),
		cmocka_unit_test(test_abi_versions_share_one_implementation),
		cmocka_unit_test(test_abi_internal_symbols_hidden),
		cmocka_unit_test(test_abi_calls_before_and_without_backend_fail_cleanly),
	};

	plugin_path = argc > 1 ? argv[1] : getenv("MKERNEL_TEST_PLUGIN");
	if (plugin_path == NULL) {
		fprintf(stderr, "usage: %s path/to/libnccl-net-mkernel.so\n", argv[0]);
		return 1;
	}
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
