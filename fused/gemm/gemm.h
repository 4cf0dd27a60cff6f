/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GEMM engine's internal interface, shared by host C code (the ops in fused/ops/, mkGemm's
 * dispatch among them, tests, benchmarks) and by device code (gemm_engine.cuh). It describes one
 * bf16 GEMM C = A @ B with A row-major M x K and B row-major K x N or N x K, the engine variant
 * that runs it (tile shape and k-splits), the tile scheduler a compute role follows (tile order,
 * CTA subset, SM budget) and the per-tile epilogue (where the tile goes, how, and which ready flag
 * is raised once it is visible). Everything here is plain C so fused ops written in C can fill it.
 *
 * Alignment rules of the engine (mk_gemm_check() enforces them; mkGemm sends anything else to
 * cuBLAS): A, B 16-byte aligned; K a multiple of 8 (TMA needs 16-byte row strides for A and for an
 * N x K B); for a K x N B also N a multiple of 8. M, N and K need not be multiples of the tile:
 * TMA zero-fills loads past the edges and the epilogue predicates stores. Output pointers need
 * 2-byte alignment (4 bytes and an even row stride take the paired-store path).
 */
#ifndef MK_FUSED_GEMM_GEMM_H
#define MK_FUSED_GEMM_GEMM_H

#include <stddef.h>

#include <cuda.h> /* CUtensorMap (type only: the encoder comes from the runtime's entry point) */
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Tile shape and pipeline of the default variant, the one fused ops' compute roles run (README.md
 * in this folder says why these values). The other variants below differ in rows per tile (one
 * consumer warpgroup: 64), columns per tile (128) and pipeline depth.
 */
#define MK_GEMM_BM	128
#define MK_GEMM_BN	256
#define MK_GEMM_BK	64
#define MK_GEMM_STAGES	4
#define MK_GEMM_THREADS 384 /* producer warpgroup + 2 consumer warpgroups */
#define MK_GEMM_GROUP_M 16  /* default raster: bands of 16 tile rows (L2 reuse) */
#define MK_GEMM_A_STAGE (MK_GEMM_BM * MK_GEMM_BK * 2)
#define MK_GEMM_B_STAGE (MK_GEMM_BN * MK_GEMM_BK * 2)
#define MK_GEMM_C_BOX	64 /* TMA store box: 64 x 64 bf16, 128-byte swizzle */
#define MK_GEMM_C_STAGE (2 * MK_GEMM_C_BOX * MK_GEMM_C_BOX * 2) /* per consumer warpgroup */
#define MK_GEMM_SMEM_BYTES                                                                         \
	(MK_GEMM_STAGES * (MK_GEMM_A_STAGE + MK_GEMM_B_STAGE) + 2 * MK_GEMM_C_STAGE + 1024 + 256)

/*
 * Engine variants: tile shapes. A tile of 64 rows has one consumer warpgroup (256 threads), one
 * of 128 rows two (384 threads); 128 columns issue m64n128k16 instead of m64n256k16. Each
 * variant takes as many pipeline stages as fit in the 227 KB a block may have (at most 8).
 */
enum mk_gemm_tile {
	MK_GEMM_TILE_128x256 = 0, /* the default */
	MK_GEMM_TILE_64x256 = 1,  /* M <= 64 .. 128: half the wasted rows */
	MK_GEMM_TILE_128x128 = 2, /* more tiles when N or the tile count is small */
	MK_GEMM_TILE_64x128 = 3,  /* both */
	MK_GEMM_TILE_COUNT = 4,
};

#define MK_GEMM_SMEM_MAX       232448 /* dynamic shared memory a block may opt into on sm_90 */
#define MK_GEMM_MAX_STAGES     8
#define MK_GEMM_MAX_SPLITS     16
#define MK_GEMM_SMEM_FIXED     (1024 + 256) /* 1024-byte alignment slack + barriers */
#define MK_GEMM_CWG_OF(bm)     ((bm) / 64)  /* consumer warpgroups */
#define MK_GEMM_A_STAGE_OF(bm) ((bm)*MK_GEMM_BK * 2)
#define MK_GEMM_B_STAGE_OF(bn) ((bn)*MK_GEMM_BK * 2)
#define MK_GEMM_STAGES_FIT(bm, bn)                                                                 \
	((MK_GEMM_SMEM_MAX - MK_GEMM_SMEM_FIXED - MK_GEMM_CWG_OF(bm) * MK_GEMM_C_STAGE) /          \
	 (MK_GEMM_A_STAGE_OF(bm) + MK_GEMM_B_STAGE_OF(bn)))
#define MK_GEMM_STAGES_OF(bm, bn)                                                                  \
	(MK_GEMM_STAGES_FIT(bm, bn) > MK_GEMM_MAX_STAGES ? MK_GEMM_MAX_STAGES                      \
							 : MK_GEMM_STAGES_FIT(bm, bn))
#define MK_GEMM_SMEM_BYTES_OF(bm, bn)                                                              \
	(MK_GEMM_STAGES_OF(bm, bn) * (MK_GEMM_A_STAGE_OF(bm) + MK_GEMM_B_STAGE_OF(bn)) +           \
	 MK_GEMM_CWG_OF(bm) * MK_GEMM_C_STAGE + MK_GEMM_SMEM_FIXED)
#define MK_GEMM_THREADS_OF(bm) (128 * (1 + MK_GEMM_CWG_OF(bm)))

/*
 * Split-K workspace: a counter per tile (first MK_GEMM_SPLIT_COUNT_BYTES, zero before the first
 * launch; the last split of a tile resets its counter, so it stays zero between launches), then
 * fp32 partials, one slot of bm x bn per (tile, split) in the accumulators' register order.
 */
#define MK_GEMM_SPLIT_COUNT_BYTES 65536
#define MK_GEMM_SPLIT_MAX_TILES	  (MK_GEMM_SPLIT_COUNT_BYTES / 4)

enum mk_gemm_b_layout {
	MK_GEMM_B_KN = 0, /* B row-major K x N (N contiguous) */
	MK_GEMM_B_NK = 1, /* B row-major N x K (K contiguous): an nn.Linear weight */
};

/* What the epilogue does with a finished fp32 tile, per destination. */
enum mk_gemm_epi_mode {
	MK_GEMM_EPI_STORE = 0, /* out = bf16(acc); out may be a peer GPU's pointer */
	MK_GEMM_EPI_ACCUMULATE =
		1, /* out = bf16(out + acc); the caller owns the tile exclusively */
	MK_GEMM_EPI_ATOMIC_ADD = 2, /* out += acc with bf16x2 atomics: several writers per tile */
};

enum mk_gemm_flag_scope {
	MK_GEMM_FLAG_GPU = 0, /* readers are CTAs of this GPU */
	MK_GEMM_FLAG_SYS = 1, /* readers are peer GPUs or the CPU (flags or tiles in peer memory) */
};

#define MK_GEMM_MAX_OUT 2

struct mk_gemm_epilogue {
	void *out[MK_GEMM_MAX_OUT];    /* bf16 row-major M x N; out[1] optional (NULL) */
	long long ld[MK_GEMM_MAX_OUT]; /* row stride in elements (>= N) */
	int mode[MK_GEMM_MAX_OUT];     /* enum mk_gemm_epi_mode */
	/*
	 * Per-tile ready flags indexed by tile id (tm * tiles_n + tn), or NULL. After a tile's
	 * stores to every destination the engine adds 1 with release semantics at `ready_scope`,
	 * so a reader that acquires flag >= epoch sees the whole tile.
	 */
	unsigned int *ready;
	int ready_scope; /* enum mk_gemm_flag_scope */
	/*
	 * Set by mk_gemm_make_tensor_maps(): bit o = out[o] is written by TMA stores through the
	 * tensor map maps.c[o] (store mode, 16-byte aligned pointer, row stride a multiple of 8);
	 * other destinations take per-thread stores.
	 */
	int tma_mask;
};

/*
 * Optional (all-gather + GEMM): A's rows arrive while the GEMM runs. Before the first TMA load
 * of a tile in tile row tm, the producer waits until ready[tm] >= want[tm] (acquire, system
 * scope: the writers may be peer GPUs, a NIC or other CTAs), then fences the async proxy so its
 * loads see what generic stores wrote. The wait gives up after timeout_ns, or at once when
 * *error is non-zero (recording -ETIMEDOUT there if it was zero), and computes on: the caller
 * reports the error. ready == NULL: no wait.
 */
struct mk_gemm_a_wait {
	const unsigned int *ready; /* per tile row */
	const unsigned int *want;  /* per tile row */
	int *error;		   /* mapped host word, first error wins */
	unsigned long long timeout_ns;
};

struct mk_gemm_sched {
	/*
	 * Tile order: ticket i (0 .. tiles-1) computes tile order[i] (tile id tm * tiles_n + tn);
	 * NULL = grouped raster (MK_GEMM_GROUP_M tile rows per band). Must be a permutation.
	 */
	const int *order;
	/*
	 * Ticket source. NULL: static, the role CTA of rank r takes tickets r, r + count, ...
	 * Non-NULL: a zeroed device counter; role CTAs take the next ticket with an atomic, so any
	 * subset of CTAs, changing at any tile boundary, shares the work.
	 */
	unsigned int *counter;
	/*
	 * Optional SM budget (dynamic mode only): before each ticket a role CTA of rank r stops
	 * if r >= *active (rank 0 never stops, so the work always finishes). A controller may
	 * lower or raise it while the kernel runs.
	 */
	const int *active;
	struct mk_gemm_a_wait a_wait; /* optional: wait for A's rows (above) */
};

struct mk_gemm_args {
	int m, n, k;
	int b_layout; /* enum mk_gemm_b_layout */
	int tiles_m, tiles_n;
	struct mk_gemm_sched sched;
	struct mk_gemm_epilogue epi;
	/*
	 * Variant (mk_gemm_args_variant()): tile shape and k-splits. 0 / 0 = 128 x 256, no split.
	 * With splits > 1 each tile is `splits` work units over contiguous k-block ranges; every
	 * unit stores its fp32 partial into split_ws, and the unit that finishes last adds the
	 * partials in split order (deterministic) and runs the epilogue: ready flags are raised
	 * once per tile, as without splits.
	 */
	int tile;		   /* enum mk_gemm_tile */
	int splits;		   /* 1 .. MK_GEMM_MAX_SPLITS and at most the k-blocks; 0 = 1 */
	unsigned int *split_count; /* per tile; see MK_GEMM_SPLIT_COUNT_BYTES */
	float *split_ws;	   /* fp32 partials */
};

static inline int mk_gemm_tile_bm(int tile)
{
	return tile == MK_GEMM_TILE_64x256 || tile == MK_GEMM_TILE_64x128 ? 64 : 128;
}

static inline int mk_gemm_tile_bn(int tile)
{
	return tile == MK_GEMM_TILE_128x128 || tile == MK_GEMM_TILE_64x128 ? 128 : 256;
}

/* Tensor maps of one GEMM: A, B and up to two TMA-stored outputs (kernel parameter, by value). */
struct mk_gemm_tmaps {
	CUtensorMap a, b;
	CUtensorMap c[MK_GEMM_MAX_OUT];
};

/* A standalone launch of the engine: the kernel's CTAs are all compute-role CTAs. */
struct mk_gemm_launch {
	const void *a; /* bf16 row-major M x K */
	const void *b; /* bf16, see b_layout */
	int ctas;      /* grid size; 0 = min(work units, SMs) */
	struct mk_gemm_args args;
};

/* Fill args for C = A @ B into `c` (row stride n), store mode, no flags, static default order. */
void mk_gemm_args_init(struct mk_gemm_args *args, int m, int n, int k, int b_layout, void *c);

/*
 * Run `args` with another tile shape and k-split count: recomputes the tile counts; clears the
 * split workspace pointers (mk_gemm_args_split_ws() sets them).
 */
void mk_gemm_args_variant(struct mk_gemm_args *args, int tile, int splits);

/* Bytes of split workspace `args` needs (0 without splits). */
size_t mk_gemm_split_ws_bytes(const struct mk_gemm_args *args);

/* Point args at a split workspace of mk_gemm_split_ws_bytes() bytes (256-byte aligned). */
void mk_gemm_args_split_ws(struct mk_gemm_args *args, void *ws);

/* 0 if the engine can run this problem, else -EINVAL and *why says which rule failed. */
int mk_gemm_check(const void *a, const void *b, const struct mk_gemm_args *args, const char **why);

/* 1 if the current device can run the sm_90a kernels (compute capability 9.0), else 0. */
int mk_gemm_device_ok(void);

/* Launch on `stream`. 0, -EINVAL (check failed), -ENOSYS (no driver entry point), -EIO (CUDA). */
int mk_gemm_run(const struct mk_gemm_launch *l, cudaStream_t stream);

/*
 * Launch args (already checked) with tensor maps mk_gemm_make_tensor_maps() built for them
 * (callers that run one shape many times keep the maps). ctas as in struct mk_gemm_launch.
 * 0 or -EIO.
 */
int mk_gemm_launch_prepared(const struct mk_gemm_args *args, const struct mk_gemm_tmaps *maps,
			    int ctas, cudaStream_t stream);

/*
 * Build the tensor maps a kernel passes to mk_gemm_role() as one __grid_constant__ parameter,
 * and set args->epi.tma_mask. 0, -ENOSYS (no driver entry point), -EINVAL (encoding refused).
 */
int mk_gemm_make_tensor_maps(const void *a, const void *b, struct mk_gemm_args *args,
			     struct mk_gemm_tmaps *maps);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_GEMM_GEMM_H */
