/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The portable attention kernel: plain CUDA (no wgmma, TMA or mbarrier), fp32 arithmetic, for any
 * GPU of compute capability >= 7.0, with the interface and results of the Hopper kernel (attn.h:
 * offsets, causal positions, every epilogue mode). It is mkAttention's path on other GPUs and the
 * on-GPU reference the tests compare the Hopper kernel with on shapes too large for the CPU.
 *
 * A CTA takes MK_ATTN_P_BLOCK query rows of one (b, h): each warp owns MK_ATTN_P_ROWS rows. Keys
 * go through shared memory in tiles of 32: lane j computes the scores of key j for the warp's
 * rows (Q broadcast from shared memory), the warp reduces maxima and sums with shuffles (online
 * softmax, exp2 form), then each lane accumulates its pairs of output columns over the 32 keys,
 * the probabilities broadcast by shuffles. Inputs are read 2 bytes at a time (any alignment).
 * Work items follow the same schedule order as the Hopper kernel (longest first when causal).
 */
#include <errno.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attn.h"

#define P_KEYS 32

static __device__ __forceinline__ float p_bf16(const void *base, long long i)
{
	return __uint_as_float((uint32_t)((const unsigned short *)base)[i] << 16);
}

static __device__ __forceinline__ float p_warp_max(float v)
{
	for (int s = 16; s > 0; s >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
	return v;
}

static __device__ __forceinline__ float p_warp_sum(float v)
{
	for (int s = 16; s > 0; s >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, s);
	return v;
}

/* Write one finished row i of job j (every lane: its column pairs c = lane + 32u); fresh and
 * final rows as in the Hopper kernel's epilogue. */
static __device__ __forceinline__ void p_row_out(const struct mk_attn_args *a,
						 const struct mk_attn_job *j, const float *o, float m,
						 float l, int b, int h, int i, const int hd)
{
	const int lane = threadIdx.x & 31, ar = j->q_row0 + i;
	const int fresh = i >= j->fresh_lo && i < j->fresh_hi;
	const int final = i >= j->final_lo && i < j->final_hi;
	const float inv = l > 0.0f ? 1.0f / l : 0.0f;
	const float lse = l > 0.0f ? m * a->scale + logf(l) : -INFINITY;
	const long long off = (((long long)b * a->q_batch_rows + ar) * a->heads_q + h) * hd;
	float *lp = a->lse == NULL ? NULL : a->lse + ((long long)b * a->heads_q + h) * a->lse_ld + ar;
	float w_old, w_new, lse_out;

	lse_out = mk_attn_lse_merge(fresh ? -INFINITY : *lp, lse, &w_old, &w_new);
	w_new *= inv;
	__syncwarp(); /* every lane has read lse before lane 0 rewrites it */
#pragma unroll
	for (int u = 0; u < hd / 64; u++) {
#pragma unroll
		for (int e = 0; e < 2; e++) {
			long long x = off + 2 * (lane + 32 * u) + e;
			float v = o[2 * u + e] * w_new;

			if (!fresh)
				v += w_old * a->acc[x];
			if (final)
				((__nv_bfloat16 *)a->o)[x] = __float2bfloat16_rn(v);
			else
				a->acc[x] = v;
		}
	}
	if (lane == 0 && lp != NULL)
		*lp = lse_out;
}

static __device__ __forceinline__ void p_attention(const struct mk_attn_args *a, const int hd)
{
	__shared__ float qs[MK_ATTN_P_BLOCK][128];
	__shared__ uint32_t ks[P_KEYS][128 / 2 + 1]; /* odd row stride: lane j reads row j */
	__shared__ uint32_t vs[P_KEYS][128 / 2];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hp = hd / 2;
	const float sl2 = a->scale_log2;
	const struct mk_attn_job *jb = &a->job[0];
	int bh, mb;

	mk_attn_item(a, jb, blockIdx.x, &bh, &mb);
	const int b = bh / a->heads_q, h = bh - b * a->heads_q, kvh = h / a->group;
	const int row_base = mb * MK_ATTN_P_BLOCK;
	const int r_last = min(row_base + MK_ATTN_P_BLOCK, jb->sq) - 1;
	int kend = jb->skv;
	float m[MK_ATTN_P_ROWS], l[MK_ATTN_P_ROWS], o[MK_ATTN_P_ROWS][4];

	if (jb->causal)
		kend = max(0, min(jb->skv, r_last + jb->diag + 1));
	for (int i = threadIdx.x; i < MK_ATTN_P_BLOCK * hd; i += blockDim.x) {
		int r = i / hd, d = i - r * hd, row = row_base + r;
		long long x = (((long long)b * a->q_batch_rows + jb->q_row0 + row) * a->heads_q + h) *
				      hd +
			      d;

		qs[r][d] = row < jb->sq ? p_bf16(a->q, x) : 0.0f;
	}
#pragma unroll
	for (int r = 0; r < MK_ATTN_P_ROWS; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
#pragma unroll
		for (int u = 0; u < 4; u++)
			o[r][u] = 0.0f;
	}

	for (int k0 = 0; k0 < kend; k0 += P_KEYS) {
		float s[MK_ATTN_P_ROWS], pr[MK_ATTN_P_ROWS];

		__syncthreads(); /* Q written / the previous tile consumed */
		for (int i = threadIdx.x; i < P_KEYS * hp; i += blockDim.x) {
			int key = i / hp, c = i - key * hp, j = k0 + key;
			uint32_t kp = 0, vp = 0;

			if (j < jb->skv) {
				long long x = (((long long)b * a->kv_batch_rows + jb->kv_row0 + j) *
						       a->heads_kv +
					       kvh) * hd + 2 * c;
				const unsigned short *k16 = (const unsigned short *)a->k;
				const unsigned short *v16 = (const unsigned short *)a->v;

				kp = (uint32_t)k16[x] | (uint32_t)k16[x + 1] << 16;
				vp = (uint32_t)v16[x] | (uint32_t)v16[x + 1] << 16;
			}
			ks[key][c] = kp;
			vs[key][c] = vp;
		}
		__syncthreads();

#pragma unroll
		for (int r = 0; r < MK_ATTN_P_ROWS; r++)
			s[r] = 0.0f;
		for (int c = 0; c < hp; c++) {
			uint32_t kp = ks[lane][c];
			float klo = __uint_as_float(kp << 16), khi = __uint_as_float(kp & 0xffff0000u);

#pragma unroll
			for (int r = 0; r < MK_ATTN_P_ROWS; r++) {
				float2 qv = *(const float2 *)&qs[warp * MK_ATTN_P_ROWS + r][2 * c];

				s[r] = fmaf(qv.x, klo, fmaf(qv.y, khi, s[r]));
			}
		}
#pragma unroll
		for (int r = 0; r < MK_ATTN_P_ROWS; r++) {
			int i = row_base + warp * MK_ATTN_P_ROWS + r;
			int vis = mk_attn_visible(jb, i, k0 + lane);
			float mx = fmaxf(m[r], p_warp_max(vis ? s[r] : -INFINITY));
			float base = mx == -INFINITY ? 0.0f : mx * sl2;
			float alpha = mx == -INFINITY ? 1.0f : exp2f((m[r] - mx) * sl2);

			pr[r] = vis ? exp2f(fmaf(s[r], sl2, -base)) : 0.0f;
			l[r] = l[r] * alpha + p_warp_sum(pr[r]);
			m[r] = mx;
#pragma unroll
			for (int u = 0; u < 4; u++)
				o[r][u] *= alpha;
		}
		for (int jj = 0; jj < P_KEYS; jj++) {
#pragma unroll
			for (int u = 0; u < hd / 64; u++) {
				uint32_t vp = vs[jj][lane + 32 * u];
				float vlo = __uint_as_float(vp << 16);
				float vhi = __uint_as_float(vp & 0xffff0000u);

#pragma unroll
				for (int r = 0; r < MK_ATTN_P_ROWS; r++) {
					float pj = __shfl_sync(0xffffffffu, pr[r], jj);

					o[r][2 * u] = fmaf(pj, vlo, o[r][2 * u]);
					o[r][2 * u + 1] = fmaf(pj, vhi, o[r][2 * u + 1]);
				}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < MK_ATTN_P_ROWS; r++) {
		int i = row_base + warp * MK_ATTN_P_ROWS + r;

		if (i < jb->sq) /* uniform per warp */
			p_row_out(a, jb, o[r], m[r], l[r], b, h, i, hd);
	}
}

extern "C" __global__ void __launch_bounds__(MK_ATTN_P_WARPS * 32)
	mk_attn_portable_d128(const struct mk_attn_args args)
{
	p_attention(&args, 128);
}

extern "C" __global__ void __launch_bounds__(MK_ATTN_P_WARPS * 32)
	mk_attn_portable_d64(const struct mk_attn_args args)
{
	p_attention(&args, 64);
}

extern "C" int mk_attn_run_portable(const struct mk_attn_args *in, cudaStream_t stream)
{
	struct mk_attn_args a = *in;
	int rc = mk_attn_plan(&a, MK_ATTN_P_BLOCK, NULL);

	if (rc)
		return rc;
	/* one job reading k and v itself (several jobs: launch one after the other) */
	if (a.njobs != 1 || a.job[0].kv_maps != NULL || a.job[0].gate != NULL)
		return -EINVAL;
	if (a.head_dim == 128)
		mk_attn_portable_d128<<<a.items, MK_ATTN_P_WARPS * 32, 0, stream>>>(a);
	else
		mk_attn_portable_d64<<<a.items, MK_ATTN_P_WARPS * 32, 0, stream>>>(a);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
