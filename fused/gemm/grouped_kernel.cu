/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The grouped GEMM's Hopper kernels (one per B layout: the wgmma transpose bit is an immediate)
 * and their host side: the rules the kernel needs, tensor maps (A 2-D with a row base per tile,
 * B 3-D over the stacked experts, C 2-D for the TMA stores), the grid and the launch. Nothing
 * here reads the offsets: the kernel does.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "fused/gemm/grouped.h"
#include "fused/gemm/grouped_engine.cuh"

extern "C" __global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_grouped_kernel_nk(const __grid_constant__ struct mk_gemm_tmaps maps,
			     const __grid_constant__ struct mk_grouped_args args)
{
	extern __shared__ unsigned char mk_grouped_dyn_smem[];

	mk_grouped_role(&args, &maps, blockIdx.x, gridDim.x, mk_grouped_dyn_smem, 1);
}

extern "C" __global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_grouped_kernel_kn(const __grid_constant__ struct mk_gemm_tmaps maps,
			     const __grid_constant__ struct mk_grouped_args args)
{
	extern __shared__ unsigned char mk_grouped_dyn_smem[];

	mk_grouped_role(&args, &maps, blockIdx.x, gridDim.x, mk_grouped_dyn_smem, 0);
}

typedef CUresult (*grouped_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
				      const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
				      const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
				      CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static pthread_once_t grouped_once = PTHREAD_ONCE_INIT;
static grouped_encode_fn grouped_encode;

static void grouped_resolve(void)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
					     &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		grouped_encode = (grouped_encode_fn)fn;
	else
		(void)cudaGetLastError();
}

extern "C" int mk_grouped_check(const struct mk_grouped_launch *l, const char **why)
{
	const char *r = NULL;
	const long long tiles_n = ((long long)l->n + MK_GEMM_BN - 1) / MK_GEMM_BN;

	if (l->num_experts < 1 || l->n < 1 || l->k < 1 || l->max_rows < 0)
		r = "num_experts, N and K must be >= 1 and max_rows >= 0";
	else if (l->b_layout != MK_GEMM_B_KN && l->b_layout != MK_GEMM_B_NK)
		r = "unknown B layout";
	else if (l->a == NULL || l->b == NULL || l->c == NULL || l->offsets == NULL)
		r = "A, B, C and offsets must not be NULL";
	else if (((uintptr_t)l->a & 15) || ((uintptr_t)l->b & 15))
		r = "A and B must be 16-byte aligned (TMA)";
	else if (l->k % 8)
		r = "K must be a multiple of 8 (TMA needs 16-byte row strides)";
	else if (l->b_layout == MK_GEMM_B_KN && l->n % 8)
		r = "N must be a multiple of 8 when B is K x N (TMA row stride)";
	else if ((uintptr_t)l->c & 1)
		r = "C must be 2-byte aligned";
	else if ((long long)l->n * l->k >= (1LL << 39))
		r = "N x K too large for a TMA stride";
	else if (mk_grouped_tile_bound(l->max_rows, l->num_experts, tiles_n, MK_GEMM_BM,
				       MK_GROUPED_MAX_TILES) < 0)
		r = "too many tiles (max_rows / 128 + experts) x N / 256";
	if (why != NULL)
		*why = r;
	return r == NULL ? 0 : -EINVAL;
}

static int grouped_encode_map(CUtensorMap *map, const void *base, int rank, const uint64_t *dims,
			      const uint64_t *strides_bytes, const uint32_t *box)
{
	cuuint64_t d[3], s[2];
	cuuint32_t b[3], estr[3] = { 1, 1, 1 };

	for (int i = 0; i < rank; i++) {
		d[i] = dims[i];
		b[i] = box[i];
		if (i > 0)
			s[i - 1] = strides_bytes[i - 1];
	}
	return grouped_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, (void *)base,
			      d, s, b, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
			      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
			      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
		       ? 0
		       : -EINVAL;
}

/* A (k, rows), B (k, n, expert) or (n, k, expert), C (n, rows) when TMA stores it. */
static int grouped_make_maps(const struct mk_grouped_launch *l, struct mk_grouped_args *g,
			     struct mk_gemm_tmaps *maps)
{
	const uint64_t n = (uint64_t)l->n, k = (uint64_t)l->k, e = (uint64_t)l->num_experts;
	/* A map needs a dimension >= 1 even when max_rows is 0 (nothing is loaded then). */
	const uint64_t rows = l->max_rows > 0 ? (uint64_t)l->max_rows : 1;
	int rc;

	memset(maps, 0, sizeof(*maps));
	{
		const uint64_t dims[2] = { k, rows }, strides[1] = { k * 2 };
		const uint32_t box[2] = { MK_GEMM_BK, MK_GEMM_BM };

		rc = grouped_encode_map(&maps->a, l->a, 2, dims, strides, box);
	}
	if (rc == 0 && l->b_layout == MK_GEMM_B_NK) {
		const uint64_t dims[3] = { k, n, e }, strides[2] = { k * 2, n * k * 2 };
		const uint32_t box[3] = { MK_GEMM_BK, MK_GEMM_BN, 1 };

		rc = grouped_encode_map(&maps->b, l->b, 3, dims, strides, box);
	} else if (rc == 0) {
		const uint64_t dims[3] = { n, k, e }, strides[2] = { n * 2, n * k * 2 };
		const uint32_t box[3] = { 64, MK_GEMM_BK, 1 };

		rc = grouped_encode_map(&maps->b, l->b, 3, dims, strides, box);
	}
	if (rc)
		return rc;
	g->tma_store = 0;
	if (!l->no_tma_store && ((uintptr_t)l->c & 15) == 0 && l->n % 8 == 0) {
		const uint64_t dims[2] = { n, rows }, strides[1] = { n * 2 };
		const uint32_t box[2] = { MK_GEMM_C_BOX, MK_GEMM_C_BOX };

		if (grouped_encode_map(&maps->c[0], l->c, 2, dims, strides, box) == 0)
			g->tma_store = 1;
	}
	g->gemm.epi.tma_mask = g->tma_store;
	return 0;
}

#define MK_GROUPED_MAX_DEVICES 64

/* Per device: dynamic shared memory limit raised on both kernels, SM count cached. */
static int grouped_prepare_device(int *sms)
{
	static int ready[MK_GROUPED_MAX_DEVICES];
	static int sm_count[MK_GROUPED_MAX_DEVICES];
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MK_GROUPED_MAX_DEVICES)
		return -EIO;
	if (!__atomic_load_n(&ready[dev], __ATOMIC_ACQUIRE)) {
		int n = 0;

		if (cudaFuncSetAttribute((const void *)mk_grouped_kernel_nk,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 MK_GROUPED_SMEM_BYTES) != cudaSuccess ||
		    cudaFuncSetAttribute((const void *)mk_grouped_kernel_kn,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 MK_GROUPED_SMEM_BYTES) != cudaSuccess ||
		    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
			return -EIO;
		sm_count[dev] = n;
		__atomic_store_n(&ready[dev], 1, __ATOMIC_RELEASE);
	}
	*sms = sm_count[dev];
	return 0;
}

extern "C" int mk_grouped_prepare(const struct mk_grouped_launch *l, struct mk_grouped_args *g,
				  struct mk_gemm_tmaps *maps)
{
	int rc = mk_grouped_check(l, NULL);

	if (rc)
		return rc;
	pthread_once(&grouped_once, grouped_resolve);
	if (grouped_encode == NULL)
		return -ENOSYS;
	memset(g, 0, sizeof(*g));
	g->offsets = l->offsets;
	g->num_experts = l->num_experts;
	g->max_rows = l->max_rows;
	g->n = l->n;
	g->k = l->k;
	g->b_layout = l->b_layout;
	g->tiles_n = (l->n + MK_GEMM_BN - 1) / MK_GEMM_BN;
	g->c = l->c;
	g->trace = l->trace;
	return grouped_make_maps(l, g, maps);
}

extern "C" int mk_grouped_run(const struct mk_grouped_launch *l, cudaStream_t stream)
{
	struct mk_gemm_tmaps maps;
	struct mk_grouped_args g;
	long long bound;
	int sms, rc, grid;

	rc = mk_grouped_check(l, NULL);
	if (rc)
		return rc;
	if (l->max_rows == 0)
		return 0; /* every expert is empty */
	rc = mk_grouped_prepare(l, &g, &maps);
	if (rc)
		return rc;
	rc = grouped_prepare_device(&sms);
	if (rc)
		return rc;
	bound = mk_grouped_tile_bound(l->max_rows, l->num_experts, g.tiles_n, MK_GEMM_BM,
				      MK_GROUPED_MAX_TILES);
	grid = l->ctas > 0 ? l->ctas : sms;
	if (grid > bound)
		grid = (int)bound;
	if (l->b_layout == MK_GEMM_B_NK)
		mk_grouped_kernel_nk<<<grid, MK_GEMM_THREADS, MK_GROUPED_SMEM_BYTES, stream>>>(maps,
											      g);
	else
		mk_grouped_kernel_kn<<<grid, MK_GEMM_THREADS, MK_GROUPED_SMEM_BYTES, stream>>>(maps,
											      g);
	if (cudaGetLastError() != cudaSuccess)
		return -EIO;
	return 0;
}
