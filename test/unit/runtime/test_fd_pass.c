// SPDX-License-Identifier: Apache-2.0
/*
 * fds between node peers over abstract Unix sockets: 2 and 4 ranks (threads of one process and
 * forked processes), the received fd is the sender's file (inode, and content across processes);
 * a peer that never sends times out in bounded time; a message from a rank that is not a peer is
 * refused; two exchanges with different nonces run side by side without mixing; a name taken.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fused/runtime/fd_pass.h"
#include "mk/clock.h"

#define MAXR 4

/* One exchange of n ranks, each a thread with its own memfd. */
struct group {
	uint64_t nonce;
	int n;
	pthread_barrier_t met; /* stands for the all-gather between listen and connect */
	int files[MAXR];
	int got[MAXR][MAXR]; /* got[r][i]: the fd rank r received from its i-th peer */
	uint64_t vals[MAXR][MAXR];
	int rc[MAXR];
	int timeout_ms;
	int silent; /* this rank listens but never sends: its peers must time out */
};

struct rank_arg {
	struct group *g;
	int rank;
};

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	struct group *g = a->g;
	struct mk_fdpass_peer peers[MAXR];
	struct mk_fdpass fp;
	int np = 0, rc;

	for (int r = 0; r < g->n; r++) {
		if (r != a->rank)
			peers[np++] = (struct mk_fdpass_peer){ r, (int32_t)getpid() };
	}
	for (int i = 0; i < MAXR; i++)
		g->got[a->rank][i] = -1;
	rc = mk_fdpass_listen(&fp, g->nonce, (int32_t)getpid(), a->rank, g->n);
	pthread_barrier_wait(&g->met);
	if (rc == 0 && a->rank == g->silent)
		usleep((useconds_t)g->timeout_ms * 3000u); /* alive and listening, never sending */
	else if (rc == 0)
		rc = mk_fdpass_exchange(&fp, peers, np, g->files[a->rank],
					1000u + (uint64_t)a->rank, g->got[a->rank],
					g->vals[a->rank], g->timeout_ms);
	mk_fdpass_close(&fp);
	g->rc[a->rank] = rc;
	return NULL;
}

static void group_init(struct group *g, int n, uint64_t nonce)
{
	memset(g, 0, sizeof(*g));
	g->n = n;
	g->nonce = nonce;
	g->timeout_ms = 5000;
	g->silent = -1;
	pthread_barrier_init(&g->met, NULL, (unsigned)n);
	for (int r = 0; r < n; r++) {
		g->files[r] = memfd_create("fdpass-test", MFD_CLOEXEC);
		assert_true(g->files[r] >= 0);
	}
}

static int same_file(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
	       sa.st_dev == sb.st_dev;
}

/* Every rank got every peer's file and value (peers in rank order, itself left out). */
static void group_check(struct group *g)
{
	for (int r = 0; r < g->n; r++) {
		int i = 0;

		assert_int_equal(g->rc[r], 0);
		for (int p = 0; p < g->n; p++) {
			if (p == r)
				continue;
			assert_true(g->got[r][i] >= 0 && g->got[r][i] != g->files[p]);
			assert_true(same_file(g->got[r][i], g->files[p]));
			assert_false(same_file(g->got[r][i], g->files[r]));
			assert_int_equal(g->vals[r][i], 1000u + (uint64_t)p);
			i++;
		}
	}
}

static void group_fini(struct group *g)
{
	for (int r = 0; r < g->n; r++) {
		for (int i = 0; i < g->n - 1; i++) {
			if (g->got[r][i] >= 0)
				close(g->got[r][i]);
		}
		close(g->files[r]);
	}
	pthread_barrier_destroy(&g->met);
}

static void run_groups(struct group *gs, int ngroups)
{
	pthread_t th[2 * MAXR];
	struct rank_arg args[2 * MAXR];
	int t = 0;

	for (int k = 0; k < ngroups; k++) {
		for (int r = 0; r < gs[k].n; r++, t++) {
			args[t] = (struct rank_arg){ &gs[k], r };
			assert_int_equal(pthread_create(&th[t], NULL, rank_main, &args[t]), 0);
		}
	}
	while (t-- > 0)
		pthread_join(th[t], NULL);
}

static void test_two_ranks(void **state)
{
	struct group g;

	(void)state;
	group_init(&g, 2, 0x1234);
	run_groups(&g, 1);
	group_check(&g);
	group_fini(&g);
}

static void test_four_ranks(void **state)
{
	struct group g;

	(void)state;
	group_init(&g, 4, 0xfeedfacecafebeefull);
	run_groups(&g, 1);
	group_check(&g);
	group_fini(&g);
}

/* Same pid, same ranks, different nonces, at the same time: nothing crosses over. */
static void test_two_exchanges_different_nonces(void **state)
{
	struct group g[2];

	(void)state;
	group_init(&g[0], 4, 0xa1);
	group_init(&g[1], 4, 0xa2);
	run_groups(g, 2);
	group_check(&g[0]);
	group_check(&g[1]);
	group_fini(&g[0]);
	group_fini(&g[1]);
}

/* Rank 2 of 3 is alive and listening but never sends: the others time out, bounded. */
static void test_silent_peer_in_exchange(void **state)
{
	struct group g;
	uint64_t t0;
	int ms;

	(void)state;
	group_init(&g, 3, 0xb1);
	g.timeout_ms = 300;
	g.silent = 2;
	t0 = mk_now_ns();
	run_groups(&g, 1);
	ms = (int)((mk_now_ns() - t0) / 1000000u);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(g.rc[r], -ETIMEDOUT);
		/* what did arrive is closed again, nothing half-received is left */
		assert_int_equal(g.got[r][0], -1);
		assert_int_equal(g.got[r][1], -1);
	}
	assert_true(ms >= 250 && ms < 5000);
	group_fini(&g);
}

static void test_name_taken(void **state)
{
	struct mk_fdpass a, b;

	(void)state;
	assert_int_equal(mk_fdpass_listen(&a, 77, (int32_t)getpid(), 0, 4), 0);
	assert_int_equal(mk_fdpass_listen(&b, 77, (int32_t)getpid(), 0, 4), -EADDRINUSE);
	assert_int_equal(b.lfd, -1);
	mk_fdpass_close(&a);
	/* gone with its socket: nothing left in the filesystem to clean up */
	assert_int_equal(mk_fdpass_listen(&b, 77, (int32_t)getpid(), 0, 4), 0);
	mk_fdpass_close(&b);
}

/* A peer that never connects: -ETIMEDOUT after about the timeout, not a hang. */
static void test_peer_never_sends(void **state)
{
	const struct mk_fdpass_peer peer = { 1, (int32_t)getpid() };
	struct mk_fdpass fp;
	uint64_t val, t0;
	int fd = 5, ms;

	(void)state;
	assert_int_equal(mk_fdpass_listen(&fp, 0x99, (int32_t)getpid(), 0, 2), 0);
	t0 = mk_now_ns();
	assert_int_equal(mk_fdpass_recv(&fp, &peer, 1, &fd, &val, 300), -ETIMEDOUT);
	ms = (int)((mk_now_ns() - t0) / 1000000u);
	assert_true(ms >= 250 && ms < 3000);
	assert_int_equal(fd, -1);
	mk_fdpass_close(&fp);
}

/* A peer whose listener is gone (it failed or died): an error at once. */
static void test_send_to_absent_listener(void **state)
{
	const struct mk_fdpass_peer peer = { 1, (int32_t)getpid() };
	struct mk_fdpass me = { .lfd = -1, .nonce = 0x98, .pid = (int32_t)getpid(), .rank = 0 };
	int f = memfd_create("fdpass-test", MFD_CLOEXEC);
	uint64_t t0 = mk_now_ns();

	(void)state;
	assert_int_equal(mk_fdpass_send(&me, &peer, f, 0, 5000), -ECONNREFUSED);
	assert_true(mk_now_ns() - t0 < 2000000000ull);
	close(f);
}

/* A message claiming a rank that is not a peer of this exchange is refused, its fd closed. */
static void test_wrong_rank_refused(void **state)
{
	const int32_t pid = (int32_t)getpid();
	const struct mk_fdpass_peer expect = { 1, pid }, me_as_peer = { 0, pid };
	struct mk_fdpass fp, liar = { .lfd = -1, .nonce = 0x97, .pid = pid, .rank = 3 };
	int f = memfd_create("fdpass-test", MFD_CLOEXEC), fd = 9;
	uint64_t val;

	(void)state;
	assert_int_equal(mk_fdpass_listen(&fp, 0x97, pid, 0, 2), 0);
	assert_int_equal(mk_fdpass_send(&liar, &me_as_peer, f, 1, 1000), 0);
	assert_int_equal(mk_fdpass_recv(&fp, &expect, 1, &fd, &val, 1000), -EPROTO);
	assert_int_equal(fd, -1);
	/* the right rank with a wrong pid is refused too */
	liar.rank = 1;
	liar.pid = pid + 1;
	assert_int_equal(mk_fdpass_send(&liar, &me_as_peer, f, 1, 1000), 0);
	assert_int_equal(mk_fdpass_recv(&fp, &expect, 1, &fd, &val, 1000), -EPROTO);
	/* and the same rank twice in one exchange */
	{
		const struct mk_fdpass_peer two[2] = { { 1, pid }, { 2, pid } };
		int fds[2];
		uint64_t vals[2];

		liar.pid = pid;
		assert_int_equal(mk_fdpass_send(&liar, &me_as_peer, f, 1, 1000), 0);
		assert_int_equal(mk_fdpass_send(&liar, &me_as_peer, f, 1, 1000), 0);
		assert_int_equal(mk_fdpass_recv(&fp, two, 2, fds, vals, 1000), -EPROTO);
		assert_int_equal(fds[0], -1);
		assert_int_equal(fds[1], -1);
	}
	mk_fdpass_close(&fp);
	close(f);
}

/* Two processes: each reads the other's file content through the fd it received. */
static void test_two_processes(void **state)
{
	const uint64_t nonce = 0x5150;
	int up[2], down[2], status;
	pid_t child;

	(void)state;
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	child = fork();
	assert_true(child >= 0);
	if (child >= 0) {
		const int me = child == 0, parent_pid = child == 0 ? getppid() : getpid();
		const struct mk_fdpass_peer peer = { !me, me ? parent_pid : child };
		/* each keeps the ends it uses: a side that quits early gives the other EOF */
		const int wr = me ? up[1] : down[1], rd = me ? down[0] : up[0];
		char mine[32], want[32], got[32] = "";
		struct mk_fdpass fp = { .lfd = -1 };
		int f = memfd_create("fdpass-test", MFD_CLOEXEC), rfd = -1, ok;
		uint64_t val = 0;
		char b = 0;

		close(me ? up[0] : up[1]);
		close(me ? down[1] : down[0]);
		snprintf(mine, sizeof(mine), "rank %d pid %d", me, (int)getpid());
		snprintf(want, sizeof(want), "rank %d pid %d", !me, (int)peer.pid);
		ok = f >= 0 && pwrite(f, mine, strlen(mine) + 1, 0) == (ssize_t)strlen(mine) + 1;
		ok = ok && mk_fdpass_listen(&fp, nonce, (int32_t)getpid(), me, 2) == 0;
		/* meet: each tells the other it listens */
		ok = ok && write(wr, "x", 1) == 1 && read(rd, &b, 1) == 1;
		ok = ok && mk_fdpass_exchange(&fp, &peer, 1, f, (uint64_t)getpid(), &rfd, &val,
					      5000) == 0;
		ok = ok && pread(rfd, got, sizeof(got), 0) > 0 && strcmp(got, want) == 0 &&
		     val == (uint64_t)peer.pid;
		if (child == 0)
			_exit(ok ? 0 : 1);
		close(wr);
		close(rd);
		assert_int_equal(waitpid(child, &status, 0), child);
		assert_true(ok);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		mk_fdpass_close(&fp);
		close(rfd);
		close(f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_ranks),
		cmocka_unit_test(test_four_ranks),
		cmocka_unit_test(test_two_exchanges_different_nonces),
		cmocka_unit_test(test_silent_peer_in_exchange),
		cmocka_unit_test(test_name_taken),
		cmocka_unit_test(test_peer_never_sends),
		cmocka_unit_test(test_send_to_absent_listener),
		cmocka_unit_test(test_wrong_rank_refused),
		cmocka_unit_test(test_two_processes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
