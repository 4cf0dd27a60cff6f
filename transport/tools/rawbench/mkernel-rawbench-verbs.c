// SPDX-License-Identifier: Apache-2.0
/*
 * mkernel-rawbench-verbs: a verbs ping-pong between two processes with nothing of the plugin in
 * it, in the shapes the plugin's verbs backend uses, to split what a message costs between the
 * device and the plugin's own path. Busy-polled, QPs connected over a TCP socket.
 *
 *   --method write  RDMA write into the peer's buffer; the peer spins on the last byte (the way
 *                   perftest's ib_write_lat measures, no receive completion at all);
 *   --method imm    RDMA write with immediate; the peer polls its CQ for the receive it
 *                   consumes and posts another (the plugin's eager path);
 *   --qps 1|2       one RC QP per side carrying both directions, or one per direction, each
 *                   with its own CQ (NCCL's send and receive comms: the plugin's shape).
 *
 * Every send is signalled and its completion polled before the next, as the plugin does.
 *
 *   server: mkernel-rawbench-verbs --dev rxe0 [--gid-index G] --server PORT
 *   client: mkernel-rawbench-verbs --dev rxe0 [--gid-index G] --client HOST:PORT
 *           [--method write|imm] [--qps 1|2] --sizes 8,4096 --iters N --warmup N --reps R
 *
 * One-way latency = half the round trip, averaged over N per rep; the median and spread are over
 * reps. The client prints one JSON line per size. Exit 77: no such device here.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "rawbench_ctl.h"

#define MAX_SIZES 16
#define MAX_REPS  256
#define MAX_SIZE  (1u << 20)
#define RQ_DEPTH  64
#define INLINE	  256

enum method { METHOD_WRITE, METHOD_IMM };

/* The run's shape; the client sends it to the server, which loops over the same (same build). */
struct config {
	int32_t method; /* enum method */
	int32_t qps, iters, warmup, reps, nsizes;
	uint64_t sizes[MAX_SIZES];
};

/* Where this end runs: not sent. */
struct place {
	const char *dev, *server_port, *client;
	int gid_index;
};

/* What one side tells the other about one of its QPs. */
struct wire {
	uint32_t qpn, psn, rkey;
	uint16_t lid;
	uint8_t mtu; /* its port's active MTU (enum ibv_mtu) */
	uint8_t gid[16];
	uint64_t addr; /* its receive buffer */
};

/* One end: with --qps 1, qp[0] sends and receives; with 2, qp[0] sends and qp[1] receives. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_mr *mr;
	char *buf; /* [0, MAX_SIZE): what we send; [MAX_SIZE, 2 MAX_SIZE): where the peer writes */
	struct wire peer[2];
	uint32_t max_inline;
	uint8_t mtu; /* our port's active MTU: the path takes the smaller of both ends' */
	int port, nqp, fd;
	bool client;
	bool recv_seen; /* a receive completion taken while waiting for a send's: not yet used */
};

static void die(const char *what, int err)
{
	fprintf(stderr, "mkernel-rawbench-verbs: %s: %s\n", what, strerror(err));
	exit(1);
}

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	for (int i = 0; list != NULL && list[i] != NULL; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	if (list != NULL)
		ibv_free_device_list(list);
	if (ctx == NULL) {
		fprintf(stderr, "mkernel-rawbench-verbs: no device %s here\n", name);
		exit(77);
	}
	return ctx;
}

static void post_recv(struct ibv_qp *qp)
{
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
	int rc = ibv_post_recv(qp, &wr, &bad);

	if (rc)
		die("ibv_post_recv", rc);
}

static struct ibv_qp *qp_create(struct side *s, int i)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq[i],
		.recv_cq = s->cq[i],
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 64,
			 .max_recv_wr = RQ_DEPTH,
			 .max_send_sge = 1,
			 .max_recv_sge = 1,
			 .max_inline_data = INLINE },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT,
				 .port_num = (uint8_t)s->port,
				 .qp_access_flags =
					 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);

	if (qp == NULL) {
		ia.cap.max_inline_data = 0;
		qp = ibv_create_qp(s->pd, &ia);
	}
	if (qp == NULL)
		die("ibv_create_qp", errno);
	s->max_inline = ia.cap.max_inline_data;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("QP to INIT", errno);
	for (int k = 0; k < RQ_DEPTH; k++)
		post_recv(qp);
	return qp;
}

static void qp_connect(struct side *s, struct ibv_qp *qp, const struct wire *peer, uint32_t my_psn,
		       int gid_index)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = (enum ibv_mtu)(peer->mtu < s->mtu ? peer->mtu : s->mtu),
		.dest_qp_num = peer->qpn,
		.rq_psn = peer->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = { .port_num = (uint8_t)s->port, .dlid = peer->lid },
	};

	if (gid_index >= 0) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
		a.ah_attr.grh.hop_limit = 255;
	}
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("QP to RTR", errno);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("QP to RTS", errno);
}

/*
 * Open the device, make the QPs and exchange them: with two, our QP 0 (sends) meets the peer's
 * QP 1 (receives) and the other way round.
 */
static void setup(struct side *s, const struct config *c, const struct place *at)
{
	struct ibv_port_attr pa;
	union ibv_gid gid = { 0 };
	struct wire mine[2];

	s->ctx = open_dev(at->dev);
	s->port = 1;
	s->nqp = c->qps;
	if (ibv_query_port(s->ctx, (uint8_t)s->port, &pa))
		die("ibv_query_port", errno);
	s->mtu = (uint8_t)pa.active_mtu;
	if (at->gid_index >= 0 && ibv_query_gid(s->ctx, (uint8_t)s->port, at->gid_index, &gid))
		die("ibv_query_gid", errno);
	s->pd = ibv_alloc_pd(s->ctx);
	s->buf = aligned_alloc(4096, 2 * (size_t)MAX_SIZE);
	if (s->pd == NULL || s->buf == NULL)
		die("PD or buffer", ENOMEM);
	memset(s->buf, 0, 2 * (size_t)MAX_SIZE);
	s->mr = ibv_reg_mr(s->pd, s->buf, 2 * (size_t)MAX_SIZE,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (s->mr == NULL)
		die("ibv_reg_mr", errno);
	for (int i = 0; i < s->nqp; i++) {
		s->cq[i] = ibv_create_cq(s->ctx, 2 * RQ_DEPTH + 64, NULL, NULL, 0);
		if (s->cq[i] == NULL)
			die("ibv_create_cq", errno);
		s->qp[i] = qp_create(s, i);
		mine[i] = (struct wire){ .qpn = s->qp[i]->qp_num,
					 .psn = (uint32_t)((getpid() * 7919u + (unsigned)i) &
							   0xffffff),
					 .rkey = s->mr->rkey,
					 .lid = pa.lid,
					 .mtu = (uint8_t)pa.active_mtu,
					 .addr = (uint64_t)(uintptr_t)(s->buf + MAX_SIZE) };
		memcpy(mine[i].gid, gid.raw, 16);
	}
	rb_send(s->fd, mine, sizeof(mine[0]) * (size_t)s->nqp);
	rb_recv(s->fd, s->peer, sizeof(s->peer[0]) * (size_t)s->nqp);
	for (int i = 0; i < s->nqp; i++) {
		int p = s->nqp == 2 ? 1 - i : 0; /* the peer's QP ours talks to */

		qp_connect(s, s->qp[i], &s->peer[p], mine[i].psn, at->gid_index);
	}
	rb_barrier(s->fd);
}

static struct ibv_cq *recv_cq(struct side *s)
{
	return s->cq[s->nqp - 1];
}

static bool spin_clock; /* --spin-clock: read the clock at every idle poll, as a caller might */

static void spin_pause(void)
{
	if (spin_clock)
		(void)rb_now_s();
}

/* One completion from cq; dies on an error. Returns the opcode. */
static enum ibv_wc_opcode cq_wait(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		spin_pause();
	if (n < 0 || wc.status != IBV_WC_SUCCESS)
		die(n < 0 ? "ibv_poll_cq" : ibv_wc_status_str(wc.status), EIO);
	return wc.opcode;
}

/* Send size bytes (their last byte is mark) to the peer and wait for the send's completion. */
static void send_one(struct side *s, enum method m, size_t size, uint8_t mark)
{
	struct ibv_sge sge = { .addr = (uint64_t)(uintptr_t)s->buf,
			       .length = (uint32_t)size,
			       .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *bad;
	const struct wire *peer = &s->peer[s->nqp == 2 ? 1 : 0];
	int rc;

	s->buf[size - 1] = (char)mark;
	wr.opcode = m == METHOD_IMM ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED | (size <= s->max_inline ? IBV_SEND_INLINE : 0);
	wr.imm_data = htonl(mark);
	wr.wr.rdma.remote_addr = peer->addr;
	wr.wr.rdma.rkey = peer->rkey;
	rc = ibv_post_send(s->qp[0], &wr, &bad);
	if (rc)
		die("ibv_post_send", rc);
	/* with one QP the pong's receive may complete before our send does */
	for (;;) {
		enum ibv_wc_opcode op = cq_wait(s->cq[0]);

		if (op == IBV_WC_RDMA_WRITE)
			return;
		s->recv_seen = true;
		post_recv(s->qp[0]);
	}
}

/* Wait for the peer's message marked mark. */
static void recv_one(struct side *s, enum method m, size_t size, uint8_t mark)
{
	volatile char *last = s->buf + MAX_SIZE + size - 1;

	if (m == METHOD_WRITE) {
		while (*last != (char)mark)
			spin_pause();
		return;
	}
	if (!s->recv_seen) {
		cq_wait(recv_cq(s));
		post_recv(s->qp[s->nqp - 1]);
	}
	s->recv_seen = false;
}

static double lat_rep(struct side *s, enum method m, size_t size, int iters, int *round)
{
	double t0;

	rb_barrier(s->fd);
	t0 = rb_now_s();
	for (int i = 0; i < iters; i++) {
		uint8_t mark = (uint8_t)(++*round % 255 + 1);

		if (s->client) {
			send_one(s, m, size, mark);
			recv_one(s, m, size, mark);
		} else {
			recv_one(s, m, size, mark);
			send_one(s, m, size, mark);
		}
	}
	return (rb_now_s() - t0) / iters / 2 * 1e6;
}

static void run(struct side *s, const struct config *c, const char *dev)
{
	int round = 0;

	for (int k = 0; k < c->nsizes; k++) {
		double v[MAX_REPS];

		lat_rep(s, c->method, c->sizes[k], c->warmup, &round);
		for (int r = 0; r < c->reps; r++)
			v[r] = lat_rep(s, c->method, c->sizes[k], c->iters, &round);
		if (!s->client)
			continue;
		qsort(v, (size_t)c->reps, sizeof(v[0]), rb_cmp_double);
		printf("{\"tool\":\"mkernel-rawbench-verbs\",\"mode\":\"lat\",\"device\":\"%s\","
		       "\"method\":\"%s\",\"qps\":%d,\"size\":%llu,\"iters\":%d,\"reps\":%d,"
		       "\"lat_us_median\":%.3f,\"lat_us_min\":%.3f,\"lat_us_max\":%.3f}\n",
		       dev, c->method == METHOD_IMM ? "imm" : "write", c->qps,
		       (unsigned long long)c->sizes[k], c->iters, c->reps, v[c->reps / 2], v[0],
		       v[c->reps - 1]);
		fflush(stdout);
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: mkernel-rawbench-verbs --dev DEV [--gid-index G] (--server PORT | --client "
		"HOST:PORT) [--method write|imm] [--qps 1|2] [--sizes 8,4K] [--iters N] "
		"[--warmup N] [--reps R] [--spin-clock]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dev", required_argument, NULL, 'd' },
		{ "gid-index", required_argument, NULL, 'g' },
		{ "server", required_argument, NULL, 's' },
		{ "client", required_argument, NULL, 'c' },
		{ "method", required_argument, NULL, 'm' },
		{ "qps", required_argument, NULL, 'q' },
		{ "sizes", required_argument, NULL, 'z' },
		{ "iters", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "reps", required_argument, NULL, 'r' },
		{ "spin-clock", no_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 },
	};
	struct config c = { .qps = 1, .iters = 2000, .warmup = 200, .reps = 5 };
	struct place at = { .gid_index = -1 };
	struct side s = { 0 };
	int o;

	c.nsizes = rb_parse_sizes("8,4K", c.sizes, MAX_SIZES);

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'd':
			at.dev = optarg;
			break;
		case 'g':
			at.gid_index = atoi(optarg);
			break;
		case 's':
			at.server_port = optarg;
			break;
		case 'c':
			at.client = optarg;
			break;
		case 'm':
			if (strcmp(optarg, "write") != 0 && strcmp(optarg, "imm") != 0)
				usage();
			c.method = strcmp(optarg, "imm") == 0 ? METHOD_IMM : METHOD_WRITE;
			break;
		case 'q':
			c.qps = atoi(optarg);
			break;
		case 'z':
			c.nsizes = rb_parse_sizes(optarg, c.sizes, MAX_SIZES);
			break;
		case 'n':
			c.iters = atoi(optarg);
			break;
		case 'w':
			c.warmup = atoi(optarg);
			break;
		case 'k':
			spin_clock = true;
			break;
		case 'r':
			c.reps = atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (at.dev == NULL || (at.server_port == NULL) == (at.client == NULL) || c.qps < 1 ||
	    c.qps > 2 || c.iters < 1 || c.warmup < 0 || c.reps < 1 || c.reps > MAX_REPS)
		usage();
	for (int i = 0; i < c.nsizes; i++)
		if (c.sizes[i] < 1 || c.sizes[i] > MAX_SIZE)
			usage();
	s.client = at.client != NULL;
	s.fd = s.client ? rb_connect(at.client) : rb_serve(atoi(at.server_port));
	if (s.client) {
		rb_send(s.fd, &c, sizeof(c));
	} else {
		rb_recv(s.fd, &c, sizeof(c));
		c.method = c.method == METHOD_IMM ? METHOD_IMM : METHOD_WRITE;
	}
	setup(&s, &c, &at);
	run(&s, &c, at.dev);
	rb_barrier(s.fd);
	return 0;
}
