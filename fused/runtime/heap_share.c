// SPDX-License-Identifier: Apache-2.0
/*
 * Shareable VMM heaps (heap_share.h). The driver entry points are looked up once through the
 * runtime (cudaGetDriverEntryPointByVersion, each at the ABI version its prototype here has) into
 * a table that is read-only afterwards; libmkernel.so never links libcuda. Every CUresult is
 * checked and becomes a negative errno, with a WARN naming the call and the CUresult.
 */
#define MK_LOG_PREFIX "RUNTIME/mkernel"

#include "fused/runtime/heap_share.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mk/log.h"

/* The driver calls this file makes (prototypes at the ABI versions the toolkit names). */
struct heap_cu {
	PFN_cuGetErrorName_v6000 get_error_name;
	PFN_cuDeviceGet_v2000 device_get;
	PFN_cuDeviceGetAttribute_v2000 device_attr;
	PFN_cuMemGetAllocationGranularity_v10020 granularity;
	PFN_cuMemCreate_v10020 create;
	PFN_cuMemRelease_v10020 release;
	PFN_cuMemAddressReserve_v10020 reserve;
	PFN_cuMemAddressFree_v10020 addr_free;
	PFN_cuMemMap_v10020 map;
	PFN_cuMemUnmap_v10020 unmap;
	PFN_cuMemSetAccess_v10020 set_access;
	PFN_cuMemExportToShareableHandle_v10020 export_fd;
	PFN_cuMemImportFromShareableHandle_v10020 import_fd;
};

static const struct {
	const char *sym;
	unsigned int version;
	size_t off;
} heap_cu_syms[] = {
	{ "cuGetErrorName", 6000, offsetof(struct heap_cu, get_error_name) },
	{ "cuDeviceGet", 2000, offsetof(struct heap_cu, device_get) },
	{ "cuDeviceGetAttribute", 2000, offsetof(struct heap_cu, device_attr) },
	{ "cuMemGetAllocationGranularity", 10020, offsetof(struct heap_cu, granularity) },
	{ "cuMemCreate", 10020, offsetof(struct heap_cu, create) },
	{ "cuMemRelease", 10020, offsetof(struct heap_cu, release) },
	{ "cuMemAddressReserve", 10020, offsetof(struct heap_cu, reserve) },
	{ "cuMemAddressFree", 10020, offsetof(struct heap_cu, addr_free) },
	{ "cuMemMap", 10020, offsetof(struct heap_cu, map) },
	{ "cuMemUnmap", 10020, offsetof(struct heap_cu, unmap) },
	{ "cuMemSetAccess", 10020, offsetof(struct heap_cu, set_access) },
	{ "cuMemExportToShareableHandle", 10020, offsetof(struct heap_cu, export_fd) },
	{ "cuMemImportFromShareableHandle", 10020, offsetof(struct heap_cu, import_fd) },
};

static pthread_once_t heap_cu_once = PTHREAD_ONCE_INIT;
static struct heap_cu heap_cu_slots;	 /* written once, under heap_cu_once */
static const struct heap_cu *heap_cu_ok; /* &heap_cu_slots when every entry point was found */
static const char *heap_cu_missing;	 /* else the first that was not */

static void heap_cu_resolve(void)
{
	for (size_t i = 0; i < sizeof(heap_cu_syms) / sizeof(heap_cu_syms[0]); i++) {
		enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
		void *fn = NULL;

		if (cudaGetDriverEntryPointByVersion(heap_cu_syms[i].sym, &fn,
						     heap_cu_syms[i].version, cudaEnableDefault,
						     &q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess || fn == NULL) {
			(void)cudaGetLastError();
			heap_cu_missing = heap_cu_syms[i].sym;
			return;
		}
		/* a function pointer kept as the bytes of the data pointer the runtime gave */
		memcpy((char *)&heap_cu_slots + heap_cu_syms[i].off, &fn, sizeof(fn));
	}
	heap_cu_ok = &heap_cu_slots;
}

static const struct heap_cu *heap_cu(void)
{
	pthread_once(&heap_cu_once, heap_cu_resolve);
	return heap_cu_ok;
}

/* 0, or a negative errno for r with call and the CUresult's name in why (WARN when why NULL). */
static int heap_cu_rc(CUresult r, const char *call, char *why, size_t why_len)
{
	const struct heap_cu *cu = heap_cu();
	const char *name = NULL;
	int rc;

	if (r == CUDA_SUCCESS)
		return 0;
	if (cu == NULL || cu->get_error_name(r, &name) != CUDA_SUCCESS || name == NULL)
		name = "unknown CUresult";
	rc = r == CUDA_ERROR_OUT_OF_MEMORY   ? -ENOMEM
	     : r == CUDA_ERROR_NOT_SUPPORTED ? -EOPNOTSUPP
	     : r == CUDA_ERROR_INVALID_VALUE ? -EINVAL
					     : -EIO;
	if (why != NULL)
		snprintf(why, why_len, "%s failed: %s (%d)", call, name, (int)r);
	else
		MK_WARN("%s failed: %s (%d)", call, name, (int)r);
	return rc;
}

/* Pinned device memory on d that can travel as a POSIX fd. */
static void heap_prop(CUdevice d, int gdr, CUmemAllocationProp *p)
{
	memset(p, 0, sizeof(*p));
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = (int)d;
	p->allocFlags.gpuDirectRDMACapable = gdr ? 1 : 0;
}

/* Reserves size bytes aligned to align, maps handle there, read/write for device d. */
static int heap_map(const struct heap_cu *cu, CUdevice d, CUmemGenericAllocationHandle h,
		    size_t size, size_t align, struct mk_heap_map *m)
{
	CUmemAccessDesc acc;
	CUdeviceptr va = 0;
	int rc;

	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = (int)d;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	rc = heap_cu_rc(cu->reserve(&va, size, align, 0, 0), "cuMemAddressReserve", NULL, 0);
	if (rc)
		return rc;
	rc = heap_cu_rc(cu->map(va, size, 0, h, 0), "cuMemMap", NULL, 0);
	if (rc)
		goto undo_reserve;
	rc = heap_cu_rc(cu->set_access(va, size, &acc, 1), "cuMemSetAccess", NULL, 0);
	if (rc)
		goto undo_map;
	m->handle = h;
	m->base = (char *)(uintptr_t)va;
	m->size = size;
	return 0;

undo_map:
	(void)cu->unmap(va, size);
undo_reserve:
	(void)cu->addr_free(va, size);
	return rc;
}

/* The CUdevice of runtime device dev and the allocation granularity of its shareable memory. */
static int heap_device(const struct heap_cu *cu, int dev, int gdr,
		       CUmemAllocationGranularity_flags kind, CUdevice *d, size_t *gran, char *why,
		       size_t why_len)
{
	CUmemAllocationProp prop;
	int rc;

	rc = heap_cu_rc(cu->device_get(d, dev), "cuDeviceGet", why, why_len);
	if (rc)
		return rc;
	heap_prop(*d, gdr, &prop);
	rc = heap_cu_rc(cu->granularity(gran, &prop, kind), "cuMemGetAllocationGranularity", why,
			why_len);
	if (rc == 0 && *gran == 0)
		rc = -EINVAL;
	return rc;
}

/* Creates and exports one granule (gdr as asked): 0, or why it failed. */
static int heap_probe_create(const struct heap_cu *cu, CUdevice d, int gdr, size_t gran, char *why,
			     size_t why_len)
{
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	int fd = -1, rc;

	heap_prop(d, gdr, &prop);
	rc = heap_cu_rc(cu->create(&h, gran, &prop, 0), "cuMemCreate", why, why_len);
	if (rc)
		return rc;
	rc = heap_cu_rc(cu->export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
			"cuMemExportToShareableHandle", why, why_len);
	if (fd >= 0)
		close(fd);
	(void)cu->release(h);
	return rc;
}

int mk_heap_vmm_probe(int dev, int *gdr, char *why, size_t why_len)
{
	static const struct {
		CUdevice_attribute attr;
		const char *name;
	} need[] = {
		{ CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
		  "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED" },
		{ CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
		  "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED" },
	};
	const struct heap_cu *cu = heap_cu();
	CUdevice d;
	size_t gran;
	int v;

	*gdr = 0;
	if (cu == NULL) {
		snprintf(why, why_len, "driver entry point %s not found",
			 heap_cu_missing != NULL ? heap_cu_missing : "?");
		return 0;
	}
	if (heap_cu_rc(cu->device_get(&d, dev), "cuDeviceGet", why, why_len))
		return 0;
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		v = 0;
		if (heap_cu_rc(cu->device_attr(&v, need[i].attr, d), "cuDeviceGetAttribute", why,
			       why_len))
			return 0;
		if (!v) {
			snprintf(why, why_len, "device attribute %s is 0", need[i].name);
			return 0;
		}
	}
	v = 0;
	*gdr = cu->device_attr(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
			       d) == CUDA_SUCCESS &&
	       v != 0;
	if (heap_device(cu, dev, *gdr, CU_MEM_ALLOC_GRANULARITY_MINIMUM, &d, &gran, why, why_len))
		return 0;
	/* what the attributes promise, tried: under some setups creating or exporting fails */
	if (*gdr && heap_probe_create(cu, d, 1, gran, why, why_len) != 0)
		*gdr = 0;
	if (!*gdr && heap_probe_create(cu, d, 0, gran, why, why_len) != 0)
		return 0;
	return 1;
}

int mk_heap_vmm_alloc(int dev, size_t len, int gdr, struct mk_heap_map *out)
{
	const struct heap_cu *cu = heap_cu();
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	size_t gran, size;
	CUdevice d;
	int rc;

	memset(out, 0, sizeof(*out));
	if (cu == NULL)
		return -EOPNOTSUPP;
	rc = heap_device(cu, dev, gdr, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, &d, &gran, NULL, 0);
	if (rc)
		return rc;
	size = (len + gran - 1) / gran * gran;
	heap_prop(d, gdr, &prop);
	rc = heap_cu_rc(cu->create(&h, size, &prop, 0), "cuMemCreate", NULL, 0);
	if (rc)
		return rc;
	rc = heap_map(cu, d, h, size, gran, out);
	if (rc)
		(void)cu->release(h);
	return rc;
}

int mk_heap_vmm_export(const struct mk_heap_map *m, int *fd)
{
	const struct heap_cu *cu = heap_cu();

	*fd = -1;
	if (cu == NULL || m->size == 0)
		return -EINVAL;
	return heap_cu_rc(cu->export_fd(fd, m->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
			  "cuMemExportToShareableHandle", NULL, 0);
}

int mk_heap_vmm_import(int dev, int fd, size_t size, struct mk_heap_map *out)
{
	const struct heap_cu *cu = heap_cu();
	CUmemGenericAllocationHandle h;
	size_t gran;
	CUdevice d;
	int rc;

	memset(out, 0, sizeof(*out));
	if (cu == NULL)
		return -EOPNOTSUPP;
	/* the owner rounded to its recommended granularity, a multiple of the minimum */
	rc = heap_device(cu, dev, 0, CU_MEM_ALLOC_GRANULARITY_MINIMUM, &d, &gran, NULL, 0);
	if (rc)
		return rc;
	if (size == 0 || size % gran != 0) {
		MK_WARN("a peer's heap allocation of %zu bytes is not a multiple of this GPU's "
			"granularity (%zu bytes)",
			size, gran);
		return -EPROTO;
	}
	rc = heap_cu_rc(
		cu->import_fd(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		"cuMemImportFromShareableHandle", NULL, 0);
	if (rc)
		return rc;
	rc = heap_map(cu, d, h, size, gran, out);
	if (rc)
		(void)cu->release(h);
	return rc;
}

void mk_heap_vmm_unmap(struct mk_heap_map *m)
{
	const struct heap_cu *cu = heap_cu();
	CUdeviceptr va = (CUdeviceptr)(uintptr_t)m->base;

	if (cu == NULL || m->size == 0)
		return;
	/* the physical memory outlives this: other processes' mappings hold it */
	(void)heap_cu_rc(cu->unmap(va, m->size), "cuMemUnmap", NULL, 0);
	(void)heap_cu_rc(cu->addr_free(va, m->size), "cuMemAddressFree", NULL, 0);
	(void)heap_cu_rc(cu->release(m->handle), "cuMemRelease", NULL, 0);
	memset(m, 0, sizeof(*m));
}
