// SPDX-License-Identifier: Apache-2.0
/*
 * Public mk* functions: argument checks, the choice between mkernel's engine and the unfused
 * fallback, and a WARN saying what failed and why before the errno becomes an ncclResult_t
 * (mk_result_api).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>

#include "mkernel.h"
#include "fused/ops/gemm_fallback.h"
#include "fused/gemm/gemm.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/param.h"
#include "mk/result.h"

MK_PARAM_DECLARE_INT(gemm_force_fallback); /* fused/gemm/gemm_params.c */

static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_init(void)
{
	mk_log_set_sink(NULL);
}

/* 1 if mkernel's engine takes this call, 0 for the fallback; logs why at INFO. */
static int api_gemm_use_engine(const void *a, const void *b, const struct mk_gemm_args *args)
{
	const char *why = NULL;

	if (mk_param_gemm_force_fallback())
		return 0;
	if (!mk_gemm_device_ok()) {
		MK_INFO(MK_SUBSYS_INIT, "mkGemm: device is not sm_90, using cuBLAS");
		return 0;
	}
	if (mk_gemm_check(a, b, args, &why)) {
		MK_INFO(MK_SUBSYS_INIT, "mkGemm(m %d, n %d, k %d): %s, using cuBLAS", args->m,
			args->n, args->k, why);
		return 0;
	}
	return 1;
}

MK_API ncclResult_t mkGemm(const void *a, const void *b, void *c, size_t m, size_t n, size_t k,
			   ncclDataType_t type, mkLayout_t bLayout, cudaStream_t stream)
{
	struct mk_gemm_launch l = { 0 };
	int rc, b_nk = bLayout == mkLayoutRowMajorNK;

	pthread_once(&api_once, api_init);
	if (a == NULL || b == NULL || c == NULL) {
		MK_WARN("mkGemm: NULL pointer (a %p, b %p, c %p)", a, b, c);
		return mk_result_api(-EINVAL);
	}
	if (m == 0 || n == 0 || k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX) {
		MK_WARN("mkGemm: sizes m %zu, n %zu, k %zu must be in 1 .. %d", m, n, k, INT_MAX);
		return mk_result_api(-EINVAL);
	}
	if (type != ncclBfloat16) {
		MK_WARN("mkGemm: data type %d is not supported (only ncclBfloat16)", (int)type);
		return mk_result_api(-EINVAL);
	}
	if (bLayout != mkLayoutRowMajorKN && bLayout != mkLayoutRowMajorNK) {
		MK_WARN("mkGemm: unknown B layout %d", (int)bLayout);
		return mk_result_api(-EINVAL);
	}

	l.a = a;
	l.b = b;
	mk_gemm_args_init(&l.args, (int)m, (int)n, (int)k, b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN, c);
	if (api_gemm_use_engine(a, b, &l.args)) {
		rc = mk_gemm_run(&l, stream);
		if (rc == 0)
			return ncclSuccess;
		if (rc != -ENOSYS) {
			MK_WARN("mkGemm(m %zu, n %zu, k %zu): engine launch failed: %s", m, n, k,
				mk_strerror(rc));
			return mk_result_api(rc);
		}
		MK_INFO(MK_SUBSYS_INIT, "mkGemm: no cuTensorMapEncodeTiled, using cuBLAS");
	}
	rc = mk_fallback_gemm_bf16(a, b, c, (int)m, (int)n, (int)k, b_nk, stream);
	if (rc) {
		MK_WARN("mkGemm(m %zu, n %zu, k %zu): cuBLAS fallback failed: %s", m, n, k,
			mk_strerror(rc));
		return mk_result_api(rc);
	}
	return ncclSuccess;
}
