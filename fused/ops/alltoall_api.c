// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllToAll: argument checks, the comm's running total of slices (what every per-peer signal
 * word reaches when a call's data has arrived), and the launch (alltoall.cu). Signal words
 * [0, 2 * nranks) of the comm are this op's. mkCommInit loads the kernel through this op's hook.
 */
#include <errno.h>
#include <stdlib.h>

#include "fused/ops/alltoall.h"
#include "fused/runtime/comm.h"
#include "fused/runtime/comm_live.h"

struct a2a_state {
	uint64_t signals; /* slices of all calls so far on this comm (signal targets) */
};

/*
 * Load the kernel at mkCommInit: with lazy module loading, a first launch while an application
 * kernel spins waiting for this one could wait for that kernel to finish.
 */
static int a2a_comm_init(struct mk_comm *c)
{
	(void)c;
	return mk_alltoall_preload();
}

static void a2a_state_free(struct mk_comm *c, void *state)
{
	(void)c;
	free(state);
}

MK_COMM_OP(alltoall, .comm_init = a2a_comm_init, .state_free = a2a_state_free);

/* This comm's state, made by the first call; NULL when out of memory. */
static struct a2a_state *a2a_state(struct mk_comm *c)
{
	struct a2a_state *st = mk_comm_op_get(&c->op_slots, &mk_comm_op_alltoall);

	if (st != NULL)
		return st;
	st = calloc(1, sizeof(*st));
	if (st != NULL && mk_comm_op_put(&c->op_slots, &mk_comm_op_alltoall, st) != 0) {
		free(st);
		st = NULL;
	}
	return st;
}

MK_API ncclResult_t mkAllToAll(const void *sendbuff, void *recvbuff, size_t count,
			       ncclDataType_t datatype, mkComm_t comm, cudaStream_t stream)
{
	static const size_t tsize[] = {
		[ncclInt8] = 1,	   [ncclUint8] = 1,    [ncclInt32] = 4,	  [ncclUint32] = 4,
		[ncclInt64] = 8,   [ncclUint64] = 8,   [ncclFloat16] = 2, [ncclFloat32] = 4,
		[ncclFloat64] = 8, [ncclBfloat16] = 2,
	};
	struct a2a_state *st;
	struct mk_dev_comm d;
	uint64_t bytes, total, soff, roff;
	uint32_t slices;

	if (mk_comm_live_check(comm) != 0 || sendbuff == NULL || recvbuff == NULL ||
	    (int)datatype < 0 || (size_t)datatype >= sizeof(tsize) / sizeof(tsize[0]) ||
	    tsize[datatype] == 0)
		return mk_api_result(-EINVAL, "mkAllToAll(bad argument, or not a live comm)");
	/* count x type size x ranks must not wrap: a wrapped total would pass the bounds check */
	if (count > UINT64_MAX / tsize[datatype] ||
	    (uint64_t)count * tsize[datatype] > UINT64_MAX / (uint64_t)comm->nranks)
		return mk_api_result(-EINVAL, "mkAllToAll(count x type size x ranks overflows)");
	bytes = (uint64_t)count * tsize[datatype];
	total = bytes * (uint64_t)comm->nranks;
	soff = (uint64_t)((const char *)sendbuff - comm->heap);
	roff = (uint64_t)((char *)recvbuff - comm->heap);
	if (count == 0)
		return ncclSuccess;
	if ((const char *)sendbuff < comm->heap || (char *)recvbuff < comm->heap ||
	    !mk_symm_contains(&comm->symm, soff, total) ||
	    !mk_symm_contains(&comm->symm, roff, total))
		return mk_api_result(-EINVAL,
				     "mkAllToAll(buffers not from mkMemAlloc or too small)");
	if (bytes > UINT32_MAX)
		return mk_api_result(-EINVAL, "mkAllToAll(more than 4 GiB per peer)");
	st = a2a_state(comm);
	if (st == NULL)
		return mk_api_result(-ENOMEM, "mkAllToAll(state)");
	mk_comm_dev(comm, &d);
	slices = mk_alltoall_slices(bytes, comm->nranks);
	st->signals += slices;
	return mk_api_result(mk_alltoall_launch(&d, soff, roff, bytes, slices, st->signals, stream),
			     "mkAllToAll launch");
}
