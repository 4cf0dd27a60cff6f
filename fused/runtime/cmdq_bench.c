// SPDX-License-Identifier: Apache-2.0
/*
 * mkernel-bench-cmdq: enqueue -> proxy dequeue latency and command throughput of the command
 * queue, with a CPU thread standing in for the GPU producer and one proxy thread consuming.
 * The baseline, measured in the same run, is a bare one-way cache-line hand-off between the same
 * two threads (the floor any queue between two cores pays). Prints one JSON line per measurement,
 * then a table.
 *
 * usage: mkernel-bench-cmdq [-n commands] [-l latency_iters] [-s slots] [-b batch]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fused/runtime/proxy.h"
#include "mk_git.h"

struct bench_cfg {
	long ncmds;
	long lat_iters;
	uint32_t slots;
	int batch;
};

struct result {
	const char *name;
	const char *unit;
	double median, p10, p90;
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void percentiles(uint32_t *v, size_t n, struct result *r)
{
	qsort(v, n, sizeof(*v), cmp_u32);
	r->median = v[n / 2];
	r->p10 = v[n / 10];
	r->p90 = v[n * 9 / 10];
}

/* ---- baseline: one-way hand-off of a stamped word between two threads ---- */

struct handoff {
	uint64_t stamp; /* written by the sender, 0 = empty */
	char pad[56];
	uint64_t ack;
	long iters;
	uint32_t *lat;
};

static void *handoff_rx(void *arg)
{
	struct handoff *h = arg;

	for (long i = 0; i < h->iters; i++) {
		uint64_t s;

		while ((s = __atomic_load_n(&h->stamp, __ATOMIC_ACQUIRE)) == 0)
			mk_cpu_relax();
		h->lat[i] = (uint32_t)(mk_now_ns() - s);
		__atomic_store_n(&h->stamp, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&h->ack, (uint64_t)i + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static int bench_handoff(const struct bench_cfg *cfg, struct result *r)
{
	struct handoff h = { .iters = cfg->lat_iters };
	pthread_t t;

	h.lat = calloc((size_t)cfg->lat_iters, sizeof(*h.lat));
	if (h.lat == NULL)
		return -ENOMEM;
	if (pthread_create(&t, NULL, handoff_rx, &h) != 0) {
		free(h.lat);
		return -EAGAIN;
	}
	for (long i = 0; i < cfg->lat_iters; i++) {
		__atomic_store_n(&h.stamp, mk_now_ns(), __ATOMIC_RELEASE);
		while (__atomic_load_n(&h.ack, __ATOMIC_ACQUIRE) != (uint64_t)i + 1)
			mk_cpu_relax();
	}
	pthread_join(t, NULL);
	r->name = "handoff_baseline";
	r->unit = "ns";
	percentiles(h.lat, (size_t)cfg->lat_iters, r);
	free(h.lat);
	return 0;
}

/* ---- the queue ---- */

struct qbench {
	struct mk_cmdq q;
	struct mk_cmdq_prod prod;
	struct mk_cmdq_dev dev;
	struct mk_proxy *proxy;
	struct mk_proxy_peer peer;
	uint32_t *lat;
	uint64_t signal;
	char heap[64];
};

static int qbench_open(struct qbench *b, const struct bench_cfg *cfg, uint32_t lat_cap)
{
	struct mk_cmdq_slot *slots = aligned_alloc(64, (size_t)cfg->slots * sizeof(*slots));
	struct mk_cmdq_ctrl *ctrl = aligned_alloc(64, sizeof(*ctrl));
	struct mk_cmdq *qs[1] = { &b->q };
	struct mk_proxy_attr a = {
		.rank = 0,
		.nranks = 1,
		.peers = &b->peer,
		.heap = b->heap,
		.heap_len = sizeof(b->heap),
		.signals = &b->signal,
		.nsignals = 1,
		.queues = qs,
		.nqueues = 1,
		.nthreads = 1,
		.batch = cfg->batch,
		.timeout_ms = 10000,
	};
	int rc;

	if (slots == NULL || ctrl == NULL) {
		free(slots);
		free(ctrl);
		return -ENOMEM;
	}
	rc = mk_cmdq_init(&b->q, slots, ctrl, cfg->slots, 0, &b->prod);
	if (rc)
		return rc;
	b->dev = mk_cmdq_dev(&b->q, &b->prod);
	b->lat = lat_cap ? calloc(lat_cap, sizeof(*b->lat)) : NULL;
	a.lat_ns = b->lat;
	a.lat_cap = lat_cap;
	rc = mk_proxy_create(&a, &b->proxy);
	if (rc)
		return rc;
	return mk_proxy_start(b->proxy);
}

static void qbench_close(struct qbench *b)
{
	mk_proxy_destroy(b->proxy);
	free(b->q.slots);
	free(b->q.ctrl);
	mk_cmdq_fini(&b->q);
	free(b->lat);
}

static int wait_done(struct qbench *b, uint32_t idx)
{
	while (mk_seq_after(idx, __atomic_load_n(&b->q.ctrl->done, __ATOMIC_ACQUIRE))) {
		if (mk_proxy_error(b->proxy))
			return mk_proxy_error(b->proxy);
		mk_cpu_relax();
	}
	return 0;
}

/* One command at a time: the proxy's own dequeue - stamp is the latency. */
static int bench_latency(const struct bench_cfg *cfg, struct result *r)
{
	struct qbench b;
	struct mk_cmdq_slot c = { .op = MK_CMD_NOP };
	int rc;

	memset(&b, 0, sizeof(b));
	rc = qbench_open(&b, cfg, (uint32_t)cfg->lat_iters);
	if (rc)
		return rc;
	for (long i = 0; i < cfg->lat_iters && rc == 0; i++) {
		int64_t t;

		c.stamp = mk_now_ns();
		t = mk_cmdq_push_host(&b.dev, &c, -1);
		rc = t < 0 ? (int)t : wait_done(&b, (uint32_t)t + 1);
	}
	if (rc == 0) {
		r->name = "enqueue_to_dequeue";
		r->unit = "ns";
		percentiles(b.lat, (size_t)cfg->lat_iters, r);
	}
	qbench_close(&b);
	return rc;
}

/* Stream commands as fast as the producer can; op NOP or an 8-byte PUT_SIGNAL to itself. */
static int bench_throughput(const struct bench_cfg *cfg, int op, struct result *r)
{
	struct mk_cmdq_slot c = { .op = (uint8_t)op, .bytes = 8, .dst_off = 8, .signal = 0 };
	struct mk_proxy_stats st;
	struct qbench b;
	uint64_t t0, t1;
	int64_t t = 0;
	int rc;

	memset(&b, 0, sizeof(b));
	rc = qbench_open(&b, cfg, 0);
	if (rc)
		return rc;
	t0 = mk_now_ns();
	for (long i = 0; i < cfg->ncmds && t >= 0; i++)
		t = mk_cmdq_push_host(&b.dev, &c, -1);
	rc = t < 0 ? (int)t : wait_done(&b, (uint32_t)t + 1);
	t1 = mk_now_ns();
	mk_proxy_get_stats(b.proxy, &st);
	if (rc == 0 && op == MK_CMD_PUT_SIGNAL && b.signal != (uint64_t)cfg->ncmds)
		rc = -EPROTO;
	if (rc == 0) {
		r->name = op == MK_CMD_NOP ? "throughput_nop" : "throughput_put_signal_self";
		r->unit = "Mcmd/s";
		r->median = (double)cfg->ncmds / ((double)(t1 - t0) / 1e3);
		r->p10 = r->p90 = r->median;
		fprintf(stderr, "%s: %llu commands in %llu batches\n", r->name,
			(unsigned long long)st.cmds, (unsigned long long)st.batches);
	}
	qbench_close(&b);
	return rc;
}

static void emit(const struct bench_cfg *cfg, const struct result *r, const char *host,
		 double baseline)
{
	printf("{\"bench\":\"cmdq\",\"metric\":\"%s\",\"unit\":\"%s\",\"median\":%.1f,"
	       "\"p10\":%.1f,\"p90\":%.1f,\"baseline_handoff_ns\":%.1f,\"ncmds\":%ld,"
	       "\"lat_iters\":%ld,\"slots\":%u,\"batch\":%d,\"producer\":\"cpu-thread\","
	       "\"emulated\":true,\"host\":\"%s\",\"git\":\"%s\"}\n",
	       r->name, r->unit, r->median, r->p10, r->p90, baseline, cfg->ncmds, cfg->lat_iters,
	       cfg->slots, cfg->batch, host, MK_GIT_HASH);
}

int main(int argc, char **argv)
{
	struct bench_cfg cfg = { .ncmds = 2000000, .lat_iters = 20000, .slots = 4096, .batch = 64 };
	struct result res[4];
	char host[64] = "";
	int opt, rc, n = 0;

	while ((opt = getopt(argc, argv, "n:l:s:b:")) != -1) {
		switch (opt) {
		case 'n':
			cfg.ncmds = atol(optarg);
			break;
		case 'l':
			cfg.lat_iters = atol(optarg);
			break;
		case 's':
			cfg.slots = (uint32_t)atol(optarg);
			break;
		case 'b':
			cfg.batch = atoi(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-n cmds] [-l lat_iters] [-s slots] [-b batch]\n",
				argv[0]);
			return 2;
		}
	}
	if (cfg.ncmds < 1 || cfg.lat_iters < 10 || cfg.batch < 1) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	gethostname(host, sizeof(host) - 1);
	rc = bench_handoff(&cfg, &res[n]);
	if (rc == 0)
		rc = bench_latency(&cfg, &res[++n]);
	if (rc == 0)
		rc = bench_throughput(&cfg, MK_CMD_NOP, &res[++n]);
	if (rc == 0)
		rc = bench_throughput(&cfg, MK_CMD_PUT_SIGNAL, &res[++n]);
	if (rc) {
		fprintf(stderr, "mkernel-bench-cmdq: %s\n", strerror(-rc));
		return 1;
	}
	for (int i = 0; i <= n; i++)
		emit(&cfg, &res[i], host, res[0].median);
	printf("\n%-28s %12s %10s %10s %10s\n", "metric", "median", "p10", "p90", "unit");
	for (int i = 0; i <= n; i++)
		printf("%-28s %12.1f %10.1f %10.1f %10s\n", res[i].name, res[i].median, res[i].p10,
		       res[i].p90, res[i].unit);
	printf("latency / hand-off baseline: %.2f (CPU producer, emulated GPU)\n",
	       res[1].median / (res[0].median > 0 ? res[0].median : 1));
	return 0;
}
