/* SPDX-License-Identifier: Apache-2.0 */
/* The communicator behind mkComm_t (comm.c) and what ops need of it. */
#ifndef MK_FUSED_RUNTIME_COMM_H
#define MK_FUSED_RUNTIME_COMM_H

#include <stdint.h>

#include "fused/runtime/comm_ops.h"
#include "fused/runtime/dev_comm.h"
#include "fused/runtime/heap_share.h"
#include "fused/runtime/proxy.h"
#include "fused/runtime/symm.h"
#include "fused/runtime/topo.h"
#include "mkernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Signal words per comm; the ops above divide them among themselves (fused/ops/signals.h). */
#define MK_COMM_SIGNALS 8192

/* First word of a live comm: the API refuses other pointers (and destroyed comms, mostly). */
#define MK_COMM_MAGIC 0x6d6b636dU

struct mk_comm {
	uint32_t magic; /* MK_COMM_MAGIC from mkCommInit's success until mkCommDestroy */
	ncclComm_t nccl;
	int rank;
	int nranks;
	int cuda_dev;
	cudaStream_t stream; /* internal: NCCL exchanges at init and teardown */
	struct mk_topo topo;
	/* transport */
	const struct mk_transport_ops *ops;
	int have_tp; /* mk_transport_get succeeded: put it back */
	int tp_dev;
	struct mk_conn **conns; /* [nranks], NULL for myself */
	int *connected;
	struct mk_rkey *rkeys; /* [nranks]: every rank's heap registration */
	/* memory (layout of the device allocation: comm.c, "Memory") */
	char *heap; /* device memory: what mkMemAlloc hands out, mapped by node peers */
	size_t heap_len;
	char *stage; /* host-pinned mirror of the heap where the transport cannot register GPU
		      * memory: puts leave from it and land in it (NULL: the NIC uses the heap) */
	struct mk_bmr *heap_mr; /* registration of what the transport reads and writes */
	struct mk_symm symm;
	uint64_t *signals; /* mapped: incremented by the proxy */
	uint32_t nsignals;
	char *peer_base[MK_MAX_LOCAL]; /* node peers' device allocations (mine at my local rank) */
	int *peer_local_d;	       /* device: local rank of every rank, -1 if another node */
	int *kerr;		       /* mapped: first error a kernel of this comm hit */
	/* how node peers map the heaps (enum mk_heap_share, heap_policy.h; the same on every rank
	 * of a node) and what that took: the VMM mappings, or CUDA IPC's */
	int heap_share;
	uint64_t heap_nonce;			   /* names this comm's fd-passing sockets */
	int heap_gdr;				   /* VMM heap created GPUDirect-RDMA capable */
	struct mk_heap_map heap_vmm;		   /* VMM: my heap (size 0: cudaMalloc'd) */
	struct mk_heap_map peer_vmm[MK_MAX_LOCAL]; /* VMM: node peers' heaps, imported */
	int keep_heap; /* legacy CUDA IPC, abort: node peers may still read the heap, never free it
			*/
	/* command queue + proxy */
	struct mk_cmdq_slot *slots;
	struct mk_cmdq_ctrl *ctrl;
	struct mk_cmdq_prod *prod_d;
	uint32_t nslots;
	struct mk_cmdq q;
	int q_ready;
	struct mk_proxy *proxy;
	int nthreads;
	int timeout_ms;
	int sms;       /* SMs of my GPU */
	int gpu_share; /* ranks of this comm on my GPU (me included): my share of its SMs */
	struct mk_comm_op_slots op_slots; /* the ops' state on this comm (comm_ops.h) */
};

int mk_comm_init(ncclComm_t nccl, const mkConfig_t *cfg, struct mk_comm **out);
void mk_comm_free(struct mk_comm *c);
int mk_comm_quiesce(struct mk_comm *c);
int mk_comm_barrier(struct mk_comm *c);
/*
 * Give back heap memory mkMemAlloc gave an op: 0, or -EINVAL for a pointer it did not give.
 * Unlike mkMemFree it does not ask whether the comm is live: ops free their pieces while
 * mk_comm_free releases them, after the comm has left the live set (the allocator itself goes
 * last). NULL is a no-op.
 */
int mk_comm_heap_free(struct mk_comm *c, void *ptr);
int mk_comm_allgather(struct mk_comm *c, const void *mine, void *all, size_t bytes);
void mk_comm_dev(const struct mk_comm *c, struct mk_dev_comm *d);

/*
 * The public API's edge (runtime_api.c), for the runtime's and the ops' mk* functions: WARN what
 * failed and why (what: the call and its problem), then convert once (mk_result_api). 0 gives
 * ncclSuccess and logs nothing.
 */
ncclResult_t mk_api_result(int rc, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_COMM_H */
