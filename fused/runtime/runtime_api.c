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
#include "fused/runtime/comm_live.h"
#include "fused/runtime/heap_policy.h"
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

/* What every call on an existing comm checks first: the pointer is a live comm, unread. */
static int api_comm(mkComm_t comm)
{
	return mk_comm_live_check(comm) ? -EINVAL : 0;
}

MK_API ncclResult_t mkCommDestroy(mkComm_t comm)
{
	int rc;

	/* taken off the live set first: a second destroy (or abort) is refused from here on */
	if (mk_comm_live_take(comm))
		return mk_api_result(-EINVAL, "mkCommDestroy(not a live comm: NULL, destroyed "
					      "already, or never made by mkCommInit)");
	rc = mk_comm_quiesce(comm);
	mk_comm_free(comm);
	return mk_api_result(rc, "mkCommDestroy (waiting for peers)");
}

MK_API ncclResult_t mkCommAbort(mkComm_t comm)
{
	if (mk_comm_live_take(comm))
		return mk_api_result(-EINVAL, "mkCommAbort(not a live comm: NULL, destroyed "
					      "already, or never made by mkCommInit)");
	mk_proxy_fail(comm->proxy, -ECANCELED);
	/* This rank's kernels see the error word and leave (every wait of theirs also ends at the
	 * comm's timeout) before the memory they poll is freed under them. */
	if (comm->kerr != NULL)
		__atomic_compare_exchange_n(comm->kerr, &(int){ 0 }, -ECANCELED, 0,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	(void)cudaDeviceSynchronize();
	/* Node peers that have not noticed yet may still read this heap through their mapping. A
	 * VMM heap stays alive under their mappings; a CUDA IPC one freed under them faults their
	 * kernels (and under MPS every client of the GPU), so an aborted comm leaves it to the
	 * process's end. */
	comm->keep_heap = comm->topo.nlocal > 1 && comm->heap_share == MK_HEAP_SHARE_LEGACY;
	mk_comm_free(comm);
	return ncclSuccess;
}

MK_API ncclResult_t mkCommGetAsyncError(mkComm_t comm, ncclResult_t *asyncError)
{
	int rc;

	if (asyncError == NULL || api_comm(comm))
		return mk_api_result(-EINVAL, "mkCommGetAsyncError(NULL, or not a live comm)");
	rc = mk_proxy_error(comm->proxy);
	if (rc == 0)
		rc = __atomic_load_n(comm->kerr, __ATOMIC_ACQUIRE);
	*asyncError = mk_result_api(rc);
	return ncclSuccess;
}

/*
 * Collective. Arguments are agreed on before anything is allocated: every rank with a live comm
 * takes part in the exchange whatever its own arguments, and a rank whose arguments are bad (or
 * whose allocation failed) contributes a failure, so every rank returns the same error instead
 * of some waiting forever for a rank that left early. (A rank that passes no live comm at all
 * cannot take part: its peers then wait in NCCL as for any missing rank.)
 */
MK_API ncclResult_t mkMemAlloc(mkComm_t comm, size_t size, void **ptr)
{
	uint64_t off = 0, mine, *all;
	int rc = 0, rc2;

	if (api_comm(comm))
		return mk_api_result(-EINVAL, "mkMemAlloc(not a live comm)");
	all = calloc((size_t)comm->nranks, sizeof(*all));
	if (all == NULL) /* the one failure the other ranks are not told of */
		return mk_api_result(-ENOMEM, "mkMemAlloc");
	if (ptr == NULL || size == 0) {
		MK_WARN("mkMemAlloc(%zu bytes, ptr %p): bad arguments; the other ranks are told",
			size, (void *)ptr);
		rc = -EINVAL;
	}
	if (rc == 0)
		rc = mk_symm_alloc(&comm->symm, size, &off);
	if (rc == -ENOMEM) {
		MK_WARN("symmetric heap exhausted: %zu bytes asked of %zu (MKERNEL_SYMM_HEAP)",
			size, comm->heap_len);
		rc = -ENOSPC; /* a limit of the configuration, not a failed allocation */
	}
	/* Symmetric by construction: check it, and that every rank succeeded. */
	mine = rc == 0 ? off : UINT64_MAX;
	rc2 = mk_comm_allgather(comm, &mine, all, sizeof(mine));
	for (int r = 0; rc2 == 0 && r < comm->nranks; r++) {
		if (all[r] != mine)
			rc2 = -EPROTO; /* another rank failed (UINT64_MAX) or got another offset */
	}
	free(all);
	if (rc == 0 && rc2 != 0)
		mk_symm_free(&comm->symm, off);
	if (rc == 0)
		rc = rc2;
	if (rc)
		return mk_api_result(rc, "mkMemAlloc (bad arguments or no room on this or another "
					 "rank, or ranks disagree)");
	*ptr = comm->heap + off;
	return ncclSuccess;
}

int mk_comm_heap_free(struct mk_comm *c, void *ptr)
{
	if (ptr == NULL)
		return 0;
	if ((char *)ptr < c->heap || (char *)ptr >= c->heap + c->heap_len)
		return -EINVAL;
	return mk_symm_free(&c->symm, (uint64_t)((char *)ptr - c->heap));
}

MK_API ncclResult_t mkMemFree(mkComm_t comm, void *ptr)
{
	const int rc = api_comm(comm) || ptr == NULL ? -EINVAL : mk_comm_heap_free(comm, ptr);

	if (rc == -EINVAL)
		return mk_api_result(rc, "mkMemFree(not a live comm, or a pointer not from "
					 "mkMemAlloc)");
	return mk_api_result(rc, "mkMemFree");
}
