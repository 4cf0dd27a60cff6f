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
/* Registers per thread after setmaxnreg: producer warpgroup / consumer warpgroups. setmaxnreg.inc
 * takes registers from the CTA's own pool, which holds only what the CTA got at launch (see
 * MK_ATTN_ENTRY_REGS), not the SM's 64K: a split above that waits forever (checked below). */
#define MK_ATTN_PRODUCER_REGS_D64  32
#define MK_ATTN_CONSUMER_REGS_D64  160
#define MK_ATTN_PRODUCER_REGS_D128 40
#define MK_ATTN_CONSUMER_REGS_D128 232
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
#define MK_ATTN_PRODUCER_REGS(d)                                                                   \
	((d) == 64 ? MK_ATTN_PRODUCER_REGS_D64 : MK_ATTN_PRODUCER_REGS_D128)
#define MK_ATTN_CONSUMER_REGS(d)                                                                   \
	((d) == 64 ? MK_ATTN_CONSUMER_REGS_D64 : MK_ATTN_CONSUMER_REGS_D128)
/* Registers per thread a kernel with __launch_bounds__(MK_ATTN_THREADS(d), 1) may hold at launch:
 * the SM's 65536 shared by its warps in units of 256 a warp (8 a thread). ptxas gives both
 * kernels exactly this (D = 64: 128, D = 128: 168); check_attn_kernel.sh compares the split
 * with what the compiled kernels really hold. */
#define MK_ATTN_ENTRY_REGS(d) (65536 / (MK_ATTN_THREADS(d) / 32) / 256 * 8)
/* Registers of a CTA after setmaxnreg: one producer and MK_ATTN_NWG(d) consumer warpgroups. */
#define MK_ATTN_SPLIT_REGS(d)                                                                      \
	(128 * MK_ATTN_PRODUCER_REGS(d) + MK_ATTN_NWG(d) * 128 * MK_ATTN_CONSUMER_REGS(d))
/* Shared memory: Q (BM x D) + STAGES x (K + V) (BN x D each) + barriers, + 1 KB alignment. */
#define MK_ATTN_SMEM_BYTES(d)                                                                      \
	(MK_ATTN_BM(d) * (d)*2 + MK_ATTN_STAGES(d) * 2 * MK_ATTN_BN * (d)*2 + 1024 + 512)

#ifdef __cplusplus
#define MK_ATTN_STATIC_ASSERT static_assert
#else
#define MK_ATTN_STATIC_ASSERT _Static_assert
#endif
/* The pool setmaxnreg.inc draws from is the CTA's launch allocation: D = 64 has 128 x 512 =
 * 65,536, D = 128 only 168 x 384 = 64,512. dec may only lower and inc only raise a warp's count. */
MK_ATTN_STATIC_ASSERT(MK_ATTN_SPLIT_REGS(64) <= MK_ATTN_THREADS(64) * MK_ATTN_ENTRY_REGS(64),
		      "D=64 split exceeds the CTA's launch registers: setmaxnreg.inc would hang");
MK_ATTN_STATIC_ASSERT(MK_ATTN_SPLIT_REGS(128) <= MK_ATTN_THREADS(128) * MK_ATTN_ENTRY_REGS(128),
		      "D=128 split exceeds the CTA's launch registers: setmaxnreg.inc would hang");
MK_ATTN_STATIC_ASSERT(MK_ATTN_PRODUCER_REGS_D64 <= MK_ATTN_ENTRY_REGS(64) &&
			      MK_ATTN_ENTRY_REGS(64) <= MK_ATTN_CONSUMER_REGS_D64 &&
			      MK_ATTN_PRODUCER_REGS_D128 <= MK_ATTN_ENTRY_REGS(128) &&
			      MK_ATTN_ENTRY_REGS(128) <= MK_ATTN_CONSUMER_REGS_D128,
		      "setmaxnreg.dec must lower and .inc raise the launch register count");
MK_ATTN_STATIC_ASSERT(MK_ATTN_SMEM_BYTES(64) <= 232448 && MK_ATTN_SMEM_BYTES(128) <= 232448,
		      "shared memory above the 227 KB a Hopper block may have");

/* What the epilogue does with a finished tile of normalised O and its LSE (single calls; a job
 * says it per row with its fresh and final ranges). */
enum mk_attn_epi {
	MK_ATTN_EPI_STORE = 0,	   /* o = bf16(O); lse = LSE */
	MK_ATTN_EPI_PARTIAL = 1,   /* acc = fp32 O; lse = LSE: a partial the LSE rule can merge */
	MK_ATTN_EPI_MERGE = 2,	   /* (acc, lse) = merge((acc, lse), (O, LSE)), fp32 */
	MK_ATTN_EPI_MERGE_OUT = 3, /* o = bf16(merge(...)), lse = merged LSE; acc only read */
};

/* Jobs of one role (a ring's steps: at most one per rank of the ring). */
#define MK_ATTN_MAX_JOBS 16

/*
 * One attention job of a role: query rows of the role's q (and o, acc, lse) against key rows of
 * one K/V source. A single call is one job; a ring step is one job of the ring kernel's role.
 * Rows are job-relative below: query i is row q_row0 + i of q, key j row kv_row0 + j of K, V.
 * Per query row the epilogue writes (fresh rows) or merges into (the others) the fp32 partial
 * (acc, lse), or for final rows writes bf16 o (and lse) instead: fresh and final rows give
 * STORE, fresh only PARTIAL, final only MERGE_OUT, neither MERGE.
 */
struct mk_attn_job {
	/* ---- caller ---- */
	int q_row0, sq;		    /* query rows [q_row0, q_row0 + sq), sq >= 1 */
	int kv_row0, skv;	    /* key rows [kv_row0, kv_row0 + skv), skv >= 1 */
	int causal;		    /* key j visible to query i iff j <= i + diag */
	int diag;		    /* |diag| < 2^30 */
	int fresh_lo, fresh_hi;	    /* rows with no partial yet: written, nothing read */
	int final_lo, final_hi;	    /* rows whose result is final: bf16 o, else fp32 acc */
	const CUtensorMap *kv_maps; /* K then V map (global memory, 64-byte aligned) over the
				     * source's rows; NULL: the role's own K and V maps */
	const unsigned int *gate;   /* NULL, or no K/V load before *gate >= gate_value (plus
				     * the role's *gate_base) */
	unsigned int gate_value;
	/* ---- derived by mk_attn_plan() ---- */
	int tiles_m;   /* query blocks per (b, h) */
	int kv_blocks; /* key blocks of MK_ATTN_BN */
	int section;   /* causal: (b, h) pairs per L2 section of the schedule */
	int lpt;       /* causal: units are single query blocks, longest first (mk_attn_item);
			* else pairs of blocks (mk_attn_schedule_static picks) */
	int units;     /* schedule units (mk_attn_unit) */
	int unit0;     /* first unit of this job in the role's order (jobs in order) */
	int wg_items0; /* warpgroup items of the jobs before it (the merge order) */
};

struct mk_attn_args {
	/* ---- problem (caller) ---- */
	int batch, heads_q, heads_kv, head_dim;
	long long q_batch_rows;	 /* rows from one batch to the next in q, o, acc */
	long long kv_batch_rows; /* rows from one batch to the next in k, v */
	long long lse_ld;	 /* lse elements from one (b, h) to the next */
	const void *q, *k, *v;	 /* bf16 [B][rows][H][D] */
	void *o;		 /* bf16, layout of q with heads_q: final rows */
	float *acc;		 /* fp32, layout of o: partials (rows not final) */
	float *lse;		 /* fp32 [B][Hq][lse_ld]; may be NULL in STORE mode */
	/*
	 * A single call (njobs = 0): rows [0, sq) of q against [0, skv) of k, v, masked with the
	 * absolute positions q_pos, k_pos of their first rows (key j visible to query i iff
	 * k_pos + j <= q_pos + i), epilogue `epi`. mk_attn_plan() makes it job[0].
	 */
	int sq, skv, epi, causal;
	long long q_pos, k_pos;
	/* Several jobs (njobs >= 1): the caller fills job[0 .. njobs), run in that order. */
	int njobs;
	struct mk_attn_job job[MK_ATTN_MAX_JOBS];
	/*
	 * Merge order of several jobs: a zeroed word counting finished warpgroup epilogues; an
	 * epilogue that reads a partial waits until every item of the jobs before it is done.
	 * Required when a job after the first has rows that are not fresh.
	 */
	unsigned int *done;
	const unsigned int *gate_base; /* NULL, or gates count from its value at the start */
	int *error;		       /* first error of a bounded wait (mapped host word) */
	unsigned long long timeout_ns; /* bound of the gate and merge-order waits */
	/* ---- derived by mk_attn_plan() ---- */
	float scale;	  /* 1/sqrt(D) */
	float scale_log2; /* scale * log2(e): p = exp2(s * scale_log2 - m * scale_log2) */
	int block_m;	  /* query rows per work item (kernel dependent) */
	int bh;		  /* batch * heads_q */
	int group;	  /* heads_q / heads_kv */
	int units;	  /* schedule units of all jobs */
	int items;	  /* work items of all jobs */
	int snake;	  /* static schedule: odd rounds dealt in reverse (mk_attn_static_unit) */
	/* ---- schedule (caller, optional) ---- */
	unsigned int *counter; /* zeroed device word: units taken by atomics; NULL: static */
};

/* TMA descriptors of a role (kernel parameter, by value): 4-D {D, H, rows, B} maps of Q, K, V
 * with boxes of 64 x 1 x rows x 1 and the 128-byte swizzle; rows past the maps read as zeros. */
struct mk_attn_tmaps {
	CUtensorMap q, k, v; /* v right after k: the engine addresses V as K + 1 */
};

/*
 * Fill the derived fields (of every job) for a kernel that takes `block_m` query rows per item;
 * a single call becomes job[0]. 0, or -EINVAL with *why naming the rule (sizes, head dim, GQA
 * ratio, strides, row ranges, epilogue and its buffers).
 */
int mk_attn_plan(struct mk_attn_args *a, int block_m, const char **why);

/*
 * For a planned single causal job on the static schedule (counter NULL): pick the pairs or the
 * longest-first single blocks dealt in snake order, whichever leaves the busiest of `sms` CTAs
 * less work by the plan's own count of key blocks; returns the grid to launch.
 */
int mk_attn_schedule_static(struct mk_attn_args *a, int sms);

/* Busiest CTA's work over the mean, in key blocks plus a per-item overhead, of the static
 * schedule of a planned single-job args on `ctas` CTAs (what mk_attn_schedule_static compares). */
double mk_attn_static_imbalance(const struct mk_attn_args *a, int ctas);

/* Make a single-job args' job from its one-call fields (mk_attn_plan does it when njobs = 0). */
void mk_attn_job_single(const struct mk_attn_args *a, struct mk_attn_job *j);

/* Fill a (zeroed) args for mkAttention's problem: whole tensors, STORE, bottom-right causal. */
void mk_attn_args_init(struct mk_attn_args *a, const void *q, const void *k, const void *v, void *o,
		       float *lse, int batch, int heads_q, int heads_kv, int sq, int skv,
		       int head_dim, int causal);

/* 1 if the current device runs the sm_90a kernel (compute capability 9.0), else 0. */
int mk_attn_device_ok(void);

/*
 * Build the tensor maps of a planned single-job call: Q over rows [0, q_row0 + sq) of q, K and V
 * over [0, kv_row0 + skv) of k and v. 0, -ENOSYS (no driver entry point), -EINVAL.
 */
int mk_attn_make_tensor_maps(const struct mk_attn_args *a, struct mk_attn_tmaps *maps);

/* One map of a BSHD tensor ({D, H, rows, B}, row stride H x D, batch stride batch_rows x H x D)
 * with boxes of box_rows rows: what a role's jobs read. 0, -ENOSYS, -EINVAL. */
int mk_attn_encode_map(CUtensorMap *map, const void *base, int head_dim, int heads, int rows,
		       long long batch_rows, int batch, int box_rows);

/*
 * 0 if `kernel`, a __global__ function whose CTAs of MK_ATTN_THREADS(head_dim) threads run
 * mk_attn_role(), holds at launch the registers its setmaxnreg split hands out (and dec lowers,
 * inc raises its count); -ENOEXEC if not: setmaxnreg.inc would wait forever. -EIO: CUDA could
 * not say. *entry_regs (may be NULL): the kernel's registers per thread at launch. Fused kernels
 * check themselves once per device before their first launch, as mk_attn_run_hopper() does.
 */
int mk_attn_check_kernel(const void *kernel, int head_dim, int *entry_regs);

/*
 * Run the Hopper kernel on `stream` for a single-job problem in *a (planned here for its tile;
 * the caller's struct is not changed). ctas = 0: min(schedule units, SMs). 0, -EINVAL (plan
 * failed, several jobs, or pointers not 16-byte aligned), -ENOSYS (no tensor-map encoder),
 * -ENOEXEC (mk_attn_check_kernel() refused the kernel), -EIO.
 */
int mk_attn_run_hopper(const struct mk_attn_args *a, int ctas, cudaStream_t stream);

/* Run the portable kernel (any GPU of compute capability >= 7.0) for a single-job problem.
 * 0, -EINVAL, -EIO. */
int mk_attn_run_portable(const struct mk_attn_args *a, cudaStream_t stream);

/*
 * Run a single-job problem on the Hopper kernel where it can (compute capability 9.0, q, k, v
 * 16-byte and o 4-byte aligned, MKERNEL_ATTN_FORCE_PORTABLE unset, the driver's tensor-map
 * encoder found), else on the portable kernel; *portable_why (may be NULL) says why the portable
 * kernel ran, or is set to NULL. 0, -EINVAL, -EIO.
 */
int mk_attn_run(const struct mk_attn_args *a, cudaStream_t stream, const char **portable_why);

/* ---- planning shared by host and device ---- */

/* Floor of x / y for y > 0 (C division truncates toward zero). */
static MK_ATTN_HD int mk_attn_floor_div(int x, int y)
{
	return x >= 0 ? x / y : -((-x + y - 1) / y);
}

/*
 * Key blocks a query block of job j needs: [0, end). Causal: the last visible key of the
 * block's last row (r_hi - 1 + diag) bounds it; blocks wholly above the diagonal are never
 * loaded. 0 = the block sees no key. 32-bit arithmetic is exact: lengths and |diag| are below
 * 2^30 (mk_attn_plan).
 */
static MK_ATTN_HD int mk_attn_kv_end(const struct mk_attn_job *j, int block_m, int mb)
{
	int r_hi = (mb + 1) * block_m;
	int last, end;

	if (!j->causal)
		return j->kv_blocks;
	if (r_hi > j->sq)
		r_hi = j->sq;
	last = r_hi - 1 + j->diag; /* last visible key row of the block */
	if (last < 0)
		return 0;
	end = last / MK_ATTN_BN + 1;
	return end < j->kv_blocks ? end : j->kv_blocks;
}

/*
 * First key block that needs the causal mask for query rows starting at `row0` (a warpgroup's
 * first row): every key of the blocks below it is visible to every row >= row0.
 */
static MK_ATTN_HD int mk_attn_mask_from(const struct mk_attn_job *j, int row0)
{
	int n;

	if (!j->causal)
		return j->kv_blocks;
	n = mk_attn_floor_div(row0 + j->diag + 1, MK_ATTN_BN);
	return n < 0 ? 0 : n;
}

/* 1 if key block n needs any masking for rows starting at row0 (causal edge or key tail). */
static MK_ATTN_HD int mk_attn_needs_mask(const struct mk_attn_job *j, int n, int row0)
{
	if (n == j->kv_blocks - 1 && (j->skv % MK_ATTN_BN) != 0)
		return 1;
	return n >= mk_attn_mask_from(j, row0);
}

/* 1 if key k is visible to query i (job-relative rows). */
static MK_ATTN_HD int mk_attn_visible(const struct mk_attn_job *j, int i, int k)
{
	if (k >= j->skv)
		return 0;
	return !j->causal || k <= i + j->diag;
}

/*
 * Static schedule of the persistent kernel: the CTA of `rank` among `count` takes units rank,
 * rank + count, ... (it = 0, 1, ...) of all jobs in order; with `snake`, odd rounds go the other
 * way (count - 1 - rank), so units that shrink along the order (longest first) add up to about
 * the same per CTA over two rounds. -1 past the end.
 */
static MK_ATTN_HD int mk_attn_static_unit(int it, int rank, int count, int units, int snake)
{
	const unsigned int r =
		snake && (it & 1) ? (unsigned int)(count - 1 - rank) : (unsigned int)rank;
	/* units and count are below 2^31: it * count + r stays below 2^32 while it matters */
	unsigned int u = (unsigned int)it * (unsigned int)count + r;

	return u < (unsigned int)units ? (int)u : -1;
}

/* The job a unit of the role belongs to (jobs hold their units in order). */
static MK_ATTN_HD int mk_attn_job_of(const struct mk_attn_args *a, int unit)
{
	int j = 0;

	while (j + 1 < a->njobs && unit >= a->job[j + 1].unit0)
		j++;
	return j;
}

/*
 * Item -> (bh, query block) for kernels whose CTAs the hardware dispatches in index order (the
 * portable kernel): the same sections, inside one the query blocks with the most key blocks
 * first (longest-first), so late CTAs get the short items. Non-causal as mk_attn_unit().
 */
static MK_ATTN_HD void mk_attn_item(const struct mk_attn_args *a, const struct mk_attn_job *j,
				    int item, int *bh, int *mb)
{
	if (!j->causal) {
		*bh = item / j->tiles_m;
		*mb = item % j->tiles_m;
		return;
	}
	int per = j->section * j->tiles_m;
	int sec = item / per;
	int first = sec * j->section;
	int hs = a->bh - first < j->section ? a->bh - first : j->section;
	int u = item - sec * per;

	*mb = j->tiles_m - 1 - u / hs;
	*bh = first + u % hs;
}

/*
 * Unit (job-relative) -> work items of the persistent kernel; returns how many (1 or 2) and
 * fills bh and mb[]. Non-causal: one query block, (b, h) major, so the CTAs of a wave share K/V
 * in L2. Causal: the pair of query blocks (tiles_m - 1 - k, k), longest first, whose key
 * ranges add up to about the same for every k, so units dealt round-robin balance the CTAs;
 * units go through sections of `section` (b, h) pairs whose K and V fit the L2 budget. The
 * middle block of an odd count is a unit of its own. Causal with `lpt`: one query block per
 * unit in mk_attn_item's order.
 */
static MK_ATTN_HD int mk_attn_unit(const struct mk_attn_args *a, const struct mk_attn_job *j,
				   int unit, int *bh, int *mb)
{
	if (!j->causal) {
		*bh = unit / j->tiles_m;
		mb[0] = unit % j->tiles_m;
		return 1;
	}
	if (j->lpt) {
		mk_attn_item(a, j, unit, bh, mb);
		return 1;
	}
	int pairs = (j->tiles_m + 1) / 2;
	int per = j->section * pairs;
	int sec = unit / per;
	int first = sec * j->section;
	int hs = a->bh - first < j->section ? a->bh - first : j->section;
	int v = unit - sec * per;
	int k = v / hs;

	*bh = first + v % hs;
	mb[0] = j->tiles_m - 1 - k;
	mb[1] = k;
	return mb[0] == k ? 1 : 2;
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
