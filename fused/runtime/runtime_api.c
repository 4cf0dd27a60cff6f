// SPDX-License-Identifier: Apache-2.0
/*
 * Public edge of the device runtime: mkCommInit / Destroy / Abort / GetAsyncError, mkMemAlloc /
 * mkMemFree, mkAllToAll. Argument checks here; internal -errno converted to ncclResult_t once,
 * with a WARN saying what failed.
 */
#define MK_LOG_PREFIX "RUNTIME/mkernel"

#include <errno.h>
#include <stdlib.h>

#include "fused/ops/alltoall.h"
#include "fused/runtime/comm.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/result.h"

/* The API edge: say what failed and why, then convert (mk_result_api). */
static ncclResult_t rt_result(int rc, const char *what)
{
	if (rc == 0)
		return ncclSuccess;
	MK_WARN("%s failed: %s", what, mk_strerror(rc));
	return mk_result_api(rc);
}

MK_API ncclResult_t mkCommInit(ncclComm_t nccl, const mkConfig_t *config, mkComm_t *comm)
{
	if (nccl == NULL || comm == NULL)
		return rt_result(-EINVAL, "mkCommInit(NULL)");
	mk_log_set_sink(NULL);
	return rt_result(mk_comm_init(nccl, config, comm), "mkCommInit");
}

MK_API ncclResult_t mkCommDestroy(mkComm_t comm)
{
	int rc;

	if (comm == NULL)
		return rt_result(-EINVAL, "mkCommDestroy(NULL)");
	rc = mk_comm_quiesce(comm);
	mk_comm_free(comm);
	return rt_result(rc, "mkCommDestroy (waiting for peers)");
}

MK_API ncclResult_t mkCommAbort(mkComm_t comm)
{
	if (comm == NULL)
		return rt_result(-EINVAL, "mkCommAbort(NULL)");
	mk_proxy_fail(comm->proxy, -ECANCELED);
	mk_comm_free(comm);
	return ncclSuccess;
}

MK_API ncclResult_t mkCommGetAsyncError(mkComm_t comm, ncclResult_t *asyncError)
{
	int rc;

	if (comm == NULL || asyncError == NULL)
		return rt_result(-EINVAL, "mkCommGetAsyncError(NULL)");
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
		return rt_result(-EINVAL, "mkMemAlloc(NULL or 0 bytes)");
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
		return rt_result(-ENOMEM, "mkMemAlloc");
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
		return rt_result(rc, "mkMemAlloc (ranks disagree or a rank ran out)");
	*ptr = comm->heap + off;
	return ncclSuccess;
}

MK_API ncclResult_t mkMemFree(mkComm_t comm, void *ptr)
{
	if (comm == NULL || ptr == NULL || (char *)ptr < comm->heap ||
	    (char *)ptr >= comm->heap + comm->heap_len)
		return rt_result(-EINVAL, "mkMemFree(pointer not from mkMemAlloc)");
	return rt_result(mk_symm_free(&comm->symm, (uint64_t)((char *)ptr - comm->heap)),
			 "mkMemFree");
}

MK_API ncclResult_t mkAllToAll(const void *sendbuff, void *recvbuff, size_t count,
			       ncclDataType_t datatype, mkComm_t comm, cudaStream_t stream)
{
	static const size_t tsize[] = {
		[ncclInt8] = 1,	   [ncclUint8] = 1,    [ncclInt32] = 4,	  [ncclUint32] = 4,
		[ncclInt64] = 8,   [ncclUint64] = 8,   [ncclFloat16] = 2, [ncclFloat32] = 4,
		[ncclFloat64] = 8, [ncclBfloat16] = 2,
	};
	struct mk_dev_comm d;
	uint64_t bytes, total, soff, roff;
	uint32_t slices;

	if (comm == NULL || sendbuff == NULL || recvbuff == NULL || (int)datatype < 0 ||
	    (size_t)datatype >= sizeof(tsize) / sizeof(tsize[0]) || tsize[datatype] == 0)
		return rt_result(-EINVAL, "mkAllToAll(bad argument)");
	bytes = (uint64_t)count * tsize[datatype];
	total = bytes * (uint64_t)comm->nranks;
	soff = (uint64_t)((const char *)sendbuff - comm->heap);
	roff = (uint64_t)((char *)recvbuff - comm->heap);
	if (count == 0)
		return ncclSuccess;
	if ((const char *)sendbuff < comm->heap || (char *)recvbuff < comm->heap ||
	    !mk_symm_contains(&comm->symm, soff, total) ||
	    !mk_symm_contains(&comm->symm, roff, total))
		return rt_result(-EINVAL, "mkAllToAll(buffers not from mkMemAlloc or too small)");
	if (bytes > UINT32_MAX)
		return rt_result(-EINVAL, "mkAllToAll(more than 4 GiB per peer)");
	mk_comm_dev(comm, &d);
	slices = mk_alltoall_slices(bytes, comm->nranks);
	comm->a2a_signals += slices;
	return rt_result(
		mk_alltoall_launch(&d, soff, roff, bytes, slices, comm->a2a_signals, stream),
		"mkAllToAll launch");
}
