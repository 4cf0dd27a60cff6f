/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The attention engine's device side for sm_90a: a persistent, warp-specialised flash-attention
 * forward role that any kernel can run in some of its CTAs. One CTA = one producer warpgroup and
 * MK_ATTN_NWG(D) consumer warpgroups of 64 query rows each:
 *
 *  - producer warpgroup, two threads: the scheduler takes work items (b, h, query block) and
 *    publishes each, decoded, to the loader and the consumers through a two-slot ring; the
 *    loader issues the TMA load of the Q block, then the K and V blocks of the item from the
 *    last needed key block down to the first into two rings of MK_ATTN_STAGES(D) stages (full
 *    barrier: TMA transaction bytes; empty barrier: one arrival per consumer warp). Key blocks
 *    wholly above the causal diagonal are never loaded.
 *  - consumers: per key block, S = Q K^T (wgmma, both operands in shared memory), mask, online
 *    softmax in exp2 form with fp32 statistics, O += P V (wgmma, P from registers as bf16). The
 *    QK^T of block n is issued together with the PV of block n+1, so the softmax of one block runs
 *    while the tensor cores do the other product (FA3's intra-warpgroup overlap).
 *  - epilogue: normalise, then store bf16 O and fp32 LSE, or write / merge a partial (attn.h).
 *
 * Use from another kernel: launch with MK_ATTN_THREADS(D) threads, __launch_bounds__(that, 1),
 * MK_ATTN_SMEM_BYTES(D) of dynamic shared memory and the tensor maps of mk_attn_make_tensor_maps()
 * as a __grid_constant__ parameter; every thread of a compute CTA calls mk_attn_role().
 *
 * Accumulator layout (wgmma m64nN, fp32): warp w of a warpgroup holds rows 16w .. 16w+15; lane l
 * holds, for each 8-column block j, columns 8j + 2(l%4) + {0,1} of rows l/4 (d[4j], d[4j+1]) and
 * l/4 + 8 (d[4j+2], d[4j+3]). The A-operand fragment of a k16 step k in registers is the same
 * layout for columns 16k .. 16k+15, so P for step k is the bf16 pairs of S[8k .. 8k+7].
 */
#ifndef MK_FUSED_ATTN_ENGINE_CUH
#define MK_FUSED_ATTN_ENGINE_CUH

#include <math.h>
#include <stddef.h>

#include <cuda_bf16.h>

#include "attn.h"
#include "attn_ptx.cuh"

/* Which wait a debug build's bounded wait reports when it times out. */
enum mk_attn_wait_id {
	MK_ATTN_W_ITEM_FULL = 1,
	MK_ATTN_W_ITEM_EMPTY = 2,
	MK_ATTN_W_Q_FULL = 3,
	MK_ATTN_W_Q_EMPTY = 4,
	MK_ATTN_W_K_FULL = 5,
	MK_ATTN_W_K_EMPTY = 6,
	MK_ATTN_W_V_FULL = 7,
	MK_ATTN_W_V_EMPTY = 8,
};

/* Tests define MK_ATTN_WAIT to a bounded wait that reports the id; the library waits plainly.
 * `bar` is a 32-bit shared-memory address. */
#ifndef MK_ATTN_WAIT
#define MK_ATTN_WAIT(bar, parity, id) mk_mbar_wait_a((bar), (parity))
#endif

/* How far each warp of a role got, for a test's hang report: a wait no bound covers (setmaxnreg,
 * a named barrier) leaves its warps at an earlier mark. The library marks nothing. */
enum mk_attn_mark_id {
	MK_ATTN_M_START = 1, /* barriers initialised */
	MK_ATTN_M_REGS = 2,  /* past setmaxnreg */
	MK_ATTN_M_DONE = 3,  /* role finished */
};

#ifndef MK_ATTN_MARK
#define MK_ATTN_MARK(id) ((void)0)
#endif

#define MK_ATTN_MAX_STAGES 4

/* A decoded work item as the scheduler publishes it (ints of one slot). mb = -1: no more work. */
#define MK_ATTN_ITEM_MB	    0 /* query block (job-relative) */
#define MK_ATTN_ITEM_B	    1 /* batch */
#define MK_ATTN_ITEM_H	    2 /* query head */
#define MK_ATTN_ITEM_KVH    3 /* key/value head */
#define MK_ATTN_ITEM_NEND   4 /* key blocks [0, n_end) */
#define MK_ATTN_ITEM_JOB    5 /* job index */
#define MK_ATTN_ITEM_QROW   6 /* Q map row of the block's first query */
#define MK_ATTN_ITEM_KVROW  7 /* K/V map row of the job's first key */
#define MK_ATTN_ITEM_MAP_LO 8 /* the job's K map, V map right after it (generic address) */
#define MK_ATTN_ITEM_MAP_HI 9
#define MK_ATTN_ITEM_GATED  10 /* the job's K/V came from another agent: fence before TMA */
#define MK_ATTN_ITEM_INTS   12

struct mk_attn_bars {
	uint64_t q_full;  /* producer -> consumers: Q block loaded (TMA tx count) */
	uint64_t q_empty; /* consumers -> producer: last QK^T of the item done (one per warp) */
	uint64_t k_full[MK_ATTN_MAX_STAGES];
	uint64_t k_empty[MK_ATTN_MAX_STAGES];
	uint64_t v_full[MK_ATTN_MAX_STAGES];
	uint64_t v_empty[MK_ATTN_MAX_STAGES];
	uint64_t item_full[2];	/* scheduler -> loader, consumers: item published */
	uint64_t item_empty[2]; /* loader + every consumer thread -> scheduler: item read */
	int item[2][MK_ATTN_ITEM_INTS]; /* decoded item, see MK_ATTN_ITEM_* */
};

static_assert(sizeof(struct mk_attn_bars) <= 512, "barriers outgrow MK_ATTN_SMEM_BYTES' share");

/* Shared memory of one CTA, from the 1024-byte aligned base (128B swizzle needs it): Q (BM rows),
 * then STAGES K blocks, then STAGES V blocks, then the barriers. A block of R rows is D/64 boxes
 * of R x 128 bytes (64 bf16 of one row per 128-byte line, swizzled). */
static __device__ __forceinline__ unsigned char *mk_attn_smem_base(void *dyn)
{
	return (unsigned char *)(((uintptr_t)dyn + 1023) & ~(uintptr_t)1023);
}

static __device__ __forceinline__ uint32_t mk_attn_k_addr(uint32_t base, int st, const int hd)
{
	return base + MK_ATTN_BM(hd) * hd * 2 + st * (MK_ATTN_BN * hd * 2);
}

static __device__ __forceinline__ uint32_t mk_attn_v_addr(uint32_t base, int st, const int hd)
{
	return base + MK_ATTN_BM(hd) * hd * 2 + (MK_ATTN_STAGES(hd) + st) * (MK_ATTN_BN * hd * 2);
}

static __device__ __forceinline__ uint32_t mk_attn_bars_addr(uint32_t base, const int hd)
{
	return base + MK_ATTN_BM(hd) * hd * 2 + 2 * MK_ATTN_STAGES(hd) * (MK_ATTN_BN * hd * 2);
}

/* Address of a barrier field (arrays: element i) from the barriers' base address. */
#define MK_ATTN_BAR(bars, field, i)                                                                \
	((bars) + (uint32_t)offsetof(struct mk_attn_bars, field) + 8u * (uint32_t)(i))
#define MK_ATTN_ITEM(bars, slot, f)                                                                \
	((bars) + (uint32_t)offsetof(struct mk_attn_bars, item) +                                  \
	 4u * ((uint32_t)(slot) * MK_ATTN_ITEM_INTS + (f)))

/* Keep the compiler from moving reads of wgmma outputs above the wait that completes them, or
 * writes of a wgmma input into its registers before the wgmma has read them. */
static __device__ __forceinline__ void mk_attn_keep_f(float *r, const int n)
{
#pragma unroll
	for (int i = 0; i < n; i++)
		asm volatile("" : "+f"(r[i])::"memory");
}

static __device__ __forceinline__ void mk_attn_keep_u(uint32_t *r, const int n)
{
#pragma unroll
	for (int i = 0; i < n; i++)
		asm volatile("" : "+r"(r[i])::"memory");
}

/* An opaque copy of a value: stops the compiler from hoisting address arithmetic derived from it
 * out of the main loop (eight wgmma descriptors per operand would then stay live in registers). */
static __device__ __forceinline__ uint32_t mk_attn_opaque(uint32_t x)
{
	uint32_t y;

	asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
	return y;
}

/*
 * A gate or merge-order wait (one thread): bounded by the role's timeout and its error word; a
 * failure is recorded there and the kernel goes on (its results are then not to be used), so
 * it always ends.
 */
static __device__ __forceinline__ void mk_attn_wait_word(const unsigned int *word,
							 unsigned int want, int *error,
							 unsigned long long timeout_ns)
{
	int rc = mk_dev_wait_u32_ge(word, want, error, timeout_ns);

	if (rc != 0 && error != NULL)
		mk_dev_record_error(error, rc);
}

/* ---- producer ---- */

/* TMA loads of `rows` rows starting at row0 of head `head`, batch b, into a block at dst: D/64
 * boxes of rows x 64. The caller has announced rows * hd * 2 bytes on `bar`. */
static __device__ __forceinline__ void mk_attn_load_rows(uint32_t dst, const CUtensorMap *map,
							 uint32_t bar, int rows, int row0, int head,
							 int b, const int hd)
{
#pragma unroll
	for (int j = 0; j < hd / 64; j++)
		mk_tma_load_4d(dst + j * (rows * 128), map, bar, 64 * j, head, row0, b);
}

/* Next unit of the CTA of `rank` among `count`: dynamic (atomic counter) or static. */
static __device__ __forceinline__ int mk_attn_next_unit(const struct mk_attn_args *a, int rank,
							int count, int *iter)
{
	if (a->counter != NULL) {
		unsigned int u = atomicAdd(a->counter, 1u);

		return u < (unsigned int)a->units ? (int)u : -1;
	}
	return mk_attn_static_unit((*iter)++, rank, count, a->units, a->snake);
}

/* Publish one decoded item of job jn (mb = -1: the end) in the next slot of the item ring. */
static __device__ __forceinline__ void mk_attn_publish(const struct mk_attn_args *a,
						       const struct mk_attn_tmaps *role_maps,
						       uint32_t bars, uint32_t slot_it, int jn, int bh,
						       int mb)
{
	const uint32_t slot = slot_it & 1;
	const struct mk_attn_job *j = &a->job[jn];
	const int b = bh / a->heads_q, h = bh - b * a->heads_q;
	/* K then V, adjacent in both places: one pointer is all the loader keeps */
	const uintptr_t maps = (uintptr_t)(j->kv_maps != NULL ? j->kv_maps : &role_maps->k);

	MK_ATTN_WAIT(MK_ATTN_BAR(bars, item_empty, slot), ((slot_it >> 1) & 1) ^ 1,
		     MK_ATTN_W_ITEM_EMPTY);
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_MB), (uint32_t)mb);
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_B), (uint32_t)b);
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_H), (uint32_t)h);
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_KVH), (uint32_t)(h / a->group));
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_NEND),
			 (uint32_t)(mb < 0 ? 0 : mk_attn_kv_end(j, a->block_m, mb)));
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_JOB), (uint32_t)jn);
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_QROW),
			 (uint32_t)(j->q_row0 + mb * a->block_m));
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_KVROW), (uint32_t)j->kv_row0);
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_MAP_LO), (uint32_t)maps);
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_MAP_HI), (uint32_t)(maps >> 32));
	mk_st_shared_u32(MK_ATTN_ITEM(bars, slot, MK_ATTN_ITEM_GATED), j->gate != NULL);
	mk_mbar_arrive_a(MK_ATTN_BAR(bars, item_full, slot));
}

/*
 * The scheduler (one thread of the producer warpgroup): takes units (the jobs' in order), decodes
 * each into its work items (query block, batch, head, K/V head, key blocks, the job's rows and
 * maps) once, and publishes them to the loader and the consumers through a two-slot ring. Before
 * the first item of a gated job it waits for the gate (bounded: past the timeout or once the
 * error word is set it records the error and goes on, so the kernel always ends). Splitting it
 * from the loader keeps each thread inside the producer warpgroup's small register budget.
 */
static __device__ __forceinline__ void mk_attn_scheduler(const struct mk_attn_args *a,
							 const struct mk_attn_tmaps *role_maps, int rank,
							 int count, uint32_t bars)
{
	/* gates count calls from *gate_base on (the ring's call counter), or from 0 */
	const unsigned int base = a->gate_base != NULL ? *(volatile const unsigned int *)a->gate_base
						       : 0u;
	uint32_t slot_it = 0;
	int iter = 0, gated = -1;

	for (;;) {
		int unit = mk_attn_next_unit(a, rank, count, &iter);
		int bh, mb[2], n, jn;

		if (unit < 0)
			break;
		jn = mk_attn_job_of(a, unit);
		if (jn > gated) {
			const struct mk_attn_job *j = &a->job[jn];

			if (j->gate != NULL)
				mk_attn_wait_word(j->gate, base + j->gate_value, a->error,
						  a->timeout_ns);
			gated = jn;
		}
		n = mk_attn_unit(a, &a->job[jn], unit - a->job[jn].unit0, &bh, mb);
		mk_attn_publish(a, role_maps, bars, slot_it++, jn, bh, mb[0]);
		if (n > 1)
			mk_attn_publish(a, role_maps, bars, slot_it++, jn, bh, mb[1]);
	}
	mk_attn_publish(a, role_maps, bars, slot_it, 0, 0, -1);
}

/* A work item as the loader and the consumers read it from the ring. */
struct mk_attn_work {
	int mb, b, h, kvh, n_end, job, q_row, kv_row0, gated;
	const CUtensorMap *maps; /* the job's K map, then its V map */
};

/* Wait for the next published item, read it and release its slot. mb < 0: no more work. */
static __device__ __forceinline__ void mk_attn_take_item(uint32_t bars, uint32_t *slot_it,
							 struct mk_attn_work *w)
{
	const uint32_t slot = *slot_it & 1, it = MK_ATTN_ITEM(bars, slot, 0);

	MK_ATTN_WAIT(MK_ATTN_BAR(bars, item_full, slot), (*slot_it >> 1) & 1, MK_ATTN_W_ITEM_FULL);
	w->mb = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_MB);
	w->b = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_B);
	w->h = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_H);
	w->kvh = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_KVH);
	w->n_end = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_NEND);
	w->job = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_JOB);
	w->q_row = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_QROW);
	w->kv_row0 = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_KVROW);
	w->maps = (const CUtensorMap *)(((uintptr_t)(uint32_t)mk_ld_volatile_shared_s32(
						 it + 4 * MK_ATTN_ITEM_MAP_HI)
					 << 32) |
					(uint32_t)mk_ld_volatile_shared_s32(
						it + 4 * MK_ATTN_ITEM_MAP_LO));
	w->gated = mk_ld_volatile_shared_s32(it + 4 * MK_ATTN_ITEM_GATED);
	mk_mbar_arrive_a(MK_ATTN_BAR(bars, item_empty, slot));
	(*slot_it)++;
}

/*
 * The loader (one thread): per item, the TMA load of the Q block, then K and V of every needed
 * key block, last block first, into the stage rings.
 */
static __device__ __forceinline__ void mk_attn_loader(const struct mk_attn_tmaps *maps,
						      uint32_t base, const int hd)
{
	const int bm = MK_ATTN_BM(hd), nst = MK_ATTN_STAGES(hd);
	const uint32_t bars = mk_attn_bars_addr(base, hd);
	uint32_t kv_it = 0, q_it = 0, slot_it = 0;

	mk_tma_prefetch_desc(&maps->q);
	mk_tma_prefetch_desc(&maps->k);
	mk_tma_prefetch_desc(&maps->v);
	for (;;) {
		struct mk_attn_work w;

		mk_attn_take_item(bars, &slot_it, &w);
		if (w.mb < 0)
			break;
		if (w.n_end == 0)
			continue; /* nothing visible: the consumers write O = 0, LSE = -inf */
		const CUtensorMap *km = w.maps; /* K, then V at km + 1 */

		/* K/V another agent wrote (generic proxy), read by TMA (async proxy): the
		 * scheduler acquired the gate; order that before the loads. */
		if (w.gated)
			mk_fence_proxy_async_global();
		MK_ATTN_WAIT(MK_ATTN_BAR(bars, q_empty, 0), (q_it & 1) ^ 1, MK_ATTN_W_Q_EMPTY);
		q_it++;
		mk_mbar_arrive_expect_tx_a(MK_ATTN_BAR(bars, q_full, 0), bm * hd * 2);
		mk_attn_load_rows(base, &maps->q, MK_ATTN_BAR(bars, q_full, 0), bm, w.q_row, w.h,
				  w.b, hd);
		for (int n = w.n_end - 1; n >= 0; n--) {
			uint32_t st = kv_it % nst, ph = (kv_it / nst) & 1;
			const int row = w.kv_row0 + n * MK_ATTN_BN;

			MK_ATTN_WAIT(MK_ATTN_BAR(bars, k_empty, st), ph ^ 1, MK_ATTN_W_K_EMPTY);
			mk_mbar_arrive_expect_tx_a(MK_ATTN_BAR(bars, k_full, st), MK_ATTN_BN * hd * 2);
			mk_attn_load_rows(mk_attn_k_addr(base, st, hd), km,
					  MK_ATTN_BAR(bars, k_full, st), MK_ATTN_BN, row, w.kvh, w.b,
					  hd);
			MK_ATTN_WAIT(MK_ATTN_BAR(bars, v_empty, st), ph ^ 1, MK_ATTN_W_V_EMPTY);
			mk_mbar_arrive_expect_tx_a(MK_ATTN_BAR(bars, v_full, st), MK_ATTN_BN * hd * 2);
			mk_attn_load_rows(mk_attn_v_addr(base, st, hd), km + 1,
					  MK_ATTN_BAR(bars, v_full, st), MK_ATTN_BN, row, w.kvh, w.b,
					  hd);
			kv_it++;
		}
	}
}

/* ---- consumer building blocks (one warpgroup; tests call them one by one) ---- */

/* S (64 x BN fp32) = Q rows of this warpgroup (q: its first row in a Q block of q_rows rows)
 * times K^T (k: a K block of BN rows). Issues the wgmmas; the caller fences and commits. */
static __device__ __forceinline__ void mk_attn_qk(float *sc, uint32_t q, int q_rows, uint32_t k,
						  const int hd)
{
#pragma unroll
	for (int kk = 0; kk < hd / 16; kk++) {
		/* Opaque bases: each descriptor is built right before its wgmma, not all up front. */
		uint32_t qk = mk_attn_opaque(q), kk_base = mk_attn_opaque(k);
		uint64_t da = mk_wgmma_desc_sw128(qk + (kk >> 2) * (q_rows * 128) + (kk & 3) * 32, 16,
						  1024);
		uint64_t db = mk_wgmma_desc_sw128(
			kk_base + (kk >> 2) * (MK_ATTN_BN * 128) + (kk & 3) * 32, 16, 1024);

		mk_attn_wgmma_ss_n128(sc, da, db, kk > 0);
	}
}

/* O (64 x D fp32) += P (64 x BN bf16 in registers, A-fragment order) times V (a V block of BN
 * rows: MN-major B; the D/64 boxes are BN * 128 bytes apart, 8-row groups 1024). */
static __device__ __forceinline__ void mk_attn_pv(float *o, const uint32_t *p, uint32_t v,
						  const int hd)
{
#pragma unroll
	for (int k = 0; k < MK_ATTN_BN / 16; k++) {
		uint64_t db = mk_wgmma_desc_sw128(mk_attn_opaque(v) + k * 2048, MK_ATTN_BN * 128,
						  1024);

		if (hd == 128)
			mk_attn_wgmma_rs_n128(o, p + 4 * k, db, 1);
		else
			mk_attn_wgmma_rs_n64(o, p + 4 * k, db, 1);
	}
}

/* Set to -inf the scores of key block n this thread's rows (row, row + 8) may not see. */
static __device__ __forceinline__ void mk_attn_mask(float *sc, const struct mk_attn_job *j, int n,
						    int row, int t)
{
	int lim0 = j->skv - 1, lim1 = j->skv - 1;
	const int c0 = n * MK_ATTN_BN + 2 * t;

	if (j->causal) {
		lim0 = min(lim0, row + j->diag);
		lim1 = min(lim1, row + 8 + j->diag);
	}
#pragma unroll
	for (int jb = 0; jb < MK_ATTN_BN / 8; jb++) {
#pragma unroll
		for (int e = 0; e < 2; e++) {
			int col = c0 + 8 * jb + e;

			if (col > lim0)
				sc[4 * jb + e] = -INFINITY;
			if (col > lim1)
				sc[4 * jb + 2 + e] = -INFINITY;
		}
	}
}

/*
 * Online softmax of one block for this thread's two rows: new row maxima (raw scores, reduced
 * over the quad that shares a row), sc <- p = 2^(s * scale_log2 - m * scale_log2), row sums
 * l <- alpha l + sum(p) kept per thread (reduced at the end), and the factors alpha by which the
 * caller rescales O. A row that has seen only masked keys keeps m = -inf and p = 0.
 */
static __device__ __forceinline__ void mk_attn_softmax(float *sc, float *m, float *l, float sl2,
						       float *alpha)
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float mx = m[r], base, sum = 0.0f;

#pragma unroll
		for (int jb = 0; jb < MK_ATTN_BN / 8; jb++)
			mx = fmaxf(mx, fmaxf(sc[4 * jb + 2 * r], sc[4 * jb + 2 * r + 1]));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		/* All -inf so far: any finite base gives p = 0 without -inf - -inf = NaN. */
		base = mx == -INFINITY ? 0.0f : mx * sl2;
		alpha[r] = mx == -INFINITY ? 1.0f : mk_ex2((m[r] - mx) * sl2);
#pragma unroll
		for (int jb = 0; jb < MK_ATTN_BN / 8; jb++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				float p = mk_ex2(fmaf(sc[4 * jb + 2 * r + e], sl2, -base));

				sc[4 * jb + 2 * r + e] = p;
				sum += p;
			}
		}
		l[r] = l[r] * alpha[r] + sum;
		m[r] = mx;
	}
}

static __device__ __forceinline__ void mk_attn_rescale(float *o, const float *alpha, const int hd)
{
#pragma unroll
	for (int jb = 0; jb < hd / 8; jb++) {
		o[4 * jb] *= alpha[0];
		o[4 * jb + 1] *= alpha[0];
		o[4 * jb + 2] *= alpha[1];
		o[4 * jb + 3] *= alpha[1];
	}
}

static __device__ __forceinline__ uint32_t mk_attn_bf16x2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

/* P as the A operand of the PV wgmma: register 4k + i of k16 step k is the pair S[8k + 2i ..]. */
static __device__ __forceinline__ void mk_attn_pack_p(uint32_t *p, const float *sc)
{
#pragma unroll
	for (int i = 0; i < MK_ATTN_BN / 4; i++)
		p[i] = mk_attn_bf16x2(sc[2 * i], sc[2 * i + 1]);
}

/*
 * Finish this thread's two rows (rows row, row + 8 of job j; columns 8c + 2t + {0,1}) and apply
 * the job's epilogue: fresh rows take O as their partial, the others merge it into (acc, lse)
 * with the log-sum-exp rule; final rows go to bf16 o, the others to fp32 acc; both write lse.
 * Rows at or past the job's sq are computed but not written. Every lane of the warp must call it
 * (the warp synchronises between reading and writing lse).
 */
static __device__ __forceinline__ void mk_attn_epilogue(const struct mk_attn_args *a,
							const struct mk_attn_job *j, const float *o,
							const float *m, float *l, int b, int h,
							int row, int t, const int hd)
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
		l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
	}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int i = row + 8 * r, ar = j->q_row0 + i;
		const int ok = i < j->sq;
		const int fresh = i >= j->fresh_lo && i < j->fresh_hi;
		const int final = i >= j->final_lo && i < j->final_hi;
		const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
		const float lse = l[r] > 0.0f ? m[r] * a->scale + logf(l[r]) : -INFINITY;
		const long long off = (((long long)b * a->q_batch_rows + ar) * a->heads_q + h) * hd +
				      2 * t;
		float *lp = a->lse == NULL ? NULL
					   : a->lse + ((long long)b * a->heads_q + h) * a->lse_ld + ar;
		float w_old, w_new, lse_out;

		/* fresh: merging with an empty partial gives weight exactly 1, LSE unchanged */
		lse_out = mk_attn_lse_merge(ok && !fresh ? *lp : -INFINITY, lse, &w_old, &w_new);
		w_new *= inv;
		__syncwarp(); /* the quad has read lse before its first lane rewrites it */
		if (!ok)
			continue;
#pragma unroll
		for (int c = 0; c < hd / 8; c++) {
			const long long e = off + 8 * c;
			float2 out = make_float2(o[4 * c + 2 * r] * w_new, o[4 * c + 2 * r + 1] * w_new);

			if (!fresh) {
				float2 old = *(const float2 *)(a->acc + e);

				out.x += w_old * old.x;
				out.y += w_old * old.y;
			}
			if (final)
				*(uint32_t *)((__nv_bfloat16 *)a->o + e) = mk_attn_bf16x2(out.x, out.y);
			else
				*(float2 *)(a->acc + e) = out;
		}
		if (t == 0 && lp != NULL)
			*lp = lse_out;
	}
}

/*
 * Merge order between jobs: before its epilogue, a warpgroup whose job merges into partials waits
 * until every warpgroup item of the jobs before it finished (the done counter); after it, it
 * counts itself. One thread waits or counts; the warpgroup's named barrier orders the others.
 */
static __device__ __forceinline__ void mk_attn_merge_wait(const struct mk_attn_args *a,
							  const struct mk_attn_job *j, int cwg)
{
	if (a->done == NULL || (j->fresh_lo == 0 && j->fresh_hi == j->sq))
		return;
	if ((threadIdx.x & 127) == 0)
		mk_attn_wait_word(a->done, (unsigned int)j->wg_items0, a->error, a->timeout_ns);
	mk_named_bar_sync(1 + cwg, 128);
}

static __device__ __forceinline__ void mk_attn_merge_done(const struct mk_attn_args *a, int cwg)
{
	if (a->done == NULL)
		return;
	mk_named_bar_sync(1 + cwg, 128); /* every thread's stores of the item, then the count */
	if ((threadIdx.x & 127) == 0) {
		mk_fence_acq_rel_gpu();
		mk_red_release_gpu_add_u32(a->done, 1);
	}
}

/* ---- consumer ---- */

static __device__ __forceinline__ void mk_attn_consumer(const struct mk_attn_args *a, int cwg,
							uint32_t base, const int hd)
{
	const uint32_t bars = mk_attn_bars_addr(base, hd);
	const int nst = MK_ATTN_STAGES(hd), bm = MK_ATTN_BM(hd);
	const int warp = (threadIdx.x & 127) >> 5, lane = threadIdx.x & 31, t = lane & 3;
	const uint32_t qa = base + cwg * (MK_ATTN_WG_ROWS * 128);
	const float sl2 = a->scale_log2;
	uint32_t kv_it = 0, q_it = 0, slot_it = 0;
	float sc[MK_ATTN_BN / 2], o[64], m[2], l[2], alpha[2];
	uint32_t p[MK_ATTN_BN / 4];

	for (;;) {
		struct mk_attn_work w;

		mk_attn_take_item(bars, &slot_it, &w);
		const int mb = w.mb, b = w.b, h = w.h, n_end = w.n_end;

		if (mb < 0)
			break;
		const struct mk_attn_job *jb = &a->job[w.job];
		const int row0 = mb * bm + cwg * MK_ATTN_WG_ROWS;
		const int row = row0 + warp * 16 + (lane >> 2);

		m[0] = m[1] = -INFINITY;
		l[0] = l[1] = 0.0f;
#pragma unroll
		for (int i = 0; i < hd / 2; i++)
			o[i] = 0.0f;

		if (n_end > 0) {
			uint32_t st = kv_it % nst, ph = (kv_it / nst) & 1, pst, pph;
			int n = n_end - 1;

			MK_ATTN_WAIT(MK_ATTN_BAR(bars, q_full, 0), q_it & 1, MK_ATTN_W_Q_FULL);
			q_it++;
			/* First block: S, softmax, P; its PV is issued with the next block's S. */
			MK_ATTN_WAIT(MK_ATTN_BAR(bars, k_full, st), ph, MK_ATTN_W_K_FULL);
			mk_wgmma_fence();
			mk_attn_qk(sc, mk_attn_opaque(qa), bm, mk_attn_k_addr(base, st, hd), hd);
			mk_wgmma_commit();
			mk_wgmma_wait(0);
			mk_attn_keep_f(sc, MK_ATTN_BN / 2);
			if (lane == 0) {
				mk_mbar_arrive_a(MK_ATTN_BAR(bars, k_empty, st));
				if (n == 0)
					mk_mbar_arrive_a(MK_ATTN_BAR(bars, q_empty, 0));
			}
			if (mk_attn_needs_mask(jb, n, row0))
				mk_attn_mask(sc, jb, n, row, t);
			mk_attn_softmax(sc, m, l, sl2, alpha);
			mk_attn_pack_p(p, sc);
			pst = st;
			pph = ph;
			kv_it++;
			for (n = n_end - 2; n >= 0; n--) {
				st = kv_it % nst;
				ph = (kv_it / nst) & 1;
				/* Both waits before the fence: a spin loop between two wgmmas
				 * makes ptxas serialise them. */
				MK_ATTN_WAIT(MK_ATTN_BAR(bars, k_full, st), ph, MK_ATTN_W_K_FULL);
				MK_ATTN_WAIT(MK_ATTN_BAR(bars, v_full, pst), pph, MK_ATTN_W_V_FULL);
				mk_wgmma_fence();
				mk_attn_qk(sc, mk_attn_opaque(qa), bm, mk_attn_k_addr(base, st, hd), hd);
				mk_wgmma_commit();
				mk_attn_pv(o, p, mk_attn_v_addr(base, pst, hd), hd);
				mk_wgmma_commit();
				/* S of this block is done (groups retire in order); PV still runs. */
				mk_wgmma_wait(1);
				mk_attn_keep_f(sc, MK_ATTN_BN / 2);
				if (lane == 0) {
					mk_mbar_arrive_a(MK_ATTN_BAR(bars, k_empty, st));
					if (n == 0)
						mk_mbar_arrive_a(MK_ATTN_BAR(bars, q_empty, 0));
				}
				if (mk_attn_needs_mask(jb, n, row0))
					mk_attn_mask(sc, jb, n, row, t);
				mk_attn_softmax(sc, m, l, sl2, alpha);
				mk_wgmma_wait(0);
				mk_attn_keep_f(o, hd / 2);
				mk_attn_keep_u(p, MK_ATTN_BN / 4);
				if (lane == 0)
					mk_mbar_arrive_a(MK_ATTN_BAR(bars, v_empty, pst));
				mk_attn_rescale(o, alpha, hd);
				mk_attn_pack_p(p, sc);
				pst = st;
				pph = ph;
				kv_it++;
			}
			MK_ATTN_WAIT(MK_ATTN_BAR(bars, v_full, pst), pph, MK_ATTN_W_V_FULL);
			mk_wgmma_fence();
			mk_attn_pv(o, p, mk_attn_v_addr(base, pst, hd), hd);
			mk_wgmma_commit();
			mk_wgmma_wait(0);
			mk_attn_keep_f(o, hd / 2);
			mk_attn_keep_u(p, MK_ATTN_BN / 4);
			if (lane == 0)
				mk_mbar_arrive_a(MK_ATTN_BAR(bars, v_empty, pst));
		}
		mk_attn_merge_wait(a, jb, cwg);
		mk_attn_epilogue(a, jb, o, m, l, b, h, row, t, hd);
		mk_attn_merge_done(a, cwg);
	}
}

/*
 * The compute role. All MK_ATTN_THREADS(hd) threads of the CTA call it; `rank` / `count` place
 * this CTA among the role's CTAs (the static schedule uses them). `dyn_smem`: MK_ATTN_SMEM_BYTES(hd).
 * Runs once per kernel (the register split of setmaxnreg is not undone).
 */
static __device__ __forceinline__ void mk_attn_role(const struct mk_attn_args *a,
						    const struct mk_attn_tmaps *maps, int rank,
						    int count, void *dyn_smem, const int hd)
{
	const uint32_t base = mk_smem_u32(mk_attn_smem_base(dyn_smem));
	const uint32_t bars = mk_attn_bars_addr(base, hd);
	const int nwg = MK_ATTN_NWG(hd), wg = threadIdx.x >> 7;

	if (threadIdx.x == 0) {
		struct mk_attn_bars *bar = (struct mk_attn_bars *)(mk_attn_smem_base(dyn_smem) +
								    (bars - base));

		mk_mbar_init(&bar->q_full, 1);
		mk_mbar_init(&bar->q_empty, nwg * 4);
		for (int i = 0; i < MK_ATTN_STAGES(hd); i++) {
			mk_mbar_init(&bar->k_full[i], 1);
			mk_mbar_init(&bar->k_empty[i], nwg * 4);
			mk_mbar_init(&bar->v_full[i], 1);
			mk_mbar_init(&bar->v_empty[i], nwg * 4);
		}
		for (int i = 0; i < 2; i++) {
			mk_mbar_init(&bar->item_full[i], 1);
			mk_mbar_init(&bar->item_empty[i], nwg * 128 + 1);
		}
		mk_fence_mbar_init();
	}
	__syncthreads();
	MK_ATTN_MARK(MK_ATTN_M_START);

	if (wg == 0) {
		if (hd == 64)
			mk_setmaxnreg_dec(MK_ATTN_PRODUCER_REGS_D64);
		else
			mk_setmaxnreg_dec(MK_ATTN_PRODUCER_REGS_D128);
		MK_ATTN_MARK(MK_ATTN_M_REGS);
		if (threadIdx.x == 0)
			mk_attn_loader(maps, base, hd);
		else if (threadIdx.x == 32)
			mk_attn_scheduler(a, maps, rank, count, bars);
	} else {
		if (hd == 64)
			mk_setmaxnreg_inc(MK_ATTN_CONSUMER_REGS_D64);
		else
			mk_setmaxnreg_inc(MK_ATTN_CONSUMER_REGS_D128);
		MK_ATTN_MARK(MK_ATTN_M_REGS);
		mk_attn_consumer(a, wg - 1, base, hd);
	}
	MK_ATTN_MARK(MK_ATTN_M_DONE);
}

#endif /* MK_FUSED_ATTN_ENGINE_CUH */
