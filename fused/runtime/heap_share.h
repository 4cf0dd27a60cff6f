/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The heap as a CUDA VMM allocation node peers can share: created shareable as a POSIX fd,
 * exported, imported by a peer from the fd it received (fd_pass.h), mapped read/write for the
 * current device, unmapped and released. The physical memory lives until the last process that
 * mapped it lets go: an importer keeps reading a peer's heap after that peer died or aborted.
 * Driver API entry points come through the runtime (no link with libcuda).
 */
#ifndef MK_FUSED_RUNTIME_HEAP_SHARE_H
#define MK_FUSED_RUNTIME_HEAP_SHARE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One mapping of one allocation (mine or a peer's). All zero: nothing. */
struct mk_heap_map {
	uint64_t handle; /* CUmemGenericAllocationHandle: released at unmap */
	char *base;	 /* reserved and mapped device address */
	size_t size;	 /* bytes reserved and mapped: the allocation's whole size */
};

/*
 * 1 when this process can share VMM heaps on CUDA device dev (driver entry points, device
 * attributes, and a one-granule allocation created and exported as an fd), else 0 with why.
 * *gdr: the allocation may be made GPUDirect-RDMA capable (a NIC can register it).
 */
int mk_heap_vmm_probe(int dev, int *gdr, char *why, size_t why_len);

/* A zero-filled allocation of at least len bytes (rounded to the recommended granularity). */
int mk_heap_vmm_alloc(int dev, size_t len, int gdr, struct mk_heap_map *out);

/* A new POSIX fd for m's allocation (the caller closes it). */
int mk_heap_vmm_export(const struct mk_heap_map *m, int *fd);

/* Maps the allocation behind fd (size bytes, the owner's size) read/write for device dev. */
int mk_heap_vmm_import(int dev, int fd, size_t size, struct mk_heap_map *out);

/* Unmaps, frees the address range and releases the handle; m becomes all zero. */
void mk_heap_vmm_unmap(struct mk_heap_map *m);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_HEAP_SHARE_H */
