// SPDX-License-Identifier: Apache-2.0
/*
 * The errno -> ncclResult_t table of both edges (include/mk/result.h). One row per errno that
 * mkernel gives a meaning; everything else is ncclSystemError at both edges.
 *
 * Plugin edge (net): NCCL's plugin rules. NCCL misusing the plugin (a NULL, stale or foreign
 * object, more requests than it may issue) is ncclInternalError; a configuration or usage
 * problem (no device, a pointer kind the NIC cannot register, an unknown backend, a send larger
 * than the receive) is ncclInvalidUsage; a peer that stopped answering or closed the connection
 * is ncclRemoteError. ncclInvalidArgument is never returned.
 *
 * Public API edge (api): the application called mkernel. Its bad argument is
 * ncclInvalidArgument; a limit of the configuration or calls the ranks did not make alike are
 * ncclInvalidUsage; a failed CUDA, cuBLAS or NCCL call is ncclUnhandledCudaError; a lost peer is
 * ncclRemoteError (also as the comm's asynchronous error).
 */
#include <errno.h>
#include <stddef.h>

#include "mk/compiler.h"
#include "mk/result.h"

struct result_row {
	int err; /* positive errno */
	ncclResult_t net;
	ncclResult_t api;
};

static const struct result_row result_rows[] = {
	/* net: NULL, stale or foreign comm / request / handle from NCCL.
	 * api: NULL or misaligned pointer, bad size, type or layout, not a live comm, not from
	 * mkMemAlloc. */
	{ EINVAL, ncclInternalError, ncclInvalidArgument },
	{ EBADF, ncclInternalError, ncclInvalidArgument },
	/* net: more outstanding requests than NCCL may issue, or no room for another fused device.
	 * api: the symmetric heap is exhausted (MKERNEL_SYMM_HEAP, mkConfig_t.heapBytes). */
	{ ENOSPC, ncclInternalError, ncclInvalidUsage },
	/* Both: no backend with a device, or none that can do what was asked. */
	{ ENODEV, ncclInvalidUsage, ncclInvalidUsage },
	/* Both: the device cannot register this pointer kind, or fuse devices. */
	{ EOPNOTSUPP, ncclInvalidUsage, ncclInvalidUsage },
	/* Both: MKERNEL_TRANSPORT names no backend built in. */
	{ EPROTONOSUPPORT, ncclInvalidUsage, ncclInvalidUsage },
	/* Both: a send larger than the posted receive. */
	{ EMSGSIZE, ncclInvalidUsage, ncclInvalidUsage },
	/* api: a value a kernel found outside its range, reported through the comm's
	 * asynchronous error (an MoE expert id outside [-1, E), a receive count above maxRecv):
	 * the call was made, so it is a usage error of the comm, not an argument refused at once.
	 * net: never produced there (system). */
	{ ERANGE, ncclSystemError, ncclInvalidUsage },
	/* net: a malformed connection blob or immediate (a peer of another build: system).
	 * api: the ranks disagree (mkMemAlloc sizes, collective calls not made alike). */
	{ EPROTO, ncclSystemError, ncclInvalidUsage },
	/* net: an I/O error of the NIC or its library.
	 * api: a CUDA, cuBLAS or NCCL call failed (libmkernel's helpers return -EIO after a WARN
	 * that names the call). */
	{ EIO, ncclSystemError, ncclUnhandledCudaError },
	/* api: the CUDA driver lacks an entry point mkernel needs (cuTensorMapEncodeTiled). */
	{ ENOSYS, ncclSystemError, ncclUnhandledCudaError },
	/* Both: the peer stopped answering within MKERNEL_TIMEOUT, or closed the connection. */
	{ ETIMEDOUT, ncclRemoteError, ncclRemoteError },
	{ ECONNRESET, ncclRemoteError, ncclRemoteError },
	{ EPIPE, ncclRemoteError, ncclRemoteError },
	/* api: other signs of a lost peer that reach the comm's asynchronous error through the
	 * proxy (the plugin edge reports these as system errors, as it always has). */
	{ ECONNABORTED, ncclSystemError, ncclRemoteError },
	{ EHOSTUNREACH, ncclSystemError, ncclRemoteError },
	{ ENOTCONN, ncclSystemError, ncclRemoteError },
	{ EREMOTEIO, ncclSystemError, ncclRemoteError },
	{ ECANCELED, ncclSystemError, ncclRemoteError },
	/* Both: out of host or device memory. */
	{ ENOMEM, ncclSystemError, ncclSystemError },
};

/* Everything else, at both edges: an OS, NIC or library failure the WARN before it names. */
static const struct result_row result_other = { 0, ncclSystemError, ncclSystemError };

static const struct result_row *result_row(int rc)
{
	for (size_t i = 0; i < MK_ARRAY_SIZE(result_rows); i++) {
		if (rc == -result_rows[i].err)
			return &result_rows[i];
	}
	return &result_other;
}

ncclResult_t mk_result_net(int rc)
{
	return rc == 0 ? ncclSuccess : result_row(rc)->net;
}

ncclResult_t mk_result_api(int rc)
{
	return rc == 0 ? ncclSuccess : result_row(rc)->api;
}
