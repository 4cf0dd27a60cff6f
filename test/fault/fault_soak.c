// SPDX-License-Identifier: Apache-2.0
/*
 * Soak: --messages small messages (8 B to 3.9 KiB, sixteen in flight) from a sender to a
 * receiver, every payload checked, with registration churn: every CHURN messages both sides drain,
 * deregister and register their buffers again at another offset (an MR cache miss each time).
 * Heap, RSS and open file descriptors are sampled after the first tenth and at the end: the fds
 * must not have grown (a provider may close one it had open), the heap may grow by at most
 * HEAP_SLACK (allocator noise) and RSS by at most RSS_SLACK_KIB beyond the pools already allocated,
 * on both sides.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault.h"

#define WINDOW	      16
#define SLOT	      4096
#define OFFSETS	      8 /* registration moves over this many slot-sized offsets */
#define RSS_SLACK_KIB 2048
#define HEAP_SLACK    (1l << 20)

/* messages between two re-registrations (--churn) */
static long churn_every = 1000;
#define SETUP_S 30.0

struct soak_peer {
	const struct fault_opts *o;
	bool recv;
	int hfd;
	int rep;
};

struct soak_report {
	long messages, mismatches;
	long rss0, rss1;
	/*
	 * Bytes malloc has handed out, small and mmapped chunks together: a leak shows here. RSS
	 * alone does not tell one from pages a provider touches for the first time inside pools it
	 * allocated at setup (tcp;ofi_rxm mmaps about 100 MB of buffers and RSS creeps into them
	 * as they are cycled through), so RSS may grow by at most those pools' size.
	 */
	long heap0, heap1, pools0;
	int fds0, fds1;
	double seconds;
	int error; /* the first failed call's result, 0 if none */
};

static long fault_heap(void)
{
	struct mallinfo2 m = mallinfo2();

	return (long)(m.uordblks + m.hblkhd);
}

static size_t soak_size(long seq)
{
	return 8 + (size_t)(seq * 2654435761u % (SLOT - 200));
}

static void soak_fill(char *p, long seq)
{
	size_t n = soak_size(seq);

	for (size_t i = 0; i < n; i++)
		p[i] = (char)(seq * 31 + (long)i);
}

static bool soak_check(const char *p, long seq, int got)
{
	size_t n = soak_size(seq);

	if ((size_t)got != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] != (char)(seq * 31 + (long)i))
			return false;
	return true;
}

/* Tests request i once; a finished receive is checked and counted. */
static int soak_test(struct fault_net *n, void **req, const long *seqs, char *base, bool recv,
		     int i, struct soak_report *r)
{
	int done = 0, sz = 0;
	ncclResult_t rc = n->t->test(req[i], &done, &sz);

	if (rc != ncclSuccess || !done)
		return rc;
	req[i] = NULL;
	if (recv && !soak_check(base + (size_t)i * SLOT, seqs[i], sz))
		r->mismatches++;
	r->messages++;
	return 0;
}

/* Completes every outstanding request; returns the first error. */
static int soak_drain(struct fault_net *n, void **req, const long *seqs, char *base, bool recv,
		      struct soak_report *r)
{
	for (int i = 0; i < WINDOW; i++) {
		while (req[i] != NULL) {
			int rc = soak_test(n, req, seqs, base, recv, i, r);

			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Drain, then register the window again one slot further on (a cache miss every time). */
static int soak_churn(struct fault_net *n, void *comm, void **req, const long *seqs, char *buf,
		      char **base, void **mh, long next, bool recv, struct soak_report *r)
{
	int rc = soak_drain(n, req, seqs, *base, recv, r);

	if (rc == 0 && *mh != NULL)
		rc = n->t->deregMr(comm, *mh);
	*mh = NULL;
	*base = buf + (size_t)SLOT * (size_t)(next / churn_every % OFFSETS);
	if (rc == 0)
		rc = n->t->regMr(comm, *base, (size_t)SLOT * WINDOW, MK_NCCL_PTR_HOST, mh);
	return rc;
}

static int soak_post(struct fault_net *n, void *comm, bool recv, char *slot, long seq, void *mh,
		     void **req)
{
	int tag = 1;

	if (recv) {
		void *data = slot;
		size_t size = SLOT;

		return n->t->irecv(comm, 1, &data, &size, &tag, &mh, NULL, req);
	}
	soak_fill(slot, seq);
	return n->t->isend(comm, slot, soak_size(seq), tag, mh, NULL, req);
}

static int soak_run(struct fault_net *n, void *comm, bool recv, long total, struct soak_report *r)
{
	size_t len = (size_t)SLOT * (WINDOW + OFFSETS);
	char *buf = aligned_alloc(4096, len), *base = buf;
	void *req[WINDOW] = { 0 }, *mh = NULL;
	long seqs[WINDOW] = { 0 }, next = 0, churned = -1;
	double t0 = fault_now();
	int rc = 0;

	if (buf == NULL)
		return ncclSystemError;
	memset(buf, 0, len);
	while (rc == 0 && r->messages < total) {
		if (r->fds0 == 0 && r->messages >= total / 10) {
			/* after the warm-up: what is allocated from here on must be given back */
			r->rss0 = fault_rss_kib(getpid());
			r->fds0 = fault_nfds(getpid());
			r->heap0 = fault_heap();
			r->pools0 = (long)mallinfo2().hblkhd;
		}
		bool hold = next % churn_every == 0 && churned != next && next < total;

		if (hold && r->messages == next) {
			rc = soak_churn(n, comm, req, seqs, buf, &base, &mh, next, recv, r);
			churned = next;
			hold = false;
		}
		for (int i = 0; i < WINDOW && rc == 0; i++) {
			if (req[i] != NULL)
				rc = soak_test(n, req, seqs, base, recv, i, r);
			if (rc || req[i] != NULL || hold || next >= total)
				continue;
			seqs[i] = next;
			rc = soak_post(n, comm, recv, base + (size_t)i * SLOT, next, mh, &req[i]);
			if (rc == 0 && req[i] != NULL)
				next++;
			hold = next % churn_every == 0 && churned != next && next < total;
		}
	}
	r->seconds = fault_now() - t0;
	if (mh != NULL)
		n->t->deregMr(comm, mh);
	r->rss1 = fault_rss_kib(getpid());
	r->fds1 = fault_nfds(getpid());
	r->heap1 = fault_heap();
	free(buf);
	return rc;
}

static int soak_peer_main(void *arg)
{
	struct soak_peer *p = arg;
	struct soak_report r = { 0 };
	struct fault_side side;

	if (fault_side_open(&side, p->o->plugin, p->recv, p->hfd, SETUP_S))
		return 1;
	r.error = soak_run(&side.n, side.comm, p->recv, p->o->messages, &r);
	fault_side_close(&side);
	fault_write_all(p->rep, &r, sizeof(r));
	return 0;
}

int fault_soak_main(const struct fault_opts *o)
{
	struct soak_peer peers[2];
	struct soak_report rep[2];
	int h[2], rp[2][2], fails = 0;
	pid_t pid[2];
	/* generous: a soak of a million messages takes tens of seconds on a 2-vCPU host */
	double deadline = fault_now() + 60 + (double)o->messages / 1000.0;

	fault_env(o);
	if (o->churn > 0)
		churn_every = o->churn;
	if (pipe(h) || pipe(rp[0]) || pipe(rp[1]))
		return 1;
	for (int i = 0; i < 2; i++) {
		peers[i] = (struct soak_peer){
			.o = o, .recv = i == 0, .hfd = i == 0 ? h[1] : h[0], .rep = rp[i][1]
		};
		pid[i] = fault_spawn(soak_peer_main, &peers[i]);
		close(rp[i][1]);
	}
	close(h[0]);
	close(h[1]);
	for (int i = 0; i < 2; i++) {
		bool killed, ok;
		int st;

		memset(&rep[i], 0, sizeof(rep[i]));
		ok = fault_read_all(rp[i][0], &rep[i], sizeof(rep[i]), deadline - fault_now()) == 0;
		st = fault_reap(pid[i], ok ? fault_now() + 10 : 0, &killed);
		ok = ok && !killed && WIFEXITED(st) && WEXITSTATUS(st) == 0;
		ok = ok && rep[i].error == 0 && rep[i].messages == o->messages &&
		     rep[i].mismatches == 0 && rep[i].fds1 <= rep[i].fds0;
		/*
		 * An allocator without mallinfo2 (ASan's, in the sanitize suite) reports 0: there
		 * LeakSanitizer checks every peer at exit instead, and RSS cannot be told apart.
		 */
		if (rep[i].heap0 > 0)
			ok = ok && rep[i].heap1 - rep[i].heap0 <= HEAP_SLACK &&
			     rep[i].rss1 - rep[i].rss0 <= RSS_SLACK_KIB + (rep[i].pools0 >> 10);
		fault_json(
			"\"test\":\"soak\",\"provider\":\"%s\",\"side\":\"%s\",\"messages\":%ld,"
			"\"mismatches\":%ld,\"error\":%d,\"rss_kib_start\":%ld,\"rss_kib_end\":%ld,"
			"\"heap_kib_start\":%ld,\"heap_kib_end\":%ld,\"pools_kib\":%ld,"
			"\"fds_start\":%d,\"fds_end\":%d,\"seconds\":%.2f,\"msgs_per_s\":%.0f,"
			"\"churn_every\":%ld,\"pass\":%s%s",
			o->provider, i == 0 ? "recv" : "send", rep[i].messages, rep[i].mismatches,
			rep[i].error, rep[i].rss0, rep[i].rss1, rep[i].heap0 >> 10,
			rep[i].heap1 >> 10, rep[i].pools0 >> 10, rep[i].fds0, rep[i].fds1,
			rep[i].seconds,
			rep[i].seconds > 0 ? (double)rep[i].messages / rep[i].seconds : 0.0,
			churn_every, ok ? "true" : "false", killed ? ",\"hang\":true" : "");
		fails += !ok;
		fault_shm_cleanup(pid[i]);
	}
	return fails ? 1 : 0;
}
