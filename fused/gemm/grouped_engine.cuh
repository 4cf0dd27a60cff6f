/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The grouped GEMM's compute role on Hopper: the GEMM engine's pipeline (gemm_engine.cuh: one
 * producer thread issuing TMA loads into MK_GEMM_STAGES stages, two consumer warpgroups on
 * m64n256k16 wgmma, the engine's TMA-store epilogue) with three differences:
 *  - the producer takes tiles from the device-side schedule of grouped_sched.h (expert, first
 *    row, valid rows, first column) and hands the whole tile record to the consumers;
 *  - A rows start at the tile's own row (any row, not a multiple of the tile), B comes from a
 *    3-D tensor map (k, n, expert) or (n, k, expert);
 *  - a consumer warpgroup stores its 64 rows by TMA only when all 64 belong to the tile's
 *    expert; a half that crosses the expert's last row takes per-thread stores clipped at that
 *    row (TMA clips only at the tensor's edge, which would overwrite the next expert's rows),
 *    and a half with no valid row stores nothing.
 */
#ifndef MK_FUSED_GEMM_GROUPED_ENGINE_CUH
#define MK_FUSED_GEMM_GROUPED_ENGINE_CUH

#include <cuda_bf16.h>

#include "fused/common/wait.cuh"
#include "fused/gemm/gemm_engine.cuh"
#include "fused/gemm/grouped.h"
#include "fused/gemm/grouped_sched.h"

struct mk_grouped_smem {
	struct mk_gemm_smem e; /* the engine's stages, barriers and store buffers */
	struct mk_grouped_tile tile[2];
};

static_assert(sizeof(struct mk_grouped_smem) + 1023 <= MK_GROUPED_SMEM_BYTES,
	      "grouped GEMM shared memory does not fit its allocation");
static_assert(MK_GROUPED_SMEM_BYTES <= 232448, "grouped GEMM shared memory above the SM limit");

/* 3-D tiled TMA load (c0 innermost), completing on an mbarrier. */
MK_DEV void mk_grouped_tma_load_3d(void *dst, const void *tmap, uint64_t *bar, int c0, int c1,
				   int c2)
{
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
		     " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(mk_smem_u32(dst)),
		     "l"(tmap), "r"(mk_smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
		     : "memory");
}

/* ---- fused use: rows that arrive while the kernel runs, output blocks announced ---- */

/* Rows of [0, total) in readiness block b. */
MK_DEV int mk_grouped_blk_rows(int total, int b)
{
	const int lo = b * MK_GROUPED_READY_ROWS;

	return total - lo >= MK_GROUPED_READY_ROWS ? MK_GROUPED_READY_ROWS
						    : (total > lo ? total - lo : 0);
}

/* The received rows: offsets[E], clamped (the fused ops' offsets are a partition). */
MK_DEV int mk_grouped_total(const struct mk_grouped_args *g)
{
	const int t = g->offsets[g->num_experts];

	return t < 0 ? 0 : (t > g->max_rows ? g->max_rows : t);
}

/*
 * Producer thread: wait until every row block the tile reads has all its rows (system-scope
 * acquire: peers' stores). A timeout or an error another agent recorded ends the wait; the
 * tile is then computed from whatever is there and the error stands for the call.
 */
MK_DEV void mk_grouped_wait_rows(const struct mk_grouped_args *g, const struct mk_grouped_tile *t,
				 int total)
{
	const int b1 = (t->row0 + t->rows - 1) / MK_GROUPED_READY_ROWS;
	struct mk_dev_wait wt = { 0, 0 };

	for (int b = t->row0 / MK_GROUPED_READY_ROWS; b <= b1; b++) {
		const uint32_t need = (uint32_t)mk_grouped_blk_rows(total, b);

		while (mk_ld_acquire_sys_u32(&g->row_ready[b]) < need) {
			const int rc = mk_dev_wait_step(g->error, &wt, g->timeout_ns);

			if (rc) {
				mk_dev_record_error(g->error, rc);
				return;
			}
		}
	}
	/* TMA (the async proxy) reads what generic stores wrote, after the acquire. */
	mk_fence_proxy_async_global();
}

/*
 * After both warpgroups stored a tile: one thread adds the tile's rows to each block it
 * covers; the addition that completes a block (every column tile of every row) resets it and
 * raises the block's flag to the epoch. Stores before the flag: the TMA stores are waited for
 * and fenced to the generic proxy, the warpgroups meet, the counting thread fences at system
 * scope before its addition, and the completing thread fences again after the addition that
 * saw the block complete (so every other tile's stores come before its flag).
 */
MK_DEV void mk_grouped_announce(const struct mk_grouped_args *g, const struct mk_grouped_tile *t,
				int total, unsigned int epoch)
{
	if (g->tma_store && (threadIdx.x & 127) == 0) {
		mk_bulk_wait_all();
		mk_fence_proxy_async_global();
	}
	mk_named_bar_sync(1, 2 * 128);
	if (threadIdx.x != 128)
		return;
	mk_fence_acq_rel_sys();
	for (int b = t->row0 / MK_GROUPED_READY_ROWS;
	     b <= (t->row0 + t->rows - 1) / MK_GROUPED_READY_ROWS; b++) {
		const int lo = max(t->row0, b * MK_GROUPED_READY_ROWS);
		const int hi = min(t->row0 + t->rows, (b + 1) * MK_GROUPED_READY_ROWS);
		const unsigned int target = (unsigned int)(mk_grouped_blk_rows(total, b) * g->tiles_n);
		const unsigned int old = atomicAdd(&g->blk_cnt[b], (unsigned int)(hi - lo));

		if (old + (unsigned int)(hi - lo) == target) {
			mk_fence_acq_rel_sys();
			g->blk_cnt[b] = 0;
			mk_peer_st_release_u32(&g->blk_flag[b], epoch);
		}
	}
}

MK_DEV void mk_grouped_trace(const struct mk_grouped_args *g, int word, unsigned int v)
{
	if (g->trace != NULL)
		*(volatile unsigned int *)&g->trace[blockIdx.x * MK_GROUPED_TRACE_WORDS + word] = v;
}

MK_DEV void mk_grouped_producer(const struct mk_grouped_args *g, const struct mk_gemm_tmaps *maps,
				int rank, int count, struct mk_grouped_smem *s)
{
	const int nk = (g->k + MK_GEMM_BK - 1) / MK_GEMM_BK;
	const struct mk_grouped_shape shape = { g->offsets, g->num_experts, g->max_rows,
						g->tiles_n,  MK_GEMM_BM,     MK_GEMM_BN };
	struct mk_grouped_cursor cur = { 0, 0, 0 };
	uint32_t stage = 0, phase = 0, titer = 0;
	const void *tmap_a = &maps->a, *tmap_b = &maps->b;
	const int total = g->row_ready != NULL ? mk_grouped_total(g) : 0;

	mk_tma_prefetch_desc(tmap_a);
	mk_tma_prefetch_desc(tmap_b);
	for (int ticket = rank;; ticket += count) {
		struct mk_grouped_tile t;
		uint32_t slot = titer & 1;

		mk_grouped_find(&cur, &shape, ticket, &t);
		mk_mbar_wait(&s->e.tile_empty[slot], ((titer >> 1) & 1) ^ 1);
		s->tile[slot] = t;
		mk_mbar_arrive(&s->e.tile_full[slot]);
		titer++;
		if (t.e < 0)
			break;
		if (g->row_ready != NULL)
			mk_grouped_wait_rows(g, &t, total);

		for (int kb = 0; kb < nk; kb++) {
			int k0 = kb * MK_GEMM_BK;

			mk_mbar_wait(&s->e.empty[stage], phase ^ 1);
			mk_mbar_arrive_expect_tx(&s->e.full[stage], MK_GEMM_A_STAGE + MK_GEMM_B_STAGE);
			/* Rows past the expert (the next expert's, or past max_rows: zeros) are
			 * computed and never stored. */
			mk_tma_load_2d(s->e.a[stage], tmap_a, &s->e.full[stage], k0, t.row0);
			if (g->b_layout == MK_GEMM_B_NK) {
				mk_grouped_tma_load_3d(s->e.b[stage], tmap_b, &s->e.full[stage], k0,
						       t.n0, t.e);
			} else {
#pragma unroll
				for (int j = 0; j < MK_GEMM_BN / 64; j++)
					mk_grouped_tma_load_3d(s->e.b[stage] + j * (64 * MK_GEMM_BK * 2),
							       tmap_b, &s->e.full[stage], t.n0 + 64 * j,
							       k0, t.e);
			}
			if (++stage == MK_GEMM_STAGES) {
				stage = 0;
				phase ^= 1;
			}
		}
		mk_grouped_trace(g, 0, titer);
		mk_grouped_trace(g, 3, (unsigned int)t.e);
	}
}

/*
 * Per-thread stores of this thread's part of a 64 x 256 slice, rows below row_end and columns
 * below n only (accumulator layout: gemm_engine.cuh, mk_gemm_epilogue_store). row0, col0: this
 * thread's first row and column.
 */
MK_DEV void mk_grouped_store_rows(const struct mk_grouped_args *g, const float *acc, int row0,
				  int col0, int row_end)
{
	__nv_bfloat16 *out = (__nv_bfloat16 *)g->c;
	const int n = g->n;
	const int ncols = n - col0;
	const int paired = (n & 1) == 0 && ((uintptr_t)out & 3) == 0;
	const int r0 = row0 < row_end, r1 = row0 + 8 < row_end;
	__nv_bfloat16 *p0 = out + (long long)row0 * n + col0;
	__nv_bfloat16 *p1 = p0 + 8LL * n;

#pragma unroll
	for (int j = 0; j < MK_GEMM_BN / 8; j++) {
		const int c = 8 * j;

		if (c >= ncols)
			break;
		if (paired) {
			/* n even and col0 even: c + 1 < ncols too. */
			if (r0)
				*(uint32_t *)(p0 + c) = mk_gemm_pack_bf16x2(acc[4 * j], acc[4 * j + 1]);
			if (r1)
				*(uint32_t *)(p1 + c) =
					mk_gemm_pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]);
			continue;
		}
		if (r0)
			p0[c] = __float2bfloat16_rn(acc[4 * j]);
		if (r1)
			p1[c] = __float2bfloat16_rn(acc[4 * j + 2]);
		if (c + 1 < ncols) {
			if (r0)
				p0[c + 1] = __float2bfloat16_rn(acc[4 * j + 1]);
			if (r1)
				p1[c + 1] = __float2bfloat16_rn(acc[4 * j + 3]);
		}
	}
}

MK_DEV void mk_grouped_consumer(const struct mk_grouped_args *g, const struct mk_gemm_tmaps *maps,
				int cwg, struct mk_grouped_smem *s, const int b_nk)
{
	const int nk = (g->k + MK_GEMM_BK - 1) / MK_GEMM_BK;
	const int warp = (threadIdx.x & 127) >> 5;
	const int lane = threadIdx.x & 31;
	uint32_t stage = 0, phase = 0, titer = 0, done = 0;
	const int total = g->blk_cnt != NULL ? mk_grouped_total(g) : 0;
	const unsigned int epoch = g->blk_cnt != NULL ? *(volatile const unsigned int *)g->calls + 1 : 0;
	float acc[128];

	for (;;) {
		uint32_t slot = titer & 1;
		struct mk_grouped_tile t;

		mk_mbar_wait(&s->e.tile_full[slot], (titer >> 1) & 1);
		t.e = *(volatile int *)&s->tile[slot].e;
		t.row0 = *(volatile int *)&s->tile[slot].row0;
		t.rows = *(volatile int *)&s->tile[slot].rows;
		t.n0 = *(volatile int *)&s->tile[slot].n0;
		mk_mbar_arrive(&s->e.tile_empty[slot]);
		titer++;
		if (t.e < 0)
			break;

		uint32_t prev = 0;

		for (int kb = 0; kb < nk; kb++) {
			uint32_t a_base = mk_smem_u32(s->e.a[stage]) + cwg * (64 * 128);
			uint32_t b_base = mk_smem_u32(s->e.b[stage]);

			mk_mbar_wait(&s->e.full[stage], phase);
			mk_wgmma_fence();
#pragma unroll
			for (int kk = 0; kk < MK_GEMM_BK / 16; kk++) {
				uint64_t da = mk_wgmma_desc_sw128(a_base + kk * 32, 16, 1024);
				uint32_t acc_on = (kb > 0 || kk > 0);

				if (b_nk) {
					uint64_t db = mk_wgmma_desc_sw128(b_base + kk * 32, 16, 1024);

					mk_wgmma_m64n256k16_bk(acc, da, db, acc_on);
				} else {
					uint64_t db = mk_wgmma_desc_sw128(b_base + kk * 2048,
									  MK_GEMM_KN_LBO,
									  MK_GEMM_KN_SBO);

					mk_wgmma_m64n256k16_bmn(acc, da, db, acc_on);
				}
			}
			mk_wgmma_commit();
			/* One stage of wgmma in flight; the one before it is done reading. */
			mk_wgmma_wait(1);
			if (kb > 0 && lane == 0)
				mk_mbar_arrive(&s->e.empty[prev]);
			prev = stage;
			if (++stage == MK_GEMM_STAGES) {
				stage = 0;
				phase ^= 1;
			}
		}
		mk_wgmma_wait(0);
		if (lane == 0)
			mk_mbar_arrive(&s->e.empty[prev]);

		/* Uniform per warpgroup: the named barriers of the TMA epilogue see all 128. */
		const int m0 = t.row0 + cwg * 64;
		const int valid = t.rows - cwg * 64;
		const int r = warp * 16 + (lane >> 2);

		if (valid >= 64 && g->tma_store)
			mk_gemm_epilogue_tma(&g->gemm, maps, acc, &s->e, cwg, m0, t.n0, r, lane & 3);
		else if (valid > 0)
			mk_grouped_store_rows(g, acc, m0 + r, t.n0 + 2 * (lane & 3), t.row0 + t.rows);
		if (g->blk_cnt != NULL)
			mk_grouped_announce(g, &t, total, epoch);
		done++;
		if ((threadIdx.x & 127) == 0)
			mk_grouped_trace(g, 1 + cwg, done);
	}
	/* Shared memory must outlive the bulk stores that read it. */
	if ((threadIdx.x & 127) == 0)
		mk_bulk_wait_all();
}

/* The role: every thread of the CTA calls it (see mk_gemm_role). */
MK_DEV void mk_grouped_role(const struct mk_grouped_args *g, const struct mk_gemm_tmaps *maps,
			    int rank, int count, void *dyn_smem, const int b_nk)
{
	struct mk_grouped_smem *s =
		(struct mk_grouped_smem *)(((uintptr_t)dyn_smem + 1023) & ~(uintptr_t)1023);
	const int wg = threadIdx.x >> 7;

	if (threadIdx.x == 0) {
		for (int i = 0; i < MK_GEMM_STAGES; i++) {
			mk_mbar_init(&s->e.full[i], 1);
			mk_mbar_init(&s->e.empty[i], 2 * 4);
		}
		for (int i = 0; i < 2; i++) {
			mk_mbar_init(&s->e.tile_full[i], 1);
			mk_mbar_init(&s->e.tile_empty[i], 2 * 128);
		}
		mk_fence_mbar_init();
	}
	__syncthreads();

	if (wg == 0) {
		mk_setmaxnreg_dec(MK_GEMM_PRODUCER_REGS);
		if (threadIdx.x == 0)
			mk_grouped_producer(g, maps, rank, count, s);
	} else {
		mk_setmaxnreg_inc(MK_GEMM_CONSUMER_REGS);
		mk_grouped_consumer(g, maps, wg - 1, s, b_nk);
	}
}

#endif /* MK_FUSED_GEMM_GROUPED_ENGINE_CUH */
