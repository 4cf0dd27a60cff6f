/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Our declaration of NCCL's tuner plugin ABI, version 4 (NCCL 2.24-2.27): the v5 slots with an
 * init that only knows rank and node counts, and a last slot named destroy. Included only by
 * tuner/tuner_abi.c, which implements it as an adapter over v5.
 */
#ifndef MK_NCCL_TUNER_V4_H
#define MK_NCCL_TUNER_V4_H

#include <stddef.h>
#include <stdint.h>

#include "mk_nccl/common.h"

/* ncclTuner_v4_t: four pointer-sized slots. */
struct mk_nccl_tuner_v4 {
	const char *name;
	/* Once per communicator; the context is the last argument in this version. */
	ncclResult_t (*init)(size_t nRanks, size_t nNodes, mk_nccl_logger_t logFunction,
			     void **context);
	/* Same contract as v5 (cost table float[numAlgo][numProto] passed as float**). */
	ncclResult_t (*getCollInfo)(void *context, enum mk_nccl_func collType, size_t nBytes,
				    int numPipeOps, float **collCostTable, int numAlgo,
				    int numProto, int regBuff, int *nChannels);
	ncclResult_t (*destroy)(void *context);
};

_Static_assert(sizeof(struct mk_nccl_tuner_v4) == 32, "ncclTuner_v4 has 4 slots");
_Static_assert(offsetof(struct mk_nccl_tuner_v4, destroy) == 24, "ncclTuner_v4 layout");

#endif /* MK_NCCL_TUNER_V4_H */
