/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GEMM engine's device side: a persistent, warp-specialised compute role that any kernel can
 * run in some of its CTAs. One CTA = a producer warpgroup (one thread issues TMA loads into a
 * ring of shared-memory stages guarded by full/empty mbarriers and runs the tile scheduler) and
 * one or two consumer warpgroups (each owns 64 rows of the tile, issues m64n256k16 or m64n128k16
 * wgmma on fp32 register accumulators, then runs the epilogue). Tile ids reach the consumers
 * through a two-slot ring.
 *
 * Variants (gemm.h, enum mk_gemm_tile) are template instances of the same code: BM = 64 or 128
 * rows (consumer warpgroups), BN = 128 or 256 columns, and the pipeline depth that fits. With
 * split-K each tile is several work units over contiguous k-block ranges; the unit that
 * finishes a tile last adds every unit's fp32 partial in split order and runs the epilogue
 * (mk_gemm_split_fixup), so results do not depend on which CTA computes what.
 *
 * Use from another kernel: launch with MK_GEMM_THREADS threads, __launch_bounds__(384, 1), at
 * least MK_GEMM_SMEM_BYTES of dynamic shared memory, and the struct mk_gemm_tmaps filled by
 * mk_gemm_make_tensor_maps() as a __grid_constant__ parameter (TMA reads tensor maps from
 * parameter space); then every thread of a compute-role CTA calls mk_gemm_role() (the default
 * 128 x 256 variant; mk_gemm_role_t<> for the others, with their thread count and shared memory).
 * It returns when the scheduler gives this CTA no more tiles (tickets exhausted or the SM budget
 * says leave); the CTA may take another role and come back later.
 */
#ifndef MK_FUSED_GEMM_ENGINE_CUH
#define MK_FUSED_GEMM_ENGINE_CUH

#include <cuda_bf16.h>

#include "gemm.h"
#include "fused/common/ptx.cuh"
#include "fused/common/wait.cuh"
#include "fused/common/wgmma.cuh"

/* Register split after setmaxnreg (two consumer warpgroups): 128 x 56 + 256 x 224 = 64512 of
 * the SM's 65536. One consumer warpgroup (256 threads) needs no reallocation: 255 each. */
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

/* The default variant's shared memory as a struct (kept for code that names its fields; the
 * engine itself uses the carve below, which gives the same offsets for 128 x 256). */
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

/* One variant's shared memory: stage s of A at a + s * MK_GEMM_A_STAGE_OF(BM), of B likewise;
 * every stage size is a multiple of 1024 bytes (128-byte swizzle atoms). */
struct mk_gemm_sm {
	unsigned char *a, *b, *c;
	uint64_t *full, *empty, *tile_full, *tile_empty;
	int *tile_id; /* [2] */
	int *last;    /* split-K: this CTA finished the tile (consumer threads share it) */
};

template <int BM, int BN> static __device__ __forceinline__ struct mk_gemm_sm mk_gemm_carve(void *dyn)
{
	constexpr int ST = MK_GEMM_STAGES_OF(BM, BN);
	unsigned char *p = (unsigned char *)(((uintptr_t)dyn + 1023) & ~(uintptr_t)1023);
	struct mk_gemm_sm s;

	s.a = p;
	s.b = s.a + ST * MK_GEMM_A_STAGE_OF(BM);
	s.c = s.b + ST * MK_GEMM_B_STAGE_OF(BN);
	s.full = (uint64_t *)(s.c + MK_GEMM_CWG_OF(BM) * MK_GEMM_C_STAGE);
	s.empty = s.full + ST;
	s.tile_full = s.empty + ST;
	s.tile_empty = s.tile_full + 2;
	s.tile_id = (int *)(s.tile_empty + 2);
	s.last = s.tile_id + 2;
	return s;
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

static __device__ __forceinline__ int mk_gemm_splits(const struct mk_gemm_args *g)
{
	return g->splits > 1 ? g->splits : 1;
}

/*
 * The scheduler: next work unit (tile id * splits + split) for the role CTA of rank `rank`
 * among `count`, or -1. Without splits a unit is a tile id. The splits of one tile take
 * consecutive tickets, so they run at the same time on neighbouring CTAs.
 */
static __device__ __forceinline__ int mk_gemm_next_tile(const struct mk_gemm_args *g, int rank,
							int count, int *iter)
{
	const int splits = mk_gemm_splits(g);
	const int units = g->tiles_m * g->tiles_n * splits;
	int ticket, ti, tile;

	if (g->sched.counter == NULL) {
		ticket = rank + (*iter) * count;
		(*iter)++;
	} else {
		if (g->sched.active != NULL && rank > 0 &&
		    rank >= mk_ld_relaxed_gpu_s32(g->sched.active))
			return -1;
		ticket = (int)atomicAdd(g->sched.counter, 1u);
	}
	if (ticket >= units)
		return -1;
	ti = ticket / splits;
	if (g->sched.order != NULL)
		tile = g->sched.order[ti];
	else
		tile = mk_gemm_raster(ti, g->tiles_m, g->tiles_n);
	return tile * splits + (ticket - ti * splits);
}

/*
 * The producer's wait for tile row tm's A rows (struct mk_gemm_a_wait): the common bounded wait
 * (acquire at system scope, backing off as it grows, so that dozens of waiting producers do not
 * slow the SMs that compute). On a timeout or an error it records -ETIMEDOUT (if nothing was
 * recorded) and computes on. Then a proxy fence: the TMA loads that follow run in the async
 * proxy and must see the generic-proxy stores the flag announced. Tile rows are the variant's
 * (BM rows each).
 */
static __device__ __forceinline__ void mk_gemm_wait_a(const struct mk_gemm_a_wait *w, int tm)
{
	if (mk_dev_wait_u32_ge(&w->ready[tm], w->want[tm], w->error, w->timeout_ns) != 0)
		mk_dev_record_error(w->error, -MK_DEV_ETIMEDOUT);
	mk_fence_proxy_async_global();
}

/* The k-blocks [*kb0, *kb1) of split `sp` out of `splits` over nk blocks (none empty when
 * splits <= nk, which mk_gemm_check() enforces). */
static __device__ __forceinline__ void mk_gemm_k_range(int nk, int sp, int splits, int *kb0,
						       int *kb1)
{
	*kb0 = (int)((long long)sp * nk / splits);
	*kb1 = (int)((long long)(sp + 1) * nk / splits);
}

template <int BM, int BN>
static __device__ __forceinline__ void mk_gemm_producer_t(const struct mk_gemm_args *g,
							  const struct mk_gemm_tmaps *maps, int rank,
							  int count, const struct mk_gemm_sm *s)
{
	constexpr int ST = MK_GEMM_STAGES_OF(BM, BN);
	constexpr uint32_t A_BYTES = MK_GEMM_A_STAGE_OF(BM), B_BYTES = MK_GEMM_B_STAGE_OF(BN);
	const int nk = (g->k + MK_GEMM_BK - 1) / MK_GEMM_BK;
	const int splits = mk_gemm_splits(g);
	uint32_t stage = 0, phase = 0, titer = 0;
	const void *tmap_a = &maps->a, *tmap_b = &maps->b;
	int iter = 0;

	mk_tma_prefetch_desc(tmap_a);
	mk_tma_prefetch_desc(tmap_b);
	for (;;) {
		int unit = mk_gemm_next_tile(g, rank, count, &iter);
		uint32_t slot = titer & 1;

		mk_mbar_wait(&s->tile_empty[slot], ((titer >> 1) & 1) ^ 1);
		s->tile_id[slot] = unit;
		mk_mbar_arrive(&s->tile_full[slot]);
		titer++;
		if (unit < 0)
			break;

		const int tile = unit / splits;
		int kb0, kb1;
		int m0 = (tile / g->tiles_n) * BM;
		int n0 = (tile % g->tiles_n) * BN;

		mk_gemm_k_range(nk, unit - tile * splits, splits, &kb0, &kb1);
		if (g->sched.a_wait.ready != NULL)
			mk_gemm_wait_a(&g->sched.a_wait, tile / g->tiles_n);
		for (int kb = kb0; kb < kb1; kb++) {
			int k0 = kb * MK_GEMM_BK;
			unsigned char *sa = s->a + stage * A_BYTES, *sb = s->b + stage * B_BYTES;

			mk_mbar_wait(&s->empty[stage], phase ^ 1);
			mk_mbar_arrive_expect_tx(&s->full[stage], A_BYTES + B_BYTES);
			mk_tma_load_2d(sa, tmap_a, &s->full[stage], k0, m0);
			if (g->b_layout == MK_GEMM_B_NK) {
				mk_tma_load_2d(sb, tmap_b, &s->full[stage], k0, n0);
			} else {
#pragma unroll
				for (int j = 0; j < BN / 64; j++)
					mk_tma_load_2d(sb + j * (64 * MK_GEMM_BK * 2), tmap_b,
						       &s->full[stage], n0 + 64 * j, k0);
			}
			if (++stage == ST) {
				stage = 0;
				phase ^= 1;
			}
		}
	}
}

/* The default variant's producer (kept for callers of the original interface). */
static __device__ __forceinline__ void mk_gemm_producer(const struct mk_gemm_args *g,
							const struct mk_gemm_tmaps *maps, int rank,
							int count, struct mk_gemm_smem *s)
{
	struct mk_gemm_sm sm = mk_gemm_carve<MK_GEMM_BM, MK_GEMM_BN>(s);

	mk_gemm_producer_t<MK_GEMM_BM, MK_GEMM_BN>(g, maps, rank, count, &sm);
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
 * The per-tile epilogue hook: write the consumer warpgroup's 64 x BN fp32 slice to every
 * destination. wgmma accumulator layout: warp w of the warpgroup holds rows 16w .. 16w+15; lane
 * l holds, for each 8-column block j, columns 8j + 2(l%4) + {0,1} of rows l/4 and l/4 + 8 in
 * d[4j .. 4j+1] and d[4j+2 .. 4j+3]. `row0`, `col0` are this thread's first row and column.
 */
template <int BN>
static __device__ __forceinline__ void mk_gemm_epilogue_store_t(const struct mk_gemm_args *g,
								const float *acc, int row0,
								int col0)
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

		if (paired && ncols >= BN - 6) {
#pragma unroll
			for (int j = 0; j < BN / 8; j++) {
				if (r0)
					mk_gemm_epi_pair(p0 + 8 * j, mode, acc[4 * j], acc[4 * j + 1]);
				if (r1)
					mk_gemm_epi_pair(p1 + 8 * j, mode, acc[4 * j + 2],
							 acc[4 * j + 3]);
			}
			continue;
		}
#pragma unroll
		for (int j = 0; j < BN / 8; j++) {
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

static __device__ __forceinline__ void mk_gemm_epilogue_store(const struct mk_gemm_args *g,
							      const float *acc, int row0, int col0)
{
	mk_gemm_epilogue_store_t<MK_GEMM_BN>(g, acc, row0, col0);
}

/*
 * TMA-store epilogue for the destinations in epi.tma_mask: the warpgroup writes its 64 x BN
 * slice as bf16 into its 16 KB shared buffer in halves of 64 x 128 (two 64 x 64 boxes with the
 * 128-byte swizzle, so the 8 rows a warp writes at once hit 8 different bank groups), then one
 * thread issues the bulk tensor stores. Stores run on while the next tile's mainloop starts; a
 * buffer is only rewritten after its previous stores have read it. TMA clips rows >= M and
 * columns >= N. `r` is this thread's row in the slice (0..63), q = lane % 4.
 */
template <int BN>
static __device__ __forceinline__ void mk_gemm_epilogue_tma_t(const struct mk_gemm_args *g,
							      const struct mk_gemm_tmaps *maps,
							      const float *acc, unsigned char *cbuf,
							      int cwg, int m0, int n0, int r, int q)
{
	const int lead = (threadIdx.x & 127) == 0;
	const uint32_t buf = mk_smem_u32(cbuf);
	const int mask = g->epi.tma_mask;

#pragma unroll
	for (int h = 0; h < BN / 128; h++) {
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
							cbuf + b * (MK_GEMM_C_BOX * MK_GEMM_C_BOX * 2),
							n0 + 128 * h + 64 * b, m0);
			}
			mk_bulk_commit();
		}
	}
}

/* The default variant's TMA-store epilogue (kept for callers of the original interface). */
static __device__ __forceinline__ void mk_gemm_epilogue_tma(const struct mk_gemm_args *g,
							    const struct mk_gemm_tmaps *maps,
							    const float *acc, struct mk_gemm_smem *s,
							    int cwg, int m0, int n0, int r, int q)
{
	mk_gemm_epilogue_tma_t<MK_GEMM_BN>(g, maps, acc, s->c[cwg], cwg, m0, n0, r, q);
}

/* Raise the tile's ready flag once every consumer thread's stores are visible at `scope`. */
template <int BM>
static __device__ __forceinline__ void mk_gemm_publish_t(const struct mk_gemm_epilogue *e,
							 int tile)
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
	mk_named_bar_sync(1, MK_GEMM_CWG_OF(BM) * 128);
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

static __device__ __forceinline__ void mk_gemm_publish(const struct mk_gemm_epilogue *e, int tile)
{
	mk_gemm_publish_t<MK_GEMM_BM>(e, tile);
}

/*
 * Split-K: store this unit's partial of the consumer warpgroup's 64 x BN slice (warps whose 16
 * rows are all past M store nothing), count the unit, and if it was the tile's last, replace
 * acc by the sum of every split's partial in split order. Returns 1 when acc holds the tile's
 * sum (run the epilogue), 0 when another unit will. Every consumer thread of the CTA calls it.
 *
 * Ordering: partial stores, a fence per thread, a barrier of the consumer threads, then one
 * thread counts (the release pattern of the CUDA guide's last-block reduction); the thread that
 * sees the count complete fences before the barrier that lets its CTA read (acquire). Partials
 * are read through L2 (ld.cg): another SM wrote them.
 */
template <int BM, int BN>
static __device__ __forceinline__ int mk_gemm_split_fixup(const struct mk_gemm_args *g, float *acc,
							  int tile, int sp, int cwg, int row0,
							  const struct mk_gemm_sm *s)
{
	constexpr int NACC = BN / 2;
	constexpr int CWG = MK_GEMM_CWG_OF(BM);
	const int splits = mk_gemm_splits(g);
	const int warp = (threadIdx.x & 127) >> 5, lane = threadIdx.x & 31;
	const size_t warp_floats = 32 * NACC;
	const bool has_rows = row0 + 16 * warp < g->m;
	const size_t slot0 = ((size_t)tile * splits * CWG + cwg) * 4 + warp;
	const size_t stride = (size_t)CWG * 4 * warp_floats; /* from one split to the next */
	float *mine = g->split_ws + slot0 * warp_floats + (size_t)sp * stride;

	if (has_rows) {
#pragma unroll
		for (int q = 0; q < NACC / 4; q++)
			*(float4 *)(mine + ((size_t)q * 32 + lane) * 4) =
				make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
	}
	__threadfence();
	mk_named_bar_sync(1, CWG * 128);
	if (threadIdx.x == 128) {
		const unsigned int seen = atomicAdd(&g->split_count[tile], 1u);
		const int last = seen == (unsigned int)splits - 1;

		if (last) {
			atomicExch(&g->split_count[tile], 0u); /* ready for the next launch */
			__threadfence();
		}
		*(volatile int *)s->last = last;
	}
	mk_named_bar_sync(1, CWG * 128);
	if (!*(volatile int *)s->last)
		return 0;
	if (!has_rows)
		return 1; /* rows past M: nothing of them is stored */
#pragma unroll
	for (int q = 0; q < NACC; q++)
		acc[q] = 0.0f;
#pragma unroll 1
	for (int p = 0; p < splits; p++) {
		const float *src = g->split_ws + slot0 * warp_floats + (size_t)p * stride;

#pragma unroll
		for (int q = 0; q < NACC / 4; q++) {
			const float4 v = __ldcg((const float4 *)(src + ((size_t)q * 32 + lane) * 4));

			acc[4 * q] += v.x;
			acc[4 * q + 1] += v.y;
			acc[4 * q + 2] += v.z;
			acc[4 * q + 3] += v.w;
		}
	}
	return 1;
}

/* One k16 step of the tile's wgmma: BN columns, B K-major (N x K) or MN-major (K x N). */
template <int BN, int B_NK>
static __device__ __forceinline__ void mk_gemm_mma(float *acc, uint64_t da, uint32_t b_base,
						   int kk, uint32_t acc_on)
{
	uint64_t db;

	if (B_NK)
		db = mk_wgmma_desc_sw128(b_base + kk * 32, 16, 1024);
	else /* MN-major: a k16 step is 16 rows of 128 bytes. */
		db = mk_wgmma_desc_sw128(b_base + kk * 2048, MK_GEMM_KN_LBO, MK_GEMM_KN_SBO);
	if constexpr (BN == 256) {
		if (B_NK)
			mk_wgmma_m64n256k16_bk(acc, da, db, acc_on);
		else
			mk_wgmma_m64n256k16_bmn(acc, da, db, acc_on);
	} else {
		if (B_NK)
			mk_wgmma_m64n128k16_bk(acc, da, db, acc_on);
		else
			mk_wgmma_m64n128k16_bmn(acc, da, db, acc_on);
	}
}

template <int BM, int BN, int B_NK>
static __device__ __forceinline__ void mk_gemm_consumer_t(const struct mk_gemm_args *g,
							  const struct mk_gemm_tmaps *maps, int cwg,
							  const struct mk_gemm_sm *s)
{
	constexpr int ST = MK_GEMM_STAGES_OF(BM, BN);
	constexpr uint32_t A_BYTES = MK_GEMM_A_STAGE_OF(BM), B_BYTES = MK_GEMM_B_STAGE_OF(BN);
	const int nk = (g->k + MK_GEMM_BK - 1) / MK_GEMM_BK;
	const int splits = mk_gemm_splits(g);
	const int warp = (threadIdx.x & 127) >> 5;
	const int lane = threadIdx.x & 31;
	uint32_t stage = 0, phase = 0, titer = 0;
	float acc[BN / 2];

	for (;;) {
		uint32_t slot = titer & 1;
		int unit;

		mk_mbar_wait(&s->tile_full[slot], (titer >> 1) & 1);
		unit = *(volatile int *)&s->tile_id[slot];
		mk_mbar_arrive(&s->tile_empty[slot]);
		titer++;
		if (unit < 0)
			break;

		const int tile = unit / splits, sp = unit - tile * splits;
		uint32_t prev = 0;
		int kb0, kb1;

		mk_gemm_k_range(nk, sp, splits, &kb0, &kb1);
		for (int kb = kb0; kb < kb1; kb++) {
			uint32_t a_base = mk_smem_u32(s->a + stage * A_BYTES) + cwg * (64 * 128);
			uint32_t b_base = mk_smem_u32(s->b + stage * B_BYTES);

			mk_mbar_wait(&s->full[stage], phase);
			mk_wgmma_fence();
#pragma unroll
			for (int kk = 0; kk < MK_GEMM_BK / 16; kk++) {
				uint64_t da = mk_wgmma_desc_sw128(a_base + kk * 32, 16, 1024);

				mk_gemm_mma<BN, B_NK>(acc, da, b_base, kk, kb > kb0 || kk > 0);
			}
			mk_wgmma_commit();
			/* Keep one stage of wgmma in flight; the one before it is done reading. */
			mk_wgmma_wait(1);
			if (kb > kb0 && lane == 0)
				mk_mbar_arrive(&s->empty[prev]);
			prev = stage;
			if (++stage == ST) {
				stage = 0;
				phase ^= 1;
			}
		}
		mk_wgmma_wait(0);
		if (lane == 0)
			mk_mbar_arrive(&s->empty[prev]);

		int m0 = (tile / g->tiles_n) * BM + cwg * 64;
		int n0 = (tile % g->tiles_n) * BN;
		int r = warp * 16 + (lane >> 2);

		if (splits > 1 && !mk_gemm_split_fixup<BM, BN>(g, acc, tile, sp, cwg, m0, s))
			continue;
		if (g->epi.tma_mask)
			mk_gemm_epilogue_tma_t<BN>(g, maps, acc, s->c + cwg * MK_GEMM_C_STAGE, cwg,
						   m0, n0, r, lane & 3);
		mk_gemm_epilogue_store_t<BN>(g, acc, m0 + r, n0 + 2 * (lane & 3));
		mk_gemm_publish_t<BM>(&g->epi, tile);
	}
	/* Shared memory must outlive the bulk stores that read it. */
	if ((threadIdx.x & 127) == 0)
		mk_bulk_wait_all();
}

/*
 * The compute role of a variant. All MK_GEMM_THREADS_OF(BM) threads of the CTA call it; `rank` /
 * `count` place this CTA among the compute-role CTAs (static scheduling uses them; dynamic
 * scheduling uses rank for the SM budget). `dyn_smem` is the kernel's dynamic shared memory
 * (at least MK_GEMM_SMEM_BYTES_OF(BM, BN)). args->tile must name this variant.
 */
template <int BM, int BN, int B_NK>
static __device__ __forceinline__ void mk_gemm_role_t(const struct mk_gemm_args *g,
						      const struct mk_gemm_tmaps *maps, int rank,
						      int count, void *dyn_smem)
{
	constexpr int ST = MK_GEMM_STAGES_OF(BM, BN);
	constexpr int CWG = MK_GEMM_CWG_OF(BM);
	const struct mk_gemm_sm s = mk_gemm_carve<BM, BN>(dyn_smem);
	const int wg = threadIdx.x >> 7;

	if (threadIdx.x == 0) {
		for (int i = 0; i < ST; i++) {
			mk_mbar_init(&s.full[i], 1);
			mk_mbar_init(&s.empty[i], CWG * 4);
		}
		for (int i = 0; i < 2; i++) {
			mk_mbar_init(&s.tile_full[i], 1);
			mk_mbar_init(&s.tile_empty[i], CWG * 128);
		}
		mk_fence_mbar_init();
	}
	__syncthreads();

	if (wg == 0) {
		if constexpr (CWG == 2)
			mk_setmaxnreg_dec(MK_GEMM_PRODUCER_REGS);
		if (threadIdx.x == 0)
			mk_gemm_producer_t<BM, BN>(g, maps, rank, count, &s);
	} else {
		if constexpr (CWG == 2)
			mk_setmaxnreg_inc(MK_GEMM_CONSUMER_REGS);
		mk_gemm_consumer_t<BM, BN, B_NK>(g, maps, wg - 1, &s);
	}
}

/*
 * The default (128 x 256) compute role, the one fused ops run: MK_GEMM_THREADS threads,
 * MK_GEMM_SMEM_BYTES of dynamic shared memory. `b_nk` must be a constant after inlining.
 */
static __device__ __forceinline__ void mk_gemm_role(const struct mk_gemm_args *g,
						    const struct mk_gemm_tmaps *maps, int rank,
						    int count, void *dyn_smem, const int b_nk)
{
	if (b_nk)
		mk_gemm_role_t<MK_GEMM_BM, MK_GEMM_BN, 1>(g, maps, rank, count, dyn_smem);
	else
		mk_gemm_role_t<MK_GEMM_BM, MK_GEMM_BN, 0>(g, maps, rank, count, dyn_smem);
}

#endif /* MK_FUSED_GEMM_ENGINE_CUH */
