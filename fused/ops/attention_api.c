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
#include "mk/result.h"

static pthread_once_t attn_api_once = PTHREAD_ONCE_INIT;

static void attn_api_init(void)
{
	mk_log_set_sink(NULL);
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
		MK_WARN("mkAttention: misaligned buffer (q %p, k %p, v %p, o %p: "
			"bf16 needs 2 bytes; lse %p: fp32 needs 4)",
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

	rc = mk_attn_run(&a, stream, &why);
	if (why != NULL)
		MK_INFO(MK_SUBSYS_INIT, "mkAttention: the portable kernel runs: %s", why);
	if (rc) {
		MK_WARN("mkAttention(B %d, Hq %d, Sq %d, Skv %d, D %d): kernel launch failed: %s",
			batch, headsQ, seqQ, seqKv, headDim, mk_strerror(rc));
		return mk_result_api(rc);
	}
	return ncclSuccess;
}
