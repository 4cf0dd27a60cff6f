// SPDX-License-Identifier: Apache-2.0
/*
 * Command-validation fuzzer of the host proxy: sequences of commands with random and boundary
 * fields (op, peer, signal, bytes, offsets near the heap's end, 2^32, 2^64) pushed through a real
 * command queue into a real proxy, between two ranks over the in-memory fake transport. A model
 * written from cmdq.h's field descriptions says which commands are valid and what each does to
 * the heaps and signal words; after every sequence the proxy's error (-EINVAL at the first invalid
 * command, 0 otherwise), both heaps and every signal word must equal the model's. Run under ASan
 * (suite sanitize), an out-of-bounds copy fails at once.
 * Usage: fuzz-proxy-cmd [inputs] [seed]   (a fixed seed gives a fixed corpus)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz.h"
#include "fake_tp.h"
#include "fused/runtime/proxy.h"

#define NRANKS	2
#define HEAP	(64u << 10)
#define NSIG	8
#define NSLOTS	16
#define MAX_SEQ 6
#define SWEEPS	20000

/* Offsets and lengths where validation goes wrong if it goes wrong anywhere. */
static uint64_t pick(bool length)
{
	switch (fuzz_rng() % 10) {
	case 0:
		return 0;
	case 1:
		return HEAP;
	case 2:
		return HEAP - 1 - fuzz_rng() % 64;
	case 3:
		return HEAP + 1 + fuzz_rng() % 64;
	case 4:
		return UINT32_MAX - 1 + fuzz_rng() % 3;
	case 5:
		return UINT64_MAX - fuzz_rng() % 8;
	case 6:
		return fuzz_rng();
	default:
		return length ? fuzz_rng() % 512 : fuzz_rng() % HEAP;
	}
}

static struct mk_cmdq_slot random_cmd(void)
{
	struct mk_cmdq_slot c = { 0 };

	c.op = fuzz_rng() % 8 == 0 ? (uint8_t)fuzz_rng() : (uint8_t)(fuzz_rng() % MK_CMD_OP_MAX);
	c.peer = fuzz_rng() % 8 == 0 ? (uint32_t)fuzz_rng() : (uint32_t)(fuzz_rng() % (NRANKS + 1));
	c.signal = fuzz_rng() % 8 == 0 ? (uint32_t)fuzz_rng() : (uint32_t)(fuzz_rng() % (NSIG + 1));
	c.lane = (uint8_t)fuzz_rng();
	c.bytes = pick(true);
	c.src_off = pick(false);
	c.dst_off = pick(false);
	return c;
}

/* The model: validity from the documented field meanings, not from the proxy's code. */
static bool model_valid(const struct mk_cmdq_slot *c)
{
	if (c->op >= MK_CMD_OP_MAX || c->peer >= NRANKS)
		return false;
	if (c->op == MK_CMD_NOP)
		return true;
	if (c->op != MK_CMD_PUT && c->signal >= NSIG)
		return false;
	if (c->op == MK_CMD_SIGNAL)
		return true;
	/* the payload must lie inside both heaps, without wrapping */
	return c->bytes <= UINT32_MAX && c->src_off <= HEAP && c->bytes <= HEAP - c->src_off &&
	       c->dst_off <= HEAP && c->bytes <= HEAP - c->dst_off;
}

static void model_apply(char heaps[NRANKS][HEAP], uint64_t sig[NRANKS][NSIG],
			const struct mk_cmdq_slot *c)
{
	if (c->op == MK_CMD_PUT || c->op == MK_CMD_PUT_SIGNAL)
		memmove(heaps[c->peer] + c->dst_off, heaps[0] + c->src_off, (size_t)c->bytes);
	if (c->op == MK_CMD_PUT_SIGNAL || c->op == MK_CMD_SIGNAL)
		sig[c->peer][c->signal]++;
}

struct world {
	char *heap[NRANKS];
	struct mk_bmr *mr[NRANKS];
	struct mk_rkey rkey[NRANKS];
	struct mk_conn *conn[NRANKS][NRANKS];
	uint64_t signals[NRANKS][NSIG];
	struct mk_cmdq q[NRANKS];
	struct mk_cmdq_prod prod[NRANKS];
	struct mk_cmdq_dev dev;
	struct mk_proxy *proxy[NRANKS];
};

static int world_open(struct world *w)
{
	const struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;

	memset(w, 0, sizeof(*w));
	for (int i = 0; i < NRANKS; i++) {
		w->heap[i] = aligned_alloc(4096, HEAP);
		if (w->heap[i] == NULL ||
		    fake_tp_ops.reg_mr(0, w->heap[i], HEAP, &attr, &w->mr[i], &w->rkey[i]))
			return -1;
	}
	if (fake_tp_ops.listen(0, handle, &l) ||
	    fake_tp_ops.connect(0, handle, "c", 1, &w->conn[0][1]) ||
	    fake_tp_ops.accept(l, "a", 1, &w->conn[1][0]) || w->conn[1][0] == NULL ||
	    fake_tp_ops.connected(w->conn[0][1]) != 1)
		return -1;
	fake_tp_ops.close_listen(l);
	for (int i = 0; i < NRANKS; i++) {
		struct mk_proxy_peer peers[NRANKS];
		struct mk_cmdq *qs[1] = { &w->q[i] };
		struct mk_proxy_attr a = {
			.ops = &fake_tp_ops,
			.rank = i,
			.nranks = NRANKS,
			.peers = peers,
			.heap = w->heap[i],
			.heap_len = HEAP,
			.heap_mr = w->mr[i],
			.signals = w->signals[i],
			.nsignals = NSIG,
			.queues = qs,
			.nqueues = 1,
			.nthreads = 1,
			.batch = 1 + (int)(fuzz_rng() % 4),
			.timeout_ms = 5000,
		};

		for (int j = 0; j < NRANKS; j++)
			peers[j] =
				(struct mk_proxy_peer){ .conn = w->conn[i][j], .heap = w->rkey[j] };
		if (mk_cmdq_init(&w->q[i], aligned_alloc(64, NSLOTS * sizeof(struct mk_cmdq_slot)),
				 aligned_alloc(64, sizeof(struct mk_cmdq_ctrl)), NSLOTS,
				 (uint32_t)fuzz_rng(), &w->prod[i]) ||
		    mk_proxy_create(&a, &w->proxy[i]))
			return -1;
	}
	w->dev = mk_cmdq_dev(&w->q[0], &w->prod[0]);
	return 0;
}

static void world_close(struct world *w)
{
	for (int i = 0; i < NRANKS; i++) {
		mk_proxy_stop(w->proxy[i]);
		mk_proxy_destroy(w->proxy[i]);
		free(w->q[i].slots);
		free(w->q[i].ctrl);
		mk_cmdq_fini(&w->q[i]);
		for (int j = 0; j < NRANKS; j++)
			if (w->conn[i][j] != NULL)
				fake_tp_ops.close(w->conn[i][j]);
		fake_tp_ops.dereg_mr(0, w->mr[i]);
		free(w->heap[i]);
	}
}

/* One input: a command sequence through the proxy, then everything compared with the model. */
static int run_one(long input, bool *had_bad)
{
	static char model[NRANKS][HEAP];
	uint64_t msig[NRANKS][NSIG] = { { 0 } };
	struct mk_cmdq_slot cmds[MAX_SEQ];
	int n = 1 + (int)(fuzz_rng() % MAX_SEQ), first_bad = -1, rc, err;
	struct world w;

	fake_tp_reset();
	if (world_open(&w)) {
		fprintf(stderr, "input %ld: set-up failed\n", input);
		return 1;
	}
	for (int r = 0; r < NRANKS; r++) {
		for (size_t k = 0; k < HEAP; k++)
			w.heap[r][k] = (char)(r * 101 + k * 7 + input);
		memcpy(model[r], w.heap[r], HEAP);
	}
	for (int i = 0; i < n; i++) {
		/* most sequences stay valid for a while, so valid commands run too */
		cmds[i] = random_cmd();
		for (int t = 0; t < 16 && !model_valid(&cmds[i]) && fuzz_rng() % 8 != 0; t++)
			cmds[i] = random_cmd();
		if (first_bad < 0 && !model_valid(&cmds[i]))
			first_bad = i;
		if (first_bad < 0)
			model_apply(model, msig, &cmds[i]);
		if (mk_cmdq_push_host(&w.dev, &cmds[i], 0) < 0)
			n = i + 1; /* queue full or failed: stop there */
	}
	for (int s = 0; s < SWEEPS; s++) {
		bool settled = true;

		for (int r = 0; r < NRANKS; r++)
			mk_proxy_progress(w.proxy[r], 0);
		err = mk_proxy_error(w.proxy[0]);
		if (err == 0 &&
		    __atomic_load_n(&w.q[0].ctrl->done, __ATOMIC_ACQUIRE) != w.prod[0].head)
			settled = false;
		for (int r = 0; r < NRANKS && settled; r++)
			for (int k = 0; k < NSIG; k++)
				settled &= w.signals[r][k] == msig[r][k];
		if (settled || (err != 0 && s > 64))
			break;
	}
	err = mk_proxy_error(w.proxy[0]);
	*had_bad = first_bad >= 0;
	rc = (first_bad >= 0) != (err == -EINVAL) || (first_bad < 0 && err != 0) ||
	     mk_proxy_error(w.proxy[1]) != 0;
	for (int r = 0; r < NRANKS && rc == 0; r++) {
		rc |= memcmp(w.heap[r], model[r], HEAP) != 0;
		for (int k = 0; k < NSIG; k++)
			rc |= w.signals[r][k] != msig[r][k];
	}
	if (rc) {
		fprintf(stderr, "input %ld: proxy error %d, model says first invalid command %d:\n",
			input, err, first_bad);
		for (int i = 0; i < n; i++)
			fprintf(stderr,
				"  op %u peer %u signal %u bytes %#llx src %#llx dst %#llx\n",
				cmds[i].op, cmds[i].peer, cmds[i].signal,
				(unsigned long long)cmds[i].bytes,
				(unsigned long long)cmds[i].src_off,
				(unsigned long long)cmds[i].dst_off);
		for (int r = 0; r < NRANKS; r++) {
			for (int k = 0; k < NSIG; k++)
				if (w.signals[r][k] != msig[r][k])
					fprintf(stderr, "  rank %d signal %d: %llu, model %llu\n",
						r, k, (unsigned long long)w.signals[r][k],
						(unsigned long long)msig[r][k]);
			if (memcmp(w.heap[r], model[r], HEAP) != 0)
				fprintf(stderr, "  rank %d heap differs from the model\n", r);
		}
		fprintf(stderr, "  rank 1 proxy error %d\n", mk_proxy_error(w.proxy[1]));
	}
	world_close(&w);
	return rc;
}

int main(int argc, char **argv)
{
	long inputs = argc > 1 ? atol(argv[1]) : 2000, with_bad = 0;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x70726f7879636d64ull;

	printf("fuzz-proxy-cmd: seed %#llx, %ld inputs\n", (unsigned long long)seed, inputs);
	for (long i = 0; i < inputs; i++) {
		bool bad = false;

		/* each input has its own stream: input i of a seed is the same in every run */
		fuzz_input(seed, i);
		if (run_one(i, &bad)) {
			fprintf(stderr, "replay: fuzz-proxy-cmd %ld %#llx\n", i + 1,
				(unsigned long long)seed);
			return 1;
		}
		with_bad += bad;
	}
	printf("fuzz-proxy-cmd: %ld sequences, %ld with an invalid command, all as the model "
	       "says\n",
	       inputs, with_bad);
	/* a corpus that never exercised both outcomes tested nothing */
	return with_bad > 0 && with_bad < inputs ? 0 : 1;
}
