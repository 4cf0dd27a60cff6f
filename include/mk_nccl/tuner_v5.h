/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Our declaration of NCCL's tuner plugin ABI, version 5 (NCCL 2.28-2.29), written from the
 * documented member lists. Member names follow the reference one to one; type names carry our
 * prefix. Included only by tuner/tuner_abi.c.
 */
#ifndef MK_NCCL_TUNER_V5_H
#define MK_NCCL_TUNER_V5_H

#include <stddef.h>
#include <stdint.h>

#include "mk_nccl/common.h"

/* Indices into the cost table (algorithms are rows, protocols columns). */
enum mk_nccl_algo {
	MK_NCCL_ALGO_UNDEF = -1,
	MK_NCCL_ALGO_TREE = 0,
	MK_NCCL_ALGO_RING = 1,
	MK_NCCL_ALGO_COLLNET_DIRECT = 2,
	MK_NCCL_ALGO_COLLNET_CHAIN = 3,
	MK_NCCL_ALGO_NVLS = 4,
	MK_NCCL_ALGO_NVLS_TREE = 5,
	MK_NCCL_ALGO_PAT = 6,
	MK_NCCL_NUM_ALGORITHMS = 7,
};

enum mk_nccl_proto {
	MK_NCCL_PROTO_UNDEF = -1,
	MK_NCCL_PROTO_LL = 0,
	MK_NCCL_PROTO_LL128 = 1,
	MK_NCCL_PROTO_SIMPLE = 2,
	MK_NCCL_NUM_PROTOCOLS = 3,
};

/* A cost-table entry NCCL must never pick (unsupported or excluded by NCCL_ALGO/NCCL_PROTO). */
#define MK_NCCL_ALGO_PROTO_IGNORE (-1.0f)

#define MK_NCCL_NUM_HW_LINKS	  3 /* NVLINK, PCI, NET */
#define MK_NCCL_NUM_COMPCAPS	  4 /* Volta, Ampere, Hopper, Blackwell */
#define MK_NCCL_NUM_TUNING_SCALES 3 /* 1, 2, 4 nodes */

/* ncclNvlDomainInfo_v5_t: how ranks group into NVLink domains (read only). */
struct mk_nccl_nvl_domain_info_v5 {
	int nNvlDomains;
	int minRanksPerNvlDomain;
	int maxRanksPerNvlDomain;
};

/*
 * ncclTunerConstants_v5_t: NCCL's own model inputs, filled before init and read after it, so
 * edits made in init change NCCL's model. Latencies in us, bandwidths in GB/s.
 */
struct mk_nccl_tuner_constants_v5 {
	double baseLatencies[MK_NCCL_NUM_ALGORITHMS][MK_NCCL_NUM_PROTOCOLS];
	double hwLatencies[MK_NCCL_NUM_HW_LINKS][MK_NCCL_NUM_ALGORITHMS][MK_NCCL_NUM_PROTOCOLS];
	double llMaxBws[MK_NCCL_NUM_COMPCAPS][MK_NCCL_NUM_TUNING_SCALES];
	double perChMaxRingLL128Bws[MK_NCCL_NUM_COMPCAPS][MK_NCCL_NUM_TUNING_SCALES];
	double perChMaxTreeLL128Bws[MK_NCCL_NUM_COMPCAPS][MK_NCCL_NUM_TUNING_SCALES];
	double perChMaxTreeBws[MK_NCCL_NUM_COMPCAPS][MK_NCCL_NUM_TUNING_SCALES];
	double perChMaxNVLSTreeBws[MK_NCCL_NUM_COMPCAPS][MK_NCCL_NUM_TUNING_SCALES];
};

/* ncclTuner_v5_t: four pointer-sized slots. */
struct mk_nccl_tuner_v5 {
	/* Logged by NCCL as "TUNER/Plugin: Using <name> (v5)". */
	const char *name;
	/* Once per communicator; *ctx is handed back to the other members. */
	ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
			     mk_nccl_logger_t logFunction,
			     struct mk_nccl_nvl_domain_info_v5 *nvlDomainInfo,
			     struct mk_nccl_tuner_constants_v5 *constants);
	/*
	 * Per collective. collCostTable is a contiguous float[numAlgo][numProto] passed as
	 * float**; NCCL picks the smallest non-negative entry. *nChannels = 0 keeps NCCL's count.
	 */
	ncclResult_t (*getCollInfo)(void *context, enum mk_nccl_func collType, size_t nBytes,
				    int numPipeOps, float **collCostTable, int numAlgo,
				    int numProto, int regBuff, int *nChannels);
	/* At communicator destruction. */
	ncclResult_t (*finalize)(void *context);
};

_Static_assert(sizeof(enum mk_nccl_func) == sizeof(int), "ncclFunc_t is int-sized");
_Static_assert(sizeof(struct mk_nccl_nvl_domain_info_v5) == 12, "nvl domain info v5 layout");
_Static_assert(offsetof(struct mk_nccl_nvl_domain_info_v5, maxRanksPerNvlDomain) == 8,
	       "nvl domain info v5 layout");
_Static_assert(sizeof(struct mk_nccl_tuner_constants_v5) == 1152, "tuner constants v5 layout");
_Static_assert(offsetof(struct mk_nccl_tuner_constants_v5, hwLatencies) == 168,
	       "tuner constants v5 layout");
_Static_assert(offsetof(struct mk_nccl_tuner_constants_v5, llMaxBws) == 672,
	       "tuner constants v5 layout");
_Static_assert(offsetof(struct mk_nccl_tuner_constants_v5, perChMaxNVLSTreeBws) == 1056,
	       "tuner constants v5 layout");
_Static_assert(sizeof(struct mk_nccl_tuner_v5) == 32, "ncclTuner_v5 has 4 slots");
_Static_assert(offsetof(struct mk_nccl_tuner_v5, finalize) == 24, "ncclTuner_v5 layout");

#endif /* MK_NCCL_TUNER_V5_H */
