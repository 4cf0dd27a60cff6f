// SPDX-License-Identifier: Apache-2.0
/*
 * The gemm op's cuBLAS paths (gemm_fallback.h). Row-major C = A @ B is computed as column-major
 * C^T = op(B) A^T, so no data is transposed.
 *
 * cublasGemmEx: one handle per thread and device (a cuBLAS handle must not be shared between
 * threads that set different streams), created on first use and kept for the thread's life.
 *
 * cuBLASLt: cublasGemmEx chooses its algorithm inside every call; cuBLASLt lets the choice be
 * made once per shape and kept: descriptors, layouts and the heuristic's algorithm are cached
 * per thread (descriptors are not shared between threads), keyed by device, shape and types.
 * One cuBLASLt handle per device.
 */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/gemm_fallback.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/log.h"
#include "mk/param.h"

MK_PARAM_DECLARE_INT(gemm_bf16_reduction); /* fused/gemm/gemm_params.c */

#define FALLBACK_MAX_DEVICES 64

static __thread cublasHandle_t fallback_handles[FALLBACK_MAX_DEVICES];
/* The stream each handle was last given (a new handle's is the default stream, NULL):
 * cublasSetStream resets the handle's workspace each time, host time a decode-size GEMM's GPU
 * waits for, so it is called only when the stream changes. */
static __thread cudaStream_t fallback_streams[FALLBACK_MAX_DEVICES];

static int fallback_handle(cublasHandle_t *out, cudaStream_t stream)
{
	cublasStatus_t st;
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= FALLBACK_MAX_DEVICES)
		return -ENODEV;
	if (fallback_handles[dev] == NULL) {
		st = cublasCreate(&fallback_handles[dev]);
		/* fp32 accumulation end to end, as the engine: no split-K reduction in bf16,
		 * unless MKERNEL_GEMM_BF16_REDUCTION allows what cuBLAS's default does. */
		if (st == CUBLAS_STATUS_SUCCESS && !mk_param_gemm_bf16_reduction())
			st = cublasSetMathMode(
				fallback_handles[dev],
				CUBLAS_DEFAULT_MATH |
					CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
		if (st != CUBLAS_STATUS_SUCCESS) {
			MK_WARN("cublasCreate failed on device %d: %s", dev,
				cublasGetStatusString(st));
			fallback_handles[dev] = NULL;
			return -EIO;
		}
		fallback_streams[dev] = NULL;
	}
	if (fallback_streams[dev] != stream) {
		st = cublasSetStream(fallback_handles[dev], stream);
		if (st != CUBLAS_STATUS_SUCCESS) {
			MK_WARN("cublasSetStream failed on device %d: %s", dev,
				cublasGetStatusString(st));
			return -EIO;
		}
		fallback_streams[dev] = stream;
	}
	*out = fallback_handles[dev];
	return 0;
}

int mk_fallback_gemm(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		     cudaDataType_t ab_type, cudaDataType_t c_type, cudaStream_t stream)
{
	const float one = 1.0f, zero = 0.0f;
	cublasHandle_t h;
	cublasStatus_t st;
	int rc;

	rc = fallback_handle(&h, stream);
	if (rc)
		return rc;
	st = cublasGemmEx(h, b_nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b,
			  ab_type, b_nk ? k : n, a, ab_type, k, &zero, c, c_type, n,
			  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (st != CUBLAS_STATUS_SUCCESS) {
		MK_WARN("cublasGemmEx(m %d, n %d, k %d) failed: %s", m, n, k,
			cublasGetStatusString(st));
		return -EIO;
	}
	return 0;
}

int mk_fallback_gemm_bf16(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
			  cudaStream_t stream)
{
	return mk_fallback_gemm(a, b, c, m, n, k, b_nk, CUDA_R_16BF, CUDA_R_16BF, stream);
}

/* ---- cuBLASLt ---- */

#define BLAS_MAX_DEVICES 64
#define BLAS_SETS	 16 /* x MK_GEMM_WAYS shapes per thread */

struct blas_plan {
	struct mk_gemm_way way; /* valid: the plan's descriptors are held */
	struct mk_gemm_key key; /* x0, x1: A/B and C types */
	size_t ws_cap;		/* workspace the heuristic was allowed */
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
	size_t ws_need;
};

static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static cublasLtHandle_t blas_handles[BLAS_MAX_DEVICES];
static __thread struct blas_plan blas_cache[BLAS_SETS][MK_GEMM_WAYS];
static __thread unsigned long long blas_clock;

static int blas_handle(int dev, cublasLtHandle_t *out)
{
	int rc = 0;

	pthread_mutex_lock(&blas_lock);
	if (blas_handles[dev] == NULL &&
	    cublasLtCreate(&blas_handles[dev]) != CUBLAS_STATUS_SUCCESS) {
		blas_handles[dev] = NULL;
		rc = -EIO;
	}
	*out = blas_handles[dev];
	pthread_mutex_unlock(&blas_lock);
	return rc;
}

static void blas_plan_free(struct blas_plan *p)
{
	if (!p->way.valid)
		return;
	cublasLtMatrixLayoutDestroy(p->la);
	cublasLtMatrixLayoutDestroy(p->lb);
	cublasLtMatrixLayoutDestroy(p->lc);
	cublasLtMatmulDescDestroy(p->desc);
	p->way.valid = 0;
}

/* Descriptors, layouts and the heuristic's first algorithm for the plan's key. 0 or -errno. */
static int blas_plan_make(cublasLtHandle_t lt, struct blas_plan *p)
{
	const cublasOperation_t ta = p->key.b_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
	const cudaDataType_t ab = (cudaDataType_t)p->key.x0, ct = (cudaDataType_t)p->key.x1;
	const int m = p->key.m, n = p->key.n, k = p->key.k, b_nk = p->key.b_nk;
	/* fp32 all the way, as the engine: split-K partials may only be added in the compute type
	 * (not in place in the output, nor in the output type). */
	const uint32_t schemes = mk_param_gemm_bf16_reduction()
					 ? CUBLASLT_REDUCTION_SCHEME_MASK
					 : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	int found = 0, rc = -ENOSYS;

	if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) !=
	    CUBLAS_STATUS_SUCCESS)
		return -EIO;
	p->la = p->lb = p->lc = NULL;
	if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) ||
	    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) ||
	    cublasLtMatrixLayoutCreate(&p->la, ab, b_nk ? k : n, b_nk ? n : k, b_nk ? k : n) ||
	    cublasLtMatrixLayoutCreate(&p->lb, ab, k, m, k) ||
	    cublasLtMatrixLayoutCreate(&p->lc, ct, n, m, n) ||
	    cublasLtMatmulPreferenceCreate(&pref) ||
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						 &p->ws_cap, sizeof(p->ws_cap)) ||
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
						 &schemes, sizeof(schemes))) {
		rc = -EIO;
		goto undo;
	}
	if (cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
					   &found) == CUBLAS_STATUS_SUCCESS &&
	    found > 0) {
		p->algo = res.algo;
		p->ws_need = res.workspaceSize;
		cublasLtMatmulPreferenceDestroy(pref);
		p->way.valid = 1;
		return 0;
	}
undo:
	if (pref != NULL)
		cublasLtMatmulPreferenceDestroy(pref);
	if (p->la != NULL)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->lb != NULL)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->lc != NULL)
		cublasLtMatrixLayoutDestroy(p->lc);
	cublasLtMatmulDescDestroy(p->desc);
	return rc;
}

/*
 * The thread's entry for key (the one holding it, else the one a new plan would take: free or
 * least recently used; nothing is changed), and whether it holds key's plan for this workspace
 * size.
 */
static struct blas_plan *blas_plan_slot(const struct mk_gemm_key *key, size_t ws_bytes, bool *hit)
{
	struct blas_plan *set = blas_cache[mk_gemm_key_slot(key, BLAS_SETS)];
	int w = mk_gemm_way_find(set, sizeof(set[0]), offsetof(struct blas_plan, way),
				 offsetof(struct blas_plan, key), key);

	*hit = w >= 0 && set[w].ws_cap == ws_bytes;
	if (w < 0)
		w = mk_gemm_way_victim(set, sizeof(set[0]), offsetof(struct blas_plan, way));
	return &set[w];
}

int mk_gemm_blaslt_on(int dev, const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		      cudaDataType_t ab_type, cudaDataType_t c_type, void *ws, size_t ws_bytes,
		      cudaStream_t stream)
{
	const float one = 1.0f, zero = 0.0f;
	struct mk_gemm_key key = { dev, m, n, k, b_nk, (int)ab_type, (int)c_type };
	cublasLtHandle_t lt;
	struct blas_plan *p;
	cublasStatus_t st;
	bool hit;
	int rc;

	if (dev < 0 || dev >= BLAS_MAX_DEVICES)
		return -ENODEV;
	if (ws == NULL)
		ws_bytes = 0;
	p = blas_plan_slot(&key, ws_bytes, &hit);
	if (!hit) {
		rc = blas_handle(key.dev, &lt);
		if (rc)
			return rc;
		blas_plan_free(p);
		p->key = key;
		p->ws_cap = ws_bytes;
		rc = blas_plan_make(lt, p);
		if (rc)
			return rc;
	} else {
		lt = blas_handles[key.dev]; /* set once before any plan of this device */
	}
	p->way.used = ++blas_clock;
	st = cublasLtMatmul(lt, p->desc, &one, b, p->la, a, p->lb, &zero, c, p->lc, c, p->lc,
			    &p->algo, p->ws_need ? ws : NULL, p->ws_need, stream);
	if (st != CUBLAS_STATUS_SUCCESS) {
		MK_WARN("cublasLtMatmul(m %d, n %d, k %d) failed: %s", m, n, k,
			cublasGetStatusString(st));
		return -EIO;
	}
	return 0;
}

int mk_gemm_blaslt_algo(int dev, int m, int n, int k, int b_nk, cudaDataType_t ab_type,
			cudaDataType_t c_type, size_t ws_bytes, cublasLtMatmulAlgo_t *algo)
{
	const struct mk_gemm_key key = { dev, m, n, k, b_nk, (int)ab_type, (int)c_type };
	bool hit;
	const struct blas_plan *p = blas_plan_slot(&key, ws_bytes, &hit);

	if (!hit)
		return -ENOENT;
	*algo = p->algo;
	return 0;
}

int mk_gemm_blaslt(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		   cudaDataType_t ab_type, cudaDataType_t c_type, void *ws, size_t ws_bytes,
		   cudaStream_t stream)
{
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess)
		return -ENODEV;
	return mk_gemm_blaslt_on(dev, a, b, c, m, n, k, b_nk, ab_type, c_type, ws, ws_bytes,
				 stream);
}
