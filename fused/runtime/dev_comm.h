/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a fused kernel sees of a comm (plain data, passed by value to kernels; filled by the host
 * side in comm.c, used through device.cuh).
 */
#ifndef MK_FUSED_RUNTIME_DEV_COMM_H
#define MK_FUSED_RUNTIME_DEV_COMM_H

#include <stdint.h>

#include "fused/runtime/cmdq.h"

#define MK_MAX_LOCAL 8

struct mk_dev_comm {
	struct mk_cmdq_dev q; /* the comm's command queue */
	int rank;
	int nranks;
	char *heap;	       /* my symmetric heap (device memory) */
	char *stage;	       /* host-pinned mirror remote puts use, or NULL (device.cuh) */
	const int *peer_local; /* [nranks]: index into peer_* below, -1 for another node */
	uint64_t *net_signals; /* mapped host words the proxy increments */
	uint64_t *nvl_signals; /* my device words node peers increment (may be NULL) */
	uint32_t nsignals;
	int local_rank;
	int nlocal;
	char *peer_heap[MK_MAX_LOCAL]; /* node peers' heaps, mine included */
	uint64_t *peer_nvl_signals[MK_MAX_LOCAL];
	uint64_t *barrier; /* my barrier counter (device memory) */
	uint64_t *peer_barrier[MK_MAX_LOCAL];
	int *error;	     /* mapped host word a kernel reports its first error in */
	uint64_t timeout_ns; /* bound of every device-side wait */
};

#endif /* MK_FUSED_RUNTIME_DEV_COMM_H */
