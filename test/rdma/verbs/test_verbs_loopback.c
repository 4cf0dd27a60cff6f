// SPDX-License-Identifier: Apache-2.0
/*
 * Real-verbs test of the verbs backend between two processes on one host (soft-RoCE in the rdma
 * suite's guest, or any RDMA NIC). Every case forks two fresh processes that each initialise the
 * backend (verbs contexts never cross a fork), pass the listen handle and remote keys over a
 * socketpair, and check data, immediates, lengths and error codes. One line per case:
 * "PASS <name>" or "FAIL <name>". Exit 0 when all pass, 1 otherwise, 77 without a verbs device.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mk/compiler.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/param.h"
#include "mk/transport.h"

#define T_SETUP_MS	  60000 /* connection setup under TCG emulation can be slow */
#define T_EVENT_MS	  60000
#define T_CASE_S	  180
#define T_KILL_TIMEOUT_MS 4000 /* MKERNEL_TIMEOUT in the dead-peer cases */

struct t_ctx {
	int role; /* 0: listens and accepts, 1: connects */
	int ctl;  /* socketpair to the other process */
	const struct mk_transport_ops *ops;
	const char *name;
};

struct t_buf {
	uint8_t *p;
	size_t len;
	struct mk_bmr *mr;
	struct mk_rkey rkey;
};

static void t_err(struct t_ctx *t, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "  [%s role %d] ", t->name, t->role);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static uint64_t t_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Blocking control-channel I/O with a deadline: 0, or -1 on EOF/timeout/error. */
static int ctl_io(struct t_ctx *t, bool out, void *buf, size_t len)
{
	size_t done = 0;
	uint64_t end = t_now_ms() + T_EVENT_MS;

	while (done < len) {
		struct pollfd p = { .fd = t->ctl, .events = out ? POLLOUT : POLLIN };
		ssize_t n;

		if (t_now_ms() > end || poll(&p, 1, 100) < 0)
			return -1;
		if (p.revents == 0)
			continue;
		n = out ? send(t->ctl, (char *)buf + done, len - done, MSG_NOSIGNAL)
			: recv(t->ctl, (char *)buf + done, len - done, 0);
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

static int ctl_send(struct t_ctx *t, const void *buf, size_t len)
{
	return ctl_io(t, true, (void *)buf, len);
}

static int ctl_recv(struct t_ctx *t, void *buf, size_t len)
{
	return ctl_io(t, false, buf, len);
}

static int buf_reg(struct t_ctx *t, struct t_buf *b, size_t len)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	size_t alloc = (len + 4095) & ~(size_t)4095;
	int rc;

	memset(b, 0, sizeof(*b));
	b->len = len;
	b->p = aligned_alloc(4096, alloc ? alloc : 4096);
	if (b->p == NULL)
		return -ENOMEM;
	memset(b->p, 0, alloc ? alloc : 4096);
	rc = t->ops->reg_mr(0, b->p, alloc ? alloc : 4096, &attr, &b->mr, &b->rkey);
	if (rc) {
		t_err(t, "reg_mr(%zu): %s", alloc, mk_strerror(rc));
		free(b->p);
		b->p = NULL;
	}
	return rc;
}

static void buf_free(struct t_ctx *t, struct t_buf *b)
{
	if (b->p == NULL)
		return;
	t->ops->dereg_mr(0, b->mr);
	free(b->p);
	b->p = NULL;
}

static uint8_t pattern(size_t i, uint32_t seed)
{
	return (uint8_t)((i * 2654435761u + seed) >> 7);
}

static void fill(uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(i, seed);
}

static int check(struct t_ctx *t, const uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++) {
		if (p[i] != pattern(i, seed)) {
			t_err(t, "data mismatch at byte %zu of %zu: 0x%02x, want 0x%02x", i, len,
			      p[i], pattern(i, seed));
			return -1;
		}
	}
	return 0;
}

/* Poll until an event of type arrives: 0, or -1 (error event, poll error, other type, timeout). */
static int wait_ev(struct t_ctx *t, struct mk_conn *c, enum mk_event_type type,
		   struct mk_event *out, int timeout_ms)
{
	uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
	struct mk_event ev;
	int n;

	while (t_now_ms() < end) {
		n = t->ops->poll(c, &ev, 1);
		if (n < 0) {
			t_err(t, "poll: %s", mk_strerror(n));
			return -1;
		}
		if (n == 0)
			continue;
		if (ev.status != 0) {
			t_err(t, "event type %d failed: %s", ev.type, mk_strerror(ev.status));
			return -1;
		}
		if (ev.type != type) {
			t_err(t, "event type %d, want %d", ev.type, type);
			return -1;
		}
		if (out != NULL)
			*out = ev;
		return 0;
	}
	t_err(t, "no event of type %d within %d ms", type, timeout_ms);
	return -1;
}

/* Handle over the control channel, then connect/accept until established. */
static int setup_conn(struct t_ctx *t, struct mk_conn **out)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	char blob[32], want[32];
	struct mk_listener *l = NULL;
	struct mk_conn *c = NULL;
	uint64_t end = t_now_ms() + T_SETUP_MS;
	int rc;

	snprintf(blob, sizeof(blob), "blob-of-role-%d-pid-%d", t->role, (int)getpid());
	if (t->role == 0) {
		rc = t->ops->listen(0, handle, &l);
		if (rc || ctl_send(t, handle, sizeof(handle)))
			goto fail;
		while (c == NULL && t_now_ms() < end) {
			rc = t->ops->accept(l, blob, strlen(blob) + 1, &c);
			if (rc)
				goto fail;
		}
		t->ops->close_listen(l);
	} else {
		if (ctl_recv(t, handle, sizeof(handle)))
			return -1;
		rc = t->ops->connect(0, handle, blob, strlen(blob) + 1, &c);
		if (rc)
			goto fail;
		while ((rc = t->ops->connected(c)) == 0 && t_now_ms() < end)
			;
		if (rc != 1) {
			rc = rc ? rc : -ETIMEDOUT;
			t->ops->close(c);
			goto fail;
		}
	}
	if (c == NULL) {
		t_err(t, "accept: nothing within %d ms", T_SETUP_MS);
		return -1;
	}
	/* the peer's blob must have arrived intact; learn its pid through the control channel */
	{
		int mine = (int)getpid(), theirs;

		if (ctl_send(t, &mine, sizeof(mine)) || ctl_recv(t, &theirs, sizeof(theirs)))
			return -1;
		snprintf(want, sizeof(want), "blob-of-role-%d-pid-%d", !t->role, theirs);
		if (c->peer_blob_len != strlen(want) + 1 ||
		    memcmp(c->peer_blob, want, c->peer_blob_len)) {
			t_err(t, "peer blob wrong (%zu bytes)", c->peer_blob_len);
			t->ops->close(c);
			return -1;
		}
	}
	*out = c;
	return 0;

fail:
	t_err(t, "connection setup failed: %s", mk_strerror(rc));
	if (l != NULL)
		t->ops->close_listen(l);
	return -1;
}

/* Swap remote keys: mine goes out, the peer's comes back. */
static int swap_rkey(struct t_ctx *t, const struct mk_rkey *mine, struct mk_rkey *theirs)
{
	if (t->role == 0)
		return ctl_send(t, mine, sizeof(*mine)) || ctl_recv(t, theirs, sizeof(*theirs));
	return ctl_recv(t, theirs, sizeof(*theirs)) || ctl_send(t, mine, sizeof(*mine));
}

static int sync_peer(struct t_ctx *t)
{
	char b = 's';

	return ctl_send(t, &b, 1) || ctl_recv(t, &b, 1) || b != 's' ? -1 : 0;
}

/* One established connection with a registered buffer and the peer's key for its buffer. */
struct t_pair {
	struct mk_conn *c;
	struct t_buf b;
	struct mk_rkey peer;
};

static int pair_open(struct t_ctx *t, size_t len, struct t_pair *p)
{
	memset(p, 0, sizeof(*p));
	if (setup_conn(t, &p->c))
		return -1;
	if (buf_reg(t, &p->b, len) == 0 && swap_rkey(t, &p->b.rkey, &p->peer) == 0)
		return 0;
	buf_free(t, &p->b);
	t->ops->close(p->c);
	return -1;
}

/* Frees everything; returns rc, or -1 when rc was 0 but the final handshake failed. */
static int pair_close(struct t_ctx *t, struct t_pair *p, int rc)
{
	if (rc == 0)
		rc = sync_peer(t);
	buf_free(t, &p->b);
	if (p->c != NULL)
		t->ops->close(p->c);
	return rc;
}

/* ---- cases ---- */

static const size_t t_sizes[] = { 0, 1, 4096, 1 << 20, 8 << 20 };

/* One transfer of case_write: 0 when data, immediate and length arrived as sent. */
static int write_one(struct t_ctx *t, struct t_pair *p, size_t i, bool imm)
{
	size_t len = t_sizes[i];
	uint32_t seed = (uint32_t)(i * 7 + imm), immv = 0xabc00000u | (uint32_t)i;
	void *ctx = (void *)(uintptr_t)(i + 1);
	struct mk_event ev;
	char done;
	int rc;

	if (t->role == 1) {
		fill(p->b.p, len, seed);
		rc = t->ops->write(p->c, 0, p->b.p, len, p->b.mr, p->peer.base, &p->peer, imm, immv,
				   ctx);
		if (rc) {
			t_err(t, "write %zu: %s", len, mk_strerror(rc));
			return -1;
		}
		if (wait_ev(t, p->c, MK_EV_WRITE_DONE, &ev, T_EVENT_MS) || ev.ctx != ctx ||
		    ev.len != len) {
			t_err(t, "write %zu: bad completion", len);
			return -1;
		}
		return imm ? 0 : ctl_send(t, "d", 1);
	}
	if (!imm)
		return ctl_recv(t, &done, 1) || check(t, p->b.p, len, seed) ? -1 : 0;
	if (wait_ev(t, p->c, MK_EV_IMM, &ev, T_EVENT_MS))
		return -1;
	if (ev.imm != immv || ev.len != len || ev.ctx != NULL) {
		t_err(t, "imm 0x%x len %zu, want 0x%x len %zu", ev.imm, ev.len, immv, len);
		return -1;
	}
	return check(t, p->b.p, len, seed);
}

/* role 1 writes into role 0: each size with an immediate (checked by the target's event) and,
 * above 0 B, without one (target checks after a control message). */
static int case_write(struct t_ctx *t)
{
	struct t_pair p;
	int rc = 0;

	if (pair_open(t, 8 << 20, &p))
		return -1;
	if (p.c->nlanes != 1) {
		t_err(t, "nlanes %d, want 1", p.c->nlanes);
		rc = -1;
	}
	for (size_t i = 0; i < MK_ARRAY_SIZE(t_sizes) && rc == 0; i++)
		for (int imm = 1; imm >= 0 && rc == 0; imm--)
			if (t_sizes[i] > 0 || imm)
				rc = write_one(t, &p, i, imm) || sync_peer(t) ? -1 : 0;
	return pair_close(t, &p, rc);
}

/* role 1 reads 1 B, 64 KiB and 1 MiB out of role 0's buffer. */
static int case_read(struct t_ctx *t)
{
	static const size_t sizes[] = { 1, 65536, 1 << 20 };
	struct t_pair p;
	struct mk_event ev;
	int rc = 0;

	if (pair_open(t, 1 << 20, &p))
		return -1;
	if (t->role == 0)
		fill(p.b.p, 1 << 20, 99);
	if (sync_peer(t))
		rc = -1;
	for (size_t i = 0; i < MK_ARRAY_SIZE(sizes) && t->role == 1 && rc == 0; i++) {
		memset(p.b.p, 0, 1 << 20);
		rc = mk_tp_read(p.c, 0, p.b.p, sizes[i], p.b.mr, p.peer.base, &p.peer, &p.b);
		if (rc)
			t_err(t, "read %zu: %s", sizes[i], mk_strerror(rc));
		else if (wait_ev(t, p.c, MK_EV_READ_DONE, &ev, T_EVENT_MS) || ev.ctx != &p.b ||
			 ev.len != sizes[i] || check(t, p.b.p, sizes[i], 99))
			rc = -1;
	}
	return pair_close(t, &p, rc);
}

/* MKERNEL_IB_QPS_PER_CONN=4: each lane writes its own quarter with imm = 100 + lane. */
static int case_lanes(struct t_ctx *t)
{
	const size_t part = 256 << 10;
	struct t_pair p;
	struct mk_event ev;
	unsigned int seen = 0;
	int rc = 0;

	if (pair_open(t, 4 * part, &p))
		return -1;
	if (p.c->nlanes != 4) {
		t_err(t, "nlanes %d, want 4", p.c->nlanes);
		return pair_close(t, &p, -1);
	}
	if (t->role == 1) {
		fill(p.b.p, 4 * part, 5);
		for (int lane = 0; lane < 4 && rc == 0; lane++) {
			rc = t->ops->write(p.c, lane, p.b.p + lane * part, part, p.b.mr,
					   p.peer.base + lane * part, &p.peer, true, 100u + lane,
					   NULL);
			if (rc)
				t_err(t, "write on lane %d: %s", lane, mk_strerror(rc));
		}
		if (rc == 0 && t->ops->write(p.c, 4, p.b.p, 1, p.b.mr, p.peer.base, &p.peer, true,
					     1, NULL) != -EINVAL) {
			t_err(t, "write on lane 4 of 4 was not -EINVAL");
			rc = -1;
		}
		for (int i = 0; i < 4 && rc == 0; i++)
			rc = wait_ev(t, p.c, MK_EV_WRITE_DONE, &ev, T_EVENT_MS);
		return pair_close(t, &p, rc);
	}
	for (int i = 0; i < 4 && rc == 0; i++) {
		rc = wait_ev(t, p.c, MK_EV_IMM, &ev, T_EVENT_MS);
		if (rc == 0 && (ev.imm < 100 || ev.imm > 103 || ev.len != part ||
				(seen & (1u << (ev.imm - 100))))) {
			t_err(t, "unexpected imm %u len %zu", ev.imm, ev.len);
			rc = -1;
		}
		if (rc == 0)
			seen |= 1u << (ev.imm - 100);
	}
	if (rc == 0)
		rc = check(t, p.b.p, 4 * part, 5);
	return pair_close(t, &p, rc);
}

/* 16 connections at once between the same two processes, each with its own immediate. */
static int case_many(struct t_ctx *t)
{
	enum { N = 16 };
	struct mk_conn *c[N] = { 0 };
	struct t_buf b;
	struct mk_rkey peer;
	struct mk_event ev;
	int rc = -1, n = 0;

	memset(&b, 0, sizeof(b));
	for (n = 0; n < N; n++)
		if (setup_conn(t, &c[n]))
			goto out;
	if (buf_reg(t, &b, N * 4096) || swap_rkey(t, &b.rkey, &peer))
		goto out;
	if (t->role == 1) {
		fill(b.p, N * 4096, 11);
		for (int i = 0; i < N; i++)
			if (t->ops->write(c[i], 0, b.p + i * 4096, 4096, b.mr, peer.base + i * 4096,
					  &peer, true, 0x5000u + i, NULL))
				goto out;
		for (int i = 0; i < N; i++)
			if (wait_ev(t, c[i], MK_EV_WRITE_DONE, NULL, T_EVENT_MS))
				goto out;
	} else {
		for (int i = 0; i < N; i++) {
			if (wait_ev(t, c[i], MK_EV_IMM, &ev, T_EVENT_MS))
				goto out;
			if (ev.imm != 0x5000u + i || ev.len != 4096) {
				t_err(t, "connection %d: imm 0x%x len %zu", i, ev.imm, ev.len);
				goto out;
			}
		}
		if (check(t, b.p, N * 4096, 11))
			goto out;
	}
	rc = sync_peer(t);
out:
	buf_free(t, &b);
	for (int i = 0; i < n; i++)
		t->ops->close(c[i]);
	return rc;
}

/* Send queue of 4: the fifth write is -EAGAIN until a completion is polled. */
static int case_sq_full(struct t_ctx *t)
{
	struct t_pair p;
	int rc = 0, posted = 0;

	if (pair_open(t, 4096, &p))
		return -1;
	if (t->role == 0)
		return pair_close(t, &p, 0);
	while (posted < 64 && (rc = t->ops->write(p.c, 0, p.b.p, 4096, p.b.mr, p.peer.base, &p.peer,
						  false, 0, NULL)) == 0)
		posted++;
	if (rc != -EAGAIN || posted != 4) {
		t_err(t, "posted %d then %s; want 4 then EAGAIN", posted, mk_strerror(rc));
		return pair_close(t, &p, -1);
	}
	rc = wait_ev(t, p.c, MK_EV_WRITE_DONE, NULL, T_EVENT_MS);
	if (rc == 0 &&
	    t->ops->write(p.c, 0, p.b.p, 4096, p.b.mr, p.peer.base, &p.peer, false, 0, NULL)) {
		t_err(t, "write after a completion still refused");
		rc = -1;
	}
	for (int i = 0; i < 4 && rc == 0; i++)
		rc = wait_ev(t, p.c, MK_EV_WRITE_DONE, NULL, T_EVENT_MS);
	return pair_close(t, &p, rc);
}

/* Flush: host memory completes at once; with MKERNEL_IB_FORCE_FLUSH=1 a loopback read runs. */
static int case_flush(struct t_ctx *t)
{
	struct t_pair p;
	struct mk_event ev;
	int rc = 0;

	if (pair_open(t, 65536, &p))
		return -1;
	for (int i = 0; i < 3 && t->role == 0 && rc == 0; i++) {
		rc = t->ops->flush(p.c, p.b.p, 65536, p.b.mr, &p.b.p[i]);
		if (rc)
			t_err(t, "flush: %s", mk_strerror(rc));
		else if (wait_ev(t, p.c, MK_EV_READ_DONE, &ev, T_EVENT_MS) || ev.ctx != &p.b.p[i])
			rc = -1;
	}
	return pair_close(t, &p, rc);
}

/* role 1 closes with 1 MiB writes in flight; both sides survive and can connect again. */
static int case_close_inflight(struct t_ctx *t)
{
	struct t_pair p;
	struct mk_event ev;
	int rc = -1, posted = 0, n;
	uint64_t end;
	char m;

	if (pair_open(t, 1 << 20, &p))
		return -1;
	if (t->role == 1) {
		while (posted < 16 && t->ops->write(p.c, 0, p.b.p, 1 << 20, p.b.mr, p.peer.base,
						    &p.peer, true, 7, NULL) == 0)
			posted++;
		t->ops->close(p.c);
		p.c = NULL;
		if (posted == 0 || ctl_send(t, "c", 1))
			goto out;
	} else {
		if (ctl_recv(t, &m, 1))
			goto out;
		/* whatever arrives is an immediate or an error; poll must not hang or crash */
		end = t_now_ms() + 5000;
		while (t_now_ms() < end && (n = t->ops->poll(p.c, &ev, 1)) >= 0) {
			if (n == 1 && ev.type != MK_EV_IMM) {
				t_err(t, "unexpected event type %d", ev.type);
				goto out;
			}
		}
		t->ops->close(p.c);
		p.c = NULL;
	}
	/* a new connection works after that */
	if (setup_conn(t, &p.c))
		goto out;
	if (t->role == 1)
		rc = t->ops->write(p.c, 0, p.b.p, 8, p.b.mr, p.peer.base, &p.peer, true, 77,
				   NULL) ||
				     wait_ev(t, p.c, MK_EV_WRITE_DONE, NULL, T_EVENT_MS)
			     ? -1
			     : 0;
	else
		rc = wait_ev(t, p.c, MK_EV_IMM, &ev, T_EVENT_MS) || ev.imm != 77 ? -1 : 0;
out:
	return pair_close(t, &p, rc);
}

/*
 * One side dies (SIGKILL) in the middle of a stream of 1 MiB writes; the survivor must see an
 * error event or a poll error within MKERNEL_TIMEOUT of noticing the death.
 */
static int dead_peer(struct t_ctx *t, int victim)
{
	struct t_pair p;
	struct mk_event ev;
	uint64_t died = 0, end;
	int rc = -1, n, inflight = 0, imms = 0, posted = 0;
	char m;

	if (pair_open(t, 1 << 20, &p))
		return -1;
	end = t_now_ms() + T_EVENT_MS;
	while (t_now_ms() < end) {
		if (t->role == 1 && inflight < 8) {
			n = t->ops->write(p.c, 0, p.b.p, 1 << 20, p.b.mr, p.peer.base, &p.peer,
					  true, 1, NULL);
			if (n == 0) {
				inflight++;
				posted++;
			} else if (n != -EAGAIN) {
				break; /* the connection reports the failure here */
			}
		}
		n = t->ops->poll(p.c, &ev, 1);
		if (n < 0 || (n == 1 && ev.status != 0))
			break;
		if (n == 1 && ev.type == MK_EV_WRITE_DONE)
			inflight--;
		if (n == 1 && ev.type == MK_EV_IMM)
			imms++;
		if (t->role == victim && (imms >= 2 || posted >= 8))
			raise(SIGKILL);
		if (died == 0) {
			struct pollfd pf = { .fd = t->ctl, .events = POLLIN };

			if (poll(&pf, 1, 0) == 1 && recv(t->ctl, &m, 1, MSG_DONTWAIT) == 0)
				died = t_now_ms();
		}
	}
	if (died == 0)
		died = t_now_ms(); /* noticed through the transport before the socketpair */
	if (t_now_ms() >= end) {
		t_err(t, "no error while the peer is dead");
	} else if (t_now_ms() - died > T_KILL_TIMEOUT_MS + 1000) {
		t_err(t, "error came %llu ms after the peer died (MKERNEL_TIMEOUT %d)",
		      (unsigned long long)(t_now_ms() - died), T_KILL_TIMEOUT_MS);
	} else if (t->ops->poll(p.c, &ev, 1) == 0) {
		t_err(t, "poll returns 0 after the failure"); /* must keep failing, not hang */
	} else {
		rc = 0;
	}
	buf_free(t, &p.b);
	t->ops->close(p.c);
	return rc;
}

/* A write with a wrong remote key fails as an error event, and the connection stays failed. */
static int case_bad_rkey(struct t_ctx *t)
{
	struct t_pair p;
	struct mk_rkey wrong;
	struct mk_event ev;
	uint64_t end = t_now_ms() + T_EVENT_MS;
	int rc = -1, n = 0;

	if (pair_open(t, 4096, &p))
		return -1;
	if (t->role == 0)
		return pair_close(t, &p, 0);
	wrong = p.peer;
	wrong.key ^= 0x5a5a00;
	if (t->ops->write(p.c, 0, p.b.p, 64, p.b.mr, wrong.base, &wrong, true, 3, &wrong))
		goto out;
	while (n == 0 && t_now_ms() < end)
		n = t->ops->poll(p.c, &ev, 1);
	if (n != 1 || ev.type != MK_EV_WRITE_DONE || ev.ctx != &wrong || ev.status == 0) {
		t_err(t, "poll %d, event type %d status %d; want a failed write", n, ev.type,
		      ev.status);
		goto out;
	}
	printf("  bad rkey: status %s\n", mk_strerror(ev.status));
	n = t->ops->write(p.c, 0, p.b.p, 64, p.b.mr, p.peer.base, &p.peer, true, 3, NULL);
	if (n != ev.status) {
		t_err(t, "write after the failure: %s, want %s", mk_strerror(n),
		      mk_strerror(ev.status));
		goto out;
	}
	rc = 0;
out:
	return pair_close(t, &p, rc);
}

static int case_kill_receiver(struct t_ctx *t)
{
	return dead_peer(t, 0);
}

static int case_kill_writer(struct t_ctx *t)
{
	return dead_peer(t, 1);
}

/* A handle whose listener is gone: -ETIMEDOUT after MKERNEL_TIMEOUT, not earlier, not never. */
static int case_stale_handle(struct t_ctx *t)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c;
	uint64_t start, took;
	int rc;

	if (t->role == 0) {
		if (t->ops->listen(0, handle, &l))
			return -1;
		t->ops->close_listen(l);
		return ctl_send(t, handle, sizeof(handle));
	}
	if (ctl_recv(t, handle, sizeof(handle)))
		return -1;
	start = t_now_ms();
	rc = t->ops->connect(0, handle, NULL, 0, &c);
	if (rc) {
		t_err(t, "connect: %s", mk_strerror(rc));
		return -1;
	}
	while ((rc = t->ops->connected(c)) == 0 && t_now_ms() - start < 4 * T_KILL_TIMEOUT_MS)
		usleep(1000);
	took = t_now_ms() - start;
	t->ops->close(c);
	if (rc != -ETIMEDOUT || took + 50 < T_KILL_TIMEOUT_MS || took > T_KILL_TIMEOUT_MS + 2000) {
		t_err(t, "connected() = %s after %llu ms; want ETIMEDOUT after ~%d ms",
		      rc ? mk_strerror(rc) : "0", (unsigned long long)took, T_KILL_TIMEOUT_MS);
		return -1;
	}
	return 0;
}

/* A corrupted handle is refused at once. */
static int case_bad_handle(struct t_ctx *t)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c = NULL;
	int rc;

	if (t->role == 1)
		return 0;
	if (t->ops->listen(0, handle, &l))
		return -1;
	handle[9] ^= 0x40;
	rc = t->ops->connect(0, handle, NULL, 0, &c);
	t->ops->close_listen(l);
	if (rc != -EINVAL || c != NULL) {
		t_err(t, "connect with a corrupted handle: %s", mk_strerror(rc));
		return -1;
	}
	return 0;
}

/* Device properties as the backend reports them. */
static int case_props(struct t_ctx *t)
{
	struct mk_dev_props p;

	if (t->role == 1)
		return 0;
	if (t->ops->dev_props(0, &p))
		return -1;
	printf("  device 0: %s provider %s pci '%s' guid 0x%llx speed %d Mbps port %d ptr 0x%x\n",
	       p.name, p.provider, p.pci_path, (unsigned long long)p.guid, p.speed_mbps, p.port,
	       p.ptr_support);
	if (strncmp(p.name, "verbs:", 6) != 0 || p.port < 1 || !(p.ptr_support & MK_PTR_HOST) ||
	    p.speed_mbps <= 0 || p.max_msg == 0) {
		t_err(t, "implausible properties");
		return -1;
	}
	return 0;
}

/* ---- driver ---- */

struct t_case {
	const char *name;
	int (*fn)(struct t_ctx *t);
	const char *env[4]; /* NAME=value set in both processes before init */
	int victim;	    /* role expected to die by SIGKILL, or -1 */
};

static const struct t_case t_cases[] = {
	{ "props", case_props, { NULL }, -1 },
	{ "gid-autopick-write", case_write, { "MKERNEL_IB_GID_INDEX=-1" }, -1 },
	{ "write", case_write, { NULL }, -1 },
	{ "read", case_read, { NULL }, -1 },
	{ "lanes-4", case_lanes, { "MKERNEL_IB_QPS_PER_CONN=4" }, -1 },
	{ "many-connections", case_many, { NULL }, -1 },
	{ "sq-full-eagain", case_sq_full, { "MKERNEL_IB_SQ_DEPTH=4" }, -1 },
	{ "flush-host", case_flush, { NULL }, -1 },
	{ "flush-loopback-read", case_flush, { "MKERNEL_IB_FORCE_FLUSH=1" }, -1 },
	{ "close-with-writes-in-flight", case_close_inflight, { NULL }, -1 },
	{ "bad-rkey-error-event",
	  case_bad_rkey,
	  { "MKERNEL_IB_TIMEOUT=12", "MKERNEL_IB_RETRY_CNT=3" },
	  -1 },
	{ "peer-killed-receiver-dies",
	  case_kill_receiver,
	  { "MKERNEL_TIMEOUT=4000", "MKERNEL_IB_TIMEOUT=12", "MKERNEL_IB_RETRY_CNT=3" },
	  0 },
	{ "peer-killed-writer-dies",
	  case_kill_writer,
	  { "MKERNEL_TIMEOUT=4000", "MKERNEL_IB_TIMEOUT=12", "MKERNEL_IB_RETRY_CNT=3" },
	  1 },
	{ "stale-handle-timeout", case_stale_handle, { "MKERNEL_TIMEOUT=4000" }, -1 },
	{ "bad-handle-einval", case_bad_handle, { NULL }, -1 },
};

static int t_child(const struct t_case *tc, int role, int ctl)
{
	struct t_ctx t = { .role = role, .ctl = ctl, .name = tc->name };
	int rc;

	alarm(T_CASE_S);
	for (int i = 0; i < 4 && tc->env[i] != NULL; i++)
		putenv((char *)tc->env[i]);
	mk_param_reset_all();
	if (mk_transport_find("verbs", &t.ops) || t.ops->init()) {
		t_err(&t, "verbs backend not usable");
		return 1;
	}
	if (t.ops->ndevs() < 1) {
		t_err(&t, "no device");
		return 1;
	}
	rc = tc->fn(&t);
	t.ops->fini();
	return rc ? 1 : 0;
}

/* Both processes of one case; PASS when both exit 0 (the victim, if any, by SIGKILL). */
static bool t_run(const struct t_case *tc)
{
	int sv[2], status[2];
	pid_t pid[2];
	bool ok = true;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return false;
	fflush(stdout);
	for (int role = 0; role < 2; role++) {
		pid[role] = fork();
		if (pid[role] == 0) {
			close(sv[!role]);
			_exit(t_child(tc, role, sv[role]));
		}
	}
	close(sv[0]);
	close(sv[1]);
	for (int role = 0; role < 2; role++) {
		if (pid[role] < 0 || waitpid(pid[role], &status[role], 0) < 0) {
			ok = false;
			continue;
		}
		if (role == tc->victim)
			ok = ok && WIFSIGNALED(status[role]) && WTERMSIG(status[role]) == SIGKILL;
		else
			ok = ok && WIFEXITED(status[role]) && WEXITSTATUS(status[role]) == 0;
		if (WIFSIGNALED(status[role]) && role != tc->victim)
			fprintf(stderr, "  [%s role %d] killed by signal %d\n", tc->name, role,
				WTERMSIG(status[role]));
	}
	printf("%s %s\n", ok ? "PASS" : "FAIL", tc->name);
	fflush(stdout);
	return ok;
}

/* Probe in a child so the parent never opens a verbs context before forking. */
static int t_ndevs(void)
{
	const struct mk_transport_ops *ops;
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		int n = 0;

		if (mk_transport_find("verbs", &ops) == 0 && ops->init() == 0)
			n = ops->ndevs();
		_exit(n > 0 ? 0 : 77);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status) == 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	int failed = 0, ndevs;
	const char *only = argc > 1 ? argv[1] : NULL;

	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("MKERNEL_DEBUG", "WARN", 0); /* the backend's WARN lines explain a FAIL */
	mk_log_set_sink(NULL);
	ndevs = t_ndevs();
	if (ndevs <= 0) {
		printf("SKIP no verbs device\n");
		return 77;
	}
	for (size_t i = 0; i < MK_ARRAY_SIZE(t_cases); i++) {
		if (only != NULL && strcmp(only, t_cases[i].name) != 0)
			continue;
		if (!t_run(&t_cases[i]))
			failed++;
	}
	printf("%d case%s failed\n", failed, failed == 1 ? "" : "s");
	return failed ? 1 : 0;
}
