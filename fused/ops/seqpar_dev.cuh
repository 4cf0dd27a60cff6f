/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device helpers of the sequence-parallel kernels (gemm_rs.cu, ag_gemm.cu): CTA-wide tickets
 * and waits, fp32 sums of bf16 row blocks, the entry every call passes (node peers and the other
 * nodes' peers finished the previous call) and the last CTA's close of a call (arrivals consumed,
 * the adaptive controller, counters, the call count node peers wait for, the end-of-call
 * signal to the other nodes). Every wait is bounded by the comm's timeout and gives up at once
 * once this rank recorded an error.
 */
#ifndef MK_FUSED_OPS_SEQPAR_DEV_CUH
#define MK_FUSED_OPS_SEQPAR_DEV_CUH

#include <cuda_bf16.h>
#include <errno.h>

#include "fused/gemm/gemm.h"
#include "fused/ops/adapt_dev.cuh"
#include "fused/ops/seqpar.h"
#include "fused/runtime/device.cuh"

static_assert(MK_SP_TILE_M == MK_GEMM_BM && MK_SP_TILE_N == MK_GEMM_BN,
	      "the plans' tile is the engine's");
static_assert(MK_SP_MAX_NODES >= MK_MAX_LOCAL, "a sum has at most MK_SP_MAX_NODES sources");

#define SP_UNROLL 4 /* 16-byte vectors in flight per thread and source */

MK_DEV int sp_fail(const struct mk_sp_common *cm, int rc)
{
	if (threadIdx.x == 0)
		mk_dev_record_error(cm->ws.error, rc);
	return rc;
}

/* Thread 0's result, shared with the CTA (every thread calls). */
MK_DEV int sp_share(int rc)
{
	__shared__ int rc_s;

	if (threadIdx.x == 0)
		rc_s = rc;
	__syncthreads();
	rc = rc_s;
	__syncthreads(); /* every thread read it before the next share writes it */
	return rc;
}

/* CTA-wide ticket from a counter the last CTA of the call resets. */
MK_DEV int sp_ticket(unsigned int *counter)
{
	__shared__ int t_s;

	__syncthreads(); /* every thread is done with the previous ticket's work */
	if (threadIdx.x == 0)
		t_s = (int)atomicAdd(counter, 1u);
	__syncthreads();
	return t_s;
}

/* Thread 0 waits until *flag >= want (0, -EPIPE or -ETIMEDOUT). */
MK_DEV int sp_wait0(const struct mk_sp_common *cm, const unsigned int *flag, unsigned int want)
{
	return mk_dev_wait_u32_ge(flag, want, cm->ws.error, cm->ws.timeout_ns);
}

/* Thread 0, after a barrier that ordered the CTA's stores: make them visible at system scope,
 * then add 1 to each of flags[tm0 .. tm1] (a peer GPU, the CPU or this GPU reads them). */
MK_DEV void sp_raise0(unsigned int *flags, int tm0, int tm1)
{
	mk_fence_acq_rel_sys();
	for (int tm = tm0; tm <= tm1; tm++)
		mk_red_release_sys_add_u32(&flags[tm], 1);
}

MK_DEV unsigned long long sp_now(void)
{
	return threadIdx.x == 0 ? mk_globaltimer_ns() : 0;
}

MK_DEV void sp_trace(const struct mk_sp_common *cm, int word)
{
	if (cm->trace != NULL && threadIdx.x == 0)
		cm->trace[blockIdx.x * MK_SP_TRACE_WORDS + word] = mk_globaltimer_ns();
}

/* The sources of a sum (filled by thread 0 in shared memory). */
struct sp_srcs {
	const uint16_t *p[MK_SP_MAX_NODES];
	unsigned int vol; /* bit p: read source p past the L2 too (a host mirror the NIC writes) */
	int n;
};

MK_DEV float sp_bf16(uint16_t v)
{
	return __uint_as_float((uint32_t)v << 16);
}

MK_DEV uint32_t sp_pack(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

MK_DEV uint4 sp_ld16(const uint16_t *p, bool vol)
{
	return vol ? __ldcv((const uint4 *)p) : __ldcg((const uint4 *)p);
}

/*
 * out[r * ld + c] = bf16(sum over sources of src[r * ld + c]) for r < rows, c < cols: every
 * thread of the CTA, fp32 sums, one rounding. Sources are read past the L1 at least: another
 * process or GPU wrote them since this SM may last have cached the lines.
 */
MK_DEV void sp_sum_rows(const struct sp_srcs *s, uint16_t *out, long long ld, int rows, int cols)
{
	bool vec = ld % 8 == 0 && cols % 8 == 0 && (uintptr_t)out % 16 == 0;

	for (int p = 0; p < s->n; p++)
		vec = vec && (uintptr_t)s->p[p] % 16 == 0;
	if (vec) {
		const int per_row = cols / 8, total = rows * per_row;

		for (int i0 = threadIdx.x; i0 < total; i0 += SP_UNROLL * blockDim.x) {
			float acc[SP_UNROLL][8];
			long long off[SP_UNROLL];

#pragma unroll
			for (int u = 0; u < SP_UNROLL; u++) {
				const int i = i0 + u * (int)blockDim.x;

				off[u] = i < total ? (long long)(i / per_row) * ld + (i % per_row) * 8 : 0;
#pragma unroll
				for (int j = 0; j < 8; j++)
					acc[u][j] = 0;
			}
			for (int p = 0; p < s->n; p++) {
				const uint16_t *src = s->p[p];
				const bool vol = (s->vol >> p) & 1;
				uint4 x[SP_UNROLL];

#pragma unroll
				for (int u = 0; u < SP_UNROLL; u++) {
					if (i0 + u * (int)blockDim.x < total)
						x[u] = sp_ld16(src + off[u], vol);
				}
#pragma unroll
				for (int u = 0; u < SP_UNROLL; u++) {
					const uint32_t w[4] = { x[u].x, x[u].y, x[u].z, x[u].w };

					if (i0 + u * (int)blockDim.x >= total)
						continue;
#pragma unroll
					for (int j = 0; j < 4; j++) {
						acc[u][2 * j] += sp_bf16((uint16_t)(w[j] & 0xffff));
						acc[u][2 * j + 1] += sp_bf16((uint16_t)(w[j] >> 16));
					}
				}
			}
#pragma unroll
			for (int u = 0; u < SP_UNROLL; u++) {
				uint4 o;

				if (i0 + u * (int)blockDim.x >= total)
					continue;
				o.x = sp_pack(acc[u][0], acc[u][1]);
				o.y = sp_pack(acc[u][2], acc[u][3]);
				o.z = sp_pack(acc[u][4], acc[u][5]);
				o.w = sp_pack(acc[u][6], acc[u][7]);
				*(uint4 *)(out + off[u]) = o;
			}
		}
		return;
	}
	for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
		const long long off = (long long)(i / cols) * ld + i % cols;
		float acc = 0;

		for (int p = 0; p < s->n; p++) {
			const uint16_t *src = s->p[p] + off;

			acc += sp_bf16((s->vol >> p) & 1 ? __ldcv(src) : __ldcg(src));
		}
		out[off] = (uint16_t)(sp_pack(acc, 0) & 0xffff);
	}
}

/*
 * Thread 0, at a call's start: call e (this shape) and call `total` (this op on this comm)
 * start once every node peer finished call e - 1 and my local rank's peer on every other node
 * signalled the end of its previous call: no CTA of this call meets a peer's previous one, in
 * buffers, landing slots or flags, whatever the host did in between.
 */
MK_DEV int sp_entry(const struct mk_sp_common *cm, unsigned int e, unsigned int total)
{
	int rc = 0;

	for (int p = 0; p < cm->nlocal && rc == 0; p++)
		rc = sp_wait0(cm, cm->ws.peer_calls[p], e - 1);
	for (int nn = 0; nn < cm->nnodes && rc == 0; nn++) {
		if (nn != cm->node)
			rc = mk_dev_signal_wait(&cm->dc, cm->ws.sig_done + (uint32_t)nn, total - 1);
	}
	return rc;
}

/*
 * Every CTA at a call's start: thread 0 reads the call numbers, passes the entry, reads the
 * split the call runs with into split_s and whether it measures for the adaptive controller
 * into measure_s (both shared memory); the result is shared. The call's duration starts when
 * the first CTA passed.
 */
MK_DEV int sp_begin(const struct mk_sp_common *cm, unsigned int *e_s, unsigned int *total_s,
		    int *split_s, int *measure_s)
{
	int rc = 0;

	sp_trace(cm, 0);
	if (threadIdx.x == 0) {
		*e_s = *(volatile unsigned int *)cm->ws.calls + 1;
		*total_s = *(volatile unsigned int *)cm->ws.total + 1;
		rc = sp_entry(cm, *e_s, *total_s);
		if (rc)
			mk_dev_record_error(cm->ws.error, rc);
		*measure_s = mk_gar_split_take(cm->adaptive, cm->local_rank, cm->ws.split,
					       &cm->split, cm->ws.ctl, split_s);
		if (*measure_s)
			atomicMin(cm->ws.t_start, mk_globaltimer_ns());
	}
	rc = sp_share(rc);
	sp_trace(cm, 1);
	return rc;
}

/*
 * The last CTA out (all its threads, after the op zeroed what it zeroes): marks this call's
 * arrivals consumed, runs the adaptive controller on the call's duration and each role's busy
 * time, resets the tickets, records the call (the next call, or a graph replay, waits for e + 1)
 * and tells the other nodes' peers that this call is over.
 */
MK_DEV void sp_last_out(const struct mk_sp_common *cm, unsigned int e, unsigned int total,
			const int *split_s, int measured)
{
	const struct mk_sp_ws *ws = &cm->ws;
	const int nch = cm->geom.nch;

	if (cm->nnodes > 1) {
		for (int i = threadIdx.x; i < cm->nnodes * nch; i += blockDim.x) {
			if (i / nch != cm->node)
				ws->seen[ws->sig_land - ws->sig_base + (uint32_t)i] += 1;
		}
	}
	__syncthreads();
	if (threadIdx.x != 0)
		return;
	if (measured)
		mk_gar_adapt_last(ws->busy, &cm->split, ws->ctl, *ws->t_start, split_s, ws->split);
	for (int t = 0; t < MK_SP_TICKETS; t++)
		ws->tickets[t] = 0;
	*ws->t_start = ~0ull;
	*ws->exits = 0;
	*ws->total = total;
	__threadfence();
	mk_peer_st_release_u32(ws->calls, e); /* node peers wait for this word (entry) */
	if (cm->nnodes > 1 && mk_ld_relaxed_sys_s32(ws->error) == 0) {
		for (int nn = 0; nn < cm->nnodes; nn++) {
			uint32_t ticket;

			if (nn != cm->node &&
			    mk_dev_signal(&cm->dc, ws->remote[nn], ws->sig_done + (uint32_t)cm->node,
					  &ticket) != 0)
				break;
		}
	}
}

/*
 * Every CTA at the end of a call: adds its busy time per role (a measured call), counts itself
 * out; returns 1 in the CTA that left last (all of its threads), which then closes the call.
 */
MK_DEV int sp_end(const struct mk_sp_common *cm, const unsigned long long *busy, int measured)
{
	__shared__ int last_s;

	sp_trace(cm, MK_SP_TRACE_WORDS - 1);
	__syncthreads();
	if (threadIdx.x == 0) {
		if (measured)
			mk_gar_busy_add(cm->ws.busy, busy);
		__threadfence();
		last_s = atomicAdd(cm->ws.exits, 1u) == gridDim.x - 1;
		if (last_s)
			__threadfence(); /* the other CTAs' counts and stores, before mine */
	}
	__syncthreads();
	return last_s;
}

/*
 * After the engine: it left its warpgroups at 56 / 224 registers; back to an even split.
 * setmaxnreg is .sync.aligned: every warp arrives converged (the producer's thread 0 leaves
 * the engine after its warp-mates).
 */
MK_DEV void sp_after_engine(void)
{
	__syncthreads();
	if (threadIdx.x < 128)
		mk_setmaxnreg_inc(168);
	else
		mk_setmaxnreg_dec(168);
}

/* Raise both B-layout instances' dynamic shared-memory limit (which also loads them). */
static inline int sp_prepare(const void *kernel_nk, const void *kernel_kn)
{
	if (cudaFuncSetAttribute(kernel_nk, cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_GEMM_SMEM_BYTES) != cudaSuccess ||
	    cudaFuncSetAttribute(kernel_kn, cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_GEMM_SMEM_BYTES) != cudaSuccess)
		return -EIO;
	return 0;
}

/*
 * Check the engine's arguments for A `a` and B `b`, build its tensor maps, and launch `kernel`
 * (maps, g, launch) cooperatively over `grid` CTAs of MK_GEMM_THREADS. 0, -EINVAL, -ENOSYS or
 * -EIO.
 */
static inline int sp_launch(const void *kernel, const void *a, const void *b,
			    struct mk_gemm_args *g, const void *launch, int grid,
			    cudaStream_t stream)
{
	struct mk_gemm_tmaps maps;
	void *params[3];
	int rc;

	rc = mk_gemm_check(a, b, g, NULL);
	if (rc == 0)
		rc = mk_gemm_make_tensor_maps(a, b, g, &maps);
	if (rc)
		return rc;
	params[0] = &maps;
	params[1] = g;
	params[2] = (void *)launch;
	if (cudaLaunchCooperativeKernel(kernel, grid, MK_GEMM_THREADS, params, MK_GEMM_SMEM_BYTES,
					stream) != cudaSuccess)
		return -EIO;
	return 0;
}

#endif /* MK_FUSED_OPS_SEQPAR_DEV_CUH */
