// SPDX-License-Identifier: Apache-2.0
/*
 * The GPU -> host command queue with real GPU producers, in one process:
 *   1. 1e6 commands from many warps through one queue: every body intact, per-producer order kept,
 *      throughput (commands/s) printed as a JSON line;
 *   2. push -> proxy dequeue -> completion seen by the GPU, one command at a time: round-trip
 *      latency (median, p10, p90) as a JSON line, then its floor in the same run (a bare flag
 *      round trip GPU -> host thread -> GPU over the same mapped memory);
 *   3. put_signal between two ranks (the in-memory transport moves the bytes, the target's proxy
 *      turns immediates into signal words): a receiver kernel waits for each signal and then
 *      checks the data it announces (data visible before its signal, on the GPU);
 *   4. the target dies mid-stream: the sender's quiet returns -EPIPE, the receiver's wait gives
 *      up with -ETIMEDOUT, nothing hangs.
 * usage: test-cmdq-gpu [--quick]    Exit: 0 pass, 1 fail, 77 no CUDA device.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_check.h"

extern "C" {
#include "fake_tp.h"
#include "fused/runtime/proxy.h"
}
#include "fused/runtime/device.cuh"

static int quick;		/* --quick: smaller counts (compute-sanitizer runs) */

/* ---- a queue in pinned host memory, producer state in GPU memory ---- */

struct gq {
	struct mk_cmdq q;
	struct mk_cmdq_prod *prod_d;	/* device */
	struct mk_cmdq_dev dev;
};

static void gq_open(struct gq *g, uint32_t nslots, uint32_t start)
{
	struct mk_cmdq_slot *slots;
	struct mk_cmdq_ctrl *ctrl;
	struct mk_cmdq_prod prod;

	CK(cudaHostAlloc((void **)&slots, (size_t)nslots * sizeof(*slots), cudaHostAllocMapped));
	CK(cudaHostAlloc((void **)&ctrl, sizeof(*ctrl), cudaHostAllocMapped));
	CK(cudaMalloc((void **)&g->prod_d, sizeof(*g->prod_d)));
	if (mk_cmdq_init(&g->q, slots, ctrl, nslots, start, &prod) != 0)
		exit(1);
	CK(cudaMemcpy(g->prod_d, &prod, sizeof(prod), cudaMemcpyHostToDevice));
	g->dev = mk_cmdq_dev(&g->q, g->prod_d);	/* UVA: host pointers are device pointers */
}

static void gq_close(struct gq *g)
{
	cudaFreeHost(g->q.slots);
	cudaFreeHost(g->q.ctrl);
	cudaFree(g->prod_d);
	mk_cmdq_fini(&g->q);
}

/* ---- 1. many producers, one queue ---- */

struct order_check {
	uint32_t nprod;
	uint64_t *next;
	uint64_t bad;
	uint64_t seen;
};

static void on_dequeue(void *arg, int, uint32_t index, const struct mk_cmdq_slot *c)
{
	struct order_check *oc = (struct order_check *)arg;
	uint32_t p = (uint32_t)(c->user >> 32);
	uint64_t n = c->user & 0xffffffffu;

	if (c->seq != index || p >= oc->nprod || c->src_off != (c->user ^ 0x5a5a5a5aull) ||
	    c->dst_off != ~c->user || c->signal != (uint32_t)(n * 3u) || c->op != MK_CMD_NOP ||
	    c->peer != 0 || oc->next[p] != n)
		oc->bad++;
	else
		oc->next[p] = n + 1;
	oc->seen++;
}

__global__ void producers_kernel(struct mk_cmdq_dev q, uint32_t per_warp, int *err)
{
	uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;

	if (threadIdx.x % 32 != 0)
		return;
	for (uint32_t n = 0; n < per_warp; n++) {
		struct mk_cmdq_slot c;
		uint32_t t;
		int rc;

		memset(&c, 0, sizeof(c));
		c.op = MK_CMD_NOP;
		c.user = ((uint64_t)warp << 32) | n;
		c.src_off = c.user ^ 0x5a5a5a5aull;
		c.dst_off = ~c.user;
		c.signal = n * 3u;
		rc = mk_cmdq_push(q, &c, 10ull * 1000000000ull, &t);
		if (rc) {
			atomicExch(err, rc);
			return;
		}
	}
}

static void run_proxy_until_done(struct mk_proxy *p, struct mk_cmdq *q, uint32_t want,
				 double limit_s)
{
	uint64_t t0 = mk_now_ns();

	while (mk_seq_after(want, __atomic_load_n(&q->ctrl->done, __ATOMIC_ACQUIRE))) {
		if (mk_proxy_progress(p, 0) < 0)
			return;
		if ((double)(mk_now_ns() - t0) > limit_s * 1e9)
			return;
	}
}

static struct mk_proxy *solo_proxy(struct mk_cmdq *q, struct mk_proxy_peer *peer, uint64_t *sig,
				   void *hook_arg)
{
	struct mk_cmdq *qs[1] = { q };
	struct mk_proxy_attr a;
	struct mk_proxy *p;

	memset(&a, 0, sizeof(a));
	a.rank = 0;
	a.nranks = 1;
	a.peers = peer;
	a.signals = sig;
	a.nsignals = 1;
	a.queues = qs;
	a.nqueues = 1;
	a.nthreads = 1;
	a.batch = 64;
	a.timeout_ms = 10000;
	a.on_dequeue = hook_arg != NULL ? on_dequeue : NULL;
	a.on_dequeue_arg = hook_arg;
	if (mk_proxy_create(&a, &p) != 0)
		exit(1);
	return p;
}

static void test_million_commands(void)
{
	const uint32_t blocks = 32, threads = 128, nprod = blocks * threads / 32;
	const uint32_t per = (quick ? 20000 : 1000000) / nprod + 1, total = per * nprod;
	struct mk_proxy_peer peer;
	struct order_check oc;
	struct gq g;
	uint64_t sig = 0, t0, t1;
	int *err_d, err = 0;
	struct mk_proxy *p;

	memset(&peer, 0, sizeof(peer));
	memset(&oc, 0, sizeof(oc));
	oc.nprod = nprod;
	oc.next = (uint64_t *)calloc(nprod, sizeof(uint64_t));
	gq_open(&g, 4096, 0xffffffffu - total / 3);	/* crosses the 2^32 wrap on the way */
	p = solo_proxy(&g.q, &peer, &sig, &oc);
	CK(cudaMalloc((void **)&err_d, sizeof(int)));
	CK(cudaMemset(err_d, 0, sizeof(int)));
	t0 = mk_now_ns();
	producers_kernel<<<blocks, threads>>>(g.dev, per, err_d);
	CK(cudaGetLastError());
	run_proxy_until_done(p, &g.q, g.q.done + total, 60);
	t1 = mk_now_ns();
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(&err, err_d, sizeof(int), cudaMemcpyDeviceToHost));
	expect(err == 0, "1e6 commands: no producer error");
	expect(oc.seen == total, "1e6 commands: all dequeued");
	expect(oc.bad == 0, "1e6 commands: bodies intact, per-producer order kept");
	printf("{\"bench\":\"cmdq_gpu\",\"metric\":\"throughput\",\"producers\":%u,\"commands\":%u,"
	       "\"mcmd_per_s\":%.2f,\"bad\":%llu,\"release_scope\":\"%s\"}\n",
	       nprod, total, total / ((t1 - t0) / 1e3), (unsigned long long)oc.bad,
	       MK_CMDQ_SYS_RELEASE ? "sys" : "gpu");
	mk_proxy_destroy(p);
	gq_close(&g);
	cudaFree(err_d);
	free(oc.next);
}

/* ---- 2. round trip: push, proxy dequeues and completes, GPU sees `done` ---- */

__global__ void pingpong_kernel(struct mk_dev_comm c, int iters, uint32_t *lat, int *err)
{
	for (int k = 0; k < iters; k++) {
		uint64_t t0 = mk_globaltimer_ns();
		uint32_t t;
		int rc = mk_dev_put_cmd(&c, MK_CMD_NOP, 0, 0, 0, 0, 0, &t);

		if (rc == 0)
			rc = mk_dev_quiet(&c, t);
		if (rc) {
			*err = rc;
			return;
		}
		lat[k] = (uint32_t)(mk_globaltimer_ns() - t0);
	}
}

struct proxy_runner {
	struct mk_proxy *p[2];
	int np;
	volatile int stop;
};

static void *proxy_runner_main(void *arg)
{
	struct proxy_runner *r = (struct proxy_runner *)arg;

	while (!r->stop) {
		for (int i = 0; i < r->np; i++)
			(void)mk_proxy_progress(r->p[i], 0);
	}
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Per-iteration latencies (ns, device) without the first 100 warm-ups: median, p10, p90. */
struct lat_stats {
	uint32_t median, p10, p90;
	int n;
};

static struct lat_stats lat_summary(const uint32_t *lat_d, int iters)
{
	uint32_t *lat = (uint32_t *)malloc(iters * sizeof(uint32_t)), *v = lat + 100;
	struct lat_stats st;

	CK(cudaMemcpy(lat, lat_d, iters * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	st.n = iters - 100;
	qsort(v, st.n, sizeof(uint32_t), cmp_u32);
	st.median = v[st.n / 2];
	st.p10 = v[st.n / 10];
	st.p90 = v[st.n * 9 / 10];
	free(lat);
	return st;
}

static uint32_t test_round_trip(void)
{
	const int iters = quick ? 300 : 20000;
	struct mk_proxy_peer peer;
	struct proxy_runner run;
	struct mk_dev_comm c;
	struct lat_stats st;
	pthread_t tid;
	uint32_t *lat_d;
	uint64_t sig = 0;
	int *err_d, err = 0;
	struct gq g;

	memset(&peer, 0, sizeof(peer));
	memset(&c, 0, sizeof(c));
	gq_open(&g, 1024, 0);
	memset(&run, 0, sizeof(run));
	run.p[0] = solo_proxy(&g.q, &peer, &sig, NULL);
	run.np = 1;
	c.q = g.dev;
	c.nranks = 1;
	c.timeout_ns = 5ull * 1000000000ull;
	CK(cudaMalloc((void **)&lat_d, iters * sizeof(uint32_t)));
	CK(cudaMalloc((void **)&err_d, sizeof(int)));
	CK(cudaMemset(err_d, 0, sizeof(int)));
	pthread_create(&tid, NULL, proxy_runner_main, &run);
	pingpong_kernel<<<1, 1>>>(c, iters, lat_d, err_d);
	CK(cudaDeviceSynchronize());
	run.stop = 1;
	pthread_join(tid, NULL);
	CK(cudaMemcpy(&err, err_d, sizeof(int), cudaMemcpyDeviceToHost));
	expect(err == 0, "round trip: no error");
	st = lat_summary(lat_d, iters);
	printf("{\"bench\":\"cmdq_gpu\",\"metric\":\"push_to_done_round_trip\",\"unit\":\"ns\","
	       "\"median\":%u,\"p10\":%u,\"p90\":%u,\"iters\":%d,"
	       "\"one_way_estimate_ns\":%u}\n",
	       st.median, st.p10, st.p90, st.n, st.median / 2);
	mk_proxy_destroy(run.p[0]);
	gq_close(&g);
	cudaFree(lat_d);
	cudaFree(err_d);
	return st.median;
}

/*
 * The floor under that round trip, in the same run: the GPU writes a word in mapped host memory,
 * a host thread that spins on it writes an answer, the GPU waits for the answer. Same PCIe
 * paths and the same kind of CPU poller as the queue, without the queue protocol or the proxy.
 */
__global__ void bare_kernel(uint32_t *ping, const uint32_t *pong, int iters, uint32_t *lat,
			    int *err)
{
	for (int k = 1; k <= iters; k++) {
		uint64_t t0 = mk_globaltimer_ns();
		int rc;

		mk_peer_st_release_u32(ping, (uint32_t)k);
		rc = mk_dev_wait_u32_ge(pong, (uint32_t)k, NULL, 5ull * 1000000000ull);
		if (rc) {
			*err = rc;
			return;
		}
		lat[k - 1] = (uint32_t)(mk_globaltimer_ns() - t0);
	}
}

struct echo {
	volatile uint32_t *ping, *pong;
	int iters;
};

static void *echo_main(void *arg)
{
	struct echo *e = (struct echo *)arg;
	uint64_t t0 = mk_now_ns();

	for (uint32_t k = 1; k <= (uint32_t)e->iters;) {
		if (__atomic_load_n(e->ping, __ATOMIC_ACQUIRE) == k) {
			__atomic_store_n(e->pong, k, __ATOMIC_RELEASE);
			k++;
		} else if (mk_now_ns() - t0 > 10000000000ull) {
			break;
		}
	}
	return NULL;
}

static void test_bare_round_trip(uint32_t queue_median)
{
	const int iters = quick ? 300 : 20000;
	uint32_t *words, *lat_d;
	int *err_d, err = 0;
	struct lat_stats st;
	struct echo e;
	pthread_t tid;

	CK(cudaHostAlloc((void **)&words, 128, cudaHostAllocMapped));
	memset(words, 0, 128);
	CK(cudaMalloc((void **)&lat_d, iters * sizeof(uint32_t)));
	CK(cudaMalloc((void **)&err_d, sizeof(int)));
	CK(cudaMemset(err_d, 0, sizeof(int)));
	e.ping = words;
	e.pong = words + 16; /* another cache line */
	e.iters = iters;
	pthread_create(&tid, NULL, echo_main, &e);
	bare_kernel<<<1, 1>>>(words, words + 16, iters, lat_d, err_d);
	CK(cudaDeviceSynchronize());
	pthread_join(tid, NULL);
	CK(cudaMemcpy(&err, err_d, sizeof(int), cudaMemcpyDeviceToHost));
	expect(err == 0, "bare GPU -> host -> GPU flag round trip completed");
	st = lat_summary(lat_d, iters);
	printf("{\"bench\":\"cmdq_gpu\",\"metric\":\"bare_flag_round_trip\",\"unit\":\"ns\","
	       "\"median\":%u,\"p10\":%u,\"p90\":%u,\"iters\":%d,"
	       "\"queue_round_trip_ns\":%u,\"queue_over_bare_ns\":%d,"
	       "\"queue_over_bare_ratio\":%.2f}\n",
	       st.median, st.p10, st.p90, st.n, queue_median, (int)queue_median - (int)st.median,
	       (double)queue_median / st.median);
	cudaFreeHost(words);
	cudaFree(lat_d);
	cudaFree(err_d);
}

/* ---- 3 and 4. two ranks over the in-memory transport ---- */

#define CHUNK	256
#define NCHUNK	4096
#define HEAPLEN ((size_t)CHUNK * NCHUNK)

__device__ uint8_t pat(uint32_t k, uint32_t b)
{
	return (uint8_t)(k * 131u + b * 7u + 3u);
}

__global__ void sender_kernel(struct mk_dev_comm c, int nchunks, int *err)
{
	__shared__ int rc_s;
	uint32_t t = 0;

	for (int k = 0; k < nchunks; k++) {
		for (int b = threadIdx.x; b < CHUNK; b += blockDim.x)
			c.heap[(size_t)k * CHUNK + b] = (char)pat((uint32_t)k, (uint32_t)b);
		__syncthreads();
		if (threadIdx.x == 0)
			rc_s = mk_dev_put_signal(&c, 1, (uint64_t)k * CHUNK, (uint64_t)k * CHUNK,
						 CHUNK, 0, &t);
		__syncthreads();
		if (rc_s) {
			if (threadIdx.x == 0)
				*err = rc_s;
			return;
		}
	}
	if (threadIdx.x == 0)
		*err = mk_dev_quiet(&c, t);
}

__global__ void receiver_kernel(struct mk_dev_comm c, int nchunks, unsigned long long *bad,
				int *err)
{
	__shared__ int rc_s;

	for (int k = 0; k < nchunks; k++) {
		if (threadIdx.x == 0)
			rc_s = mk_dev_signal_wait(&c, 0, (uint64_t)k + 1);
		__syncthreads();
		if (rc_s) {
			if (threadIdx.x == 0)
				*err = rc_s;
			return;
		}
		for (int b = threadIdx.x; b < CHUNK; b += blockDim.x) {
			if ((uint8_t)c.heap[(size_t)k * CHUNK + b] != pat((uint32_t)k, (uint32_t)b))
				atomicAdd(bad, 1ull);
		}
		__syncthreads();
	}
}

struct duo {
	struct gq g[2];
	char *heap[2];
	uint64_t *sig[2];
	struct mk_bmr *mr[2];
	struct mk_rkey rkey[2];
	struct mk_conn *conn[2];
	struct mk_proxy_peer peers[2][2];
	struct mk_proxy *p[2];
};

static void duo_open(struct duo *d)
{
	struct mk_mr_attr attr;
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;

	memset(d, 0, sizeof(*d));
	memset(&attr, 0, sizeof(attr));
	attr.type = MK_PTR_HOST;
	attr.dmabuf_fd = -1;
	attr.cuda_device = -1;
	fake_tp_reset();
	for (int r = 0; r < 2; r++) {
		CK(cudaHostAlloc((void **)&d->heap[r], HEAPLEN, cudaHostAllocMapped));
		CK(cudaHostAlloc((void **)&d->sig[r], 64, cudaHostAllocMapped));
		memset(d->heap[r], 0, HEAPLEN);
		memset(d->sig[r], 0, 64);
		if (fake_tp_ops.reg_mr(0, d->heap[r], HEAPLEN, &attr, &d->mr[r], &d->rkey[r]))
			exit(1);
		gq_open(&d->g[r], 256, 0);
	}
	fake_tp_ops.listen(0, handle, &l);
	fake_tp_ops.connect(0, handle, "c", 1, &d->conn[0]);
	fake_tp_ops.accept(l, "a", 1, &d->conn[1]);
	fake_tp_ops.close_listen(l);
	for (int r = 0; r < 2; r++) {
		struct mk_cmdq *qs[1] = { &d->g[r].q };
		struct mk_proxy_attr a;

		memset(&a, 0, sizeof(a));
		d->peers[r][1 - r].conn = d->conn[r];
		d->peers[r][1 - r].heap = d->rkey[1 - r];
		a.ops = &fake_tp_ops;
		a.rank = r;
		a.nranks = 2;
		a.peers = d->peers[r];
		a.heap = d->heap[r];
		a.heap_len = HEAPLEN;
		a.heap_mr = d->mr[r];
		a.signals = d->sig[r];
		a.nsignals = 8;
		a.queues = qs;
		a.nqueues = 1;
		a.nthreads = 1;
		a.batch = 32;
		a.timeout_ms = 2000;
		if (mk_proxy_create(&a, &d->p[r]))
			exit(1);
	}
}

static void duo_close(struct duo *d)
{
	for (int r = 0; r < 2; r++) {
		mk_proxy_destroy(d->p[r]);
		fake_tp_ops.close(d->conn[r]);
		fake_tp_ops.dereg_mr(0, d->mr[r]);
		cudaFreeHost(d->heap[r]);
		cudaFreeHost(d->sig[r]);
		gq_close(&d->g[r]);
	}
}

static struct mk_dev_comm duo_dev(struct duo *d, int r, uint64_t timeout_ns)
{
	struct mk_dev_comm c;

	memset(&c, 0, sizeof(c));
	c.q = d->g[r].dev;
	c.rank = r;
	c.nranks = 2;
	c.heap = d->heap[r];
	c.net_signals = d->sig[r];
	c.nsignals = 8;
	c.timeout_ns = timeout_ns;
	return c;
}

static void test_put_signal_two_ranks(int kill_target, int nchunks)
{
	struct proxy_runner run;
	unsigned long long *bad_d, bad = 0;
	int *err_d, err[2] = { 0, 0 };
	cudaStream_t s[2];
	pthread_t tid;
	struct duo d;

	duo_open(&d);
	memset(&run, 0, sizeof(run));
	run.p[0] = d.p[0];
	run.p[1] = d.p[1];
	run.np = 2;	/* one thread drives both: the in-memory transport is single-threaded */
	CK(cudaMalloc((void **)&bad_d, sizeof(*bad_d)));
	CK(cudaMalloc((void **)&err_d, 2 * sizeof(int)));
	CK(cudaMemset(bad_d, 0, sizeof(*bad_d)));
	CK(cudaMemset(err_d, 0, 2 * sizeof(int)));
	CK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
	/*
	 * The receiver spins until the sender has run: load both kernels now. With lazy module
	 * loading a kernel's first launch may wait for the running ones, i.e. for the receiver.
	 */
	{
		struct cudaFuncAttributes fa;

		CK(cudaFuncGetAttributes(&fa, sender_kernel));
		CK(cudaFuncGetAttributes(&fa, receiver_kernel));
	}
	if (kill_target)
		fake_tp_kill_peer(d.conn[0]);
	pthread_create(&tid, NULL, proxy_runner_main, &run);
	receiver_kernel<<<1, 128, 0, s[1]>>>(duo_dev(&d, 1, kill_target ? 300000000ull :
						     10000000000ull), nchunks, bad_d, err_d + 1);
	sender_kernel<<<1, 128, 0, s[0]>>>(duo_dev(&d, 0, 10000000000ull), nchunks, err_d);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	run.stop = 1;
	pthread_join(tid, NULL);
	CK(cudaMemcpy(&bad, bad_d, sizeof(bad), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(err, err_d, 2 * sizeof(int), cudaMemcpyDeviceToHost));
	printf("put_signal%s: sender %d receiver %d, proxies %d %d, rank 0 tail %u done %u, "
	       "rank 1 signal %llu\n", kill_target ? " (dead target)" : "", err[0], err[1],
	       mk_proxy_error(d.p[0]), mk_proxy_error(d.p[1]), d.g[0].q.ctrl->tail,
	       d.g[0].q.ctrl->done, (unsigned long long)d.sig[1][0]);
	if (!kill_target) {
		expect(err[0] == 0 && err[1] == 0, "put_signal: sender and receiver finished");
		expect(bad == 0, "put_signal: data visible before its signal, exact");
		expect(d.sig[1][0] == (uint64_t)nchunks, "put_signal: one signal per put");
	} else {
		expect(err[0] == -MK_DEV_EPIPE, "dead target: sender gets the proxy's error");
		expect(err[1] == -MK_DEV_ETIMEDOUT, "dead target: receiver's wait is bounded");
		expect(mk_proxy_error(d.p[0]) == -ECONNRESET, "dead target: async error set");
	}
	cudaStreamDestroy(s[0]);
	cudaStreamDestroy(s[1]);
	cudaFree(bad_d);
	cudaFree(err_d);
	duo_close(&d);
}

int main(int argc, char **argv)
{
	int ndev = 0;

	quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	test_million_commands();
	test_bare_round_trip(test_round_trip());
	test_put_signal_two_ranks(0, quick ? 256 : NCHUNK);
	test_put_signal_two_ranks(1, quick ? 256 : NCHUNK);
	printf("%d failure(s)\n", failures);
	return failures ? 1 : 0;
}
