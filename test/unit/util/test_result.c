// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component util: the errno -> ncclResult_t table of both edges (mk/result.h). Every
 * errno the C library knows is walked through both mappings and compared with the contract
 * written out here, independently of the table: NCCL's plugin rules at the net edge (the
 * mapping the plugin has always had) and the public API's at the mk* edge.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "mk/result.h"

/* Past the last errno glibc names on Linux (EHWPOISON 133): unknown codes are walked too. */
#define RESULT_MAX_ERRNO 200

static ncclResult_t want_net(int e)
{
	switch (e) {
	case EINVAL:
	case EBADF:
	case ENOSPC:
		return ncclInternalError;
	case ENODEV:
	case EOPNOTSUPP:
	case EPROTONOSUPPORT:
	case EMSGSIZE:
		return ncclInvalidUsage;
	case ETIMEDOUT:
	case ECONNRESET:
	case EPIPE:
		return ncclRemoteError;
	default:
		return ncclSystemError;
	}
}

static ncclResult_t want_api(int e)
{
	switch (e) {
	case EINVAL:
	case EBADF:
		return ncclInvalidArgument;
	case ENOSPC:
	case ENODEV:
	case EOPNOTSUPP:
	case EPROTONOSUPPORT:
	case EMSGSIZE:
	case EPROTO:
	case ERANGE:
		return ncclInvalidUsage;
	case EIO:
	case ENOSYS:
		return ncclUnhandledCudaError;
	case ETIMEDOUT:
	case ECONNRESET:
	case EPIPE:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENOTCONN:
	case EREMOTEIO:
	case ECANCELED:
		return ncclRemoteError;
	default:
		return ncclSystemError;
	}
}

static void test_result_success_is_success_at_both_edges(void **state)
{
	(void)state;
	assert_int_equal(mk_result_net(0), ncclSuccess);
	assert_int_equal(mk_result_api(0), ncclSuccess);
}

/* Every errno, known or not, through both edges: the documented result, never success. */
static void test_result_every_errno_walks_both_edges(void **state)
{
	char what[96];

	(void)state;
	for (int e = 1; e <= RESULT_MAX_ERRNO; e++) {
		ncclResult_t net = mk_result_net(-e), api = mk_result_api(-e);

		snprintf(what, sizeof(what), "errno %d (%s)", e, strerror(e));
		if (net != want_net(e) || api != want_api(e))
			fail_msg("%s: net %d (want %d), api %d (want %d)", what, (int)net,
				 (int)want_net(e), (int)api, (int)want_api(e));
		/* NCCL checks its own arguments; the plugin never reports it. No CUDA in the
		 * plugin either. */
		assert_int_not_equal(net, ncclInvalidArgument);
		assert_int_not_equal(net, ncclUnhandledCudaError);
		assert_int_not_equal(net, ncclInProgress);
		assert_int_not_equal(api, ncclInProgress);
		assert_int_not_equal(net, ncclSuccess);
		assert_int_not_equal(api, ncclSuccess);
	}
}

/* Values that are not a negative errno are failures, never success. */
static void test_result_positive_and_extreme_values_are_system_errors(void **state)
{
	static const int odd[] = { 1, 5, INT_MAX, INT_MIN, -(RESULT_MAX_ERRNO + 1) };

	(void)state;
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		assert_int_equal(mk_result_net(odd[i]), ncclSystemError);
		assert_int_equal(mk_result_api(odd[i]), ncclSystemError);
	}
}

/* The cases each edge exists for, spelled out (a reader's summary of the walk above). */
static void test_result_edges_differ_where_documented(void **state)
{
	(void)state;
	/* A stale handle: NCCL's bug at the plugin edge, the application's at the API edge. */
	assert_int_equal(mk_result_net(-EBADF), ncclInternalError);
	assert_int_equal(mk_result_api(-EBADF), ncclInvalidArgument);
	/* A failed CUDA call inside libmkernel; an I/O error of the NIC inside the plugin. */
	assert_int_equal(mk_result_api(-EIO), ncclUnhandledCudaError);
	assert_int_equal(mk_result_net(-EIO), ncclSystemError);
	/* A dead peer is a remote error at both. */
	assert_int_equal(mk_result_net(-ETIMEDOUT), ncclRemoteError);
	assert_int_equal(mk_result_api(-ETIMEDOUT), ncclRemoteError);
	/* The symmetric heap ran out: a configuration limit, not a failed allocation. */
	assert_int_equal(mk_result_api(-ENOSPC), ncclInvalidUsage);
	assert_int_equal(mk_result_api(-ENOMEM), ncclSystemError);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_result_success_is_success_at_both_edges),
		cmocka_unit_test(test_result_every_errno_walks_both_edges),
		cmocka_unit_test(test_result_positive_and_extreme_values_are_system_errors),
		cmocka_unit_test(test_result_edges_differ_where_documented),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
