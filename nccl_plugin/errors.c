// SPDX-License-Identifier: Apache-2.0
/*
 * The single conversion from mkernel's negative errno to ncclResult_t, following the error
 * classes of NCCL's plugin documentation: NCCL misused us -> internal error; configuration or
 * usage problem -> invalid usage; the peer went away -> remote error; everything else (OS, NIC,
 * library) -> system error. ncclInvalidArgument is never returned: NCCL checks arguments itself.
 */
#include <errno.h>

#include "net.h"

ncclResult_t mk_err_to_nccl(int rc)
{
	switch (rc) {
	case 0:
		return ncclSuccess;
	case -EINVAL:
	case -EBADF:  /* NULL, stale or foreign comm / request / handle */
	case -ENOSPC: /* more outstanding requests than NCCL may issue */
		return ncclInternalError;
	case -ENODEV:	       /* no backend with a device */
	case -EOPNOTSUPP:      /* the device cannot register this pointer type */
	case -EPROTONOSUPPORT: /* MKERNEL_TRANSPORT names no backend built in */
	case -EMSGSIZE:	       /* send larger than the posted receive */
		return ncclInvalidUsage;
	case -ETIMEDOUT: /* the peer stopped answering within MKERNEL_TIMEOUT */
	case -ECONNRESET:
	case -EPIPE:
		return ncclRemoteError;
	default:
		return ncclSystemError;
	}
}
