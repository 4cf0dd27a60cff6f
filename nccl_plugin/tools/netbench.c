// SPDX-License-Identifier: Apache-2.0
/*
 * mkernel-netbench: bandwidth and latency through the plugin's ncclNet_v11 table, driven the
 * way NCCL's proxy drives it, between two local processes; and, in the same run, the raw
 * libfabric loop (mkernel-rawbench-ofi) on the same provider as the ceiling: the best of
 * tagged send/recv, RMA write and the RMA write in two parts per point. Prints one JSON line
 * per measurement, one per ratio, and a table with the plugin / best raw ratio.
 *
 * Bandwidth: the receiver keeps W receives posted, the sender W sends in flight; N messages per
 * repetition; GB/s = 1e9 B/s from the sender's start to the receiver's acknowledgement of the
 * last message. Latency: ping-pong over two connections, one-way = half the round trip.
 * Interleaving: every point runs in rounds; each round is some plugin repetitions, then the
 * same number of raw repetitions of each method (the plugin's processes wait idle meanwhile),
 * so background load falls on both alike. Medians over all rounds.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mk/bench_buf.h"
#include "mk_git.h"
#include "mk_nccl/net_v11.h"

#define NB_MAX_SIZES 32
#define NB_MAX_WIN   64
#define NB_MAX_REPS  64
#define NB_SLOT_CAP  (256u << 20) /* above window x size, all slots share one buffer */

struct nb_opts {
	const char *plugin;
	const char *raw;
	size_t sizes[NB_MAX_SIZES];
	int nsizes;
	size_t lat_sizes[NB_MAX_SIZES];
	int nlat;
	int windows[8];
	int nwin;
	int reps;   /* repetitions per round */
	int rounds; /* plugin and raw take turns this many times per point */
	int warmup;
	int lat_iters;
	size_t min_bytes; /* bytes per repetition at least (bandwidth) */
	FILE *json;
	const char *provider;
	const char *transport;
	char rawtmp[64];  /* raw ceiling records, one per point; "" when there is no baseline */
	char rawcall[64]; /* one rawbench invocation's output */
};

/* The raw methods, in rawbench's naming; the ceiling is the better one per point. */
#define NB_NMETHODS 3
static const char *const nb_methods[NB_NMETHODS] = { "tagged", "write", "split" };

/* One point's raw repetitions, gathered over its rounds. */
struct nb_raw_acc {
	double v[NB_NMETHODS][NB_MAX_REPS];
	int n[NB_NMETHODS];
};

static int nb_free_port(void);
static int nb_cmp(const void *a, const void *b);
static double nb_pct(double *v, int n, double p);

/* Appends the numbers of the JSON array "key":[...] in line to v (n of them so far). */
static void nb_take_array(const char *line, const char *key, double *v, int *n)
{
	char pat[96];
	const char *p;
	char *end;

	snprintf(pat, sizeof(pat), "\"%s\":[", key);
	p = strstr(line, pat);
	if (p == NULL)
		return;
	p += strlen(pat);
	while (*n < NB_MAX_REPS) {
		double x = strtod(p, &end);

		if (end == p)
			break;
		v[(*n)++] = x;
		p = end;
		if (*p != ',')
			break;
		p++;
	}
}

/*
 * One round of the raw libfabric ceiling for one point (every method, reps repetitions each
 * after a warm-up repetition), run while the plugin's processes wait idle; the repetitions are
 * added to acc.
 */
static void nb_raw_point(const struct nb_opts *o, const char *mode, size_t size, int win, int nmsg,
			 int reps, struct nb_raw_acc *acc)
{
	const char *prov = *o->provider ? o->provider : "tcp;ofi_rxm";
	const char *key = strcmp(mode, "bw") == 0 ? "gbps" : "lat_us";
	int port = nb_free_port();
	char cmd[8192], line[4096];
	FILE *f;

	/* shm has no interface (its addresses are process names); the rest stay on loopback */
	const char *iface = strcmp(prov, "shm") == 0 ? "" : "--iface lo";

	/* bounded: a failed client must not leave us waiting on its server forever; the
	 * client retries its control connection until the server listens */
	snprintf(cmd, sizeof(cmd),
		 "timeout 300 '%s' --provider '%s' %s --server %d >/dev/null & timeout 300 '%s' "
		 "--provider '%s' %s --client 127.0.0.1:%d --mode %s --method best --sizes %zu "
		 "--window %d --iters %d --warmup %d --reps %d > %s; wait",
		 o->raw, prov, iface, port, o->raw, prov, iface, port, mode, size, win, nmsg, nmsg,
		 reps, o->rawcall);
	if (system(cmd) != 0) {
		fprintf(stderr, "mkernel-netbench: raw %s baseline failed at %zu B, window %d\n",
			mode, size, win);
		return;
	}
	f = fopen(o->rawcall, "r");
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		for (int m = 0; m < NB_NMETHODS; m++) {
			char k[64];

			snprintf(k, sizeof(k), "%s_%s", nb_methods[m], key);
			nb_take_array(line, k, acc->v[m], &acc->n[m]);
		}
	}
	if (f != NULL)
		fclose(f);
}

/* The ceiling of one point: the better method by median, both medians kept. */
static void nb_raw_record(const struct nb_opts *o, const char *mode, size_t size, int win, int nmsg,
			  struct nb_raw_acc *acc)
{
	bool bw = strcmp(mode, "bw") == 0;
	const char *key = bw ? "gbps" : "lat_us";
	double med[NB_NMETHODS];
	char each[256] = "";
	int best = -1;
	FILE *f;

	for (int m = 0; m < NB_NMETHODS; m++) {
		size_t used = strlen(each);

		if (acc->n[m] == 0)
			continue;
		med[m] = nb_pct(acc->v[m], acc->n[m], 0.5);
		if (best < 0 || (bw ? med[m] > med[best] : med[m] < med[best]))
			best = m;
		snprintf(each + used, sizeof(each) - used, ",\"%s_%s_median\":%.4f", nb_methods[m],
			 key, med[m]);
	}
	if (best < 0)
		return;
	f = fopen(o->rawtmp, "a");
	if (f == NULL)
		return;
	fprintf(f,
		"{\"tool\":\"rawbench-ofi\",\"provider\":\"%s\",\"mode\":\"%s\",\"size\":%zu,"
		"\"window\":%d,\"iters\":%d,\"reps\":%d,\"rounds\":%d,\"method\":\"%s\","
		"\"%s_median\":%.4f,\"%s_p10\":%.4f,\"%s_p90\":%.4f%s,\"git\":\"%s\"}\n",
		*o->provider ? o->provider : "tcp;ofi_rxm", mode, size, bw ? win : 1, nmsg,
		acc->n[best], o->rounds, nb_methods[best], key, med[best], key,
		nb_pct(acc->v[best], acc->n[best], 0.1), key,
		nb_pct(acc->v[best], acc->n[best], 0.9), each, MK_GIT_HASH);
	fclose(f);
}

struct nb_side {
	const struct mk_nccl_net_v11 *net;
	void *ctx;
	void *send, *recv; /* send: to the peer; recv: from the peer */
	void *smh, *rmh;
	char *sbuf, *rbuf;
	int to_peer, from_peer; /* pipes for handles and acknowledgements */
};

static double nb_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nb_logger(int level, unsigned long flags, const char *file, int line, const char *fmt,
		      ...)
{
	const char *dbg = getenv("NCCL_DEBUG");
	va_list ap;

	if (level > 2 && (dbg == NULL || strcasecmp(dbg, "INFO") != 0))
		return;
	va_start(ap, fmt);
	fprintf(stderr, "[%d] ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void nb_die(const char *what, int rc)
{
	fprintf(stderr, "mkernel-netbench: %s failed (ncclResult %d)\n", what, rc);
	exit(1);
}

#define NB_CHECK(call)                                                                             \
	do {                                                                                       \
		ncclResult_t nb_rc_ = (call);                                                      \
		if (nb_rc_ != ncclSuccess)                                                         \
			nb_die(#call, nb_rc_);                                                     \
	} while (0)

static void nb_xfer(int fd, void *buf, size_t len, int writing)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);

		if (n <= 0) {
			fprintf(stderr, "mkernel-netbench: peer pipe closed\n");
			exit(1);
		}
		p += n;
		len -= (size_t)n;
	}
}

static void nb_wait(const struct mk_nccl_net_v11 *net, void *req, int *size)
{
	int done = 0;

	while (!done)
		NB_CHECK(net->test(req, &done, size));
}

/* Both connections: each process listens for the other and connects to it, like NCCL. */
static void nb_connect(struct nb_side *s, int first)
{
	char mine[MK_NCCL_NET_HANDLE_MAXSIZE], theirs[MK_NCCL_NET_HANDLE_MAXSIZE];
	struct mk_nccl_net_dev_handle *dh = NULL;
	void *lc = NULL;

	NB_CHECK(s->net->listen(s->ctx, 0, mine, &lc));
	if (first) {
		nb_xfer(s->to_peer, mine, sizeof(mine), 1);
		nb_xfer(s->from_peer, theirs, sizeof(theirs), 0);
	} else {
		nb_xfer(s->from_peer, theirs, sizeof(theirs), 0);
		nb_xfer(s->to_peer, mine, sizeof(mine), 1);
	}
	while (s->send == NULL || s->recv == NULL) {
		if (s->send == NULL)
			NB_CHECK(s->net->connect(s->ctx, 0, theirs, &s->send, &dh));
		if (s->recv == NULL)
			NB_CHECK(s->net->accept(lc, &s->recv, &dh));
	}
	NB_CHECK(s->net->closeListen(lc));
}

static void nb_open(struct nb_side *s, const struct nb_opts *o, size_t bytes, int first)
{
	struct mk_nccl_net_comm_config cfg = { .trafficClass = -1 };
	struct mk_nccl_net_props_v11 props;
	void *lib = dlopen(o->plugin, RTLD_NOW | RTLD_LOCAL);
	int ndev = 0;

	if (lib == NULL) {
		fprintf(stderr, "mkernel-netbench: %s\n", dlerror());
		exit(1);
	}
	s->net = dlsym(lib, "ncclNetPlugin_v11");
	if (s->net == NULL)
		nb_die("dlsym(ncclNetPlugin_v11)", -1);
	NB_CHECK(s->net->init(&s->ctx, 0x6d6b6e62, &cfg, nb_logger, NULL));
	NB_CHECK(s->net->devices(&ndev));
	if (ndev < 1)
		nb_die("devices", -1);
	NB_CHECK(s->net->getProperties(0, &props));
	if (first)
		fprintf(stderr, "mkernel-netbench: device 0 '%s', %d Mb/s, maxRecvs %d\n",
			props.name, props.speed, props.maxRecvs);
	s->sbuf = mk_bench_alloc(bytes);
	s->rbuf = mk_bench_alloc(bytes);
	if (s->sbuf == NULL || s->rbuf == NULL)
		nb_die("allocation", -1);
	memset(s->sbuf, first ? 0x11 : 0x22, bytes);
	memset(s->rbuf, 0, bytes);
	nb_connect(s, first);
	NB_CHECK(s->net->regMr(s->send, s->sbuf, bytes, MK_NCCL_PTR_HOST, &s->smh));
	NB_CHECK(s->net->regMr(s->recv, s->rbuf, bytes, MK_NCCL_PTR_HOST, &s->rmh));
}

static int nb_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double nb_pct(double *v, int n, double p)
{
	qsort(v, n, sizeof(*v), nb_cmp);
	return v[(int)(p * (n - 1) + 0.5)];
}

/* Bytes between the window's buffers; 0 where they all share one (bandwidth needs no data). */
static size_t nb_slot(size_t size, int win)
{
	return size * (size_t)win <= NB_SLOT_CAP ? size : 0;
}

/* One bandwidth repetition; the sender returns the elapsed seconds, the receiver 0. */
static double nb_bw_rep(struct nb_side *s, int sender, size_t size, int win, int nmsg)
{
	void *req[NB_MAX_WIN] = { 0 };
	int posted = 0, done_n = 0, tag = 0;
	bool acked = sender; /* the receiver has told the sender to start */
	char ack = 'k';
	double t0 = 0;

	if (sender) {
		nb_xfer(s->from_peer, &ack, 1, 0); /* receiver has its window posted */
		t0 = nb_now();
	}
	while (done_n < nmsg) {
		int progressed = 0;

		for (int w = 0; w < win; w++) {
			char *buf = (sender ? s->sbuf : s->rbuf) + (size_t)w * nb_slot(size, win);
			int done = 0;

			if (req[w] == NULL && posted < nmsg) {
				if (sender) {
					NB_CHECK(s->net->isend(s->send, buf, size, tag, s->smh,
							       NULL, &req[w]));
				} else {
					size_t sz = size;
					void *d = buf;

					NB_CHECK(s->net->irecv(s->recv, 1, &d, &sz, &tag, &s->rmh,
							       NULL, &req[w]));
				}
				posted += req[w] != NULL;
				progressed |= req[w] != NULL;
				/*
				 * Start the sender once the window is posted, or as soon as a
				 * receive is held back: with eager messages the receiver may
				 * post only so far ahead of the CTS entries the sender has
				 * taken in, and the sender takes them in inside its isend and
				 * test, so it must not wait for a full window then (NCCL's
				 * sender never waits on the receiver's posts either).
				 */
				if (!acked && (posted == win || req[w] == NULL)) {
					nb_xfer(s->to_peer, &ack, 1, 1);
					acked = true;
				}
				continue;
			}
			if (req[w] == NULL)
				continue;
			NB_CHECK(s->net->test(req[w], &done, NULL));
			if (done) {
				req[w] = NULL;
				done_n++;
				progressed = 1;
			}
		}
		/*
		 * Nothing moved in a whole sweep: let other work run. On a NIC this costs one
		 * syscall per idle sweep; where the "NIC" is kernel code sharing our CPUs
		 * (soft-RoCE, tcp) it is what lets the data move at all.
		 */
		if (!progressed)
			sched_yield();
		if (!acked && posted == nmsg) {
			nb_xfer(s->to_peer, &ack, 1, 1); /* fewer messages than the window */
			acked = true;
		}
	}
	if (!sender) {
		nb_xfer(s->to_peer, &ack, 1, 1);
		return 0;
	}
	nb_xfer(s->from_peer, &ack, 1, 0);
	return nb_now() - t0;
}

/* The ceiling's turn for one point: the first side runs it, the other waits idle meanwhile. */
static void nb_raw_turn(const struct nb_opts *o, struct nb_side *s, int first, const char *mode,
			size_t size, int win, int nmsg, struct nb_raw_acc *acc)
{
	char go = 'g';

	if (o->rawtmp[0] == '\0')
		return;
	if (first) {
		nb_raw_point(o, mode, size, win, nmsg, o->reps, acc);
		nb_xfer(s->to_peer, &go, 1, 1);
	} else {
		nb_xfer(s->from_peer, &go, 1, 0);
	}
}

static double nb_lat_rep(struct nb_side *s, int first, size_t size, int iters)
{
	double t0 = nb_now();
	int tag = 0;

	for (int i = 0; i < iters; i++) {
		void *r = NULL, *q = NULL;
		size_t sz = size;
		void *d = s->rbuf;

		while (r == NULL)
			NB_CHECK(s->net->irecv(s->recv, 1, &d, &sz, &tag, &s->rmh, NULL, &r));
		if (first) {
			while (q == NULL)
				NB_CHECK(s->net->isend(s->send, s->sbuf, size, tag, s->smh, NULL,
						       &q));
			nb_wait(s->net, q, NULL);
			nb_wait(s->net, r, NULL);
		} else {
			nb_wait(s->net, r, NULL);
			while (q == NULL)
				NB_CHECK(s->net->isend(s->send, s->sbuf, size, tag, s->smh, NULL,
						       &q));
			nb_wait(s->net, q, NULL);
		}
	}
	return (nb_now() - t0) / iters / 2.0;
}

static void nb_record(const struct nb_opts *o, const char *mode, size_t size, int win, double *v,
		      int n, double scale)
{
	double med = nb_pct(v, n, 0.5) * scale, p10 = nb_pct(v, n, 0.1) * scale,
	       p90 = nb_pct(v, n, 0.9) * scale;

	if (strcmp(mode, "bw") == 0)
		fprintf(o->json,
			"{\"tool\":\"mkernel-netbench\",\"path\":\"plugin\",\"mode\":\"bw\","
			"\"transport\":\"%s\",\"provider\":\"%s\",\"size\":%zu,\"window\":%d,"
			"\"reps\":%d,\"rounds\":%d,\"gbps_median\":%.4f,\"gbps_p10\":%.4f,"
			"\"gbps_p90\":%.4f,\"git\":\"%s\"}\n",
			o->transport, o->provider, size, win, n, o->rounds, med, p10, p90,
			MK_GIT_HASH);
	else
		fprintf(o->json,
			"{\"tool\":\"mkernel-netbench\",\"path\":\"plugin\",\"mode\":\"lat\","
			"\"transport\":\"%s\",\"provider\":\"%s\",\"size\":%zu,\"reps\":%d,"
			"\"rounds\":%d,\"lat_us_median\":%.3f,\"lat_us_p10\":%.3f,"
			"\"lat_us_p90\":%.3f,\"git\":\"%s\"}\n",
			o->transport, o->provider, size, n, o->rounds, med, p10, p90, MK_GIT_HASH);
	fflush(o->json);
}

static int nb_nmsg(const struct nb_opts *o, size_t size, int win)
{
	size_t n = o->min_bytes / (size ? size : 1);

	if (n < (size_t)win * 4)
		n = (size_t)win * 4;
	if (n > 4096)
		n = 4096;
	return (int)n;
}

/*
 * One point, both processes: rounds of o->reps plugin repetitions, each round followed by the
 * raw ceiling's turn (warm-up repetitions before the first round only; each raw call warms up
 * by itself). The first process records.
 */
static void nb_point(const struct nb_opts *o, struct nb_side *s, int first, const char *mode,
		     size_t size, int win)
{
	bool bw = strcmp(mode, "bw") == 0;
	int nmsg = bw ? nb_nmsg(o, size, win) : o->lat_iters, n = 0;
	struct nb_raw_acc acc = { 0 };
	double v[NB_MAX_REPS];

	for (int round = 0; round < o->rounds; round++) {
		/*
		 * After the raw ceiling's turn our processes resume from idle, and the raw tool
		 * warms up in every call: one discarded repetition here too, so neither side's
		 * first measured repetition pays for waking up (a 16 MiB repetition over shm is
		 * 7 ms, and the first after a raw turn ran at half speed).
		 */
		int warm = round == 0 ? o->warmup : o->warmup > 0;

		for (int r = 0; r < warm + o->reps; r++) {
			double t = bw ? nb_bw_rep(s, first, size, win, nmsg)
				      : nb_lat_rep(s, first, size, nmsg);

			if (first && r >= warm)
				v[n++] = bw ? (double)size * nmsg / t / 1e9 : t;
		}
		nb_raw_turn(o, s, first, mode, size, win, nmsg, &acc);
	}
	if (!first)
		return;
	nb_record(o, mode, size, win, v, n, bw ? 1.0 : 1e6);
	if (o->rawtmp[0] != '\0')
		nb_raw_record(o, mode, size, win, nmsg, &acc);
}

static void nb_run_side(const struct nb_opts *o, size_t bytes, int first, int to_peer,
			int from_peer)
{
	struct nb_side s = { 0 };

	s.to_peer = to_peer;
	s.from_peer = from_peer;
	nb_open(&s, o, bytes, first);
	for (int i = 0; i < o->nsizes; i++)
		for (int j = 0; j < o->nwin; j++)
			nb_point(o, &s, first, "bw", o->sizes[i], o->windows[j]);
	for (int i = 0; i < o->nlat; i++)
		nb_point(o, &s, first, "lat", o->lat_sizes[i], 1);
	s.net->deregMr(s.send, s.smh);
	s.net->deregMr(s.recv, s.rmh);
	s.net->closeSend(s.send);
	s.net->closeRecv(s.recv);
	s.net->finalize(s.ctx);
}

static int nb_parse_list(const char *arg, size_t *out, int max)
{
	char *copy = strdup(arg), *save = NULL;
	int n = 0;

	for (char *t = strtok_r(copy, ",", &save); t != NULL && n < max;
	     t = strtok_r(NULL, ",", &save)) {
		char *end;
		double v = strtod(t, &end);

		if (*end == 'K' || *end == 'k')
			v *= 1024;
		else if (*end == 'M' || *end == 'm')
			v *= 1024 * 1024;
		else if (*end == 'G' || *end == 'g')
			v *= 1024.0 * 1024 * 1024;
		out[n++] = (size_t)v;
	}
	free(copy);
	return n;
}

static void nb_usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [options]\n"
		"  --plugin PATH      libnccl-net-mkernel.so to load (default: next to this tool)\n"
		"  --transport T      ofi | verbs (sets MKERNEL_TRANSPORT)\n"
		"  --provider P       libfabric provider (sets MKERNEL_OFI_PROVIDER), e.g. "
		"'tcp;ofi_rxm'\n"
		"  --sizes LIST       bandwidth sizes, default 8,512,4K,64K,1M,4M,16M,64M\n"
		"  --windows LIST     messages in flight, default 1,8,32\n"
		"  --lat-sizes LIST   latency sizes (empty list: no latency), default "
		"8,64,512,4K,64K\n"
		"  --reps N           repetitions per round, default 2\n"
		"  --rounds N         turns of plugin and raw per point, default 3 (medians over\n"
		"                     reps x rounds)\n"
		"  --warmup N         discarded repetitions before the first round (and one\n"
		"                     before each later one when N > 0), default 2\n"
		"  --lat-iters N      ping-pongs per latency repetition, default 200\n"
		"  --min-bytes N      bytes per bandwidth repetition, default 64M\n"
		"  --raw PATH|none    raw libfabric ceiling, the best of tagged send/recv, RMA\n"
		"                     write and a write in two parts per point (default:\n"
		"                     mkernel-rawbench-ofi next to this tool when the transport\n"
		"                     is ofi)\n"
		"  --json FILE        JSON lines go to FILE instead of stdout\n",
		prog);
}

static void nb_table(const struct nb_opts *o, const char *plugin_json, const char *raw_json);

static void nb_copy_lines(const char *path, FILE *to)
{
	FILE *f = fopen(path, "r");
	char line[1024];

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		fputs(line, to);
	if (f != NULL)
		fclose(f);
}

/* Bytes each side registers: the largest window's buffers, page-rounded. */
static size_t nb_max_bytes(const struct nb_opts *o)
{
	size_t maxs = 4096;

	for (int i = 0; i < o->nsizes; i++) {
		for (int j = 0; j < o->nwin; j++) {
			size_t slot = nb_slot(o->sizes[i], o->windows[j]);
			size_t need = slot ? slot * (size_t)o->windows[j] : o->sizes[i];

			if (need > maxs)
				maxs = need;
		}
	}
	for (int i = 0; i < o->nlat; i++)
		if (o->lat_sizes[i] > maxs)
			maxs = o->lat_sizes[i];
	return (maxs + 4095) & ~(size_t)4095;
}

/* An empty temporary file named from tmpl into buf; buf is "" when none could be made. */
static void nb_make_tmp(char *buf, size_t len, const char *tmpl)
{
	int fd;

	snprintf(buf, len, "%s", tmpl);
	fd = mkstemp(buf);
	if (fd < 0)
		buf[0] = '\0';
	else
		close(fd);
}

/* A free TCP port on the loopback interface for the raw baseline's address exchange. */
static int nb_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int sk = socket(AF_INET, SOCK_STREAM, 0), port = 0;

	if (sk >= 0 && bind(sk, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(sk, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	if (sk >= 0)
		close(sk);
	return port;
}

int main(int argc, char **argv)
{
	static char plugin_path[8192], raw_path[8192];
	struct nb_opts o = { .reps = 2,
			     .rounds = 3,
			     .warmup = 2,
			     .lat_iters = 200,
			     .min_bytes = 64u << 20,
			     .json = stdout,
			     .transport = "ofi",
			     .provider = "" };
	int p2c[2], c2p[2], status = 0, fd, i;
	char tmpl[] = "/tmp/mkernel-netbench-XXXXXX";
	FILE *plugin_json, *keep;
	size_t maxs;
	pid_t child;

	o.nsizes = nb_parse_list("8,512,4K,64K,1M,4M,16M,64M", o.sizes, NB_MAX_SIZES);
	o.nlat = nb_parse_list("8,64,512,4K,64K", o.lat_sizes, NB_MAX_SIZES);
	o.windows[0] = 1, o.windows[1] = 8, o.windows[2] = 32, o.nwin = 3;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--help") == 0) {
			nb_usage(argv[0]);
			return 0;
		}
		if (v == NULL) {
			nb_usage(argv[0]);
			return 2;
		}
		i++;
		if (strcmp(a, "--plugin") == 0) {
			o.plugin = v;
		} else if (strcmp(a, "--transport") == 0) {
			o.transport = v;
		} else if (strcmp(a, "--provider") == 0) {
			o.provider = v;
		} else if (strcmp(a, "--sizes") == 0) {
			o.nsizes = nb_parse_list(v, o.sizes, NB_MAX_SIZES);
		} else if (strcmp(a, "--lat-sizes") == 0) {
			o.nlat = nb_parse_list(v, o.lat_sizes, NB_MAX_SIZES);
		} else if (strcmp(a, "--windows") == 0) {
			size_t w[8];

			o.nwin = nb_parse_list(v, w, 8);
			for (int k = 0; k < o.nwin; k++)
				o.windows[k] = w[k] > NB_MAX_WIN ? NB_MAX_WIN : (int)w[k];
		} else if (strcmp(a, "--reps") == 0) {
			o.reps = atoi(v);
		} else if (strcmp(a, "--rounds") == 0) {
			o.rounds = atoi(v);
		} else if (strcmp(a, "--warmup") == 0) {
			o.warmup = atoi(v);
		} else if (strcmp(a, "--lat-iters") == 0) {
			o.lat_iters = atoi(v);
		} else if (strcmp(a, "--min-bytes") == 0) {
			nb_parse_list(v, &o.min_bytes, 1);
		} else if (strcmp(a, "--raw") == 0) {
			o.raw = v;
		} else if (strcmp(a, "--json") == 0) {
			o.json = fopen(v, "w");
			if (o.json == NULL) {
				perror(v);
				return 1;
			}
		} else {
			nb_usage(argv[0]);
			return 2;
		}
	}
	if (o.reps < 1 || o.rounds < 1 || o.reps * o.rounds > NB_MAX_REPS || o.warmup < 0 ||
	    o.lat_iters < 1) {
		nb_usage(argv[0]);
		return 2;
	}
	setenv("MKERNEL_TRANSPORT", o.transport, 1);
	if (*o.provider)
		setenv("MKERNEL_OFI_PROVIDER", o.provider, 1);
	if (o.plugin == NULL) {
		char self[4096];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

		self[n > 0 ? n : 0] = '\0';
		*strrchr(self, '/') = '\0';
		snprintf(plugin_path, sizeof(plugin_path), "%s/../libnccl-net-mkernel.so", self);
		if (access(plugin_path, R_OK) != 0)
			snprintf(plugin_path, sizeof(plugin_path), "%s/libnccl-net-mkernel.so",
				 self);
		o.plugin = plugin_path;
		if (o.raw == NULL && strcmp(o.transport, "ofi") == 0) {
			snprintf(raw_path, sizeof(raw_path),
				 "%s/../../transport/tools/rawbench/mkernel-rawbench-ofi", self);
			o.raw = raw_path;
		}
	}
	/* plugin numbers go to a temporary file first so the table can pair them */
	fd = mkstemp(tmpl);
	if (fd < 0 || pipe(p2c) || pipe(c2p)) {
		perror("mkernel-netbench");
		return 1;
	}
	plugin_json = fdopen(fd, "w+");
	if (o.raw != NULL && strcmp(o.raw, "none") != 0 && access(o.raw, X_OK) == 0) {
		nb_make_tmp(o.rawtmp, sizeof(o.rawtmp), "/tmp/mkernel-rawbench-XXXXXX");
		nb_make_tmp(o.rawcall, sizeof(o.rawcall), "/tmp/mkernel-rawcall-XXXXXX");
		if (o.rawcall[0] == '\0')
			o.rawtmp[0] = '\0';
	}
	maxs = nb_max_bytes(&o);
	child = fork();
	if (child == 0) {
		nb_run_side(&o, maxs, 0, c2p[1], p2c[0]);
		_exit(0);
	}
	keep = o.json;
	o.json = plugin_json;
	nb_run_side(&o, maxs, 1, p2c[1], c2p[0]);
	o.json = keep;
	waitpid(child, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "mkernel-netbench: receiver process failed\n");
		return 1;
	}
	fclose(plugin_json);
	nb_copy_lines(tmpl, o.json);
	/* the raw ceiling's lines (measured between the plugin's points) follow the plugin's */
	if (o.rawtmp[0] != '\0')
		nb_copy_lines(o.rawtmp, o.json);
	fflush(o.json);
	nb_table(&o, tmpl, o.rawtmp[0] != '\0' ? o.rawtmp : NULL);
	unlink(tmpl);
	if (o.rawtmp[0] != '\0') {
		unlink(o.rawtmp);
		unlink(o.rawcall);
	}
	return 0;
}

/* Minimal field extraction from our own JSON lines (flat objects, no nesting). */
static double nb_field(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(line, pat);
	return p != NULL ? strtod(p + strlen(pat), NULL) : -1;
}

/* Copies the string value of "key" in line into out ("" when absent). */
static void nb_string(const char *line, const char *key, char *out, size_t len)
{
	char pat[64];
	const char *p, *q;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	p = strstr(line, pat);
	out[0] = '\0';
	if (p == NULL)
		return;
	p += strlen(pat);
	q = strchr(p, '"');
	if (q != NULL && (size_t)(q - p) < len) {
		memcpy(out, p, (size_t)(q - p));
		out[q - p] = '\0';
	}
}

/* The raw ceiling's points, read once: (size, window, best GB/s) or (size, 1, best us). */
struct nb_ceiling {
	bool lat;
	double size, win, value;
	char method[16]; /* which raw method was the better one */
};

static int nb_load_raw(const char *raw_json, struct nb_ceiling *pts, int max)
{
	FILE *r = raw_json != NULL ? fopen(raw_json, "r") : NULL;
	char line[1024];
	int n = 0;

	while (r != NULL && n < max && fgets(line, sizeof(line), r) != NULL) {
		bool lat = strstr(line, "\"mode\":\"lat\"") != NULL;

		pts[n] = (struct nb_ceiling){
			.lat = lat,
			.size = nb_field(line, "size"),
			.win = nb_field(line, "window"),
			.value = nb_field(line, lat ? "lat_us_median" : "gbps_median"),
		};
		nb_string(line, "method", pts[n].method, sizeof(pts[n].method));
		n++;
	}
	if (r != NULL)
		fclose(r);
	return n;
}

static const struct nb_ceiling *nb_find_raw(const struct nb_ceiling *pts, int n, bool lat,
					    double size, double win)
{
	for (int i = 0; i < n; i++)
		if (pts[i].lat == lat && pts[i].size == size && (lat || pts[i].win == win))
			return &pts[i];
	return NULL;
}

/*
 * Pairs every plugin point with the ceiling of the same point: a table on stderr and one
 * "ratio" record per pair (bandwidth: plugin / raw; latency: raw / plugin, so that above 1 is
 * better for the plugin in both).
 */
static void nb_table(const struct nb_opts *o, const char *plugin_json, const char *raw_json)
{
	struct nb_ceiling pts[NB_MAX_SIZES * 8];
	int npts = nb_load_raw(raw_json, pts, NB_MAX_SIZES * 8);
	FILE *f = fopen(plugin_json, "r");
	char line[1024];

	for (int pass = 0; pass < 2 && f != NULL; pass++) {
		bool lat = pass == 1;
		const char *key = lat ? "lat_us" : "gbps";
		char med[32];

		snprintf(med, sizeof(med), "%s_median", key);
		if (lat)
			fprintf(stderr, "\n%-10s %-14s %-14s %-8s %-10s\n", "size", "plugin us",
				"raw us", "method", "raw/plugin");
		else
			fprintf(stderr, "\n%-10s %-7s %-14s %-14s %-8s %-8s\n", "size", "window",
				"plugin GB/s", "raw GB/s", "method", "ratio");
		rewind(f);
		while (fgets(line, sizeof(line), f) != NULL) {
			double size = nb_field(line, "size"), win = nb_field(line, "window");
			double mine = nb_field(line, med), ratio;
			const struct nb_ceiling *c;

			if (strstr(line, lat ? "\"mode\":\"lat\"" : "\"mode\":\"bw\"") == NULL)
				continue;
			c = nb_find_raw(pts, npts, lat, size, win);
			if (c == NULL || c->value <= 0 || mine <= 0) {
				fprintf(stderr, "%-10.0f %-7.0f %-14.3f %-14s\n", size,
					lat ? 1 : win, mine, "-");
				continue;
			}
			ratio = lat ? c->value / mine : mine / c->value;
			if (lat)
				fprintf(stderr, "%-10.0f %-14.2f %-14.2f %-8s %-10.2f\n", size,
					mine, c->value, c->method, ratio);
			else
				fprintf(stderr, "%-10.0f %-7.0f %-14.3f %-14.3f %-8s %-8.2f\n",
					size, win, mine, c->value, c->method, ratio);
			fprintf(o->json,
				"{\"tool\":\"mkernel-netbench\",\"path\":\"ratio\",\"mode\":\"%s\","
				"\"transport\":\"%s\",\"provider\":\"%s\",\"size\":%.0f,"
				"\"window\":%.0f,\"plugin_%s\":%.4f,\"raw_%s\":%.4f,"
				"\"raw_method\":\"%s\",\"ratio\":%.4f,\"git\":\"%s\"}\n",
				lat ? "lat" : "bw", o->transport, o->provider, size, lat ? 1 : win,
				med, mine, med, c->value, c->method, ratio, MK_GIT_HASH);
		}
	}
	if (f != NULL)
		fclose(f);
	fflush(o->json);
}
