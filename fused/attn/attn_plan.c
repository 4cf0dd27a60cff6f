// SPDX-License-Identifier: Apache-2.0
/*
 * Host-side planning of one attention call: argument rules, the derived tile counts, the causal
 * schedule's L2 sections and the softmax scale. Plain C, no CUDA calls, so the unit suite checks
 * it without a GPU.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attn.h"

/* Positions and lengths stay below 2^30 so row + diag never overflows an int on the device. */
#define ATTN_MAX_ROWS (1ll << 30)

static const char *attn_rule(const struct mk_attn_args *a, int block_m)
{
	long long diag = a->q_pos - a->k_pos;

	if (a->batch < 1 || a->heads_q < 1 || a->heads_kv < 1)
		return "batch and head counts must be >= 1";
	if (a->heads_q % a->heads_kv)
		return "query heads must be a multiple of key/value heads";
	if (a->head_dim != 64 && a->head_dim != 128)
		return "head dim must be 64 or 128";
	if (a->sq < 1 || a->skv < 1)
		return "sequence lengths must be >= 1";
	if (a->sq >= ATTN_MAX_ROWS || a->skv >= ATTN_MAX_ROWS || diag >= ATTN_MAX_ROWS ||
	    diag <= -ATTN_MAX_ROWS)
		return "sequence lengths and positions must stay below 2^30";
	if (a->q_batch_rows < a->sq || a->kv_batch_rows < a->skv)
		return "batch strides must cover the rows of the call";
	if (a->q_batch_rows >= ATTN_MAX_ROWS * 4 || a->kv_batch_rows >= ATTN_MAX_ROWS * 4)
		return "batch strides must stay below 2^32 rows";
	if ((double)a->batch * a->q_batch_rows * a->heads_q * a->head_dim > (double)(1ll << 62) ||
	    (double)a->batch * a->kv_batch_rows * a->heads_kv * a->head_dim > (double)(1ll << 62))
		return "tensor too large";
	if (a->q == NULL || a->k == NULL || a->v == NULL)
		return "q, k and v must not be NULL";
	if (block_m < 1)
		return "block_m must be >= 1";
	if ((double)a->batch * a->heads_q * ((a->sq + block_m - 1) / block_m) > INT_MAX)
		return "too many work items";
	switch (a->epi) {
	case MK_ATTN_EPI_STORE:
		if (a->o == NULL)
			return "store mode needs o";
		break;
	case MK_ATTN_EPI_PARTIAL:
	case MK_ATTN_EPI_MERGE:
		if (a->acc == NULL || a->lse == NULL)
			return "partial and merge modes need acc and lse";
		break;
	case MK_ATTN_EPI_MERGE_OUT:
		if (a->o == NULL || a->acc == NULL || a->lse == NULL)
			return "merge-out mode needs o, acc and lse";
		break;
	default:
		return "unknown epilogue mode";
	}
	if (a->lse != NULL && a->lse_ld < a->sq)
		return "lse row stride must be >= sq";
	return NULL;
}

/*
 * (b, h) pairs per section of the causal schedule: as many K/V heads as fit the L2 budget (at
 * least one), times the query heads that share each.
 */
static int attn_section(const struct mk_attn_args *a)
{
	long long kv_head_bytes = (long long)a->skv * a->head_dim * 2 * 2;
	long long heads = MK_ATTN_L2_SECTION_BYTES / kv_head_bytes;
	long long s;

	if (heads < 1)
		heads = 1;
	s = heads * a->group;
	return s < a->bh ? (int)s : a->bh;
}

int mk_attn_plan(struct mk_attn_args *a, int block_m, const char **why)
{
	const char *r = attn_rule(a, block_m);

	if (why != NULL)
		*why = r;
	if (r != NULL)
		return -EINVAL;
	a->diag = (int)(a->q_pos - a->k_pos);
	a->scale = (float)(1.0 / sqrt((double)a->head_dim));
	a->scale_log2 = (float)(1.4426950408889634 / sqrt((double)a->head_dim));
	a->block_m = block_m;
	a->tiles_m = (a->sq + block_m - 1) / block_m;
	a->kv_blocks = (a->skv + MK_ATTN_BN - 1) / MK_ATTN_BN;
	a->bh = a->batch * a->heads_q;
	a->group = a->heads_q / a->heads_kv;
	a->items = a->bh * a->tiles_m;
	a->section = a->causal ? attn_section(a) : a->bh;
	a->units = a->causal ? a->bh * ((a->tiles_m + 1) / 2) : a->items;
	return 0;
}

void mk_attn_args_init(struct mk_attn_args *a, const void *q, const void *k, const void *v, void *o,
		       float *lse, int batch, int heads_q, int heads_kv, int sq, int skv,
		       int head_dim, int causal)
{
	memset(a, 0, sizeof(*a));
	a->batch = batch;
	a->heads_q = heads_q;
	a->heads_kv = heads_kv;
	a->head_dim = head_dim;
	a->sq = sq;
	a->skv = skv;
	a->q_batch_rows = sq;
	a->kv_batch_rows = skv;
	a->lse_ld = sq;
	a->q = q;
	a->k = k;
	a->v = v;
	a->o = o;
	a->lse = lse;
	a->epi = MK_ATTN_EPI_STORE;
	a->causal = causal != 0;
	a->q_pos = (long long)skv - sq; /* bottom-right aligned */
	a->k_pos = 0;
}
