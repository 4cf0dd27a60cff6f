// SPDX-License-Identifier: Apache-2.0
/*
 * mkGroupedGemm: argument checks, the choice between the Hopper grouped GEMM and the portable
 * kernel (fused/gemm/grouped.h says why the fallback is not cuBLAS), and the one conversion
 * from negative errno to ncclResult_t with a WARN saying what failed and why.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#include "mkernel.h"
#include "fused/gemm/grouped.h"
#include "fused/gemm/grouped_sched.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/param.h"

MK_PARAM_DECLARE_INT(grouped_force_portable); /* fused/gemm/grouped_params.c */

static pthread_once_t grouped_api_once = PTHREAD_ONCE_INIT;

static void grouped_api_init(void)
{
	mk_log_set_sink(NULL);
}

static ncclResult_t grouped_invalid(const char *what)
{
	MK_WARN("mkGroupedGemm: %s; nothing launched", what);
	return ncclInvalidArgument;
}

/* NULL when the call is valid, else what is wrong (checked before any CUDA call). */
static const char *grouped_why_invalid(const void *a, const void *b, const void *c,
				       const int *offsets, int numExperts, size_t maxRows, size_t n,
				       size_t k, ncclDataType_t type, mkLayout_t bLayout)
{
	if (a == NULL || b == NULL || c == NULL || offsets == NULL)
		return "NULL a, b, c or offsets";
	if (numExperts < 1)
		return "numExperts must be >= 1";
	if (n == 0 || k == 0 || n > INT_MAX || k > INT_MAX || maxRows > INT_MAX)
		return "n and k must be in [1, INT_MAX] and maxRows in [0, INT_MAX]";
	if (type != ncclBfloat16)
		return "type must be ncclBfloat16";
	if (bLayout != mkLayoutRowMajorKN && bLayout != mkLayoutRowMajorNK)
		return "unknown B layout";
	if ((uintptr_t)a % 2 || (uintptr_t)b % 2 || (uintptr_t)c % 2 || (uintptr_t)offsets % 4)
		return "a, b and c must be 2-byte aligned and offsets 4-byte aligned";
	/* The portable kernel's tiles are the smaller ones: its bound is the larger. */
	if (mk_grouped_tile_bound((long long)maxRows, numExperts,
				  ((long long)n + MK_GROUPED_P_BN - 1) / MK_GROUPED_P_BN,
				  MK_GROUPED_P_BM, MK_GROUPED_MAX_TILES) < 0)
		return "too many tiles: (maxRows / 64 + numExperts) x n / 64 must stay below 2^30";
	return NULL;
}

/*
 * offsets must be readable by the GPU: device, managed or registered host memory. Not asked
 * while `stream` is being captured into a CUDA graph: a call the capture mode counts as unsafe
 * would invalidate the caller's capture.
 */
static int grouped_offsets_on_device(const int *offsets, cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	struct cudaPointerAttributes at;

	if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess)
		(void)cudaGetLastError();
	if (cap != cudaStreamCaptureStatusNone)
		return 1;
	if (cudaPointerGetAttributes(&at, offsets) != cudaSuccess) {
		(void)cudaGetLastError();
		return 1; /* cannot tell (no device): the launch reports the failure */
	}
	return at.type != cudaMemoryTypeUnregistered;
}

MK_API ncclResult_t mkGroupedGemm(const void *a, const void *b, void *c, const int *offsets,
				  int numExperts, size_t maxRows, size_t n, size_t k,
				  ncclDataType_t type, mkLayout_t bLayout, cudaStream_t stream)
{
	struct mk_grouped_launch l = { 0 };
	const char *why;
	int rc;

	pthread_once(&grouped_api_once, grouped_api_init);
	why = grouped_why_invalid(a, b, c, offsets, numExperts, maxRows, n, k, type, bLayout);
	if (why != NULL)
		return grouped_invalid(why);
	if (!grouped_offsets_on_device(offsets, stream))
		return grouped_invalid(
			"offsets is not memory the GPU can read (pageable host memory "
			"or no allocation): it must be a device array of numExperts + 1 "
			"int32");
	if (maxRows == 0)
		return ncclSuccess; /* no rows: every expert is empty */

	l.a = a;
	l.b = b;
	l.c = c;
	l.offsets = offsets;
	l.num_experts = numExperts;
	l.max_rows = (int)maxRows;
	l.n = (int)n;
	l.k = (int)k;
	l.b_layout = bLayout == mkLayoutRowMajorNK ? MK_GEMM_B_NK : MK_GEMM_B_KN;

	why = NULL;
	if (mk_param_grouped_force_portable())
		why = "MKERNEL_GROUPED_FORCE_PORTABLE=1";
	else if (!mk_gemm_device_ok())
		why = "device is not sm_90";
	else if (mk_grouped_check(&l, &why) == 0) {
		rc = mk_grouped_run(&l, stream);
		if (rc == 0)
			return ncclSuccess;
		if (rc != -ENOSYS) {
			MK_WARN("mkGroupedGemm(experts %d, max rows %zu, n %zu, k %zu): launch "
				"failed: %s",
				numExperts, maxRows, n, k, mk_strerror(rc));
			return ncclUnhandledCudaError;
		}
		why = "no cuTensorMapEncodeTiled in the driver";
	}
	MK_INFO(MK_SUBSYS_INIT,
		"mkGroupedGemm(experts %d, max rows %zu, n %zu, k %zu): portable kernel: %s",
		numExperts, maxRows, n, k, why);
	rc = mk_grouped_portable_run(&l, stream);
	if (rc) {
		MK_WARN("mkGroupedGemm(experts %d, max rows %zu, n %zu, k %zu): portable kernel "
			"failed: %s",
			numExperts, maxRows, n, k, mk_strerror(rc));
		return rc == -EINVAL ? ncclInvalidArgument : ncclUnhandledCudaError;
	}
	return ncclSuccess;
}
