// SPDX-License-Identifier: Apache-2.0
/*
 * The host proxy between ranks over the in-memory fake transport: put / put_signal patterns
 * (all-to-all, ring, one-to-many) with exact results, data visible before its signal (checked by
 * a waiter thread standing in for the target GPU), completion index vs credit index, threaded
 * proxies, and the error paths: transport errors, a dead peer, writes that never complete,
 * back-pressure that never clears, protocol errors. Every failure must surface as the proxy's
 * async error within MKERNEL_TIMEOUT, never as a hang.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fake_tp.h"
#include "fused/runtime/proxy.h"

#define MAXR	 4
#define NSIG	 16
#define HEAP_LEN (1u << 20)
#define NSLOTS	 64

/*
 * The fake backend is single-threaded: serialise every call for the threaded tests. Its event
 * queues are bounded (4096) and a write whose immediate does not fit fails; a real receiver has
 * the same limit and pushes back (receiver not ready). Model that: writes with an immediate get
 * -EAGAIN while too many immediates wait to be polled.
 */
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static int imm_outstanding;
#define IMM_LIMIT 2048

static int locked_write(struct mk_conn *c, int lane, const void *src, size_t len,
			struct mk_bmr *src_mr, uint64_t dst, const struct mk_rkey *rkey,
			bool has_imm, uint32_t imm, void *ctx)
{
	int rc;

	pthread_mutex_lock(&fake_lock);
	if (has_imm && imm_outstanding >= IMM_LIMIT) {
		rc = -EAGAIN;
	} else {
		rc = fake_tp_ops.write(c, lane, src, len, src_mr, dst, rkey, has_imm, imm, ctx);
		if (rc == 0 && has_imm && !fake_tp_faults.blackhole)
			imm_outstanding++;
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

/*
 * A flush for the GPU-heap tests: refused with -EAGAIN flush_eagain times, then held until
 * the test sets flush_release; its completion then comes out of the connection's poll.
 */
#define MAX_FLUSHES 16
static struct {
	struct mk_conn *conn;
	void *ctx;
} flushes[MAX_FLUSHES];
static int nflushes, flush_calls, flush_eagain, flush_release;

static int test_flush(struct mk_conn *c, void *addr, size_t len, struct mk_bmr *mr, void *ctx)
{
	int rc = 0;

	pthread_mutex_lock(&fake_lock);
	flush_calls++;
	if (flush_eagain > 0) {
		flush_eagain--;
		rc = -EAGAIN;
	} else if (nflushes == MAX_FLUSHES || addr == NULL || len == 0 || mr == NULL) {
		rc = -EINVAL;
	} else {
		flushes[nflushes].conn = c;
		flushes[nflushes++].ctx = ctx;
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static int locked_poll(struct mk_conn *c, struct mk_event *ev, int max)
{
	int rc;

	pthread_mutex_lock(&fake_lock);
	rc = fake_tp_ops.poll(c, ev, max);
	for (int i = 0; i < rc; i++) {
		if (ev[i].type == MK_EV_IMM)
			imm_outstanding--;
	}
	/* released flushes of this connection complete after its other events */
	for (int i = 0; rc >= 0 && flush_release && i < nflushes && rc < max;) {
		if (flushes[i].conn != c) {
			i++;
			continue;
		}
		memset(&ev[rc], 0, sizeof(ev[rc]));
		ev[rc].type = MK_EV_READ_DONE;
		ev[rc++].ctx = flushes[i].ctx;
		flushes[i] = flushes[--nflushes];
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static struct mk_transport_ops locked_ops;

struct rank {
	struct mk_proxy *proxy;
	struct mk_cmdq q;
	struct mk_cmdq_prod prod;
	struct mk_cmdq_dev dev;
	struct mk_proxy_peer peers[MAXR];
	struct mk_conn *conn[MAXR];
	char *heap;
	struct mk_bmr *mr;
	struct mk_rkey rkey;
	uint64_t signals[NSIG];
};

struct world {
	int n;
	struct rank r[MAXR];
};

struct wopts {
	int nthreads;
	int batch;
	int64_t timeout_ms;
	uint32_t nsignals[MAXR]; /* 0 = NSIG */
	int heap_device[MAXR];	 /* the rank's proxy is told its heap is GPU memory */
};

static void world_open(struct world *w, int n, const struct wopts *o)
{
	const struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };

	memset(w, 0, sizeof(*w));
	w->n = n;
	for (int i = 0; i < n; i++) {
		struct rank *r = &w->r[i];

		r->heap = aligned_alloc(4096, HEAP_LEN);
		assert_non_null(r->heap);
		memset(r->heap, 0, HEAP_LEN);
		assert_int_equal(fake_tp_ops.reg_mr(0, r->heap, HEAP_LEN, &attr, &r->mr, &r->rkey),
				 0);
	}
	/* Full mesh: j listens, i connects, j accepts. */
	for (int i = 0; i < n; i++) {
		for (int j = i + 1; j < n; j++) {
			uint8_t handle[MK_TP_HANDLE_MAX];
			struct mk_listener *l;

			assert_int_equal(fake_tp_ops.listen(0, handle, &l), 0);
			assert_int_equal(fake_tp_ops.connect(0, handle, "c", 1, &w->r[i].conn[j]),
					 0);
			assert_int_equal(fake_tp_ops.accept(l, "a", 1, &w->r[j].conn[i]), 0);
			assert_non_null(w->r[j].conn[i]);
			assert_int_equal(fake_tp_ops.connected(w->r[i].conn[j]), 1);
			fake_tp_ops.close_listen(l);
		}
	}
	for (int i = 0; i < n; i++) {
		struct rank *r = &w->r[i];
		struct mk_cmdq_slot *slots = aligned_alloc(64, NSLOTS * sizeof(*slots));
		struct mk_cmdq_ctrl *ctrl = aligned_alloc(64, sizeof(*ctrl));
		struct mk_cmdq *qs[1] = { &r->q };
		struct mk_proxy_attr a = {
			.ops = &locked_ops,
			.rank = i,
			.nranks = n,
			.peers = r->peers,
			.heap = r->heap,
			.heap_len = HEAP_LEN,
			.heap_device = o->heap_device[i],
			.heap_mr = r->mr,
			.signals = r->signals,
			.nsignals = o->nsignals[i] ? o->nsignals[i] : NSIG,
			.queues = qs,
			.nqueues = 1,
			.nthreads = o->nthreads ? o->nthreads : 1,
			.batch = o->batch ? o->batch : 16,
			.timeout_ms = o->timeout_ms ? o->timeout_ms : 5000,
		};

		for (int j = 0; j < n; j++) {
			r->peers[j].conn = r->conn[j];
			r->peers[j].heap = w->r[j].rkey; /* "exchanged" */
		}
		assert_int_equal(mk_cmdq_init(&r->q, slots, ctrl, NSLOTS, 0xfffffff0u, &r->prod),
				 0);
		r->dev = mk_cmdq_dev(&r->q, &r->prod);
		assert_int_equal(mk_proxy_create(&a, &r->proxy), 0);
	}
}

static void world_close(struct world *w)
{
	for (int i = 0; i < w->n; i++)
		mk_proxy_stop(w->r[i].proxy);
	for (int i = 0; i < w->n; i++) {
		struct rank *r = &w->r[i];

		mk_proxy_destroy(r->proxy);
		for (int j = 0; j < w->n; j++) {
			if (r->conn[j] != NULL)
				fake_tp_ops.close(r->conn[j]);
		}
		fake_tp_ops.dereg_mr(0, r->mr);
		free(r->heap);
		free(r->q.slots);
		free(r->q.ctrl);
		mk_cmdq_fini(&r->q);
	}
	assert_int_equal(fake_tp_live_regs(), 0);
}

/* One sweep of every rank; returns the first error. */
static int world_progress(struct world *w)
{
	int err = 0;

	for (int i = 0; i < w->n; i++) {
		int rc = mk_proxy_progress(w->r[i].proxy, 0);

		if (rc < 0 && err == 0)
			err = rc;
	}
	return err;
}

static void push(struct rank *r, uint8_t op, uint32_t peer, uint64_t src, uint64_t dst,
		 uint64_t bytes, uint32_t signal)
{
	struct mk_cmdq_slot c = { .op = op,
				  .peer = peer,
				  .src_off = src,
				  .dst_off = dst,
				  .bytes = bytes,
				  .signal = signal };

	assert_true(mk_cmdq_push_host(&r->dev, &c, 0) >= 0);
}

static uint8_t pattern(int src, int dst, uint32_t k)
{
	return (uint8_t)(src * 31 + dst * 7 + k * 13 + 1);
}

static void fill(char *p, int src, int dst, size_t len)
{
	for (size_t k = 0; k < len; k++)
		p[k] = (char)pattern(src, dst, (uint32_t)k);
}

static void check(const char *p, int src, int dst, size_t len)
{
	for (size_t k = 0; k < len; k++)
		assert_int_equal((uint8_t)p[k], pattern(src, dst, (uint32_t)k));
}

/* Drive until every rank's signal `sig[i]` reaches want[i] and every queue is idle. */
static void run_until_signals(struct world *w, const uint64_t *want, const uint32_t *sig)
{
	uint64_t t0 = mk_now_ns();

	for (;;) {
		int ok = 1;

		assert_int_equal(world_progress(w), 0);
		for (int i = 0; i < w->n; i++) {
			if (__atomic_load_n(&w->r[i].signals[sig[i]], __ATOMIC_ACQUIRE) < want[i] ||
			    w->r[i].q.ctrl->done != w->r[i].prod.head)
				ok = 0;
		}
		if (ok)
			return;
		assert_true(mk_now_ns() - t0 < 10000000000ull);
	}
}

static int setup(void **state)
{
	fake_tp_reset();
	imm_outstanding = 0;
	locked_ops = fake_tp_ops;
	locked_ops.write = locked_write;
	locked_ops.poll = locked_poll;
	nflushes = flush_calls = flush_eagain = flush_release = 0;
	return 0;
}

#define BLK 4096

/* Every rank puts a distinct block to every rank (itself included), one signal per source. */
static void test_alltoall_put_signal_exact(void **state)
{
	struct world w;
	struct wopts o = { 0 };

	world_open(&w, 4, &o);
	for (int s = 0; s < 4; s++) {
		for (int d = 0; d < 4; d++) {
			fill(w.r[s].heap + (size_t)d * BLK, s, d, BLK);
			push(&w.r[s], MK_CMD_PUT_SIGNAL, (uint32_t)d, (uint64_t)d * BLK,
			     (uint64_t)(8 + s) * BLK, BLK, (uint32_t)s);
		}
	}
	for (int d = 0; d < 4; d++) {
		uint64_t t0 = mk_now_ns();

		for (int s = 0; s < 4; s++) {
			while (__atomic_load_n(&w.r[d].signals[s], __ATOMIC_ACQUIRE) < 1) {
				assert_int_equal(world_progress(&w), 0);
				assert_true(mk_now_ns() - t0 < 10000000000ull);
			}
		}
	}
	for (int d = 0; d < 4; d++) {
		for (int s = 0; s < 4; s++) {
			check(w.r[d].heap + (size_t)(8 + s) * BLK, s, d, BLK);
			assert_int_equal(w.r[d].signals[s], 1); /* exactly once */
		}
	}
	world_close(&w);
}

/* Ring: 50 rounds, each rank to its right neighbour, a fresh offset per round. */
static void test_ring_rounds_exact(void **state)
{
	const int rounds = 50;
	uint64_t want[MAXR];
	uint32_t sig[MAXR] = { 3, 3, 3 };
	struct world w;
	struct wopts o = { .batch = 4 };

	world_open(&w, 3, &o);
	for (int k = 0; k < rounds; k++) {
		for (int s = 0; s < 3; s++) {
			int d = (s + 1) % 3;
			char *src = w.r[s].heap + (size_t)k * 256;

			fill(src, s, k, 256);
			push(&w.r[s], MK_CMD_PUT_SIGNAL, (uint32_t)d, (uint64_t)k * 256,
			     (uint64_t)(512 * 1024) + (uint64_t)k * 256, 256, 3);
		}
		/* The ring of 64 slots would fill: let the proxies run every few rounds. */
		if (k % 16 == 15)
			assert_int_equal(world_progress(&w), 0);
	}
	for (int i = 0; i < 3; i++)
		want[i] = rounds;
	run_until_signals(&w, want, sig);
	for (int d = 0; d < 3; d++) {
		int s = (d + 2) % 3;

		assert_int_equal(w.r[d].signals[3], rounds);
		for (int k = 0; k < rounds; k++)
			check(w.r[d].heap + 512 * 1024 + (size_t)k * 256, s, k, 256);
	}
	world_close(&w);
}

/* One-to-many: rank 0 sends one block to every other rank with plain PUTs, then a SIGNAL each. */
static void test_one_to_many_put_then_signal(void **state)
{
	uint64_t want[MAXR] = { 0, 1, 1, 1 };
	uint32_t sig[MAXR] = { 0, 5, 5, 5 };
	struct world w;
	struct wopts o = { 0 };

	world_open(&w, 4, &o);
	fill(w.r[0].heap, 0, 0, 3 * BLK);
	for (uint32_t d = 1; d < 4; d++) {
		for (int part = 0; part < 3; part++)
			push(&w.r[0], MK_CMD_PUT, d, (uint64_t)part * BLK, (uint64_t)part * BLK,
			     BLK, 0);
		push(&w.r[0], MK_CMD_SIGNAL, d, 0, 0, 0, 5);
	}
	run_until_signals(&w, want, sig);
	for (int d = 1; d < 4; d++)
		check(w.r[d].heap, 0, 0, 3 * BLK);
	world_close(&w);
}

/* `done` (quiet) trails `tail` (credits) until the write's completion is reaped. */
static void test_done_waits_for_completion(void **state)
{
	struct world w;
	struct wopts o = { 0 };
	uint32_t start;

	world_open(&w, 2, &o);
	start = w.r[0].q.ctrl->tail;
	push(&w.r[0], MK_CMD_PUT, 1, 0, 0, 64, 0);
	assert_true(mk_proxy_progress(w.r[0].proxy, 0) > 0);
	assert_int_equal(w.r[0].q.ctrl->tail, start + 1);
	assert_int_equal(w.r[0].q.ctrl->done, start);
	assert_true(mk_proxy_progress(w.r[0].proxy, 0) > 0);
	assert_int_equal(w.r[0].q.ctrl->done, start + 1);
	world_close(&w);
}

/* A thread standing in for the target GPU: whenever it sees signal value v, chunks < v are there.
 */
struct waiter {
	struct rank *r;
	uint32_t chunks;
	uint32_t chunk;
	int bad;
	int done;
};

static void *waiter_main(void *arg)
{
	struct waiter *wt = arg;
	uint32_t checked = 0;
	uint64_t t0 = mk_now_ns();

	while (checked < wt->chunks && mk_now_ns() - t0 < 20000000000ull) {
		uint64_t v = __atomic_load_n(&wt->r->signals[0], __ATOMIC_ACQUIRE);

		for (; checked < v && checked < wt->chunks; checked++) {
			const uint8_t *p =
				(const uint8_t *)wt->r->heap + 65536 + (size_t)checked * wt->chunk;

			for (uint32_t k = 0; k < wt->chunk; k++) {
				if (p[k] != pattern(0, (int)checked, k))
					wt->bad++;
			}
		}
	}
	__atomic_store_n(&wt->done, checked == wt->chunks ? 1 : -1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_data_visible_before_signal(void **state)
{
	struct waiter wt;
	struct world w;
	struct wopts o = { .batch = 8 };
	pthread_t tid;
	uint32_t sent = 0;
	uint64_t t0 = mk_now_ns();

	world_open(&w, 2, &o);
	wt = (struct waiter){ .r = &w.r[1], .chunks = 2000, .chunk = 128 };
	assert_int_equal(pthread_create(&tid, NULL, waiter_main, &wt), 0);
	while (__atomic_load_n(&wt.done, __ATOMIC_ACQUIRE) == 0) {
		/* Keep some puts in flight: source data is rewritten per chunk slot. */
		while (sent < wt.chunks && sent - (w.r[0].q.ctrl->done - 0xfffffff0u) < 32) {
			char *src = w.r[0].heap + (size_t)(sent % 64) * 128;

			fill(src, 0, (int)sent, 128);
			push(&w.r[0], MK_CMD_PUT_SIGNAL, 1, (uint64_t)(sent % 64) * 128,
			     65536 + (uint64_t)sent * 128, 128, 0);
			sent++;
		}
		assert_int_equal(world_progress(&w), 0);
		assert_true(mk_now_ns() - t0 < 20000000000ull);
	}
	pthread_join(tid, NULL);
	assert_int_equal(wt.done, 1);
	assert_int_equal(wt.bad, 0);
	world_close(&w);
}

static int run_until_error(struct world *w, int rank, uint64_t limit_ns)
{
	uint64_t t0 = mk_now_ns();

	while (mk_proxy_error(w->r[rank].proxy) == 0) {
		(void)world_progress(w);
		assert_true(mk_now_ns() - t0 < limit_ns);
	}
	return mk_proxy_error(w->r[rank].proxy);
}

static void test_write_error_becomes_async_error(void **state)
{
	struct world w;
	struct wopts o = { 0 };

	world_open(&w, 2, &o);
	fake_tp_faults.fail_next_write = -EIO;
	push(&w.r[0], MK_CMD_PUT_SIGNAL, 1, 0, 0, 64, 0);
	assert_int_equal(run_until_error(&w, 0, 1000000000ull), -EIO);
	assert_int_equal(w.r[0].q.ctrl->error, -EIO);
	assert_int_equal(mk_proxy_error(w.r[1].proxy), 0); /* the target is unaffected */
	world_close(&w);
}

static void test_dead_peer_becomes_async_error(void **state)
{
	struct world w;
	struct wopts o = { 0 };

	world_open(&w, 2, &o);
	push(&w.r[0], MK_CMD_PUT_SIGNAL, 1, 0, 0, 64, 0);
	run_until_signals(&w, (uint64_t[]){ 0, 1 }, (uint32_t[]){ 0, 0 });
	fake_tp_kill_peer(w.r[0].conn[1]);
	push(&w.r[0], MK_CMD_PUT_SIGNAL, 1, 0, 0, 64, 0);
	assert_int_equal(run_until_error(&w, 0, 1000000000ull), -ECONNRESET);
	assert_int_equal(w.r[0].q.ctrl->error, -ECONNRESET);
	world_close(&w);
}

/* Writes accepted but never completed: the oldest one times out. */
static void test_lost_write_times_out(void **state)
{
	struct world w;
	struct wopts o = { .timeout_ms = 50 };
	uint64_t t0;

	world_open(&w, 2, &o);
	fake_tp_faults.blackhole = 1;
	push(&w.r[0], MK_CMD_PUT, 1, 0, 0, 64, 0);
	t0 = mk_now_ns();
	assert_int_equal(run_until_error(&w, 0, 2000000000ull), -ETIMEDOUT);
	assert_true(mk_now_ns() - t0 >= 50000000ull);
	world_close(&w);
}

static void test_transient_eagain_retried(void **state)
{
	struct mk_proxy_stats st;
	struct world w;
	struct wopts o = { 0 };

	world_open(&w, 2, &o);
	fake_tp_faults.eagain_writes = 5;
	fill(w.r[0].heap, 0, 1, 512);
	push(&w.r[0], MK_CMD_PUT_SIGNAL, 1, 0, 4096, 512, 2);
	run_until_signals(&w, (uint64_t[]){ 0, 1 }, (uint32_t[]){ 0, 2 });
	check(w.r[1].heap + 4096, 0, 1, 512);
	mk_proxy_get_stats(w.r[0].proxy, &st);
	assert_int_equal(st.eagain, 5);
	assert_int_equal(st.writes, 1);
	world_close(&w);
}

static void test_endless_eagain_times_out(void **state)
{
	struct world w;
	struct wopts o = { .timeout_ms = 50 };

	world_open(&w, 2, &o);
	fake_tp_faults.eagain_writes = 1 << 30;
	push(&w.r[0], MK_CMD_PUT, 1, 0, 0, 64, 0);
	assert_int_equal(run_until_error(&w, 0, 2000000000ull), -ETIMEDOUT);
	world_close(&w);
}

/* The target has fewer signal words than the source believes: a protocol error there. */
static void test_unknown_signal_at_target_is_protocol_error(void **state)
{
	struct world w;
	struct wopts o = { .nsignals = { NSIG, 2 } };

	world_open(&w, 2, &o);
	push(&w.r[0], MK_CMD_SIGNAL, 1, 0, 0, 0, 9);
	assert_int_equal(run_until_error(&w, 1, 1000000000ull), -EPROTO);
	world_close(&w);
}

/*
 * A proxy whose heap is GPU memory cannot copy to itself (the device API does that on the GPU):
 * a signal to itself still works, a put to itself is an error, not a host access to GPU memory.
 */
static void test_self_put_refused_with_device_heap(void **state)
{
	const uint64_t want[2] = { 1, 0 };
	const uint32_t sig[2] = { 3, 3 };
	struct world w;
	struct wopts o = { .heap_device = { 1, 0 } };

	world_open(&w, 2, &o);
	push(&w.r[0], MK_CMD_SIGNAL, 0, 0, 0, 0, 3);
	run_until_signals(&w, want, sig);
	push(&w.r[0], MK_CMD_PUT, 0, 0, 4096, 64, 0);
	assert_int_equal(run_until_error(&w, 0, 1000000000ull), -EINVAL);
	world_close(&w);
}

/*
 * GPU-memory heap and a transport that flushes: a signal becomes visible only after the flush
 * posted for it completed (retried while the transport refuses it). A host heap never flushes.
 */
static void test_signal_waits_for_flush_with_device_heap(void **state)
{
	const uint64_t want[2] = { 1, 1 };
	const uint32_t sig[2] = { 5, 2 };
	struct wopts o = { .heap_device = { 0, 1 } };
	struct mk_proxy_stats st;
	struct world w;
	uint64_t t0;

	locked_ops.flush = test_flush;
	flush_eagain = 3;
	world_open(&w, 2, &o);
	fill(w.r[0].heap, 0, 1, BLK);
	push(&w.r[0], MK_CMD_PUT_SIGNAL, 1, 0, 0, BLK, 2);
	/* The data is there, the immediate seen, the flush posted after three refusals: no signal.
	 */
	t0 = mk_now_ns();
	while (flush_calls < 4 || w.r[0].q.ctrl->done != w.r[0].prod.head) {
		assert_int_equal(world_progress(&w), 0);
		assert_true(mk_now_ns() - t0 < 5000000000ull);
	}
	for (int i = 0; i < 100; i++)
		assert_int_equal(world_progress(&w), 0);
	assert_int_equal(nflushes, 1);
	assert_int_equal(__atomic_load_n(&w.r[1].signals[2], __ATOMIC_ACQUIRE), 0);
	/* A host-heap rank applies its signal at once, without a flush. */
	fill(w.r[1].heap + BLK, 1, 0, BLK);
	push(&w.r[1], MK_CMD_PUT_SIGNAL, 0, BLK, BLK, BLK, 5);
	flush_release = 1;
	run_until_signals(&w, want, sig);
	check(w.r[1].heap, 0, 1, BLK);
	check(w.r[0].heap + BLK, 1, 0, BLK);
	assert_int_equal(flush_calls, 4);
	mk_proxy_get_stats(w.r[1].proxy, &st);
	assert_int_equal(st.flushes, 1);
	mk_proxy_get_stats(w.r[0].proxy, &st);
	assert_int_equal(st.flushes, 0);
	world_close(&w);
}

static void test_unreachable_peer_rejected(void **state)
{
	struct world w;
	struct wopts o = { 0 };
	struct mk_conn *saved;

	world_open(&w, 2, &o);
	/* A proxy built without a connection to rank 1. */
	mk_proxy_destroy(w.r[0].proxy);
	saved = w.r[0].peers[1].conn;
	w.r[0].peers[1].conn = NULL;
	{
		struct mk_cmdq *qs[1] = { &w.r[0].q };
		struct mk_proxy_attr a = {
			.ops = &locked_ops,
			.rank = 0,
			.nranks = 2,
			.peers = w.r[0].peers,
			.heap = w.r[0].heap,
			.heap_len = HEAP_LEN,
			.heap_mr = w.r[0].mr,
			.signals = w.r[0].signals,
			.nsignals = NSIG,
			.queues = qs,
			.nqueues = 1,
			.nthreads = 1,
			.batch = 4,
			.timeout_ms = 1000,
		};

		assert_int_equal(mk_proxy_create(&a, &w.r[0].proxy), 0);
	}
	push(&w.r[0], MK_CMD_PUT, 1, 0, 0, 64, 0);
	assert_int_equal(mk_proxy_progress(w.r[0].proxy, 0), -EHOSTUNREACH);
	w.r[0].peers[1].conn = saved;
	world_close(&w);
}

static void test_create_rejects_bad_attr(void **state)
{
	struct mk_proxy_peer peer = { 0 };
	struct mk_proxy *p = NULL;
	uint64_t sig;
	struct mk_proxy_attr good = { .rank = 0,
				      .nranks = 1,
				      .peers = &peer,
				      .signals = &sig,
				      .nsignals = 1,
				      .nthreads = 1,
				      .batch = 1,
				      .timeout_ms = 1 };
	struct mk_proxy_attr a;

	a = good;
	a.rank = 1;
	assert_int_equal(mk_proxy_create(&a, &p), -EINVAL);
	a = good;
	a.nthreads = 0;
	assert_int_equal(mk_proxy_create(&a, &p), -EINVAL);
	a = good;
	a.batch = 0;
	assert_int_equal(mk_proxy_create(&a, &p), -EINVAL);
	a = good;
	a.signals = NULL;
	assert_int_equal(mk_proxy_create(&a, &p), -EINVAL);
	a = good;
	a.nqueues = 1;
	assert_int_equal(mk_proxy_create(&a, &p), -EINVAL);
	a = good;
	a.nsignals = MK_IMM_INDEX_MASK + 2u;
	assert_int_equal(mk_proxy_create(&a, &p), -EINVAL);
	assert_null(p);
	assert_int_equal(mk_proxy_create(&good, &p), 0);
	mk_proxy_destroy(p);
}

/* Threaded proxies (2 threads each) with producer threads: all-to-all rounds, exact counts. */
struct a2a_producer {
	struct world *w;
	int rank;
	int rounds;
	int rc;
};

static void *a2a_main(void *arg)
{
	struct a2a_producer *ap = arg;
	struct rank *r = &ap->w->r[ap->rank];

	for (int k = 0; k < ap->rounds; k++) {
		for (int d = 0; d < ap->w->n; d++) {
			struct mk_cmdq_slot c = {
				.op = MK_CMD_PUT_SIGNAL,
				.peer = (uint32_t)d,
				.src_off = (uint64_t)d * 1024,
				.dst_off = 262144 + (uint64_t)ap->rank * 65536 +
					   (uint64_t)(k % 64) * 1024,
				.bytes = 1024,
				.signal = (uint32_t)ap->rank,
				.lane = (uint8_t)k,
			};
			int64_t t = mk_cmdq_push_host(&r->dev, &c, -1);

			if (t < 0) {
				ap->rc = (int)t;
				return NULL;
			}
		}
	}
	return NULL;
}

static void test_threaded_proxies_alltoall_rounds(void **state)
{
	const int n = 3, rounds = 3000;
	struct a2a_producer ap[MAXR];
	pthread_t tid[MAXR];
	struct world w;
	struct wopts o = { .nthreads = 2, .batch = 16 };
	uint64_t t0;

	fake_tp_faults.nlanes = 2; /* the commands name lanes 0, 1, 2, ...: both are used */
	world_open(&w, n, &o);
	for (int s = 0; s < n; s++) {
		for (int d = 0; d < n; d++)
			fill(w.r[s].heap + (size_t)d * 1024, s, d, 1024);
	}
	for (int s = 0; s < n; s++)
		assert_int_equal(mk_proxy_start(w.r[s].proxy), 0);
	for (int s = 0; s < n; s++) {
		ap[s] = (struct a2a_producer){ .w = &w, .rank = s, .rounds = rounds };
		assert_int_equal(pthread_create(&tid[s], NULL, a2a_main, &ap[s]), 0);
	}
	for (int s = 0; s < n; s++) {
		pthread_join(tid[s], NULL);
		if (ap[s].rc)
			print_message("rank %d proxy error %d\n", s, mk_proxy_error(w.r[s].proxy));
		assert_int_equal(ap[s].rc, 0);
	}
	t0 = mk_now_ns();
	for (int d = 0; d < n; d++) {
		for (int s = 0; s < n; s++) {
			while (__atomic_load_n(&w.r[d].signals[s], __ATOMIC_ACQUIRE) <
			       (uint64_t)rounds)
				assert_true(mk_now_ns() - t0 < 30000000000ull);
		}
	}
	for (int s = 0; s < n; s++)
		mk_proxy_stop(w.r[s].proxy);
	for (int d = 0; d < n; d++) {
		assert_int_equal(mk_proxy_error(w.r[d].proxy), 0);
		for (int s = 0; s < n; s++) {
			assert_int_equal(w.r[d].signals[s], rounds);
			for (int k = 0; k < 64; k++)
				check(w.r[d].heap + 262144 + (size_t)s * 65536 + (size_t)k * 1024,
				      s, d, 1024);
		}
	}
	/* the proxy said it reads every lane: nothing the GPU sent on lane 1 waited unread */
	assert_int_equal(fake_tp_unread_lane_writes(), 0);
	world_close(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_alltoall_put_signal_exact, setup),
		cmocka_unit_test_setup(test_ring_rounds_exact, setup),
		cmocka_unit_test_setup(test_one_to_many_put_then_signal, setup),
		cmocka_unit_test_setup(test_done_waits_for_completion, setup),
		cmocka_unit_test_setup(test_data_visible_before_signal, setup),
		cmocka_unit_test_setup(test_write_error_becomes_async_error, setup),
		cmocka_unit_test_setup(test_dead_peer_becomes_async_error, setup),
		cmocka_unit_test_setup(test_lost_write_times_out, setup),
		cmocka_unit_test_setup(test_transient_eagain_retried, setup),
		cmocka_unit_test_setup(test_endless_eagain_times_out, setup),
		cmocka_unit_test_setup(test_unknown_signal_at_target_is_protocol_error, setup),
		cmocka_unit_test_setup(test_self_put_refused_with_device_heap, setup),
		cmocka_unit_test_setup(test_signal_waits_for_flush_with_device_heap, setup),
		cmocka_unit_test_setup(test_unreachable_peer_rejected, setup),
		cmocka_unit_test_setup(test_create_rejects_bad_attr, setup),
		cmocka_unit_test_setup(test_threaded_proxies_alltoall_rounds, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
