// SPDX-License-Identifier: Apache-2.0
/*
 * The rendezvous messaging engine over the in-process fake backend: ordering, sizes,
 * multi-receive tag matching, sequence wrap-around, striping, optional completion, flow control,
 * dead and silent peers, stale pointers. The eager path has its own file (test_rdv_eager.c); the
 * cases here that send before the receive is posted turn it off.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "fake_tp.h"
#include "mk/clock.h"
#include "mk/compiler.h"
#include "mk/param.h"
#include "mk/rdv.h"
#include "rdv_internal.h"
#include "rdv_pair.h"

static int setup(void **state)
{
	fake_tp_reset();
	unsetenv("MKERNEL_TIMEOUT");
	unsetenv("MKERNEL_KEEPALIVE");
	unsetenv("MKERNEL_STRIPE_MIN");
	unsetenv("MKERNEL_EAGER_BYTES");
	/* these tests pin the clear-to-send at the post (sender-side errors, CTS counts);
	 * test_rdv_eager covers the default, which holds it back for expected eager messages */
	setenv("MKERNEL_EAGER_CTS_WAIT", "0", 1);
	mk_param_reset_all();
	mk_rdv_set_initial_seq(1);
	return 0;
}

static void eager_off(void)
{
	setenv("MKERNEL_EAGER_BYTES", "0", 1);
	mk_param_reset_all();
}

static void test_rdv_send_recv_small_delivers_data_and_size(void **state)
{
	struct pair p;
	char sbuf[100], rbuf[4096];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	size_t size = 0;
	int tag = 7;
	void *data = rbuf;
	size_t cap = sizeof(rbuf);
	int src;

	eager_off();
	pair_open(&p);
	memset(sbuf, 0xab, sizeof(sbuf));
	memset(rbuf, 0, sizeof(rbuf));
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	/* the send cannot go before the receive announced its buffer */
	assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_null(sreq);
	assert_int_equal(mk_rdv_irecv(p.r, 1, &data, &cap, &tag, &rmr, false, &rreq), 0);
	assert_non_null(rreq);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &size, &src), 0);
	assert_int_equal(src, 0);
	assert_int_equal(size, sizeof(sbuf)); /* receive larger than send: the sent size */
	assert_memory_equal(rbuf, sbuf, sizeof(sbuf));
	assert_int_equal(rbuf[100], 0);
	assert_int_equal(mk_rdv_dereg(p.s, smr), 0);
	assert_int_equal(mk_rdv_dereg(p.r, rmr), 0);
	pair_close(&p);
}

/*
 * Immediates nobody on this connection sent (a stranger's writes reached the endpoints): dropped
 * on both sides, the connection and a transfer in progress carry on.
 */
static void test_rdv_stray_immediates_fail_nothing(void **state)
{
	struct pair p;
	char sbuf[100], rbuf[4096];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	struct mk_rdv_send *s;
	struct mk_rdv_recv *r;
	void *data = rbuf;
	size_t cap = sizeof(rbuf), size = 0;
	int tag = 7, src;

	pair_open(&p);
	s = container_of(p.s, struct mk_rdv_send, head);
	r = container_of(p.r, struct mk_rdv_recv, head);
	memset(sbuf, 0x5c, sizeof(sbuf));
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &data, &cap, &tag, &rmr, false, &rreq), 0);
	/* into the receiver: a sequence no receive has; into the sender: any immediate */
	assert_int_equal(s->cs.conn->ops->write(s->cs.conn, 0, NULL, 0, NULL, rmr->rkey.base,
						&rmr->rkey, true, 0x3ff, NULL),
			 0);
	assert_int_equal(r->cs.conn->ops->write(r->cs.conn, 0, NULL, 0, NULL, smr->rkey.base,
						&smr->rkey, true, 0x1234, NULL),
			 0);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &size, &src), 0);
	assert_int_equal(src, 0);
	assert_int_equal(size, sizeof(sbuf));
	assert_memory_equal(rbuf, sbuf, sizeof(sbuf));
	assert_int_equal(s->cs.error, 0);
	assert_int_equal(r->cs.error, 0);
	assert_int_equal(mk_rdv_dereg(p.s, smr), 0);
	assert_int_equal(mk_rdv_dereg(p.r, rmr), 0);
	pair_close(&p);
}

static void test_rdv_send_larger_than_recv_fails_both_sides(void **state)
{
	struct pair p;
	char sbuf[256], rbuf[128];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	void *data = rbuf;
	size_t cap = sizeof(rbuf), size;
	int tag = 0, src;

	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &data, &cap, &tag, &rmr, false, &rreq), 0);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &size, &src), -EMSGSIZE);
	assert_int_equal(src, -EMSGSIZE);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/* Deregister both buffers, close the pair, free the buffers. */
static void pair_close_free(struct pair *p, struct mk_mr *smr, struct mk_mr *rmr, char *sbuf,
			    char *rbuf)
{
	mk_rdv_dereg(p->s, smr);
	mk_rdv_dereg(p->r, rmr);
	pair_close(p);
	free(sbuf);
	free(rbuf);
}

/* 32 receives and 32 sends in flight; message i must land in receive i. */
static void run_in_flight(uint32_t first_seq, int rounds, size_t msg)
{
	enum { N = MK_RDV_MAX_REQUESTS };
	struct pair p;
	char *sbuf = malloc(N * msg), *rbuf = malloc(N * msg);
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq[N], *rreq[N];

	mk_rdv_set_initial_seq(first_seq);
	pair_open(&p);
	smr = reg(p.s, sbuf, N * msg);
	rmr = reg(p.r, rbuf, N * msg);
	for (int round = 0; round < rounds; round++) {
		for (int i = 0; i < N; i++) {
			void *d = rbuf + i * msg;
			size_t cap = msg;
			int tag = 1;

			memset(sbuf + i * msg, (round * N + i) & 0xff, msg);
			rreq[i] = NULL;
			assert_int_equal(
				mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq[i]), 0);
			assert_non_null(rreq[i]);
		}
		/* the 33rd receive does not fit: NULL, not an error */
		{
			struct mk_rdv_req *extra = NULL;
			void *d = rbuf;
			size_t cap = msg;
			int tag = 1;

			assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &extra),
					 0);
			assert_null(extra);
		}
		for (int i = 0; i < N; i++) {
			sreq[i] = NULL;
			for (int spin = 0; sreq[i] == NULL && spin < 1000; spin++)
				assert_int_equal(
					mk_rdv_isend(p.s, sbuf + i * msg, msg, 1, smr, &sreq[i]),
					0);
			assert_non_null(sreq[i]);
		}
		for (int i = 0; i < N; i++) {
			size_t got = 0;

			assert_int_equal(wait_both(sreq[i], rreq[i], &got, NULL), 0);
			assert_int_equal(got, msg);
			assert_int_equal((unsigned char)rbuf[i * msg + msg - 1],
					 (round * N + i) & 0xff);
		}
	}
	pair_close_free(&p, smr, rmr, sbuf, rbuf);
}

static void test_rdv_32_in_flight_keep_posting_order(void **state)
{
	run_in_flight(1, 3, 64);
}

static void test_rdv_sequence_wraps_past_2_pow_32(void **state)
{
	/* 100 groups across the 32-bit and the 10-bit immediate wrap */
	run_in_flight(0xffffffffu - 40, 4, 8);
}

static void test_rdv_multi_recv_routes_by_tag_and_looks_ahead(void **state)
{
	enum { NSUB = 4 };
	struct pair p;
	char sbuf[NSUB][64], rbuf[2][NSUB][128];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *rreq[2] = { NULL, NULL }, *sreq[2 * NSUB];
	int tags[NSUB] = { 10, 11, 12, 13 };
	size_t caps[NSUB] = { 128, 128, 128, 128 }, sizes[NSUB];
	/* tag 13 sends twice before tags 10..12 send: its second send must go to group 2 */
	int order[2 * NSUB] = { 13, 13, 12, 11, 10, 10, 11, 12 };
	struct mk_mr *mrs[NSUB];

	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	for (int i = 0; i < NSUB; i++) {
		mrs[i] = rmr;
		memset(sbuf[i], 0x40 + i, sizeof(sbuf[i]));
	}
	for (int g = 0; g < 2; g++) {
		void *d[NSUB] = { rbuf[g][0], rbuf[g][1], rbuf[g][2], rbuf[g][3] };

		assert_int_equal(mk_rdv_irecv(p.r, NSUB, d, caps, tags, mrs, false, &rreq[g]), 0);
		assert_non_null(rreq[g]);
	}
	memset(rbuf, 0, sizeof(rbuf));
	for (int k = 0; k < 2 * NSUB; k++) {
		int t = order[k] - 10;

		sreq[k] = NULL;
		while (sreq[k] == NULL)
			assert_int_equal(
				mk_rdv_isend(p.s, sbuf[t], 16 + t, order[k], smr, &sreq[k]), 0);
	}
	for (int k = 0; k < 2 * NSUB; k++)
		assert_int_equal(wait_both(sreq[k], NULL, NULL, NULL), 0);
	for (int g = 0; g < 2; g++) {
		assert_int_equal(wait_both(NULL, rreq[g], sizes, NULL), 0);
		for (int i = 0; i < NSUB; i++) {
			assert_int_equal(sizes[i], 16 + i);
			assert_int_equal(rbuf[g][i][0], 0x40 + i);
			assert_int_equal(rbuf[g][i][16 + i], 0);
		}
	}
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_rdv_multi_recv_unknown_tag_is_an_error(void **state)
{
	struct pair p;
	char buf[2][64];
	struct mk_mr *mr, *mrs[2];
	struct mk_rdv_req *rreq = NULL, *sreq = NULL;
	int tags[2] = { 1, 2 };
	size_t caps[2] = { 64, 64 };
	void *d[2] = { buf[0], buf[1] };

	pair_open(&p);
	mr = reg(p.r, buf, sizeof(buf));
	mrs[0] = mrs[1] = mr;
	assert_int_equal(mk_rdv_irecv(p.r, 2, d, caps, tags, mrs, false, &rreq), 0);
	assert_int_equal(mk_rdv_isend(p.s, buf, 8, 99, mr, &sreq), -EINVAL);
	assert_null(sreq);
	mk_rdv_dereg(p.r, mr);
	pair_close(&p);
}

/* The connection state of a receive comm, and the transport connection under it. */
static struct mk_rdv_conn_state *recv_cs(struct mk_rdv_comm *r)
{
	return &container_of(r, struct mk_rdv_recv, head)->cs;
}

static struct mk_conn *recv_conn(struct mk_rdv_comm *r)
{
	return recv_cs(r)->conn;
}

static void test_rdv_zero_bytes_striping_and_who_decides(void **state)
{
	size_t big = (size_t)3 << 20; /* 3 MiB over 4 lanes: 4 segments */
	char *sbuf = malloc(big), *rbuf = calloc(1, big);
	struct pair p;
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	size_t got = 1, cap = big;
	void *d = rbuf;
	int tag = 0, writes;

	fake_tp_faults.nlanes = 4;
	pair_open(&p);
	smr = reg(p.s, sbuf, big);
	rmr = reg(p.r, rbuf, big);
	for (size_t i = 0; i < big; i++)
		sbuf[i] = (char)(i * 7);
	/* zero bytes */
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, 0, tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	assert_int_equal(got, 0);
	/* striped */
	sreq = rreq = NULL;
	writes = fake_tp_writes();
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, big, tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	assert_int_equal(got, big);
	assert_memory_equal(sbuf, rbuf, big);
	assert_int_equal(fake_tp_writes() - writes, 1 + 4); /* one CTS + four segments */
	/* the receiver read the other lanes while the segments could come, and not after */
	assert_int_equal(fake_tp_unread_lane_writes(), 0);
	assert_int_equal(recv_conn(p.r)->lanes_wanted, 0);
	/*
	 * The receiver decides: a receive of at most its threshold leaves the other lanes unread
	 * and its CTS says so; a sender that would stripe the message (a smaller threshold of its
	 * own, 128 KiB here) sends it in one segment on lane 0.
	 */
	sreq = rreq = NULL;
	recv_cs(p.r)->stripe_min = big;
	writes = fake_tp_writes();
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	assert_int_equal(recv_conn(p.r)->lanes_wanted, 0);
	recv_cs(p.r)->stripe_min = 131072;
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, big, tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	assert_int_equal(got, big);
	assert_int_equal(fake_tp_writes() - writes, 1 + 1); /* its CTS and one segment */
	/* a wide receive keeps them read until its data is in, also where a small send fills it */
	sreq = rreq = NULL;
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	assert_int_equal(recv_conn(p.r)->lanes_wanted, 1);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, 100, tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	assert_int_equal(got, 100);
	assert_int_equal(recv_conn(p.r)->lanes_wanted, 0);
	assert_int_equal(fake_tp_unread_lane_writes(), 0);
	pair_close_free(&p, smr, rmr, sbuf, rbuf);
}

/* Segments (writes after the CTS) of one size-byte send into a receive of cap bytes. */
static int segments_of(struct pair *p, char *sbuf, struct mk_mr *smr, char *rbuf, struct mk_mr *rmr,
		       size_t size, size_t cap)
{
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	void *d = rbuf;
	size_t got = 0;
	int tag = 0, writes = fake_tp_writes();

	assert_int_equal(mk_rdv_irecv(p->r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p->s, sbuf, size, tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	assert_int_equal(got, size);
	return fake_tp_writes() - writes - 1;
}

/*
 * Where MKERNEL_STRIPE_MIN is unset the device says where striping starts (the socket
 * providers: 1 MiB); where it is set, it wins over the device.
 */
static void test_rdv_stripe_min_device_choice(void **state)
{
	size_t cap = (size_t)3 << 20;
	char *sbuf = calloc(1, cap), *rbuf = calloc(1, cap);
	struct mk_mr *smr, *rmr;
	struct pair p;

	fake_tp_faults.nlanes = 2;
	fake_tp_faults.stripe_min = 1u << 20;
	pair_open(&p);
	smr = reg(p.s, sbuf, cap);
	rmr = reg(p.r, rbuf, cap);
	assert_int_equal(segments_of(&p, sbuf, smr, rbuf, rmr, (size_t)1 << 20, cap), 1);
	assert_int_equal(segments_of(&p, sbuf, smr, rbuf, rmr, (size_t)2 << 20, cap), 2);
	pair_close_free(&p, smr, rmr, sbuf, rbuf);
	setenv("MKERNEL_STRIPE_MIN", "131072", 1);
	mk_param_reset_all();
	sbuf = calloc(1, cap);
	rbuf = calloc(1, cap);
	pair_open(&p);
	smr = reg(p.s, sbuf, cap);
	rmr = reg(p.r, rbuf, cap);
	assert_int_equal(segments_of(&p, sbuf, smr, rbuf, rmr, (size_t)1 << 20, cap), 2);
	assert_int_equal(fake_tp_unread_lane_writes(), 0);
	pair_close_free(&p, smr, rmr, sbuf, rbuf);
}

static void test_rdv_optional_completion_finishes_early_and_data_still_lands(void **state)
{
	struct pair p;
	char sbuf[64], rbuf[64];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	void *d = rbuf;
	size_t cap = sizeof(rbuf);
	int tag = 0, done = 0;

	eager_off(); /* an eager message would need our copy: no early finish then */
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	memset(sbuf, 0x5a, sizeof(sbuf));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, true, &rreq), 0);
	assert_int_equal(mk_rdv_test(rreq, &done, NULL), 0);
	assert_int_equal(done, 1); /* CTS out: NCCL polls flags in the data itself */
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, NULL, NULL, NULL), 0);
	/* the next receive reuses nothing still lingering and gets its data */
	rreq = NULL;
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	assert_non_null(rreq);
	assert_memory_equal(rbuf, sbuf, sizeof(sbuf));
	sreq = NULL;
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, NULL, NULL), 0);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_rdv_optional_completion_waits_for_data_when_target_must_poll(void **state)
{
	struct pair p;
	char sbuf[64], rbuf[64];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	void *d = rbuf;
	size_t cap = sizeof(rbuf), got = 0;
	int tag = 0, done = 0;

	fake_tp_faults.needs_poll = 1;
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	memset(sbuf, 0x6b, sizeof(sbuf));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, true, &rreq), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(mk_rdv_test(rreq, &done, NULL), 0);
	assert_int_equal(done, 0); /* nobody would poll for the data after an early finish */
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	assert_int_equal(got, sizeof(sbuf));
	assert_memory_equal(rbuf, sbuf, sizeof(sbuf));
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_rdv_backend_full_queue_is_retried(void **state)
{
	struct pair p;
	char sbuf[64], rbuf[64];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	void *d = rbuf;
	size_t cap = sizeof(rbuf), got;
	int tag = 0;

	eager_off(); /* so the send waits for the CTS */
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	memset(sbuf, 3, sizeof(sbuf));
	fake_tp_faults.eagain_writes = 1; /* the CTS write is refused once */
	/* the receive is posted all the same; its CTS goes out with the next progress */
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	assert_non_null(rreq);
	assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_null(sreq); /* no CTS yet */
	{
		int done = 0;

		assert_int_equal(mk_rdv_test(rreq, &done, NULL), 0);
		assert_int_equal(done, 0);
	}
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	assert_int_equal(got, sizeof(sbuf));
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_rdv_dead_peer_fails_pending_requests(void **state)
{
	struct pair p;
	char sbuf[64], rbuf[64];
	struct mk_mr *smr, *rmr;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	void *d = rbuf;
	size_t cap = sizeof(rbuf);
	int tag = 0, src;

	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	fake_tp_kill_peer(((struct mk_rdv_send *)p.s)->cs.conn);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
	wait_both(sreq, NULL, NULL, &src);
	assert_int_equal(src, -ECONNRESET);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_rdv_silent_peer_times_out(void **state)
{
	struct pair p;
	char rbuf[64];
	struct mk_mr *rmr;
	struct mk_rdv_req *rreq = NULL;
	void *d = rbuf;
	size_t cap = sizeof(rbuf);
	int tag = 0, done = 0, rc = 0;

	setenv("MKERNEL_TIMEOUT", "50", 1);
	setenv("MKERNEL_KEEPALIVE", "10", 1);
	mk_param_reset_all();
	pair_open(&p);
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	fake_tp_faults.blackhole = 1; /* probes vanish */
	/* bounded by the clock, not a call count: a loaded CI host runs fewer calls per ms */
	for (uint64_t end = mk_now_ms() + 10000; rc == 0 && mk_now_ms() < end;)
		rc = mk_rdv_test(rreq, &done, NULL);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_int_equal(done, 0);
	assert_true(((struct mk_rdv_recv *)p.r)->cs.probes >= 1);
	fake_tp_faults.blackhole = 0;
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/*
 * The layer trusts its arguments; its checks tell a caller's stale or foreign pointers apart
 * (the plugin runs them once, at the NCCL edge: test_net covers that edge).
 */
static void test_rdv_checks_tell_stale_and_foreign_pointers(void **state)
{
	struct pair p;
	struct mk_rdv_comm *stale;
	struct mk_rdv_req bogus, *rreq = NULL;
	uint8_t handle[MK_RDV_HANDLE_SIZE];
	struct mk_rdv_comm *l, *s = NULL;
	char buf[64];
	void *data = buf;
	size_t cap = sizeof(buf), got = 0;
	struct mk_mr *mr;
	int tag = 0;

	pair_open(&p);
	mr = reg(p.r, buf, sizeof(buf));
	assert_true(mk_mr_valid(mr));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &data, &cap, &tag, &mr, false, &rreq), 0);
	assert_non_null(rreq);
	/* a posted request passes; once test() reported it done, it is stale */
	assert_int_equal(mk_rdv_req_check(rreq), 0);
	{
		char sbuf[8] = { 0 };
		struct mk_mr *smr = reg(p.s, sbuf, sizeof(sbuf));
		struct mk_rdv_req *sreq = NULL;

		while (sreq == NULL)
			assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
		assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
		assert_int_equal(mk_rdv_dereg(p.s, smr), 0);
	}
	assert_int_equal(mk_rdv_req_check(rreq), -EBADF);
	/* a deregistered handle fails its check: the caller refuses it, nothing dereferences it */
	assert_int_equal(mk_rdv_dereg(p.r, mr), 0);
	assert_false(mk_mr_valid(mr));
	assert_false(mk_mr_valid(NULL));
	stale = p.s;
	assert_int_equal(mk_rdv_check(p.s, MK_RDV_SEND), 0);
	assert_int_equal(mk_rdv_check(p.s, MK_RDV_RECV), -EBADF);
	pair_close(&p);
	assert_int_equal(mk_rdv_check(stale, MK_RDV_SEND), -EBADF);
	assert_int_equal(mk_rdv_check(NULL, MK_RDV_SEND), -EBADF);
	memset(&bogus, 0x77, sizeof(bogus));
	assert_int_equal(mk_rdv_req_check(&bogus), -EBADF);
	assert_int_equal(mk_rdv_req_check(NULL), -EBADF);
	/* a handle whose trailer was corrupted is refused before any connection attempt */
	assert_int_equal(mk_rdv_listen(&fake_tp_ops, 0, handle, &l), 0);
	handle[MK_RDV_HANDLE_SIZE - 3] ^= 0x10;
	assert_int_equal(mk_rdv_connect(&fake_tp_ops, 0, handle, &s), -EINVAL);
	assert_null(s);
	assert_int_equal(mk_rdv_close(l), 0);
}

static void test_rdv_connect_to_a_closed_listener_times_out(void **state)
{
	uint8_t handle[MK_RDV_HANDLE_SIZE];
	struct mk_rdv_comm *l, *s = NULL;
	int rc = 0, i;

	setenv("MKERNEL_TIMEOUT", "20", 1); /* the fake counts connected() calls */
	mk_param_reset_all();
	assert_int_equal(mk_rdv_listen(&fake_tp_ops, 0, handle, &l), 0);
	assert_int_equal(mk_rdv_close(l), 0);
	for (i = 0; i < 1000 && rc == 0 && s == NULL; i++)
		rc = mk_rdv_connect(&fake_tp_ops, 0, handle, &s);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_null(s);
	assert_int_equal(fake_tp_live_regs(), 0);
}

static void test_rdv_close_with_requests_pending(void **state)
{
	struct pair p;
	char buf[64];
	struct mk_mr *rmr;
	struct mk_rdv_req *rreq = NULL;
	void *d = buf;
	size_t cap = sizeof(buf);
	int tag = 0;

	pair_open(&p);
	rmr = reg(p.r, buf, sizeof(buf));
	assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, false, &rreq), 0);
	/* receiver first, then the sender: neither waits for the other */
	assert_int_equal(mk_rdv_close(p.r), 0);
	assert_int_equal(mk_rdv_close(p.s), 0);
	assert_int_equal(mk_mr_put(rmr), 0);
	assert_int_equal(fake_tp_live_regs(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_rdv_send_recv_small_delivers_data_and_size, setup),
		cmocka_unit_test_setup(test_rdv_stray_immediates_fail_nothing, setup),
		cmocka_unit_test_setup(test_rdv_send_larger_than_recv_fails_both_sides, setup),
		cmocka_unit_test_setup(test_rdv_32_in_flight_keep_posting_order, setup),
		cmocka_unit_test_setup(test_rdv_sequence_wraps_past_2_pow_32, setup),
		cmocka_unit_test_setup(test_rdv_multi_recv_routes_by_tag_and_looks_ahead, setup),
		cmocka_unit_test_setup(test_rdv_multi_recv_unknown_tag_is_an_error, setup),
		cmocka_unit_test_setup(test_rdv_zero_bytes_striping_and_who_decides, setup),
		cmocka_unit_test_setup(test_rdv_stripe_min_device_choice, setup),
		cmocka_unit_test_setup(
			test_rdv_optional_completion_finishes_early_and_data_still_lands, setup),
		cmocka_unit_test_setup(
			test_rdv_optional_completion_waits_for_data_when_target_must_poll, setup),
		cmocka_unit_test_setup(test_rdv_backend_full_queue_is_retried, setup),
		cmocka_unit_test_setup(test_rdv_dead_peer_fails_pending_requests, setup),
		cmocka_unit_test_setup(test_rdv_silent_peer_times_out, setup),
		cmocka_unit_test_setup(test_rdv_checks_tell_stale_and_foreign_pointers, setup),
		cmocka_unit_test_setup(test_rdv_connect_to_a_closed_listener_times_out, setup),
		cmocka_unit_test_setup(test_rdv_close_with_requests_pending, setup),
	};

	return cmocka_run_group_tests_name("rdv", tests, NULL, NULL);
}
