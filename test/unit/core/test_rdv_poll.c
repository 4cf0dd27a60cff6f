// SPDX-License-Identifier: Apache-2.0
/*
 * CQ reads shared between the tests of one connection's requests: the policy as a pure function,
 * then over the fake backend that a sweep of tests over W unfinished requests reads the CQ once,
 * that one request tested in a loop reads every time, that a stale read answers nobody, that
 * data still flows when the caller only sweeps test() over a full window, and that a receive
 * that eager messages already taken in fill reads nothing at its post, and that a CQ read
 * reads the clock once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_tp.h"
#include "mk/core_params.h"
#include "mk/param.h"
#include "mk/rdv.h"
#include "rdv_internal.h"
#include "rdv_pair.h"

#define W 4

/*
 * Clock readings of the code under test: this definition stands in for the C library's (the
 * transport core is linked statically into this program), so a test can count them.
 */
static unsigned long clock_reads;

int clock_gettime(clockid_t id, struct timespec *ts)
{
	clock_reads++;
	return (int)syscall(SYS_clock_gettime, id, ts);
}

static int setup(void **state)
{
	(void)state;
	fake_tp_reset();
	unsetenv("MKERNEL_POLL_SHARE_NS");
	unsetenv("MKERNEL_EAGER_BYTES");
	/* CQ reads and clock readings are counted with the clear-to-send written at the post
	 * (the default holds it back for expected eager messages: test_rdv_eager) */
	setenv("MKERNEL_EAGER_CTS_WAIT", "0", 1);
	mk_param_reset_all();
	mk_rdv_set_initial_seq(1);
	return 0;
}

static void share_ns(const char *v)
{
	setenv("MKERNEL_POLL_SHARE_NS", v, 1);
	mk_param_reset_all();
}

static void test_poll_shared_policy(void **state)
{
	(void)state;
	/* nothing read since this request's last test: it must read */
	assert_false(mk_rdv_poll_shared(7, 7, 1000, 999, 5000));
	/* another read since, 1 us ago, window 5 us: answered by it */
	assert_true(mk_rdv_poll_shared(6, 7, 2000, 1000, 5000));
	/* that read is as old as the window or older: read again */
	assert_false(mk_rdv_poll_shared(6, 7, 6000, 1000, 5000));
	assert_false(mk_rdv_poll_shared(6, 7, 1000000, 1000, 5000));
	/* sharing off */
	assert_false(mk_rdv_poll_shared(6, 7, 1001, 1000, 0));
	/* the epoch wraps: only equality counts */
	assert_true(mk_rdv_poll_shared(UINT32_MAX, 0, 1001, 1000, 5000));
	assert_false(mk_rdv_poll_shared(0, 0, 1001, 1000, 5000));
}

/* W receives posted, nothing sent: W tests (one sweep) and how many CQ reads they made. */
static void sweep(struct mk_rdv_req **req, int n)
{
	for (int i = 0; i < n; i++) {
		int done = 1;

		assert_int_equal(mk_rdv_test(req[i], &done, NULL), 0);
		assert_int_equal(done, 0);
	}
}

static void post_recvs(struct pair *p, char *buf, struct mk_mr *mr, struct mk_rdv_req **req)
{
	for (int i = 0; i < W; i++) {
		void *d = buf + i * 64;
		size_t cap = 64;
		int tag = 0;

		req[i] = NULL;
		assert_int_equal(mk_rdv_irecv(p->r, 1, &d, &cap, &tag, &mr, false, &req[i]), 0);
		assert_non_null(req[i]);
	}
}

static void test_sweep_reads_once_and_one_request_always_reads(void **state)
{
	struct pair p;
	char rbuf[W * 64];
	struct mk_mr *rmr;
	struct mk_rdv_req *req[W];
	struct mk_rdv_recv *r;
	uint32_t polls;
	uint64_t shared;

	(void)state;
	share_ns("1000000000"); /* 1 s: the test's own pace never makes a read stale */
	pair_open(&p);
	r = (struct mk_rdv_recv *)p.r;
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	post_recvs(&p, rbuf, rmr, req);
	/* the first sweep: the first request reads, it answers the other three */
	sweep(req, W);
	polls = r->cs.polls;
	shared = r->cs.polls_shared;
	for (int k = 0; k < 3; k++)
		sweep(req, W);
	assert_int_equal(r->cs.polls - polls, 3);
	assert_int_equal(r->cs.polls_shared - shared, 3 * (W - 1));
	/* one request tested in a loop (NCCL tests the oldest): a read every time */
	polls = r->cs.polls;
	shared = r->cs.polls_shared;
	for (int k = 0; k < 5; k++)
		sweep(&req[2], 1);
	assert_int_equal(r->cs.polls - polls, 5);
	assert_int_equal(r->cs.polls_shared, shared);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_stale_read_and_sharing_off_read_every_test(void **state)
{
	struct pair p;
	char rbuf[W * 64];
	struct mk_mr *rmr;
	struct mk_rdv_req *req[W];
	struct mk_rdv_recv *r;
	struct timespec ts = { .tv_nsec = 5 * 1000 * 1000 };
	uint32_t polls;

	(void)state;
	share_ns("1000000"); /* 1 ms */
	pair_open(&p);
	r = (struct mk_rdv_recv *)p.r;
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	post_recvs(&p, rbuf, rmr, req);
	sweep(req, 1);
	polls = r->cs.polls;
	nanosleep(&ts, NULL); /* the read ages past the window */
	sweep(&req[1], 1);
	assert_int_equal(r->cs.polls - polls, 1);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);

	share_ns("0");
	fake_tp_reset();
	pair_open(&p);
	r = (struct mk_rdv_recv *)p.r;
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	post_recvs(&p, rbuf, rmr, req);
	polls = r->cs.polls;
	for (int k = 0; k < 3; k++)
		sweep(req, W);
	assert_int_equal(r->cs.polls - polls, 3 * W);
	assert_int_equal(r->cs.polls_shared, 0);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/*
 * A full window each way, the caller only sweeping test() over it (as a benchmark does), on a
 * backend where data lands only while the target polls, the sender acting every third sweep:
 * every message arrives intact and in order, and shared reads did answer tests (the fast path
 * ran).
 */
static void run_window(size_t size, uint64_t *shared_out)
{
	enum { NMSG = 64 };
	struct pair p;
	char *sbuf = malloc(W * size), *rbuf = calloc(W, size);
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq[W] = { 0 }, *rreq[W] = { 0 };
	int sent = 0, posted = 0, sdone = 0, rdone = 0, rseq[W] = { 0 };
	struct mk_rdv_send *s;
	struct mk_rdv_recv *r;

	fake_tp_faults.land_on_poll = 1;
	fake_tp_faults.needs_poll = 1;
	pair_open(&p);
	s = (struct mk_rdv_send *)p.s;
	r = (struct mk_rdv_recv *)p.r;
	smr = reg(p.s, sbuf, W * size);
	rmr = reg(p.r, rbuf, W * size);
	for (int it = 0; it < 200000 && (sdone < NMSG || rdone < NMSG); it++) {
		for (int w = 0; w < W; w++) {
			int done = 0;

			if (rreq[w] == NULL && posted < NMSG) {
				void *d = rbuf + (size_t)w * size;
				size_t cap = size;
				int tag = 0;

				assert_int_equal(
					mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq[w]),
					0);
				rseq[w] = posted;
				posted += rreq[w] != NULL;
			} else if (rreq[w] != NULL) {
				size_t got = 0;

				assert_int_equal(mk_rdv_test(rreq[w], &done, &got), 0);
				if (done) {
					/* one tag: the k-th receive posted gets the k-th send */
					assert_int_equal(got, size);
					assert_int_equal((unsigned char)rbuf[(size_t)w * size],
							 (unsigned char)(rseq[w] + 1));
					assert_int_equal((unsigned char)rbuf[(w + 1) * size - 1],
							 (unsigned char)(rseq[w] + 1));
					rreq[w] = NULL;
					rdone++;
				}
			}
			if (it % 3 != 0)
				continue; /* the sender lags: some receiver sweeps find nothing */
			if (sreq[w] == NULL && sent < NMSG) {
				memset(sbuf + (size_t)w * size, sent + 1, size);
				assert_int_equal(mk_rdv_isend(p.s, sbuf + (size_t)w * size, size, 0,
							      smr, &sreq[w]),
						 0);
				sent += sreq[w] != NULL;
			} else if (sreq[w] != NULL) {
				assert_int_equal(mk_rdv_test(sreq[w], &done, NULL), 0);
				if (done) {
					sreq[w] = NULL;
					sdone++;
				}
			}
		}
	}
	assert_int_equal(sdone, NMSG);
	assert_int_equal(rdone, NMSG);
	*shared_out = s->cs.polls_shared + r->cs.polls_shared;
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
	free(sbuf);
	free(rbuf);
}

static void test_window_flows_on_tests_alone(void **state)
{
	uint64_t shared = 0;

	(void)state;
	share_ns("1000000000");
	run_window(8, &shared); /* eager */
	assert_true(shared > 0);
	fake_tp_reset();
	run_window(64 * 1024, &shared); /* rendezvous: above MKERNEL_EAGER_BYTES */
	assert_true(shared > 0);
}

/* One receive of cap bytes, tag 0; it must be posted. */
static struct mk_rdv_req *post_one(struct pair *p, void *buf, size_t cap, struct mk_mr *mr)
{
	struct mk_rdv_req *req = NULL;
	int tag = 0;

	assert_int_equal(mk_rdv_irecv(p->r, 1, &buf, &cap, &tag, &mr, false, &req), 0);
	assert_non_null(req);
	return req;
}

/*
 * One read takes in every eager message that landed; while other receives are outstanding, the
 * receives posted after it that those messages fill read nothing more (on shm each read takes
 * the region lock the sender's writes need). A lone receive reads anyway, and a small receive
 * that nothing waiting fills reads and sends its CTS.
 */
static void test_irecv_filled_by_landed_messages_reads_nothing(void **state)
{
	enum { K = 3, MSG = 8 }; /* 2 K + 1 groups: fewer than a CTS batch */
	char sbuf[K][MSG], rbuf[K + 1][MSG];
	struct mk_rdv_req *sreq, *rreq[K + 1];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_recv *r;
	struct pair p;
	uint32_t polls;
	int writes;

	(void)state;
	fake_tp_faults.land_on_poll = 1;
	fake_tp_faults.needs_poll = 1;
	pair_open(&p);
	r = (struct mk_rdv_recv *)p.r;
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	memset(rbuf, 0, sizeof(rbuf));
	for (int round = 0; round < 2; round++) {
		for (int k = 0; k < K; k++) {
			memset(sbuf[k], round * K + k + 1, MSG);
			sreq = NULL;
			while (sreq == NULL)
				assert_int_equal(mk_rdv_isend(p.s, sbuf[k], MSG, 0, smr, &sreq), 0);
			assert_true(sreq->eager);
			assert_int_equal(wait_both(sreq, NULL, NULL, NULL), 0);
		}
		polls = r->cs.polls;
		writes = fake_tp_writes();
		for (int k = 0; k < K; k++) {
			size_t got = 0;
			int done = 0;

			rreq[k] = post_one(&p, rbuf[k], MSG, rmr);
			assert_true(rreq[k]->cts_lazy);
			if (round == 1) {
				/* each alone: a read per receive, though each finds its message */
				assert_int_equal(r->cs.polls - polls, (uint32_t)k + 1);
				assert_int_equal(mk_rdv_test(rreq[k], &done, &got), 0);
				assert_int_equal(done, 1);
				assert_int_equal(got, MSG);
				continue;
			}
			/* the first receive's read landed all K; the others find theirs waiting */
			assert_int_equal(r->cs.polls - polls, 1);
		}
		for (int k = 0; round == 0 && k < K; k++) {
			size_t got = 0;
			int done = 0;

			assert_int_equal(mk_rdv_test(rreq[k], &done, &got), 0);
			assert_int_equal(done, 1);
			assert_int_equal(got, MSG);
		}
		for (int k = 0; k < K; k++) {
			assert_int_equal(rbuf[k][0], round * K + k + 1);
			assert_int_equal(rbuf[k][MSG - 1], round * K + k + 1);
		}
		assert_int_equal(fake_tp_writes() - writes, 0); /* every CTS held back */
	}
	/* nothing waits for this one: it reads, finds nothing, and its CTS goes */
	polls = r->cs.polls;
	rreq[K] = post_one(&p, rbuf[K], MSG, rmr);
	assert_false(rreq[K]->cts_lazy);
	assert_int_equal(r->cs.polls - polls, 1);
	assert_int_equal(fake_tp_writes() - writes, 1);
	memset(sbuf[0], 0x5a, MSG);
	sreq = NULL;
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf[0], MSG, 0, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq[K], NULL, NULL), 0);
	assert_int_equal(rbuf[K][0], 0x5a);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/* W receives posted, nothing sent, one sweep of tests done: its first test read the CQ. */
struct idle {
	struct pair p;
	char rbuf[W * 64];
	struct mk_mr *rmr;
	struct mk_rdv_req *req[W];
	struct mk_rdv_recv *r;
};

static void idle_open(struct idle *t)
{
	pair_open(&t->p);
	t->r = (struct mk_rdv_recv *)t->p.r;
	t->rmr = reg(t->p.r, t->rbuf, sizeof(t->rbuf));
	post_recvs(&t->p, t->rbuf, t->rmr, t->req);
	sweep(t->req, W);
}

static void idle_close(struct idle *t)
{
	mk_rdv_dereg(t->p.r, t->rmr);
	pair_close(&t->p);
}

/* Nothing heard for longer than MKERNEL_KEEPALIVE: the next test of req probes the peer. */
static void expect_probe(struct mk_rdv_recv *r, struct mk_rdv_req *req)
{
	uint64_t probes = r->cs.probes;

	r->cs.last_event_ms -= (uint64_t)mk_param_keepalive_ms() + 1;
	sweep(&req, 1);
	assert_int_equal(r->cs.probes, probes + 1);
}

/*
 * Tests of unfinished requests read the clock at most once each: the others once to age the
 * shared read, the request that reads the CQ not at all while its reads hear nothing (the core
 * stamps a quiet read only every 16th: mk_rdv_polled); the liveness check after them takes that
 * reading instead of its own (it still probes a quiet peer on time).
 */
static void test_idle_sweep_reads_the_clock_once_per_test(void **state)
{
	struct idle t;
	unsigned long before;
	uint64_t shared;

	(void)state;
	share_ns("1000000000");
	idle_open(&t);
	sweep(t.req, W); /* what the posts' CTS writes left to hear */
	t.r->cs.quiet_reads = 0;
	shared = t.r->cs.polls_shared;
	before = clock_reads;
	sweep(t.req, W);
	assert_int_equal(t.r->cs.polls_shared - shared, W - 1);
	assert_int_equal(clock_reads - before, W - 1);
	expect_probe(t.r, t.req[0]);
	idle_close(&t);
}

/*
 * A CQ read takes at most one clock reading, not one in the backend and another in the core: a
 * backend whose poll reads the clock (ofi does, for its watchdog and stall checks) lends that
 * reading to the read's stamp. Behind a backend that does not, the core reads the clock for a
 * read that heard something and for every 16th quiet one: a caller spinning on a test read it
 * at every test, a system call each where the clock has no vDSO path. One request tested in a
 * loop reads the CQ at every test either way.
 */
static void test_cq_read_reads_the_clock_once(void **state)
{
	struct idle t;
	unsigned long before;
	uint64_t stamp;
	uint32_t polls;

	(void)state;
	idle_open(&t);
	sweep(t.req, W);     /* what the posts' CTS writes left to hear */
	sweep(&t.req[2], 1); /* from here on its epoch is the latest: no check for a shared read */
	for (int backend_reads = 0; backend_reads < 2; backend_reads++) {
		fake_tp_faults.poll_reads_clock = backend_reads;
		t.r->cs.quiet_reads = 0;
		stamp = t.r->cs.last_poll_ns;
		polls = t.r->cs.polls;
		before = clock_reads;
		for (int k = 0; k < 15; k++)
			sweep(&t.req[2], 1);
		assert_int_equal(t.r->cs.polls - polls, 15);
		assert_int_equal(clock_reads - before, backend_reads ? 15 : 0);
		if (!backend_reads)
			assert_true(t.r->cs.last_poll_ns == stamp); /* quiet reads kept the stamp */
		for (int k = 0; k < 17; k++)
			sweep(&t.req[2], 1);
		assert_int_equal(clock_reads - before, backend_reads ? 32 : 2);
		/* the stamp is the backend's reading when it took one */
		if (backend_reads)
			assert_true(t.r->cs.last_poll_ns == t.r->cs.conn->polled_ns);
		else
			assert_true(t.r->cs.conn->polled_ns == 0 && t.r->cs.last_poll_ns > stamp);
	}
	/* the liveness check runs on the lent reading too: a quiet peer is probed */
	expect_probe(t.r, t.req[2]);
	idle_close(&t);
}

/*
 * A sign of life stamped from a fresher reading than the connection's last stamp (a read's
 * stamp lags the events it delivered) is not a wait of 2^64 ms: no probe, no timeout.
 */
static void test_keepalive_takes_a_later_sign_of_life_as_now(void **state)
{
	struct idle t;
	uint64_t probes;

	(void)state;
	idle_open(&t);
	probes = t.r->cs.probes;
	t.r->cs.last_event_ms = t.r->cs.now_ns / 1000000u + 5;
	mk_rdv_keepalive(&t.r->cs, true);
	assert_int_equal(t.r->cs.probes, probes);
	assert_int_equal(t.r->cs.error, 0);
	idle_close(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_poll_shared_policy),
		cmocka_unit_test_setup(test_sweep_reads_once_and_one_request_always_reads, setup),
		cmocka_unit_test_setup(test_stale_read_and_sharing_off_read_every_test, setup),
		cmocka_unit_test_setup(test_window_flows_on_tests_alone, setup),
		cmocka_unit_test_setup(test_irecv_filled_by_landed_messages_reads_nothing, setup),
		cmocka_unit_test_setup(test_idle_sweep_reads_the_clock_once_per_test, setup),
		cmocka_unit_test_setup(test_cq_read_reads_the_clock_once, setup),
		cmocka_unit_test_setup(test_keepalive_takes_a_later_sign_of_life_as_now, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
