/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU references for the attention GPU test: the exact softmax attention of bf16 inputs in
 * double precision (threads over (b, h)), and the closed form of the "uniform" probe (q = 0:
 * every visible key has weight 1, so O is the mean of the visible V rows and LSE = ln(count)).
 * Layouts as mkAttention's: q, o [B][rows][Hq][D], k, v [B][rows][Hkv][D], lse [B][Hq][Sq].
 */
#ifndef MK_TEST_GPU_ATTN_REF_H
#define MK_TEST_GPU_ATTN_REF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct t_ref_prob {
	int B, Hq, Hkv, Sq, Skv, D, causal;
	int diag;	   /* causal: key j visible to query i iff j <= i + diag */
	long long q_rows;  /* rows per batch in q and o */
	long long kv_rows; /* rows per batch in k and v */
	long long lse_ld;  /* lse elements per (b, h) */
};

float t_bf16(uint16_t x);

/* Number of keys query i sees. */
int t_ref_visible_count(const struct t_ref_prob *p, int i);

void t_ref_attention(const struct t_ref_prob *p, const uint16_t *q, const uint16_t *k,
		     const uint16_t *v, float *o, float *lse, int threads);

void t_ref_uniform(const struct t_ref_prob *p, const uint16_t *v, float *o, float *lse);

#ifdef __cplusplus
}
#endif

#endif /* MK_TEST_GPU_ATTN_REF_H */
