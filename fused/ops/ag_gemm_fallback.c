// SPDX-License-Identifier: Apache-2.0
/*
 * mkAllGatherGemm's unfused path, in one of two forms (mk_agg_pipe_pick, ag_gemm_plan.h):
 *   one collective: ncclAllGather into aGathered (or a stream-ordered scratch buffer), then the
 *     plain GEMM (mk_gemm_plain: for bf16 the faster of the engine and cuBLAS, calibrated) from
 *     there on the same stream;
 *   pipelined: the all-gather in pieces on a side stream while the caller's stream runs my own
 *     shard's GEMM, then each piece's GEMMs as it lands. The same NCCL collective and the same
 *     GEMM as the baseline, overlapped, so where the GEMM is large enough to hide it beats the
 *     one-collective form instead of tying with it.
 * One rank alone has nothing to gather: the GEMM reads its shard as is (and aGathered, when asked
 * for, is a copy of it). Any GPU, any shape and type the API accepts; capturable in a CUDA graph
 * (the side stream forks from and joins the caller's through events).
 */
#include <errno.h>

#include "fused/ops/ag_gemm.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/seqpar_host.h"
#include "fused/ops/seqpar_params.h"

/* the fork/join event and one per piece */
_Static_assert(MK_AGG_PIPE_PIECES + 1 == MK_SP_PIPE_EVENTS, "too few pipeline events");

/*
 * The side stream and its events, made once per comm (outside graph capture: a call under
 * capture before them runs the one-collective form). 0, -EAGAIN (capturing, none yet) or -EIO.
 */
static int agg_pipe_ready(struct mk_sp_state *st, cudaStream_t stream)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

	if (st->pipe_nev == MK_SP_PIPE_EVENTS)
		return 0;
	if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess ||
	    cap != cudaStreamCaptureStatusNone)
		return -EAGAIN;
	if (st->pipe_stream == NULL &&
	    cudaStreamCreateWithFlags(&st->pipe_stream, cudaStreamNonBlocking) != cudaSuccess) {
		st->pipe_stream = NULL;
		return -EIO;
	}
	while (st->pipe_nev < MK_SP_PIPE_EVENTS) {
		if (cudaEventCreateWithFlags(&st->pipe_ev[st->pipe_nev], cudaEventDisableTiming) !=
		    cudaSuccess)
			return -EIO;
		st->pipe_nev++;
	}
	return 0;
}

/*
 * The pipelined form. `stage` (M x K) holds piece p of every shard at rows nranks * row0(p),
 * rank by rank (what one ncclAllGather of the piece writes); aGathered, when asked for, gets each
 * piece copied to its rows. The side stream joins the caller's before this returns, also after
 * an error, so a capture stays whole.
 */
static int agg_pipe_run(struct mk_comm *c, struct mk_sp_state *st, const struct mk_sp_args *x,
			char *stage, int pieces, cudaStream_t stream)
{
	const cudaDataType_t ct = mk_sp_cuda_type(x->type);
	const size_t esz = mk_sp_esz(x->type), k = (size_t)x->k, n = (size_t)x->n;
	const int ms = x->m / c->nranks, me = c->rank;
	cudaStream_t side = st->pipe_stream;
	char *const out = x->c, *const all = x->gathered;
	const char *const a = x->a;
	int rc = 0, row0, rows;

	if (cudaEventRecord(st->pipe_ev[0], stream) != cudaSuccess ||
	    cudaStreamWaitEvent(side, st->pipe_ev[0], 0) != cudaSuccess)
		return -EIO;
	for (int p = 0; p < pieces && rc == 0; p++) {
		mk_agg_pipe_rows(ms, pieces, p, &row0, &rows);
		if (ncclAllGather(a + (size_t)row0 * k * esz,
				  stage + (size_t)c->nranks * row0 * k * esz, (size_t)rows * k,
				  x->type, c->nccl, side) != ncclSuccess)
			rc = -EIO;
		if (cudaEventRecord(st->pipe_ev[1 + p], side) != cudaSuccess && rc == 0)
			rc = -EIO;
	}
	/* my own shard needs nothing gathered: its GEMM overlaps the first pieces */
	if (rc == 0 && all != NULL &&
	    cudaMemcpyAsync(all + (size_t)me * ms * k * esz, a, (size_t)ms * k * esz,
			    cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_gemm_plain(a, x->b, out + (size_t)me * ms * n * esz, ms, x->n, x->k,
				   x->b_layout, ct, stream);
	for (int p = 0; p < pieces && rc == 0; p++) {
		const char *piece;

		mk_agg_pipe_rows(ms, pieces, p, &row0, &rows);
		piece = stage + (size_t)c->nranks * row0 * k * esz;
		if (cudaStreamWaitEvent(stream, st->pipe_ev[1 + p], 0) != cudaSuccess)
			rc = -EIO;
		for (int r = 0; r < c->nranks && rc == 0; r++) {
			const char *src = piece + (size_t)r * rows * k * esz;

			if (r == me)
				continue;
			if (all != NULL &&
			    cudaMemcpyAsync(all + ((size_t)r * ms + row0) * k * esz, src,
					    (size_t)rows * k * esz, cudaMemcpyDeviceToDevice,
					    stream) != cudaSuccess)
				rc = -EIO;
			if (rc == 0)
				rc = mk_gemm_plain(src, x->b,
						   out + ((size_t)r * ms + row0) * n * esz, rows,
						   x->n, x->k, x->b_layout, ct, stream);
		}
	}
	/* join: the side stream's last record covers every piece before it */
	if (cudaEventRecord(st->pipe_ev[0], side) != cudaSuccess ||
	    cudaStreamWaitEvent(stream, st->pipe_ev[0], 0) != cudaSuccess)
		rc = rc ? rc : -EIO;
	return rc;
}

int mk_agg_unfused(struct mk_comm *c, const struct mk_sp_args *x, cudaStream_t stream)
{
	const cudaDataType_t ct = mk_sp_cuda_type(x->type);
	const size_t esz = mk_sp_esz(x->type), bytes = (size_t)x->m * x->k * esz;
	const int ms = x->m / c->nranks;
	struct mk_sp_state *st = NULL;
	void *all = x->gathered;
	int rc = 0, pipe;

	if (c->nranks == 1) {
		if (all != NULL && all != x->a &&
		    cudaMemcpyAsync(all, x->a, bytes, cudaMemcpyDeviceToDevice, stream) !=
			    cudaSuccess)
			return -EIO;
		return mk_gemm_plain(x->a, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct, stream);
	}
	if (mk_sp_state_get(c, MK_SP_AGG, &st) != 0)
		st = NULL;
	pipe = st != NULL &&
	       mk_agg_pipe_pick(c->nranks, x->m, x->n, x->k, mk_param_ag_gemm_pipeline()) &&
	       agg_pipe_ready(st, stream) == 0;
	if (st != NULL)
		st->pipe_pieces = 0;
	if (pipe) {
		/* the pieces land rank by rank: a staging area, aGathered filled from it */
		const int pieces = mk_agg_pipe_pieces(ms);
		void *stage = NULL;

		if (mk_sp_scratch_alloc(st, &stage, bytes, stream) != 0)
			return -ENOMEM;
		rc = agg_pipe_run(c, st, x, stage, pieces, stream);
		if (mk_sp_scratch_free(stage, stream) != 0 && rc == 0)
			rc = -EIO;
		if (rc == 0)
			st->pipe_pieces = pieces;
		return rc;
	}
	if (all == NULL && mk_sp_scratch_alloc(st, &all, bytes, stream) != 0)
		return -ENOMEM;
	if (ncclAllGather(x->a, all, (size_t)ms * x->k, x->type, c->nccl, stream) != ncclSuccess)
		rc = -EIO;
	if (rc == 0)
		rc = mk_gemm_plain(all, x->b, x->c, x->m, x->n, x->k, x->b_layout, ct, stream);
	if (x->gathered == NULL && mk_sp_scratch_free(all, stream) != 0 && rc == 0)
		rc = -EIO;
	return rc;
}
