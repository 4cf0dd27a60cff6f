// SPDX-License-Identifier: Apache-2.0
/*
 * The command-queue protocol with CPU threads standing in for the GPU producer and the proxy
 * consuming: ordering (one and several producers), credits and back-pressure, the 2^32 wrap,
 * batching (one credit publication per burst), completion index, and the error paths that must
 * release a blocked producer instead of hanging it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fused/runtime/proxy.h"

#define MAX_PRODUCERS 4

struct qfix {
	struct mk_cmdq q;
	struct mk_cmdq_prod prod;
	struct mk_cmdq_dev dev;
	struct mk_proxy *proxy;
	struct mk_proxy_peer peer;
	uint64_t signals[4];
	char heap[256];
	/* what the consumer saw */
	uint32_t start;
	uint64_t seen;
	uint64_t bad; /* entries out of order or with a torn body */
	uint64_t next_per_producer[MAX_PRODUCERS];
	uint32_t last_index;
};

static void on_dequeue(void *arg, int queue, uint32_t index, const struct mk_cmdq_slot *c)
{
	struct qfix *f = arg;
	uint32_t producer = (uint32_t)(c->user >> 48);
	uint64_t n = c->user & 0xffffffffffffull;

	/* Body fields are all derived from user: a torn or stale slot shows up here. */
	if (c->seq != index || producer >= MAX_PRODUCERS || c->src_off != (c->user ^ 0x5a5a) ||
	    c->dst_off != ~c->user || c->signal != (uint32_t)n * 7u)
		f->bad++;
	else if (n != f->next_per_producer[producer])
		f->bad++;
	else
		f->next_per_producer[producer] = n + 1;
	if (f->seen > 0 && index != f->last_index + 1)
		f->bad++;
	f->last_index = index;
	f->seen++;
}

static void qfix_open(struct qfix *f, uint32_t nslots, uint32_t start, int batch)
{
	struct mk_cmdq_slot *slots = aligned_alloc(64, (size_t)nslots * sizeof(*slots));
	struct mk_cmdq_ctrl *ctrl = aligned_alloc(64, sizeof(*ctrl));
	struct mk_cmdq *qs[1] = { &f->q };
	struct mk_proxy_attr a = {
		.rank = 0,
		.nranks = 1,
		.peers = &f->peer,
		.heap = f->heap,
		.heap_len = sizeof(f->heap),
		.signals = f->signals,
		.nsignals = 4,
		.queues = qs,
		.nqueues = 1,
		.nthreads = 1,
		.batch = batch,
		.timeout_ms = 5000,
		.on_dequeue = on_dequeue,
		.on_dequeue_arg = f,
	};

	memset(f, 0, sizeof(*f));
	a.peers = &f->peer;
	a.heap = f->heap;
	a.signals = f->signals;
	a.on_dequeue_arg = f;
	assert_non_null(slots);
	assert_non_null(ctrl);
	assert_int_equal(mk_cmdq_init(&f->q, slots, ctrl, nslots, start, &f->prod), 0);
	f->dev = mk_cmdq_dev(&f->q, &f->prod);
	f->start = start;
	assert_int_equal(mk_proxy_create(&a, &f->proxy), 0);
}

static void qfix_close(struct qfix *f)
{
	mk_proxy_destroy(f->proxy);
	free(f->q.slots);
	free(f->q.ctrl);
	mk_cmdq_fini(&f->q);
}

static struct mk_cmdq_slot tagged(uint32_t producer, uint64_t n)
{
	uint64_t user = ((uint64_t)producer << 48) | n;
	struct mk_cmdq_slot c = {
		.op = MK_CMD_NOP,
		.user = user,
		.src_off = user ^ 0x5a5a,
		.dst_off = ~user,
		.signal = (uint32_t)n * 7u,
	};

	return c;
}

struct producer {
	struct qfix *f;
	uint32_t id;
	uint64_t count;
	long spin_limit;
	int64_t last;	 /* last ticket or error */
	uint64_t pushed; /* atomic: pushes that returned */
};

static void *producer_main(void *arg)
{
	struct producer *pr = arg;

	for (uint64_t n = 0; n < pr->count; n++) {
		struct mk_cmdq_slot c = tagged(pr->id, n);

		pr->last = mk_cmdq_push_host(&pr->f->dev, &c, pr->spin_limit);
		if (pr->last < 0)
			break;
		__atomic_fetch_add(&pr->pushed, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* Run the proxy on this thread until `want` entries are consumed and completed. */
static void drain_until(struct qfix *f, uint64_t want)
{
	uint64_t t0 = mk_now_ns();

	while (f->seen < want ||
	       __atomic_load_n(&f->q.ctrl->done, __ATOMIC_ACQUIRE) != (uint32_t)(f->start + want)) {
		int rc = mk_proxy_progress(f->proxy, 0);

		assert_true(rc >= 0);
		/* Producers may hold tickets while descheduled (more threads than cores). */
		if (rc == 0)
			sched_yield();
		assert_true(mk_now_ns() - t0 < 20ull * 1000000000ull);
	}
}

static void test_init_bad_sizes_rejected(void **state)
{
	struct mk_cmdq_slot slots[8];
	struct mk_cmdq_ctrl ctrl;
	struct mk_cmdq q;

	assert_int_equal(mk_cmdq_init(&q, slots, &ctrl, 6, 0, NULL), -EINVAL);
	assert_int_equal(mk_cmdq_init(&q, slots, &ctrl, 1, 0, NULL), -EINVAL);
	assert_int_equal(mk_cmdq_init(&q, slots, &ctrl, 0, 0, NULL), -EINVAL);
	assert_int_equal(mk_cmdq_init(&q, NULL, &ctrl, 8, 0, NULL), -EINVAL);
	assert_int_equal(mk_cmdq_init(&q, slots, &ctrl, 8, 0, NULL), 0);
	mk_cmdq_fini(&q);
}

static void test_seq_compare_wraps(void **state)
{
	assert_true(mk_seq_after(0, 0xffffffffu));
	assert_true(mk_seq_after(5, 0xfffffff0u));
	assert_false(mk_seq_after(0xffffffffu, 0));
	assert_false(mk_seq_after(7, 7));
	assert_int_equal(mk_seq_dist(3, 0xfffffffeu), 5);
	assert_int_equal(mk_imm_signal(5) >> MK_IMM_KIND_SHIFT, MK_IMM_KIND_SIGNAL);
	assert_int_equal(mk_imm_signal(5) & MK_IMM_INDEX_MASK, 5);
}

/* A fresh queue (any start, the wrap included) shows no valid entry. */
static void test_fresh_queue_has_no_valid_slot(void **state)
{
	const uint32_t starts[] = { 0, 1, 0xfffffff0u, 0xffffffffu, 0x80000000u };

	for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
		struct qfix f;

		qfix_open(&f, 16, starts[i], 64);
		for (int k = 0; k < 4; k++)
			assert_int_equal(mk_proxy_progress(f.proxy, 0), 0);
		assert_int_equal(f.seen, 0);
		assert_int_equal(f.q.ctrl->tail, starts[i]);
		qfix_close(&f);
	}
}

static void run_producers(uint32_t nslots, uint32_t start, int nprod, uint64_t per, int batch)
{
	struct producer pr[MAX_PRODUCERS];
	pthread_t tid[MAX_PRODUCERS];
	struct qfix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	qfix_open(f, nslots, start, batch);
	for (int i = 0; i < nprod; i++) {
		pr[i] = (struct producer){
			.f = f, .id = (uint32_t)i, .count = per, .spin_limit = -1
		};
		assert_int_equal(pthread_create(&tid[i], NULL, producer_main, &pr[i]), 0);
	}
	drain_until(f, per * (uint64_t)nprod);
	for (int i = 0; i < nprod; i++) {
		pthread_join(tid[i], NULL);
		assert_true(pr[i].last >= 0);
		assert_int_equal(f->next_per_producer[i], per);
	}
	assert_int_equal(f->bad, 0);
	assert_int_equal(f->seen, per * (uint64_t)nprod);
	assert_int_equal(f->q.ctrl->tail, (uint32_t)(start + per * (uint64_t)nprod));
	assert_int_equal(f->q.ctrl->done, (uint32_t)(start + per * (uint64_t)nprod));
	assert_int_equal(mk_proxy_error(f->proxy), 0);
	qfix_close(f);
	free(f);
}

static void test_one_producer_order_kept(void **state)
{
	run_producers(64, 0, 1, 200000, 16);
}

static void test_many_producers_order_kept_per_producer(void **state)
{
	run_producers(32, 1000, 4, 20000, 8);
}

/* Start 1000 entries before 2^32 and cross it many laps over with a small ring. */
static void test_wrap_past_2_32(void **state)
{
	run_producers(16, 0xffffffffu - 1000, 1, 100000, 5);
	run_producers(64, 0xffffffffu, 2, 20000, 64);
}

/* Without a consumer the producer stops after exactly nslots entries; each batch frees that many.
 */
static void test_credits_back_pressure(void **state)
{
	struct producer pr;
	pthread_t tid;
	struct qfix f;
	uint64_t t0;

	qfix_open(&f, 8, 0xfffffffau, 3);
	pr = (struct producer){ .f = &f, .id = 0, .count = 20, .spin_limit = -1 };
	assert_int_equal(pthread_create(&tid, NULL, producer_main, &pr), 0);
	t0 = mk_now_ns();
	while (__atomic_load_n(&pr.pushed, __ATOMIC_ACQUIRE) < 8)
		assert_true(mk_now_ns() - t0 < 5000000000ull);
	usleep(20000);
	assert_int_equal(__atomic_load_n(&pr.pushed, __ATOMIC_ACQUIRE), 8); /* blocked */
	assert_int_equal(mk_proxy_progress(f.proxy, 0), 6);		    /* 3 read + 3 done */
	assert_int_equal(f.q.ctrl->tail, (uint32_t)(0xfffffffau + 3));
	t0 = mk_now_ns();
	while (__atomic_load_n(&pr.pushed, __ATOMIC_ACQUIRE) < 11)
		assert_true(mk_now_ns() - t0 < 5000000000ull);
	usleep(20000);
	assert_int_equal(__atomic_load_n(&pr.pushed, __ATOMIC_ACQUIRE), 11);
	drain_until(&f, 20);
	pthread_join(tid, NULL);
	assert_int_equal(f.bad, 0);
	qfix_close(&f);
}

/* A producer that cannot get a credit gives up after its spin limit instead of hanging. */
static void test_credit_wait_bounded(void **state)
{
	struct mk_cmdq_slot c = tagged(0, 0);
	struct qfix f;

	qfix_open(&f, 4, 0, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(mk_cmdq_push_host(&f.dev, &c, 1000), i);
	assert_int_equal(mk_cmdq_push_host(&f.dev, &c, 1000), -ETIMEDOUT);
	qfix_close(&f);
}

/* Entries waiting are taken `batch` at a time with one credit publication per burst. */
static void test_batching_one_credit_write_per_burst(void **state)
{
	struct mk_proxy_stats st;
	struct qfix f;

	qfix_open(&f, 1024, 77, 64);
	for (uint64_t n = 0; n < 1000; n++) {
		struct mk_cmdq_slot c = tagged(0, n);

		assert_true(mk_cmdq_push_host(&f.dev, &c, 0) >= 0);
	}
	assert_int_equal(mk_proxy_progress(f.proxy, 0), 128); /* 64 read + 64 completed */
	mk_proxy_get_stats(f.proxy, &st);
	assert_int_equal(st.cmds, 64);
	assert_int_equal(st.credit_writes, 1);
	assert_int_equal(f.q.ctrl->tail, 77 + 64);
	drain_until(&f, 1000);
	mk_proxy_get_stats(f.proxy, &st);
	assert_int_equal(st.cmds, 1000);
	assert_int_equal(st.batches, 16);
	assert_int_equal(st.credit_writes, 16);
	assert_int_equal(f.bad, 0);
	qfix_close(&f);
}

/* Local puts and signals: data first, then the signal, and `done` covers both. */
static void test_self_put_signal_lands(void **state)
{
	struct mk_cmdq_slot c = { .op = MK_CMD_PUT_SIGNAL,
				  .peer = 0,
				  .bytes = 16,
				  .src_off = 0,
				  .dst_off = 128,
				  .signal = 2 };
	struct qfix f;

	qfix_open(&f, 8, 0, 8);
	memcpy(f.heap, "0123456789abcdef", 16);
	assert_true(mk_cmdq_push_host(&f.dev, &c, 0) >= 0);
	while (f.q.ctrl->done != 1)
		assert_true(mk_proxy_progress(f.proxy, 0) >= 0);
	assert_memory_equal(f.heap + 128, "0123456789abcdef", 16);
	assert_int_equal(f.signals[2], 1);
	qfix_close(&f);
}

/* A command naming a rank outside the comm fails the proxy; the error reaches the producer. */
static void test_bad_command_fails_proxy_and_releases_producer(void **state)
{
	struct mk_cmdq_slot bad = { .op = MK_CMD_PUT, .peer = 9, .bytes = 8 };
	struct mk_cmdq_slot c = tagged(0, 0);
	struct qfix f;

	qfix_open(&f, 4, 0, 4);
	assert_true(mk_cmdq_push_host(&f.dev, &bad, 0) >= 0);
	assert_int_equal(mk_proxy_progress(f.proxy, 0), -EINVAL);
	assert_int_equal(mk_proxy_error(f.proxy), -EINVAL);
	assert_int_equal(f.q.ctrl->error, -EINVAL);
	/* Fill the ring: the next push sees the error instead of waiting for credits forever. */
	for (int i = 0; i < 4; i++)
		(void)mk_cmdq_push_host(&f.dev, &c, 0);
	assert_int_equal(mk_cmdq_push_host(&f.dev, &c, -1), -EPIPE);
	assert_int_equal(mk_proxy_progress(f.proxy, 0), -EINVAL); /* stays failed */
	qfix_close(&f);
}

/* Other malformed commands: unknown op, signal index and heap ranges out of bounds. */
static void test_malformed_commands_rejected(void **state)
{
	const struct mk_cmdq_slot bad[] = {
		{ .op = MK_CMD_OP_MAX },
		{ .op = MK_CMD_SIGNAL, .signal = 4 },
		{ .op = MK_CMD_PUT, .bytes = 257 },
		{ .op = MK_CMD_PUT, .bytes = 8, .src_off = 250 },
		{ .op = MK_CMD_PUT_SIGNAL, .bytes = 8, .dst_off = 1ull << 40 },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct qfix f;

		qfix_open(&f, 4, 0, 4);
		assert_true(mk_cmdq_push_host(&f.dev, &bad[i], 0) >= 0);
		assert_int_equal(mk_proxy_progress(f.proxy, 0), -EINVAL);
		qfix_close(&f);
	}
}

/* The threaded proxy: start, consume a stream from two producers, stop promptly. */
static void test_threaded_proxy_consumes_and_stops(void **state)
{
	struct producer pr[2];
	pthread_t tid[2];
	struct qfix f;
	uint64_t t0;

	qfix_open(&f, 128, 0xffffff00u, 32);
	assert_int_equal(mk_proxy_start(f.proxy), 0);
	for (int i = 0; i < 2; i++) {
		pr[i] = (struct producer){
			.f = &f, .id = (uint32_t)i, .count = 100000, .spin_limit = -1
		};
		assert_int_equal(pthread_create(&tid[i], NULL, producer_main, &pr[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(tid[i], NULL);
	t0 = mk_now_ns();
	while (__atomic_load_n(&f.q.ctrl->done, __ATOMIC_ACQUIRE) !=
	       (uint32_t)(0xffffff00u + 200000))
		assert_true(mk_now_ns() - t0 < 20000000000ull);
	mk_proxy_stop(f.proxy);
	assert_int_equal(f.bad, 0);
	assert_int_equal(f.seen, 200000);
	qfix_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_bad_sizes_rejected),
		cmocka_unit_test(test_seq_compare_wraps),
		cmocka_unit_test(test_fresh_queue_has_no_valid_slot),
		cmocka_unit_test(test_one_producer_order_kept),
		cmocka_unit_test(test_many_producers_order_kept_per_producer),
		cmocka_unit_test(test_wrap_past_2_32),
		cmocka_unit_test(test_credits_back_pressure),
		cmocka_unit_test(test_credit_wait_bounded),
		cmocka_unit_test(test_batching_one_credit_write_per_burst),
		cmocka_unit_test(test_self_put_signal_lands),
		cmocka_unit_test(test_bad_command_fails_proxy_and_releases_producer),
		cmocka_unit_test(test_malformed_commands_rejected),
		cmocka_unit_test(test_threaded_proxy_consumes_and_stops),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
