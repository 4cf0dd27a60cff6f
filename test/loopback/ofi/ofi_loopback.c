// SPDX-License-Identifier: Apache-2.0
/*
 * Real libfabric between processes on one host, through mk_ofi_ops exactly as the consumers
 * drive it. argv[1] names the provider; exit 77 when it is absent here.
 *
 * Process A (this one) listens and accepts; B connects and writes; C connects and is killed
 * mid-transfer. Handles travel over pipes, registration keys in the setup blobs. Both children
 * and A are forked before the backend initialises (libfabric state must not cross a fork) and
 * every process arms an alarm so a hang fails instead of spinning.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mk/compiler.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/param.h"
#include "mk/transport.h"
#include "../expect.h"
#include "../provider_offered.h"
#include "../shm_leftovers.h"

#define BUF_SIZE   (16u << 20)
#define NMANY	   16
#define TIMEOUT_MS 5000 /* MKERNEL_TIMEOUT here: short failure cases, yet room for rxm setup */
#define WATCHDOG_S 100

/*
 * Immediates: kind in bits 14..16, argument below. Bits 18..30 stay clear: with sharing
 * MKERNEL_OFI_SHARED_EP=1 they are the backend's (as for the rendezvous core's immediates).
 */
#define IMM_DATA   0x04000u /* data write with immediate: size index */
#define IMM_MARK   0x08000u /* 0-byte marker after a write without immediate */
#define IMM_ACK	   0x0c000u /* A -> B: checked, go on */
#define IMM_RREADY 0x10000u /* B -> A: buffer holds the read pattern */
#define IMM_BYE	   0x14000u
#define IMM_MANY   0x18000u
#define IMM_STRIPE 0x1c000u /* one segment of a message striped over the lanes: lane */
#define IMM_KIND   0x1c000u
#define IMM_ARG	   0x03fffu

extern const struct mk_transport_ops mk_ofi_ops;
static const struct mk_transport_ops *tp = &mk_ofi_ops;

static const size_t sizes[] = { 0, 1, 4096, 1u << 20, 8u << 20 };

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct blob {
	struct mk_rkey rkey;
};

struct peer {
	struct mk_conn *c;
	struct mk_rkey remote; /* the other side's buffer */
	int posted;	       /* writes + reads handed to the backend */
	int done;	       /* successful local completions */
	int failed;	       /* local completions with an error status */
	int last_status;
	int broken;	   /* poll() returned this */
	unsigned int lane; /* writes rotate over the connection's lanes */
	uint32_t imm[64];
	size_t imm_len[64];
	unsigned int ih, it;
};

struct region {
	uint8_t *buf;
	struct mk_bmr *mr;
	struct mk_rkey rkey;
};

static void pump(struct peer *p)
{
	struct mk_event ev[16];
	int n = tp->poll(p->c, ev, 16);

	if (n < 0) {
		p->broken = n;
		return;
	}
	for (int i = 0; i < n; i++) {
		if (ev[i].type == MK_EV_IMM) {
			expect(p->it - p->ih < 64, "immediate queue overflow");
			p->imm[p->it % 64] = ev[i].imm;
			p->imm_len[p->it % 64] = ev[i].len;
			p->it++;
		} else if (ev[i].status == 0) {
			p->done++;
		} else {
			p->failed++;
			p->last_status = ev[i].status;
		}
	}
}

/* Every posted op has completed successfully. */
static void wait_all(struct peer *p)
{
	uint64_t end = now_ms() + 20000;

	while (p->done < p->posted) {
		pump(p);
		expect(p->failed == 0 && p->broken == 0, "operation failed: %s",
		       mk_strerror(p->failed ? p->last_status : p->broken));
		expect(now_ms() < end, "no completion after 20 s");
	}
}

static uint32_t wait_imm(struct peer *p, size_t *len)
{
	uint64_t end = now_ms() + 20000;
	uint32_t v;

	while (p->ih == p->it) {
		pump(p);
		expect(p->broken == 0, "connection broken: %s", mk_strerror(p->broken));
		expect(now_ms() < end, "no immediate after 20 s");
	}
	v = p->imm[p->ih % 64];
	if (len != NULL)
		*len = p->imm_len[p->ih % 64];
	p->ih++;
	return v;
}

static void post_write_on(struct peer *p, int lane, struct region *r, size_t off, size_t len,
			  bool has_imm, uint32_t imm)
{
	uint64_t end = now_ms() + 20000;
	int rc;

	while ((rc = tp->write(p->c, lane, r->buf + off, len, r->mr, p->remote.base + off,
			       &p->remote, has_imm, imm, p)) == -EAGAIN) {
		pump(p);
		expect(now_ms() < end, "write stayed -EAGAIN for 20 s");
	}
	expect(rc == 0, "write(%zu) on lane %d failed: %s", len, lane, mk_strerror(rc));
	p->posted++;
}

/* Each write on the next lane: an immediate and its data arrive on whichever lane carried it. */
static void post_write(struct peer *p, struct region *r, size_t off, size_t len, bool has_imm,
		       uint32_t imm)
{
	post_write_on(p, (int)(p->lane++ % (unsigned int)p->c->nlanes), r, off, len, has_imm, imm);
}

static uint8_t pattern(size_t i, unsigned int seed)
{
	return (uint8_t)(i * 7 + seed * 13 + (i >> 12));
}

static void fill(uint8_t *b, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pattern(i, seed);
}

static void check(const uint8_t *b, size_t len, unsigned int seed, const char *what)
{
	for (size_t i = 0; i < len; i++)
		expect(b[i] == pattern(i, seed), "%s: byte %zu is 0x%02x, want 0x%02x", what, i,
		       b[i], pattern(i, seed));
}

static void region_init(struct region *r)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	int rc;

	r->buf = aligned_alloc(4096, BUF_SIZE);
	expect(r->buf != NULL, "no memory");
	memset(r->buf, 0, BUF_SIZE);
	rc = tp->reg_mr(0, r->buf, BUF_SIZE, &attr, &r->mr, &r->rkey);
	expect(rc == 0, "reg_mr: %s", mk_strerror(rc));
}

static void xwrite(int fd, const void *b, size_t n)
{
	expect(write(fd, b, n) == (ssize_t)n, "pipe write failed");
}

static void xread(int fd, void *b, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);

		expect(r > 0, "pipe read failed (peer died?)");
		got += (size_t)r;
	}
}

/* Connect and drive connected() to 1, polling extra peers meanwhile. */
static struct mk_conn *connect_to(const void *handle, const struct region *r)
{
	struct blob b = { .rkey = r->rkey };
	struct mk_conn *c = NULL;
	uint64_t end = now_ms() + 20000;
	int rc = tp->connect(0, handle, &b, sizeof(b), &c);

	expect(rc == 0 && c != NULL, "connect: %s", mk_strerror(rc));
	while ((rc = tp->connected(c)) == 0)
		expect(now_ms() < end, "connected() still 0 after 20 s");
	expect(rc == 1, "connected: %s", mk_strerror(rc));
	expect(c->peer_blob_len == sizeof(b), "peer blob has %zu bytes", c->peer_blob_len);
	return c;
}

static int try_accept(struct mk_listener *l, const struct region *r, struct mk_conn **c)
{
	struct blob b = { .rkey = r->rkey };
	int rc = tp->accept(l, &b, sizeof(b), c);

	expect(rc == 0, "accept: %s", mk_strerror(rc));
	return *c != NULL;
}

static void peer_init(struct peer *p, struct mk_conn *c)
{
	memset(p, 0, sizeof(*p));
	p->c = c;
	memcpy(&p->remote, c->peer_blob, sizeof(p->remote));
}

/*
 * Registrations are global to the device and may come from another thread while data moves
 * (NCCL's proxy service thread vs its progress thread): churn them during B's writes.
 */
static volatile int churn_stop;

static void *churn(void *arg)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	uint8_t *buf = aligned_alloc(4096, 1u << 20);
	long n = 0;

	expect(buf != NULL, "no memory");
	while (!churn_stop) {
		struct mk_bmr *mr;
		struct mk_rkey rk;
		int rc = tp->reg_mr(0, buf + (n % 16) * 4096, 4096, &attr, &mr, &rk);

		expect(rc == 0, "reg_mr on the churn thread: %s", mk_strerror(rc));
		expect(tp->dereg_mr(0, mr) == 0, "dereg_mr on the churn thread");
		n++;
	}
	free(buf);
	return (void *)n;
}

/* ---- B: the connecting, writing side ---- */

static void run_b(int rfd, int wfd)
{
	uint8_t handles[2 + NMANY][MK_TP_HANDLE_MAX];
	struct mk_conn *many[NMANY];
	struct peer p1, p2;
	struct region r;
	pthread_t churner;
	void *churned;
	size_t len;

	region_init(&r);
	xread(rfd, handles, sizeof(handles));

	/* conn 1: A is already spinning in accept() */
	usleep(200 * 1000);
	peer_init(&p1, connect_to(handles[0], &r));
	/* conn 2: connect first, A accepts 300 ms later */
	peer_init(&p2, connect_to(handles[1], &r));

	expect(pthread_create(&churner, NULL, churn, NULL) == 0, "pthread_create");
	for (size_t s = 0; s < MK_ARRAY_SIZE(sizes); s++) {
		for (int imm = 1; imm >= 0; imm--) {
			unsigned int seed = (unsigned int)(s * 2 + (unsigned int)imm);

			fill(r.buf, sizes[s], seed);
			post_write(&p1, &r, 0, sizes[s], imm, IMM_DATA | (uint32_t)(s * 2 + imm));
			wait_all(&p1);
			if (!imm) {
				/*
				 * after the data's local completion and on the same lane: ordered
				 * behind it (lanes are separate provider connections; nothing
				 * orders one behind another)
				 */
				post_write_on(&p1,
					      (int)((p1.lane - 1) % (unsigned int)p1.c->nlanes), &r,
					      0, 0, true, IMM_MARK | (uint32_t)s);
				wait_all(&p1);
			}
			expect(wait_imm(&p1, NULL) == IMM_ACK, "expected an ack");
		}
	}

	churn_stop = 1;
	expect(pthread_join(churner, &churned) == 0 && (long)churned > 0,
	       "no registration churned during the writes");
	printf("ok - %ld registrations on another thread during the writes\n", (long)churned);

	/* one 8 MiB message in a segment per lane, every segment in flight at once */
	{
		int n = p1.c->nlanes;
		size_t seg = (8u << 20) / (size_t)n;

		fill(r.buf, 8u << 20, 55);
		for (int i = 0; i < n; i++)
			post_write_on(&p1, i, &r, (size_t)i * seg, seg, true,
				      IMM_STRIPE | (uint32_t)i);
		wait_all(&p1);
		expect(wait_imm(&p1, NULL) == IMM_ACK, "expected an ack of the striped write");
	}

	/* A reads our buffer, then writes 4 KiB into it */
	fill(r.buf, 1u << 20, 99);
	post_write(&p1, &r, 0, 0, true, IMM_RREADY);
	wait_all(&p1);
	expect(wait_imm(&p1, &len) == (IMM_DATA | 77u), "expected A's write");
	expect(len == 4096, "A's write reported %zu bytes", len);
	check(r.buf + (2u << 20), 4096, 77, "A -> B write");
	expect(wait_imm(&p1, NULL) == IMM_BYE, "expected bye");

	/*
	 * many connections at once. What is tested is that all of them come up, not how fast:
	 * sixteen rxm handshakes on a loaded 2-vCPU host beside two busy-polling peers have
	 * outlasted the short MKERNEL_TIMEOUT the failure cases use, so these get 30 s.
	 */
	setenv("MKERNEL_TIMEOUT", "30000", 1);
	mk_param_reset_all();
	for (int i = 0; i < NMANY; i++) {
		struct blob b = { .rkey = r.rkey };
		int rc = tp->connect(0, handles[2 + i], &b, sizeof(b), &many[i]);

		expect(rc == 0, "connect %d: %s", i, mk_strerror(rc));
	}
	for (int pending = NMANY; pending > 0;) {
		pending = 0;
		for (int i = 0; i < NMANY; i++) {
			int rc = tp->connected(many[i]);

			expect(rc >= 0, "connected %d: %s", i, mk_strerror(rc));
			pending += rc == 0;
		}
	}
	for (int i = 0; i < NMANY; i++) {
		struct peer p;

		peer_init(&p, many[i]);
		fill(r.buf + 64 * (size_t)i, 64, (unsigned int)i);
		post_write(&p, &r, 64 * (size_t)i, 64, true, IMM_MANY | (uint32_t)i);
		wait_all(&p);
	}
	xread(rfd, &len, sizeof(len)); /* A has seen them all */
	for (int i = 0; i < NMANY; i++)
		expect(tp->close(many[i]) == 0, "close many %d", i);
	setenv("MKERNEL_TIMEOUT", "5000", 1);
	mk_param_reset_all();

	/* close with writes in flight on conn 2 */
	for (int i = 0; i < 8; i++) {
		int rc = tp->write(p2.c, 0, r.buf, 1u << 20, r.mr, p2.remote.base, &p2.remote, true,
				   IMM_DATA, NULL);

		expect(rc == 0 || rc == -EAGAIN, "write in flight: %s", mk_strerror(rc));
	}
	expect(tp->close(p2.c) == 0, "close with writes in flight");
	xwrite(wfd, "c", 1);
	xread(rfd, &len, 1); /* A closed too */
	expect(tp->close(p1.c) == 0, "close conn 1");
	expect(tp->dereg_mr(0, r.mr) == 0, "dereg");
	tp->fini();
	_exit(0);
}

/* ---- C: connects, serves as a write target, and is killed ---- */

static void run_c(int rfd, int wfd)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct region r;
	struct peer p;

	region_init(&r);
	xread(rfd, handle, sizeof(handle));
	peer_init(&p, connect_to(handle, &r));
	xwrite(wfd, "r", 1);
	for (;;)
		pump(&p); /* manual progress: the target must poll for writes to land */
}

/* ---- A ---- */

static struct mk_conn *accept_loop(struct mk_listener *l, const struct region *r, int *spins)
{
	struct mk_conn *c = NULL;
	uint64_t end = now_ms() + 20000;

	*spins = 0;
	while (!try_accept(l, r, &c)) {
		(*spins)++;
		expect(now_ms() < end, "accept still pending after 20 s");
	}
	return c;
}

static void a_phase_setup(int wfd, const struct region *r, struct peer *p1, struct peer *p2,
			  struct mk_listener *many_l[NMANY])
{
	uint8_t handles[2 + NMANY][MK_TP_HANDLE_MAX];
	struct mk_listener *l1, *l2;
	struct mk_conn *extra = NULL;
	int spins;

	expect(tp->listen(0, handles[0], &l1) == 0, "listen 1");
	expect(tp->listen(0, handles[1], &l2) == 0, "listen 2");
	for (int i = 0; i < NMANY; i++)
		expect(tp->listen(0, handles[2 + i], &many_l[i]) == 0, "listen many %d", i);
	xwrite(wfd, handles, sizeof(handles));

	peer_init(p1, accept_loop(l1, r, &spins));
	expect(spins > 0, "accept before connect never returned NULL");
	printf("ok - accept before connect (%d empty accepts)\n", spins);
	usleep(300 * 1000); /* B's connect to l2 is already waiting */
	peer_init(p2, accept_loop(l2, r, &spins));
	printf("ok - connect before accept\n");
	expect(tp->accept(l1, NULL, 0, &extra) == -EINVAL && extra == NULL,
	       "a listener accepted a second connection");
	tp->close_listen(l1);
	tp->close_listen(l2);
}

static void a_phase_writes(struct peer *p1, struct region *r)
{
	for (size_t s = 0; s < MK_ARRAY_SIZE(sizes); s++) {
		for (int imm = 1; imm >= 0; imm--) {
			unsigned int seed = (unsigned int)(s * 2 + (unsigned int)imm);
			size_t len;
			uint32_t v = wait_imm(p1, &len);

			if (imm) {
				expect(v == (IMM_DATA | (uint32_t)(s * 2 + 1)), "imm 0x%x", v);
				expect(len == sizes[s], "imm write of %zu reported %zu", sizes[s],
				       len);
			} else {
				expect(v == (IMM_MARK | (uint32_t)s), "marker imm 0x%x", v);
				expect(len == 0, "0-byte marker reported %zu", len);
			}
			check(r->buf, sizes[s], seed, imm ? "write+imm" : "write");
			printf("ok - write %zu bytes %s immediate\n", sizes[s],
			       imm ? "with" : "without");
			post_write(p1, r, 0, 0, true, IMM_ACK);
		}
	}
}

/*
 * B's striped message: one immediate per lane, in any order, each with its segment's length;
 * the whole 8 MiB in place. With MKERNEL_OFI_LANES set the connection must have that many lanes
 * (a silent fall back to one endpoint fails here).
 */
static void a_phase_stripe(struct peer *p1, struct region *r)
{
	const char *want = getenv("MKERNEL_OFI_LANES");
	int n = p1->c->nlanes;
	size_t seg = (8u << 20) / (size_t)n;
	unsigned int seen = 0;

	expect(want == NULL || n == atoi(want), "connection has %d lanes, MKERNEL_OFI_LANES=%s", n,
	       want);
	for (int i = 0; i < n; i++) {
		size_t len;
		uint32_t v = wait_imm(p1, &len);

		expect((v & IMM_KIND) == IMM_STRIPE && (v & IMM_ARG) < (uint32_t)n,
		       "striped segment imm 0x%x", v);
		expect(!(seen & (1u << (v & IMM_ARG))), "segment %u reported twice", v & IMM_ARG);
		seen |= 1u << (v & IMM_ARG);
		expect(len == seg, "segment of %zu reported %zu", seg, len);
	}
	check(r->buf, seg * (size_t)n, 55, "striped write");
	printf("ok - 8 MiB striped over %d lane%s\n", n, n > 1 ? "s" : "");
	post_write(p1, r, 0, 0, true, IMM_ACK);
}

static void a_phase_read(struct peer *p1, struct region *r)
{
	expect(wait_imm(p1, NULL) == IMM_RREADY, "expected read-ready");
	memset(r->buf, 0, 1u << 20);
	expect(tp->read(p1->c, 0, r->buf, 1u << 20, r->mr, p1->remote.base, &p1->remote, p1) == 0,
	       "read");
	p1->posted++;
	wait_all(p1);
	check(r->buf, 1u << 20, 99, "read");
	printf("ok - read 1 MiB\n");
	fill(r->buf + (2u << 20), 4096, 77);
	/* one lane for both: B expects them in this order */
	post_write_on(p1, 0, r, 2u << 20, 4096, true, IMM_DATA | 77u);
	post_write_on(p1, 0, r, 0, 0, true, IMM_BYE);
}

/*
 * MKERNEL_OFI_SHARED_EP as the backend reads it for this run's provider: 2 (pairs) when unset,
 * 0 on shm, which never shares.
 */
static int shared_mode(void)
{
	const char *on = getenv("MKERNEL_OFI_SHARED_EP");
	const char *prov = getenv("MKERNEL_OFI_PROVIDER");

	if (prov != NULL && strcmp(prov, "shm") == 0)
		return 0;
	return on == NULL || *on == '\0' ? 2 : atoi(on);
}

static bool shared_on(void)
{
	return shared_mode() != 0;
}

/* The backend's count of shared endpoints (transport/ofi/ofi_sep.c). */
int mk_ofi_sep_count(int *conns);

/*
 * With sharing on, this process's open connections (accepted of them accepting, the rest
 * connecting) must sit where the mode puts them: with 1 on one endpoint per lane, with 2 on a
 * set per accepting and connecting pair. A silent fall back to an endpoint per connection
 * fails here.
 */
static void shared_check(int accepted, int connected, int nlanes)
{
	int mode = shared_mode(), conns, eps, sets;

	if (mode == 0)
		return;
	sets = mode == 1 ? 1 : accepted > connected ? accepted : connected;
	eps = mk_ofi_sep_count(&conns);
	expect(eps == nlanes * sets && conns == accepted + connected,
	       "%d shared endpoints, %d connections on them (want %d for %d lanes, %d)", eps, conns,
	       nlanes * sets, nlanes, accepted + connected);
	printf("ok - %d connections share %d endpoint%s (MKERNEL_OFI_SHARED_EP=%d)\n", conns, eps,
	       eps > 1 ? "s" : "", mode);
}

static void a_phase_many(int rfd, int wfd, struct mk_listener *many_l[NMANY], struct region *r)
{
	struct peer many[NMANY];
	size_t len = 0;
	const uint64_t end = now_ms() + 60000; /* B gives up after 30 s: never wait forever */

	for (int pending = NMANY; pending > 0;) {
		expect(now_ms() < end, "%d of %d connections never arrived", pending, NMANY);
		pending = 0;
		for (int i = 0; i < NMANY; i++) {
			if (many_l[i] == NULL)
				continue;
			if (!try_accept(many_l[i], r, &many[i].c)) {
				pending++;
				continue;
			}
			peer_init(&many[i], many[i].c);
			tp->close_listen(many_l[i]);
			many_l[i] = NULL;
		}
	}
	/*
	 * Manual progress: an accepted connection's reply may still sit in the provider until this
	 * side polls that connection again (rxm reports a send done once it has buffered it), and
	 * B writes on none of them before all are up. Poll every one until all have spoken.
	 */
	for (uint64_t stop = now_ms() + 20000;;) {
		int quiet = 0;

		for (int i = 0; i < NMANY; i++) {
			pump(&many[i]);
			expect(many[i].broken == 0, "conn %d broken: %s", i,
			       mk_strerror(many[i].broken));
			quiet += many[i].ih == many[i].it;
		}
		if (quiet == 0)
			break;
		expect(now_ms() < stop, "%d of %d connections silent after 20 s", quiet, NMANY);
	}
	for (int i = 0; i < NMANY; i++) {
		uint32_t v = wait_imm(&many[i], &len);

		expect(v == (IMM_MANY | (uint32_t)i), "conn %d got imm 0x%x", i, v);
		expect(len == 64, "conn %d: %zu bytes", i, len);
		check(r->buf + 64 * (size_t)i, 64, (unsigned int)i, "many");
	}
	printf("ok - %d connections at once\n", NMANY);
	shared_check(NMANY + 2, 0, many[0].c->nlanes);
	xwrite(wfd, &len, sizeof(len));
	for (int i = 0; i < NMANY; i++)
		expect(tp->close(many[i].c) == 0, "close many %d", i);
	(void)rfd;
}

/* A connected to itself: with sharing on, on the same endpoint as its connection to C. */
static void self_pair(const struct region *r, struct peer *sc, struct peer *sa)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct blob b = { .rkey = r->rkey };
	struct mk_listener *l;
	struct mk_conn *c = NULL, *a = NULL;
	uint64_t end = now_ms() + 20000;
	int up = 0;

	expect(tp->listen(0, handle, &l) == 0, "listen for A itself");
	expect(tp->connect(0, handle, &b, sizeof(b), &c) == 0, "connect to A itself");
	while (up != 1 || a == NULL) {
		if (a == NULL)
			try_accept(l, r, &a);
		up = tp->connected(c);
		expect(up >= 0, "connected to A itself: %s", mk_strerror(up));
		expect(now_ms() < end, "A's connection to itself not up after 20 s");
	}
	tp->close_listen(l);
	peer_init(sc, c);
	peer_init(sa, a);
}

/* A write with an immediate over A's connection to itself completes and lands. */
static void self_write(struct region *r, struct peer *sc, struct peer *sa)
{
	uint64_t end = now_ms() + 20000;

	post_write_on(sc, 0, r, 3u << 20, 64, true, IMM_DATA | 5u);
	while (sc->done < sc->posted || sa->ih == sa->it) {
		pump(sc);
		pump(sa);
		expect(sc->failed == 0 && sc->broken == 0 && sa->broken == 0,
		       "A's connection to itself failed: %s",
		       mk_strerror(sc->failed	? sc->last_status
				   : sc->broken ? sc->broken
						: sa->broken));
		expect(now_ms() < end, "A's write to itself not through after 20 s");
	}
	expect(wait_imm(sa, NULL) == (IMM_DATA | 5u), "A's immediate to itself");
}

static void a_phase_kill(pid_t c_pid, int rfd, int wfd, struct region *r)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct peer p, sc, sa;
	int spins, posted = 0;
	uint64_t killed_at = 0, end;
	char ch;

	expect(tp->listen(0, handle, &l) == 0, "listen for C");
	xwrite(wfd, handle, sizeof(handle));
	peer_init(&p, accept_loop(l, r, &spins));
	tp->close_listen(l);
	if (shared_on())
		self_pair(r, &sc, &sa);
	xread(rfd, &ch, 1);
	end = now_ms() + 30000;
	while (p.failed == 0 && p.broken == 0) {
		int rc = 0;

		if (posted - p.done < 8) {
			rc = tp->write(p.c, 0, r->buf, 1u << 20, r->mr, p.remote.base, &p.remote,
				       true, IMM_DATA, NULL);
			posted += rc == 0;
		}
		if (rc != 0 && rc != -EAGAIN) {
			p.broken = rc;
			break;
		}
		pump(&p);
		if (killed_at == 0 && p.done >= 50) {
			kill(c_pid, SIGKILL);
			waitpid(c_pid, NULL, 0);
			mk_test_shm_remove_regions_of(c_pid);
			killed_at = now_ms();
		}
		expect(now_ms() < end, "C never got going");
	}
	expect(killed_at != 0, "an error before the peer was killed: %s",
	       mk_strerror(p.failed ? p.last_status : p.broken));
	expect(now_ms() - killed_at <= TIMEOUT_MS + 3000, "error took %llu ms after the kill",
	       (unsigned long long)(now_ms() - killed_at));
	printf("ok - peer killed mid-transfer: %s after %llu ms\n",
	       mk_strerror(p.failed ? p.last_status : p.broken),
	       (unsigned long long)(now_ms() - killed_at));
	tp->close(p.c);
	if (shared_on()) {
		/* the dead peer broke its own connection only, not the endpoint's others */
		self_write(r, &sc, &sa);
		expect(tp->close(sc.c) == 0 && tp->close(sa.c) == 0, "close A's self connection");
		printf("ok - a connection to another peer on the shared endpoint survived\n");
	}
}

static void a_phase_stale(struct region *r)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c;
	struct blob b = { .rkey = r->rkey };
	uint64_t start;
	int rc;

	expect(tp->listen(0, handle, &l) == 0, "listen for the stale handle");
	expect(tp->close_listen(l) == 0, "close_listen");
	start = now_ms();
	rc = tp->connect(0, handle, &b, sizeof(b), &c);
	if (rc == -ECONNREFUSED) {
		/* shm sees at once that the listener's region is gone (its file in /dev/shm) */
		char *prov = getenv("MKERNEL_OFI_PROVIDER");

		expect(prov != NULL && strcmp(prov, "shm") == 0, "stale handle refused on %s",
		       prov);
		printf("ok - stale handle -> -ECONNREFUSED at connect (shm)\n");
	} else {
		expect(rc == 0, "connect to a stale handle: %s", mk_strerror(rc));
		while ((rc = tp->connected(c)) == 0)
			expect(now_ms() - start < TIMEOUT_MS + 5000, "stale connect never gave up");
		expect(rc == -ETIMEDOUT, "stale handle: connected() = %s", mk_strerror(rc));
		expect(now_ms() - start >= TIMEOUT_MS - 100,
		       "gave up after %llu ms, before the timeout",
		       (unsigned long long)(now_ms() - start));
		expect(tp->close(c) == 0, "close stale");
		printf("ok - stale handle -> -ETIMEDOUT after %llu ms\n",
		       (unsigned long long)(now_ms() - start));
	}
	handle[30] ^= 0x40; /* inside the address */
	expect(tp->connect(0, handle, &b, sizeof(b), &c) == -EINVAL, "corrupted handle accepted");
	printf("ok - corrupted handle -> -EINVAL\n");
}

/*
 * ---- threads mode: NTHREADS connections between A and D, each driven by its own thread on
 * both sides at once (NCCL's proxy threads of several GPUs in one process share a device). With
 * MKERNEL_OFI_SHARED_EP=1 all of a process's connections sit on one endpoint, so the threads
 * poll one CQ and each reads completions of the others' connections that must reach them.
 */
#define NTHREADS      4
#define THREAD_ROUNDS 400
#define THREAD_SLICE  (BUF_SIZE / NTHREADS)

static const size_t thread_sizes[] = { 8, 64, 4096, 65536 };

struct pingpong {
	struct peer p;
	struct region *r;
	int index;
	bool first; /* A writes first, D answers */
};

/* Round k of thread i: a message of a size by k, seeded by who wrote it, checked on arrival. */
static void *pingpong_main(void *arg)
{
	struct pingpong *t = arg;
	const size_t off = (size_t)t->index * THREAD_SLICE;

	for (unsigned int k = 0; k < THREAD_ROUNDS; k++) {
		const size_t len = thread_sizes[k % MK_ARRAY_SIZE(thread_sizes)];
		const unsigned int mine = k * 2 + (t->first ? 0u : 1u),
				   theirs = k * 2 + (t->first ? 1u : 0u);
		size_t got = 0;

		if (!t->first) {
			expect(wait_imm(&t->p, &got) == (IMM_DATA | (k & IMM_ARG)) && got == len,
			       "thread %d round %u: wrong immediate or length %zu", t->index, k,
			       got);
			check(t->r->buf + off, len, theirs + 1000u * (unsigned int)t->index,
			      "threads");
		}
		fill(t->r->buf + off, len, mine + 1000u * (unsigned int)t->index);
		post_write_on(&t->p, 0, t->r, off, len, true, IMM_DATA | (k & IMM_ARG));
		wait_all(&t->p);
		if (t->first) {
			expect(wait_imm(&t->p, &got) == (IMM_DATA | (k & IMM_ARG)) && got == len,
			       "thread %d round %u: wrong immediate or length %zu", t->index, k,
			       got);
			check(t->r->buf + off, len, theirs + 1000u * (unsigned int)t->index,
			      "threads");
		}
	}
	return NULL;
}

static void pingpong_run(struct peer peers[NTHREADS], struct region *r, bool first)
{
	struct pingpong t[NTHREADS];
	pthread_t th[NTHREADS];

	for (int i = 0; i < NTHREADS; i++) {
		t[i] = (struct pingpong){ .p = peers[i], .r = r, .index = i, .first = first };
		expect(pthread_create(&th[i], NULL, pingpong_main, &t[i]) == 0, "pthread_create");
	}
	for (int i = 0; i < NTHREADS; i++)
		expect(pthread_join(th[i], NULL) == 0, "pthread_join");
	for (int i = 0; i < NTHREADS; i++)
		expect(tp->close(t[i].p.c) == 0, "close thread %d's connection", i);
}

/* D: connects to A's listeners, then answers every thread's messages. */
static void run_d(int rfd, int wfd)
{
	uint8_t handles[NTHREADS][MK_TP_HANDLE_MAX];
	struct peer peers[NTHREADS];
	struct region r;
	char ch;

	region_init(&r);
	xread(rfd, handles, sizeof(handles));
	for (int i = 0; i < NTHREADS; i++)
		peer_init(&peers[i], connect_to(handles[i], &r));
	xwrite(wfd, "d", 1);
	xread(rfd, &ch, 1);
	pingpong_run(peers, &r, false);
	xwrite(wfd, "d", 1);
	tp->dereg_mr(0, r.mr);
	free(r.buf);
	tp->fini();
}

static void a_threads(int d_to, int d_from, struct region *r)
{
	uint8_t handles[NTHREADS][MK_TP_HANDLE_MAX];
	struct mk_listener *l[NTHREADS];
	struct peer peers[NTHREADS];
	int spins;
	char ch;

	for (int i = 0; i < NTHREADS; i++)
		expect(tp->listen(0, handles[i], &l[i]) == 0, "listen %d", i);
	xwrite(d_to, handles, sizeof(handles));
	for (int i = 0; i < NTHREADS; i++) {
		peer_init(&peers[i], accept_loop(l[i], r, &spins));
		tp->close_listen(l[i]);
	}
	xread(d_from, &ch, 1);
	shared_check(NTHREADS, 0, peers[0].c->nlanes);
	xwrite(d_to, "a", 1);
	pingpong_run(peers, r, true);
	xread(d_from, &ch, 1);
	printf("ok - %d threads, each with its own connection, %d round trips each\n", NTHREADS,
	       THREAD_ROUNDS);
}

static pid_t spawn(void (*fn)(int, int), const char *name, int *to, int *from)
{
	int a[2], b[2];
	pid_t pid;

	expect(pipe(a) == 0 && pipe(b) == 0, "pipe");
	pid = fork();
	expect(pid >= 0, "fork");
	if (pid == 0) {
		snprintf(mk_lb_who, sizeof(mk_lb_who), "%s", name);
		alarm(WATCHDOG_S);
		close(a[1]);
		close(b[0]);
		expect(tp->init() == 0 && tp->ndevs() > 0, "child init");
		fn(a[0], b[1]);
		_exit(0);
	}
	close(a[0]);
	close(b[1]);
	*to = a[1];
	*from = b[0];
	return pid;
}

static int reap(pid_t pid, const char *name)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return 1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	fprintf(stderr, "FAIL [A]: %s exited with status 0x%x\n", name, st);
	return 1;
}

int main(int argc, char **argv)
{
	struct mk_listener *many_l[NMANY];
	struct mk_dev_props props;
	struct peer p1, p2;
	struct region r;
	int b_to, b_from, c_to, c_from, fails = 0;
	pid_t b, c;
	char ch;

	snprintf(mk_lb_who, sizeof(mk_lb_who), "A"); /* the parent; children name themselves */

	if (argc != 2 && !(argc == 3 && strcmp(argv[2], "threads") == 0)) {
		fprintf(stderr, "usage: %s PROVIDER [threads]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("MKERNEL_OFI_PROVIDER", argv[1], 1);
	if (strcmp(argv[1], "shm") != 0)
		setenv("MKERNEL_OFI_IFACE", "lo", 1);
	setenv("MKERNEL_TIMEOUT", "5000", 1);
	mk_log_set_sink(NULL);

	/* probe in a throwaway child: libfabric must not be initialised across fork() */
	b = fork();
	if (b == 0) {
		if (tp->init() != 0 || tp->ndevs() == 0)
			_exit(77);
		tp->dev_props(0, &props);
		printf("# device %s provider %s speed %d Mbps max_msg %zu\n", props.name,
		       props.provider, props.speed_mbps, props.max_msg);
		_exit(0);
	}
	expect(waitpid(b, &fails, 0) == b, "probe");
	if (!WIFEXITED(fails) || WEXITSTATUS(fails) == 77) {
		/* a skip only where libfabric itself does not offer the provider */
		if (lb_provider_offered(argv[1]) == 1) {
			printf("FAIL: libfabric offers %s but the backend found no device\n",
			       argv[1]);
			return 1;
		}
		printf("# provider %s not available here: skipping\n", argv[1]);
		return 77;
	}
	fails = 0;
	if (argc == 3) {
		b = spawn(run_d, "D", &b_to, &b_from);
		alarm(WATCHDOG_S);
		expect(tp->init() == 0 && tp->ndevs() > 0, "init");
		region_init(&r);
		a_threads(b_to, b_from, &r);
		fails |= reap(b, "D");
		expect(tp->dereg_mr(0, r.mr) == 0, "dereg");
		free(r.buf);
		tp->fini();
		return fails;
	}
	b = spawn(run_b, "B", &b_to, &b_from);
	c = spawn(run_c, "C", &c_to, &c_from);
	alarm(WATCHDOG_S);
	expect(tp->init() == 0 && tp->ndevs() > 0, "init");
	region_init(&r);

	a_phase_setup(b_to, &r, &p1, &p2, many_l);
	a_phase_writes(&p1, &r);
	a_phase_stripe(&p1, &r);
	a_phase_read(&p1, &r);
	a_phase_many(b_from, b_to, many_l, &r);
	xread(b_from, &ch, 1); /* B closed conn 2 with writes in flight */
	expect(tp->close(p2.c) == 0, "close conn 2");
	xwrite(b_to, "c", 1);
	printf("ok - close with writes in flight\n");
	fails |= reap(b, "B");
	expect(tp->close(p1.c) == 0, "close conn 1");

	a_phase_kill(c, c_from, c_to, &r);
	a_phase_stale(&r);
	expect(tp->dereg_mr(0, r.mr) == 0, "dereg");
	free(r.buf);
	tp->fini();
	return fails;
}
