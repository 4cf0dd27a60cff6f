/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The standalone Hopper attention kernels (one per head dim: tile, stage count and register split
 * differ) and their host side: tensor maps encoded through the driver entry point (no link
 * against libcuda), per-device launch attributes, and the launch. Fused kernels reuse
 * mk_attn_make_tensor_maps() and call mk_attn_role() from their own compute CTAs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "attn.h"
#include "attn_engine.cuh"

extern "C" __global__ void __launch_bounds__(MK_ATTN_THREADS(128), 1)
	mk_attn_kernel_d128(const __grid_constant__ struct mk_attn_tmaps maps,
			    const __grid_constant__ struct mk_attn_args args)
{
	extern __shared__ unsigned char mk_attn_dyn_smem[];

	mk_attn_role(&args, &maps, blockIdx.x, gridDim.x, mk_attn_dyn_smem, 128);
}

extern "C" __global__ void __launch_bounds__(MK_ATTN_THREADS(64), 1)
	mk_attn_kernel_d64(const __grid_constant__ struct mk_attn_tmaps maps,
			   const __grid_constant__ struct mk_attn_args args)
{
	extern __shared__ unsigned char mk_attn_dyn_smem[];

	mk_attn_role(&args, &maps, blockIdx.x, gridDim.x, mk_attn_dyn_smem, 64);
}

typedef CUresult (*attn_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
				   const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
				   const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
				   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static pthread_once_t attn_once = PTHREAD_ONCE_INIT;
static attn_encode_fn attn_encode;

static void attn_resolve(void)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
					     &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		attn_encode = (attn_encode_fn)fn;
	else
		(void)cudaGetLastError();
}

extern "C" int mk_attn_device_ok(void)
{
	int dev, major = 0, minor = 0;

	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return major == 9 && minor == 0;
}

/* A BSHD tensor as {D, H, rows, B}; a box is 64 columns of `box_rows` rows of one head. */
extern "C" int mk_attn_encode_map(CUtensorMap *map, const void *base, int d, int heads, int rows,
				  long long batch_rows, int batch, int box_rows)
{
	cuuint64_t dims[4] = { (cuuint64_t)d, (cuuint64_t)heads, (cuuint64_t)rows,
			       (cuuint64_t)batch };
	cuuint64_t strides[3] = { (cuuint64_t)d * 2, (cuuint64_t)heads * d * 2,
				  (cuuint64_t)batch_rows * heads * d * 2 };
	cuuint32_t box[4] = { 64, 1, (cuuint32_t)box_rows, 1 };
	cuuint32_t estr[4] = { 1, 1, 1, 1 };
	CUresult rc;

	pthread_once(&attn_once, attn_resolve);
	if (attn_encode == NULL)
		return -ENOSYS;
	rc = attn_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)base, dims, strides, box,
			 estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
			 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	return rc == CUDA_SUCCESS ? 0 : -EINVAL;
}

extern "C" int mk_attn_make_tensor_maps(const struct mk_attn_args *a, struct mk_attn_tmaps *maps)
{
	const struct mk_attn_job *j = &a->job[0];
	int rc;

	memset(maps, 0, sizeof(*maps));
	/* Rows the job reads and no more: past them TMA fills zeros instead of reading memory
	 * the caller may not own (the last batch of a sub-range). */
	rc = mk_attn_encode_map(&maps->q, a->q, a->head_dim, a->heads_q, j->q_row0 + j->sq,
				a->q_batch_rows, a->batch, a->block_m);
	if (rc == 0)
		rc = mk_attn_encode_map(&maps->k, a->k, a->head_dim, a->heads_kv,
					j->kv_row0 + j->skv, a->kv_batch_rows, a->batch,
					MK_ATTN_BN);
	if (rc == 0)
		rc = mk_attn_encode_map(&maps->v, a->v, a->head_dim, a->heads_kv,
					j->kv_row0 + j->skv, a->kv_batch_rows, a->batch,
					MK_ATTN_BN);
	return rc;
}

extern "C" int mk_attn_check_kernel(const void *kernel, int head_dim, int *entry_regs)
{
	struct cudaFuncAttributes fa;
	int regs;

	if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
		(void)cudaGetLastError();
		return -EIO;
	}
	if (entry_regs != NULL)
		*entry_regs = fa.numRegs;
	/* what a thread holds: warps get registers in units of 256, 8 a thread */
	regs = (fa.numRegs + 7) & ~7;
	if (MK_ATTN_SPLIT_REGS(head_dim) > MK_ATTN_THREADS(head_dim) * regs ||
	    MK_ATTN_PRODUCER_REGS(head_dim) > regs || regs > MK_ATTN_CONSUMER_REGS(head_dim))
		return -ENOEXEC;
	return 0;
}

#define ATTN_MAX_DEVICES 64

/* Per device: both kernels' register splits checked (a split the launch registers cannot hold
 * hangs at setmaxnreg.inc: refuse instead), dynamic shared memory limits raised, SM count
 * cached. */
static int attn_prepare_device(int *sms)
{
	static int ready[ATTN_MAX_DEVICES];
	static int sm_count[ATTN_MAX_DEVICES];
	int dev, rc;

	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= ATTN_MAX_DEVICES)
		return -EIO;
	if (!__atomic_load_n(&ready[dev], __ATOMIC_ACQUIRE)) {
		int n = 0;

		rc = mk_attn_check_kernel((const void *)mk_attn_kernel_d128, 128, NULL);
		if (rc == 0)
			rc = mk_attn_check_kernel((const void *)mk_attn_kernel_d64, 64, NULL);
		if (rc)
			return rc;
		if (cudaFuncSetAttribute((const void *)mk_attn_kernel_d128,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 MK_ATTN_SMEM_BYTES(128)) != cudaSuccess ||
		    cudaFuncSetAttribute((const void *)mk_attn_kernel_d64,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 MK_ATTN_SMEM_BYTES(64)) != cudaSuccess ||
		    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
			return -EIO;
		sm_count[dev] = n;
		__atomic_store_n(&ready[dev], 1, __ATOMIC_RELEASE);
	}
	*sms = sm_count[dev];
	return 0;
}

/* TMA reads q, k, v (16-byte aligned bases); the epilogue stores bf16 pairs and fp32 pairs. */
static int attn_aligned(const struct mk_attn_args *a)
{
	uintptr_t in = (uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v;

	return (in & 15) == 0 && ((uintptr_t)a->o & 3) == 0 && ((uintptr_t)a->acc & 7) == 0;
}

extern "C" int mk_attn_run_hopper(const struct mk_attn_args *in, int ctas, cudaStream_t stream)
{
	struct mk_attn_args a = *in;
	struct mk_attn_tmaps maps;
	int sms, rc, grid;

	rc = mk_attn_plan(&a, MK_ATTN_BM(in->head_dim), NULL);
	if (rc)
		return rc;
	/* one job with the role's own maps (several jobs: the ops' kernels) */
	if (a.njobs != 1 || a.job[0].kv_maps != NULL || a.job[0].gate != NULL || !attn_aligned(&a))
		return -EINVAL;
	rc = attn_prepare_device(&sms);
	if (rc)
		return rc;
	rc = mk_attn_make_tensor_maps(&a, &maps);
	if (rc)
		return rc;
	grid = mk_attn_schedule_static(&a, sms);
	if (ctas > 0)
		grid = ctas;
	if (a.counter == NULL && grid > a.units)
		grid = a.units;
	if (a.head_dim == 128)
		mk_attn_kernel_d128<<<grid, MK_ATTN_THREADS(128), MK_ATTN_SMEM_BYTES(128), stream>>>(
			maps, a);
	else
		mk_attn_kernel_d64<<<grid, MK_ATTN_THREADS(64), MK_ATTN_SMEM_BYTES(64), stream>>>(
			maps, a);
	if (cudaGetLastError() != cudaSuccess)
		return -EIO;
	return 0;
}
