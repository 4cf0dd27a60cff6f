// SPDX-License-Identifier: Apache-2.0
/*
 * The host proxy over real libfabric between processes on one host: the exchange the one-shot
 * all-reduce makes across nodes, with a CPU producer in place of the GPU. Ranks form two
 * "nodes" and every rank is connected to every other (as a comm is); each "call" every rank
 * writes a slice into its heap, puts it with one PUT_SIGNAL to the rank of its local index on
 * the other node, waits until that rank's signal passes what earlier calls consumed and then
 * checks, byte for byte, the slice that landed. Slices alternate between two buffers (parity of the
 * call), sizes straddle the socket buffer (puts of 76-131 KiB and more go out over several progress
 * calls), and every few calls the buffers move to new offsets after a barrier, as a new shape's do.
 * Signals must never pass before their data, never be lost, never land on another word.
 *
 * argv[1] names the provider, argv[2] the ranks (2 or 4); exit 77 only where libfabric does not
 * offer the provider.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fused/runtime/proxy.h"
#include "mk/err.h"
#include "mk/log.h"
#include "../expect.h"
#include "../provider_offered.h"

#define HEAP_LEN   (8u << 20)
#define NSIGNALS   16
#define SIG_BASE   8 /* a put from node n raises SIG_BASE + n at its target */
#define MAX_RANKS  4
#define NSLOTS	   64
#define SHAPES	   12
#define CALLS	   40 /* per shape */
#define TIMEOUT_MS 10000
#define WATCHDOG_S 120

extern const struct mk_transport_ops mk_ofi_ops;
static const struct mk_transport_ops *tp = &mk_ofi_ops;
static int me = -1, nranks = 2;

/* What the ranks share (mapped before the fork): listen handles and a barrier. */
struct board {
	uint8_t handle[MAX_RANKS][MAX_RANKS][MK_TP_HANDLE_MAX]; /* [listener][connector] */
	int posted[MAX_RANKS][MAX_RANKS];
	int arrived; /* barrier: arrivals, all generations */
};

static struct board *board;

/* Every rank has arrived at its gen-th barrier (gen = 1, 2, ...). */
static void barrier(int *gen)
{
	const uint64_t t0 = mk_now_ms();

	*gen += 1;
	__atomic_fetch_add(&board->arrived, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&board->arrived, __ATOMIC_ACQUIRE) < *gen * nranks) {
		expect(mk_now_ms() - t0 < 30000, "barrier %d: the other ranks did not come", *gen);
		sched_yield();
	}
}

static int node_of(int r)
{
	return r / (nranks / 2);
}

/* The rank of my local index on the other node. */
static int partner_of(int r)
{
	return (r + nranks / 2) % nranks;
}

/* Slice sizes: below, at and above the socket buffer and the old 64 KiB boundary. */
static const uint64_t sizes[] = { 64u << 10,  76u << 10,  81920,      100000,  114688,
				  131u << 10, 131072 + 8, 256u << 10, 1u << 20 };

/* A shape: where the slices leave from and land, the same on both ranks (symmetric heap). */
struct shape {
	uint64_t bytes;
	uint64_t src_off; /* two slots: parity 0, 1 */
	uint64_t land_off;
};

static void shape_of(int s, struct shape *sh)
{
	const uint64_t nsz = sizeof(sizes) / sizeof(sizes[0]);
	/* offsets move every shape, 8-byte aligned only, landing before or after the source */
	const uint64_t a = ((uint64_t)s * 2654435761u) % (HEAP_LEN / 4) & ~7ull;

	sh->bytes = sizes[(uint64_t)s % nsz];
	if (s & 1) {
		sh->land_off = a;
		sh->src_off = a + 2 * sh->bytes + 4096;
	} else {
		sh->src_off = a;
		sh->land_off = a + 2 * sh->bytes + 24;
	}
}

static uint64_t word(int rank, int s, uint32_t e, uint64_t i)
{
	return ((uint64_t)(rank + 1) << 56) ^ ((uint64_t)s << 48) ^ ((uint64_t)e << 32) ^ i;
}

static void fill(char *p, uint64_t bytes, int rank, int s, uint32_t e)
{
	for (uint64_t i = 0; i < bytes / 8; i++) {
		const uint64_t w = word(rank, s, e, i);

		memcpy(p + 8 * i, &w, 8);
	}
}

/* Index of the first wrong 8-byte word, or -1. */
static int64_t first_bad(const char *p, uint64_t bytes, int rank, int s, uint32_t e)
{
	for (uint64_t i = 0; i < bytes / 8; i++) {
		uint64_t w;

		memcpy(&w, p + 8 * i, 8);
		if (w != word(rank, s, e, i))
			return (int64_t)i;
	}
	return -1;
}

struct rank {
	char *heap;
	struct mk_bmr *mr;
	struct mk_rkey rkey;
	struct mk_proxy_peer peers[MAX_RANKS];
	uint64_t signals[NSIGNALS];
	struct mk_cmdq_slot *slots;
	struct mk_cmdq_ctrl ctrl;
	struct mk_cmdq_prod prod;
	struct mk_cmdq q;
	struct mk_proxy *proxy;
};

/* The ofi backend's count of shared endpoints (transport/ofi/ofi_sep.c). */
int mk_ofi_sep_count(int *conns);

/*
 * Sharing on (MKERNEL_OFI_SHARED_EP 1 or 2 and not shm), this rank's connections to every other
 * rank sit on shared endpoints, so the signal writes below travel with the backend's connection
 * number in their immediates: with 1 all on one endpoint, with 2 on a set per accepting and
 * connecting pair (setup below accepts from the me lower ranks and connects to the rest). An
 * endpoint per connection (a silent fall back) fails here.
 */
static void shared_check(const struct rank *r)
{
	const char *on = getenv("MKERNEL_OFI_SHARED_EP");
	const char *prov = getenv("MKERNEL_OFI_PROVIDER");
	int mode = on == NULL || *on == '\0' ? 2 : atoi(on);
	int conns = 0, eps, sets, lanes = 1, accepted = me, connected = nranks - 1 - me;

	if (mode == 0 || (prov != NULL && strcmp(prov, "shm") == 0))
		return;
	sets = mode == 1 ? 1 : accepted > connected ? accepted : connected;
	/* a set holds an endpoint per lane (two by default on the socket providers) */
	for (int p = 0; p < nranks; p++)
		if (r->peers[p].conn != NULL)
			lanes = r->peers[p].conn->nlanes;
	eps = mk_ofi_sep_count(&conns);
	expect(eps == sets * lanes && conns == nranks - 1,
	       "%d shared endpoints with %d connections (want %d with %d)", eps, conns,
	       sets * lanes, nranks - 1);
}

/* Connect to every other rank as a comm does: listen for lower ranks, connect to higher. */
static void setup(struct rank *r)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	struct mk_listener *ls[MAX_RANKS] = { 0 };
	uint64_t end = mk_now_ms() + 30000;
	int pending, rc;

	r->heap = aligned_alloc(4096, HEAP_LEN);
	expect(r->heap != NULL, "no memory");
	memset(r->heap, 0, HEAP_LEN);
	rc = tp->reg_mr(0, r->heap, HEAP_LEN, &attr, &r->mr, &r->rkey);
	expect(rc == 0, "reg_mr: %s", mk_strerror(rc));
	for (int p = 0; p < me; p++) {
		rc = tp->listen(0, board->handle[me][p], &ls[p]);
		expect(rc == 0, "listen: %s", mk_strerror(rc));
		__atomic_store_n(&board->posted[me][p], 1, __ATOMIC_RELEASE);
	}
	do {
		pending = 0;
		for (int p = 0; p < nranks; p++) {
			struct mk_conn **c = &r->peers[p].conn;

			if (p == me || (*c != NULL && (p < me || tp->connected(*c) == 1)))
				continue;
			pending++;
			if (p < me) {
				rc = tp->accept(ls[p], &r->rkey, sizeof(r->rkey), c);
				expect(rc == 0, "accept from %d: %s", p, mk_strerror(rc));
			} else if (*c == NULL) {
				if (!__atomic_load_n(&board->posted[p][me], __ATOMIC_ACQUIRE))
					continue;
				rc = tp->connect(0, board->handle[p][me], &r->rkey, sizeof(r->rkey),
						 c);
				expect(rc == 0 && *c != NULL, "connect to %d: %s", p,
				       mk_strerror(rc));
			} else {
				rc = tp->connected(*c);
				expect(rc >= 0, "connected(%d): %s", p, mk_strerror(rc));
			}
		}
		expect(mk_now_ms() < end, "%d connections still pending after 30 s", pending);
	} while (pending > 0);
	for (int p = 0; p < nranks; p++) {
		if (ls[p] != NULL)
			tp->close_listen(ls[p]);
		if (p == me)
			continue;
		expect(r->peers[p].conn->peer_blob_len == sizeof(struct mk_rkey),
		       "peer blob of %zu bytes", r->peers[p].conn->peer_blob_len);
		memcpy(&r->peers[p].heap, r->peers[p].conn->peer_blob, sizeof(struct mk_rkey));
	}
	shared_check(r);
}

static void proxy_up(struct rank *r, int nthreads)
{
	struct mk_cmdq *qs[1] = { &r->q };
	struct mk_proxy_attr a = {
		.ops = tp,
		.rank = me,
		.nranks = nranks,
		.peers = r->peers,
		.heap = r->heap,
		.heap_len = HEAP_LEN,
		.heap_device = 0,
		.heap_mr = r->mr,
		.signals = r->signals,
		.nsignals = NSIGNALS,
		.queues = qs,
		.nqueues = 1,
		.nthreads = nthreads,
		.batch = 64,
		.timeout_ms = TIMEOUT_MS,
	};
	int rc;

	r->slots = aligned_alloc(64, NSLOTS * sizeof(*r->slots));
	expect(r->slots != NULL, "no memory");
	/* start near the wrap, as the queue's own tests do */
	rc = mk_cmdq_init(&r->q, r->slots, &r->ctrl, NSLOTS, 0xffffffe0u, &r->prod);
	expect(rc == 0, "cmdq_init: %s", mk_strerror(rc));
	rc = mk_proxy_create(&a, &r->proxy);
	expect(rc == 0, "proxy_create: %s", mk_strerror(rc));
	rc = mk_proxy_start(r->proxy);
	expect(rc == 0, "proxy_start: %s", mk_strerror(rc));
}

static uint64_t signal_read(struct rank *r, uint32_t sig)
{
	return __atomic_load_n(&r->signals[sig], __ATOMIC_ACQUIRE);
}

/* One call of shape s: put my slice, wait for my partner's, check it. */
static void call(struct rank *r, int s, const struct shape *sh, uint32_t e, uint64_t *seen)
{
	const uint64_t par = (uint64_t)(e & 1) * sh->bytes;
	const int partner = partner_of(me);
	const uint32_t want_sig = SIG_BASE + (uint32_t)node_of(partner);
	struct mk_cmdq_dev d = mk_cmdq_dev(&r->q, &r->prod);
	struct mk_cmdq_slot c = {
		.op = MK_CMD_PUT_SIGNAL,
		.peer = (uint32_t)partner,
		.signal = SIG_BASE + (uint32_t)node_of(me),
		.bytes = sh->bytes,
		.src_off = sh->src_off + par,
		.dst_off = sh->land_off + par,
	};
	const uint64_t t0 = mk_now_ms();
	int64_t bad;

	fill(r->heap + sh->src_off + par, sh->bytes, me, s, e);
	expect(mk_cmdq_push_host(&d, &c, -1) >= 0, "push: the proxy failed (%s)",
	       mk_strerror(mk_proxy_error(r->proxy)));
	while (signal_read(r, want_sig) < *seen + 1) {
		expect(mk_proxy_error(r->proxy) == 0, "shape %d call %u: proxy failed: %s", s, e,
		       mk_strerror(mk_proxy_error(r->proxy)));
		expect(mk_now_ms() - t0 < TIMEOUT_MS,
		       "shape %d call %u (%llu bytes): no signal from rank %d after %d ms "
		       "(word %u is %llu, want %llu)",
		       s, e, (unsigned long long)sh->bytes, partner, TIMEOUT_MS, want_sig,
		       (unsigned long long)signal_read(r, want_sig), (unsigned long long)*seen + 1);
		sched_yield();
	}
	/* One arrival per call: the partner may be one call ahead (its next put leaves once it
	 * checked mine), never two, so a signal counted twice shows up here. */
	expect(signal_read(r, want_sig) <= *seen + 2,
	       "shape %d call %u: signal word %u is %llu, at most %llu possible (counted twice?)",
	       s, e, want_sig, (unsigned long long)signal_read(r, want_sig),
	       (unsigned long long)*seen + 2);
	for (uint32_t w = 0; w < NSIGNALS; w++)
		expect(w == want_sig || signal_read(r, w) == 0,
		       "shape %d call %u: signal word %u raised (%llu)", s, e, w,
		       (unsigned long long)signal_read(r, w));
	bad = first_bad(r->heap + sh->land_off + par, sh->bytes, partner, s, e);
	expect(bad < 0,
	       "shape %d call %u (%llu bytes at %llu): signal passed but landed word %lld of %llu "
	       "is stale",
	       s, e, (unsigned long long)sh->bytes, (unsigned long long)(sh->land_off + par),
	       (long long)bad, (unsigned long long)(sh->bytes / 8));
	*seen += 1;
}

static void run(void)
{
	const char *nt = getenv("MKERNEL_PROXY_THREADS");
	struct rank r = { 0 };
	uint64_t seen = 0, calls = 0;
	int nthreads = nt != NULL ? atoi(nt) : 1, gen = 0;

	expect(tp->init() == 0 && tp->ndevs() > 0, "transport init");
	setup(&r);
	proxy_up(&r, nthreads < 1 ? 1 : nthreads);
	for (int s = 0; s < SHAPES; s++) {
		struct shape sh;

		shape_of(s, &sh);
		/* the host's barrier between shapes (NCCL's all-reduce in the real op) */
		barrier(&gen);
		/* epochs restart on a new shape's buffers: parity 1 first, as e = calls + 1 */
		for (uint32_t e = 1; e <= CALLS; e++, calls++)
			call(&r, s, &sh, e, &seen);
	}
	/* every write also completed at its source */
	for (uint64_t t0 = mk_now_ms(); r.q.done != r.q.head;) {
		expect(mk_proxy_error(r.proxy) == 0, "proxy failed at the end: %s",
		       mk_strerror(mk_proxy_error(r.proxy)));
		expect(mk_now_ms() - t0 < TIMEOUT_MS, "puts still incomplete at the end");
		sched_yield();
	}
	barrier(&gen);
	mk_proxy_destroy(r.proxy);
	mk_cmdq_fini(&r.q);
	for (int p = 0; p < nranks; p++) {
		if (r.peers[p].conn != NULL)
			tp->close(r.peers[p].conn);
	}
	tp->dereg_mr(0, r.mr);
	free(r.slots);
	free(r.heap);
	tp->fini();
	printf("ok - rank %d of %d: %llu put_signal calls over %d shapes, every slice checked\n",
	       me, nranks, (unsigned long long)calls, SHAPES);
}

int main(int argc, char **argv)
{
	pid_t pid[MAX_RANKS];
	int st, fails = 0;

	snprintf(mk_lb_who, sizeof(mk_lb_who), "parent"); /* each rank names itself */
	if (argc < 2 || argc > 3 || (argc == 3 && atoi(argv[2]) != 2 && atoi(argv[2]) != 4)) {
		fprintf(stderr, "usage: %s PROVIDER [2|4]\n", argv[0]);
		return 2;
	}
	nranks = argc == 3 ? atoi(argv[2]) : 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("MKERNEL_OFI_PROVIDER", argv[1], 1);
	if (strcmp(argv[1], "shm") != 0)
		setenv("MKERNEL_OFI_IFACE", "lo", 1);
	setenv("MKERNEL_TIMEOUT", "10000", 1);
	if (lb_provider_offered(argv[1]) == 0) {
		printf("# provider %s not available here: skipping\n", argv[1]);
		return 77;
	}
	board = mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
		     0);
	expect(board != MAP_FAILED, "mmap");
	/* libfabric must not be initialised across fork(): every rank is a child */
	for (int i = 0; i < nranks; i++) {
		pid[i] = fork();
		expect(pid[i] >= 0, "fork");
		if (pid[i] == 0) {
			me = i;
			snprintf(mk_lb_who, sizeof(mk_lb_who), "rank %d", me);
			alarm(WATCHDOG_S);
			run();
			_exit(0);
		}
	}
	for (int i = 0; i < nranks; i++) {
		if (waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "FAIL: rank %d exited with status 0x%x\n", i, st);
			fails = 1;
		}
	}
	return fails;
}
