// SPDX-License-Identifier: Apache-2.0
/*
 * A peer SIGKILLed at a random moment of a large transfer. Per trial a receiver and a sender
 * (fresh processes) stream 4 MiB messages, four in flight; once both have completed messages the
 * parent waits a random 0-300 ms and kills one of them. The survivor must get an error from
 * test, isend or irecv (never a hang, never a crash) within --max-detect seconds, then close its
 * comms and finalize. One JSON line per trial, then a summary with the detection times.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault.h"

#define MSG	  (4u << 20)
#define WINDOW	  4
#define SETUP_S	  30.0
#define STREAM_S  120.0 /* a survivor that never sees an error gives up after this */
#define CLOSE_S	  10.0	/* closing after the error must not hang either */
#define MAX_DELAY 0.3

struct kill_report {
	char type; /* 'R' ready, 'E' error seen, 'C' closed, 'T' no error within STREAM_S */
	char call[15];
	int result;
	double t;
};

struct kill_peer {
	const struct fault_opts *o;
	bool recv;
	int hfd;
	int rep;
};

static void report(int fd, char type, const char *call, int result)
{
	struct kill_report r = { .type = type, .result = result, .t = fault_now() };

	snprintf(r.call, sizeof(r.call), "%s", call != NULL ? call : "");
	fault_write_all(fd, &r, sizeof(r));
}

/* Streams until a call fails; returns which one in *call and the result. */
static int kill_stream(struct fault_net *n, void *comm, bool recv, char *buf, void *mh, int rep,
		       const char **call)
{
	void *req[WINDOW] = { 0 };
	long done = 0;
	double end = fault_now() + STREAM_S;
	ncclResult_t r;

	while (fault_now() < end) {
		for (int i = 0; i < WINDOW; i++) {
			int fin = 0, sz = 0;

			if (req[i] == NULL) {
				void *data = buf + (size_t)i * MSG;
				size_t size = MSG;
				int tag = 1;

				if (recv) {
					*call = "irecv";
					r = n->t->irecv(comm, 1, &data, &size, &tag, &mh, NULL,
							&req[i]);
				} else {
					*call = "isend";
					r = n->t->isend(comm, data, size, tag, mh, NULL, &req[i]);
				}
				if (r != ncclSuccess)
					return r;
				continue;
			}
			*call = "test";
			r = n->t->test(req[i], &fin, &sz);
			if (r != ncclSuccess)
				return r;
			if (fin) {
				req[i] = NULL;
				if (++done == WINDOW)
					report(rep, 'R', NULL, 0);
			}
		}
	}
	*call = "none";
	return ncclSuccess;
}

static int kill_peer_main(void *arg)
{
	struct kill_peer *p = arg;
	struct fault_side side;
	void *mh = NULL;
	const char *call = "setup";
	size_t len = (size_t)MSG * WINDOW;
	char *buf;
	int r;

	if (fault_side_open(&side, p->o->plugin, p->recv, p->hfd, SETUP_S))
		return 1;
	buf = aligned_alloc(4096, len);
	if (buf == NULL)
		return 1;
	memset(buf, 0x5a, len);
	if (side.n.t->regMr(side.comm, buf, len, MK_NCCL_PTR_HOST, &mh) != ncclSuccess)
		return 1;
	r = kill_stream(&side.n, side.comm, p->recv, buf, mh, p->rep, &call);
	if (r == ncclSuccess) {
		report(p->rep, 'T', call, 0);
		return 1;
	}
	report(p->rep, 'E', call, r);
	/* what NCCL does after an error: tear everything down, which must not hang */
	side.n.t->deregMr(side.comm, mh);
	fault_side_close(&side);
	report(p->rep, 'C', NULL, 0);
	free(buf);
	return 0;
}

struct kill_result {
	double detect_s; /* < 0: no error seen */
	bool hang, crash, slow, setup_failed;
	char call[15];
	int result;
};

static const char *status_str(int st, char *buf, size_t len)
{
	if (WIFSIGNALED(st))
		snprintf(buf, len, "signal %d", WTERMSIG(st));
	else
		snprintf(buf, len, "exit %d", WEXITSTATUS(st));
	return buf;
}

/* Wait for a report of the given type from fd, skipping others (extra 'R's). */
static int wait_report(int fd, char type, double timeout_s, struct kill_report *out)
{
	double deadline = fault_now() + timeout_s;

	for (;;) {
		double left = deadline - fault_now();

		if (left <= 0 || fault_read_all(fd, out, sizeof(*out), left) != 0)
			return -1;
		if (out->type == type || out->type == 'T' || out->type == 'E')
			return out->type == type ? 0 : -1;
	}
}

static void kill_trial(const struct fault_opts *o, bool kill_recv, struct kill_result *res)
{
	struct kill_peer peers[2];
	int h[2], rep[2][2], st[2];
	pid_t pid[2];
	struct kill_report r;
	double t_kill;
	bool killed[2];
	int victim = kill_recv ? 0 : 1, survivor = 1 - victim;
	char s1[32], s2[32];

	memset(res, 0, sizeof(*res));
	res->detect_s = -1;
	if (pipe(h) || pipe(rep[0]) || pipe(rep[1])) {
		res->setup_failed = true;
		return;
	}
	for (int i = 0; i < 2; i++) {
		peers[i] = (struct kill_peer){
			.o = o, .recv = i == 0, .hfd = i == 0 ? h[1] : h[0], .rep = rep[i][1]
		};
		pid[i] = fault_spawn(kill_peer_main, &peers[i]);
	}
	close(h[0]);
	close(h[1]);
	close(rep[0][1]);
	close(rep[1][1]);
	if (wait_report(rep[0][0], 'R', SETUP_S, &r) || wait_report(rep[1][0], 'R', SETUP_S, &r)) {
		res->setup_failed = true;
		kill(pid[0], SIGKILL);
		kill(pid[1], SIGKILL);
	} else {
		fault_sleep(MAX_DELAY * (double)(fault_rand() % 1000) / 1000.0);
		/* the time the kill was issued: the survivor may see it before kill() returns here
		 */
		t_kill = fault_now();
		kill(pid[victim], SIGKILL);
		if (wait_report(rep[survivor][0], 'E', o->max_detect_s + 5, &r) == 0) {
			res->detect_s = r.t - t_kill;
			res->slow = res->detect_s > o->max_detect_s;
			res->result = r.result;
			snprintf(res->call, sizeof(res->call), "%s", r.call);
			res->hang = wait_report(rep[survivor][0], 'C', CLOSE_S, &r) != 0;
		} else {
			res->hang = true;
		}
	}
	if (res->hang && getenv("FAULT_DEBUG_HANG") != NULL) {
		/* leave the hung survivor for a debugger */
		fprintf(stderr, "hung survivor: pid %d\n", (int)pid[survivor]);
		fault_sleep(atof(getenv("FAULT_DEBUG_HANG")));
	}
	st[victim] = fault_reap(pid[victim], fault_now() + 5, &killed[victim]);
	st[survivor] =
		fault_reap(pid[survivor], fault_now() + (res->hang ? 0 : 5), &killed[survivor]);
	res->hang |= killed[survivor];
	res->crash = WIFSIGNALED(st[survivor]) && !killed[survivor];
	if (res->setup_failed || res->crash || (!res->hang && WEXITSTATUS(st[survivor]) != 0))
		fprintf(stderr, "trial: recv %s, send %s\n", status_str(st[0], s1, sizeof(s1)),
			status_str(st[1], s2, sizeof(s2)));
	fault_shm_cleanup(pid[0]);
	fault_shm_cleanup(pid[1]);
	close(rep[0][0]);
	close(rep[1][0]);
}

int fault_kill_main(const struct fault_opts *o)
{
	double *detect = calloc((size_t)o->trials, sizeof(*detect));
	int ndetect = 0, hangs = 0, crashes = 0, slow = 0, setup = 0;
	double median, max;

	if (detect == NULL)
		return 1;
	fault_env(o);
	for (int i = 0; i < o->trials; i++) {
		bool kill_recv = strcmp(o->victim, "recv") == 0 ||
				 (strcmp(o->victim, "both") == 0 && i % 2 == 0);
		struct kill_result res;

		kill_trial(o, kill_recv, &res);
		fault_json(
			"\"test\":\"kill\",\"provider\":\"%s\",\"victim\":\"%s\",\"trial\":%d,"
			"\"detect_ms\":%.1f,\"call\":\"%s\",\"result\":%d,\"hang\":%s,\"crash\":%s,"
			"\"setup_failed\":%s",
			o->provider, kill_recv ? "recv" : "send", i, res.detect_s * 1e3, res.call,
			res.result, res.hang ? "true" : "false", res.crash ? "true" : "false",
			res.setup_failed ? "true" : "false");
		fflush(stdout);
		if (res.detect_s >= 0)
			detect[ndetect++] = res.detect_s;
		hangs += res.hang;
		crashes += res.crash;
		slow += res.slow;
		setup += res.setup_failed;
	}
	fault_stats(detect, ndetect, &median, &max);
	fault_json("\"test\":\"kill\",\"summary\":true,\"provider\":\"%s\",\"victim\":\"%s\","
		   "\"trials\":%d,\"detected\":%d,\"detect_median_ms\":%.1f,\"detect_max_ms\":%.1f,"
		   "\"limit_ms\":%.0f,\"slow\":%d,\"hangs\":%d,\"crashes\":%d,\"setup_failed\":%d",
		   o->provider, o->victim, o->trials, ndetect, median * 1e3, max * 1e3,
		   o->max_detect_s * 1e3, slow, hangs, crashes, setup);
	free(detect);
	return ndetect == o->trials && slow == 0 && hangs == 0 && crashes == 0 && setup == 0 ? 0
											     : 1;
}
