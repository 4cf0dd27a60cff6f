// SPDX-License-Identifier: Apache-2.0
/*
 * mkAttention: argument checks, the choice between the Hopper kernel and the portable one, and a
 * WARN saying what failed and why before the one conversion to ncclResult_t (mk_result_api).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "mkernel.h"
#include "fused/attn/attn.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/param.h"
#include "mk/result.h"

MK_PARAM_DECLARE_INT(attn_force_portable); /* fused/attn/attn_params.c */

static pthread_once_t attn_api_once = PTHREAD_ONCE_INIT;

static void attn_api_init(void)
{
	mk_log_set_sink(NULL);
}

/* The Hopper kernel reads q, k, v with TMA (16-byte aligned bases) and stores bf16 pairs. */
static int attn_api_hopper_ok(const struct mk_attn_args *a)
{
	uintptr_t in = (uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v;

	if (mk_param_attn_force_portable())
		return 0;
	if (!mk_attn_device_ok()) {
		MK_INFO(MK_SUBSYS_INIT,
			"mkAttention: device is not sm_90, using the portable kernel");
		return 0;
	}
	if ((in & 15) || ((uintptr_t)a->o & 3)) {
		MK_INFO(MK_SUBSYS_INIT,
			"mkAttention: q, k, v not 16-byte aligned or o not 4-byte aligned, using "
			"the portable kernel");
		return 0;
	}
	return 1;
}

MK_API ncclResult_t mkAttention(const void *q, const void *k, const void *v, void *o, float *lse,
				int batch, int headsQ, int headsKv, int seqQ, int seqKv,
				int headDim, int causal, cudaStream_t stream)
{
	struct mk_attn_args a;
	const char *why = NULL;
	int rc;

	pthread_once(&attn_api_once, attn_api_init);
	if (q == NULL || k == NULL || v == NULL || o == NULL) {
		MK_WARN("mkAttention: NULL pointer (q %p, k %p, v %p, o %p)", q, k, v, o);
		return mk_result_api(-EINVAL);
	}
	if (causal != 0 && causal != 1) {
		MK_WARN("mkAttention: causal must be 0 or 1, not %d", causal);
		return mk_result_api(-EINVAL);
	}
	if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)o) & 1 ||
	    ((uintptr_t)lse & 3)) {
		MK_WARN("mkAttention: misaligned buffer (q %p, k %p, v %p, o %p: bf16 needs 2 "
			"bytes; "
			"lse %p: fp32 needs 4)",
			q, k, v, o, (void *)lse);
		return mk_result_api(-EINVAL);
	}
	mk_attn_args_init(&a, q, k, v, o, lse, batch, headsQ, headsKv, seqQ, seqKv, headDim,
			  causal);
	if (mk_attn_plan(&a, MK_ATTN_BM(headDim), &why)) {
		MK_WARN("mkAttention(B %d, Hq %d, Hkv %d, Sq %d, Skv %d, D %d): %s", batch, headsQ,
			headsKv, seqQ, seqKv, headDim, why);
		return mk_result_api(-EINVAL);
	}

	if (attn_api_hopper_ok(&a)) {
		rc = mk_attn_run_hopper(&a, 0, stream);
		if (rc == 0)
			return ncclSuccess;
		if (rc != -ENOSYS) {
			MK_WARN("mkAttention(B %d, Hq %d, Sq %d, Skv %d, D %d): Hopper kernel "
				"launch "
				"failed: %s",
				batch, headsQ, seqQ, seqKv, headDim, mk_strerror(rc));
			return mk_result_api(rc);
		}
		MK_INFO(MK_SUBSYS_INIT,
			"mkAttention: no cuTensorMapEncodeTiled, using the portable kernel");
	}
	rc = mk_attn_run_portable(&a, stream);
	if (rc) {
		MK_WARN("mkAttention(B %d, Hq %d, Sq %d, Skv %d, D %d): portable kernel launch "
			"failed: %s",
			batch, headsQ, seqQ, seqKv, headDim, mk_strerror(rc));
		return mk_result_api(rc);
	}
	return ncclSuccess;
}
