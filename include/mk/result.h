/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inside mkernel every function returns 0 or a negative errno. This is the one place that turns
 * such a result into an ncclResult_t, once, at one of the two edges where mkernel answers in
 * NCCL's terms (the table and a comment per mapping are in util/result.c):
 *
 *   mk_result_net()  the NCCL plugin edge (nccl_plugin/, tuner/tuner_abi.c). NCCL's plugin rules
 *                    fix the meanings: NCCL misused the plugin -> ncclInternalError, a
 *                    configuration or usage problem -> ncclInvalidUsage, the peer went away ->
 *                    ncclRemoteError, anything else -> ncclSystemError. Never
 *                    ncclInvalidArgument (NCCL checks its own arguments).
 *   mk_result_api()  the public mk* API of libmkernel.so (include/mkernel.h). The caller is the
 *                    application: its bad argument is ncclInvalidArgument, a failed CUDA, cuBLAS
 *                    or NCCL call ncclUnhandledCudaError.
 *
 * The same errno gives the same result at the same edge. Callers WARN what failed and why before
 * converting; these functions log nothing.
 *
 * ncclResult_t comes from the installed <nccl.h> when the build found it; otherwise NCCL's
 * documented values are declared here, so the plugin builds on hosts without the toolkit.
 */
#ifndef MK_RESULT_H
#define MK_RESULT_H

#include "mk_config.h"

#if MK_HAVE_NCCL_H
#include <nccl.h>
#else
typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclNumResults = 8
} ncclResult_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* rc: 0 or -errno. A positive rc is not a result mkernel produces: ncclSystemError. */
ncclResult_t mk_result_net(int rc);
ncclResult_t mk_result_api(int rc);

#ifdef __cplusplus
}
#endif

#endif /* MK_RESULT_H */
