// SPDX-License-Identifier: Apache-2.0
/*
 * NCCL's face of the policy engine: ncclTunerPlugin_v5 and, as a translation-only adapter,
 * ncclTunerPlugin_v4. This is the only tuner file that speaks NCCL's ABI; every decision is
 * made by policy.c. Errors are converted here, once (mk_result_net); getCollInfo never fails.
 */
#define MK_LOG_PREFIX "TUNER/mkernel"

#include <errno.h>
#include <string.h>

#include "mk/compiler.h"
#include "mk/log.h"
#include "mk/result.h"
#include "mk_nccl/tuner_v4.h"
#include "mk_nccl/tuner_v5.h"
#include "policy.h"

/* The policy's indices are NCCL's: the table is handed over as it is. */
_Static_assert((int)MK_ALGO_TREE == (int)MK_NCCL_ALGO_TREE &&
		       (int)MK_ALGO_RING == (int)MK_NCCL_ALGO_RING &&
		       (int)MK_ALGO_PAT == (int)MK_NCCL_ALGO_PAT &&
		       (int)MK_ALGO_COUNT == (int)MK_NCCL_NUM_ALGORITHMS,
	       "algorithm indices");
_Static_assert((int)MK_PROTO_LL == (int)MK_NCCL_PROTO_LL &&
		       (int)MK_PROTO_SIMPLE == (int)MK_NCCL_PROTO_SIMPLE &&
		       (int)MK_PROTO_COUNT == (int)MK_NCCL_NUM_PROTOCOLS,
	       "protocol indices");
_Static_assert((int)MK_COLL_ALLREDUCE == (int)MK_NCCL_FUNC_ALLREDUCE &&
		       (int)MK_COLL_BROADCAST == (int)MK_NCCL_FUNC_BROADCAST &&
		       (int)MK_COLL_REDUCESCATTER == (int)MK_NCCL_FUNC_REDUCESCATTER,
	       "collective indices");

static ncclResult_t tuner5_init(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
				mk_nccl_logger_t logFunction,
				struct mk_nccl_nvl_domain_info_v5 *nvlDomainInfo,
				struct mk_nccl_tuner_constants_v5 *constants)
{
	struct mk_policy_topo topo = { 0 };
	struct mk_policy *p = NULL;
	int rc;

	(void)constants; /* NCCL's own model stays as NCCL built it */
	if (logFunction != NULL)
		mk_log_set_sink(logFunction);
	if (ctx == NULL)
		return mk_result_net(-EINVAL);
	*ctx = NULL;
	if (nRanks > (size_t)1 << 30 || nNodes > nRanks) {
		MK_WARN("init(comm %#llx): %zu ranks on %zu nodes is not a topology",
			(unsigned long long)commId, nRanks, nNodes);
		return mk_result_net(-EINVAL);
	}
	topo.nranks = (int)nRanks;
	topo.nnodes = (int)nNodes;
	if (nvlDomainInfo != NULL && nvlDomainInfo->maxRanksPerNvlDomain > 0)
		topo.ranks_per_node = nvlDomainInfo->maxRanksPerNvlDomain;
	rc = mk_policy_create(&topo, &p);
	if (rc) {
		MK_WARN("init(comm %#llx, %zu ranks, %zu nodes) failed: %s",
			(unsigned long long)commId, nRanks, nNodes, strerror(-rc));
		return mk_result_net(rc);
	}
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_TUNING,
		"tuner ready for comm %#llx: %zu ranks, %zu nodes, %d ranks per NVLink domain",
		(unsigned long long)commId, nRanks, nNodes, topo.ranks_per_node);
	*ctx = p;
	return ncclSuccess;
}

static ncclResult_t tuner5_get_coll_info(void *context, enum mk_nccl_func collType, size_t nBytes,
					 int numPipeOps, float **collCostTable, int numAlgo,
					 int numProto, int regBuff, int *nChannels)
{
	/* A contiguous float[numAlgo][numProto] arrives as float**: cast, never index it. */
	float(*table)[MK_NCCL_NUM_PROTOCOLS] = (float(*)[MK_NCCL_NUM_PROTOCOLS])collCostTable;

	if (numProto != MK_NCCL_NUM_PROTOCOLS) {
		MK_WARN_ONCE("getCollInfo: %d protocols, expected %d; NCCL's choice stands",
			     numProto, MK_NCCL_NUM_PROTOCOLS);
		return ncclSuccess;
	}
	mk_policy_coll(context, (int)collType, nBytes, numPipeOps, regBuff,
		       table != NULL ? &table[0][0] : NULL, numAlgo, numProto, nChannels, NULL);
	return ncclSuccess;
}

static ncclResult_t tuner5_finalize(void *context)
{
	int rc = mk_policy_destroy(context);

	if (rc == 0)
		return ncclSuccess;
	MK_WARN("finalize(context %p): not a live tuner context (finalized twice?): %s", context,
		strerror(-rc));
	return mk_result_net(rc);
}

MK_EXPORT const struct mk_nccl_tuner_v5 ncclTunerPlugin_v5 = {
	.name = "mkernel",
	.init = tuner5_init,
	.getCollInfo = tuner5_get_coll_info,
	.finalize = tuner5_finalize,
};

/* v4: no comm id, NVLink domain info or constants; context is the last init argument. */
static ncclResult_t tuner4_init(size_t nRanks, size_t nNodes, mk_nccl_logger_t logFunction,
				void **context)
{
	return tuner5_init(context, 0, nRanks, nNodes, logFunction, NULL, NULL);
}

MK_EXPORT const struct mk_nccl_tuner_v4 ncclTunerPlugin_v4 = {
	.name = "mkernel",
	.init = tuner4_init,
	.getCollInfo = tuner5_get_coll_info,
	.destroy = tuner5_finalize,
};
