// SPDX-License-Identifier: Apache-2.0
/*
 * Strangers: while a receiver and a sender stream 64 KiB messages (every payload checked), a
 * third process attacks every TCP port the two have listening, for --seconds:
 *   - silent connections held open;
 *   - connections that send random bytes;
 *   - replays of the provider's own connection handshake (captured by letting a libfabric
 *     endpoint connect to a socket of ours), most of them mutated;
 *   - a libfabric endpoint of the same provider sending garbage messages, setup messages with
 *     a wrong nonce, and one-sided writes with guessed keys 1..64 (with immediates).
 * Pass: the live transfer never errs and never sees a wrong byte, it keeps moving during the
 * attack, which comes in two waves that together may cost each peer one more connection's worth
 * of the provider's buffers and (next to) nothing more, and the module WARNed about what it
 * rejected without flooding the log.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include "fault.h"

#define MSG	      (64u << 10)
#define WINDOW	      8
#define SETUP_S	      30.0
#define MAX_PORTS     32
#define SILENT_MAX    64 /* silent connections held per port */
#define RANDOM_BYTES  (256u << 10)
#define HS_MAX	      4096
#define GUESSED_KEYS  64
/*
 * RSS two waves of strangers may add together: one more connection's worth of the provider's own
 * receive buffers (tcp;ofi_rxm pre-posts FI_OFI_RXM_MSG_RX_SIZE x FI_OFI_RXM_BUFFER_SIZE, about
 * 16 MiB, for every connection it accepts, and its pool keeps them for the next one, so the first
 * stranger that completes the provider's handshake pays it in whichever wave that happens) and
 * little else: hundreds of strangers per wave, so anything kept per stranger shows.
 */
#define RSS_BOUND_KIB (24l << 10)
/* Under AddressSanitizer freed blocks stay in its quarantine (up to 256 MiB), so RSS measures
 * the quarantine, not us: the bound holds in the plain build, LeakSanitizer checks leaks there. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_BOUNDED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_BOUNDED 0
#endif
#endif
#ifndef RSS_BOUNDED
#define RSS_BOUNDED 1
#endif
#define COOLDOWN_S 2.0
#define WARN_FLOOD 200 /* more WARN lines than this for one attack is a flood */

/* ---- the live transfer ---- */

struct live_peer {
	const struct fault_opts *o;
	bool recv;
	int hfd, rep, ctl; /* handle pipe, report pipe, stop pipe from the parent (sender) */
	void *mh;
	char *buf; /* freed after close: the receiver's last receives are still posted */
};

struct live_report {
	char type; /* 'R' streaming, 'D' done */
	long messages, mismatches;
	int error;
	unsigned warns;
};

static uint64_t live_word(long seq, size_t i)
{
	return (uint64_t)seq * 0x9e3779b97f4a7c15ull + i;
}

static long live_check(const uint64_t *p, long seq)
{
	for (size_t i = 0; i < MSG / 8; i++)
		if (p[i] != live_word(seq, i))
			return 1;
	return 0;
}

static bool stop_asked(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return fd >= 0 && poll(&pfd, 1, 0) == 1;
}

#define SENTINEL 0x656e646f66737472ull /* the sender's last message: 8 bytes */

/* One slot of the window: test it, then post the next message into it. */
static int live_slot(struct fault_net *n, void *comm, struct live_peer *p, char *buf, int i,
		     void **req, long *seqs, long *next, bool *stopping, struct live_report *r)
{
	uint64_t *slot = (uint64_t *)(buf + (size_t)i * MSG);
	int done = 0, sz = 0, tag = 1, rc;

	if (p->recv && *stopping)
		return 0; /* past the sentinel: the sender may be gone, nothing more to test */
	if (req[i] != NULL) {
		rc = n->t->test(req[i], &done, &sz);
		if (rc || !done)
			return rc;
		req[i] = NULL;
		if (p->recv && sz == 8 && slot[0] == SENTINEL) {
			*stopping = true; /* later receives stay posted: close drops them */
			return 0;
		}
		if (p->recv)
			r->mismatches += sz != (int)MSG || live_check(slot, seqs[i]);
		if (++r->messages == WINDOW || r->messages % 256 == 0) {
			/* progress for the parent; dropped when it is not reading (pipe full) */
			r->type = 'R';
			if (write(p->rep, r, sizeof(*r)) != (ssize_t)sizeof(*r))
				r->type = 0;
		}
	}
	if (*stopping)
		return 0;
	seqs[i] = *next;
	if (p->recv) {
		void *data = slot;
		size_t size = MSG;

		rc = n->t->irecv(comm, 1, &data, &size, &tag, &p->mh, NULL, &req[i]);
	} else if (stop_asked(p->ctl)) {
		slot[0] = SENTINEL;
		rc = n->t->isend(comm, slot, 8, tag, p->mh, NULL, &req[i]);
		*stopping = rc == 0 && req[i] != NULL;
	} else {
		for (size_t k = 0; k < MSG / 8; k++)
			slot[k] = live_word(*next, k);
		rc = n->t->isend(comm, slot, MSG, tag, p->mh, NULL, &req[i]);
	}
	if (rc == 0 && req[i] != NULL)
		(*next)++;
	return rc;
}

static int live_stream(struct fault_net *n, void *comm, struct live_peer *p, struct live_report *r)
{
	char *buf = aligned_alloc(4096, (size_t)MSG * WINDOW);
	void *req[WINDOW] = { 0 };
	long seqs[WINDOW] = { 0 }, next = 0;
	bool stopping = false;
	int rc;

	if (buf == NULL)
		return ncclSystemError;
	rc = n->t->regMr(comm, buf, (size_t)MSG * WINDOW, MK_NCCL_PTR_HOST, &p->mh);
	while (rc == 0) {
		bool busy = false;

		for (int i = 0; i < WINDOW && rc == 0; i++)
			rc = live_slot(n, comm, p, buf, i, req, seqs, &next, &stopping, r);
		for (int i = 0; i < WINDOW; i++)
			busy |= req[i] != NULL;
		/* the receiver is done at the sentinel, the sender once it has gone out */
		if (stopping && (p->recv || !busy))
			break;
	}
	/* receives posted after the sentinel stay in flight until close: the memory stays */
	if (p->mh != NULL)
		n->t->deregMr(comm, p->mh);
	p->buf = buf;
	return rc;
}

/*
 * The sender keeps its connection until the parent says the receiver is done ('C' on the stop
 * pipe, after the 'S' that asked for the sentinel), or the parent is gone. Its last sends
 * complete once their data is out, while the receiver may still be testing earlier messages
 * and posting a receive for each (a clear-to-send write to the sender): a sender that closed
 * at once made those fail, a failure of the harness, not of the transfer.
 */
static void live_wait_release(int fd)
{
	double end = fault_now() + SETUP_S;
	char b = 0;

	while (b != 'C' && fault_now() < end) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, 100) == 1 && read(fd, &b, 1) != 1)
			break;
	}
}

static int live_peer_main(void *arg)
{
	struct live_peer *p = arg;
	struct live_report r = { 0 };
	struct fault_side side;

	if (fault_side_open(&side, p->o->plugin, p->recv, p->hfd, SETUP_S))
		return 1;
	fcntl(p->rep, F_SETFL, O_NONBLOCK);
	r.error = live_stream(&side.n, side.comm, p, &r);
	fcntl(p->rep, F_SETFL, 0);
	if (!p->recv)
		live_wait_release(p->ctl);
	/* every WARN counts: a stranger must be reported, but not once per byte */
	r.warns = fault_warns(NULL);
	r.type = 'D';
	fault_write_all(p->rep, &r, sizeof(r));
	fault_side_close(&side);
	free(p->buf);
	return 0;
}

/* ---- the attacker ---- */

struct attack_counts {
	int ports;
	size_t handshake; /* bytes of the captured provider handshake */
	long silent, random, replays, mutated;
	long garbage, wrong_nonce, key_writes; /* through a libfabric endpoint */
};

/* Socket inodes of a process's open fds. */
static int socket_inodes(pid_t pid, unsigned long *ino, int max)
{
	char path[64], link[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL && n < max) {
		char fdpath[320];
		ssize_t k;

		snprintf(fdpath, sizeof(fdpath), "%s/%s", path, e->d_name);
		k = readlink(fdpath, link, sizeof(link) - 1);
		if (k <= 0)
			continue;
		link[k] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino[n]) == 1)
			n++;
	}
	closedir(d);
	return n;
}

/* TCP ports the target processes listen on (IPv4 and IPv6 tables). */
static int find_ports(const pid_t *pids, int npids, int *ports, int max)
{
	static const char *const tables[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	unsigned long ino[1024];
	int nino = 0, n = 0;

	for (int i = 0; i < npids; i++)
		nino += socket_inodes(pids[i], ino + nino, 1024 - nino);
	for (int t = 0; t < 2; t++) {
		FILE *f = fopen(tables[t], "r");
		char line[512];

		if (f == NULL)
			continue;
		while (fgets(line, sizeof(line), f) != NULL && n < max) {
			unsigned port, st;
			unsigned long inode;

			if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*d %*d %lu",
				   &port, &st, &inode) != 3 ||
			    st != 0x0a)
				continue;
			for (int k = 0; k < nino; k++) {
				if (ino[k] == inode) {
					ports[n++] = (int)port;
					break;
				}
			}
		}
		fclose(f);
	}
	return n;
}

static int tcp_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

/* Writes what the socket takes within ms milliseconds, reads and drops any answer. */
static void tcp_push(int fd, const uint8_t *buf, size_t len, int ms)
{
	double end = fault_now() + ms / 1000.0;
	char sink[4096];

	while (fault_now() < end) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN | (len > 0 ? POLLOUT : 0) };

		if (poll(&pfd, 1, 1) <= 0)
			continue;
		if ((pfd.revents & POLLIN) && read(fd, sink, sizeof(sink)) <= 0)
			return;
		if ((pfd.revents & POLLOUT) && len > 0) {
			ssize_t k = write(fd, buf, len);

			if (k <= 0)
				return;
			buf += k;
			len -= (size_t)k;
		}
		if (pfd.revents & (POLLERR | POLLHUP))
			return;
	}
}

/* A libfabric endpoint of the provider under test, as any other program could open. */
struct lf {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fi_context2 ctx[64];
	int next_ctx;
};

static int lf_open(struct lf *l, const char *prov)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_DATA, .size = 1024 };
	struct fi_av_attr ava = { .type = FI_AV_TABLE, .count = 1024 };
	int rc = -1;

	memset(l, 0, sizeof(*l));
	if (hints == NULL)
		return -1;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	if (fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &l->info) ||
	    fi_fabric(l->info->fabric_attr, &l->fabric, NULL) ||
	    fi_domain(l->fabric, l->info, &l->domain, NULL) ||
	    fi_cq_open(l->domain, &cqa, &l->cq, NULL) ||
	    fi_av_open(l->domain, &ava, &l->av, NULL) ||
	    fi_endpoint(l->domain, l->info, &l->ep, NULL) ||
	    fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV) ||
	    fi_ep_bind(l->ep, &l->av->fid, 0) || fi_enable(l->ep))
		goto out;
	rc = 0;
out:
	fi_freeinfo(hints);
	return rc;
}

static void lf_close(struct lf *l)
{
	if (l->ep != NULL)
		fi_close(&l->ep->fid);
	if (l->av != NULL)
		fi_close(&l->av->fid);
	if (l->cq != NULL)
		fi_close(&l->cq->fid);
	if (l->domain != NULL)
		fi_close(&l->domain->fid);
	if (l->fabric != NULL)
		fi_close(&l->fabric->fid);
	if (l->info != NULL)
		fi_freeinfo(l->info);
}

/* Drive progress and drop completions, errors included: the stranger expects refusals. */
static void lf_progress(struct lf *l, double seconds)
{
	double end = fault_now() + seconds;
	struct fi_cq_data_entry ent[16];

	do {
		if (fi_cq_read(l->cq, ent, 16) == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };

			fi_cq_readerr(l->cq, &err, 0);
		}
	} while (fault_now() < end);
}

static void *lf_ctx(struct lf *l)
{
	return &l->ctx[l->next_ctx++ % 64];
}

static fi_addr_t lf_peer(struct lf *l, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	fi_addr_t a = FI_ADDR_UNSPEC;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fi_av_insert(l->av, &sa, 1, &a, 0, NULL) != 1)
		return FI_ADDR_UNSPEC;
	return a;
}

/*
 * The provider's connection handshake as it goes over the wire: a libfabric endpoint sends one
 * message to a plain socket of ours, which records what arrives.
 */
static size_t capture_handshake(const char *prov, uint8_t *out, size_t max)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t salen = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), cfd = -1;
	size_t got = 0;
	double end;
	struct lf l;
	char one = 'x';

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 4) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &salen) || lf_open(&l, prov) != 0)
		goto out;
	fcntl(lfd, F_SETFL, O_NONBLOCK);
	fi_send(l.ep, &one, 1, NULL, lf_peer(&l, ntohs(sa.sin_port)), lf_ctx(&l));
	end = fault_now() + 1.0;
	while (fault_now() < end && got < max) {
		ssize_t k;

		lf_progress(&l, 0.001);
		if (cfd < 0) {
			cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			continue;
		}
		k = read(cfd, out + got, max - got);
		if (k > 0)
			got += (size_t)k;
		else if (k == 0)
			break;
		else if (got > 0 && fault_now() > end - 0.7)
			break; /* the first burst is the handshake */
	}
	lf_close(&l);
out:
	if (cfd >= 0)
		close(cfd);
	if (lfd >= 0)
		close(lfd);
	return got;
}

static void mutate(uint8_t *buf, size_t *len)
{
	switch (fault_rand() % 3) {
	case 0: /* flip a few bytes */
		for (int i = 0; i < 1 + (int)(fault_rand() % 8) && *len > 0; i++)
			buf[fault_rand() % *len] ^= (uint8_t)(1 + fault_rand() % 255);
		break;
	case 1: /* cut it short */
		*len = *len > 1 ? fault_rand() % *len : *len;
		break;
	default: /* claim more: garbage after it */
		for (size_t i = *len; i < HS_MAX; i++)
			buf[i] = (uint8_t)fault_rand();
		*len = HS_MAX;
		break;
	}
}

/*
 * What a stranger can say through the provider itself: garbage messages, a setup request with
 * the plugin's documented layout (magic "MCTL", version 1, kind 1) but a nonce of its own, and
 * one-sided writes with immediates at guessed keys.
 */
static void lf_attack(struct lf *l, int port, bool first, struct attack_counts *c)
{
	static uint8_t junk[2048], target[64];
	fi_addr_t a = lf_peer(l, port);
	struct {
		uint32_t magic;
		uint8_t version, kind, addrlen, bloblen;
		uint64_t nonce;
		uint8_t addr[64];
		uint8_t blob[96];
	} req = { .magic = 0x4c54434du, .version = 1, .kind = 1, .addrlen = 16 };

	if (a == FI_ADDR_UNSPEC)
		return;
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)fault_rand();
	if (fi_send(l->ep, junk, 1 + fault_rand() % sizeof(junk), NULL, a, lf_ctx(l)) == 0)
		c->garbage++;
	req.nonce = fault_rand();
	memcpy(req.addr, junk, 16);
	if (fi_send(l->ep, &req, sizeof(req), NULL, a, lf_ctx(l)) == 0)
		c->wrong_nonce++;
	for (int k = 1; k <= (first ? GUESSED_KEYS : 4); k++) {
		uint64_t key = first ? (uint64_t)k : fault_rand();

		if (fi_writedata(l->ep, target, sizeof(target), NULL, fault_rand() & 0xffffffffu, a,
				 0, key, lf_ctx(l)) == 0)
			c->key_writes++;
		lf_progress(l, 0);
	}
	/* the first round waits for the provider to connect, so the guesses do go out */
	lf_progress(l, first ? 0.3 : 0.002);
}

struct attacker {
	const struct fault_opts *o;
	double seconds;
	const char *attacks; /* comma list: silent,random,replay,provider */
	pid_t targets[2];
	int rep;
};

static void attack_port(const struct attacker *a, struct lf *l, bool lf_ok, int port, int *silent,
			int *nsilent, bool first, const uint8_t *hs, size_t hslen,
			struct attack_counts *c)
{
	static uint8_t buf[RANDOM_BYTES > HS_MAX ? RANDOM_BYTES : HS_MAX];
	size_t len;
	int fd;

	if (strstr(a->attacks, "silent") && *nsilent < SILENT_MAX &&
	    (fd = tcp_connect(port)) >= 0) {
		silent[(*nsilent)++] = fd;
		c->silent++;
	}
	if (strstr(a->attacks, "random") && (fd = tcp_connect(port)) >= 0) {
		for (size_t i = 0; i < RANDOM_BYTES; i++)
			buf[i] = (uint8_t)fault_rand();
		tcp_push(fd, buf, RANDOM_BYTES, 20);
		close(fd);
		c->random++;
	}
	if (strstr(a->attacks, "replay") && hslen > 0 && (fd = tcp_connect(port)) >= 0) {
		memcpy(buf, hs, hslen);
		len = hslen;
		if (fault_rand() % 4 != 0) {
			mutate(buf, &len);
			c->mutated++;
		}
		tcp_push(fd, buf, len, 5);
		close(fd);
		c->replays++;
	}
	if (lf_ok && strstr(a->attacks, "provider"))
		lf_attack(l, port, first, c);
}

static int attacker_main(void *arg)
{
	const struct attacker *a = arg;
	static int silent[MAX_PORTS][SILENT_MAX];
	int ports[MAX_PORTS], nsilent[MAX_PORTS] = { 0 };
	static uint8_t hs[HS_MAX];
	struct attack_counts c = { 0 };
	double end = fault_now() + a->seconds;
	struct lf l;
	bool lf_ok;

	c.ports = find_ports(a->targets, 2, ports, MAX_PORTS);
	c.handshake = capture_handshake(a->o->provider, hs, sizeof(hs));
	lf_ok = lf_open(&l, a->o->provider) == 0;
	for (bool first = true; fault_now() < end; first = false) {
		for (int p = 0; p < c.ports; p++)
			attack_port(a, &l, lf_ok, ports[p], silent[p], &nsilent[p], first, hs,
				    c.handshake, &c);
	}
	for (int p = 0; p < c.ports; p++)
		for (int i = 0; i < nsilent[p]; i++)
			close(silent[p][i]);
	if (lf_ok) {
		lf_progress(&l, 0.2);
		lf_close(&l);
	}
	fault_write_all(a->rep, &c, sizeof(c));
	return 0;
}

/* ---- the scenario ---- */

/* Latest progress report of a live peer, reading whatever is queued; 'D' ends it. */
static void drain_reports(int fd, struct live_report *last)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	while (last->type != 'D' && poll(&pfd, 1, 0) == 1) {
		if (fault_read_all(fd, last, sizeof(*last), 1) != 0)
			break;
	}
}

static long wait_messages(int fd, struct live_report *last, long at_least, double timeout_s)
{
	double end = fault_now() + timeout_s;

	while (last->messages < at_least && last->type != 'D' && fault_now() < end) {
		drain_reports(fd, last);
		fault_sleep(0.01);
	}
	return last->messages;
}

int fault_stranger_main(const struct fault_opts *o)
{
	struct live_peer peers[2];
	struct live_report last[2] = { { 0 } };
	int h[2], rp[2][2], ctl[2], fails = 0;
	long rss[3][2], wrong_nonce = 0;
	pid_t pid[2];
	bool killed;

	fault_env(o);
	if (pipe(h) || pipe(rp[0]) || pipe(rp[1]) || pipe(ctl))
		return 1;
	for (int i = 0; i < 2; i++) {
		peers[i] = (struct live_peer){ .o = o,
					       .recv = i == 0,
					       .hfd = i == 0 ? h[1] : h[0],
					       .rep = rp[i][1],
					       .ctl = i == 1 ? ctl[0] : -1 };
		pid[i] = fault_spawn(live_peer_main, &peers[i]);
		close(rp[i][1]);
	}
	close(h[0]);
	close(h[1]);
	close(ctl[0]);
	if (wait_messages(rp[0][0], &last[0], WINDOW, SETUP_S) < WINDOW ||
	    wait_messages(rp[1][0], &last[1], WINDOW, SETUP_S) < WINDOW) {
		printf("# the live transfer did not start\n");
		fails++;
		goto stop;
	}
	fault_sleep(0.5);
	for (int i = 0; i < 2; i++)
		rss[0][i] = fault_rss_kib(pid[i]);
	/* two waves: the second must cost nothing the first did not (no growth per stranger) */
	for (int w = 0; w < 2; w++) {
		struct attack_counts c = { 0 };
		struct attacker att = {
			.o = o,
			.attacks = o->only != NULL ? o->only : "silent,random,replay,provider",
			.targets = { pid[0], pid[1] },
			.seconds = o->seconds / 2,
		};
		int arp[2];
		long during0, during1;
		pid_t apid;

		if (pipe(arp))
			return 1;
		att.rep = arp[1];
		drain_reports(rp[0][0], &last[0]);
		during0 = last[0].messages;
		apid = fault_spawn(attacker_main, &att);
		close(arp[1]);
		if (fault_read_all(arp[0], &c, sizeof(c), o->seconds + 60) != 0) {
			printf("# the attacker did not report\n");
			fails++;
		}
		close(arp[0]);
		fault_reap(apid, fault_now() + 10, &killed);
		drain_reports(rp[0][0], &last[0]);
		during1 = last[0].messages;
		fault_sleep(COOLDOWN_S);
		for (int i = 0; i < 2; i++)
			rss[w + 1][i] = fault_rss_kib(pid[i]);
		fault_json(
			"\"test\":\"strangers\",\"provider\":\"%s\",\"wave\":%d,\"seconds\":%.1f,"
			"\"ports\":%d,\"handshake_bytes\":%zu,\"silent\":%ld,\"random\":%ld,"
			"\"random_bytes\":%u,\"replays\":%ld,\"mutated\":%ld,\"garbage_msgs\":%ld,"
			"\"wrong_nonce\":%ld,\"guessed_key_writes\":%ld,\"messages_during\":%ld,"
			"\"rss_kib_growth\":[%ld,%ld]",
			o->provider, w + 1, att.seconds, c.ports, c.handshake, c.silent, c.random,
			RANDOM_BYTES, c.replays, c.mutated, c.garbage, c.wrong_nonce, c.key_writes,
			during1 - during0, rss[w + 1][0] - rss[w][0], rss[w + 1][1] - rss[w][1]);
		if (c.ports < 1 || during1 <= during0)
			fails++;
		/* bounded over both waves, whichever of them paid for the provider's buffers */
		for (int i = 0; RSS_BOUNDED && w == 1 && i < 2; i++)
			fails += rss[2][i] - rss[0][i] > RSS_BOUND_KIB;
		wrong_nonce += c.wrong_nonce;
	}
stop:
	if (write(ctl[1], "S", 1) != 1)
		fails++;
	for (int i = 0; i < 2; i++) {
		int st;
		bool ok;

		/* the receiver is done (or gone): the sender may close now */
		if (i == 1 && write(ctl[1], "C", 1) != 1)
			fails++;
		while (last[i].type != 'D' &&
		       fault_read_all(rp[i][0], &last[i], sizeof(last[i]), SETUP_S) == 0)
			;
		st = fault_reap(pid[i], fault_now() + 10, &killed);
		ok = last[i].type == 'D' && last[i].error == 0 && last[i].mismatches == 0 &&
		     !killed && WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
		     last[i].warns <= WARN_FLOOD;
		fault_json(
			"\"test\":\"strangers\",\"provider\":\"%s\",\"side\":\"%s\",\"messages\":%"
			"ld,"
			"\"mismatches\":%ld,\"error\":%d,\"warns\":%u,\"pass\":%s",
			o->provider, i == 0 ? "recv" : "send", last[i].messages, last[i].mismatches,
			last[i].error, last[i].warns, ok ? "true" : "false");
		fails += !ok;
		fault_shm_cleanup(pid[i]);
	}
	/* the requests the strangers made were rejected somewhere: someone must have said so */
	if (wrong_nonce > 0 && last[0].warns + last[1].warns == 0) {
		printf("# strangers were rejected without a WARN\n");
		fails++;
	}
	return fails ? 1 : 0;
}
