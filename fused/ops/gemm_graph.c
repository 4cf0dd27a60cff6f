// SPDX-License-Identifier: Apache-2.0
/*
 * Repeated small cuBLASLt calls replayed as CUDA graphs (gemm_graph.h). Per thread, a table of
 * calls keyed by everything the captured work depends on; a key's first calls run directly,
 * the next one is captured on the thread's private stream and every later one launches the
 * captured graph on the caller's stream.
 */
#define MK_LOG_PREFIX "mkernel"

#include "fused/ops/gemm_graph.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <library_types.h>

#include "fused/ops/gemm_fallback.h"
#include "mk/log.h"
#include "mk/param.h"

MK_PARAM_DECLARE_INT(gemm_graph);	   /* fused/gemm/gemm_params.c */
MK_PARAM_DECLARE_INT(gemm_graph_max_flop); /* fused/gemm/gemm_params.c */

/*
 * GRAPH_SETS x MK_GEMM_WAYS keys per thread: a decode step calls each layer's GEMMs with that
 * layer's weights, so a model makes a few hundred keys (4 GEMMs x 32 layers x a batch size or
 * two) that must all stay.
 */
#define GRAPH_SETS	  128
#define GRAPH_MAX_DEVICES 64

struct graph_entry {
	struct mk_gemm_graph_call key;
	struct mk_gemm_way way;
	bool failed;   /* the capture failed: this key runs directly */
	uint32_t seen; /* calls with this key before its capture */
	cudaGraphExec_t exec;
};

static __thread struct graph_entry graph_cache[GRAPH_SETS][MK_GEMM_WAYS];
static __thread unsigned long long graph_clock;
/* Captures go to a stream of the thread's own: the caller's may hold other work in flight. */
static __thread cudaStream_t graph_streams[GRAPH_MAX_DEVICES];

static bool graph_key_eq(const struct mk_gemm_graph_call *a, const struct mk_gemm_graph_call *b)
{
	return mk_gemm_key_eq(&a->shape, &b->shape) && a->a == b->a && a->b == b->b &&
	       a->c == b->c && a->ws == b->ws && a->ws_bytes == b->ws_bytes;
}

static unsigned int graph_slot(const struct mk_gemm_graph_call *x)
{
	return mk_gemm_slot(mk_gemm_call_hash(&x->shape, x->a, x->b, x->c), GRAPH_SETS);
}

/* Forget an entry; an executable graph still in flight is freed when it completes. */
static void graph_drop(struct graph_entry *e)
{
	if (e->exec != NULL)
		(void)cudaGraphExecDestroy(e->exec);
	memset(e, 0, sizeof(*e));
}

/* The key's entry, or NULL after giving it its set's free or least recently used entry. */
static struct graph_entry *graph_find(const struct mk_gemm_graph_call *x)
{
	struct graph_entry *set = graph_cache[graph_slot(x)], *e;

	graph_clock++;
	for (int w = 0; w < MK_GEMM_WAYS; w++) {
		if (set[w].way.valid && graph_key_eq(&set[w].key, x)) {
			set[w].way.used = graph_clock;
			return &set[w];
		}
	}
	e = &set[mk_gemm_way_victim(set, sizeof(set[0]), offsetof(struct graph_entry, way))];
	graph_drop(e);
	e->key = *x;
	e->way.valid = 1;
	e->way.used = graph_clock;
	e->seen = 1;
	return NULL;
}

static int graph_stream(int dev, cudaStream_t *out)
{
	if (dev < 0 || dev >= GRAPH_MAX_DEVICES)
		return -ENODEV;
	if (graph_streams[dev] == NULL &&
	    cudaStreamCreateWithFlags(&graph_streams[dev], cudaStreamNonBlocking) != cudaSuccess) {
		graph_streams[dev] = NULL;
		return -EIO;
	}
	*out = graph_streams[dev];
	return 0;
}

/* The call captured on the private stream (nothing runs) and instantiated. 0 or -errno. */
static int graph_capture(const struct mk_gemm_graph_call *x, cudaGraphExec_t *out)
{
	cudaGraph_t g = NULL;
	cudaStream_t cs;
	int rc = graph_stream(x->shape.dev, &cs);

	if (rc)
		return rc;
	/* thread-local: another thread's unrelated CUDA calls must not break this capture */
	if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
		(void)cudaGetLastError();
		return -EIO;
	}
	rc = mk_gemm_blaslt_on(x->shape.dev, x->a, x->b, x->c, x->shape.m, x->shape.n, x->shape.k,
			       x->shape.b_nk, CUDA_R_16BF, CUDA_R_16BF, x->ws, x->ws_bytes, cs);
	/* ended whatever happened, so that the stream can capture again */
	if (cudaStreamEndCapture(cs, &g) != cudaSuccess && rc == 0)
		rc = -EIO;
	if (rc == 0 && cudaGraphInstantiate(out, g, 0) != cudaSuccess)
		rc = -EIO;
	if (g != NULL)
		(void)cudaGraphDestroy(g);
	if (rc)
		(void)cudaGetLastError(); /* a failed capture is not the caller's error */
	return rc;
}

bool mk_gemm_graph_run(const struct mk_gemm_graph_call *x, cudaStream_t stream)
{
	const int64_t direct_calls = mk_param_gemm_graph();
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	struct graph_entry *e;

	if (direct_calls <= 0 || 2.0 * x->shape.m * (double)x->shape.n * x->shape.k >
					 (double)mk_param_gemm_graph_max_flop())
		return false;
	e = graph_find(x);
	if (e == NULL)
		return false; /* a new key: its first call */
	if (e->failed || (e->exec == NULL && e->seen++ < direct_calls))
		return false;
	/* a capturing caller records the plain call into its own graph */
	if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess ||
	    cap != cudaStreamCaptureStatusNone) {
		(void)cudaGetLastError();
		return false;
	}
	if (e->exec == NULL && graph_capture(x, &e->exec) != 0) {
		MK_INFO(MK_SUBSYS_TUNING,
			"mkGemm(%d x %d x %d): cuBLASLt call not captured; it runs directly",
			x->shape.m, x->shape.n, x->shape.k);
		e->exec = NULL;
		e->failed = true;
		return false;
	}
	if (cudaGraphLaunch(e->exec, stream) != cudaSuccess) {
		/* a graph of a context reset since: the plain call says whether the device works */
		MK_WARN("mkGemm(%d x %d x %d): replay of the captured cuBLASLt call failed (%s); "
			"it runs directly",
			x->shape.m, x->shape.n, x->shape.k, cudaGetErrorString(cudaGetLastError()));
		graph_drop(e);
		return false;
	}
	return true;
}
