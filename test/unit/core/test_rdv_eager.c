// SPDX-License-Identifier: Apache-2.0
/*
 * The eager path of the rendezvous engine over the in-process fake backend: sends before their
 * receive, credits running out (then the rendezvous, never a block), NCCL's order, tags and
 * multi-receives against a reference model under manual progress and reordered delivery, a
 * message too large for its receive, sequence wrap, optional receives, devices that may hand
 * out GPU memory, and the guard that keeps the CTS ring from overrunning a slow sender.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_tp.h"
#include "mk/clock.h"
#include "mk/param.h"
#include "mk/rdv.h"
#include "rdv_internal.h"
#include "rdv_pair.h"

static int setup(void **state)
{
	fake_tp_reset();
	unsetenv("MKERNEL_EAGER_BYTES");
	unsetenv("MKERNEL_STRIPE_MIN");
	unsetenv("MKERNEL_TIMEOUT");
	unsetenv("MKERNEL_KEEPALIVE");
	unsetenv("MKERNEL_EAGER_CTS_WAIT");
	mk_param_reset_all();
	mk_rdv_set_initial_seq(1);
	return 0;
}

/* The clear-to-send written at the post (MKERNEL_EAGER_CTS_WAIT=0), for the cases about it. */
static void cts_at_post(void)
{
	setenv("MKERNEL_EAGER_CTS_WAIT", "0", 1);
	mk_param_reset_all();
}

static struct mk_rdv_send *send_of(const struct pair *p)
{
	return container_of(p->s, struct mk_rdv_send, head);
}

static struct mk_rdv_recv *recv_of(const struct pair *p)
{
	return container_of(p->r, struct mk_rdv_recv, head);
}

static uint8_t pattern(size_t i, unsigned seed)
{
	return (uint8_t)(i * 31 + seed * 7 + 1);
}

static void fill(char *b, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (char)pattern(i, seed);
}

static void check(const char *b, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if ((uint8_t)b[i] != pattern(i, seed))
			fail_msg("byte %zu of message %u is 0x%02x, want 0x%02x", i, seed,
				 (uint8_t)b[i], pattern(i, seed));
}

static struct mk_rdv_req *post_recv(struct pair *p, void *buf, size_t cap, int tag,
				    struct mk_mr *mr)
{
	struct mk_rdv_req *req = NULL;

	assert_int_equal(mk_rdv_irecv(p->r, 1, &buf, &cap, &tag, &mr, false, &req), 0);
	return req;
}

static void test_eager_send_goes_before_its_receive(void **state)
{
	char sbuf[100], rbuf[4096] = { 0 };
	struct mk_rdv_req *sreq = NULL, *rreq;
	struct mk_mr *smr, *rmr;
	size_t got = 0;
	int done = 0, writes;
	struct pair p;

	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	fill(sbuf, sizeof(sbuf), 3);
	writes = fake_tp_writes();
	/* no receive posted, no CTS: the message still goes, and the buffer is free at once */
	assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), 1, smr, &sreq), 0);
	assert_non_null(sreq);
	assert_int_equal(mk_rdv_test(sreq, &done, &got), 0);
	assert_int_equal(done, 1);
	assert_int_equal(got, sizeof(sbuf));
	assert_int_equal(send_of(&p)->eager.sent, 1);
	memset(sbuf, 0, sizeof(sbuf));
	rreq = post_recv(&p, rbuf, sizeof(rbuf), 1, rmr);
	assert_non_null(rreq);
	assert_int_equal(wait_both(NULL, rreq, &got, NULL), 0);
	assert_int_equal(got, 100);
	check(rbuf, 100, 3);
	assert_int_equal(rbuf[100], 0);
	assert_int_equal(recv_of(&p)->eager.copied, 1);
	/*
	 * One eager write, no data write into the receive buffer, and no CTS yet: the message
	 * filled the receive at its post, so its CTS waits to ride with a later group's.
	 */
	assert_int_equal(fake_tp_writes() - writes, 1);
	assert_int_equal(recv_of(&p)->cts_next, rreq->seq);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/*
 * Receives that eager messages fill at their post hold their CTS back: the held groups go in one
 * write once the device's batch (props.cts_batch, else 8) waits, or with the next group that needs
 * a CTS, in runs that never cross the wrap of the sender's ring and of the receiver's staging,
 * which wraps with it (before group 1 mod 64). No credit write goes between: the CTS entries carry
 * the credits. N receives from group 60; a write goes at the posts of the groups in at[], after
 * them batch - left groups wait.
 */
static void batch_cts_case(uint32_t batch, const uint32_t *at, int nat, uint32_t left)
{
	enum { MSG = 64, N = 100, FIRST = 60 };
	static char sbuf[MSG], rbuf[N + 1][MSG];
	struct mk_rdv_req *sreq, *rreq;
	struct mk_mr *smr, *rmr;
	struct mk_rdv_recv *r;
	size_t got = 0;
	int writes;
	struct pair p;

	cts_at_post(); /* the last receive, expecting nothing, writes its CTS at once */
	fake_tp_faults.cts_batch = batch == MK_RDV_CTS_BATCH_DEFAULT ? 0 : batch;
	mk_rdv_set_initial_seq(FIRST);
	pair_open(&p);
	r = recv_of(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	for (int i = 0; i < N; i++) {
		fill(sbuf, MSG, (unsigned)i);
		sreq = NULL;
		while (sreq == NULL)
			assert_int_equal(mk_rdv_isend(p.s, sbuf, MSG, 0, smr, &sreq), 0);
		assert_true(sreq->eager); /* held groups are full: no CTS entry is free */
		assert_int_equal(wait_both(sreq, NULL, NULL, NULL), 0);
		writes = fake_tp_writes();
		rreq = post_recv(&p, rbuf[i], MSG, 0, rmr);
		assert_true(rreq->cts_lazy);
		/* every earlier group is done: matching started at this one, not the frontier */
		assert_int_equal(r->eager.open_from, rreq->seq);
		bool due = false;

		for (int k = 0; k < nat; k++)
			due |= rreq->seq == at[k];
		assert_int_equal(fake_tp_writes() - writes, due ? 1 : 0);
		assert_true(r->next_seq - r->cts_next < batch);
		assert_int_equal(wait_both(NULL, rreq, &got, NULL), 0);
		assert_int_equal(got, MSG);
		check(rbuf[i], MSG, (unsigned)i);
	}
	assert_int_equal(r->cts_next, FIRST + N - left);
	/* nothing waits for this one: its CTS goes at once, the held groups with it */
	writes = fake_tp_writes();
	rreq = post_recv(&p, rbuf[N], MSG, 0, rmr);
	assert_false(rreq->cts_lazy);
	assert_int_equal(fake_tp_writes() - writes, 1);
	assert_int_equal(r->cts_next, r->next_seq);
	fill(sbuf, MSG, N);
	sreq = NULL;
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, MSG, 0, smr, &sreq), 0);
	assert_false(sreq->eager); /* the CTS was here: straight into the receive buffer */
	assert_int_equal(send_of(&p)->seen, FIRST + N + 1);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	check(rbuf[N], MSG, N);
	assert_int_equal(recv_of(&p)->eager.copied, N);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_eager_filled_receives_batch_their_cts(void **state)
{
	/* 8, the default: [60,65) up to the wrap, then 8 at a time; 153..159 left */
	static const uint32_t at8[] = { 67, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152 };
	/* 32, the socket providers': [60,65) up to the wrap, then 32 at a time; 129..159 left */
	static const uint32_t at32[] = { 91, 96, 128 };

	(void)state;
	batch_cts_case(MK_RDV_CTS_BATCH_DEFAULT, at8, (int)MK_ARRAY_SIZE(at8), 7);
	batch_cts_case(32, at32, (int)MK_ARRAY_SIZE(at32), 31);
}

/* A CTS that is already here wins: the data goes straight into the receive buffer. */
static void test_eager_yields_to_a_cts_already_here(void **state)
{
	char sbuf[64], rbuf[64];
	struct mk_rdv_req *sreq = NULL, *rreq;
	struct mk_mr *smr, *rmr;
	size_t got = 0;
	struct pair p;

	cts_at_post();
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	fill(sbuf, sizeof(sbuf), 4);
	rreq = post_recv(&p, rbuf, sizeof(rbuf), 0, rmr);
	while (sreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), 0, smr, &sreq), 0);
	assert_false(sreq->eager);
	assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
	check(rbuf, sizeof(rbuf), 4);
	assert_int_equal(send_of(&p)->eager.sent, 0);
	assert_int_equal(recv_of(&p)->eager.copied, 0);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

static void test_eager_off_and_above_the_limit_wait_for_the_cts(void **state)
{
	char *sbuf = calloc(1, 8193);
	struct mk_rdv_req *sreq = NULL;
	struct mk_mr *smr;
	struct pair p;

	pair_open(&p);
	smr = reg(p.s, sbuf, 8193);
	/* one byte over MKERNEL_EAGER_BYTES (8192 by default) */
	assert_int_equal(mk_rdv_isend(p.s, sbuf, 8193, 0, smr, &sreq), 0);
	assert_null(sreq);
	mk_rdv_dereg(p.s, smr);
	pair_close(&p);
	setenv("MKERNEL_EAGER_BYTES", "0", 1);
	mk_param_reset_all();
	pair_open(&p);
	smr = reg(p.s, sbuf, 8193);
	assert_int_equal(mk_rdv_isend(p.s, sbuf, 1, 0, smr, &sreq), 0);
	assert_null(sreq);
	assert_int_equal(send_of(&p)->eager.nslots, 0);
	assert_null(recv_of(&p)->eager.slots);
	mk_rdv_dereg(p.s, smr);
	pair_close(&p);
	free(sbuf);
}

/*
 * The eager size: MKERNEL_EAGER_BYTES when set (0 turns it off, above 65536 is clamped); unset
 * (-1), the device's preference (props.eager_bytes, 65536 on tcp;ofi_rxm), else 8192. A comm
 * takes it from its device: with a preference of 16384 a 12 KiB send goes eagerly, without one
 * it waits for the clear-to-send.
 */
static void test_eager_bytes_from_env_device_or_default(void **state)
{
	struct mk_dev_props props = { .eager_bytes = 65536 };
	char *sbuf = calloc(1, 12288);
	struct mk_rdv_req *sreq = NULL;
	struct mk_mr *smr;
	struct pair p;

	assert_int_equal(mk_rdv_eager_bytes(&props), 65536);
	props.eager_bytes = 0;
	assert_int_equal(mk_rdv_eager_bytes(&props), MK_RDV_EAGER_DEFAULT);
	assert_int_equal(mk_rdv_eager_bytes(NULL), MK_RDV_EAGER_DEFAULT);
	/* a device's write limit takes the header off the default, not off what the user set */
	props.eager_write_max = 8192;
	assert_int_equal(mk_rdv_eager_bytes(&props), 8192 - MK_RDV_EAGER_HDR);
	props.eager_write_max = 16384;
	assert_int_equal(mk_rdv_eager_bytes(&props), MK_RDV_EAGER_DEFAULT);
	setenv("MKERNEL_EAGER_BYTES", "8192", 1);
	mk_param_reset_all();
	props.eager_write_max = 8192;
	assert_int_equal(mk_rdv_eager_bytes(&props), 8192);
	props.eager_write_max = 0;
	setenv("MKERNEL_EAGER_BYTES", "4096", 1);
	mk_param_reset_all();
	props.eager_bytes = 65536;
	assert_int_equal(mk_rdv_eager_bytes(&props), 4096);
	setenv("MKERNEL_EAGER_BYTES", "0", 1);
	mk_param_reset_all();
	assert_int_equal(mk_rdv_eager_bytes(&props), 0);
	setenv("MKERNEL_EAGER_BYTES", "1000000", 1);
	mk_param_reset_all();
	assert_int_equal(mk_rdv_eager_bytes(&props), MK_RDV_EAGER_MAX);
	unsetenv("MKERNEL_EAGER_BYTES");
	mk_param_reset_all();

	fake_tp_faults.eager_bytes = 16384;
	pair_open(&p);
	smr = reg(p.s, sbuf, 12288);
	assert_int_equal(mk_rdv_isend(p.s, sbuf, 12288, 0, smr, &sreq), 0);
	assert_non_null(sreq); /* eager: no receive needed */
	assert_int_equal(send_of(&p)->eager.sent, 1);
	mk_rdv_dereg(p.s, smr);
	pair_close(&p);
	fake_tp_faults.eager_bytes = 0;
	pair_open(&p);
	smr = reg(p.s, sbuf, 12288);
	sreq = NULL;
	assert_int_equal(mk_rdv_isend(p.s, sbuf, 12288, 0, smr, &sreq), 0);
	assert_null(sreq); /* above 8192: waits for the receiver's clear-to-send */
	mk_rdv_dereg(p.s, smr);
	pair_close(&p);
	free(sbuf);
}

/* A receiver whose device may hand it GPU memory offers no bounce slots (memcpy copies out). */
static void test_eager_not_offered_where_receives_may_be_gpu_memory(void **state)
{
	char sbuf[8] = { 0 };
	struct mk_rdv_req *sreq = NULL;
	struct mk_mr *smr;
	struct pair p;

	fake_tp_faults.ptr_cuda = 1;
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), 0, smr, &sreq), 0);
	assert_null(sreq);
	assert_int_equal(send_of(&p)->eager.nslots, 0);
	mk_rdv_dereg(p.s, smr);
	pair_close(&p);
}

/*
 * Out of credits the sender gets no request (never a block) until credits come back: a CTS
 * alone does not help while eager messages still in the receiver's slots are its owners.
 * Credits come back by the credit word once the receiver copied half a ring out.
 */
static void test_eager_credits_run_out_then_no_block(void **state)
{
	enum { N = MK_RDV_EAGER_SLOTS + 1 };
	/*
	 * Receives larger than an eager message: their post does not look for messages that
	 * landed (it would copy them out, and the CTS would carry the credits at once).
	 */
	static char sbuf[N][32], rbuf[N][2 * 8192];
	struct mk_rdv_req *sreq[N] = { NULL }, *rq[N];
	struct mk_mr *smr, *rmr;
	size_t got;
	struct pair p;
	int k = MK_RDV_EAGER_SLOTS;

	fake_tp_faults.land_on_poll = 1; /* manual progress, as tcp and shm */
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	for (int i = 0; i < N; i++)
		fill(sbuf[i], 32, (unsigned)i);
	for (int i = 0; i < k; i++) {
		assert_int_equal(mk_rdv_isend(p.s, sbuf[i], 32, 0, smr, &sreq[i]), 0);
		assert_true(sreq[i] != NULL && sreq[i]->eager);
	}
	for (int spin = 0; spin < 100; spin++) {
		assert_int_equal(mk_rdv_isend(p.s, sbuf[k], 32, 0, smr, &sreq[k]), 0);
		assert_null(sreq[k]); /* no credit, no CTS: not now, and no block */
	}
	/* 32 receives posted, none tested: their CTS belong to the first 32 eager messages */
	for (int i = 0; i < MK_RDV_MAX_REQUESTS; i++) {
		rq[i] = post_recv(&p, rbuf[i], sizeof(rbuf[i]), 0, rmr);
		assert_non_null(rq[i]);
	}
	for (int spin = 0; spin < 100; spin++) {
		assert_int_equal(mk_rdv_isend(p.s, sbuf[k], 32, 0, smr, &sreq[k]), 0);
		assert_null(sreq[k]);
	}
	assert_int_equal(send_of(&p)->eager.npend, MK_RDV_EAGER_SLOTS - MK_RDV_MAX_REQUESTS);
	/* the receiver copies them out: half a ring, so a credit write */
	for (int i = 0; i < MK_RDV_MAX_REQUESTS; i++) {
		assert_int_equal(wait_both(NULL, rq[i], &got, NULL), 0);
		assert_int_equal(got, 32);
		check(rbuf[i], 32, (unsigned)i);
	}
	while (sreq[k] == NULL)
		assert_int_equal(mk_rdv_isend(p.s, sbuf[k], 32, 0, smr, &sreq[k]), 0);
	assert_true(sreq[k]->eager);
	assert_int_equal(send_of(&p)->eager.sent, MK_RDV_EAGER_SLOTS + 1);
	for (int i = MK_RDV_MAX_REQUESTS; i < N; i++) {
		rq[i] = NULL;
		while (rq[i] == NULL) {
			rq[i] = post_recv(&p, rbuf[i], sizeof(rbuf[i]), 0, rmr);
			if (rq[i] == NULL) /* 32 outstanding: take the oldest */
				assert_int_equal(
					wait_both(NULL, rq[i - MK_RDV_MAX_REQUESTS], NULL, NULL),
					0);
		}
	}
	for (int i = N - MK_RDV_MAX_REQUESTS; i < N; i++)
		assert_int_equal(wait_both(NULL, rq[i], NULL, NULL), 0);
	for (int i = 0; i < N; i++) {
		check(rbuf[i], 32, (unsigned)i);
		assert_int_equal(wait_both(sreq[i], NULL, NULL, NULL), 0);
	}
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/*
 * NCCL's matching, as a reference: each send, in posting order, takes the first sub-receive,
 * in posting order of the groups, that is free and has its tag (any, in a group of one).
 */
#define MODEL_GROUPS 80
#define MODEL_SENDS  (MODEL_GROUPS * 4)

struct model {
	int ngroups, nsends;
	int n[MODEL_GROUPS]; /* group g's sub-receives */
	int tag[MODEL_GROUPS][MK_RDV_MAX_RECVS];
	int stag[MODEL_SENDS]; /* send s's tag */
	size_t ssize[MODEL_SENDS];
	int dest_g[MODEL_SENDS], dest_i[MODEL_SENDS]; /* where send s lands */
};

static bool model_assign(struct model *m)
{
	uint8_t used[MODEL_GROUPS] = { 0 };

	for (int s = 0; s < m->nsends; s++) {
		m->dest_g[s] = -1;
		for (int g = 0; g < m->ngroups && m->dest_g[s] < 0; g++) {
			for (int i = 0; i < m->n[g]; i++) {
				if ((used[g] & (1u << i)) ||
				    (m->n[g] > 1 && m->tag[g][i] != m->stag[s]))
					continue;
				used[g] |= (uint8_t)(1u << i);
				m->dest_g[s] = g;
				m->dest_i[s] = i;
				break;
			}
		}
		if (m->dest_g[s] < 0)
			return false;
	}
	for (int g = 0; g < m->ngroups; g++)
		if (used[g] != (uint8_t)((1u << m->n[g]) - 1))
			return false;
	return true;
}

/* around the eager limit (8192) and the striping threshold (set to 16384 below) */
static const size_t model_sizes[] = { 0, 1, 100, 4096, 8192, 8193, 16385, 40000 };

/*
 * Groups of nsub sub-receives whose tags are the same peers' (10..) in a shuffled order per
 * group, as NCCL's shared connections group them; their sends posted in an order NCCL may use
 * (a tag runs ahead into later groups); sizes on both sides of the eager limit and of the
 * striping threshold. With one sub-receive, tags are anything: any send fills it.
 */
static void model_make(struct model *m, unsigned seed, int nsub)
{
	srand(seed);
	do {
		m->ngroups = MODEL_GROUPS / 2 + rand() % (MODEL_GROUPS / 2);
		m->nsends = 0;
		for (int g = 0; g < m->ngroups; g++) {
			int tags[4] = { 10, 11, 12, 13 };

			m->n[g] = nsub;
			for (int i = nsub - 1; i > 0; i--) {
				int j = rand() % (i + 1), t = tags[i];

				tags[i] = tags[j];
				tags[j] = t;
			}
			for (int i = 0; i < m->n[g]; i++) {
				m->tag[g][i] = nsub == 1 ? 10 + rand() % 4 : tags[i];
				m->stag[m->nsends + i] = nsub == 1 ? 10 + rand() % 4 : tags[i];
			}
			m->nsends += m->n[g];
		}
		/* adjacent swaps that keep every group fillable */
		for (int k = 0; k < m->nsends * 2; k++) {
			int a = rand() % (m->nsends - 1), t = m->stag[a];

			m->stag[a] = m->stag[a + 1];
			m->stag[a + 1] = t;
			if (!model_assign(m)) {
				m->stag[a + 1] = m->stag[a];
				m->stag[a] = t;
			}
		}
	} while (!model_assign(m));
	for (int s = 0; s < m->nsends; s++)
		m->ssize[s] = model_sizes[rand() % (int)MK_ARRAY_SIZE(model_sizes)];
}

/*
 * Sends and receives posted and tested in a random interleaving over a backend with manual
 * progress, several lanes and writes landing newest first; every message must end in the
 * sub-receive the model names, with its size, and both paths must have carried some.
 */
static void run_model(unsigned seed, int nsub)
{
	enum { CAP = 40960 };
	static struct model m;
	struct pair p;
	char *sbuf, *rbuf;
	struct mk_mr *smr, *rmr;
	static struct mk_rdv_req *sreq[MODEL_SENDS], *rreq[MODEL_GROUPS];
	static bool sdone[MODEL_SENDS], rdone[MODEL_GROUPS];
	static size_t rsize[MODEL_GROUPS][MK_RDV_MAX_RECVS];
	int nsent = 0, nposted = 0, left;
	uint64_t eager_sent;

	memset(sreq, 0, sizeof(sreq));
	memset(rreq, 0, sizeof(rreq));
	memset(sdone, 0, sizeof(sdone));
	memset(rdone, 0, sizeof(rdone));
	model_make(&m, seed, nsub);
	setenv("MKERNEL_STRIPE_MIN", "16384", 1);
	mk_param_reset_all();
	fake_tp_faults.land_on_poll = 1;
	fake_tp_faults.reorder = 1;
	fake_tp_faults.nlanes = 3;
	pair_open(&p);
	sbuf = malloc((size_t)m.nsends * CAP);
	rbuf = calloc((size_t)m.ngroups * MK_RDV_MAX_RECVS, CAP);
	assert_non_null(sbuf);
	assert_non_null(rbuf);
	smr = reg(p.s, sbuf, (size_t)m.nsends * CAP);
	rmr = reg(p.r, rbuf, (size_t)m.ngroups * MK_RDV_MAX_RECVS * CAP);
	for (int s = 0; s < m.nsends; s++)
		fill(sbuf + (size_t)s * CAP, m.ssize[s], (unsigned)s);
	left = m.nsends + m.ngroups;
	srand(seed * 7 + 1);
	for (long step = 0; left > 0; step++) {
		/* phases where the sender runs ahead of the receives, then where they run ahead */
		int r = rand() % 10, what = (step / 300) % 2 ? (r < 1	? 0
								: r < 6 ? 1
									: 2 + r % 2)
							     : (r < 5	? 0
								: r < 6 ? 1
									: 2 + r % 2);

		assert_true(step < 2000000);
		if (what == 0 && nsent < m.nsends) {
			assert_int_equal(mk_rdv_isend(p.s, sbuf + (size_t)nsent * CAP,
						      m.ssize[nsent], m.stag[nsent], smr,
						      &sreq[nsent]),
					 0);
			nsent += sreq[nsent] != NULL;
		} else if (what == 1 && nposted < m.ngroups) {
			int g = nposted, n = m.n[g];
			void *data[MK_RDV_MAX_RECVS];
			size_t caps[MK_RDV_MAX_RECVS];
			struct mk_mr *mrs[MK_RDV_MAX_RECVS];

			for (int i = 0; i < n; i++) {
				data[i] = rbuf + ((size_t)g * MK_RDV_MAX_RECVS + i) * CAP;
				caps[i] = CAP;
				mrs[i] = rmr;
			}
			assert_int_equal(
				mk_rdv_irecv(p.r, n, data, caps, m.tag[g], mrs, false, &rreq[g]),
				0);
			nposted += rreq[g] != NULL;
		} else if (what == 2) {
			for (int s = 0; s < nsent; s++) {
				int done = 0;

				if (sdone[s])
					continue;
				assert_int_equal(mk_rdv_test(sreq[s], &done, NULL), 0);
				if (done) {
					sdone[s] = true;
					left--;
				}
				break; /* NCCL tests its oldest first */
			}
		} else {
			for (int g = 0; g < nposted; g++) {
				int done = 0;

				if (rdone[g])
					continue;
				assert_int_equal(mk_rdv_test(rreq[g], &done, rsize[g]), 0);
				if (done) {
					rdone[g] = true;
					left--;
				}
				break;
			}
		}
	}
	for (int s = 0; s < m.nsends; s++) {
		int g = m.dest_g[s], i = m.dest_i[s];

		if (rsize[g][i] != m.ssize[s])
			fail_msg("seed %u: send %d (tag %d, %zu B) should be in group %d sub %d, "
				 "which got %zu B",
				 seed, s, m.stag[s], m.ssize[s], g, i, rsize[g][i]);
		check(rbuf + ((size_t)g * MK_RDV_MAX_RECVS + i) * CAP, m.ssize[s], (unsigned)s);
	}
	eager_sent = send_of(&p)->eager.sent;
	assert_true(eager_sent > 0);
	assert_true(eager_sent < (uint64_t)m.nsends);
	assert_int_equal(recv_of(&p)->eager.copied, eager_sent);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
	free(sbuf);
	free(rbuf);
}

static void test_eager_and_rendezvous_keep_posting_order(void **state)
{
	for (unsigned seed = 1; seed <= 6; seed++)
		run_model(seed, 1);
}

static void test_eager_multi_recv_matches_like_nccl(void **state)
{
	for (unsigned seed = 100; seed < 112; seed++)
		run_model(seed, 2 + (int)(seed % 3));
}

/* The deterministic case: all sends posted before both groups, tag 13 twice ahead. */
static void test_eager_multi_recv_sends_first(void **state)
{
	enum { NSUB = 4 };
	static char sbuf[NSUB][64], rbuf[2][NSUB][128];
	struct mk_rdv_req *rreq[2] = { NULL, NULL }, *sreq[2 * NSUB];
	int tags[NSUB] = { 10, 11, 12, 13 };
	int order[2 * NSUB] = { 13, 13, 12, 11, 10, 10, 11, 12 };
	size_t caps[NSUB] = { 128, 128, 128, 128 }, sizes[NSUB];
	struct mk_mr *smr, *rmr, *mrs[NSUB];
	struct pair p;

	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	for (int i = 0; i < NSUB; i++) {
		mrs[i] = rmr;
		memset(sbuf[i], 0x40 + i, sizeof(sbuf[i]));
	}
	for (int k = 0; k < 2 * NSUB; k++) {
		int t = order[k] - 10;

		sreq[k] = NULL;
		assert_int_equal(mk_rdv_isend(p.s, sbuf[t], 16 + t, order[k], smr, &sreq[k]), 0);
		assert_non_null(sreq[k]);
		assert_true(sreq[k]->eager);
	}
	for (int g = 0; g < 2; g++) {
		void *d[NSUB] = { rbuf[g][0], rbuf[g][1], rbuf[g][2], rbuf[g][3] };

		assert_int_equal(mk_rdv_irecv(p.r, NSUB, d, caps, tags, mrs, false, &rreq[g]), 0);
		assert_non_null(rreq[g]);
	}
	for (int g = 0; g < 2; g++) {
		assert_int_equal(wait_both(NULL, rreq[g], sizes, NULL), 0);
		for (int i = 0; i < NSUB; i++) {
			assert_int_equal(sizes[i], 16 + i);
			assert_int_equal(rbuf[g][i][0], 0x40 + i);
			assert_int_equal(rbuf[g][i][16 + i], 0);
		}
	}
	for (int k = 0; k < 2 * NSUB; k++)
		assert_int_equal(wait_both(sreq[k], NULL, NULL, NULL), 0);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/* Too large for its receive: the receive fails, and the send comm at its next call. */
static void test_eager_message_larger_than_its_receive_fails_both(void **state)
{
	char sbuf[1000] = { 0 }, rbuf[100];
	struct mk_rdv_req *sreq = NULL, *rreq;
	struct mk_mr *smr, *rmr;
	int rc = 0, done = 0;
	struct pair p;

	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), 0, smr, &sreq), 0);
	assert_true(sreq != NULL && sreq->eager);
	assert_int_equal(wait_both(sreq, NULL, NULL, NULL), 0); /* its buffer was free at once */
	rreq = post_recv(&p, rbuf, sizeof(rbuf), 0, rmr);
	assert_int_equal(wait_both(NULL, rreq, NULL, NULL), -EMSGSIZE);
	for (int i = 0; i < 1000 && rc == 0; i++) {
		sreq = NULL;
		rc = mk_rdv_isend(p.s, sbuf, 8, 0, smr, &sreq);
		if (rc == 0 && sreq != NULL)
			rc = mk_rdv_test(sreq, &done, NULL);
	}
	assert_int_equal(rc, -EMSGSIZE);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/* Group sequences and eager sequences both cross 2^32 and their 10-bit immediate fields. */
static void test_eager_sequences_wrap(void **state)
{
	enum { N = MK_RDV_MAX_REQUESTS };
	static char sbuf[N][16], rbuf[N][16];
	struct mk_rdv_req *sreq[N], *rreq[N];
	struct mk_mr *smr, *rmr;
	size_t got;
	struct pair p;

	mk_rdv_set_initial_seq(0xffffffffu - 40);
	fake_tp_faults.land_on_poll = 1;
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	for (int round = 0; round < 40; round++) {
		for (int i = 0; i < N; i++) {
			fill(sbuf[i], 16, (unsigned)(round * N + i));
			sreq[i] = NULL;
			while (sreq[i] == NULL)
				assert_int_equal(mk_rdv_isend(p.s, sbuf[i], 16, 0, smr, &sreq[i]),
						 0);
		}
		for (int i = 0; i < N; i++) {
			rreq[i] = post_recv(&p, rbuf[i], 16, 0, rmr);
			assert_non_null(rreq[i]);
		}
		for (int i = 0; i < N; i++) {
			assert_int_equal(wait_both(sreq[i], rreq[i], &got, NULL), 0);
			assert_int_equal(got, 16);
			check(rbuf[i], 16, (unsigned)(round * N + i));
		}
	}
	/* 1280 messages, eagerly while credits last: well past both wrap points */
	assert_true(send_of(&p)->eager.sent > 1024);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
}

/*
 * An optional receive (NCCL's LL/LL128) may finish once its CTS is out where writes land
 * unpolled, but not while eager is on: its data may come as an eager message only our copy
 * puts in place. With eager off the early finish is back.
 */
static void test_eager_optional_receive_waits_for_its_data(void **state)
{
	char sbuf[64], rbuf[64] = { 0 };
	struct mk_mr *smr, *rmr;
	void *d = rbuf;
	size_t cap = sizeof(rbuf);
	int tag = 0;
	struct pair p;

	for (int eager = 1; eager >= 0; eager--) {
		struct mk_rdv_req *sreq = NULL, *rreq = NULL;
		int done = 0;

		setenv("MKERNEL_EAGER_BYTES", eager ? "8192" : "0", 1);
		mk_param_reset_all();
		pair_open(&p); /* the fake lands writes unpolled */
		smr = reg(p.s, sbuf, sizeof(sbuf));
		rmr = reg(p.r, rbuf, sizeof(rbuf));
		fill(sbuf, sizeof(sbuf), 9 + eager);
		assert_int_equal(mk_rdv_irecv(p.r, 1, &d, &cap, &tag, &rmr, true, &rreq), 0);
		for (int i = 0; i < 10 && !done; i++)
			assert_int_equal(mk_rdv_test(rreq, &done, NULL), 0);
		assert_int_equal(done, !eager);
		while (sreq == NULL)
			assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), tag, smr, &sreq), 0);
		assert_int_equal(wait_both(sreq, eager ? rreq : NULL, NULL, NULL), 0);
		check(rbuf, sizeof(rbuf), 9 + eager);
		mk_rdv_dereg(p.s, smr);
		mk_rdv_dereg(p.r, rmr);
		pair_close(&p);
	}
}

/*
 * A sender that never polls while 64 eager messages complete 64 receives has not read their
 * CTS: the receiver must not post a 65th group over the first one's ring slot. It gets no
 * request until the sender says how far it has read, which it does when a send cannot go.
 */
static void test_eager_ring_guard_waits_for_the_sender(void **state)
{
	enum { N = MK_RDV_EAGER_SLOTS };
	static char sbuf[N][8], rbuf[N + 1][8];
	static char big[20000], bigr[20000];
	struct mk_rdv_req *sreq[N], *rreq = NULL, *bsreq = NULL;
	struct mk_mr *smr, *rmr, *bsmr, *brmr;
	size_t got;
	struct pair p;

	fake_tp_faults.land_on_poll = 1;
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	bsmr = reg(p.s, big, sizeof(big));
	brmr = reg(p.r, bigr, sizeof(bigr));
	fill(big, sizeof(big), 77);
	for (int i = 0; i < N; i++) {
		fill(sbuf[i], 8, (unsigned)i);
		sreq[i] = NULL;
		assert_int_equal(mk_rdv_isend(p.s, sbuf[i], 8, 0, smr, &sreq[i]), 0);
		assert_non_null(sreq[i]); /* eager, without a single poll on the send side */
	}
	for (int round = 0; round < 2; round++) {
		struct mk_rdv_req *rq[MK_RDV_MAX_REQUESTS];

		for (int i = 0; i < MK_RDV_MAX_REQUESTS; i++) {
			rq[i] = post_recv(&p, rbuf[round * 32 + i], 8, 0, rmr);
			assert_non_null(rq[i]);
		}
		for (int i = 0; i < MK_RDV_MAX_REQUESTS; i++) {
			assert_int_equal(wait_both(NULL, rq[i], &got, NULL), 0);
			check(rbuf[round * 32 + i], 8, (unsigned)(round * 32 + i));
		}
	}
	/* slot free, nothing outstanding, and still no room: the sender has read no CTS */
	for (int i = 0; i < 10; i++) {
		assert_int_equal(mk_rdv_irecv(p.r, 1, (void *[]){ bigr },
					      (size_t[]){ sizeof(bigr) }, (int[]){ 0 }, &brmr,
					      false, &rreq),
				 0);
		assert_null(rreq);
	}
	/* a send too large for eager cannot go either: it tells the receiver its frontier */
	assert_int_equal(mk_rdv_isend(p.s, big, sizeof(big), 0, bsmr, &bsreq), 0);
	assert_null(bsreq);
	while (rreq == NULL)
		assert_int_equal(mk_rdv_irecv(p.r, 1, (void *[]){ bigr },
					      (size_t[]){ sizeof(bigr) }, (int[]){ 0 }, &brmr,
					      false, &rreq),
				 0);
	while (bsreq == NULL)
		assert_int_equal(mk_rdv_isend(p.s, big, sizeof(big), 0, bsmr, &bsreq), 0);
	assert_int_equal(wait_both(bsreq, rreq, &got, NULL), 0);
	assert_int_equal(got, sizeof(big));
	check(bigr, sizeof(bigr), 77);
	for (int i = 0; i < N; i++)
		assert_int_equal(wait_both(sreq[i], NULL, NULL, NULL), 0);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	mk_rdv_dereg(p.s, bsmr);
	mk_rdv_dereg(p.r, brmr);
	pair_close(&p);
}

/*
 * The sender's eager sends completed and it closed before any receive was posted (the end of
 * a collective on one rank, say): every message still reaches its receive, even while writes
 * to the gone peer are refused (net does that for good) or fail; a receive nothing will fill
 * then fails once nothing has arrived for MKERNEL_KEEPALIVE ms.
 */
static void test_eager_receiver_drains_a_sender_that_left(void **state)
{
	enum { N = 5 };
	static char sbuf[N][40], rbuf[N + 1][40];
	struct mk_rdv_req *sreq[N], *rreq;
	struct mk_mr *smr, *rmr;
	size_t got;
	int rc = 0, done = 0;
	struct pair p;

	setenv("MKERNEL_KEEPALIVE", "20", 1);
	mk_param_reset_all();
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	for (int i = 0; i < N; i++) {
		fill(sbuf[i], 10 + i, (unsigned)i);
		sreq[i] = NULL;
		assert_int_equal(mk_rdv_isend(p.s, sbuf[i], 10 + i, 0, smr, &sreq[i]), 0);
		assert_true(sreq[i] != NULL && sreq[i]->eager);
		assert_int_equal(wait_both(sreq[i], NULL, NULL, NULL), 0);
	}
	mk_rdv_dereg(p.s, smr);
	assert_int_equal(mk_rdv_close(p.s), 0);
	for (int i = 0; i < N; i++) {
		/* the first CTS is refused, as net refuses everything towards a dead peer */
		fake_tp_faults.eagain_writes = i == 0 ? 1000 : 0;
		rreq = post_recv(&p, rbuf[i], 40, 0, rmr);
		assert_non_null(rreq);
		assert_int_equal(wait_both(NULL, rreq, &got, NULL), 0);
		assert_int_equal(got, 10 + i);
		check(rbuf[i], 10 + i, (unsigned)i);
	}
	fake_tp_faults.eagain_writes = 0;
	rreq = post_recv(&p, rbuf[N], 40, 0, rmr);
	for (uint64_t end = mk_now_ms() + 5000; rreq != NULL && rc == 0 && mk_now_ms() < end;)
		rc = mk_rdv_test(rreq, &done, NULL);
	assert_int_equal(done, 0);
	assert_int_not_equal(rc, 0); /* the peer is gone and nothing is left of it */
	mk_rdv_dereg(p.r, rmr);
	assert_int_equal(mk_rdv_close(p.r), 0);
	assert_int_equal(fake_tp_live_regs(), 0);
}

/* The eager messages still waiting at the sender are `want`, in that order. */
static void expect_pending(const struct mk_rdv_send *s, const int32_t *want, int n)
{
	assert_int_equal(s->eager.npend, n);
	for (int i = 0; i < n; i++)
		assert_int_equal(s->eager.pend_tag[i], want[i]);
}

/*
 * A processed group takes the oldest waiting eager messages its sub-receives fit (by tag in a
 * multi-receive); the others keep waiting in their order, both when the group fills up part way
 * through them and when it does not.
 */
static void test_eager_group_seen_keeps_the_rest_in_order(void **state)
{
	static const int32_t fills[] = { 1, 2, 1, 3, 2 }, open[] = { 1, 2, 1, 2, 7 };
	struct mk_rdv_send *s = calloc(1, sizeof(*s));
	struct mk_rdv_cts *ring = calloc(MK_RDV_CTS_GROUPS * MK_RDV_MAX_RECVS, sizeof(*ring));

	(void)state;
	assert_non_null(s);
	assert_non_null(ring);
	s->ring = ring;
	/* group 1: two sub-receives, tags 1 and 2; full after the first two messages */
	ring[0].tag = 1;
	ring[1].tag = 2;
	memcpy(s->eager.pend_tag, fills, sizeof(fills));
	s->eager.npend = 5;
	mk_rdv_eager_group_seen(s, 1, 2);
	assert_int_equal(s->used[0], 3);
	expect_pending(s, (const int32_t[]){ 1, 3, 2 }, 3);
	/* group 2: tags 2, 5, 2; the 5 finds no message, so every message is looked at */
	ring[8].tag = 2;
	ring[9].tag = 5;
	ring[10].tag = 2;
	memcpy(s->eager.pend_tag, open, sizeof(open));
	s->eager.npend = 5;
	mk_rdv_eager_group_seen(s, 2, 3);
	assert_int_equal(s->used[1], 5);
	expect_pending(s, (const int32_t[]){ 1, 1, 7 }, 3);
	/* group 3 of one: the oldest message, whatever its tag */
	mk_rdv_eager_group_seen(s, 3, 1);
	assert_int_equal(s->used[2], 1);
	expect_pending(s, (const int32_t[]){ 1, 7 }, 2);
	free(ring);
	free(s);
}

/*
 * K receives of 100 bytes, each posted before its message, as in a ping-pong: with
 * MKERNEL_EAGER_CTS_WAIT set each one holds its CTS back for the eager message it expects and the
 * CTS go in batches; without it every receive writes its CTS at its post. Returns the writes
 * beyond one per message.
 */
static int pingpong_extra_writes(int wait_us, int k_msgs)
{
	char sbuf[100], rbuf[100];
	struct mk_mr *smr, *rmr;
	struct pair p;
	char env[16];
	int writes;

	snprintf(env, sizeof(env), "%d", wait_us);
	setenv("MKERNEL_EAGER_CTS_WAIT", env, 1);
	mk_param_reset_all();
	pair_open(&p);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	writes = fake_tp_writes();
	for (int k = 0; k < k_msgs; k++) {
		struct mk_rdv_req *sreq = NULL, *rreq;
		size_t got = 0;

		memset(rbuf, 0, sizeof(rbuf));
		rreq = post_recv(&p, rbuf, sizeof(rbuf), 5, rmr);
		assert_non_null(rreq);
		assert_int_equal(rreq->cts_lazy, wait_us != 0);
		/* held: the held groups are not scanned again before its wait can end */
		if (wait_us != 0)
			assert_true(recv_of(&p)->cts_scan_ns > recv_of(&p)->cs.now_ns);
		fill(sbuf, sizeof(sbuf), (unsigned)k);
		while (sreq == NULL)
			assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), 5, smr, &sreq), 0);
		assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
		assert_int_equal(got, sizeof(rbuf));
		check(rbuf, sizeof(rbuf), (unsigned)k);
	}
	writes = fake_tp_writes() - writes - k_msgs;
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
	unsetenv("MKERNEL_EAGER_CTS_WAIT");
	mk_param_reset_all();
	return writes;
}

static void test_eager_cts_wait_batches_the_cts_of_expected_messages(void **state)
{
	const int k_msgs = 96;
	int off, on;

	(void)state;
	fake_tp_faults.cts_batch = 32; /* as the socket providers ask */
	off = pingpong_extra_writes(0, k_msgs);
	on = pingpong_extra_writes(1000000, k_msgs);
	/* off: a CTS per receive; on: one per batch of the device's 32 groups */
	assert_int_equal(off, k_msgs);
	assert_true(on <= k_msgs / 32 + 1);
}

/*
 * A receive expecting an eager message whose sender sends by rendezvous after all (its own
 * MKERNEL_EAGER_BYTES is smaller) gets its CTS once MKERNEL_EAGER_CTS_WAIT has passed, and its
 * data: no hang.
 */
static void test_eager_cts_wait_ends_for_a_rendezvous_sender(void **state)
{
	char sbuf[1000], rbuf[1000] = { 0 };
	uint8_t handle[MK_RDV_HANDLE_SIZE];
	struct mk_rdv_req *sreq = NULL, *rreq;
	struct mk_mr *smr, *rmr;
	int sdone = 0, rdone = 0, writes;
	size_t got = 0, sgot;
	uint64_t t0, waited;
	struct pair p;

	(void)state;
	setenv("MKERNEL_EAGER_CTS_WAIT", "2000", 1);
	mk_param_reset_all();
	memset(&p, 0, sizeof(p));
	/* the receiver offers 8192-byte slots; the sender, opened after, sends eagerly up to 64 */
	assert_int_equal(mk_rdv_listen(&fake_tp_ops, 0, handle, &p.l), 0);
	setenv("MKERNEL_EAGER_BYTES", "64", 1);
	mk_param_reset_all();
	for (int spins = 0; p.s == NULL || p.r == NULL; spins++) {
		if (p.s == NULL)
			assert_int_equal(mk_rdv_connect(&fake_tp_ops, 0, handle, &p.s), 0);
		if (p.r == NULL)
			assert_int_equal(mk_rdv_accept(p.l, &p.r), 0);
		assert_true(spins < 100);
	}
	assert_int_equal(mk_rdv_close(p.l), 0);
	assert_int_equal(send_of(&p)->eager.max_bytes, 64);
	smr = reg(p.s, sbuf, sizeof(sbuf));
	rmr = reg(p.r, rbuf, sizeof(rbuf));
	fill(sbuf, sizeof(sbuf), 9);
	writes = fake_tp_writes();
	t0 = mk_now_ns();
	rreq = post_recv(&p, rbuf, sizeof(rbuf), 2, rmr);
	assert_true(rreq->cts_lazy && rreq->cts_wait_until != 0);
	assert_int_equal(fake_tp_writes(), writes); /* no CTS at the post */
	while (!(sdone && rdone)) {
		if (sreq == NULL)
			assert_int_equal(mk_rdv_isend(p.s, sbuf, sizeof(sbuf), 2, smr, &sreq), 0);
		else if (!sdone)
			assert_int_equal(mk_rdv_test(sreq, &sdone, &sgot), 0);
		if (!rdone)
			assert_int_equal(mk_rdv_test(rreq, &rdone, &got), 0);
		assert_true(mk_now_ns() - t0 < 5000000000ull);
	}
	waited = mk_now_ns() - t0;
	assert_false(send_of(&p)->eager.sent); /* by rendezvous */
	assert_true(waited >= 1900000);	       /* the CTS went once the wait was over */
	assert_int_equal(got, sizeof(rbuf));
	check(rbuf, sizeof(rbuf), 9);
	mk_rdv_dereg(p.s, smr);
	mk_rdv_dereg(p.r, rmr);
	pair_close(&p);
	unsetenv("MKERNEL_EAGER_CTS_WAIT");
	mk_param_reset_all();
}

/*
 * A small receive posted alone reads the CQ at its post for eager messages already there, unless
 * the device says a read re-arms its wakeup (props.cq_read_rearms, the socket providers): there
 * only waiting reads. The messages arrive either way.
 */
static void test_eager_receive_reads_at_its_post_only_where_reads_are_free(void **state)
{
	char sbuf[100], rbuf[100];

	(void)state;
	for (int rearms = 0; rearms < 2; rearms++) {
		struct mk_mr *smr, *rmr;
		struct pair p;

		fake_tp_faults.cq_read_rearms = rearms;
		pair_open(&p);
		smr = reg(p.s, sbuf, sizeof(sbuf));
		rmr = reg(p.r, rbuf, sizeof(rbuf));
		for (int k = 0; k < 4; k++) {
			struct mk_rdv_req *sreq = NULL, *rreq;
			uint32_t polls = recv_of(&p)->cs.polls;
			size_t got = 0;

			memset(rbuf, 0, sizeof(rbuf));
			rreq = post_recv(&p, rbuf, sizeof(rbuf), 5, rmr);
			assert_non_null(rreq);
			assert_int_equal(recv_of(&p)->cs.polls - polls, rearms ? 0 : 1);
			fill(sbuf, sizeof(sbuf), (unsigned)k);
			while (sreq == NULL)
				assert_int_equal(
					mk_rdv_isend(p.s, sbuf, sizeof(sbuf), 5, smr, &sreq), 0);
			assert_int_equal(wait_both(sreq, rreq, &got, NULL), 0);
			assert_int_equal(got, sizeof(rbuf));
			check(rbuf, sizeof(rbuf), (unsigned)k);
		}
		assert_true(send_of(&p)->eager.sent >= 4);
		mk_rdv_dereg(p.s, smr);
		mk_rdv_dereg(p.r, rmr);
		pair_close(&p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_eager_send_goes_before_its_receive, setup),
		cmocka_unit_test_setup(test_eager_yields_to_a_cts_already_here, setup),
		cmocka_unit_test_setup(test_eager_filled_receives_batch_their_cts, setup),
		cmocka_unit_test_setup(test_eager_off_and_above_the_limit_wait_for_the_cts, setup),
		cmocka_unit_test_setup(test_eager_not_offered_where_receives_may_be_gpu_memory,
				       setup),
		cmocka_unit_test_setup(test_eager_credits_run_out_then_no_block, setup),
		cmocka_unit_test_setup(test_eager_and_rendezvous_keep_posting_order, setup),
		cmocka_unit_test_setup(test_eager_multi_recv_matches_like_nccl, setup),
		cmocka_unit_test_setup(test_eager_multi_recv_sends_first, setup),
		cmocka_unit_test_setup(test_eager_message_larger_than_its_receive_fails_both,
				       setup),
		cmocka_unit_test_setup(test_eager_sequences_wrap, setup),
		cmocka_unit_test_setup(test_eager_bytes_from_env_device_or_default, setup),
		cmocka_unit_test_setup(test_eager_optional_receive_waits_for_its_data, setup),
		cmocka_unit_test_setup(test_eager_ring_guard_waits_for_the_sender, setup),
		cmocka_unit_test_setup(test_eager_receiver_drains_a_sender_that_left, setup),
		cmocka_unit_test_setup(test_eager_group_seen_keeps_the_rest_in_order, setup),
		cmocka_unit_test_setup(test_eager_cts_wait_batches_the_cts_of_expected_messages,
				       setup),
		cmocka_unit_test_setup(test_eager_cts_wait_ends_for_a_rendezvous_sender, setup),
		cmocka_unit_test_setup(
			test_eager_receive_reads_at_its_post_only_where_reads_are_free, setup),
	};

	return cmocka_run_group_tests_name("rdv_eager", tests, NULL, NULL);
}
