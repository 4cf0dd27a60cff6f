/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inline-PTX wrappers for the Hopper (sm_90a) features the GEMM engine and the fused kernels use:
 * mbarriers, TMA bulk tensor loads, wgmma, setmaxnreg, named barriers and the release/acquire
 * operations that publish tiles to other CTAs or other GPUs. Each wrapper is named for its
 * memory-model meaning; nothing here allocates or decides anything.
 */
#ifndef MK_FUSED_COMMON_PTX_CUH
#define MK_FUSED_COMMON_PTX_CUH

#include <stdint.h>

#define MK_DEV static __device__ __forceinline__

/* ---- addresses ---- */

MK_DEV uint32_t mk_smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- mbarrier (CTA-shared barrier with a phase bit and a transaction count) ---- */

MK_DEV void mk_mbar_init(uint64_t *bar, uint32_t arrivals)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(mk_smem_u32(bar)), "r"(arrivals)
		     : "memory");
}

/* Make barrier initialisation visible to the async proxy (TMA) and the other threads. */
MK_DEV void mk_fence_mbar_init(void)
{
	asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

MK_DEV void mk_mbar_arrive(uint64_t *bar)
{
	asm volatile("{\n\t.reg .b64 st;\n\t"
		     "mbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n\t}" ::"r"(mk_smem_u32(bar))
		     : "memory");
}

/* Arrive once and add the bytes the async copies of this phase will deliver. */
MK_DEV void mk_mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes)
{
	asm volatile("{\n\t.reg .b64 st;\n\t"
		     "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(
			     mk_smem_u32(bar)),
		     "r"(bytes)
		     : "memory");
}

/* Block until the phase with the given parity has completed (acquire, CTA scope). */
MK_DEV void mk_mbar_wait(uint64_t *bar, uint32_t parity)
{
	asm volatile("{\n\t.reg .pred done;\n"
		     "mk_wait_%=:\n\t"
		     "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n\t"
		     "@!done bra mk_wait_%=;\n\t}" ::"r"(mk_smem_u32(bar)),
		     "r"(parity)
		     : "memory");
}

/* ---- TMA: 2-D tiled bulk tensor load into shared memory, completing on an mbarrier ---- */

MK_DEV void mk_tma_load_2d(void *dst, const void *tmap, uint64_t *bar, int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
		     " [%0], [%1, {%3, %4}], [%2];" ::"r"(mk_smem_u32(dst)),
		     "l"(tmap), "r"(mk_smem_u32(bar)), "r"(c0), "r"(c1)
		     : "memory");
}

/* TMA store of a 2-D box from shared memory; completes in the thread's bulk async-group. */
MK_DEV void mk_tma_store_2d(const void *tmap, const void *src, int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
		     ::"l"(tmap), "r"(mk_smem_u32(src)), "r"(c0), "r"(c1)
		     : "memory");
}

MK_DEV void mk_bulk_commit(void)
{
	asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Wait until this thread's bulk stores have finished reading shared memory (buffer reusable). */
MK_DEV void mk_bulk_wait_read_all(void)
{
	asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* Wait until this thread's bulk stores have written global memory. */
MK_DEV void mk_bulk_wait_all(void)
{
	asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* Generic-proxy writes to shared memory become visible to the async proxy (TMA store reads). */
MK_DEV void mk_fence_proxy_async_shared(void)
{
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Order async-proxy global writes (completed TMA stores) with later generic operations. */
MK_DEV void mk_fence_proxy_async_global(void)
{
	asm volatile("fence.proxy.async.global;" ::: "memory");
}

MK_DEV void mk_st_shared_u32(uint32_t addr, uint32_t v)
{
	asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

MK_DEV void mk_tma_prefetch_desc(const void *tmap)
{
	asm volatile("prefetch.tensormap [%0];" ::"l"(tmap) : "memory");
}

/* ---- register reallocation between warpgroups (needs a register cap at kernel entry) ---- */

#define mk_setmaxnreg_inc(n) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(n))
#define mk_setmaxnreg_dec(n) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(n))

/* ---- named barrier for a subset of the CTA's warps (id 0 is __syncthreads) ---- */

MK_DEV void mk_named_bar_sync(uint32_t id, uint32_t threads)
{
	asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* ---- wgmma ---- */

MK_DEV void mk_wgmma_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

MK_DEV void mk_wgmma_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

#define mk_wgmma_wait(n) asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(n) : "memory")

/*
 * Shared-memory matrix descriptor for a 128-byte-swizzled operand (PTX ISA, "matrix descriptor"):
 * bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
 * 62-63 layout (1 = 128B swizzle). The tile base must be 1024-byte aligned.
 */
MK_DEV uint64_t mk_wgmma_desc_sw128(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
	uint64_t d = 0;

	d |= (uint64_t)((saddr & 0x3FFFF) >> 4);
	d |= (uint64_t)((lbo & 0x3FFFF) >> 4) << 16;
	d |= (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
	d |= (uint64_t)1 << 62;
	return d;
}

/* ---- publishing to other CTAs / GPUs ---- */

MK_DEV void mk_fence_acq_rel_gpu(void)
{
	asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

MK_DEV void mk_fence_acq_rel_sys(void)
{
	asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/* Add to a flag so that every write ordered before it is visible to a GPU-scope acquirer. */
MK_DEV void mk_red_release_gpu_add_u32(unsigned int *p, unsigned int v)
{
	asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Same, for a flag that a peer GPU or the CPU reads. */
MK_DEV void mk_red_release_sys_add_u32(unsigned int *p, unsigned int v)
{
	asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

MK_DEV unsigned int mk_ld_acquire_gpu_u32(const unsigned int *p)
{
	unsigned int v;

	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

MK_DEV int mk_ld_relaxed_gpu_s32(const int *p)
{
	int v;

	asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

/* Atomically add a pair of bf16 values (concurrent writers, e.g. peers reducing into one tile). */
MK_DEV void mk_red_add_bf16x2(void *p, uint32_t v)
{
	asm volatile("red.global.add.noftz.bf16x2 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

#endif /* MK_FUSED_COMMON_PTX_CUH */
