// SPDX-License-Identifier: Apache-2.0
/*
 * Bad arguments and stale handles from a caller, each case in fresh processes. A refused call
 * must return an error (not ncclSuccess), leave the request NULL, WARN, touch nothing it should
 * not, and leave the comm usable: every case ends with a checked transfer on the same comms.
 *
 *   irecv-oversize    irecv of 256 KiB into a 4 KiB registration
 *   isend-oversize    isend of 256 KiB from a 4 KiB registration
 *   null-data         isend / irecv with data NULL and a size
 *   regmr-bad         regMr of SIZE_MAX, 1 << 62, an unmapped range, a range wrapping the
 *                     address space
 *   dereg-twice       two comms register one range: handles differ; a second deregMr, a
 *                     deregMr through the other comm and a stale handle after re-registration
 *                     are refused and the other comm's registration keeps working
 *   stale-comm        closeSend / test on a closed comm and its request after a new connection
 *                     was made (and may have reused the memory)
 *   closed-listener   connect to a listener closed in the same process: an error or a timeout,
 *                     never a crash
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault.h"

#define SMALL	4096
#define BIG	(256u << 10)
#define SETUP_S 30.0
#define CASE_S	60.0

struct bad_peer {
	const struct fault_opts *o;
	bool recv;
	int hfd;    /* the listen handles, recv -> send */
	int tx, rx; /* tokens to and from the other peer */
	const char *name;
	struct fault_side s;
};

static int bad_fail(struct bad_peer *p, const char *fmt, const char *what)
{
	printf("# [%s %s] ", p->name, p->recv ? "recv" : "send");
	printf(fmt, what);
	printf("\n");
	return 1;
}

/* A refusal: an error code, no request, and a WARN that says so. */
static int refused(struct bad_peer *p, const char *what, ncclResult_t rc, void *req,
		   unsigned warns_before)
{
	if (rc == ncclSuccess)
		return bad_fail(p, "%s was accepted", what);
	if (req != NULL)
		return bad_fail(p, "%s failed but handed out a request", what);
	if (fault_warns(NULL) == warns_before)
		return bad_fail(p, "%s was refused without a WARN", what);
	return 0;
}

/* One message each way of the pair, payload checked: the comm still works. */
static int checked_transfer(struct bad_peer *p, void *comm, int tag)
{
	char *buf = aligned_alloc(4096, SMALL);
	void *mh = NULL, *req = NULL;
	int done = 0, sz = 0, rc = 1;
	double end = fault_now() + SETUP_S;

	if (buf == NULL)
		return 1;
	memset(buf, p->recv ? 0 : 0x3c, SMALL);
	if (p->s.n.t->regMr(comm, buf, SMALL, MK_NCCL_PTR_HOST, &mh) != ncclSuccess)
		goto out;
	while (req == NULL && fault_now() < end) {
		ncclResult_t r;

		if (p->recv) {
			void *data = buf;
			size_t size = SMALL;

			r = p->s.n.t->irecv(comm, 1, &data, &size, &tag, &mh, NULL, &req);
		} else {
			r = p->s.n.t->isend(comm, buf, SMALL, tag, mh, NULL, &req);
		}
		if (r != ncclSuccess)
			goto dereg;
	}
	while (req != NULL && !done && fault_now() < end) {
		if (p->s.n.t->test(req, &done, &sz) != ncclSuccess)
			goto dereg;
	}
	rc = !done || sz != SMALL;
	for (int i = 0; p->recv && rc == 0 && i < SMALL; i++)
		rc = buf[i] != 0x3c;
dereg:
	p->s.n.t->deregMr(comm, mh);
out:
	free(buf);
	return rc ? bad_fail(p, "%s: the transfer after the refusals failed", "check") : 0;
}

static int token(struct bad_peer *p, bool send)
{
	char t = 'k';

	if (send)
		return fault_write_all(p->tx, &t, 1);
	return fault_read_all(p->rx, &t, 1, SETUP_S);
}

/* ---- cases: each returns 0 when every refusal and the final transfer were right ---- */

static int case_oversize(struct bad_peer *p, bool on_recv)
{
	char *buf = aligned_alloc(4096, BIG);
	void *mh = NULL, *req = NULL;
	unsigned w = fault_warns(NULL);
	int tag = 1, rc = 0;
	ncclResult_t r;

	if (buf == NULL)
		return 1;
	if (p->recv == on_recv) {
		if (p->s.n.t->regMr(p->s.comm, buf, SMALL, MK_NCCL_PTR_HOST, &mh) != ncclSuccess)
			return bad_fail(p, "%s failed", "regMr of 4 KiB");
		if (p->recv) {
			void *data = buf;
			size_t size = BIG;

			r = p->s.n.t->irecv(p->s.comm, 1, &data, &size, &tag, &mh, NULL, &req);
			rc = refused(p, "irecv of 256 KiB into a 4 KiB registration", r, req, w);
		} else {
			r = p->s.n.t->isend(p->s.comm, buf, BIG, tag, mh, NULL, &req);
			rc = refused(p, "isend of 256 KiB from a 4 KiB registration", r, req, w);
		}
		p->s.n.t->deregMr(p->s.comm, mh);
	}
	free(buf);
	return rc || checked_transfer(p, p->s.comm, 1);
}

static int case_irecv_oversize(struct bad_peer *p)
{
	return case_oversize(p, true);
}

static int case_isend_oversize(struct bad_peer *p)
{
	return case_oversize(p, false);
}

static int case_null_data(struct bad_peer *p)
{
	char *buf = aligned_alloc(4096, SMALL);
	void *mh = NULL, *req = NULL, *data = NULL;
	unsigned w = fault_warns(NULL);
	size_t size = SMALL;
	int tag = 1, rc;
	ncclResult_t r;

	if (buf == NULL ||
	    p->s.n.t->regMr(p->s.comm, buf, SMALL, MK_NCCL_PTR_HOST, &mh) != ncclSuccess)
		return bad_fail(p, "%s failed", "regMr");
	if (p->recv)
		r = p->s.n.t->irecv(p->s.comm, 1, &data, &size, &tag, &mh, NULL, &req);
	else
		r = p->s.n.t->isend(p->s.comm, NULL, SMALL, tag, mh, NULL, &req);
	rc = refused(p, p->recv ? "irecv into NULL" : "isend from NULL", r, req, w);
	p->s.n.t->deregMr(p->s.comm, mh);
	free(buf);
	return rc || checked_transfer(p, p->s.comm, 1);
}

static int case_regmr_bad(struct bad_peer *p)
{
	char *buf = aligned_alloc(4096, SMALL);
	void *gone =
		mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct {
		const char *what;
		void *addr;
		size_t len;
	} bad[] = {
		{ "regMr of SIZE_MAX bytes", buf, SIZE_MAX },
		{ "regMr of 1 << 62 bytes", buf, (size_t)1 << 62 },
		{ "regMr of unmapped memory", gone, 1 << 20 },
		{ "regMr of a range wrapping the address space", (void *)(UINTPTR_MAX - 4095),
		  8192 },
	};
	int rc = 0;

	if (buf == NULL || gone == MAP_FAILED)
		return 1;
	munmap(gone, 1 << 20);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		unsigned w = fault_warns(NULL);
		void *mh = NULL;
		ncclResult_t r =
			p->s.n.t->regMr(p->s.comm, bad[i].addr, bad[i].len, MK_NCCL_PTR_HOST, &mh);

		rc |= refused(p, bad[i].what, r, mh, w);
		if (r == ncclSuccess)
			p->s.n.t->deregMr(p->s.comm, mh);
	}
	free(buf);
	return rc || checked_transfer(p, p->s.comm, 1);
}

/* The sender opens a second comm to the receiver's second listener. */
static int second_pair(struct bad_peer *p, void **lc2, void **c2)
{
	return p->recv ? fault_recv_setup(&p->s.n, p->hfd, lc2, c2, SETUP_S)
		       : fault_send_setup(&p->s.n, p->hfd, c2, SETUP_S);
}

static int case_dereg_twice(struct bad_peer *p)
{
	char *buf = aligned_alloc(4096, SMALL * 4);
	void *lc2 = NULL, *c2 = NULL, *ha = NULL, *hb = NULL, *hc = NULL, *req = NULL;
	unsigned w;
	int rc = 0, tag = 2;
	ncclResult_t r;

	if (buf == NULL || second_pair(p, &lc2, &c2))
		return 1;
	if (!p->recv) {
		if (p->s.n.t->regMr(p->s.comm, buf, SMALL, MK_NCCL_PTR_HOST, &ha) != ncclSuccess ||
		    p->s.n.t->regMr(c2, buf, SMALL, MK_NCCL_PTR_HOST, &hb) != ncclSuccess)
			return bad_fail(p, "%s failed", "regMr of one range on two comms");
		if (ha == hb)
			rc |= bad_fail(p, "%s", "two comms got the same registration handle");
		if (p->s.n.t->deregMr(p->s.comm, ha) != ncclSuccess)
			rc |= bad_fail(p, "%s failed", "the first deregMr");
		w = fault_warns(NULL);
		rc |= refused(p, "a second deregMr of one handle", p->s.n.t->deregMr(p->s.comm, ha),
			      NULL, w);
		w = fault_warns(NULL);
		rc |= refused(p, "deregMr of comm A's handle through comm B",
			      p->s.n.t->deregMr(c2, ha), NULL, w);
		/* a new registration may reuse the memory of the old handle: the old one stays dead
		 */
		if (p->s.n.t->regMr(p->s.comm, buf + SMALL, SMALL, MK_NCCL_PTR_HOST, &hc) !=
		    ncclSuccess)
			rc |= bad_fail(p, "%s failed", "regMr after deregMr");
		w = fault_warns(NULL);
		r = p->s.n.t->isend(p->s.comm, buf, SMALL, tag, ha, NULL, &req);
		rc |= refused(p, "isend with a deregistered handle", r, req, w);
		/* comm B's registration of the same range still works */
		for (double end = fault_now() + SETUP_S; req == NULL && fault_now() < end;) {
			memset(buf, 0x3c, SMALL);
			if (p->s.n.t->isend(c2, buf, SMALL, tag, hb, NULL, &req) != ncclSuccess)
				break;
		}
	} else {
		void *data = buf;
		size_t size = SMALL;

		memset(buf, 0, SMALL);
		if (p->s.n.t->regMr(c2, buf, SMALL, MK_NCCL_PTR_HOST, &hb) != ncclSuccess)
			return bad_fail(p, "%s failed", "regMr");
		while (req == NULL)
			if (p->s.n.t->irecv(c2, 1, &data, &size, &tag, &hb, NULL, &req) !=
			    ncclSuccess)
				return bad_fail(p, "%s failed", "irecv on the second comm");
	}
	for (int done = 0, sz; req != NULL && !done;) {
		if (p->s.n.t->test(req, &done, &sz) != ncclSuccess) {
			rc |= bad_fail(p, "%s failed", "the transfer on comm B");
			break;
		}
	}
	if (p->recv)
		for (int i = 0; i < SMALL && rc == 0; i++)
			rc = buf[i] != 0x3c ? bad_fail(p, "%s", "comm B received wrong bytes") : 0;
	if (hc != NULL)
		p->s.n.t->deregMr(p->s.comm, hc);
	p->s.n.t->deregMr(c2, hb);
	token(p, !p->recv); /* both done with comm B before either closes it */
	token(p, p->recv);
	if (p->recv) {
		p->s.n.t->closeRecv(c2);
		p->s.n.t->closeListen(lc2);
	} else {
		p->s.n.t->closeSend(c2);
	}
	free(buf);
	return rc || checked_transfer(p, p->s.comm, 1);
}

static int case_stale_comm(struct bad_peer *p)
{
	void *lc2 = NULL, *c2 = NULL, *old = p->s.comm, *oldl = p->s.lc;
	unsigned w;
	int rc = 0, done = 0;

	/* close the first pair, open a second: its objects may take the old memory */
	if (p->recv) {
		p->s.n.t->closeRecv(old);
		p->s.n.t->closeListen(oldl);
	} else {
		p->s.n.t->closeSend(old);
	}
	if (second_pair(p, &lc2, &c2))
		return 1;
	w = fault_warns(NULL);
	rc |= refused(p, "closing a closed comm",
		      p->recv ? p->s.n.t->closeRecv(old) : p->s.n.t->closeSend(old), NULL, w);
	w = fault_warns(NULL);
	rc |= refused(p, "test() on a closed comm's pointer", p->s.n.t->test(old, &done, NULL),
		      NULL, w);
	if (p->recv) {
		w = fault_warns(NULL);
		rc |= refused(p, "closing a closed listener", p->s.n.t->closeListen(oldl), NULL, w);
	}
	p->s.comm = c2;
	p->s.lc = lc2;
	return rc || checked_transfer(p, c2, 1);
}

static int case_closed_listener(struct bad_peer *p)
{
	char handle[FAULT_HANDLE] = { 0 };
	void *lc = NULL, *sc = NULL;
	double end = fault_now() + 40;
	ncclResult_t r = ncclSuccess;
	struct mk_nccl_net_dev_handle *dc = NULL;

	if (p->recv)
		return checked_transfer(p, p->s.comm, 1);
	if (p->s.n.t->listen(p->s.n.ctx, 0, handle, &lc) != ncclSuccess)
		return bad_fail(p, "%s failed", "listen");
	p->s.n.t->closeListen(lc);
	while (sc == NULL && r == ncclSuccess && fault_now() < end)
		r = p->s.n.t->connect(p->s.n.ctx, 0, handle, &sc, &dc);
	if (sc != NULL)
		return bad_fail(p, "%s", "connect to a closed listener succeeded");
	if (r == ncclSuccess)
		return bad_fail(p, "%s",
				"connect to a closed listener neither failed nor timed out");
	return checked_transfer(p, p->s.comm, 1);
}

static const struct bad_case {
	const char *name;
	int (*run)(struct bad_peer *p);
} cases[] = {
	{ "irecv-oversize", case_irecv_oversize },
	{ "isend-oversize", case_isend_oversize },
	{ "null-data", case_null_data },
	{ "regmr-bad", case_regmr_bad },
	{ "dereg-twice", case_dereg_twice },
	{ "stale-comm", case_stale_comm },
	{ "closed-listener", case_closed_listener },
};

static int bad_peer_main(void *arg)
{
	struct bad_peer *p = arg;
	const struct bad_case *c = NULL;
	int rc;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (strcmp(cases[i].name, p->name) == 0)
			c = &cases[i];
	if (c == NULL || fault_side_open(&p->s, p->o->plugin, p->recv, p->hfd, SETUP_S))
		return 1;
	rc = c->run(p);
	token(p, !p->recv); /* neither closes while the other still transfers */
	token(p, p->recv);
	fault_side_close(&p->s);
	return rc;
}

static int bad_run(const struct fault_opts *o, const char *name)
{
	struct bad_peer peers[2];
	int h[2], t[2][2], st[2], rc = 0;
	pid_t pid[2];
	double deadline = fault_now() + CASE_S;

	if (pipe(h) || pipe(t[0]) || pipe(t[1]))
		return 1;
	/* tokens: t[0] carries recv -> send, t[1] send -> recv */
	peers[0] = (struct bad_peer){
		.o = o, .recv = true, .name = name, .hfd = h[1], .tx = t[0][1], .rx = t[1][0]
	};
	peers[1] = (struct bad_peer){
		.o = o, .recv = false, .name = name, .hfd = h[0], .tx = t[1][1], .rx = t[0][0]
	};
	for (int i = 0; i < 2; i++)
		pid[i] = fault_spawn(bad_peer_main, &peers[i]);
	close(h[0]);
	close(h[1]);
	for (int i = 0; i < 2; i++) {
		bool killed;

		st[i] = fault_reap(pid[i], deadline, &killed);
		if (killed)
			printf("# [%s] %s peer hung\n", name, i == 0 ? "recv" : "send");
		if (killed || !WIFEXITED(st[i]) || WEXITSTATUS(st[i]) != 0)
			rc = 1;
		if (WIFSIGNALED(st[i]) && !killed)
			printf("# [%s] %s peer died of signal %d\n", name, i == 0 ? "recv" : "send",
			       WTERMSIG(st[i]));
		fault_shm_cleanup(pid[i]);
	}
	for (int i = 0; i < 2; i++) {
		close(t[i][0]);
		close(t[i][1]);
	}
	return rc;
}

int fault_bad_main(const struct fault_opts *o)
{
	int fails = 0, ran = 0;

	fault_env(o);
	/* connect to a closed listener ends in MKERNEL_TIMEOUT: keep the case short */
	setenv("MKERNEL_TIMEOUT", "5000", 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;

		if (o->only != NULL && strcmp(o->only, cases[i].name) != 0)
			continue;
		rc = bad_run(o, cases[i].name);
		fault_json("\"test\":\"bad\",\"provider\":\"%s\",\"case\":\"%s\",\"pass\":%s",
			   o->provider, cases[i].name, rc ? "false" : "true");
		fails += rc != 0;
		ran++;
	}
	if (ran == 0)
		printf("# no case named %s\n", o->only);
	return fails || ran == 0 ? 1 : 0;
}
