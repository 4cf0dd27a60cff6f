// SPDX-License-Identifier: Apache-2.0
/*
 * One attention call on the right kernel: the Hopper kernel where it can run (compute capability
 * 9.0, q, k, v 16-byte aligned for TMA, o 4-byte aligned, MKERNEL_ATTN_FORCE_PORTABLE unset,
 * the tensor-map encoder found), the portable kernel otherwise. Shared by mkAttention and the
 * ops that run the engine one job at a time.
 */
#include <errno.h>
#include <stdint.h>

#include "attn.h"
#include "mk/param.h"

MK_PARAM_DECLARE_INT(attn_force_portable); /* attn_params.c */

static const char *attn_why_portable(const struct mk_attn_args *a)
{
	const uintptr_t in = (uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v;

	if (mk_param_attn_force_portable())
		return "MKERNEL_ATTN_FORCE_PORTABLE=1";
	if (!mk_attn_device_ok())
		return "the device is not sm_90";
	if ((in & 15) || ((uintptr_t)a->o & 3))
		return "q, k, v not 16-byte aligned or o not 4-byte aligned";
	return NULL;
}

int mk_attn_run(const struct mk_attn_args *a, cudaStream_t stream, const char **portable_why)
{
	const char *why = attn_why_portable(a);
	int rc;

	if (why == NULL) {
		rc = mk_attn_run_hopper(a, 0, stream);
		if (rc != -ENOSYS) {
			if (portable_why != NULL)
				*portable_why = NULL;
			return rc;
		}
		why = "no cuTensorMapEncodeTiled in the driver";
	}
	if (portable_why != NULL)
		*portable_why = why;
	return mk_attn_run_portable(a, stream);
}
