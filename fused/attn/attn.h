/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The attention engine's internal interface, shared by host C code (the mkAttention API, the
 * ring-attention op, tests, benchmarks) and by device code (attn_engine.cuh, attn_portable.cu).
 * It describes one forward flash-attention call over a range of query rows and a range of key
 * rows of BSHD tensors, what the epilogue does with the result (store it, write a mergeable
 * partial, or merge into an existing partial with the log-sum-exp rule) and the tile schedule.
 * Everything is plain C so ops written in C fill it; the small planning functions at the end are
 * `static inline` and compiled for both the host and the device, so the CPU unit tests check the
 * very code the kernels run.
 *
 * Masking. With `causal`, key row j (of this call) is visible to query row i iff
 * k_pos + j <= q_pos + i: q_pos and k_pos are the absolute positions of the first query and key
 * row. mkAttention uses q_pos = skv - sq, k_pos = 0 (bottom-right alignment, as FlashAttention
 * >= 2.1); a ring step passes the positions of the chunks it holds. A row that sees no key gets
 * O = 0 and LSE = -inf.
 */
#ifndef MK_FUSED_ATTN_ATTN_H
#define MK_FUSED_ATTN_ATTN_H

#include <math.h>
#include <stddef.h>

#include <cuda.h> /* CUtensorMap (type only: the encoder comes from the runtime's entry point) */
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define MK_ATTN_HD __host__ __device__ __forceinline__
#else
#define MK_ATTN_HD inline
#endif

/* Keys per block (both kernels' KV tile); query rows per consumer warpgroup. */
#define MK_ATTN_BN		   128
#define MK_ATTN_WG_ROWS		   64
/* Hopper kernel, per head dim (README.md says why): consumer warpgroups and K/V stages. */
#define MK_ATTN_NWG_D64		   3
#define MK_ATTN_NWG_D128	   2
#define MK_ATTN_STAGES_D64	   4
#define MK_ATTN_STAGES_D128	   2
/* Registers per thread after setmaxnreg: producer warpgroup / consumer warpgroups. The sums
 * must fit the SM's 64K registers or setmaxnreg.inc waits forever (checked below). */
#define MK_ATTN_PRODUCER_REGS_D64  32
#define MK_ATTN_CONSUMER_REGS_D64  160
#define MK_ATTN_PRODUCER_REGS_D128 32
#define MK_ATTN_CONSUMER_REGS_D128 240
/* Portable kernel: warps per CTA and query rows per warp. */
#define MK_ATTN_P_WARPS		   8
#define MK_ATTN_P_ROWS		   4
#define MK_ATTN_P_BLOCK		   (MK_ATTN_P_WARPS * MK_ATTN_P_ROWS)
/* L2 budget for the K and V of one schedule section (causal order), bytes. */
#define MK_ATTN_L2_SECTION_BYTES   (24ll << 20)

#define MK_ATTN_NWG(d)	   ((d) == 64 ? MK_ATTN_NWG_D64 : MK_ATTN_NWG_D128)
#define MK_ATTN_STAGES(d)  ((d) == 64 ? MK_ATTN_STAGES_D64 : MK_ATTN_STAGES_D128)
#define MK_ATTN_BM(d)	   (MK_ATTN_NWG(d) * MK_ATTN_WG_ROWS)
#define MK_ATTN_THREADS(d) ((MK_ATTN_NWG(d) + 1) * 128)
/* Shared memory: Q (BM x D) + STAGES x (K + V) (BN x D each) + barriers, + 1 KB alignment. */
#define MK_ATTN_SMEM_BYTES(d)                                                                      \
	(MK_ATTN_BM(d) * (d)*2 + MK_ATTN_STAGES(d) * 2 * MK_ATTN_BN * (d)*2 + 1024 + 256)

#ifdef __cplusplus
#define MK_ATTN_STATIC_ASSERT static_assert
#else
#define MK_ATTN_STATIC_ASSERT _Static_assert
#endif
MK_ATTN_STATIC_ASSERT(
	128 * MK_ATTN_PRODUCER_REGS_D64 + MK_ATTN_NWG_D64 * 128 * MK_ATTN_CONSUMER_REGS_D64 <=
		65536,
	"D=64 register split exceeds the SM's register file: setmaxnreg.inc would hang");
MK_ATTN_STATIC_ASSERT(
	128 * MK_ATTN_PRODUCER_REGS_D128 + MK_ATTN_NWG_D128 * 128 * MK_ATTN_CONSUMER_REGS_D128 <=
		65536,
	"D=128 register split exceeds the SM's register file: setmaxnreg.inc would hang");
MK_ATTN_STATIC_ASSERT(MK_ATTN_SMEM_BYTES(64) <= 232448 && MK_ATTN_SMEM_BYTES(128) <= 232448,
		      "shared memory above the 227 KB a Hopper block may have");

/* What the epilogue does with a finished tile of normalised O and its LSE. */
enum mk_attn_epi {
	MK_ATTN_EPI_STORE = 0,	   /* o = bf16(O); lse = LSE */
	MK_ATTN_EPI_PARTIAL = 1,   /* acc = fp32 O; lse = LSE: a partial the LSE rule can merge */
	MK_ATTN_EPI_MERGE = 2,	   /* (acc, lse) = merge((acc, lse), (O, LSE)), fp32 */
	MK_ATTN_EPI_MERGE_OUT = 3, /* o = bf16(merge(...)), lse = merged LSE; acc only read */
};

struct mk_attn_args {
	/* ---- problem (caller) ---- */
	int batch, heads_q, heads_kv, head_dim;
	int sq, skv;		 /* query rows and key rows of this call (>= 1) */
	long long q_batch_rows;	 /* rows from one batch to the next in q, o, acc (>= sq) */
	long long kv_batch_rows; /* rows from one batch to the next in k, v (>= skv) */
	long long lse_ld;	 /* lse elements from one (b, h) to the next (>= sq) */
	const void *q, *k, *v;	 /* bf16 [B][rows][H][D], pointing at this call's first row */
	void *o;		 /* bf16, layout of q with heads_q (STORE, MERGE_OUT) */
	float *acc;		 /* fp32, layout of o (PARTIAL, MERGE, MERGE_OUT) */
	float *lse;		 /* fp32 [B][Hq][lse_ld] at this call's first row; may be NULL
				  * in STORE mode */
	int epi;		 /* enum mk_attn_epi */
	int causal;
	long long q_pos, k_pos; /* absolute positions of the first query / key row */
	/* ---- derived by mk_attn_plan() ---- */
	int diag;	  /* q_pos - k_pos: key j visible to query i iff j <= i + diag */
	float scale;	  /* 1/sqrt(D) */
	float scale_log2; /* scale * log2(e): p = exp2(s * scale_log2 - m * scale_log2) */
	int block_m;	  /* query rows per work item (kernel dependent) */
	int tiles_m;	  /* query blocks per (b, h) */
	int kv_blocks;	  /* key blocks of MK_ATTN_BN */
	int bh;		  /* batch * heads_q */
	int group;	  /* heads_q / heads_kv */
	int section;	  /* causal: (b, h) pairs per L2 section of the schedule */
	int items;	  /* bh * tiles_m */
	int units;	  /* schedule units of the persistent kernel (mk_attn_unit) */
	/* ---- schedule (caller, optional) ---- */
	unsigned int *counter; /* zeroed device word: units taken by atomics; NULL: static */
};

/* TMA descriptors of one call (kernel parameter, by value): 4-D {D, H, rows, B} maps of Q, K, V
 * with boxes of 64 x 1 x rows x 1 and the 128-byte swizzle; rows past sq / skv read as zeros. */
struct mk_attn_tmaps {
	CUtensorMap q, k, v;
};

/*
 * Fill the derived fields for a kernel that takes `block_m` query rows per item. 0, or -EINVAL
 * with *why naming the rule (sizes, head dim, GQA ratio, strides, epilogue mode and its buffers).
 */
int mk_attn_plan(struct mk_attn_args *a, int block_m, const char **why);

/* Fill a (zeroed) args for mkAttention's problem: whole tensors, STORE, bottom-right causal. */
void mk_attn_args_init(struct mk_attn_args *a, const void *q, const void *k, const void *v, void *o,
		       float *lse, int batch, int heads_q, int heads_kv, int sq, int skv,
		       int head_dim, int causal);

/* 1 if the current device runs the sm_90a kernel (compute capability 9.0), else 0. */
int mk_attn_device_ok(void);

/* Build the tensor maps of a planned call. 0, -ENOSYS (no driver entry point), -EINVAL. */
int mk_attn_make_tensor_maps(const struct mk_attn_args *a, struct mk_attn_tmaps *maps);

/*
 * Run the Hopper kernel on `stream` for the problem in *a (planned here for its tile; the caller's
 * struct is not changed). ctas = 0: min(schedule units, SMs). 0, -EINVAL (plan failed, or pointers
 * not 16-byte aligned), -ENOSYS (no tensor-map encoder), -EIO (CUDA error).
 */
int mk_attn_run_hopper(const struct mk_attn_args *a, int ctas, cudaStream_t stream);

/* Run the portable kernel (any GPU of compute capability >= 7.0). 0, -EINVAL, -EIO. */
int mk_attn_run_portable(const struct mk_attn_args *a, cudaStream_t stream);

/* ---- planning shared by host and device ---- */

/* Floor of x / y for y > 0 (C division truncates toward zero). */
static MK_ATTN_HD int mk_attn_floor_div(int x, int y)
{
	return x >= 0 ? x / y : -((-x + y - 1) / y);
}

/*
 * Key blocks a query block needs: [0, end). Causal: the last visible key of the block's last row
 * (r_hi - 1 + diag) bounds it; blocks wholly above the diagonal are never loaded. 0 = the block
 * sees no key. 32-bit arithmetic is exact: lengths and |diag| are below 2^30 (mk_attn_plan).
 */
static MK_ATTN_HD int mk_attn_kv_end(const struct mk_attn_args *a, int mb)
{
	int r_hi = (mb + 1) * a->block_m;
	int last, end;

	if (!a->causal)
		return a->kv_blocks;
	if (r_hi > a->sq)
		r_hi = a->sq;
	last = r_hi - 1 + a->diag; /* last visible key row of the block */
	if (last < 0)
		return 0;
	end = last / MK_ATTN_BN + 1;
	return end < a->kv_blocks ? end : a->kv_blocks;
}

/*
 * First key block that needs the causal mask for query rows starting at `row0` (a warpgroup's
 * first row): every key of the blocks below it is visible to every row >= row0.
 */
static MK_ATTN_HD int mk_attn_mask_from(const struct mk_attn_args *a, int row0)
{
	int n;

	if (!a->causal)
		return a->kv_blocks;
	n = mk_attn_floor_div(row0 + a->diag + 1, MK_ATTN_BN);
	return n < 0 ? 0 : n;
}

/* 1 if key block n needs any masking for rows starting at row0 (causal edge or key tail). */
static MK_ATTN_HD int mk_attn_needs_mask(const struct mk_attn_args *a, int n, int row0)
{
	if (n == a->kv_blocks - 1 && (a->skv % MK_ATTN_BN) != 0)
		return 1;
	return n >= mk_attn_mask_from(a, row0);
}

/* 1 if key j is visible to query i (both relative to this call's first rows). */
static MK_ATTN_HD int mk_attn_visible(const struct mk_attn_args *a, int i, int j)
{
	if (j >= a->skv)
		return 0;
	return !a->causal || j <= i + a->diag;
}

/*
 * Static schedule of the persistent kernel: the CTA of `rank` among `count` takes units rank,
 * rank + count, ... (it = 0, 1, ...). -1 past the end.
 */
static MK_ATTN_HD int mk_attn_static_unit(int it, int rank, int count, int units)
{
	/* units and count are below 2^31: it * count + rank stays below 2^32 while it matters */
	unsigned int u = (unsigned int)it * (unsigned int)count + (unsigned int)rank;

	return u < (unsigned int)units ? (int)u : -1;
}

/*
 * Unit -> work items of the persistent kernel; returns how many (1 or 2) and fills bh and mb[].
 * Non-causal: one query block, (b, h) major, so the CTAs of a wave share K/V in L2. Causal: the
 * pair of query blocks (tiles_m - 1 - k, k), longest first, whose key ranges add up to about the
 * same for every k, so units dealt round-robin balance the CTAs; units go through sections of
 * `section` (b, h) pairs whose K and V fit the L2 budget. The middle block of an odd count is a
 * unit of its own.
 */
static MK_ATTN_HD int mk_attn_unit(const struct mk_attn_args *a, int unit, int *bh, int *mb)
{
	if (!a->causal) {
		*bh = unit / a->tiles_m;
		mb[0] = unit % a->tiles_m;
		return 1;
	}
	int pairs = (a->tiles_m + 1) / 2;
	int per = a->section * pairs;
	int sec = unit / per;
	int first = sec * a->section;
	int hs = a->bh - first < a->section ? a->bh - first : a->section;
	int v = unit - sec * per;
	int k = v / hs;

	*bh = first + v % hs;
	mb[0] = a->tiles_m - 1 - k;
	mb[1] = k;
	return mb[0] == k ? 1 : 2;
}

/*
 * Item -> (bh, query block) for kernels whose CTAs the hardware dispatches in index order (the
 * portable kernel): the same sections, inside one the query blocks with the most key blocks
 * first (longest-first), so late CTAs get the short items. Non-causal as mk_attn_unit().
 */
static MK_ATTN_HD void mk_attn_item(const struct mk_attn_args *a, int item, int *bh, int *mb)
{
	if (!a->causal) {
		*bh = item / a->tiles_m;
		*mb = item % a->tiles_m;
		return;
	}
	int per = a->section * a->tiles_m;
	int sec = item / per;
	int first = sec * a->section;
	int hs = a->bh - first < a->section ? a->bh - first : a->section;
	int u = item - sec * per;

	*mb = a->tiles_m - 1 - u / hs;
	*bh = first + u % hs;
}

/*
 * Merge two partials with the log-sum-exp rule: L = ln(e^la + e^lb), O = wa O_a + wb O_b.
 * -inf marks a partial that saw no key (its weight is 0); both -inf gives L = -inf, wa = wb = 0.
 */
static MK_ATTN_HD float mk_attn_lse_merge(float la, float lb, float *wa, float *wb)
{
	float m = la > lb ? la : lb;
	float ea, eb, s;

	if (m == -INFINITY) {
		*wa = 0.0f;
		*wb = 0.0f;
		return -INFINITY;
	}
	ea = expf(la - m);
	eb = expf(lb - m);
	s = ea + eb;
	*wa = ea / s;
	*wb = eb / s;
	return m + logf(s);
}

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_ATTN_ATTN_H */
