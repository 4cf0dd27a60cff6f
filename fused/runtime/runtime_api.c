// SPDX-License-Identifier: Apache-2.0
/*
 * Public edge of the device runtime: mkCommInit / Destroy / Abort / GetAsyncError, mkMemAlloc /
 * mkMemFree. Argument checks here; internal -errno converted to ncclResult_t once
 * (mk_result_api), with a WARN saying what failed. The ops' functions are in fused/ops/.
 */
#define MK_LOG_PREFIX "RUNTIME/mkernel"

#include <errno.h>
#include <stdlib.h>

#include "fused/runtime/comm.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/result.h"

ncclResult_t mk_api_result(int rc, const char *what)
{
	if (rc == 0)
		return ncclSuccess;
	MK_WARN("%s failed: %s", what, mk_strerror(rc));
	return mk_result_api(rc);
}

MK_API ncclResult_t mkCommInit(ncclComm_t nccl, const mkConfig_t *config, mkComm_t *comm)
{
	if (nccl == NULL || comm == NULL)
		return mk_api_result(-EINVAL, "mkCommInit(NULL)");
	mk_log_set_sink(NULL);
	return mk_api_result(mk_comm_init(nccl, config, comm), "mkCommInit");
}

MK_API ncclResult_t mkCommDestroy(mkComm_t comm)
{
	int rc;

	if (comm == NULL)
		return mk_api_result(-EINVAL, "mkCommDestroy(NULL)");
	rc = mk_comm_quiesce(comm);
	mk_comm_free(comm);
	return mk_api_result(rc, "mkCommDestroy (waiting for peers)");
}

MK_API ncclResult_t mkCommAbort(mkComm_t comm)
{
	if (comm == NULL)
		return mk_api_result(-EINVAL, "mkCommAbort(NULL)");
	mk_proxy_fail(comm->proxy, -ECANCELED);
	mk_comm_free(comm);
	return ncclSuccess;
}

MK_API ncclResult_t mkCommGetAsyncError(mkComm_t comm, ncclResult_t *asyncError)
{
	int rc;

	if (comm == NULL || asyncError == NULL)
		return mk_api_result(-EINVAL, "mkCommGetAsyncError(NULL)");
	rc = mk_proxy_error(comm->proxy);
	if (rc == 0)
		rc = __atomic_load_n(comm->kerr, __ATOMIC_ACQUIRE);
	*asyncError = mk_result_api(rc);
	return ncclSuccess;
}

MK_API ncclResult_t mkMemAlloc(mkComm_t comm, size_t size, void **ptr)
{
	uint64_t off = 0, *all;
	int rc;

	if (comm == NULL || ptr == NULL || size == 0)
		return mk_api_result(-EINVAL, "mkMemAlloc(NULL or 0 bytes)");
	rc = mk_symm_alloc(&comm->symm, size, &off);
	if (rc == -ENOMEM) {
		MK_WARN("symmetric heap exhausted: %zu bytes asked of %zu (MKERNEL_SYMM_HEAP)",
			size, comm->heap_len);
		rc = -ENOSPC; /* a limit of the configuration, not a failed allocation */
	}
	/* Symmetric by construction; check it, and that every rank succeeded. */
	all = calloc((size_t)comm->nranks, sizeof(*all));
	if (all == NULL) {
		if (rc == 0)
			mk_symm_free(&comm->symm, off);
		return mk_api_result(-ENOMEM, "mkMemAlloc");
	}
	{
		uint64_t mine = rc == 0 ? off : UINT64_MAX;
		int rc2 = mk_comm_allgather(comm, &mine, all, sizeof(mine));

		for (int r = 0; rc2 == 0 && r < comm->nranks; r++) {
			if (all[r] != mine)
				rc2 = -EPROTO;
		}
		if (rc == 0 && rc2 != 0) {
			mk_symm_free(&comm->symm, off);
			rc = rc2;
		}
	}
	free(all);
	if (rc)
		return mk_api_result(rc, "mkMemAlloc (ranks disagree or a rank ran out)");
	*ptr = comm->heap + off;
	return ncclSuccess;
}

MK_API ncclResult_t mkMemFree(mkComm_t comm, void *ptr)
{
	if (comm == NULL || ptr == NULL || (char *)ptr < comm->heap ||
	    (char *)ptr >= comm->heap + comm->heap_len)
		return mk_api_result(-EINVAL, "mkMemFree(pointer not from mkMemAlloc)");
	return mk_api_result(mk_symm_free(&comm->symm, (uint64_t)((char *)ptr - comm->heap)),
			     "mkMemFree");
}
