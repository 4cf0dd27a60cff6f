/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declarations shared by our copies of NCCL's plugin ABIs (net, tuner, GIN), written from the
 * documented member lists. Included only by nccl_plugin/ and tuner/tuner_abi.c.
 */
#ifndef MK_NCCL_COMMON_H
#define MK_NCCL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "mk/result.h" /* ncclResult_t: <nccl.h>, or its documented values */

/* ncclDebugLogger_t: level is NCCL's C enum (int-sized); same shape as mk_log_fn. */
typedef void (*mk_nccl_logger_t)(int level, unsigned long flags, const char *file, int line,
				 const char *fmt, ...);

/* ncclFunc_t values (tuner collType). */
enum mk_nccl_func {
	MK_NCCL_FUNC_BROADCAST = 0,
	MK_NCCL_FUNC_REDUCE = 1,
	MK_NCCL_FUNC_ALLGATHER = 2,
	MK_NCCL_FUNC_REDUCESCATTER = 3,
	MK_NCCL_FUNC_ALLREDUCE = 4,
	MK_NCCL_FUNC_SENDRECV = 5,
	MK_NCCL_FUNC_SEND = 6,
	MK_NCCL_FUNC_RECV = 7,
	MK_NCCL_FUNC_ALLTOALL = 8,
	MK_NCCL_FUNC_SCATTER = 9,
	MK_NCCL_FUNC_GATHER = 10,
	MK_NCCL_NUM_FUNCS = 11,
};

#endif /* MK_NCCL_COMMON_H */
