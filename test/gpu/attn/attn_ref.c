// SPDX-License-Identifier: Apache-2.0
/* CPU references of the attention GPU test (see attn_ref.h). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"

float t_bf16(uint16_t x)
{
	uint32_t u = (uint32_t)x << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

int t_ref_visible_count(const struct t_ref_prob *p, int i)
{
	long long last;

	if (!p->causal)
		return p->Skv;
	last = (long long)i + p->diag;
	if (last < 0)
		return 0;
	return last + 1 < p->Skv ? (int)(last + 1) : p->Skv;
}

struct ref_job {
	const struct t_ref_prob *p;
	const uint16_t *q, *k, *v;
	float *o, *lse;
	int first, step;
};

static void ref_row(const struct ref_job *j, int b, int h, int i, double *s, float *qf)
{
	const struct t_ref_prob *p = j->p;
	const int D = p->D, kvh = h / (p->Hq / p->Hkv), n = t_ref_visible_count(p, i);
	const double scale = 1.0 / sqrt((double)D);
	float *o = j->o + (((long long)b * p->q_rows + i) * p->Hq + h) * D;
	double m = -INFINITY, l = 0;

	for (int d = 0; d < D; d++)
		qf[d] = t_bf16(j->q[(((long long)b * p->q_rows + i) * p->Hq + h) * D + d]);
	for (int c = 0; c < n; c++) {
		const uint16_t *kr = j->k + (((long long)b * p->kv_rows + c) * p->Hkv + kvh) * D;
		double acc = 0;

		for (int d = 0; d < D; d++)
			acc += (double)qf[d] * t_bf16(kr[d]);
		s[c] = acc * scale;
		m = s[c] > m ? s[c] : m;
	}
	for (int d = 0; d < D; d++)
		o[d] = 0;
	if (n == 0) {
		j->lse[((long long)b * p->Hq + h) * p->lse_ld + i] = -INFINITY;
		return;
	}
	for (int c = 0; c < n; c++) {
		s[c] = exp(s[c] - m);
		l += s[c];
	}
	for (int d = 0; d < D; d++) {
		double acc = 0;

		for (int c = 0; c < n; c++)
			acc += s[c] *
			       t_bf16(j->v[(((long long)b * p->kv_rows + c) * p->Hkv + kvh) * D +
					   d]);
		o[d] = (float)(acc / l);
	}
	j->lse[((long long)b * p->Hq + h) * p->lse_ld + i] = (float)(m + log(l));
}

static void *ref_worker(void *arg)
{
	const struct ref_job *j = arg;
	const struct t_ref_prob *p = j->p;
	double *s = malloc(sizeof(*s) * (p->Skv + 1));
	float *qf = malloc(sizeof(*qf) * p->D);

	for (int bh = j->first; s != NULL && qf != NULL && bh < p->B * p->Hq; bh += j->step)
		for (int i = 0; i < p->Sq; i++)
			ref_row(j, bh / p->Hq, bh % p->Hq, i, s, qf);
	free(s);
	free(qf);
	return NULL;
}

void t_ref_attention(const struct t_ref_prob *p, const uint16_t *q, const uint16_t *k,
		     const uint16_t *v, float *o, float *lse, int threads)
{
	pthread_t tid[64];
	struct ref_job job[64];
	int n = threads < 1 ? 1 : threads > 64 ? 64 : threads;

	for (int t = 0; t < n; t++) {
		job[t] = (struct ref_job){ p, q, k, v, o, lse, t, n };
		if (pthread_create(&tid[t], NULL, ref_worker, &job[t]) != 0) {
			ref_worker(&job[t]);
			tid[t] = 0;
		}
	}
	for (int t = 0; t < n; t++)
		if (tid[t])
			pthread_join(tid[t], NULL);
}

void t_ref_uniform(const struct t_ref_prob *p, const uint16_t *v, float *o, float *lse)
{
	const int D = p->D;
	double *pre = malloc(sizeof(*pre) * ((long long)p->Skv + 1) * D);

	if (pre == NULL)
		return;
	for (int b = 0; b < p->B; b++)
		for (int kvh = 0; kvh < p->Hkv; kvh++) {
			/* prefix sums of V rows: the mean of the first n rows in O(1) */
			for (int d = 0; d < D; d++)
				pre[d] = 0;
			for (int c = 0; c < p->Skv; c++)
				for (int d = 0; d < D; d++)
					pre[(long long)(c + 1) * D + d] =
						pre[(long long)c * D + d] +
						t_bf16(v[(((long long)b * p->kv_rows + c) * p->Hkv +
							  kvh) * D +
							 d]);
			for (int h = kvh * (p->Hq / p->Hkv); h < (kvh + 1) * (p->Hq / p->Hkv); h++)
				for (int i = 0; i < p->Sq; i++) {
					int n = t_ref_visible_count(p, i);
					float * or = o + (((long long)b * p->q_rows + i) * p->Hq +
							  h) * D;

					for (int d = 0; d < D; d++)
						or [d] = n ? (float)(pre[(long long)n * D + d] / n)
							   : 0.0f;
					lse[((long long)b * p->Hq + h) * p->lse_ld + i] =
						n ? (float)log((double)n) : -INFINITY;
				}
		}
	free(pre);
}
