// SPDX-License-Identifier: Apache-2.0
/* Knobs of the device runtime: command queues and the host proxy. */
#include "fused/runtime/runtime_params.h"

MK_PARAM_INT(cmdq_slots, "fused", "MKERNEL_CMDQ_SLOTS", 4096,
	     "command-queue entries per queue (power of two, 64 B each, host-pinned)")
MK_PARAM_INT(proxy_threads, "fused", "MKERNEL_PROXY_THREADS", 1,
	     "host proxy threads per comm draining command queues")
MK_PARAM_INT(proxy_batch, "fused", "MKERNEL_PROXY_BATCH", 64,
	     "most commands a proxy thread takes from one queue before publishing credits")
MK_PARAM_INT(symm_heap, "fused", "MKERNEL_SYMM_HEAP", 512 << 20,
	     "bytes of symmetric heap per rank that mkMemAlloc hands out (GPU memory, mapped by "
	     "node peers; a host-pinned mirror of the same size where the transport cannot "
	     "register GPU memory)")
MK_PARAM_STR(
	heap_share, "fused", "MKERNEL_HEAP_SHARE", "auto",
	"how ranks of one node map each other's heap: 'vmm' (CUDA VMM allocations passed as "
	"POSIX fds over a Unix socket; a peer's mapping keeps the memory alive after its owner "
	"died or aborted; init fails if a rank cannot), 'legacy' (CUDA IPC handles), 'auto' "
	"(vmm where every rank of the node supports it, else legacy)")
MK_PARAM_STR(
	role_split, "fused", "MKERNEL_ROLE_SPLIT", "",
	"initial CTAs per role of persistent kernels, \"compute,intra,send,reduce\" (scaled to "
	"the grid); empty = the policy engine's split")
MK_PARAM_STR(hostid, "fused", "MKERNEL_HOSTID", "",
	     "mkernel's own host identity, in place of NCCL's (NCCL_HOSTID or hostname + boot "
	     "id): ranks sharing it form one mkernel node and map each other's heaps; for "
	     "emulating nodes of several ranks on one GPU, which NCCL refuses")
MK_PARAM_INT(gemm_ar_fused, "fused", "MKERNEL_GEMM_AR_FUSED", -1,
	     "mkGemmAllReduce: 1 runs the fused kernel wherever it can, 0 always runs cuBLAS + "
	     "ncclAllReduce, -1 lets the policy engine's cost model choose per shape")
MK_PARAM_INT(gemm_ar_oneshot_ctas, "fused", "MKERNEL_GEMM_AR_ONESHOT_CTAS", 0,
	     "mkGemmAllReduce's one-shot exchange: at most this many CTAs (0 = one per 256 "
	     "lines, up to the rank's share of the SMs, and at most 16 where ranks share a GPU)");
MK_PARAM_STR(sm_policy, "fused", "MKERNEL_SM_POLICY", "",
	     "fused ops' SM split: 'static' (the policy engine's split per shape and topology), "
	     "'adaptive' (the on-GPU controller moves CTAs between roles from call to call); "
	     "empty = the policy engine decides (MKERNEL_TUNER_ADAPTIVE, rules file)")
