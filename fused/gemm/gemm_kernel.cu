/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The standalone GEMM kernels (one per variant and B layout: the tile shape sizes registers and
 * shared memory, the wgmma transpose bit is an immediate) and their host side: argument checks,
 * tensor maps encoded through the driver entry point (no link against libcuda), per-device
 * launch attributes, and the launch itself. Fused kernels reuse mk_gemm_make_tensor_maps() and
 * call mk_gemm_role() from their own compute-role CTAs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "gemm.h"
#include "gemm_engine.cuh"

extern "C" int64_t mk_param_gemm_no_tma_store(void); /* gemm_params.c */

extern "C" __global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_gemm_kernel_nk(const __grid_constant__ struct mk_gemm_tmaps maps,
			  const __grid_constant__ struct mk_gemm_args args)
{
	extern __shared__ unsigned char mk_gemm_dyn_smem[];

	mk_gemm_role(&args, &maps, blockIdx.x, gridDim.x, mk_gemm_dyn_smem, 1);
}

extern "C" __global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_gemm_kernel_kn(const __grid_constant__ struct mk_gemm_tmaps maps,
			  const __grid_constant__ struct mk_gemm_args args)
{
	extern __shared__ unsigned char mk_gemm_dyn_smem[];

	mk_gemm_role(&args, &maps, blockIdx.x, gridDim.x, mk_gemm_dyn_smem, 0);
}

/* The other variants: one kernel per tile shape and B layout. */
#define MK_GEMM_VARIANT_KERNEL(name, bm, bn, bnk)                                                 \
	extern "C" __global__ void __launch_bounds__(MK_GEMM_THREADS_OF(bm), 1)                    \
		name(const __grid_constant__ struct mk_gemm_tmaps maps,                            \
		     const __grid_constant__ struct mk_gemm_args args)                             \
	{                                                                                          \
		extern __shared__ unsigned char mk_gemm_dyn_smem[];                                \
                                                                                                   \
		mk_gemm_role_t<bm, bn, bnk>(&args, &maps, blockIdx.x, gridDim.x,                   \
					    mk_gemm_dyn_smem);                                     \
	}

MK_GEMM_VARIANT_KERNEL(mk_gemm_kernel_nk_64x256, 64, 256, 1)
MK_GEMM_VARIANT_KERNEL(mk_gemm_kernel_kn_64x256, 64, 256, 0)
MK_GEMM_VARIANT_KERNEL(mk_gemm_kernel_nk_128x128, 128, 128, 1)
MK_GEMM_VARIANT_KERNEL(mk_gemm_kernel_kn_128x128, 128, 128, 0)
MK_GEMM_VARIANT_KERNEL(mk_gemm_kernel_nk_64x128, 64, 128, 1)
MK_GEMM_VARIANT_KERNEL(mk_gemm_kernel_kn_64x128, 64, 128, 0)

typedef void (*mk_gemm_kernel_fn)(const struct mk_gemm_tmaps, const struct mk_gemm_args);

/* [tile][b_nk]: the kernel of each variant and layout. */
static const mk_gemm_kernel_fn gemm_kernels[MK_GEMM_TILE_COUNT][2] = {
	[MK_GEMM_TILE_128x256] = { mk_gemm_kernel_kn, mk_gemm_kernel_nk },
	[MK_GEMM_TILE_64x256] = { mk_gemm_kernel_kn_64x256, mk_gemm_kernel_nk_64x256 },
	[MK_GEMM_TILE_128x128] = { mk_gemm_kernel_kn_128x128, mk_gemm_kernel_nk_128x128 },
	[MK_GEMM_TILE_64x128] = { mk_gemm_kernel_kn_64x128, mk_gemm_kernel_nk_64x128 },
};

typedef CUresult (*mk_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
				       const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
				       const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
				       CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static pthread_once_t gemm_once = PTHREAD_ONCE_INIT;
static mk_encode_tiled_fn gemm_encode;
/* MKERNEL_GEMM_NO_TMA_STORE=1: every output takes per-thread stores (for comparisons). */
static int gemm_no_tma_store;

static void gemm_resolve(void)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
					     &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		gemm_encode = (mk_encode_tiled_fn)fn;
	else
		(void)cudaGetLastError();
	gemm_no_tma_store = mk_param_gemm_no_tma_store() != 0;
}

extern "C" void mk_gemm_args_init(struct mk_gemm_args *args, int m, int n, int k, int b_layout,
				  void *c)
{
	memset(args, 0, sizeof(*args));
	args->m = m;
	args->n = n;
	args->k = k;
	args->b_layout = b_layout;
	args->tiles_m = (m + MK_GEMM_BM - 1) / MK_GEMM_BM;
	args->tiles_n = (n + MK_GEMM_BN - 1) / MK_GEMM_BN;
	args->epi.out[0] = c;
	args->epi.ld[0] = n;
	args->epi.mode[0] = MK_GEMM_EPI_STORE;
	args->tile = MK_GEMM_TILE_128x256;
	args->splits = 1;
}

extern "C" void mk_gemm_args_variant(struct mk_gemm_args *args, int tile, int splits)
{
	const int bm = mk_gemm_tile_bm(tile), bn = mk_gemm_tile_bn(tile);

	args->tile = tile;
	args->splits = splits;
	args->tiles_m = (args->m + bm - 1) / bm;
	args->tiles_n = (args->n + bn - 1) / bn;
	args->split_count = NULL;
	args->split_ws = NULL;
}

extern "C" size_t mk_gemm_split_ws_bytes(const struct mk_gemm_args *args)
{
	const size_t tiles = (size_t)args->tiles_m * args->tiles_n;

	if (args->splits <= 1)
		return 0;
	return MK_GEMM_SPLIT_COUNT_BYTES + tiles * (size_t)args->splits *
						  (size_t)mk_gemm_tile_bm(args->tile) / 64 * 256 *
						  (size_t)mk_gemm_tile_bn(args->tile);
}

extern "C" void mk_gemm_args_split_ws(struct mk_gemm_args *args, void *ws)
{
	args->split_count = (unsigned int *)ws;
	args->split_ws = (float *)((char *)ws + MK_GEMM_SPLIT_COUNT_BYTES);
}

extern "C" int mk_gemm_check(const void *a, const void *b, const struct mk_gemm_args *args,
			     const char **why)
{
	const int tile = args->tile, splits = args->splits > 1 ? args->splits : 1;
	const int bm = mk_gemm_tile_bm(tile), bn = mk_gemm_tile_bn(tile);
	const char *r = NULL;

	if (args->m < 1 || args->n < 1 || args->k < 1)
		r = "M, N and K must be >= 1";
	else if (args->b_layout != MK_GEMM_B_KN && args->b_layout != MK_GEMM_B_NK)
		r = "unknown B layout";
	else if (a == NULL || b == NULL)
		r = "A and B must not be NULL";
	else if (((uintptr_t)a & 15) || ((uintptr_t)b & 15))
		r = "A and B must be 16-byte aligned (TMA)";
	else if (args->k % 8)
		r = "K must be a multiple of 8 (TMA needs 16-byte row strides)";
	else if (args->b_layout == MK_GEMM_B_KN && args->n % 8)
		r = "N must be a multiple of 8 when B is K x N (TMA row stride)";
	else if (tile < 0 || tile >= MK_GEMM_TILE_COUNT)
		r = "unknown tile shape";
	else if (args->tiles_m != (args->m + bm - 1) / bm ||
		 args->tiles_n != (args->n + bn - 1) / bn)
		r = "tile counts do not match M, N and the tile shape";
	else if (args->splits < 0 || splits > MK_GEMM_MAX_SPLITS)
		r = "k-splits must be 1 .. 16";
	else if (splits > (args->k + MK_GEMM_BK - 1) / MK_GEMM_BK)
		r = "more k-splits than k-blocks of 64";
	else if (splits > 1 && (long long)args->tiles_m * args->tiles_n > MK_GEMM_SPLIT_MAX_TILES)
		r = "too many tiles for split-K counters";
	else if (splits > 1 && (args->split_count == NULL || args->split_ws == NULL ||
				((uintptr_t)args->split_ws & 15)))
		r = "split-K needs a workspace (16-byte aligned)";
	else if (args->epi.out[0] == NULL && args->epi.out[1] == NULL && args->epi.ready == NULL)
		r = "no destination and no ready flags";
	for (int o = 0; r == NULL && o < MK_GEMM_MAX_OUT; o++) {
		if (args->epi.out[o] == NULL)
			continue;
		if (((uintptr_t)args->epi.out[o] & 1) || args->epi.ld[o] < args->n)
			r = "outputs need 2-byte alignment and a row stride >= N";
		else if (args->epi.mode[o] < MK_GEMM_EPI_STORE ||
			 args->epi.mode[o] > MK_GEMM_EPI_ATOMIC_ADD)
			r = "unknown epilogue mode";
	}
	if (why != NULL)
		*why = r;
	return r == NULL ? 0 : -EINVAL;
}

/* Per device: 0 not asked yet, 1 sm_90, 2 another GPU. Asked once: every fused call checks,
 * and two attribute queries per call were host time a decode-size call's GPU waited for. */
#define GEMM_OK_DEVICES 64
static int gemm_ok_cache[GEMM_OK_DEVICES];

extern "C" int mk_gemm_device_ok(void)
{
	int dev, major = 0, minor = 0, v;

	if (cudaGetDevice(&dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	v = dev >= 0 && dev < GEMM_OK_DEVICES ? __atomic_load_n(&gemm_ok_cache[dev], __ATOMIC_RELAXED)
					      : 0;
	if (v != 0)
		return v == 1;
	if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	v = major == 9 && minor == 0 ? 1 : 2;
	if (dev >= 0 && dev < GEMM_OK_DEVICES)
		__atomic_store_n(&gemm_ok_cache[dev], v, __ATOMIC_RELAXED);
	return v == 1;
}

static int gemm_encode_2d(CUtensorMap *map, const void *base, uint64_t inner, uint64_t outer,
			  uint64_t ld, uint32_t box_inner, uint32_t box_outer)
{
	cuuint64_t dims[2] = { inner, outer };
	cuuint64_t strides[1] = { ld * 2 };
	cuuint32_t box[2] = { box_inner, box_outer };
	cuuint32_t estr[2] = { 1, 1 };
	CUresult rc;

	rc = gemm_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box,
			 estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
			 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	return rc == CUDA_SUCCESS ? 0 : -EINVAL;
}

extern "C" int mk_gemm_make_tensor_maps(const void *a, const void *b, struct mk_gemm_args *args,
					struct mk_gemm_tmaps *maps)
{
	struct mk_gemm_epilogue *e = &args->epi;
	int rc;

	const uint32_t bm = (uint32_t)mk_gemm_tile_bm(args->tile);
	const uint32_t bn = (uint32_t)mk_gemm_tile_bn(args->tile);

	pthread_once(&gemm_once, gemm_resolve);
	if (gemm_encode == NULL)
		return -ENOSYS;
	memset(maps, 0, sizeof(*maps));
	rc = gemm_encode_2d(&maps->a, a, args->k, args->m, args->k, MK_GEMM_BK, bm);
	if (rc)
		return rc;
	if (args->b_layout == MK_GEMM_B_NK)
		rc = gemm_encode_2d(&maps->b, b, args->k, args->n, args->k, MK_GEMM_BK, bn);
	else
		rc = gemm_encode_2d(&maps->b, b, args->n, args->k, args->n, 64, MK_GEMM_BK);
	if (rc)
		return rc;
	/* Outputs TMA can store: plain store mode, 16-byte aligned, row stride a multiple of 8. */
	e->tma_mask = 0;
	for (int o = 0; o < MK_GEMM_MAX_OUT; o++) {
		if (e->out[o] == NULL || e->mode[o] != MK_GEMM_EPI_STORE ||
		    ((uintptr_t)e->out[o] & 15) || (e->ld[o] & 7) || gemm_no_tma_store)
			continue;
		if (gemm_encode_2d(&maps->c[o], e->out[o], args->n, args->m, e->ld[o],
				   MK_GEMM_C_BOX, MK_GEMM_C_BOX) == 0)
			e->tma_mask |= 1 << o;
	}
	return 0;
}

#define MK_GEMM_MAX_DEVICES 64

/* Per device: dynamic shared memory limit raised on every kernel, SM count cached. */
static int gemm_prepare_device(int *sms)
{
	static int ready[MK_GEMM_MAX_DEVICES];
	static int sm_count[MK_GEMM_MAX_DEVICES];
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MK_GEMM_MAX_DEVICES)
		return -EIO;
	if (!__atomic_load_n(&ready[dev], __ATOMIC_ACQUIRE)) {
		int n = 0;

		for (int t = 0; t < MK_GEMM_TILE_COUNT; t++) {
			const int bytes = MK_GEMM_SMEM_BYTES_OF(mk_gemm_tile_bm(t), mk_gemm_tile_bn(t));

			for (int l = 0; l < 2; l++) {
				if (cudaFuncSetAttribute((const void *)gemm_kernels[t][l],
							 cudaFuncAttributeMaxDynamicSharedMemorySize,
							 bytes) != cudaSuccess)
					return -EIO;
			}
		}
		if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
			return -EIO;
		sm_count[dev] = n;
		__atomic_store_n(&ready[dev], 1, __ATOMIC_RELEASE);
	}
	*sms = sm_count[dev];
	return 0;
}

extern "C" int mk_gemm_launch_prepared(const struct mk_gemm_args *args,
				       const struct mk_gemm_tmaps *maps, int ctas,
				       cudaStream_t stream)
{
	int sms, rc, grid, units, bm, bn;

	/* A split launch without its workspace would write through a null or stale pointer. */
	if (args->splits > 1 && (args->split_count == NULL || args->split_ws == NULL))
		return -EINVAL;
	rc = gemm_prepare_device(&sms);
	if (rc)
		return rc;
	bm = mk_gemm_tile_bm(args->tile);
	bn = mk_gemm_tile_bn(args->tile);
	units = args->tiles_m * args->tiles_n * (args->splits > 1 ? args->splits : 1);
	grid = ctas > 0 ? ctas : (units < sms ? units : sms);
	if (args->sched.counter == NULL && grid > units)
		grid = units;
	gemm_kernels[args->tile][args->b_layout == MK_GEMM_B_NK]<<<grid, MK_GEMM_THREADS_OF(bm),
								 MK_GEMM_SMEM_BYTES_OF(bm, bn),
								 stream>>>(*maps, *args);
	if (cudaGetLastError() != cudaSuccess)
		return -EIO;
	return 0;
}

extern "C" int mk_gemm_run(const struct mk_gemm_launch *l, cudaStream_t stream)
{
	struct mk_gemm_tmaps maps;
	struct mk_gemm_args args = l->args;
	int rc;

	rc = mk_gemm_check(l->a, l->b, &l->args, NULL);
	if (rc)
		return rc;
	rc = mk_gemm_make_tensor_maps(l->a, l->b, &args, &maps);
	if (rc)
		return rc;
	return mk_gemm_launch_prepared(&args, &maps, l->ctas, stream);
}
