/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GEMM engine's device side: a persistent, warp-specialised compute role that any kernel can
 * run in some of its CTAs. One CTA = 384 threads: warpgroup 0 is the producer (one thread issues
 * TMA loads into a MK_GEMM_STAGES-deep ring of shared-memory stages guarded by full/empty
 * mbarriers), warpgroups 1 and 2 are consumers (each owns 64 rows of the 128 x 256 tile, issues
 * m64n256k16 wgmma on fp32 register accumulators, then runs the epilogue hook). The producer
 * also runs the tile scheduler and hands each tile id to the consumers through a two-slot ring.
 *
 * Use from another kernel: launch with MK_GEMM_THREADS threads, __launch_bounds__(384, 1), at
 * least MK_GEMM_SMEM_BYTES of dynamic shared memory, and the struct mk_gemm_tmaps filled by
 * mk_gemm_make_tensor_maps() as a __grid_constant__ parameter (TMA reads tensor maps from
 * parameter space); then every thread of a compute-role CTA calls mk_gemm_role(). It returns when the scheduler gives this CTA no more tiles (tickets
 * exhausted or the SM budget says leave); the CTA may take another role and come back later.
 */
#ifndef MK_FUSED_GEMM_ENGINE_CUH
#define MK_FUSED_GEMM_ENGINE_CUH

#include <cuda_bf16.h>

#include "gemm.h"
#include "fused/common/ptx.cuh"
#include "fused/common/wait.cuh"
#include "fused/common/wgmma.cuh"

/* Register split after setmaxnreg: 128 x 56 + 256 x 224 = 64512 of the SM's 65536. */
#define MK_GEMM_PRODUCER_REGS 56
#define MK_GEMM_CONSUMER_REGS 224

/* MN-major B (K x N row-major): 64-column chunks are 8 KB apart (leading byte offset), groups of
 * 8 k-rows 1 KB apart (stride byte offset). */
#ifndef MK_GEMM_KN_LBO
#define MK_GEMM_KN_LBO (64 * MK_GEMM_BK * 2)
#endif
#ifndef MK_GEMM_KN_SBO
#define MK_GEMM_KN_SBO 1024
#endif

struct mk_gemm_smem {
	unsigned char a[MK_GEMM_STAGES][MK_GEMM_A_STAGE]; /* 1024-byte aligned (128B swizzle) */
	unsigned char b[MK_GEMM_STAGES][MK_GEMM_B_STAGE];
	unsigned char c[2][MK_GEMM_C_STAGE]; /* per consumer warpgroup: two 64 x 64 store boxes */
	uint64_t full[MK_GEMM_STAGES];	/* producer -> consumers: stage loaded (TMA tx count) */
	uint64_t empty[MK_GEMM_STAGES]; /* consumers -> producer: stage read (8 warps arrive) */
	uint64_t tile_full[2];		/* producer -> consumers: tile id published */
	uint64_t tile_empty[2];		/* consumers -> producer: tile id read (256 threads) */
	int tile_id[2];			/* -1 = no more tiles for this CTA */
};

/* Dynamic shared memory, aligned up to 1024 bytes inside the MK_GEMM_SMEM_BYTES allocation. */
static __device__ __forceinline__ struct mk_gemm_smem *mk_gemm_smem_of(void *dyn)
{
	uintptr_t p = ((uintptr_t)dyn + 1023) & ~(uintptr_t)1023;

	return (struct mk_gemm_smem *)p;
}

/* Ticket -> tile id for the default order: bands of MK_GEMM_GROUP_M tile rows, column-major in
 * a band, so one wave of CTAs shares A and B panels in L2. */
static __device__ __forceinline__ int mk_gemm_raster(int ticket, int tiles_m, int tiles_n)
{
	int per_band = MK_GEMM_GROUP_M * tiles_n;
	int band = ticket / per_band;
	int first_m = band * MK_GEMM_GROUP_M;
	int rows = min(tiles_m - first_m, MK_GEMM_GROUP_M);
	int in_band = ticket - band * per_band;
	int tm = first_m + in_band % rows;
	int tn = in_band / rows;

	return tm * tiles_n + tn;
}

/* The scheduler: next tile id for the role CTA of rank `rank` among `count`, or -1. */
static __device__ __forceinline__ int mk_gemm_next_tile(const struct mk_gemm_args *g, int rank,
							int count, int *iter)
{
	int tiles = g->tiles_m * g->tiles_n;
	int ticket;

	if (g->sched.counter == NULL) {
		ticket = rank + (*iter) * count;
		(*iter)++;
	} else {
		if (g->sched.active != NULL && rank > 0 &&
		    rank >= mk_ld_relaxed_gpu_s32(g->sched.active))
			return -1;
		ticket = (int)atomicAdd(g->sched.counter, 1u);
	}
	if (ticket >= tiles)
		return -1;
	if (g->sched.order != NULL)
		return g->sched.order[ticket];
	return mk_gemm_raster(ticket, g->tiles_m, g->tiles_n);
}

/*
 * The producer's wait for tile row tm's A rows (struct mk_gemm_a_wait): the common bounded wait
 * (acquire at system scope, backing off as it grows, so that dozens of waiting producers do not
 * slow the SMs that compute). On a timeout or an error it records -ETIMEDOUT (if nothing was
 * recorded) and computes on. Then a proxy fence: the TMA loads that follow run in the async
 * proxy and must see the generic-proxy stores the flag announced.
 */
static __device__ __forceinline__ void mk_gemm_wait_a(const struct mk_gemm_a_wait *w, int tm)
{
	if (mk_dev_wait_u32_ge(&w->ready[tm], w->want[tm], w->error, w->timeout_ns) != 0)
		mk_dev_record_error(w->error, -MK_DEV_ETIMEDOUT);
	mk_fence_proxy_async_global();
}

static __device__ __forceinline__ void mk_gemm_producer(const struct mk_gemm_args *g,
							const struct mk_gemm_tmaps *maps, int rank,
							int count, struct mk_gemm_smem *s)
{
	const int nk = (g->k + MK_GEMM_BK - 1) / MK_GEMM_BK;
	uint32_t stage = 0, phase = 0, titer = 0;
	const void *tmap_a = &maps->a, *tmap_b = &maps->b;
	int iter = 0;

	mk_tma_prefetch_desc(tmap_a);
	mk_tma_prefetch_desc(tmap_b);
	for (;;) {
		int tile = mk_gemm_next_tile(g, rank, count, &iter);
		uint32_t slot = titer & 1;

		mk_mbar_wait(&s->tile_empty[slot], ((titer >> 1) & 1) ^ 1);
		s->tile_id[slot] = tile;
		mk_mbar_arrive(&s->tile_full[slot]);
		titer++;
		if (tile < 0)
			break;

		int m0 = (tile / g->tiles_n) * MK_GEMM_BM;
		int n0 = (tile % g->tiles_n) * MK_GEMM_BN;

		if (g->sched.a_wait.ready != NULL)
			mk_gemm_wait_a(&g->sched.a_wait, tile / g->tiles_n);
		for (int kb = 0; kb < nk; kb++) {
			int k0 = kb * MK_GEMM_BK;

			mk_mbar_wait(&s->empty[stage], phase ^ 1);
			mk_mbar_arrive_expect_tx(&s->full[stage], MK_GEMM_A_STAGE + MK_GEMM_B_STAGE);
			mk_tma_load_2d(s->a[stage], tmap_a, &s->full[stage], k0, m0);
			if (g->b_layout == MK_GEMM_B_NK) {
				mk_tma_load_2d(s->b[stage], tmap_b, &s->full[stage], k0, n0);
			} else {
#pragma unroll
				for (int j = 0; j < MK_GEMM_BN / 64; j++)
					mk_tma_load_2d(s->b[stage] + j * (64 * MK_GEMM_BK * 2), tmap_b,
						       &s->full[stage], n0 + 64 * j, k0);
			}
			if (++stage == MK_GEMM_STAGES) {
				stage = 0;
				phase ^= 1;
			}
		}
	}
}

static __device__ __forceinline__ uint32_t mk_gemm_pack_bf16x2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

/* Combine a pair of adjacent outputs into memory: p is 4-byte aligned. */
static __device__ __forceinline__ void mk_gemm_epi_pair(__nv_bfloat16 *p, int mode, float v0,
							float v1)
{
	if (mode == MK_GEMM_EPI_STORE) {
		*(uint32_t *)p = mk_gemm_pack_bf16x2(v0, v1);
	} else if (mode == MK_GEMM_EPI_ACCUMULATE) {
		float2 f = __bfloat1622float2(*(__nv_bfloat162 *)p);

		*(uint32_t *)p = mk_gemm_pack_bf16x2(f.x + v0, f.y + v1);
	} else {
		mk_red_add_bf16x2(p, mk_gemm_pack_bf16x2(v0, v1));
	}
}

/* One output element (edge columns, odd row strides). */
static __device__ __forceinline__ void mk_gemm_epi_one(__nv_bfloat16 *p, int mode, float v)
{
	if (mode == MK_GEMM_EPI_STORE)
		*p = __float2bfloat16_rn(v);
	else if (mode == MK_GEMM_EPI_ACCUMULATE)
		*p = __float2bfloat16_rn(__bfloat162float(*p) + v);
	else
		atomicAdd(p, __float2bfloat16_rn(v));
}

/*
 * The per-tile epilogue hook: write the consumer warpgroup's 64 x 256 fp32 slice to every
 * destination. wgmma accumulator layout: warp w of the warpgroup holds rows 16w .. 16w+15; lane
 * l holds, for each 8-column block j, columns 8j + 2(l%4) + {0,1} of rows l/4 and l/4 + 8 in
 * d[4j .. 4j+1] and d[4j+2 .. 4j+3]. `row0`, `col0` are this thread's first row and column.
 */
static __device__ __forceinline__ void mk_gemm_epilogue_store(const struct mk_gemm_args *g,
							      const float *acc, int row0, int col0)
{
	const struct mk_gemm_epilogue *e = &g->epi;

#pragma unroll 1
	for (int o = 0; o < MK_GEMM_MAX_OUT; o++) {
		__nv_bfloat16 *out = (__nv_bfloat16 *)e->out[o];
		long long ld = e->ld[o];
		int mode = e->mode[o];

		if (out == NULL || (e->tma_mask & (1 << o)))
			continue;

		int paired = ((ld & 1) == 0) && (((uintptr_t)out & 3) == 0);
		int ncols = g->n - col0; /* columns left from this thread's first one */
		__nv_bfloat16 *p0 = out + (long long)row0 * ld + col0;
		__nv_bfloat16 *p1 = p0 + 8 * ld;
		int r0 = row0 < g->m, r1 = row0 + 8 < g->m;

		if (paired && ncols >= MK_GEMM_BN - 6) {
#pragma unroll
			for (int j = 0; j < MK_GEMM_BN / 8; j++) {
				if (r0)
					mk_gemm_epi_pair(p0 + 8 * j, mode, acc[4 * j], acc[4 * j + 1]);
				if (r1)
					mk_gemm_epi_pair(p1 + 8 * j, mode, acc[4 * j + 2],
							 acc[4 * j + 3]);
			}
			continue;
		}
#pragma unroll
		for (int j = 0; j < MK_GEMM_BN / 8; j++) {
			int c = 8 * j;

			if (c >= ncols)
				break;
			if (paired && c + 1 < ncols) {
				if (r0)
					mk_gemm_epi_pair(p0 + c, mode, acc[4 * j], acc[4 * j + 1]);
				if (r1)
					mk_gemm_epi_pair(p1 + c, mode, acc[4 * j + 2], acc[4 * j + 3]);
				continue;
			}
			if (r0)
				mk_gemm_epi_one(p0 + c, mode, acc[4 * j]);
			if (r1)
				mk_gemm_epi_one(p1 + c, mode, acc[4 * j + 2]);
			if (c + 1 < ncols) {
				if (r0)
					mk_gemm_epi_one(p0 + c + 1, mode, acc[4 * j + 1]);
				if (r1)
					mk_gemm_epi_one(p1 + c + 1, mode, acc[4 * j + 3]);
			}
		}
	}
}

/*
 * TMA-store epilogue for the destinations in epi.tma_mask: the warpgroup writes its 64 x 256
 * slice as bf16 into its 16 KB shared buffer in two halves of 64 x 128 (two 64 x 64 boxes with
 * the 128-byte swizzle, so the 8 rows a warp writes at once hit 8 different bank groups), then
 * one thread issues the bulk tensor stores. Stores run on while the next tile's mainloop starts;
 * a buffer is only rewritten after its previous stores have read it. TMA clips rows >= M and
 * columns >= N. `r` is this thread's row in the slice (0..63), q = lane % 4.
 */
static __device__ __forceinline__ void mk_gemm_epilogue_tma(const struct mk_gemm_args *g,
							    const struct mk_gemm_tmaps *maps,
							    const float *acc, struct mk_gemm_smem *s,
							    int cwg, int m0, int n0, int r, int q)
{
	const int lead = (threadIdx.x & 127) == 0;
	const uint32_t buf = mk_smem_u32(s->c[cwg]);
	const int mask = g->epi.tma_mask;

#pragma unroll
	for (int h = 0; h < 2; h++) {
		if (lead)
			mk_bulk_wait_read_all();
		mk_named_bar_sync(2 + cwg, 128);
#pragma unroll
		for (int jj = 0; jj < 16; jj++) {
			int j = 16 * h + jj;
			uint32_t box = buf + (jj >> 3) * (MK_GEMM_C_BOX * MK_GEMM_C_BOX * 2);
			uint32_t chunk = (uint32_t)(jj & 7);
			uint32_t a0 = box + r * 128 + ((chunk ^ (r & 7)) << 4) + 4 * q;
			uint32_t a1 = box + (r + 8) * 128 + ((chunk ^ ((r + 8) & 7)) << 4) + 4 * q;

			mk_st_shared_u32(a0, mk_gemm_pack_bf16x2(acc[4 * j], acc[4 * j + 1]));
			mk_st_shared_u32(a1, mk_gemm_pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]));
		}
		mk_fence_proxy_async_shared();
		mk_named_bar_sync(2 + cwg, 128);
		if (lead) {
#pragma unroll
			for (int o = 0; o < MK_GEMM_MAX_OUT; o++) {
				if (!(mask & (1 << o)))
					continue;
				for (int b = 0; b < 2; b++)
					mk_tma_store_2d(&maps->c[o],
							s->c[cwg] + b * (MK_GEMM_C_BOX * MK_GEMM_C_BOX * 2),
							n0 + 128 * h + 64 * b, m0);
			}
			mk_bulk_commit();
		}
	}
}

/* Raise the tile's ready flag once every consumer thread's stores are visible at `scope`. */
static __device__ __forceinline__ void mk_gemm_publish(const struct mk_gemm_epilogue *e, int tile)
{
	if (e->ready == NULL)
		return;
	if (e->tma_mask && (threadIdx.x & 127) == 0) {
		mk_bulk_wait_all();
		mk_fence_proxy_async_global();
	}
	/*
	 * One fence by the flag's writer, after the barrier: the barrier orders every consumer
	 * thread's stores before it, and the fence plus release make them visible at the scope
	 * (a fence.sys per thread cost microseconds per tile).
	 */
	mk_named_bar_sync(1, 2 * 128);
	if (threadIdx.x == 128) {
		if (e->ready_scope == MK_GEMM_FLAG_SYS) {
			mk_fence_acq_rel_sys();
			mk_red_release_sys_add_u32(&e->ready[tile], 1);
		} else {
			mk_fence_acq_rel_gpu();
			mk_red_release_gpu_add_u32(&e->ready[tile], 1);
		}
	}
}

static __device__ __forceinline__ void mk_gemm_consumer(const struct mk_gemm_args *g,
							const struct mk_gemm_tmaps *maps, int cwg,
							struct mk_gemm_smem *s, const int b_nk)
{
	const int nk = (g->k + MK_GEMM_BK - 1) / MK_GEMM_BK;
	const int warp = (threadIdx.x & 127) >> 5;
	const int lane = threadIdx.x & 31;
	uint32_t stage = 0, phase = 0, titer = 0;
	float acc[128];

	for (;;) {
		uint32_t slot = titer & 1;
		int tile;

		mk_mbar_wait(&s->tile_full[slot], (titer >> 1) & 1);
		tile = *(volatile int *)&s->tile_id[slot];
		mk_mbar_arrive(&s->tile_empty[slot]);
		titer++;
		if (tile < 0)
			break;

		uint32_t prev = 0;

		for (int kb = 0; kb < nk; kb++) {
			uint32_t a_base = mk_smem_u32(s->a[stage]) + cwg * (64 * 128);
			uint32_t b_base = mk_smem_u32(s->b[stage]);

			mk_mbar_wait(&s->full[stage], phase);
			mk_wgmma_fence();
#pragma unroll
			for (int kk = 0; kk < MK_GEMM_BK / 16; kk++) {
				uint64_t da = mk_wgmma_desc_sw128(a_base + kk * 32, 16, 1024);
				uint32_t acc_on = (kb > 0 || kk > 0);

				if (b_nk) {
					uint64_t db = mk_wgmma_desc_sw128(b_base + kk * 32, 16, 1024);

					mk_wgmma_m64n256k16_bk(acc, da, db, acc_on);
				} else {
					/* MN-major: a k16 step is 16 rows of 128 bytes. */
					uint64_t db = mk_wgmma_desc_sw128(b_base + kk * 2048,
									  MK_GEMM_KN_LBO,
									  MK_GEMM_KN_SBO);

					mk_wgmma_m64n256k16_bmn(acc, da, db, acc_on);
				}
			}
			mk_wgmma_commit();
			/* Keep one stage of wgmma in flight; the one before it is done reading. */
			mk_wgmma_wait(1);
			if (kb > 0 && lane == 0)
				mk_mbar_arrive(&s->empty[prev]);
			prev = stage;
			if (++stage == MK_GEMM_STAGES) {
				stage = 0;
				phase ^= 1;
			}
		}
		mk_wgmma_wait(0);
		if (lane == 0)
			mk_mbar_arrive(&s->empty[prev]);

		int m0 = (tile / g->tiles_n) * MK_GEMM_BM + cwg * 64;
		int n0 = (tile % g->tiles_n) * MK_GEMM_BN;
		int r = warp * 16 + (lane >> 2);

		if (g->epi.tma_mask)
			mk_gemm_epilogue_tma(g, maps, acc, s, cwg, m0, n0, r, lane & 3);
		mk_gemm_epilogue_store(g, acc, m0 + r, n0 + 2 * (lane & 3));
		mk_gemm_publish(&g->epi, tile);
	}
	/* Shared memory must outlive the bulk stores that read it. */
	if ((threadIdx.x & 127) == 0)
		mk_bulk_wait_all();
}

/*
 * The compute role. All MK_GEMM_THREADS threads of the CTA call it; `rank` / `count` place this
 * CTA among the compute-role CTAs (static scheduling uses them; dynamic scheduling uses rank for
 * the SM budget). `dyn_smem` is the kernel's dynamic shared memory (MK_GEMM_SMEM_BYTES).
 */
static __device__ __forceinline__ void mk_gemm_role(const struct mk_gemm_args *g,
						    const struct mk_gemm_tmaps *maps, int rank,
						    int count, void *dyn_smem, const int b_nk)
{
	struct mk_gemm_smem *s = mk_gemm_smem_of(dyn_smem);
	const int wg = threadIdx.x >> 7;

	if (threadIdx.x == 0) {
		for (int i = 0; i < MK_GEMM_STAGES; i++) {
			mk_mbar_init(&s->full[i], 1);
			mk_mbar_init(&s->empty[i], 2 * 4);
		}
		for (int i = 0; i < 2; i++) {
			mk_mbar_init(&s->tile_full[i], 1);
			mk_mbar_init(&s->tile_empty[i], 2 * 128);
		}
		mk_fence_mbar_init();
	}
	__syncthreads();

	if (wg == 0) {
		mk_setmaxnreg_dec(MK_GEMM_PRODUCER_REGS);
		if (threadIdx.x == 0)
			mk_gemm_producer(g, maps, rank, count, s);
	} else {
		mk_setmaxnreg_inc(MK_GEMM_CONSUMER_REGS);
		mk_gemm_consumer(g, maps, wg - 1, s, b_nk);
	}
}

#endif /* MK_FUSED_GEMM_ENGINE_CUH */
