// SPDX-License-Identifier: Apache-2.0
/*
 * mkRingAttention's unfused path: ncclAllGather of K and V on the call's stream, then the same
 * steps as the fused kernel (ring_attention_plan.c), one attention-engine launch each, partials
 * merged in step order through the per-rank fp32 scratch. Used where fusion does not pay (the
 * policy engine's cost model), is not possible (another GPU, rings above 16 ranks, misaligned
 * buffers, a new shape under graph capture, a heap too small) or is turned off.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "fused/ops/ring_attention_host.h"
#include "fused/runtime/comm.h"

int mk_ring_unfused(struct mk_comm *c, const struct mk_ring_call *x, cudaStream_t stream)
{
	const size_t rows = (size_t)x->batch * x->seq_local;
	const size_t elems = rows * x->heads_kv * x->head_dim; /* of my K (or V) */
	struct mk_ring_step *steps;
	struct mk_ring_geom g;
	struct mk_ring_state *st;
	struct mk_attn_args a;
	int rc;

	/* one rank: the whole sequence is here */
	if (c->nranks == 1) {
		mk_attn_args_init(&a, x->q, x->k, x->v, x->o, x->lse, x->batch, x->heads_q,
				  x->heads_kv, x->seq_local, x->seq_local, x->head_dim, x->causal);
		return mk_attn_run(&a, stream, NULL);
	}
	steps = calloc((size_t)c->nranks, sizeof(*steps));
	if (steps == NULL)
		return -ENOMEM;
	mk_ring_geom_of(c, x, &g);
	rc = mk_ring_steps(&g, steps, NULL);
	if (rc == 0)
		rc = mk_ring_state_get(c, &st);
	if (rc == 0)
		rc = mk_ring_check_key(c, st, x, stream);
	if (rc == 0)
		rc = mk_ring_scratch(st, rows * x->heads_q * x->head_dim * sizeof(float),
				     x->lse == NULL ? rows * x->heads_q * sizeof(float) : 0,
				     (size_t)c->nranks * elems * 2, stream);
	if (rc == 0 &&
	    (ncclAllGather(x->k, st->kg, elems, ncclBfloat16, c->nccl, stream) != ncclSuccess ||
	     ncclAllGather(x->v, st->vg, elems, ncclBfloat16, c->nccl, stream) != ncclSuccess))
		rc = -EIO;
	for (int k = 0; k < c->nranks && rc == 0; k++) {
		const struct mk_ring_step *s = &steps[k];
		const size_t off =
			(size_t)s->src * elems * 2; /* bytes of a rank's gathered block */

		mk_attn_args_init(&a, x->q, (const char *)st->kg + off, (const char *)st->vg + off,
				  x->o, x->lse != NULL ? x->lse : st->lse, x->batch, x->heads_q,
				  x->heads_kv, x->seq_local, x->seq_local, x->head_dim, 0);
		a.acc = st->acc;
		a.njobs = 1;
		memset(&a.job[0], 0, sizeof(a.job[0]));
		a.job[0].q_row0 = s->q_row0;
		a.job[0].sq = s->sq;
		a.job[0].kv_row0 = s->kv_row0;
		a.job[0].skv = s->skv;
		a.job[0].causal = s->causal;
		a.job[0].diag = s->diag;
		a.job[0].fresh_lo = s->fresh_lo;
		a.job[0].fresh_hi = s->fresh_hi;
		a.job[0].final_lo = s->final_lo;
		a.job[0].final_hi = s->final_hi;
		rc = mk_attn_run(&a, stream, NULL);
	}
	free(steps);
	return rc;
}
