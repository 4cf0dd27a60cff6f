// SPDX-License-Identifier: Apache-2.0
/*
 * Plumbing shared by the fault scenarios: loading the module in a fresh process, its logger,
 * bounded pipe I/O, NCCL-style connection setup with a deadline, process facts (RSS, open fds),
 * a child watchdog and the statistics of a series of trials.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../loopback/shm_leftovers.h"
#include "fault.h"
#include "mk_git.h"

#define LOG_WARN 2
#define LOG_INFO 3

int fault_verbose;

static unsigned nwarns;
/* the last WARNs, kept to count the ones about a given subject */
#define KEPT 256
static char kept[KEPT][256];

double fault_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void fault_sleep(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s,
			       .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void fault_srand(uint64_t seed)
{
	rng_state = seed ? seed : 0x9e3779b97f4a7c15ull;
}

uint64_t fault_rand(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static void fault_log(int level, unsigned long flags, const char *file, int line, const char *fmt,
		      ...) __attribute__((format(printf, 5, 6)));

static void fault_log(int level, unsigned long flags, const char *file, int line, const char *fmt,
		      ...)
{
	char msg[1024];
	va_list ap;

	(void)flags;
	if (level > LOG_WARN && (!fault_verbose || level > LOG_INFO))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (level == LOG_WARN)
		snprintf(kept[nwarns++ % KEPT], sizeof(kept[0]), "%.*s", (int)sizeof(kept[0]) - 1,
			 msg);
	/* WARNs of expected refusals are many: stderr only, the JSON lines stay on stdout */
	fprintf(stderr, "%d %s %s:%d %s\n", (int)getpid(), level == LOG_WARN ? "WARN" : "INFO",
		file, line, msg);
}

unsigned fault_warns(const char *needle)
{
	unsigned first = nwarns > KEPT ? nwarns - KEPT : 0, n = 0;

	if (needle == NULL)
		return nwarns;
	for (unsigned i = first; i < nwarns; i++)
		n += strstr(kept[i % KEPT], needle) != NULL;
	return n;
}

int fault_net_open(struct fault_net *n, const char *path)
{
	struct mk_nccl_net_props_v11 props;
	ncclResult_t ret;

	memset(n, 0, sizeof(*n));
	n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (n->lib == NULL) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		return 1;
	}
	n->t = dlsym(n->lib, "ncclNetPlugin_v11");
	if (n->t == NULL) {
		fprintf(stderr, "%s exports no ncclNetPlugin_v11\n", path);
		return 1;
	}
	ret = n->t->init(&n->ctx, 0x6661756c74ull, NULL, fault_log, NULL);
	if (ret != ncclSuccess) {
		/* the caller checked that the provider exists: no device is a failure here */
		fprintf(stderr, "init failed: %d\n", ret);
		return 1;
	}
	if (n->t->devices(&n->ndev) != ncclSuccess || n->ndev < 1) {
		fprintf(stderr, "devices(): %d devices\n", n->ndev);
		return 1;
	}
	if (n->t->getProperties(0, &props) != ncclSuccess) {
		fprintf(stderr, "getProperties(0) failed\n");
		return 1;
	}
	n->max_recvs = props.maxRecvs;
	return 0;
}

void fault_net_close(struct fault_net *n)
{
	if (n->t != NULL && n->ctx != NULL)
		n->t->finalize(n->ctx);
	n->ctx = NULL;
	/* the module stays mapped: a stale pointer test may still call into it */
}

int fault_write_all(int fd, const void *buf, size_t len)
{
	const char *c = buf;

	while (len > 0) {
		ssize_t k = write(fd, c, len);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		len -= (size_t)k;
	}
	return 0;
}

int fault_read_all(int fd, void *buf, size_t len, double timeout_s)
{
	double deadline = fault_now() + timeout_s;
	char *c = buf;

	while (len > 0) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		double left = deadline - fault_now();
		ssize_t k;

		if (left <= 0)
			return -1;
		if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		k = read(fd, c, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		len -= (size_t)k;
	}
	return 0;
}

int fault_recv_setup(struct fault_net *n, int hfd, void **lc, void **rc, double timeout_s)
{
	char handle[FAULT_HANDLE] = { 0 };
	double deadline = fault_now() + timeout_s;
	struct mk_nccl_net_dev_handle *dc = NULL;

	*rc = NULL;
	if (n->t->listen(n->ctx, 0, handle, lc) != ncclSuccess || *lc == NULL) {
		fprintf(stderr, "listen failed\n");
		return 1;
	}
	if (fault_write_all(hfd, handle, sizeof(handle)) != 0)
		return 1;
	while (*rc == NULL) {
		if (n->t->accept(*lc, rc, &dc) != ncclSuccess) {
			fprintf(stderr, "accept failed\n");
			return 1;
		}
		if (fault_now() > deadline) {
			fprintf(stderr, "accept: no connection within %.0f s\n", timeout_s);
			return 1;
		}
	}
	return 0;
}

int fault_send_setup(struct fault_net *n, int hfd, void **sc, double timeout_s)
{
	char handle[FAULT_HANDLE];
	double deadline = fault_now() + timeout_s;
	struct mk_nccl_net_dev_handle *dc = NULL;

	*sc = NULL;
	if (fault_read_all(hfd, handle, sizeof(handle), timeout_s) != 0) {
		fprintf(stderr, "no handle from the receiver\n");
		return 1;
	}
	while (*sc == NULL) {
		if (n->t->connect(n->ctx, 0, handle, sc, &dc) != ncclSuccess) {
			fprintf(stderr, "connect failed\n");
			return 1;
		}
		if (fault_now() > deadline) {
			fprintf(stderr, "connect: not established within %.0f s\n", timeout_s);
			return 1;
		}
	}
	return 0;
}

int fault_side_open(struct fault_side *s, const char *plugin, bool recv, int hfd, double timeout_s)
{
	memset(s, 0, sizeof(*s));
	s->recv = recv;
	if (fault_net_open(&s->n, plugin) != 0)
		return 1;
	return recv ? fault_recv_setup(&s->n, hfd, &s->lc, &s->comm, timeout_s)
		    : fault_send_setup(&s->n, hfd, &s->comm, timeout_s);
}

void fault_side_close(struct fault_side *s)
{
	if (s->recv) {
		s->n.t->closeRecv(s->comm);
		s->n.t->closeListen(s->lc);
	} else {
		s->n.t->closeSend(s->comm);
	}
	s->comm = NULL;
	s->lc = NULL;
	fault_net_close(&s->n);
}

long fault_rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	}
	fclose(f);
	return kib;
}

int fault_nfds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory stream's own fd */
}

pid_t fault_spawn(int (*fn)(void *), void *arg)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		signal(SIGPIPE, SIG_IGN); /* a dead peer's pipe must not kill the survivor */
		/* exit(), not _exit(): in the sanitized build LeakSanitizer checks every peer */
		exit(fn(arg));
	}
	return pid;
}

int fault_reap(pid_t pid, double deadline, bool *killed)
{
	int st = 0;

	*killed = false;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return st;
		if (r < 0 && errno != EINTR)
			return st;
		if (fault_now() > deadline) {
			kill(pid, SIGKILL);
			*killed = true;
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			return st;
		}
		fault_sleep(0.002);
	}
}

void fault_env(const struct fault_opts *o)
{
	setenv("MKERNEL_TRANSPORT", "ofi", 1);
	setenv("MKERNEL_OFI_PROVIDER", o->provider, 1);
	if (strcmp(o->provider, "shm") != 0)
		setenv("MKERNEL_OFI_IFACE", "lo", 1);
}

void fault_shm_cleanup(pid_t pid)
{
	mk_test_shm_remove_regions_of(pid);
}

void fault_json(const char *fmt, ...)
{
	char date[32];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;

	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
	putchar('{');
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(",\"git\":\"%s\",\"date\":\"%s\"}\n", MK_GIT_HASH, date);
	fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void fault_stats(double *v, int n, double *median, double *max)
{
	*median = 0;
	*max = 0;
	if (n <= 0)
		return;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	*median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*max = v[n - 1];
}
