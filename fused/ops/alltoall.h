/* SPDX-License-Identifier: Apache-2.0 */
/* mkAllToAll's kernel launcher (alltoall.cu), called from the public API in alltoall_api.c. */
#ifndef MK_FUSED_OPS_ALLTOALL_H
#define MK_FUSED_OPS_ALLTOALL_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "fused/runtime/dev_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Load the kernel's module now (lazy loading would do it at the first launch). 0 or -EIO. */
int mk_alltoall_preload(void);

/* CTAs per peer for `bytes` per peer: the same on every rank (it depends on the call only). */
uint32_t mk_alltoall_slices(uint64_t bytes, int nranks);

/*
 * Enqueue the exchange of `bytes` per peer between heap offsets with `slices` CTAs per peer.
 * target: the comm's running total of slices over its mkAllToAll calls, this one included (the
 * value every per-peer signal reaches when this call's slices have all arrived). 0 or -EIO.
 */
int mk_alltoall_launch(const struct mk_dev_comm *c, uint64_t send_off, uint64_t recv_off,
		       uint64_t bytes, uint32_t slices, uint64_t target, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_ALLTOALL_H */
