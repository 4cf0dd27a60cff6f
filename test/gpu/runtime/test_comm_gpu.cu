// SPDX-License-Identifier: Apache-2.0
/*
 * mkComm end to end, one process per rank (started by scripts/gpu/runtime-comm.sh with one
 * NCCL_HOSTID per process, and one MKERNEL_HOSTID per emulated node): mkCommInit over an
 * ncclComm_t, node discovery checked against the layout the launcher set up, node peers reached
 * through mapped heaps and other nodes through the transport, mkMemAlloc, put / put_signal
 * patterns from a kernel (ring, one-to-many, data visible before its signal), mkAllToAll with
 * exact results over several calls, and, with --bench, mkAllToAll against ncclSend/ncclRecv groups and a put+signal round
 * trip against an NCCL send/recv ping-pong (JSON lines from rank 0). With --kill, the last rank
 * dies after setup and the survivors must see an async error, not a hang. --expect-vmm and
 * --expect-legacy check how node peers mapped each other's heaps (MKERNEL_HEAP_SHARE picks it).
 *
 * usage: test-comm-gpu RANK NRANKS IDFILE NNODES NLOCAL [--bench] [--kill] [--quick]
 *        [--expect-vmm | --expect-legacy]
 * Exit: 0 pass, 1 fail, 77 no CUDA device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "fused/runtime/comm.h"
#include "fused/runtime/device.cuh"
#include "fused/runtime/heap_policy.h"

#include "rank_check.h"

static int g_quick; /* --quick: fewer chunks (sanitizer runs) */

/* ---- put / put_signal patterns from a kernel ---- */

#define SIG_BASE 2048	/* above what mkAllToAll uses */
#define PBLK	 4096

__device__ uint8_t pbyte(int src, int dst, uint32_t k, uint32_t round)
{
	return (uint8_t)(src * 37 + dst * 11 + k * 5 + round * 101 + 1);
}

/*
 * Pattern `round` (each pattern has its own signals and landing region): CTA b < ntargets sends
 * targets[b] one PBLK block at offset dst_base + me * PBLK of the target with signal
 * sig + me; the next nsources CTAs wait for the signal of each source.
 */
__global__ void pattern_kernel(struct mk_dev_comm c, const int *targets, int ntargets,
			       const int *sources, int nsources, uint64_t src_base, uint64_t dst_base,
			       uint32_t round, uint32_t sig, int *err)
{
	int b = blockIdx.x;

	if (b < ntargets) {
		int p = targets[b];
		char *src = c.heap + src_base + (uint64_t)p * PBLK;
		__shared__ int rc_s;
		uint32_t t = 0;

		for (int k = threadIdx.x; k < PBLK; k += blockDim.x)
			src[k] = (char)pbyte(c.rank, p, (uint32_t)k, round);
		__syncthreads();
		if (threadIdx.x == 0) {
			rc_s = mk_dev_put_signal(&c, p, dst_base + (uint64_t)c.rank * PBLK,
						 src_base + (uint64_t)p * PBLK, PBLK,
						 sig + (uint32_t)c.rank, &t);
			if (rc_s == 0)
				rc_s = mk_dev_quiet(&c, t);
			if (rc_s)
				*err = rc_s;
		}
		return;
	}
	b -= ntargets;
	if (b < nsources) {
		__shared__ int rc_w;

		if (threadIdx.x == 0) {
			rc_w = mk_dev_signal_wait(&c, sig + (uint32_t)sources[b], 1);
			if (rc_w)
				*err = rc_w;
		}
		__syncthreads();
		if (rc_w == 0)
			mk_dev_land_block(&c, sources[b], dst_base + (uint64_t)sources[b] * PBLK,
					  PBLK);
	}
}

static void run_pattern(mkComm_t comm, const char *name, int ntargets, const int *targets,
			int nsources, const int *sources, uint32_t round, char *buf)
{
	struct mk_dev_comm d;
	int *t_d, *s_d, *err_d, err = 0, bad = 0;
	uint64_t src_base = (uint64_t)(buf - comm->heap);
	uint64_t dst_base = src_base + (uint64_t)(1 + round) * comm->nranks * PBLK;
	uint32_t sig = SIG_BASE + round * 64;
	uint8_t *landed = (uint8_t *)malloc((size_t)comm->nranks * PBLK);

	mk_comm_dev(comm, &d);
	CK(cudaMalloc((void **)&t_d, 64 * sizeof(int)));
	CK(cudaMalloc((void **)&s_d, 64 * sizeof(int)));
	CK(cudaMalloc((void **)&err_d, sizeof(int)));
	CK(cudaMemcpy(t_d, targets, ntargets * sizeof(int), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(s_d, sources, nsources * sizeof(int), cudaMemcpyHostToDevice));
	CK(cudaMemset(err_d, 0, sizeof(int)));
	pattern_kernel<<<ntargets + nsources, 128>>>(d, t_d, ntargets, s_d, nsources, src_base,
						     dst_base, round, sig, err_d);
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(&err, err_d, sizeof(int), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(landed, buf + (size_t)(1 + round) * comm->nranks * PBLK,
		      (size_t)comm->nranks * PBLK, cudaMemcpyDeviceToHost));
	for (int i = 0; i < nsources; i++) {
		const uint8_t *p = landed + (size_t)sources[i] * PBLK;

		for (int k = 0; k < PBLK; k++) {
			uint8_t want = (uint8_t)(sources[i] * 37 + comm->rank * 11 + k * 5 +
						 round * 101 + 1);

			bad += p[k] != want;
		}
	}
	{
		char what[128];

		snprintf(what, sizeof(what), "%s round %u: err %d, %d wrong bytes", name, round,
			 err, bad);
		expect(err == 0 && bad == 0, what);
	}
	cudaFree(t_d);
	cudaFree(s_d);
	cudaFree(err_d);
	free(landed);
}

/* Data visible before its signal: 2000 chunks to the next rank, the receiver checks each. */
__global__ void order_send(struct mk_dev_comm c, int peer, uint64_t base, int n, int *err)
{
	__shared__ int rc_s;
	uint32_t t = 0;

	for (int k = 0; k < n; k++) {
		for (int b = threadIdx.x; b < 256; b += blockDim.x)
			c.heap[base + (uint64_t)k * 256 + b] = (char)(k * 7 + b + c.rank);
		__syncthreads();
		if (threadIdx.x == 0)
			rc_s = mk_dev_put_signal(&c, peer, base + (uint64_t)(n + k) * 256,
						 base + (uint64_t)k * 256, 256, SIG_BASE + 1000, &t);
		__syncthreads();
		if (rc_s) {
			if (threadIdx.x == 0)
				*err = rc_s;
			return;
		}
	}
	if (threadIdx.x == 0) {
		int rc = mk_dev_quiet(&c, t); /* not rc_s: other threads may still read it */

		if (rc)
			*err = rc;
	}
}

__global__ void order_recv(struct mk_dev_comm c, int src, uint64_t base, int n, uint64_t sig0,
			   int *bad, int *err)
{
	__shared__ int rc_s;

	for (int k = 0; k < n; k++) {
		if (threadIdx.x == 0)
			rc_s = mk_dev_signal_wait(&c, SIG_BASE + 1000, sig0 + k + 1);
		__syncthreads();
		if (rc_s) {
			if (threadIdx.x == 0)
				*err = rc_s;
			return;
		}
		mk_dev_land_block(&c, src, base + (uint64_t)(n + k) * 256, 256);
		for (int b = threadIdx.x; b < 256; b += blockDim.x) {
			if (c.heap[base + (uint64_t)(n + k) * 256 + b] != (char)(k * 7 + b + src))
				atomicAdd(bad, 1);
		}
		__syncthreads();
	}
}

static void run_order(mkComm_t comm, char *buf)
{
	const int n = g_quick ? 200 : 2000, me = comm->rank, np = comm->nranks;
	struct mk_dev_comm d;
	int *bad_d, *err_d, bad = 0, err[2] = { 0, 0 };
	uint64_t base = (uint64_t)(buf - comm->heap);
	uint64_t sig0 = 0;	/* first and only use of this signal word */
	cudaStream_t s1, s2;

	mk_comm_dev(comm, &d);
	/* Receiver and sender run side by side: load both before either starts (lazy loading). */
	{
		struct cudaFuncAttributes fa;

		CK(cudaFuncGetAttributes(&fa, order_send));
		CK(cudaFuncGetAttributes(&fa, order_recv));
	}
	CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&bad_d, sizeof(int)));
	CK(cudaMalloc((void **)&err_d, 2 * sizeof(int)));
	CK(cudaMemset(bad_d, 0, sizeof(int)));
	CK(cudaMemset(err_d, 0, 2 * sizeof(int)));
	/* Chunks leave from [0, n) and land in [n, 2n) (256 B each) of the same offsets. */
	order_recv<<<1, 128, 0, s2>>>(d, (me + np - 1) % np, base, n, sig0, bad_d, err_d + 1);
	order_send<<<1, 128, 0, s1>>>(d, (me + 1) % np, base, n, err_d);
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(&bad, bad_d, sizeof(int), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(err, err_d, 2 * sizeof(int), cudaMemcpyDeviceToHost));
	printf("rank %d: ordering: sender %d receiver %d, %d wrong bytes, proxy %d, tail %u done %u, "
	       "signal %llu\n", me, err[0], err[1], bad, mk_proxy_error(comm->proxy),
	       comm->ctrl->tail, comm->ctrl->done,
	       (unsigned long long)comm->signals[SIG_BASE + 1000]);
	{
		char what[128];

		snprintf(what, sizeof(what),
			 "ordering: %d put_signals, each chunk complete when its signal is seen", n);
		expect(err[0] == 0 && err[1] == 0 && bad == 0, what);
	}
	cudaFree(bad_d);
	cudaFree(err_d);
	cudaStreamDestroy(s1);
	cudaStreamDestroy(s2);
}

/* ---- mkAllToAll ---- */

static uint32_t a2a_val(int src, int dst, size_t i, int iter)
{
	return (uint32_t)(src * 1000003u + dst * 7919u + i * 31u + iter * 17u);
}

static void run_alltoall(mkComm_t comm, size_t count, int iters)
{
	const int me = comm->rank, np = comm->nranks;
	const size_t bytes = count * np * 4;
	uint32_t *send, *recv, *h = (uint32_t *)malloc(bytes);
	size_t bad = 0;
	ncclResult_t ae;
	char what[128];

	if (h == NULL || mkMemAlloc(comm, bytes, (void **)&send) != ncclSuccess ||
	    mkMemAlloc(comm, bytes, (void **)&recv) != ncclSuccess) {
		expect(0, "mkMemAlloc for mkAllToAll");
		free(h);
		return;
	}
	for (int it = 0; it < iters; it++) {
		for (int p = 0; p < np; p++) {
			for (size_t i = 0; i < count; i++)
				h[(size_t)p * count + i] = a2a_val(me, p, i, it);
		}
		CK(cudaMemcpy(send, h, bytes, cudaMemcpyHostToDevice));
		CK(cudaMemset(recv, 0, bytes));
		NK(mkAllToAll(send, recv, count, ncclUint32, comm, 0));
		CK(cudaStreamSynchronize(0));
		CK(cudaMemcpy(h, recv, bytes, cudaMemcpyDeviceToHost));
		for (int p = 0; p < np; p++) {
			for (size_t i = 0; i < count; i++)
				bad += h[(size_t)p * count + i] != a2a_val(p, me, i, it);
		}
	}
	free(h);
	NK(mkCommGetAsyncError(comm, &ae));
	snprintf(what, sizeof(what), "mkAllToAll %zu x u32 per peer, %d calls: %zu wrong, async %d",
		 count, iters, bad, (int)ae);
	expect(bad == 0 && ae == ncclSuccess, what);
	mkMemFree(comm, recv);
	mkMemFree(comm, send);
}

/* ---- benchmarks (rank 0 prints) ---- */

static float median_ms(float *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_f);
	return v[n / 2];
}

static void bench_alltoall(mkComm_t comm, ncclComm_t nccl, int nnodes, int nlocal)
{
	const int np = comm->nranks, reps = 20, warm = 5;
	cudaEvent_t e0, e1;
	float tm[64], tn[64];
	char *send, *recv, *nsend, *nrecv;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (size_t per = 1024; per <= (64u << 20); per *= 4) {
		if (mkMemAlloc(comm, per * np, (void **)&send) != ncclSuccess ||
		    mkMemAlloc(comm, per * np, (void **)&recv) != ncclSuccess)
			break;
		CK(cudaMalloc((void **)&nsend, per * np));
		CK(cudaMalloc((void **)&nrecv, per * np));
		for (int r = 0; r < warm + reps; r++) {
			float ms;

			/* mkernel and NCCL alternate: same run, same conditions. */
			CK(cudaEventRecord(e0, 0));
			NK(mkAllToAll(send, recv, per, ncclUint8, comm, 0));
			CK(cudaEventRecord(e1, 0));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (r >= warm)
				tm[r - warm] = ms;
			CK(cudaEventRecord(e0, 0));
			NK(ncclGroupStart());
			for (int p = 0; p < np; p++) {
				NK(ncclSend(nsend + (size_t)p * per, per, ncclUint8, p, nccl, 0));
				NK(ncclRecv(nrecv + (size_t)p * per, per, ncclUint8, p, nccl, 0));
			}
			NK(ncclGroupEnd());
			CK(cudaEventRecord(e1, 0));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (r >= warm)
				tn[r - warm] = ms;
		}
		if (comm->rank == 0) {
			float m = median_ms(tm, reps), n = median_ms(tn, reps);

			printf("{\"bench\":\"alltoall\",\"bytes_per_peer\":%zu,\"nranks\":%d,"
			       "\"nnodes\":%d,\"nlocal\":%d,\"mkernel_ms\":%.4f,\"nccl_ms\":%.4f,"
			       "\"ratio_nccl_over_mkernel\":%.3f,\"emulated\":true}\n",
			       per, np, nnodes, nlocal, m, n, n / m);
		}
		cudaFree(nsend);
		cudaFree(nrecv);
		mkMemFree(comm, recv);
		mkMemFree(comm, send);
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
}

/*
 * put+signal ping-pong between ranks 0 and 1 (one CTA each), vs NCCL send/recv ping-pong: each
 * message is landed in the heap before the answer, as NCCL's arrives in GPU memory.
 */
__global__ void pingpong_put(struct mk_dev_comm c, uint64_t off, uint64_t bytes, int iters,
			     uint64_t sig0, int *err)
{
	__shared__ int rc_w;
	int peer = 1 - c.rank;
	uint32_t t = 0;
	int rc = 0;

	for (int i = 0; i < iters && rc == 0; i++) {
		if (c.rank == 0)
			rc = mk_dev_put_signal_block(&c, peer, off, off + bytes, bytes,
						     SIG_BASE + 2000, &t);
		if (rc == 0) {
			if (threadIdx.x == 0)
				rc_w = mk_dev_signal_wait(&c, SIG_BASE + 2000, sig0 + i + 1);
			__syncthreads();
			rc = rc_w;
		}
		if (rc == 0)
			mk_dev_land_block(&c, peer, off, bytes);
		if (rc == 0 && c.rank == 1)
			rc = mk_dev_put_signal_block(&c, peer, off, off + bytes, bytes,
						     SIG_BASE + 2000, &t);
	}
	if (threadIdx.x == 0) {
		if (rc == 0)
			rc = mk_dev_quiet(&c, t);
		if (rc)
			*err = rc;
	}
}

static void bench_pingpong(mkComm_t comm, ncclComm_t nccl)
{
	const int iters = 200;
	struct mk_dev_comm d;
	cudaEvent_t e0, e1;
	char *buf, *nbuf;
	int *err_d, err = 0;

	/* mkMemAlloc is collective: every rank takes part, then only ranks 0 and 1 play. */
	if (mkMemAlloc(comm, 2u << 20, (void **)&buf) != ncclSuccess) {
		expect(0, "mkMemAlloc for the ping-pong");
		return;
	}
	if (comm->rank > 1) {
		mkMemFree(comm, buf);
		return;
	}
	mk_comm_dev(comm, &d);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMalloc((void **)&err_d, sizeof(int)));
	CK(cudaMemset(err_d, 0, sizeof(int)));
	int size_index = 0;

	for (size_t bytes = 8; bytes <= (1u << 20); bytes *= 16, size_index++) {
		float ms_m = 0, ms_n = 0;
		/* Known, not read: the peer may already be sending when this rank gets here. */
		uint64_t sig0 = (uint64_t)size_index * iters;

		CK(cudaMalloc((void **)&nbuf, bytes));
		CK(cudaEventRecord(e0, 0));
		pingpong_put<<<1, 256>>>(d, (uint64_t)(buf - comm->heap), bytes, iters, sig0, err_d);
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms_m, e0, e1));
		CK(cudaEventRecord(e0, 0));
		for (int i = 0; i < iters; i++) {
			if (comm->rank == 0) {
				NK(ncclSend(nbuf, bytes, ncclUint8, 1, nccl, 0));
				NK(ncclRecv(nbuf, bytes, ncclUint8, 1, nccl, 0));
			} else {
				NK(ncclRecv(nbuf, bytes, ncclUint8, 0, nccl, 0));
				NK(ncclSend(nbuf, bytes, ncclUint8, 0, nccl, 0));
			}
		}
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms_n, e0, e1));
		if (comm->rank == 0)
			printf("{\"bench\":\"pingpong\",\"bytes\":%zu,\"iters\":%d,"
			       "\"nranks\":%d,\"path\":\"%s\","
			       "\"mkernel_rtt_us\":%.2f,\"nccl_rtt_us\":%.2f,"
			       "\"ratio_nccl_over_mkernel\":%.3f,\"emulated\":true}\n",
			       bytes, iters, comm->nranks,
			       comm->topo.node_of[0] == comm->topo.node_of[1] ? "node-local"
									  : "transport",
			       ms_m * 1e3 / iters, ms_n * 1e3 / iters, ms_n / ms_m);
		cudaFree(nbuf);
	}
	mkMemFree(comm, buf);
	CK(cudaMemcpy(&err, err_d, sizeof(int), cudaMemcpyDeviceToHost));
	expect(err == 0, "ping-pong kernel finished without error");
	cudaFree(err_d);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
}

/*
 * Misuse of the public API on a live comm: a count whose size in bytes wraps, and mkMemAlloc with
 * bad arguments on one rank only: every rank must return an error (the same one), none may wait
 * for the rank that had nothing to allocate.
 */
static void run_api_misuse(mkComm_t comm, int rank)
{
	void *p = (void *)1, *s = NULL, *r = NULL;
	ncclResult_t ret;
	uint64_t t0;

	NK(mkMemAlloc(comm, 4096, &s));
	NK(mkMemAlloc(comm, 4096, &r));
	expect(mkAllToAll(s, r, SIZE_MAX / 2, ncclUint32, comm, 0) == ncclInvalidArgument,
	       "mkAllToAll: a count whose bytes wrap is refused");
	expect(mkAllToAll(s, r, (SIZE_MAX >> 2) + 1, ncclUint64, comm, 0) == ncclInvalidArgument,
	       "mkAllToAll: count x 8 wraps to a small total, refused");
	t0 = mk_now_ns();
	ret = mkMemAlloc(comm, rank == 0 ? 0 : 4096, &p);
	expect(ret != ncclSuccess, "mkMemAlloc: 0 bytes on rank 0 fails on every rank");
	expect((mk_now_ns() - t0) < 10000000000ull, "mkMemAlloc: bad arguments on one rank, no wait");
	/* nothing was allocated anywhere: the heap still hands out the same offsets everywhere */
	NK(mkMemFree(comm, s));
	NK(mkMemFree(comm, r));
}

/* The heap-sharing mechanism init chose is the one asked for, and every mapping is of its kind. */
static void check_heap_share(mkComm_t comm, int want)
{
	char what[200];
	int vmm_peers = 0;

	snprintf(what, sizeof(what), "node peers share heaps through %s (init chose %s)",
		 mk_heap_share_name(want), mk_heap_share_name(comm->heap_share));
	expect(comm->heap_share == want, what);
	for (int l = 0; l < comm->topo.nlocal; l++)
		vmm_peers += l != comm->topo.local_rank && comm->peer_vmm[l].size != 0 &&
			     comm->peer_vmm[l].base == comm->peer_base[l];
	if (want == MK_HEAP_SHARE_VMM) {
		expect(comm->heap_vmm.size >= comm->heap_len && comm->heap_vmm.base == comm->heap,
		       "the heap is a VMM allocation covering heap and sync words");
		expect(vmm_peers == comm->topo.nlocal - 1, "every node peer's heap imported via VMM");
	} else {
		expect(comm->heap_vmm.size == 0 && vmm_peers == 0,
		       "legacy: cudaMalloc'd heap, peers mapped through CUDA IPC");
	}
}

int main(int argc, char **argv)
{
	mkConfig_t cfg = MK_CONFIG_INITIALIZER;
	struct rank_args a;
	ncclComm_t nccl;
	mkComm_t comm;
	char *buf;
	int rc, rank, nranks, nnodes, nlocal, bench, kill_last;

	rc = rank_args_parse(argc, argv,
			     "[--bench] [--kill] [--quick] [--expect-vmm | --expect-legacy]", &a);
	if (rc)
		return rc;
	rank = a.rank;
	nranks = a.nranks;
	nnodes = a.nnodes;
	nlocal = a.nlocal;
	bench = rank_has_opt(argc, argv, "--bench");
	kill_last = rank_has_opt(argc, argv, "--kill");
	g_quick = rank_has_opt(argc, argv, "--quick");
	rank_nccl_init(&a, &nccl);
	cfg.heapBytes = bench ? (size_t)1 << 30 : (size_t)256 << 20;
	cfg.timeoutMs = kill_last ? 3000 : 30000;
	if (nranks > 1 && !kill_last) {
		/* Bad arguments on one rank only: every rank gets an error (none waits in an init
		 * exchange for the rank that left), the bad rank ncclInvalidArgument. */
		mkConfig_t bad = cfg;
		mkComm_t none = NULL;
		const uint64_t t0 = mk_now_ns();
		ncclResult_t r;

		if (rank == nranks - 1)
			bad.queueSlots = 3; /* not a power of two */
		r = mkCommInit(nccl, &bad, &none);
		expect(r != ncclSuccess && none == NULL &&
			       (rank != nranks - 1 || r == ncclInvalidArgument),
		       "mkCommInit with bad arguments on the last rank fails on every rank");
		expect(mk_now_ns() - t0 < 20000000000ull, "... within 20 s");
	}
	NK(mkCommInit(nccl, &cfg, &comm));
	expect(comm->topo.nnodes == nnodes && comm->topo.nlocal == nlocal,
	       "node discovery agrees with the launcher's NCCL_HOSTID layout");
	printf("rank %d: node %d/%d local %d/%d, heaps shared through %s\n", rank, comm->topo.node,
	       comm->topo.nnodes, comm->topo.local_rank, comm->topo.nlocal,
	       mk_heap_share_name(comm->heap_share));
	if (rank_has_opt(argc, argv, "--expect-vmm"))
		check_heap_share(comm, MK_HEAP_SHARE_VMM);
	if (rank_has_opt(argc, argv, "--expect-legacy"))
		check_heap_share(comm, MK_HEAP_SHARE_LEGACY);
	NK(mkMemAlloc(comm, 8u << 20, (void **)&buf));
	if (kill_last) {
		ncclResult_t ae = ncclSuccess;
		uint32_t *s, *r;
		uint64_t t0;

		NK(mkMemAlloc(comm, 4096 * nranks, (void **)&s));
		NK(mkMemAlloc(comm, 4096 * nranks, (void **)&r));
		if (rank == nranks - 1) {
			printf("rank %d: dying now\n", rank);
			fflush(stdout);
			_exit(0);
		}
		sleep(1);
		t0 = mk_now_ns();
		NK(mkAllToAll(s, r, 1024, ncclUint32, comm, 0));
		cudaStreamSynchronize(0);	/* must return: every device wait is bounded */
		NK(mkCommGetAsyncError(comm, &ae));
		printf("rank %d: all-to-all with a dead rank ended after %.2f s, async error %d (%s)\n",
		       rank, (mk_now_ns() - t0) / 1e9, (int)ae, ncclGetErrorString(ae));
		expect(ae != ncclSuccess, "dead peer: survivors get an async error, no hang");
		NK(mkCommAbort(comm));
		ncclCommAbort(nccl);
		return g_failures ? 1 : 0;
	}
	{
		int ring_t[1] = { (rank + 1) % nranks }, ring_s[1] = { (rank + nranks - 1) % nranks };
		int all[64], none[1] = { 0 }, zero[1] = { 0 };

		for (int r = 0; r < nranks; r++)
			all[r] = r;
		for (uint32_t round = 0; round < 3; round++)
			run_pattern(comm, "ring", 1, ring_t, 1, ring_s, round, buf);
		/* all-to-all pattern: every rank to every rank (itself through the proxy's copy) */
		run_pattern(comm, "all-to-all put_signal", nranks, all, nranks, all, 3, buf);
		/* one-to-many: rank 0 to everyone */
		if (rank == 0)
			run_pattern(comm, "one-to-many", nranks, all, 1, zero, 4, buf);
		else
			run_pattern(comm, "one-to-many", 0, none, 1, zero, 4, buf);
	}
	run_order(comm, buf);
	run_alltoall(comm, 1, 3);
	run_alltoall(comm, 1000, 3);
	if (!g_quick)
		run_alltoall(comm, 1 << 18, 3);
	{
		struct mk_proxy_stats st;
		char what[160];

		/* Node peers are reached by stores through mapped heaps, other nodes by the proxy. */
		mk_proxy_get_stats(comm->proxy, &st);
		snprintf(what, sizeof(what),
			 "transport writes %llu: none within one node, some across nodes (%d nodes), "
			 "heap %s", (unsigned long long)st.writes, comm->topo.nnodes,
			 comm->stage != NULL ? "mirrored in host memory" : "registered directly");
		expect(nnodes == 1 ? st.writes == 0 : st.writes > 0, what);
	}
	if (bench) {
		bench_pingpong(comm, nccl);
		bench_alltoall(comm, nccl, nnodes, nlocal);
	}
	run_api_misuse(comm, rank);
	NK(mkMemFree(comm, buf));
	NK(mkCommDestroy(comm));
	{
		ncclResult_t ae = ncclSuccess;

		/* the comm is gone: refused, without reading what it was (ASan/memcheck clean) */
		expect(mkCommDestroy(comm) == ncclInvalidArgument, "second mkCommDestroy refused");
		expect(mkCommAbort(comm) == ncclInvalidArgument, "mkCommAbort after destroy refused");
		expect(mkCommGetAsyncError(comm, &ae) == ncclInvalidArgument,
		       "mkCommGetAsyncError on a destroyed comm refused");
		expect(mkMemAlloc(comm, 4096, (void **)&buf) == ncclInvalidArgument,
		       "mkMemAlloc on a destroyed comm refused");
	}
	NK(ncclCommDestroy(nccl));
	printf("rank %d: %d failure(s)\n", rank, g_failures);
	return g_failures ? 1 : 0;
}
