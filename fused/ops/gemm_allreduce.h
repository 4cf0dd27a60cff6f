/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkGemmAllReduce's fused kernel (gemm_allreduce.cu) as the public API (gemm_allreduce.c) sees
 * it: a persistent kernel whose CTAs start in three roles for the ranks of one node:
 *   compute: the GEMM engine, tiles of this rank's own slice first, each tile stored into this
 *            rank's partial buffer W in the symmetric heap, then its ready flag raised;
 *   reduce:  for the tiles this rank owns (tile rows tm with tm % nlocal == local rank), wait
 *            for every node peer's ready flag, add the node peers' W tiles in fp32 (peer
 *            pointers), store the sum into this rank's result buffer R, raise its final flag;
 *   publish: for every tile, wait for its owner's final flag and copy the owner's R tile into C.
 * Reduce and publish work is handed out by tickets; compute CTAs take reduce and then publish
 * tickets once the GEMM has no tile left for them, reduce CTAs take publish tickets after.
 * Flags only grow: the kernel reads the call count from the workspace, waits for count + 1,
 * and the last CTA to leave stores count + 1 back, so CUDA-graph replays stay in step. A call
 * starts only after every node peer has finished the previous one.
 */
#ifndef MK_FUSED_OPS_GEMM_ALLREDUCE_H
#define MK_FUSED_OPS_GEMM_ALLREDUCE_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "fused/gemm/gemm.h"
#include "fused/runtime/dev_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace words per tile and per call (all in the symmetric heap, zeroed per shape). */
struct mk_gar_ws_dev {
	uint16_t *w[MK_MAX_LOCAL]; /* node peers' bf16 partial buffers (mine at local rank) */
	uint16_t *r[MK_MAX_LOCAL]; /* node peers' bf16 result buffers */
	unsigned int *ready[MK_MAX_LOCAL];	/* per tile: partial stored (the engine's flag) */
	unsigned int *final[MK_MAX_LOCAL];	/* per tile: owner's result stored */
	unsigned int *calls;			/* my completed calls on this workspace */
	unsigned int *peer_calls[MK_MAX_LOCAL]; /* node peers' (mine at my local rank) */
	unsigned int *exits;			/* CTAs that left the current call */
	unsigned int *tickets;			/* [2]: next reduce and publish work item */
	int *error;				/* comm's error word (mapped host) */
	uint64_t timeout_ns;
};

struct mk_gar_launch {
	const void *a, *b;
	void *c;
	int m, n, k, b_layout;
	int local_rank, nlocal;
	int compute, reduce, publish; /* CTAs per role; grid = their sum */
	const int *order;	      /* compute tile order (device), owned tiles first */
	struct mk_gar_ws_dev ws;
};

/* Raise the kernel's shared-memory limit and load it (call once per device). 0 or -EIO. */
int mk_gar_prepare(void);

/* Enqueue the fused kernel on `stream` (cooperative launch). 0, -EINVAL, -ENOSYS or -EIO. */
int mk_gar_launch(const struct mk_gar_launch *l, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_GEMM_ALLREDUCE_H */
