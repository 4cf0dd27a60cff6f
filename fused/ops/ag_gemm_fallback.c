// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllGatherGemm's unfused path, in one of two forms (mk_agg_pipe_pick, ag_gemm_plan.h):
 *   one collective: ncclAllGather into aGathered (or a stream-ordered scratch buffer), then the
 *     plain GEMM (mk_gemm_plain: for bf16 the faster of the engine and cuBLAS, calibrated) from
 *     there on the same stream;
 *   shard pipeline: the shards go round with ncclSend / ncclRecv on a side stream while the
 *     caller's stream runs one GEMM per shard, mine first, each other as its step lands. The
 *     same NCCL and the same GEMM as the baseline, overlapped, so where the GEMM is large enough
 *     to hide it beats the one-collective form rather than tying with it.
 * One rank alone has nothing to gather: the GEMM reads its shard as is (and aGathered, when asked
 * for, is a copy of it). Any GPU, any shape and type the API accepts; capturable in a CUDA graph
 * (the side stream forks from and joins the caller's through events).
 */
#include <errno.h>
#include <stdlib.h>

#include "fused/ops/ag_gemm.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/seqpar_host.h"
#include "fused/ops/seqpar_params.h"

static cudaDataType_t agg_cuda_type(ncclDataType_t t)
{
	return t == ncclBfloat16 ? CUDA_R_16BF : t == ncclFloat16 ? CUDA_R_16F : CUDA_R_32F;
}

/*
 * The side stream and one event per step, made once per comm (outside graph capture: a call
 * under capture before them runs the one-collective form). 0, -EAGAIN (capturing, none yet),
 * -ENOMEM or -EIO.
 */
static int agg_pipe_ready(struct mk_comm *c, struct mk_sp_state *st, cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (st->pipe_stream != NULL && st->pipe_nev >= c->nranks)
		return 0;
	if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess ||
	    cap != cudaStreamCaptureStatusNone)
		return -EAGAIN;
	if (st->pipe_stream == NULL &&
	    cudaStreamCreateWithFlags(&st->pipe_stream, cudaStreamNonBlocking) != cudaSuccess) {
		st->pipe_stream = NULL;
		return -EIO;
	}
	if (st->pipe_ev == NULL) {
		st->pipe_ev = calloc((size_t)c->nranks, sizeof(*st->pipe_ev));
		if (st->pipe_ev == NULL)
			return -ENOMEM;
	}
	while (st->pipe_nev < c->nranks) {
		if (cudaEventCreateWithFlags(&st->pipe_ev[st->pipe_nev], cudaEventDisableTiming) !=
		    cudaSuccess)
			return -EIO;
		st->pipe_nev++;
	}
	return 0;
}

/*
 * The shard pipeline into `all` (M x K, rank r's shard at rows r * M / nranks). The side stream
 * always joins the caller's before this returns, also after an error, so a capture stays whole.
 */
static int agg_pipe_run(struct mk_comm *c, struct mk_sp_state *st, const struct mk_sp_args *x,
			void *all, cudaStream_t stream)
{
	const cudaDataType_t ct = agg_cuda_type(x->type);
	const size_t esz = x->type == ncclFloat32 ? 4 : 2;
	const int ms = x->m / c->nranks, r = c->rank;
	const size_t shard = (size_t)ms * (size_t)x->k;
	cudaStream_t side = st->pipe_stream;
	char *g = all;
	int rc = 0;

	if (cudaEventRecord(st->pipe_ev[0], stream) != cudaSuccess ||
	    cudaStreamWaitEvent(side, st->pipe_ev[0], 0) != cudaSuccess)
		return -EIO;
	for (int j = 1; j < c->nranks && rc == 0; j++) {
		int to, from;

		mk_agg_pipe_peers(r, c->nranks, j, &to, &from);
		if (ncclGroupStart() != ncclSuccess)
			rc = -EIO;
		if (rc == 0 && (ncclSend(x->a, shard, x->type, to, c->nccl, side) != ncclSuccess ||
				ncclRecv(g + (size_t)from * shard * esz, shard, x->type, from,
					 c->nccl, side) != ncclSuccess))
			rc = -EIO;
		if (ncclGroupEnd() != ncclSuccess && rc == 0)
			rc = -EIO;
		if (cudaEventRecord(st->pipe_ev[j], side) != cudaSuccess && rc == 0)
			rc = -EIO;
	}
	/* my shard's GEMM overlaps the first step; aGathered gets my shard from the same stream */
	if (rc == 0 && x->gathered != NULL &&
	    cudaMemcpyAsync(g + (size_t)r * shard * esz, x->a, shard * esz,
			    cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_gemm_plain(x->a, x->b, (char *)x->c + (size_t)r * ms * x->n * esz, ms, x->n,
				   x->k, x->b_layout, ct, stream);
	for (int j = 1; j < c->nranks && rc == 0; j++) {
		int to, from;

		mk_agg_pipe_peers(r, c->nranks, j, &to, &from);
		if (cudaStreamWaitEvent(stream, st->pipe_ev[j], 0) != cudaSuccess)
			rc = -EIO;
		if (rc == 0)
			rc = mk_gemm_plain(g + (size_t)from * shard * esz, x->b,
					   (char *)x->c + (size_t)from * ms * x->n * esz, ms, x->n,
					   x->k, x->b_layout, ct, stream);
	}
	/* join: the last step's event covers every step before it on the side stream */
	if (cudaEventRecord(st->pipe_ev[0], side) != cudaSuccess ||
	    cudaStreamWaitEvent(stream, st->pipe_ev[0], 0) != cudaSuccess)
		rc = rc ? rc : -EIO;
	return rc;
}

int mk_agg_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream)
{
	const cudaDataType_t ct = agg_cuda_type(x->type);
	const size_t esz = x->type == ncclFloat32 ? 4 : 2;
	struct mk_sp_state *st = NULL;
	void *all = x->gathered;
	int rc = 0, pipe;

	if (c->nranks == 1) {
		if (all != NULL && all != x->a &&
		    cudaMemcpyAsync(all, x->a, (size_t)x->m * x->k * esz, cudaMemcpyDeviceToDevice,
				    stream) != cudaSuccess)
			return -EIO;
		return mk_gemm_plain(x->a, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct, stream);
	}
	pipe = mk_agg_pipe_pick(c->nranks, x->m, x->n, x->k, mk_param_ag_gemm_pipeline()) &&
	       mk_sp_state_get(c, MK_SP_AGG, &st) == 0 && agg_pipe_ready(c, st, stream) == 0;
	if (st != NULL)
		st->pipe_steps = 0;
	if (all == NULL && cudaMallocAsync(&all, (size_t)x->m * x->k * esz, stream) != cudaSuccess)
		return -ENOMEM;
	if (pipe) {
		rc = agg_pipe_run(c, st, x, all, stream);
		if (rc == 0)
			st->pipe_steps = c->nranks - 1;
	} else {
		if (ncclAllGather(x->a, all, (size_t)(x->m / c->nranks) * x->k, x->type, c->nccl,
				  stream) != ncclSuccess)
			rc = -EIO;
		if (rc == 0)
			rc = mk_gemm_plain(all, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct,
					   stream);
	}
	if (x->gathered == NULL && cudaFreeAsync(all, stream) != cudaSuccess && rc == 0)
		rc = -EIO;
	return rc;
}
