// SPDX-License-Identifier: Apache-2.0
/*
 * The gemm op's workspace per stream (gemm_dispatch.h). Split-K counters must be zero when a launch
 * starts and partials must not be shared by launches that can run at the same time: one buffer
 * per (device, stream) gives both, since launches on one stream are ordered. Buffers live for
 * the process, as cuBLAS's do; a stream handle reused after cudaStreamDestroy reuses its buffer.
 */
#define MK_LOG_PREFIX "mkernel"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "fused/gemm/gemm.h"
#include "fused/ops/gemm_dispatch.h"
#include "mk/log.h"
#include "mk/param.h"

MK_PARAM_DECLARE_INT(gemm_workspace); /* fused/gemm/gemm_params.c */

#define WS_MAX 64 /* (device, stream) pairs */

struct ws_entry {
	int dev;
	cudaStream_t stream;
	void *ptr;
	size_t bytes;
};

static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ws_entry ws_table[WS_MAX];
static int ws_count;

static int ws_alloc(int dev, cudaStream_t stream, struct ws_entry *e)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	size_t bytes = (size_t)mk_param_gemm_workspace();

	if (bytes < 2 * MK_GEMM_SPLIT_COUNT_BYTES)
		bytes = 2 * MK_GEMM_SPLIT_COUNT_BYTES;
	/* Nothing may be allocated or zeroed in a stream under capture. */
	if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess) {
		(void)cudaGetLastError();
		return -EIO;
	}
	if (cap != cudaStreamCaptureStatusNone)
		return -EBUSY;
	if (cudaMalloc(&e->ptr, bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		MK_WARN("GEMM workspace: cannot allocate %zu bytes on device %d; split-K and "
			"cuBLASLt workspace are off for this stream",
			bytes, dev);
		return -ENOMEM;
	}
	/* Ordered before any kernel of this stream that reads the counters. */
	if (cudaMemsetAsync(e->ptr, 0, MK_GEMM_SPLIT_COUNT_BYTES, stream) != cudaSuccess) {
		(void)cudaGetLastError();
		cudaFree(e->ptr);
		return -EIO;
	}
	e->dev = dev;
	e->stream = stream;
	e->bytes = bytes;
	return 0;
}

/* The thread's last answer: entries live for the process and never move, so a hit needs no
 * lock (mkGemm asks on every cuBLASLt call, host time a decode-size GEMM's GPU waits for). */
static __thread struct ws_entry ws_last = { -1, NULL, NULL, 0 };

int mk_gemm_ws_get_on(int dev, cudaStream_t stream, void **ws, size_t *bytes)
{
	int rc = 0, i;

	if (ws_last.ptr != NULL && ws_last.dev == dev && ws_last.stream == stream) {
		*ws = ws_last.ptr;
		*bytes = ws_last.bytes;
		return 0;
	}
	pthread_mutex_lock(&ws_lock);
	for (i = 0; i < ws_count; i++) {
		if (ws_table[i].dev == dev && ws_table[i].stream == stream)
			break;
	}
	if (i == ws_count) {
		if (ws_count == WS_MAX)
			rc = -ENOSPC;
		else
			rc = ws_alloc(dev, stream, &ws_table[i]);
		if (rc == 0)
			ws_count++;
	}
	if (rc == 0) {
		ws_last = ws_table[i];
		*ws = ws_table[i].ptr;
		*bytes = ws_table[i].bytes;
	}
	pthread_mutex_unlock(&ws_lock);
	return rc;
}

int mk_gemm_ws_get(cudaStream_t stream, void **ws, size_t *bytes)
{
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess)
		return -EIO;
	return mk_gemm_ws_get_on(dev, stream, ws, bytes);
}
