// SPDX-License-Identifier: Apache-2.0
/*
 * mkGemmAllReduce's fused persistent kernel (roles, flags and signals: gemm_allreduce.h). Every
 * CTA has MK_GEMM_THREADS threads and the engine's shared memory, so a CTA of any role occupies
 * one SM; the launch is cooperative, so every CTA is resident and waiting roles cannot starve
 * the roles they wait for. Every wait is bounded by the comm's timeout; the first error goes to
 * the comm's error word and the waiting roles of every rank then give up in turn.
 */
#include <cuda_bf16.h>
#include <errno.h>

#include "fused/gemm/gemm_engine.cuh"
#include "fused/ops/adapt_dev.cuh"
#include "fused/ops/gemm_allreduce.h"
#include "fused/runtime/device.cuh"

/* Rows, columns and origin of tile t (the engine's 128 x 256 tiles, clipped at the edges). */
struct gar_tile {
	int r0, c0, rows, cols;
};

MK_DEV struct gar_tile gar_tile_of(int t, int tiles_n, int m, int n)
{
	struct gar_tile g;

	g.r0 = (t / tiles_n) * MK_GEMM_BM;
	g.c0 = (t % tiles_n) * MK_GEMM_BN;
	g.rows = min(MK_GEMM_BM, m - g.r0);
	g.cols = min(MK_GEMM_BN, n - g.c0);
	return g;
}

/* Tile row of the i-th row of my slice. */
MK_DEV int gar_row_tm(const struct mk_gar_launch *l, int i)
{
	return l->local_rank + i * l->nlocal;
}

MK_DEV int gar_fail(const struct mk_gar_launch *l, int rc)
{
	if (threadIdx.x == 0)
		mk_dev_record_error(l->ws.error, rc);
	return rc;
}

/* Thread 0 waits until *flag >= want; the result is shared with the CTA. */
MK_DEV int gar_wait(const struct mk_gar_launch *l, const unsigned int *flag, unsigned int want)
{
	__shared__ int rc_s;

	__syncthreads(); /* every thread has read the previous wait's result */
	if (threadIdx.x == 0)
		rc_s = mk_dev_wait_u32_ge(flag, want, l->ws.error, l->ws.timeout_ns);
	__syncthreads();
	return rc_s;
}

/* Raise *flag after every thread's stores of the tile (thread 0, system scope: peers read). */
MK_DEV void gar_raise(unsigned int *flag)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		mk_fence_acq_rel_sys();
		mk_red_release_sys_add_u32(flag, 1);
	}
}

MK_DEV float gar_bf16(uint16_t v)
{
	return __uint_as_float((uint32_t)v << 16);
}

MK_DEV uint32_t gar_pack(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

/* CTA-wide ticket from a counter the last CTA of the call resets. */
MK_DEV int gar_ticket(unsigned int *counter)
{
	__shared__ int t_s;

	__syncthreads(); /* every thread has read the previous ticket */
	if (threadIdx.x == 0)
		t_s = (int)atomicAdd(counter, 1u);
	__syncthreads();
	return t_s;
}

MK_DEV void gar_trace(const struct mk_gar_launch *l, int word)
{
	if (l->trace != NULL && threadIdx.x == 0)
		l->trace[blockIdx.x * MK_GAR_TRACE_WORDS + word] = mk_globaltimer_ns();
}

/*
 * What a sum adds. NODE: the node peers' partials W[p] (p < nlocal). NODES: my node sum (W[me],
 * p = 0), then the rows other nodes put into my landing area (p = 1 .. nnodes - 1, one slot
 * per node): those are row `row` of my slice only, so an element at offset `off` of the matrix
 * is at `off - bias` there, and they may sit in the host mirror (read past the L1 and L2).
 */
enum gar_srcs { GAR_SRC_NODE, GAR_SRC_NODES };

MK_DEV const uint16_t *gar_src(const struct mk_gar_launch *l, int kind, int p, int row, int tm,
			       bool *vol, long long *bias)
{
	const char *base;

	*vol = false;
	*bias = 0;
	if (kind == GAR_SRC_NODE)
		return l->ws.w[p];
	if (p == 0)
		return l->ws.w[l->local_rank];
	base = (l->dc.stage != NULL ? l->dc.stage : l->dc.heap) + l->ws.land_off +
	       ((uint64_t)(p - 1) * l->rows + row) * MK_GEMM_BM * l->n * 2;
	*vol = true;
	*bias = (long long)tm * MK_GEMM_BM * l->n;
	return (const uint16_t *)base;
}

MK_DEV uint4 gar_ld16(const uint16_t *p, bool vol)
{
	return vol ? __ldcv((const uint4 *)p) : __ldcg((const uint4 *)p);
}

#define GAR_UNROLL 4 /* 16-byte vectors in flight per thread and source */

/*
 * Sum of the sources of one tile into out0 (and out1 when not NULL), fp32 in registers, one
 * rounding. Sources are read through L2 at least (__ldcg): a line another process rewrote
 * since an earlier call must not come from this SM's L1.
 */
MK_DEV void gar_sum_tile(const struct mk_gar_launch *l, int kind, int row, int tm,
			 struct gar_tile g, uint16_t *out0, uint16_t *out1)
{
	const int ns = kind == GAR_SRC_NODE ? l->nlocal : l->nnodes;

	if (l->n % 8 == 0 && (uintptr_t)out0 % 16 == 0 && (uintptr_t)out1 % 16 == 0) {
		const int vec = g.cols / 8, total = g.rows * vec;

		for (int i0 = threadIdx.x; i0 < total; i0 += GAR_UNROLL * blockDim.x) {
			float acc[GAR_UNROLL][8];
			size_t off[GAR_UNROLL];

			for (int u = 0; u < GAR_UNROLL; u++) {
				int i = i0 + u * blockDim.x;

				off[u] = i < total ? (size_t)(g.r0 + i / vec) * l->n + g.c0 +
							     (i % vec) * 8
						   : 0;
				for (int j = 0; j < 8; j++)
					acc[u][j] = 0;
			}
			for (int p = 0; p < ns; p++) {
				bool vol;
				long long bias;
				const uint16_t *s = gar_src(l, kind, p, row, tm, &vol, &bias);
				uint4 x[GAR_UNROLL];

				for (int u = 0; u < GAR_UNROLL; u++) {
					if (i0 + u * (int)blockDim.x < total)
						x[u] = gar_ld16(s + off[u] - bias, vol);
				}
				for (int u = 0; u < GAR_UNROLL; u++) {
					const uint32_t w[4] = { x[u].x, x[u].y, x[u].z, x[u].w };

					if (i0 + u * (int)blockDim.x >= total)
						continue;
					for (int j = 0; j < 4; j++) {
						acc[u][2 * j] += gar_bf16((uint16_t)(w[j] & 0xffff));
						acc[u][2 * j + 1] += gar_bf16((uint16_t)(w[j] >> 16));
					}
				}
			}
			for (int u = 0; u < GAR_UNROLL; u++) {
				uint4 o;

				if (i0 + u * (int)blockDim.x >= total)
					continue;
				o.x = gar_pack(acc[u][0], acc[u][1]);
				o.y = gar_pack(acc[u][2], acc[u][3]);
				o.z = gar_pack(acc[u][4], acc[u][5]);
				o.w = gar_pack(acc[u][6], acc[u][7]);
				*(uint4 *)(out0 + off[u]) = o;
				if (out1 != NULL)
					*(uint4 *)(out1 + off[u]) = o;
			}
		}
		return;
	}
	for (int i = threadIdx.x; i < g.rows * g.cols; i += blockDim.x) {
		size_t off = (size_t)(g.r0 + i / g.cols) * l->n + g.c0 + i % g.cols;
		float acc = 0;
		uint16_t o;

		for (int p = 0; p < ns; p++) {
			bool vol;
			long long bias;
			const uint16_t *s = gar_src(l, kind, p, row, tm, &vol, &bias);

			s += off - bias;
			acc += gar_bf16(vol ? __ldcv(s) : __ldcg(s));
		}
		o = (uint16_t)(gar_pack(acc, 0) & 0xffff);
		out0[off] = o;
		if (out1 != NULL)
			out1[off] = o;
	}
}

/* Copy a tile of the owner's result into C. */
MK_DEV void gar_copy_tile(const struct mk_gar_launch *l, const uint16_t *src, struct gar_tile g)
{
	uint16_t *c = (uint16_t *)l->c;

	if (l->n % 8 == 0 && ((uintptr_t)c % 16) == 0) {
		const int vec = g.cols / 8, total = g.rows * vec;

		for (int i0 = threadIdx.x; i0 < total; i0 += GAR_UNROLL * blockDim.x) {
			uint4 x[GAR_UNROLL];
			size_t off[GAR_UNROLL];

			for (int u = 0; u < GAR_UNROLL; u++) {
				int i = i0 + u * blockDim.x;

				off[u] = (size_t)(g.r0 + i / vec) * l->n + g.c0 + (i % vec) * 8;
				if (i < total)
					x[u] = __ldcg((const uint4 *)(src + off[u]));
			}
			for (int u = 0; u < GAR_UNROLL; u++) {
				if (i0 + u * (int)blockDim.x < total)
					*(uint4 *)(c + off[u]) = x[u];
			}
		}
		return;
	}
	for (int j = threadIdx.x; j < g.rows * g.cols; j += blockDim.x) {
		size_t off = (size_t)(g.r0 + j / g.cols) * l->n + g.c0 + j % g.cols;

		c[off] = __ldcg((const unsigned short *)(src + off));
	}
}

/*
 * My node's sum of tile t (row `row` of my slice) is in W[me]: with node peers once the intra
 * role counted the whole row summed, alone once the engine stored it (all of the row's tiles
 * with `whole_row`, for the send).
 */
MK_DEV int gar_node_sum_ready(const struct mk_gar_launch *l, int row, int t, int tiles_n,
			      unsigned int e, bool whole_row)
{
	const unsigned int *ready = l->ws.ready[l->local_rank];
	int rc = 0;

	if (l->nlocal > 1)
		return gar_wait(l, &l->ws.row_done[row], e * (unsigned int)tiles_n);
	if (!whole_row)
		return gar_wait(l, &ready[t], e);
	for (int tn = 0; tn < tiles_n && rc == 0; tn++)
		rc = gar_wait(l, &ready[(t / tiles_n) * tiles_n + tn], e);
	return rc;
}

MK_DEV unsigned long long gar_now(void)
{
	return threadIdx.x == 0 ? mk_globaltimer_ns() : 0;
}

/*
 * intra: tickets over the tiles of my slice, in the order compute produces them. One node: the
 * sum goes into my R and C, then the final flag. Several: back into W[me] (only I read my
 * slice's rows of W), and the row's counter tells send and reduce.
 */
MK_DEV int gar_intra(const struct mk_gar_launch *l, int tiles_n, unsigned int e,
		     unsigned long long *busy)
{
	uint16_t *w = l->ws.w[l->local_rank];

	for (;;) {
		const int i = gar_ticket(&l->ws.tickets[MK_GAR_T_INTRA]);
		const int row = i / tiles_n, tm = gar_row_tm(l, row), t = tm * tiles_n + i % tiles_n;
		unsigned long long t0;
		int rc = 0;

		if (i >= l->rows * tiles_n)
			return 0;
		for (int p = 0; p < l->nlocal && rc == 0; p++)
			rc = gar_wait(l, &l->ws.ready[p][t], e);
		if (rc)
			return gar_fail(l, rc);
		t0 = gar_now();
		if (l->nnodes == 1) {
			gar_sum_tile(l, GAR_SRC_NODE, row, tm, gar_tile_of(t, tiles_n, l->m, l->n),
				     l->ws.r[l->local_rank], (uint16_t *)l->c);
			gar_raise(&l->ws.final[l->local_rank][t]);
		} else {
			gar_sum_tile(l, GAR_SRC_NODE, row, tm, gar_tile_of(t, tiles_n, l->m, l->n),
				     w, NULL);
			__syncthreads();
			if (threadIdx.x == 0) {
				mk_fence_acq_rel_gpu(); /* the tile's stores, then the count */
				atomicAdd(&l->ws.row_done[row], 1u);
			}
		}
		*busy += gar_now() - t0;
	}
}

/*
 * send: tickets over the rows of my slice. Once the row is my node's sum, every thread copies
 * its share into the host mirror (if the transport needs one), then thread 0 puts it with a
 * signal to my local rank's peer on every other node: into that peer's landing slot for my node.
 */
MK_DEV int gar_send(const struct mk_gar_launch *l, int tiles_n, unsigned int e,
		    unsigned long long *busy)
{
	__shared__ int rc_s;
	const uint64_t row_bytes = (uint64_t)MK_GEMM_BM * l->n * 2;

	for (;;) {
		const int i = gar_ticket(&l->ws.tickets[MK_GAR_T_SEND]);
		const int tm = gar_row_tm(l, i);
		const uint64_t bytes = (uint64_t)min(MK_GEMM_BM, l->m - tm * MK_GEMM_BM) * l->n * 2;
		const uint64_t src = l->ws.w_off + (uint64_t)tm * row_bytes;
		unsigned long long t0;
		int rc;

		if (i >= l->rows)
			return 0;
		rc = gar_node_sum_ready(l, i, tm * tiles_n, tiles_n, e, true);
		if (rc)
			return gar_fail(l, rc);
		t0 = gar_now();
		mk_dev_mirror_out(&l->dc, src, bytes, threadIdx.x, blockDim.x);
		__syncthreads();
		if (threadIdx.x == 0) {
			uint32_t ticket;

			mk_fence_acq_rel_sys();
			rc = 0;
			for (int nn = 0; nn < l->nnodes && rc == 0; nn++) {
				const int slot = l->node < nn ? l->node : l->node - 1;

				if (nn == l->node)
					continue;
				rc = mk_dev_put_cmd(&l->dc, MK_CMD_PUT_SIGNAL, l->ws.remote[nn],
						    l->ws.land_off +
							    ((uint64_t)slot * l->rows + i) * row_bytes,
						    src, bytes,
						    l->ws.sig_rows + (uint32_t)(l->node * l->rows + i),
						    &ticket);
			}
			rc_s = rc;
		}
		__syncthreads();
		if (rc_s)
			return gar_fail(l, rc_s);
		*busy += gar_now() - t0;
	}
}

/*
 * reduce: tickets over the tiles of my slice. Waits for my node's sum and for the row from every
 * other node (signal words count arrivals over all calls; `seen` what earlier calls consumed),
 * adds them, stores into C (and into my R for my node peers, then the final flag).
 */
MK_DEV int gar_reduce(const struct mk_gar_launch *l, int tiles_n, unsigned int e,
		      unsigned long long *busy)
{
	__shared__ int rc_s;

	for (;;) {
		const int i = gar_ticket(&l->ws.tickets[MK_GAR_T_REDUCE]);
		const int row = i / tiles_n, tm = gar_row_tm(l, row), t = tm * tiles_n + i % tiles_n;
		const bool peers = l->nlocal > 1;
		unsigned long long t0;
		int rc;

		if (i >= l->rows * tiles_n)
			return 0;
		rc = gar_node_sum_ready(l, row, t, tiles_n, e, false);
		if (rc)
			return gar_fail(l, rc);
		if (threadIdx.x == 0) {
			rc = 0;
			for (int nn = 0; nn < l->nnodes && rc == 0; nn++) {
				const uint32_t sig = l->ws.sig_rows + (uint32_t)(nn * l->rows + row);

				if (nn != l->node)
					rc = mk_dev_signal_wait(&l->dc, sig, l->ws.seen[sig] + 1);
			}
			rc_s = rc;
		}
		__syncthreads();
		if (rc_s)
			return gar_fail(l, rc_s);
		t0 = gar_now();
		gar_sum_tile(l, GAR_SRC_NODES, row, tm, gar_tile_of(t, tiles_n, l->m, l->n),
			     peers ? l->ws.r[l->local_rank] : (uint16_t *)l->c,
			     peers ? (uint16_t *)l->c : NULL);
		if (peers)
			gar_raise(&l->ws.final[l->local_rank][t]);
		else
			__syncthreads();
		*busy += gar_now() - t0;
	}
}

/* publish: tickets over every tile; node peers' results are copied into C once final (my own
 * tiles went into C when they were summed). */
MK_DEV int gar_publish(const struct mk_gar_launch *l, int tiles_m, int tiles_n, unsigned int e,
		       unsigned long long *busy)
{
	for (;;) {
		const int t = gar_ticket(&l->ws.tickets[MK_GAR_T_PUBLISH]);
		const int owner = (t / tiles_n) % l->nlocal;
		unsigned long long t0;
		int rc;

		if (t >= tiles_m * tiles_n)
			return 0;
		if (owner == l->local_rank)
			continue;
		rc = gar_wait(l, &l->ws.final[owner][t], e);
		if (rc)
			return gar_fail(l, rc);
		t0 = gar_now();
		gar_copy_tile(l, l->ws.r[owner], gar_tile_of(t, tiles_n, l->m, l->n));
		*busy += gar_now() - t0;
	}
}

/*
 * Call e (this shape) and call `total` (this comm) start once every node peer finished call
 * e - 1 (its last CTA stored e - 1 in its call counter) and my local rank's peer on every other
 * node finished its previous call (it signalled): no CTA of this call overlaps a peer's previous
 * one, so buffers, landing slots and flags of consecutive calls never meet, whatever the host
 * did in between. Thread 0; 0 or the error.
 */
MK_DEV int gar_entry(const struct mk_gar_launch *l, unsigned int e, unsigned int total)
{
	int rc = 0;

	for (int p = 0; p < l->nlocal && rc == 0; p++)
		rc = mk_dev_wait_u32_ge(l->ws.peer_calls[p], e - 1, l->ws.error, l->ws.timeout_ns);
	for (int nn = 0; nn < l->nnodes && rc == 0; nn++) {
		if (nn != l->node)
			rc = mk_dev_signal_wait(&l->dc, l->ws.sig_done + (uint32_t)nn, total - 1);
	}
	return rc;
}

/*
 * The last CTA out (all its threads): marks this call's arrivals consumed, runs the adaptive
 * controller (on the call's duration since the first CTA passed its entry wait, and each role's
 * busy time), resets the tickets, records the call (the next call, or graph replay, waits for
 * e + 1) and tells the other nodes' peers that this call is over.
 */
MK_DEV void gar_last_out(const struct mk_gar_launch *l, unsigned int e, unsigned int total,
			 const int *split, int measured)
{
	if (l->nnodes > 1) {
		for (int i = threadIdx.x; i < l->nnodes * l->rows; i += blockDim.x) {
			if (i / l->rows != l->node)
				l->ws.seen[l->ws.sig_rows + i] += 1;
		}
	}
	__syncthreads();
	if (threadIdx.x != 0)
		return;
	if (measured)
		mk_gar_adapt_last(l->ws.busy, &l->split, l->ws.ctl, *l->ws.t_start, split, l->ws.split);
	for (int t = 0; t < MK_GAR_TICKETS; t++)
		l->ws.tickets[t] = 0;
	*l->ws.t_start = ~0ull;
	*l->ws.exits = 0;
	*l->ws.total = total;
	__threadfence();
	mk_peer_st_release_u32(l->ws.calls, e); /* node peers wait for this word (entry) */
	if (l->nnodes > 1 && mk_ld_relaxed_sys_s32(l->ws.error) == 0) {
		for (int nn = 0; nn < l->nnodes; nn++) {
			uint32_t ticket;

			if (nn != l->node &&
			    mk_dev_signal(&l->dc, l->ws.remote[nn], l->ws.sig_done + (uint32_t)l->node,
					  &ticket) != 0)
				break;
		}
	}
}

template <int B_NK>
__global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	mk_gar_kernel(const __grid_constant__ struct mk_gemm_tmaps maps,
		      const __grid_constant__ struct mk_gemm_args g,
		      const __grid_constant__ struct mk_gar_launch l)
{
	extern __shared__ __align__(1024) unsigned char gar_dyn[];
	__shared__ unsigned int e_s, total_s;
	__shared__ int rc_s, last_s, split_s[MK_GAR_ROLES], measure_s;
	const int b = blockIdx.x;
	unsigned long long busy[MK_GAR_ROLES] = { 0, 0, 0, 0 };
	int first, rc;

	gar_trace(&l, 0);
	if (threadIdx.x == 0) {
		e_s = *(volatile unsigned int *)l.ws.calls + 1;
		total_s = *(volatile unsigned int *)l.ws.total + 1;
		rc_s = gar_entry(&l, e_s, total_s);
		if (rc_s)
			mk_dev_record_error(l.ws.error, rc_s);
		measure_s = mk_gar_split_take(l.adaptive, l.local_rank, l.ws.split, &l.split,
					      l.ws.ctl, split_s);
	}
	__syncthreads();
	gar_trace(&l, 1);
	if (measure_s && threadIdx.x == 0)
		atomicMin(l.ws.t_start, mk_globaltimer_ns()); /* the call's duration starts here */
	rc = rc_s;
	/* The role this CTA starts in: CTAs are numbered compute first, then intra, send, reduce. */
	first = MK_GAR_REDUCE;
	for (int r = 0, acc = 0; r < MK_GAR_REDUCE; r++) {
		acc += split_s[r];
		if (b < acc) {
			first = r;
			break;
		}
	}
	if (rc == 0 && first == MK_GAR_COMPUTE) {
		const unsigned long long t0 = gar_now();

		mk_gemm_role(&g, &maps, b, split_s[MK_GAR_COMPUTE], gar_dyn, B_NK);
		/*
		 * The engine left its warpgroups at 56 / 224 registers: back to an even split.
		 * setmaxnreg is .sync.aligned: every warp must arrive converged, and warp 0's
		 * thread 0 (the producer) leaves the engine after its warp-mates.
		 */
		__syncthreads();
		if (threadIdx.x < 128)
			mk_setmaxnreg_inc(168);
		else
			mk_setmaxnreg_dec(168);
		busy[MK_GAR_COMPUTE] += gar_now() - t0;
	}
	gar_trace(&l, 2);
	if (rc == 0 && first <= MK_GAR_INTRA && l.nlocal > 1)
		rc = gar_intra(&l, g.tiles_n, e_s, &busy[MK_GAR_INTRA]);
	gar_trace(&l, 3);
	if (rc == 0 && first <= MK_GAR_SEND && l.nnodes > 1)
		rc = gar_send(&l, g.tiles_n, e_s, &busy[MK_GAR_SEND]);
	gar_trace(&l, 4);
	if (rc == 0 && l.nnodes > 1)
		rc = gar_reduce(&l, g.tiles_n, e_s, &busy[MK_GAR_REDUCE]);
	gar_trace(&l, 5);
	if (rc == 0 && l.nlocal > 1)
		rc = gar_publish(&l, g.tiles_m, g.tiles_n, e_s, &busy[MK_GAR_REDUCE]);
	gar_trace(&l, 6);
	/* The last CTA out closes the call. */
	__syncthreads();
	if (threadIdx.x == 0) {
		if (measure_s)
			mk_gar_busy_add(l.ws.busy, busy);
		__threadfence();
		last_s = atomicAdd(l.ws.exits, 1u) == gridDim.x - 1;
		if (last_s)
			__threadfence(); /* the other CTAs' counts and stores, before mine */
	}
	__syncthreads();
	if (last_s)
		gar_last_out(&l, e_s, total_s, split_s, measure_s);
	gar_trace(&l, 7);
}

extern "C" int mk_gar_prepare(void)
{
	if (cudaFuncSetAttribute((const void *)mk_gar_kernel<1>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_GEMM_SMEM_BYTES) != cudaSuccess ||
	    cudaFuncSetAttribute((const void *)mk_gar_kernel<0>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 MK_GEMM_SMEM_BYTES) != cudaSuccess)
		return -EIO;
	return 0;
}

extern "C" int mk_gar_launch(const struct mk_gar_launch *l, cudaStream_t stream)
{
	const int alone = l->nlocal == 1 && l->nnodes == 1;
	struct mk_gemm_args g;
	struct mk_gemm_tmaps maps;
	void *params[3];
	int rc, grid = 0;

	for (int r = 0; r < MK_GAR_ROLES; r++)
		grid += l->split.sms[r]; /* the split fills my share of the SMs */
	if (l->split.sms[MK_GAR_COMPUTE] < 1)
		return -EINVAL;
	/* One rank in all: the sum is the product itself, stored straight into C. */
	mk_gemm_args_init(&g, l->m, l->n, l->k, l->b_layout,
			  alone ? l->c : (void *)l->ws.w[l->local_rank]);
	if (!alone) {
		g.sched.order = l->order; /* alone: the engine's own raster, nothing waits */
		g.epi.ready = l->ws.ready[l->local_rank];
		g.epi.ready_scope = MK_GEMM_FLAG_SYS;
	}
	rc = mk_gemm_check(l->a, l->b, &g, NULL);
	if (rc == 0)
		rc = mk_gemm_make_tensor_maps(l->a, l->b, &g, &maps);
	if (rc)
		return rc;
	params[0] = &maps;
	params[1] = &g;
	params[2] = (void *)l;
	if (cudaLaunchCooperativeKernel(l->b_layout == MK_GEMM_B_NK ? (const void *)mk_gar_kernel<1>
								    : (const void *)mk_gar_kernel<0>,
					grid, MK_GEMM_THREADS, params, MK_GEMM_SMEM_BYTES,
					stream) != cudaSuccess)
		return -EIO;
	return 0;
}
