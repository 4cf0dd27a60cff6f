// SPDX-License-Identifier: Apache-2.0
/*
 * mkernel-rawbench-ofi: what libfabric itself achieves between two processes, the ceiling the
 * plugin is compared against. Plain RDM endpoint, busy-polled CQ, addresses and the remote key
 * exchanged over a TCP socket. Three ways to move a message, all measured in the same run, rep
 * by rep in turn, so the ceiling is the best of them at every point:
 *
 *   tagged  fi_tsend into a receive the target keeps posted (what a two-sided plugin does);
 *   write   fi_writedata with remote CQ data into the target's registered buffer (what the
 *           plugin's rendezvous does once it knows the buffer; no receive needs posting);
 *   split   the same write as two: fi_write of all but the last 64 bytes, then fi_writedata of
 *           those (what the plugin does from 1 MiB where the provider keeps writes in order,
 *           MKERNEL_OFI_SPLIT_WRITES; over rxm on tcp it ran a 1 MiB write faster).
 *
 * Which one wins depends on the provider and the size (rxm switches protocols at its eager and
 * rendezvous limits; shm copies through its region below a size and with CMA above), so the
 * record names the winner ("method") and keeps every method's median.
 *
 *   server: mkernel-rawbench-ofi --provider P [--iface IF] --server PORT   (shm: no --iface)
 *   client: mkernel-rawbench-ofi --provider P [--iface IF] --client HOST:PORT --mode bw|lat
 *           [--method best|tagged|write|split] --sizes 4096,65536 --window W --iters N --warmup N
 *           --reps R [--endpoints 1|2]
 *
 * bw:  the client keeps W messages in flight, N per rep; the server keeps W receives posted
 *      (tagged) or counts the writes' remote completions (write); the clock stops at the
 *      server's 0-byte acknowledgement.
 * lat: ping-pong; one-way latency = half the round trip, averaged over N per rep.
 * --endpoints 2: each side sends from one endpoint and receives on another (each with its own
 *      CQ and AV), as NCCL's separate send and receive comms do; not a ceiling, a measure of
 *      what one endpoint per direction costs (on tcp, one socket per direction).
 * Statistics are over reps. GB/s = 1e9 bytes/s. Exit 77: the provider is absent here.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "mk/bench_buf.h"
#include "rawbench_ctl.h"

#define MAX_SIZES  32
#define MAX_WINDOW 256
#define MAX_REPS   256
#define TAG_DATA   1
#define TAG_ACK	   2
#define SLOT_CAP   (256u << 20) /* above window x size, all slots share one buffer */
#define MR_KEY	   0x6d6b	/* our choice where the provider lets the application pick */
#define TX	   0
#define RX	   1
#define LEAD_CTX   (MAX_WINDOW + 1)
#define SPLIT_TAIL 64 /* bytes the second part of a split write carries (the plugin's) */

enum method {
	METHOD_TAGGED = 0,
	METHOD_WRITE = 1,
	METHOD_SPLIT = 2,
	NMETHODS = 3,
};

static const char *const method_names[NMETHODS] = { "tagged", "write", "split" };

/* What the client tells the server (same build on both sides). */
struct config {
	char mode[4];
	char method[8]; /* best, tagged or write */
	uint32_t nsizes;
	uint64_t sizes[MAX_SIZES];
	uint32_t window, iters, warmup, reps;
	uint32_t endpoints; /* 1, or 2: one to send from, one to receive on */
};

/* Where the peer may write: its buffer's address (or 0 where RMA takes offsets) and key. */
struct remote {
	uint64_t base;
	uint64_t key;
};

struct bench {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	/* [TX] sends and writes go out from, [RX] receives and remote writes land on; one
	 * endpoint in both slots unless --endpoints 2 */
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	struct fid_av *av[2];
	int nep;
	struct fid_mr *mr;
	void *desc;
	fi_addr_t peer[2]; /* [TX]: the peer's receiving endpoint; [RX]: its sending one */
	uint8_t *buf;
	size_t slot;				/* bytes between slots; 0: all share */
	struct fi_context2 ctx[MAX_WINDOW + 2]; /* then the ack's, then every lead's of a split */
	struct remote rem;
	uint64_t remote_writes; /* the peer's writes that landed, not yet consumed */
	int sock;
};

static void die(const char *what, long rc)
{
	fprintf(stderr, "mkernel-rawbench-ofi: %s: %s\n", what,
		rc < 0 ? fi_strerror((int)-rc) : strerror(errno));
	exit(1);
}

static void ep_open(struct bench *b, int i)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA, .size = 4 * MAX_WINDOW };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 1 };
	int rc;

	if ((rc = fi_cq_open(b->domain, &cq_attr, &b->cq[i], NULL)) ||
	    (rc = fi_av_open(b->domain, &av_attr, &b->av[i], NULL)) ||
	    (rc = fi_endpoint(b->domain, b->info, &b->ep[i], NULL)) ||
	    (rc = fi_ep_bind(b->ep[i], &b->cq[i]->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_ep_bind(b->ep[i], &b->av[i]->fid, 0)) || (rc = fi_enable(b->ep[i])))
		die("opening the endpoint", rc);
}

static void fabric_open(struct bench *b, const char *prov, const char *iface, int nep)
{
	struct fi_info *hints = fi_allocinfo();
	bool lo = iface != NULL && strcmp(iface, "lo") == 0;
	int rc;

	hints->caps = FI_TAGGED | FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode =
		FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->av_type = FI_AV_TABLE;
	hints->fabric_attr->prov_name = strdup(prov);
	if (iface != NULL && !lo)
		hints->domain_attr->name = strdup(iface);
	/* stay on loopback: without a source address some providers pick another NIC */
	rc = fi_getinfo(FI_VERSION(1, 11), lo ? "127.0.0.1" : NULL, NULL, lo ? FI_SOURCE : 0, hints,
			&b->info);
	fi_freeinfo(hints);
	if (rc == -FI_ENODATA) {
		fprintf(stderr, "mkernel-rawbench-ofi: provider %s not available\n", prov);
		exit(77);
	}
	if (rc)
		die("fi_getinfo", rc);
	if ((rc = fi_fabric(b->info->fabric_attr, &b->fabric, NULL)) ||
	    (rc = fi_domain(b->fabric, b->info, &b->domain, NULL)))
		die("opening the domain", rc);
	b->nep = nep;
	for (int i = 0; i < nep; i++)
		ep_open(b, i);
	if (nep == 1) {
		b->ep[RX] = b->ep[TX];
		b->cq[RX] = b->cq[TX];
		b->av[RX] = b->av[TX];
	}
}

/* Both sides send TX's name, then RX's; each slot's AV takes the peer's opposite endpoint. */
static void exchange_addrs(struct bench *b)
{
	uint8_t mine[64], theirs[2][64];
	uint32_t n, tl;

	for (int i = 0; i < 2; i++) {
		size_t len = sizeof(mine);
		int rc = fi_getname(&b->ep[i]->fid, mine, &len);

		if (rc)
			die("fi_getname", rc);
		n = (uint32_t)len;
		rb_send(b->sock, &n, sizeof(n));
		rb_send(b->sock, mine, len);
		rb_recv(b->sock, &tl, sizeof(tl));
		if (tl > sizeof(theirs[i]))
			die("peer address too long", -FI_EINVAL);
		rb_recv(b->sock, theirs[i], tl);
	}
	for (int i = 0; i < b->nep; i++) {
		/* TX writes to the peer's RX; RX names the peer's TX as the source of receives */
		const uint8_t *addr = theirs[i == TX ? RX : TX];

		if (fi_av_insert(b->av[i], addr, 1, &b->peer[i], 0, NULL) != 1)
			die("fi_av_insert", -FI_EINVAL);
	}
	if (b->nep == 1)
		b->peer[RX] = b->peer[TX];
}

/*
 * One registration covers every slot, open to the peer's writes. tcp and net (1.17) want an
 * application-chosen key and offsets from the region start; shm and efa take addresses.
 */
static void buffers_open(struct bench *b, const struct config *c)
{
	uint64_t mr_mode = b->info->domain_attr->mr_mode;
	struct remote mine;
	size_t max = 1;
	size_t total;
	int rc;

	for (uint32_t i = 0; i < c->nsizes; i++)
		max = c->sizes[i] > max ? c->sizes[i] : max;
	b->slot = max * c->window <= SLOT_CAP ? max : 0;
	total = b->slot ? max * c->window : max;
	total = (total + 4095) & ~(size_t)4095;
	b->buf = mk_bench_alloc(total);
	if (b->buf == NULL)
		die("buffer allocation", 0);
	memset(b->buf, 0xa5, total);
	rc = fi_mr_reg(b->domain, b->buf, total,
		       FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE | FI_READ | FI_REMOTE_READ, 0,
		       MR_KEY, 0, &b->mr, NULL);
	if (rc)
		die("fi_mr_reg", rc);
	if (mr_mode & FI_MR_LOCAL)
		b->desc = fi_mr_desc(b->mr);
	mine.base = mr_mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)b->buf : 0;
	mine.key = fi_mr_key(b->mr);
	rb_send(b->sock, &mine, sizeof(mine));
	rb_recv(b->sock, &b->rem, sizeof(b->rem));
}

static void *slot(struct bench *b, uint32_t i)
{
	return b->buf + (size_t)i * b->slot;
}

/*
 * Bandwidth runs give the CPU away on an empty poll, exactly as mkernel-netbench does, so the
 * ceiling and the plugin share one polling discipline (on loopback the kernel moves the bytes
 * on the same CPUs). Latency runs spin.
 */
static bool yield_when_idle;

/*
 * One CQ read. Local completions go to idx (their slot; MAX_WINDOW = the ack); the peer's
 * writes that landed here are counted in b->remote_writes. Returns the local ones written.
 */
static int cq_poll_one(struct bench *b, struct fid_cq *cq, int *idx, int max)
{
	struct fi_cq_data_entry ent[16];
	struct fi_cq_err_entry err = { 0 };
	ssize_t n = fi_cq_read(cq, ent, 16);
	int k = 0;

	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		fi_cq_readerr(cq, &err, 0);
		die("completion error", -err.err);
	}
	if (n < 0)
		die("fi_cq_read", n);
	for (ssize_t i = 0; i < n; i++) {
		/* by FI_REMOTE_WRITE: some providers flag the writer's own side with CQ data */
		if (ent[i].flags & FI_REMOTE_WRITE) {
			b->remote_writes++;
			continue;
		}
		if ((struct fi_context2 *)ent[i].op_context == &b->ctx[LEAD_CTX])
			continue; /* a split write's first part: its second reports the write */
		if (k == max)
			die("more local completions than operations", -FI_EOVERFLOW);
		idx[k++] = (int)((struct fi_context2 *)ent[i].op_context - b->ctx);
	}
	return k;
}

/* One read of each CQ (two with --endpoints 2, as a caller of two comms polls both). */
static int cq_poll(struct bench *b, int *idx, int max)
{
	int k = cq_poll_one(b, b->cq[TX], idx, max);

	if (b->nep == 2)
		k += cq_poll_one(b, b->cq[RX], idx + k, max - k);
	return k;
}

/* Waits until at least one local completion arrived; returns how many (in idx). */
static int cq_wait(struct bench *b, int *idx, int max)
{
	int k;

	while ((k = cq_poll(b, idx, max)) == 0)
		if (yield_when_idle)
			sched_yield();
	return k;
}

/* Waits until n of the peer's writes have landed here, and consumes them. */
static void remote_wait(struct bench *b, uint64_t n)
{
	int idx[16];

	while (b->remote_writes < n) {
		if (cq_poll(b, idx, 16) != 0)
			die("unexpected local completion", -FI_EOTHER);
		if (b->remote_writes < n && yield_when_idle)
			sched_yield();
	}
	b->remote_writes -= n;
}

static void post(struct bench *b, bool send, void *buf, size_t len, uint64_t tag, int ctx)
{
	ssize_t rc;

	for (;;) {
		if (send)
			rc = fi_tsend(b->ep[TX], buf, len, b->desc, b->peer[TX], tag, &b->ctx[ctx]);
		else
			rc = fi_trecv(b->ep[RX], buf, len, b->desc, b->peer[RX], tag, 0,
				      &b->ctx[ctx]);
		if (rc != -FI_EAGAIN)
			break;
		fi_cq_read(b->cq[send ? TX : RX], NULL, 0); /* progress, then try again */
	}
	if (rc)
		die(send ? "fi_tsend" : "fi_trecv", rc);
}

/* Posts one RMA write, retrying while the queue is full. */
static void post_rma(struct bench *b, bool data, uint32_t i, void *src, size_t len, uint64_t raddr,
		     struct fi_context2 *ctx)
{
	ssize_t rc;

	for (;;) {
		rc = data ? fi_writedata(b->ep[TX], src, len, b->desc, i, b->peer[TX], raddr,
					 b->rem.key, ctx)
			  : fi_write(b->ep[TX], src, len, b->desc, b->peer[TX], raddr, b->rem.key,
				     ctx);
		if (rc != -FI_EAGAIN)
			break;
		fi_cq_read(b->cq[TX], NULL, 0);
	}
	if (rc)
		die(data ? "fi_writedata" : "fi_write", rc);
}

/*
 * Writes len bytes from our slot i to the peer's slot i, with remote CQ data; split: all but
 * the last SPLIT_TAIL bytes first without it.
 */
static void post_write(struct bench *b, uint32_t i, size_t len, int ctx, bool split)
{
	uint64_t raddr = b->rem.base + (uint64_t)i * b->slot;
	char *src = slot(b, i);
	size_t lead = split && len > SPLIT_TAIL ? len - SPLIT_TAIL : 0;

	if (lead != 0)
		post_rma(b, false, i, src, lead, raddr, &b->ctx[LEAD_CTX]);
	post_rma(b, true, i, src + lead, len - lead, raddr + lead, &b->ctx[ctx]);
}

/* Receiver side of one bw run of n messages; acknowledges the last one. */
static void bw_recv(struct bench *b, enum method m, size_t size, uint32_t n, uint32_t window)
{
	uint32_t posted = 0, got = 0;
	int idx[16];

	if (m != METHOD_TAGGED) {
		rb_barrier(b->sock);
		remote_wait(b, n);
	} else {
		while (posted < n && posted < window) {
			post(b, false, slot(b, posted), size, TAG_DATA, (int)posted);
			posted++;
		}
		rb_barrier(b->sock);
		while (got < n) {
			int k = cq_wait(b, idx, 16);

			for (int i = 0; i < k; i++, got++) {
				if (posted < n) {
					post(b, false, slot(b, (uint32_t)idx[i]), size, TAG_DATA,
					     idx[i]);
					posted++;
				}
			}
		}
	}
	post(b, true, b->buf, 0, TAG_ACK, MAX_WINDOW);
	cq_wait(b, idx, 1);
}

static void bw_post(struct bench *b, enum method m, uint32_t i, size_t size)
{
	if (m != METHOD_TAGGED)
		post_write(b, i, size, (int)i, m == METHOD_SPLIT);
	else
		post(b, true, slot(b, i), size, TAG_DATA, (int)i);
}

/* Sender side: returns seconds from the first message to the receiver's ack. */
static double bw_send(struct bench *b, enum method m, size_t size, uint32_t n, uint32_t window)
{
	uint32_t posted = 0, done = 0;
	bool acked = false;
	double t0;
	int idx[16];

	post(b, false, b->buf, 0, TAG_ACK, MAX_WINDOW);
	rb_barrier(b->sock);
	t0 = rb_now_s();
	while (posted < n && posted < window) {
		bw_post(b, m, posted, size);
		posted++;
	}
	while (done < n || !acked) {
		int k = cq_wait(b, idx, 16);

		for (int i = 0; i < k; i++) {
			if (idx[i] == MAX_WINDOW) {
				acked = true;
				continue;
			}
			done++;
			if (posted < n) {
				bw_post(b, m, (uint32_t)idx[i], size);
				posted++;
			}
		}
	}
	return rb_now_s() - t0;
}

/* One ping-pong round trip; the client pings. */
static void pingpong(struct bench *b, enum method m, size_t size, bool client)
{
	int idx[2], got = 0;

	if (m != METHOD_TAGGED) {
		/* the pong may land before our ping's local completion: count both apart */
		if (client) {
			post_write(b, 1, size, 1, m == METHOD_SPLIT);
			while (got < 1)
				got += cq_poll(b, idx, 1);
			remote_wait(b, 1);
		} else {
			remote_wait(b, 1);
			post_write(b, 1, size, 1, m == METHOD_SPLIT);
			while (got < 1)
				got += cq_poll(b, idx, 1);
		}
		return;
	}
	post(b, false, slot(b, 1), size, TAG_DATA, 1);
	if (client)
		post(b, true, slot(b, 0), size, TAG_DATA, 0);
	while (got < (client ? 2 : 1))
		got += cq_wait(b, idx, 2 - got);
	if (!client) {
		post(b, true, slot(b, 0), size, TAG_DATA, 0);
		cq_wait(b, idx, 1);
	}
}

static double lat_run(struct bench *b, enum method m, size_t size, uint32_t n, bool client)
{
	double t0;

	rb_barrier(b->sock);
	t0 = rb_now_s();
	for (uint32_t i = 0; i < n; i++)
		pingpong(b, m, size, client);
	return (rb_now_s() - t0) / n / 2 * 1e6; /* one-way, microseconds */
}

static double pct(const double *sorted, uint32_t n, double p)
{
	double pos = p * (n - 1);
	uint32_t lo = (uint32_t)pos;

	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * (pos - lo);
}

/* One measurement of method m (one rep of n messages); the client's figure, 0 on the server. */
static double measure(struct bench *b, const struct config *c, enum method m, size_t size,
		      uint32_t n, bool client)
{
	if (strcmp(c->mode, "bw") != 0)
		return lat_run(b, m, size, n, client);
	if (!client) {
		bw_recv(b, m, size, n, c->window);
		return 0; /* the client reports */
	}
	return size * (double)n / bw_send(b, m, size, n, c->window) / 1e9;
}

/* A split write of at most SPLIT_TAIL bytes is the plain write: measured once, not twice. */
static bool method_applies(enum method m, size_t size)
{
	return m != METHOD_SPLIT || size > SPLIT_TAIL;
}

static void report(struct bench *b, const struct config *c, size_t size, double v[][MAX_REPS],
		   const bool *on)
{
	bool bw = strcmp(c->mode, "bw") == 0;
	const char *key = bw ? "gbps" : "lat_us";
	char host[64] = "", each[4096] = "";
	double med[NMETHODS];
	int best = -1;

	gethostname(host, sizeof(host) - 1);
	for (int m = 0; m < NMETHODS; m++) {
		size_t used = strlen(each);

		if (!on[m] || !method_applies((enum method)m, size))
			continue;
		qsort(v[m], c->reps, sizeof(double), rb_cmp_double);
		med[m] = pct(v[m], c->reps, 0.5);
		/* the ceiling: more bandwidth, or less latency */
		if (best < 0 || (bw ? med[m] > med[best] : med[m] < med[best]))
			best = m;
		used += (size_t)snprintf(each + used, sizeof(each) - used,
					 ",\"%s_%s_median\":%.4f,\"%s_%s\":[", method_names[m], key,
					 med[m], method_names[m], key);
		/* every repetition, so a caller can pool several runs before taking medians */
		for (uint32_t r = 0; r < c->reps && used < sizeof(each); r++)
			used += (size_t)snprintf(each + used, sizeof(each) - used, "%s%.4f",
						 r ? "," : "", v[m][r]);
		if (used < sizeof(each))
			snprintf(each + used, sizeof(each) - used, "]");
	}
	printf("{\"tool\":\"rawbench-ofi\",\"provider\":\"%s\",\"mode\":\"%s\",\"size\":%zu,"
	       "\"window\":%u,\"iters\":%u,\"reps\":%u,\"method\":\"%s\",\"%s_median\":%.4f,"
	       "\"%s_p10\":%.4f,\"%s_p90\":%.4f%s,\"endpoints\":%u,\"host\":\"%s\"}\n",
	       b->info->fabric_attr->prov_name, c->mode, size, bw ? c->window : 1, c->iters,
	       c->reps, method_names[best], key, med[best], key, pct(v[best], c->reps, 0.1), key,
	       pct(v[best], c->reps, 0.9), each, c->endpoints, host);
	fflush(stdout);
}

static void run(struct bench *b, const struct config *c, bool client)
{
	bool on[NMETHODS];
	double(*v)[MAX_REPS] = calloc(NMETHODS, sizeof(*v));

	if (v == NULL)
		die("allocation", 0);
	yield_when_idle = strcmp(c->mode, "bw") == 0;
	for (int m = 0; m < NMETHODS; m++)
		on[m] = strcmp(c->method, "best") == 0 || strcmp(c->method, method_names[m]) == 0;
	for (uint32_t s = 0; s < c->nsizes; s++) {
		size_t size = c->sizes[s];

		/* rep 0 is the warmup, not recorded; the methods take turns rep by rep */
		for (uint32_t r = 0; r <= c->reps; r++) {
			uint32_t n = r == 0 ? c->warmup : c->iters;

			for (int m = 0; m < NMETHODS && n > 0; m++) {
				double x;

				if (!on[m] || !method_applies((enum method)m, size))
					continue;
				x = measure(b, c, (enum method)m, size, n, client);
				if (r > 0)
					v[m][r - 1] = x;
			}
		}
		if (client)
			report(b, c, size, v, on);
	}
	free(v);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: mkernel-rawbench-ofi --provider P [--iface IF] (--server PORT | "
		"--client HOST:PORT) --mode bw|lat [--method best|tagged|write|split] --sizes "
		"4096,65536 --window W --iters N --warmup N --reps R [--endpoints 1|2]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "iface", required_argument, NULL, 'i' },
		{ "server", required_argument, NULL, 's' },
		{ "client", required_argument, NULL, 'c' },
		{ "mode", required_argument, NULL, 'm' },
		{ "method", required_argument, NULL, 'M' },
		{ "sizes", required_argument, NULL, 'z' },
		{ "window", required_argument, NULL, 'w' },
		{ "iters", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'u' },
		{ "reps", required_argument, NULL, 'r' },
		{ "endpoints", required_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	struct config c = { .mode = "bw",
			    .method = "best",
			    .window = 64,
			    .iters = 1000,
			    .warmup = 100,
			    .reps = 5,
			    .endpoints = 1 };
	const char *prov = NULL, *iface = NULL, *server = NULL, *client = NULL;
	struct bench b = { 0 };
	int o;

	c.nsizes = (uint32_t)rb_parse_sizes("4096,65536,1048576", c.sizes, MAX_SIZES);
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'p':
			prov = optarg;
			break;
		case 'i':
			iface = optarg;
			break;
		case 's':
			server = optarg;
			break;
		case 'c':
			client = optarg;
			break;
		case 'm':
			snprintf(c.mode, sizeof(c.mode), "%s", optarg);
			break;
		case 'M':
			snprintf(c.method, sizeof(c.method), "%s", optarg);
			break;
		case 'z':
			c.nsizes = (uint32_t)rb_parse_sizes(optarg, c.sizes, MAX_SIZES);
			break;
		case 'w':
			c.window = (uint32_t)atoi(optarg);
			break;
		case 'n':
			c.iters = (uint32_t)atoi(optarg);
			break;
		case 'u':
			c.warmup = (uint32_t)atoi(optarg);
			break;
		case 'r':
			c.reps = (uint32_t)atoi(optarg);
			break;
		case 'e':
			c.endpoints = (uint32_t)atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (prov == NULL || (server == NULL) == (client == NULL) || c.nsizes == 0 || c.window < 1 ||
	    c.window > MAX_WINDOW || c.endpoints < 1 || c.endpoints > 2 || c.iters < 1 ||
	    c.reps < 1 || c.reps > MAX_REPS ||
	    (strcmp(c.mode, "bw") != 0 && strcmp(c.mode, "lat") != 0) ||
	    (strcmp(c.method, "best") != 0 && strcmp(c.method, "tagged") != 0 &&
	     strcmp(c.method, "write") != 0))
		usage();
	if (strcmp(c.mode, "lat") == 0)
		c.window = 2; /* ping and pong slots */
	b.sock = server != NULL ? rb_serve(atoi(server)) : rb_connect(client);
	if (client != NULL)
		rb_send(b.sock, &c, sizeof(c));
	else
		rb_recv(b.sock, &c, sizeof(c));
	fabric_open(&b, prov, iface, (int)c.endpoints);
	exchange_addrs(&b);
	buffers_open(&b, &c);
	run(&b, &c, client != NULL);
	rb_barrier(b.sock); /* nobody tears down while the other still has traffic in flight */
	fi_close(&b.mr->fid);
	for (int i = 0; i < b.nep; i++) {
		fi_close(&b.ep[i]->fid);
		fi_close(&b.av[i]->fid);
		fi_close(&b.cq[i]->fid);
	}
	fi_close(&b.domain->fid);
	fi_close(&b.fabric->fid);
	fi_freeinfo(b.info);
	close(b.sock);
	free(b.buf);
	return 0;
}
