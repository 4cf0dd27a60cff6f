// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemm and the gemm op's path choice (gemm_dispatch.h). mkGemm checks its arguments and runs
 * mk_gemm_dispatch(); a failure is a WARN saying what failed and why before the errno becomes an
 * ncclResult_t (mk_result_api).
 *
 * The choice, per call: the forced path (caller, MKERNEL_GEMM_PATH, MKERNEL_GEMM_FORCE_FALLBACK)
 * or the calibration's choice for the shape's class (tuner/calib.h: the faster of the engine's
 * variants and cuBLASLt where it was measured, cuBLASLt where nothing near was), restricted to
 * what can run this call (the engine's alignment rules, a split-K workspace). Decisions, and the
 * engine's tensor maps for the last pointers, are cached per thread and shape, so a repeated
 * call costs a hash lookup and a launch.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mkernel.h"
#include "fused/gemm/gemm.h"
#include "fused/gemm/skinny.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/gemm_fallback.h"
#include "fused/ops/gemm_graph.h"
#include "tuner/calib.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/param.h"
#include "mk/result.h"

MK_PARAM_DECLARE_INT(gemm_force_fallback); /* fused/gemm/gemm_params.c */
MK_PARAM_DECLARE_STR(gemm_path);
MK_PARAM_DECLARE_INT(gemm_workspace);

#define DISP_SETS 8 /* x MK_GEMM_WAYS shapes per thread */

struct disp_entry {
	struct mk_gemm_way way;
	struct mk_gemm_key key;	  /* x0: A and B 16-byte aligned */
	struct mk_gemm_pick pick; /* the decision for this shape (engine or cuBLASLt) */
	const char *why;
	/* the engine's launch for the last pick, pointers and stream */
	struct mk_gemm_pick prep_pick;
	const void *a, *b;
	void *c;
	cudaStream_t stream;
	int prepared;
	struct mk_gemm_args args;
	struct mk_gemm_tmaps maps;
};

static __thread struct disp_entry disp_cache[DISP_SETS][MK_GEMM_WAYS];
static __thread unsigned long long disp_clock;
static __thread struct mk_gemm_ran disp_last;

static int disp_tile_of(unsigned int bm, unsigned int bn)
{
	if (bm == 64)
		return bn == 256 ? MK_GEMM_TILE_64x256 : MK_GEMM_TILE_64x128;
	return bn == 256 ? MK_GEMM_TILE_128x256 : MK_GEMM_TILE_128x128;
}

int mk_gemm_pick_parse(const char *s, struct mk_gemm_pick *out)
{
	unsigned int bm, bn, sp;
	char tail;

	memset(out, 0, sizeof(*out));
	out->splits = 1;
	if (strcmp(s, "cublas") == 0) {
		out->path = MK_GEMM_PATH_CUBLAS;
		return 0;
	}
	if (strcmp(s, "cublaslt") == 0) {
		out->path = MK_GEMM_PATH_CUBLASLT;
		return 0;
	}
	if (strcmp(s, "skinny") == 0) {
		out->path = MK_GEMM_PATH_SKINNY;
		return 0;
	}
	if (strcmp(s, "engine") == 0) {
		out->path = MK_GEMM_PATH_ENGINE;
		out->tile = MK_GEMM_TILE_128x256;
		return 0;
	}
	if (sscanf(s, "e%ux%us%u%c", &bm, &bn, &sp, &tail) != 3 || (bm != 64 && bm != 128) ||
	    (bn != 128 && bn != 256) || sp < 1 || sp > MK_GEMM_MAX_SPLITS)
		return -EINVAL;
	out->path = MK_GEMM_PATH_ENGINE;
	out->tile = disp_tile_of(bm, bn);
	out->splits = (int)sp;
	return 0;
}

const char *mk_gemm_pick_name(const struct mk_gemm_pick *p, char *buf, size_t len)
{
	if (p->path == MK_GEMM_PATH_ENGINE)
		snprintf(buf, len, "e%dx%ds%d", mk_gemm_tile_bm(p->tile), mk_gemm_tile_bn(p->tile),
			 p->splits > 1 ? p->splits : 1);
	else
		snprintf(buf, len, "%s",
			 p->path == MK_GEMM_PATH_CUBLAS	    ? "cublas"
			 : p->path == MK_GEMM_PATH_CUBLASLT ? "cublaslt"
			 : p->path == MK_GEMM_PATH_SKINNY   ? "skinny"
							    : "auto");
	return buf;
}

/* What a calibrated engine path needs from this call. */
struct disp_call {
	const void *a, *b;
	void *c;
	int m, n, k, b_nk;
	size_t ws_cap; /* split-K workspace the stream has or may get */
	int dev;       /* the current device, asked once per call */
};

static int disp_args(const struct disp_call *x, const struct mk_gemm_pick *p,
		     struct mk_gemm_args *args, const char **why)
{
	static char fake_ws[16] __attribute__((aligned(16))); /* an address for the check only */
	int rc;

	mk_gemm_args_init(args, x->m, x->n, x->k, x->b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN, x->c);
	mk_gemm_args_variant(args, p->tile, p->splits);
	if (p->splits > 1) {
		if (mk_gemm_split_ws_bytes(args) > x->ws_cap) {
			*why = "split-K workspace larger than MKERNEL_GEMM_WORKSPACE";
			return -ENOSPC;
		}
		mk_gemm_args_split_ws(args, fake_ws);
	}
	rc = mk_gemm_check(x->a, x->b, args, why);
	/* The check's address is host memory: a launch must get the stream's workspace or fail. */
	args->split_count = NULL;
	args->split_ws = NULL;
	return rc;
}

static int disp_path_ok(const struct mk_calib_gemm *g, void *arg)
{
	struct mk_gemm_pick p;
	struct mk_gemm_args args;
	const char *why;

	/*
	 * Split-K variants are not chosen by the calibration: on the H200, mkGemmAllReduce's paths
	 * benchmark (test-gar-gpu --paths, one rank) found wrong elements in exactly the two cells
	 * where the table picked one (128 x 4096 x 8192 e64x128s2, 256 x 4096 x 8192 e128x128s2),
	 * while the forced-variant tests pass. Until that is understood they run only when asked
	 * for (MKERNEL_GEMM_PATH=eBMxBNsS); their win in the table was within 1.5 %.
	 */
	if (g->splits > 1)
		return 0;
	if (g->engine == MK_CALIB_SKINNY) {
		const struct disp_call *x = arg;

		return mk_skinny_check(x->a, x->b, x->c, x->m, x->n, x->k, x->b_nk, NULL) == 0;
	}
	p.path = MK_GEMM_PATH_ENGINE;
	p.tile = disp_tile_of(g->bm, g->bn);
	p.splits = g->splits;
	return disp_args(arg, &p, &args, &why) == 0;
}

/* The path for this call when nothing forces one. */
static void disp_decide(const struct disp_call *x, int dev_ok, struct mk_gemm_pick *pick,
			const char **why)
{
	struct mk_calib_choice ch;
	const struct mk_calib *cal;
	char name[32];

	pick->path = MK_GEMM_PATH_CUBLASLT;
	pick->tile = 0;
	pick->splits = 1;
	if (!dev_ok) {
		*why = "the device is not sm_90";
		return;
	}
	cal = mk_calib_get();
	if (mk_calib_gemm_choose(cal, (uint64_t)x->m, (uint64_t)x->n, (uint64_t)x->k, x->b_nk,
				 disp_path_ok, (void *)x, &ch) != 0) {
		*why = "no calibrated class near this shape";
		if (ch.gemmex) {
			pick->path = MK_GEMM_PATH_CUBLAS;
			*why = "no calibrated class near this shape; rows not 16-byte aligned: "
			       "cublasGemmEx";
		}
		return;
	}
	if (ch.engine == MK_CALIB_SKINNY) {
		pick->path = MK_GEMM_PATH_SKINNY;
		*why = "calibrated: the skinny kernel is faster at this class";
	} else if (ch.engine) {
		pick->path = MK_GEMM_PATH_ENGINE;
		pick->tile = disp_tile_of((unsigned int)ch.bm, (unsigned int)ch.bn);
		pick->splits = ch.splits;
		*why = "calibrated: the engine is faster at this class";
	} else if (ch.gemmex) {
		pick->path = MK_GEMM_PATH_CUBLAS;
		*why = ch.unaligned ? "rows not 16-byte aligned (N or K not a multiple of 8): "
				      "cublasGemmEx"
				    : "calibrated: cublasGemmEx is faster at this class";
	} else {
		*why = ch.cublas_us > 0 ? "calibrated: cuBLASLt is faster at this class"
					: "calibrated: no engine path runs this call";
	}
	MK_INFO(MK_SUBSYS_TUNING,
		"mkGemm(%d x %d x %d, B %s): %s at class %u x %u x %u (%.1f us, cuBLAS %.1f us; "
		"%s)",
		x->m, x->n, x->k, x->b_nk ? "NxK" : "KxN",
		mk_gemm_pick_name(pick, name, sizeof(name)), ch.m, ch.n, ch.k, ch.us, ch.cublas_us,
		cal->source);
}

/* Run engine variant p for this call, with the launch entry e keeps for the last pick, pointers
 * and stream; -ENOSYS/-EBUSY/-EINVAL/-ENOSPC/-ENOMEM: take cuBLAS. */
static int disp_engine(struct disp_entry *e, const struct mk_gemm_pick *p,
		       const struct disp_call *x, cudaStream_t stream)
{
	void *ws = NULL;
	size_t ws_bytes = 0;
	const char *why;
	int rc;

	if (e->prepared && e->a == x->a && e->b == x->b && e->c == x->c && e->stream == stream &&
	    e->prep_pick.tile == p->tile && e->prep_pick.splits == p->splits)
		return mk_gemm_launch_prepared(&e->args, &e->maps, 0, stream);
	e->prepared = 0;
	e->prep_pick = *p;
	rc = disp_args(x, p, &e->args, &why);
	if (rc)
		return rc;
	/* p, not the cached decision: a forced variant may split where the calibrated one does not
	 */
	if (p->splits > 1) {
		rc = mk_gemm_ws_get_on(x->dev, stream, &ws, &ws_bytes);
		if (rc)
			return rc;
		mk_gemm_args_split_ws(&e->args, ws);
	}
	rc = mk_gemm_make_tensor_maps(x->a, x->b, &e->args, &e->maps);
	if (rc)
		return rc;
	e->a = x->a;
	e->b = x->b;
	e->c = x->c;
	e->stream = stream;
	e->prepared = 1;
	return mk_gemm_launch_prepared(&e->args, &e->maps, 0, stream);
}

static int disp_blas(const struct disp_call *x, int use_lt, cudaStream_t stream,
		     struct mk_gemm_ran *ran)
{
	void *ws = NULL;
	size_t ws_bytes = 0;
	int rc;

	if (use_lt) {
		struct mk_gemm_graph_call g;

		/* Without a workspace (a capturing stream that has none yet) Lt still runs. */
		if (mk_gemm_ws_get_on(x->dev, stream, &ws, &ws_bytes) == 0) {
			ws = (char *)ws + MK_GEMM_SPLIT_COUNT_BYTES;
			ws_bytes -= MK_GEMM_SPLIT_COUNT_BYTES;
		}
		g = (struct mk_gemm_graph_call){
			{ x->dev, x->m, x->n, x->k, x->b_nk, CUDA_R_16BF, CUDA_R_16BF },
			x->a,
			x->b,
			x->c,
			ws,
			ws_bytes,
		};
		if (mk_gemm_graph_run(&g, stream)) {
			ran->pick.path = MK_GEMM_PATH_CUBLASLT;
			ran->graph = 1;
			return 0;
		}
		rc = mk_gemm_blaslt_on(x->dev, x->a, x->b, x->c, x->m, x->n, x->k, x->b_nk,
				       CUDA_R_16BF, CUDA_R_16BF, ws, ws_bytes, stream);
		if (rc != -ENOSYS) {
			ran->pick.path = MK_GEMM_PATH_CUBLASLT;
			return rc;
		}
		ran->why = "cuBLASLt has no algorithm for this shape";
	}
	ran->pick.path = MK_GEMM_PATH_CUBLAS;
	return mk_fallback_gemm_bf16(x->a, x->b, x->c, x->m, x->n, x->k, x->b_nk, stream);
}

/* The thread's entry for key: the one holding it, else a free or least recently used one, empty. */
static struct disp_entry *disp_entry_for(const struct mk_gemm_key *key)
{
	struct disp_entry *set = disp_cache[mk_gemm_key_slot(key, DISP_SETS)];
	int w = mk_gemm_way_find(set, sizeof(set[0]), offsetof(struct disp_entry, way),
				 offsetof(struct disp_entry, key), key);

	if (w < 0) {
		w = mk_gemm_way_victim(set, sizeof(set[0]), offsetof(struct disp_entry, way));
		memset(&set[w], 0, sizeof(set[w]));
	}
	return &set[w];
}

int mk_gemm_dispatch(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		     cudaStream_t stream, const struct mk_gemm_pick *force,
		     struct mk_gemm_ran *ran_out)
{
	struct disp_call x = { a, b, c, m, n, k, b_nk, 0, 0 };
	struct mk_gemm_ran ran = { { MK_GEMM_PATH_CUBLASLT, 0, 1 }, NULL, 0 };
	struct mk_gemm_pick forced = { MK_GEMM_PATH_AUTO, 0, 1 };
	struct mk_gemm_key key = { 0, m, n, k, b_nk, !(((uintptr_t)a | (uintptr_t)b) & 15), 0 };
	struct disp_entry *e;
	const char *env = mk_param_gemm_path();
	int dev_ok, rc;

	if (cudaGetDevice(&key.dev) != cudaSuccess)
		return -EIO;
	x.dev = key.dev;
	dev_ok = mk_gemm_device_ok(); /* asked of the device once, then kept */
	x.ws_cap = (size_t)mk_param_gemm_workspace();
	if (force != NULL && force->path != MK_GEMM_PATH_AUTO) {
		forced = *force;
		ran.why = "forced by the caller";
	} else if (mk_param_gemm_force_fallback()) {
		forced.path = MK_GEMM_PATH_CUBLAS;
		ran.why = "MKERNEL_GEMM_FORCE_FALLBACK=1";
	} else if (env != NULL && env[0] != '\0' && mk_gemm_pick_parse(env, &forced) == 0) {
		ran.why = "MKERNEL_GEMM_PATH";
	} else {
		if (env != NULL && env[0] != '\0')
			MK_WARN_ONCE(
				"MKERNEL_GEMM_PATH=%s: expected cublas, cublaslt, skinny, engine "
				"or eBMxBNsS; ignored",
				env);
		forced.path = MK_GEMM_PATH_AUTO;
	}

	e = disp_entry_for(&key);
	if (!e->way.valid) {
		e->key = key;
		disp_decide(&x, dev_ok, &e->pick, &e->why);
		e->way.valid = 1;
	}
	e->way.used = ++disp_clock;
	if (forced.path == MK_GEMM_PATH_AUTO) {
		ran.pick = e->pick;
		ran.why = e->why;
	} else if (forced.path == MK_GEMM_PATH_ENGINE && !dev_ok) {
		ran.why = "the device is not sm_90";
	} else {
		ran.pick = forced;
	}

	rc = -EINVAL;
	if (ran.pick.path == MK_GEMM_PATH_SKINNY) {
		const char *no;

		if (!dev_ok)
			no = "the device is not sm_90";
		else if (mk_skinny_check(a, b, c, m, n, k, b_nk, &no) == 0)
			rc = mk_skinny_launch(a, b, c, m, n, k, stream);
		if (rc != -EINVAL)
			goto out;
		ran.why = no;
		ran.pick.path = MK_GEMM_PATH_CUBLASLT;
	}
	if (ran.pick.path == MK_GEMM_PATH_ENGINE) {
		rc = disp_engine(e, &ran.pick, &x, stream);
		if (rc == 0)
			goto out;
		if (rc != -ENOSYS && rc != -EBUSY && rc != -EINVAL && rc != -ENOSPC &&
		    rc != -ENOMEM)
			goto out;
		ran.why = rc == -ENOSYS	 ? "no TMA encoder in the driver"
			  : rc == -EBUSY ? "stream is capturing and has no split-K workspace yet"
					 : "the engine cannot run this call";
		ran.pick.path = MK_GEMM_PATH_CUBLASLT;
		ran.pick.tile = 0;
		ran.pick.splits = 1;
	}
	rc = disp_blas(&x, ran.pick.path != MK_GEMM_PATH_CUBLAS, stream, &ran);
out:
	if (rc)
		MK_WARN("mkGemm(%d x %d x %d): %s path failed: %s", m, n, k,
			ran.pick.path == MK_GEMM_PATH_ENGINE   ? "engine"
			: ran.pick.path == MK_GEMM_PATH_SKINNY ? "skinny"
							       : "cuBLAS",
			mk_strerror(rc));
	disp_last = ran;
	if (ran_out != NULL)
		*ran_out = ran;
	return rc;
}

void mk_gemm_dispatch_last(struct mk_gemm_ran *ran)
{
	*ran = disp_last;
}

static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_init(void)
{
	mk_log_set_sink(NULL);
}

MK_API ncclResult_t mkGemm(const void *a, const void *b, void *c, size_t m, size_t n, size_t k,
			   ncclDataType_t type, mkLayout_t bLayout, cudaStream_t stream)
{
	int rc;

	pthread_once(&api_once, api_init);
	if (a == NULL || b == NULL || c == NULL) {
		MK_WARN("mkGemm: NULL pointer (a %p, b %p, c %p)", a, b, c);
		return mk_result_api(-EINVAL);
	}
	if (m == 0 || n == 0 || k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX) {
		MK_WARN("mkGemm: sizes m %zu, n %zu, k %zu must be in 1 .. %d", m, n, k, INT_MAX);
		return mk_result_api(-EINVAL);
	}
	if (type != ncclBfloat16) {
		MK_WARN("mkGemm: data type %d is not supported (only ncclBfloat16)", (int)type);
		return mk_result_api(-EINVAL);
	}
	if (bLayout != mkLayoutRowMajorKN && bLayout != mkLayoutRowMajorNK) {
		MK_WARN("mkGemm: unknown B layout %d", (int)bLayout);
		return mk_result_api(-EINVAL);
	}
	/* cuBLAS takes any pointer it is given: an element split across two addresses is not one */
	if ((uintptr_t)a % 2 || (uintptr_t)b % 2 || (uintptr_t)c % 2) {
		MK_WARN("mkGemm: a %p, b %p, c %p must be aligned to their 2-byte elements", a, b,
			c);
		return mk_result_api(-EINVAL);
	}
	rc = mk_gemm_dispatch(a, b, c, (int)m, (int)n, (int)k, bLayout == mkLayoutRowMajorNK,
			      stream, NULL, NULL);
	return rc ? mk_result_api(rc) : ncclSuccess; /* the dispatch WARNed what failed */
}

int mk_gemm_plain(const void *a, const void *b, void *c, int m, int n, int k, int b_nk,
		  cudaDataType_t type, cudaStream_t stream)
{
	if (type == CUDA_R_16BF)
		return mk_gemm_dispatch(a, b, c, m, n, k, b_nk, stream, NULL, NULL);
	return mk_fallback_gemm(a, b, c, m, n, k, b_nk, type, type, stream);
}
