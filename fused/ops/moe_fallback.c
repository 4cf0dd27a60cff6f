// SPDX-License-Identifier: Apache-2.0
/*
 * The MoE ops' unfused path, and the host half of the capacity rule. Counts are read on the host
 * (the routing is copied down, every rank's counts gathered with ncclAllGather), so every rank
 * takes the same decision and a refused call moves no token. The exchange is all-to-all-v with
 * ncclSend/ncclRecv in one group; rows are gathered into the send buffer and scattered into
 * expert order by index lists the host planned (moe_plan.c), and the expert GEMMs are
 * mkGroupedGemm. The combine runs the same steps backwards and sums each token's rows, weighted,
 * in fp32. Buffers are kept per comm and grown when a call needs more (outside graph capture:
 * this path synchronises the host and is refused there).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nccl.h>

#include "fused/ops/moe.h"
#include "fused/runtime/comm.h"
#include "mkernel.h"

#define MK_LOG_PREFIX "mkernel"
#include "mk/clock.h"
#include "mk/err.h"
#include "mk/log.h"

/* Counts row of a rank: [ne] counts, then bad ids, first bad pair, its id. */
#define CNT_EXTRA 3

static int unf_cuda(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	MK_WARN("MoE unfused path: %s: %s", what, cudaGetErrorString(e));
	return -EIO;
}

static int unf_nccl(ncclResult_t r, const char *what)
{
	if (r == ncclSuccess)
		return 0;
	MK_WARN("MoE unfused path: %s: %s", what, ncclGetErrorString(r));
	return -EIO;
}

/*
 * Wait for the stream, bounded by the comm's timeout: NCCL does not give up on a dead peer, so
 * a rank that died mid-call would hang this host thread for good. A peer's connection error the
 * proxy saw ends the wait at once. The stream is left unusable then (abort the comm).
 */
static int unf_wait(struct mk_comm *c, cudaStream_t stream)
{
	const uint64_t t0 = mk_now_ns(), limit = (uint64_t)c->timeout_ms * 1000000ull;
	cudaError_t e;

	while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady) {
		int rc = mk_proxy_error(c->proxy);

		if (rc) {
			MK_WARN("MoE unfused path: a peer failed (%s) while the exchange ran",
				mk_strerror(rc));
			return rc;
		}
		if (mk_now_ns() - t0 > limit) {
			MK_WARN("MoE unfused path: the exchange did not finish within %d ms",
				c->timeout_ms);
			return -ETIMEDOUT;
		}
		usleep(50);
	}
	return unf_cuda(e, "stream");
}

static int grow_dev(void **p, size_t *have, size_t need)
{
	if (need <= *have)
		return 0;
	cudaFree(*p);
	*p = NULL;
	*have = 0;
	if (cudaMalloc(p, need) != cudaSuccess) {
		*p = NULL;
		return -ENOMEM;
	}
	*have = need;
	return 0;
}

static int grow_host(void **p, size_t *have, size_t need)
{
	if (need <= *have)
		return 0;
	cudaFreeHost(*p);
	*p = NULL;
	*have = 0;
	if (cudaHostAlloc(p, need, cudaHostAllocDefault) != cudaSuccess) {
		*p = NULL;
		return -ENOMEM;
	}
	*have = need;
	return 0;
}

int mk_moe_host_counts(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
		       const struct mk_moe_call *a, cudaStream_t stream, struct mk_moe_verdict *v)
{
	const size_t stride = (size_t)g->ne + CNT_EXTRA;
	const size_t idx_bytes = (size_t)g->max_tokens * g->topk * 4 + 4;
	int32_t *mine;
	int rc, first_bad, bad;

	v->needed = 0;
	v->bad_rank = v->bad_pair = v->bad_id = -1;
	if ((rc = grow_host((void **)&st->h_idx, &st->h_idx_bytes, idx_bytes)) ||
	    (rc = grow_host((void **)&st->h_cnt, &st->h_cnt_bytes, g->nranks * stride * 4)) ||
	    (rc = grow_dev((void **)&st->d_cnt, &st->d_cnt_bytes, g->nranks * stride * 4)))
		return rc;
	if (a->ntok > 0 &&
	    (rc = unf_cuda(cudaMemcpyAsync(st->h_idx, a->topk_idx, (size_t)a->ntok * g->topk * 4,
					   cudaMemcpyDeviceToHost, stream),
			   "copy of topkIdx")))
		return rc;
	if ((rc = unf_wait(c, stream)))
		return rc;
	mine = st->h_cnt + (size_t)g->rank * stride;
	bad = mk_moe_count(g, st->h_idx, a->ntok, mine, &first_bad);
	mine[g->ne] = bad;
	mine[g->ne + 1] = first_bad;
	mine[g->ne + 2] = first_bad >= 0 ? st->h_idx[first_bad] : 0;
	if ((rc = unf_cuda(cudaMemcpyAsync(st->d_cnt + (size_t)g->rank * stride, mine, stride * 4,
					   cudaMemcpyHostToDevice, stream),
			   "copy of the counts")) ||
	    (rc = unf_nccl(ncclAllGather(st->d_cnt + (size_t)g->rank * stride, st->d_cnt, stride,
					 ncclInt32, c->nccl, stream),
			   "ncclAllGather of the counts")) ||
	    (rc = unf_cuda(cudaMemcpyAsync(st->h_cnt, st->d_cnt, g->nranks * stride * 4,
					   cudaMemcpyDeviceToHost, stream),
			   "copy of the gathered counts")) ||
	    (rc = unf_wait(c, stream)))
		return rc;
	for (int s = 0; s < g->nranks; s++) {
		const int32_t *row = st->h_cnt + (size_t)s * stride;

		if (row[g->ne] > 0 && v->bad_rank < 0) {
			v->bad_rank = s;
			v->bad_pair = row[g->ne + 1];
			v->bad_id = row[g->ne + 2];
		}
	}
	for (int q = 0; q < g->nranks; q++) {
		int rows = 0;

		for (int l = 0; l < g->eloc; l++)
			rows += mk_moe_expert_rows(st->h_cnt, stride, g->nranks, q * g->eloc + l);
		if (rows > v->needed)
			v->needed = rows;
	}
	if (v->bad_rank >= 0)
		return -EINVAL;
	return v->needed > g->max_recv ? -EOVERFLOW : 0;
}

/* Exchange rows: to rank q send[q] rows from `from` (in rank order), from q recv[q] into `to`. */
static int unf_exchange(struct mk_comm *c, const struct mk_moe_geom *g, const char *from,
			const int32_t *send, char *to, const int32_t *recv, size_t row_bytes,
			cudaStream_t stream)
{
	const size_t elems_per_row = row_bytes / 2;
	size_t so = 0, ro = 0;
	int rc;

	if ((rc = unf_nccl(ncclGroupStart(), "ncclGroupStart")))
		return rc;
	for (int q = 0; q < g->nranks && rc == 0; q++) {
		if (send[q] > 0)
			rc = unf_nccl(ncclSend(from + so * row_bytes,
					       (size_t)send[q] * elems_per_row, ncclBfloat16, q,
					       c->nccl, stream),
				      "ncclSend");
		if (rc == 0 && recv[q] > 0)
			rc = unf_nccl(ncclRecv(to + ro * row_bytes, (size_t)recv[q] * elems_per_row,
					       ncclBfloat16, q, c->nccl, stream),
				      "ncclRecv");
		so += (size_t)send[q];
		ro += (size_t)recv[q];
	}
	if (ncclGroupEnd() != ncclSuccess && rc == 0)
		rc = unf_nccl(ncclInvalidUsage, "ncclGroupEnd");
	return rc;
}

static int unf_rows_buffers(struct mk_moe_state *st, const struct mk_moe_geom *g)
{
	const size_t row = (size_t)g->hidden * 2;
	const size_t pairs = (size_t)g->max_tokens * g->topk;
	int rc;

	if ((rc = grow_dev(&st->d_send, &st->d_send_bytes, pairs * row + 16)) ||
	    (rc = grow_dev(&st->d_recv, &st->d_recv_bytes, (size_t)g->max_recv * row + 16)) ||
	    (rc = grow_dev(&st->d_rows, &st->d_rows_bytes, (size_t)g->max_recv * row + 16)))
		return rc;
	return 0;
}

int mk_moe_unfused_dispatch(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			    const struct mk_moe_call *a, cudaStream_t stream)
{
	const size_t stride = (size_t)g->ne + CNT_EXTRA, row = (size_t)g->hidden * 2;
	const size_t pairs = (size_t)g->max_tokens * g->topk;
	struct mk_moe_lmap m;
	const int32_t *ucount;
	int needed, sends = 0, recvs = 0, rc;

	mk_moe_lmap_init(g, &m);
	if ((rc = grow_host(&st->h_lay, &st->h_lay_bytes, m.bytes)) ||
	    (rc = grow_host((void **)&st->h_gather, &st->h_gather_bytes, pairs * 4 + 4)) ||
	    (rc = grow_dev((void **)&st->d_gather, &st->d_gather_bytes, pairs * 4 + 4)) ||
	    (rc = unf_rows_buffers(st, g)))
		return rc;
	/* The counts were gathered by mk_moe_host_counts (and the stream synchronised): the
	 * pinned buffers the previous call uploaded from are free again. */
	rc = mk_moe_plan_unfused(g, st->h_idx, NULL, a->ntok, st->h_cnt, stride, st->h_lay,
				 st->h_gather, &needed);
	if (rc)
		return rc;
	ucount = (const int32_t *)((const char *)st->h_lay + m.unf_count);
	for (int q = 0; q < g->nranks; q++) {
		sends += ucount[q];
		recvs += ucount[g->nranks + q];
	}
	if ((rc = unf_cuda(
		     cudaMemcpyAsync(a->layout, st->h_lay, m.bytes, cudaMemcpyHostToDevice, stream),
		     "upload of the layout")) ||
	    (a->ntok > 0 && (rc = unf_cuda(cudaMemcpyAsync((char *)a->layout + m.pair_w, a->topk_w,
							   (size_t)a->ntok * g->topk * 4,
							   cudaMemcpyDeviceToDevice, stream),
					   "copy of topkWeight"))) ||
	    (sends > 0 &&
	     (rc = unf_cuda(cudaMemcpyAsync(st->d_gather, st->h_gather, (size_t)sends * 4,
					    cudaMemcpyHostToDevice, stream),
			    "upload of the gather list"))) ||
	    (rc = mk_moe_gather_rows(st->d_send, a->x, st->d_gather, sends, row, stream)) ||
	    (rc = unf_exchange(c, g, (const char *)st->d_send, ucount, (char *)st->d_recv,
			       ucount + g->nranks, row, stream)) ||
	    (rc = mk_moe_scatter_rows(st->d_rows, st->d_recv,
				      (const int32_t *)((const char *)a->layout + m.unf_scatter),
				      recvs, row, stream)))
		return rc;
	if (g->max_recv == 0)
		return 0;
	return mkGroupedGemm(st->d_rows, a->w, a->out, (const int *)a->layout, g->eloc,
			     (size_t)g->max_recv, (size_t)g->inter, (size_t)g->hidden, ncclBfloat16,
			     g->w_nk ? mkLayoutRowMajorNK : mkLayoutRowMajorKN,
			     stream) == ncclSuccess
		       ? 0
		       : -EIO;
}

int mk_moe_unfused_combine(struct mk_comm *c, struct mk_moe_state *st, const struct mk_moe_geom *g,
			   const struct mk_moe_call *a, cudaStream_t stream)
{
	const size_t row = (size_t)g->hidden * 2;
	struct mk_moe_lmap m;
	int32_t *ucount;
	int recvs = 0, rc;

	mk_moe_lmap_init(g, &m);
	if ((rc = unf_rows_buffers(st, g)) ||
	    (rc = grow_host((void **)&st->h_cnt, &st->h_cnt_bytes, 2 * (size_t)g->nranks * 4)))
		return rc;
	ucount = st->h_cnt;
	if ((rc = unf_cuda(cudaMemcpyAsync(ucount, (const char *)a->layout + m.unf_count,
					   2 * (size_t)g->nranks * 4, cudaMemcpyDeviceToHost,
					   stream),
			   "copy of the layout's counts")) ||
	    (rc = unf_wait(c, stream)))
		return rc;
	for (int q = 0; q < g->nranks; q++)
		recvs += ucount[g->nranks + q];
	if (g->max_recv > 0 &&
	    mkGroupedGemm(a->h, a->w, st->d_rows, (const int *)a->layout, g->eloc,
			  (size_t)g->max_recv, (size_t)g->hidden, (size_t)g->inter, ncclBfloat16,
			  g->w_nk ? mkLayoutRowMajorNK : mkLayoutRowMajorKN, stream) != ncclSuccess)
		return -EIO;
	/* Back in the order the rows came: gather through the scatter list, send each source its
	 * block, then every token sums its slots. */
	if ((rc = mk_moe_gather_rows(st->d_recv, st->d_rows,
				     (const int32_t *)((const char *)a->layout + m.unf_scatter),
				     recvs, row, stream)) ||
	    (rc = unf_exchange(c, g, (const char *)st->d_recv, ucount + g->nranks,
			       (char *)st->d_send, ucount, row, stream)))
		return rc;
	return mk_moe_weighted_sum(a->out, st->d_send, a->layout, g, stream);
}
