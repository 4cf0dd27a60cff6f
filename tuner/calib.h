/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Calibration data: what was measured on a GPU, read by the policy engine's cost model and by
 * mkGemm's path choice. One text format serves a file written by `mkernel-calibrate`
 * (MKERNEL_CALIBRATION) and the built-in table compiled from the H200 data in this folder
 * (calib_h200.txt). Plain C, no CUDA.
 *
 * Format: one record per line, '#' starts a comment, blank lines are ignored.
 *
 *	mkernel-calibration 1                      first record: format version
 *	device SMS NAME...                         the GPU it was measured on (informational)
 *	gemm M N K nk|kn PATH US                   median time of C = A @ B on one path, in us
 *	link nvl|net LAT_US GBPS                   a link's latency and bandwidth per direction
 *	fused OP OVERHEAD_US                       a fused op's fixed cost over its parts, in us
 *	coll KIND IMPL NODES LOCAL BYTES US        a collective's median time on NODES nodes of
 *	                                           LOCAL ranks: KIND allreduce, ..., IMPL nccl
 *	                                           (the unfused path's), oneshot (mkernel's
 *	                                           exchange after the GEMM) or fused (what the
 *	                                           fused kernel takes beyond the GEMM alone)
 *	split OP NODES LOCAL M SHARE INTRA SEND REDUCE
 *	                                           the best static split measured for OP on NODES
 *	                                           nodes of LOCAL ranks at M rows, on SHARE SMs:
 *	                                           CTAs of each communication role
 *
 * PATH is `cublas` (cuBLASLt, the heuristic's algorithm), `gemmex` (cublasGemmEx: on some small
 * and odd shapes its own algorithm choice beats Lt's heuristic), `skinny` (mkernel's kernel for
 * M <= 16 with B N x K: fused/gemm/skinny.h) or `eBMxBNsS`, mkernel's engine
 *with BM x BN tiles and S k-splits (e128x256s1, e64x128s4, ...). OP is a policy op name
 * (gemm_allreduce, ...). A file with any malformed record is rejected as a whole.
 *
 * Shape classes. The measured (M, N, K) points of one B layout are the classes. A query's
 * M bucket is the smallest measured M >= its M (the largest when above all); within the bucket
 * the class nearest in log2(N) + log2(K) wins (ties: the larger N K, then the larger N). A
 * bucket more than MK_CALIB_MAX_M_RATIO times the query's M, or a class farther than
 * MK_CALIB_MAX_DIST, is no class: the caller uses its default.
 */
#ifndef MK_TUNER_CALIB_H
#define MK_TUNER_CALIB_H

#include <stddef.h>
#include <stdint.h>

#define MK_CALIB_VERSION       1
#define MK_CALIB_MAX_GEMM      65536
#define MK_CALIB_MAX_BYTES     (4u << 20)
#define MK_CALIB_MAX_OPS       16
#define MK_CALIB_MAX_DIST      2.0 /* log2 units: a factor of 4 in N or K, or 2 in both */
#define MK_CALIB_MAX_M_RATIO   4.0
/*
 * The engine must beat cuBLAS by this share at the class to be chosen (noise margin): two grids
 * of one build on the H200 moved the engine's cells by up to 2 % against cuBLAS, and one cell
 * where the table had it 1.1 % ahead ran 0.84 of cuBLAS in the second.
 */
#define MK_CALIB_TIE	       0.02
/* cublasGemmEx must beat cuBLASLt by this share at the class to be chosen (calib.c says why). */
#define MK_CALIB_GEMMEX_MARGIN 0.10

enum mk_calib_link {
	MK_CALIB_NVL = 0,
	MK_CALIB_NET = 1,
	MK_CALIB_LINKS = 2,
};

/* mk_calib_gemm.engine and mk_calib_choice.engine of the skinny kernel */
#define MK_CALIB_SKINNY 2

/* One measured (shape, path). */
struct mk_calib_gemm {
	uint32_t m, n, k;
	uint8_t b_nk;	 /* 1: B is N x K */
	uint8_t engine;	 /* 0: cuBLAS, 1: mkernel's engine, MK_CALIB_SKINNY: the skinny kernel */
	uint8_t splits;	 /* engine: k-splits */
	uint8_t gemmex;	 /* cuBLAS: 1 cublasGemmEx, 0 cuBLASLt */
	uint16_t bm, bn; /* engine: tile shape */
	float us;
};

/* One measured best static split. */
struct mk_calib_split {
	int op, nodes, local, share;
	uint32_t m;
	int comm[3]; /* intra, send, reduce CTAs */
};

#define MK_CALIB_MAX_SPLITS 1024
#define MK_CALIB_MAX_COLLS  4096

enum mk_calib_impl {
	MK_CALIB_NCCL = 0,
	MK_CALIB_ONESHOT = 1,
	MK_CALIB_FUSED = 2,
};

/* One measured collective. */
struct mk_calib_coll {
	int kind, impl, nodes, local;
	uint64_t bytes;
	double us;
};

struct mk_calib {
	struct mk_calib_gemm *gemm; /* sorted by (b_nk, m, n, k, us) */
	size_t ngemm;
	struct mk_calib_split *split;
	size_t nsplit;
	struct mk_calib_coll *coll;
	size_t ncoll;
	double lat_us[MK_CALIB_LINKS], gbps[MK_CALIB_LINKS];
	int link_set[MK_CALIB_LINKS];
	double overhead_us[MK_CALIB_MAX_OPS]; /* by enum mk_fused_op */
	int overhead_set[MK_CALIB_MAX_OPS];
	int sms;
	char device[64];
	char source[160]; /* the file, or "built-in" */
	uint64_t gen;	  /* unique per parse: keys the per-thread memo of class lookups */
};

/*
 * Parse `len` bytes of calibration text into *out (heap memory: mk_calib_free()). 0, or
 * -EINVAL with *line (1-based) and *why naming the first bad record, or -ENOMEM.
 */
int mk_calib_parse(const char *text, size_t len, struct mk_calib *out, int *line, const char **why);
void mk_calib_free(struct mk_calib *c);

/*
 * The process's calibration, read once: the file MKERNEL_CALIBRATION names when it is set and
 * valid (else a WARN saying why, and the built-in table), or the built-in table. Never NULL.
 */
const struct mk_calib *mk_calib_get(void);

/* Forget the cached calibration so the next mk_calib_get() reads again (tests and tools only:
 * no pointer from an earlier mk_calib_get() may be in use). */
void mk_calib_reload(void);

/* The built-in table's text (generated from calib_h200.txt at build time). */
extern const char mk_calib_builtin[];

/* What to run for one GEMM. */
struct mk_calib_choice {
	int engine; /* 0: cuBLAS, 1: the engine with bm x bn tiles and `splits`, MK_CALIB_SKINNY */
	int gemmex; /* cuBLAS: 1 cublasGemmEx, 0 cuBLASLt */
	int unaligned; /* N or K not a multiple of 8: rows the classes never had (gemmex is 1) */
	int bm, bn, splits;
	double us;	  /* the chosen path's time at the class */
	double cublas_us; /* the chosen cuBLAS call's time at the class, 0 if not measured */
	uint32_t m, n, k; /* the class */
};

/* Engine paths the caller can run for this shape (alignment, workspace, capture), or NULL. */
typedef int (*mk_calib_path_ok)(const struct mk_calib_gemm *path, void *arg);

/*
 * The faster path at the class of (m, n, k, b_nk): the fastest engine path that `ok` accepts
 * when it beats cuBLAS by MK_CALIB_TIE (or cuBLAS was not measured there), else cuBLAS: cuBLASLt,
 * or cublasGemmEx where it beats Lt by MK_CALIB_GEMMEX_MARGIN or where the call's rows are not
 * 16-byte aligned (N or K not a multiple of 8; calib.c says why). 0, or -ENOENT when the shape
 * has no class (*out is then cuBLAS with no times, gemmex set for unaligned rows).
 */
int mk_calib_gemm_choose(const struct mk_calib *c, uint64_t m, uint64_t n, uint64_t k, int b_nk,
			 mk_calib_path_ok ok, void *arg, struct mk_calib_choice *out);

/*
 * Estimated time in us of the best path for (m, n, k, b_nk): the class's best time scaled by
 * N K / (N_c K_c) and by M / M_c above the largest measured M. Negative when there is no class.
 */
double mk_calib_gemm_us(const struct mk_calib *c, uint64_t m, uint64_t n, uint64_t k, int b_nk);

/*
 * The measured static split for (op, nodes, local ranks) nearest to m rows (log2), scaled from
 * its SM share to `sms`: CTAs of the intra, send and reduce roles in comm[] (a role measured
 * with CTAs keeps at least one). A split measured with ranks sharing the GPU (its share below
 * the `device` record's SMs) holds for that share only and is not scaled: ranks that share a
 * GPU contend for it, and over loopback their communication roles do far more work per byte
 * than over NVLink or a NIC, so such a split scaled to a whole GPU (8 CTAs of 33 per role: 32
 * of 132) would starve the GEMM on a real cluster. 0, or -ENOENT when that op and layout were
 * not measured (at that share).
 */
int mk_calib_split_get(const struct mk_calib *c, int op, int nodes, int local, uint64_t m, int sms,
		       int comm[3]);

/*
 * Time in us of collective `kind` (enum mk_coll) by `impl` on (nodes, local) for `bytes`, from
 * the measurements of that collective, implementation and layout: interpolated in log2(bytes)
 * between the two nearest sizes, the smallest size's time below it (latency), scaled by the
 * bytes above the largest (bandwidth). Negative when nothing was measured.
 */
double mk_calib_coll_us(const struct mk_calib *c, int kind, int impl, int nodes, int local,
			uint64_t bytes);

#endif /* MK_TUNER_CALIB_H */
