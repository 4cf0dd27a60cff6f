/* SPDX-License-Identifier: Apache-2.0 */
/* mkAllToAll's kernel launcher (alltoall.cu), called from the public API in runtime/api_runtime.c.
 */
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

/* Enqueue the exchange of `bytes` per peer between heap offsets; 0 or -EIO (launch failed). */
int mk_alltoall_launch(const struct mk_dev_comm *c, uint64_t send_off, uint64_t recv_off,
		       uint64_t bytes, uint64_t epoch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_OPS_ALLTOALL_H */
