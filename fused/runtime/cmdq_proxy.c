// SPDX-License-Identifier: Apache-2.0
/*
 * Consumer side of the GPU -> host command queue and the host proxy that executes its commands
 * through mk_transport (see proxy.h for the threading rules, cmdq.h for the queue protocol).
 */
#define MK_LOG_PREFIX "PROXY/mkernel"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fused/runtime/proxy.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/transport.h"

_Static_assert(((MK_IMM_KIND_SIGNAL << MK_IMM_KIND_SHIFT | MK_IMM_INDEX_MASK) &
		MK_TP_IMM_BACKEND_MASK) == 0,
	       "a signal's immediate reaches into the bits the transport leaves to backends");

enum {
	MK_CSTATE_FREE = 0,
	MK_CSTATE_POSTED = 1,
	MK_CSTATE_DONE = 2,
};

#define PROXY_EVENTS 64

/* Signals from one peer waiting for their flush to be posted (GPU-memory heap only). */
#define PROXY_FLUSH_RING 1024

struct proxy_peer {
	struct mk_proxy_peer pub;
	pthread_mutex_t lock; /* serialises data ops on pub.conn */
	/* Touched only by the thread that polls this peer. */
	uint32_t flush_ring[PROXY_FLUSH_RING];
	uint32_t flush_head, flush_tail;
};

/* Completion contexts of flushes: this queue id, the signal index below. */
#define PROXY_FLUSH_QID 0xffffffffu

struct proxy_thread {
	struct mk_proxy *p;
	int index;
	pthread_t tid;
	bool running;
};

struct mk_proxy {
	struct mk_proxy_attr a;
	struct proxy_peer *peers;
	struct mk_cmdq **queues;
	struct proxy_thread *threads;
	int stop;		  /* atomic: threads leave their loop */
	int error;		  /* atomic: first failure, -errno */
	struct mk_proxy_stats st; /* updated with relaxed atomics */
};

/* ---- queue, consumer side ---- */

int mk_cmdq_init(struct mk_cmdq *q, struct mk_cmdq_slot *slots, struct mk_cmdq_ctrl *ctrl,
		 uint32_t nslots, uint32_t start, struct mk_cmdq_prod *prod)
{
	if (slots == NULL || ctrl == NULL || nslots < 2 || nslots > MK_CMDQ_MAX_SLOTS ||
	    (nslots & (nslots - 1)) != 0)
		return -EINVAL;
	memset(q, 0, sizeof(*q));
	q->cstate = calloc(nslots, sizeof(*q->cstate));
	if (q->cstate == NULL)
		return -ENOMEM;
	q->posted_ms = calloc(nslots, sizeof(*q->posted_ms));
	if (q->posted_ms == NULL) {
		free(q->cstate);
		return -ENOMEM;
	}
	q->slots = slots;
	q->ctrl = ctrl;
	q->nslots = nslots;
	q->mask = nslots - 1;
	q->head = start;
	q->done = start;
	memset(slots, 0, (size_t)nslots * sizeof(*slots));
	/* Previous lap's sequence everywhere: entry start + k is valid only once written. */
	for (uint32_t k = 0; k < nslots; k++)
		slots[(start + k) & q->mask].seq = start + k - nslots;
	memset(ctrl, 0, sizeof(*ctrl));
	ctrl->tail = start;
	ctrl->done = start;
	if (prod != NULL) {
		prod->head = start;
		prod->tail_cache = start;
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

void mk_cmdq_fini(struct mk_cmdq *q)
{
	free(q->cstate);
	free(q->posted_ms);
	q->cstate = NULL;
	q->posted_ms = NULL;
}

struct mk_cmdq_dev mk_cmdq_dev(const struct mk_cmdq *q, struct mk_cmdq_prod *prod)
{
	struct mk_cmdq_dev d = {
		.slots = q->slots,
		.ctrl = q->ctrl,
		.prod = prod,
		.mask = q->mask,
	};

	return d;
}

/* ---- proxy ---- */

static void proxy_stat_add(uint64_t *field, uint64_t v)
{
	__atomic_fetch_add(field, v, __ATOMIC_RELAXED);
}

void mk_proxy_fail(struct mk_proxy *p, int err)
{
	int zero = 0;

	if (err >= 0)
		err = -EIO;
	if (__atomic_compare_exchange_n(&p->error, &zero, err, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		MK_WARN("proxy of rank %d failed: %s; the comm is unusable", p->a.rank,
			mk_strerror(err));
	for (int q = 0; q < p->a.nqueues; q++)
		__atomic_store_n(&p->queues[q]->ctrl->error,
				 __atomic_load_n(&p->error, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
}

int mk_proxy_error(struct mk_proxy *p)
{
	return __atomic_load_n(&p->error, __ATOMIC_ACQUIRE);
}

static int proxy_check_attr(const struct mk_proxy_attr *a)
{
	if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->peers == NULL)
		return -EINVAL;
	if (a->nqueues < 0 || (a->nqueues > 0 && a->queues == NULL))
		return -EINVAL;
	if (a->nthreads < 1 || a->batch < 1 || a->timeout_ms < 1)
		return -EINVAL;
	if (a->nsignals > MK_IMM_INDEX_MASK + 1u || (a->nsignals > 0 && a->signals == NULL))
		return -EINVAL;
	if (a->lat_cap > 0 && a->lat_ns == NULL)
		return -EINVAL;
	for (int r = 0; r < a->nranks; r++) {
		if (a->peers[r].conn != NULL && a->ops == NULL)
			return -EINVAL;
	}
	return 0;
}

int mk_proxy_create(const struct mk_proxy_attr *attr, struct mk_proxy **out)
{
	struct mk_proxy *p;
	int rc = proxy_check_attr(attr);

	if (rc)
		return rc;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return -ENOMEM;
	p->a = *attr;
	rc = -ENOMEM;
	p->peers = calloc((size_t)attr->nranks, sizeof(*p->peers));
	if (p->peers == NULL)
		goto undo_proxy;
	p->queues = calloc((size_t)attr->nqueues + 1, sizeof(*p->queues));
	if (p->queues == NULL)
		goto undo_peers;
	p->threads = calloc((size_t)attr->nthreads, sizeof(*p->threads));
	if (p->threads == NULL)
		goto undo_queues;
	for (int r = 0; r < attr->nranks; r++) {
		p->peers[r].pub = attr->peers[r];
		pthread_mutex_init(&p->peers[r].lock, NULL);
		/* the GPU names any lane in its commands, unannounced: every lane is read */
		if (attr->peers[r].conn != NULL)
			attr->peers[r].conn->lanes_wanted = 1;
	}
	for (int q = 0; q < attr->nqueues; q++)
		p->queues[q] = attr->queues[q];
	p->a.peers = NULL;
	p->a.queues = NULL;
	*out = p;
	return 0;

undo_queues:
	free(p->queues);
undo_peers:
	free(p->peers);
undo_proxy:
	free(p);
	return rc;
}

static void *proxy_ctx(int qid, uint32_t idx)
{
	return (void *)(uintptr_t)(((uint64_t)(uint32_t)qid << 32) | idx);
}

static void proxy_complete(struct mk_proxy *p, void *ctx)
{
	uint64_t v = (uint64_t)(uintptr_t)ctx;
	uint32_t qid = (uint32_t)(v >> 32), idx = (uint32_t)v;

	if (qid >= (uint32_t)p->a.nqueues)
		return;
	__atomic_store_n(&p->queues[qid]->cstate[idx & p->queues[qid]->mask], MK_CSTATE_DONE,
			 __ATOMIC_RELEASE);
}

static void proxy_signal_add(struct mk_proxy *p, uint32_t index)
{
	if (index >= p->a.nsignals) {
		mk_proxy_fail(p, -EPROTO);
		return;
	}
	/* Release: the data this signal announces was placed before the immediate was reported. */
	__atomic_fetch_add(&p->a.signals[index], 1, __ATOMIC_RELEASE);
}

/*
 * A NIC that wrote into GPU memory may still have data in flight on PCIe when its immediate is
 * reported; the GPU must not see the signal first. With a GPU-memory heap and a transport that
 * can flush, each signal waits for a flush (a local read through the connection, completing
 * after the writes before it) and is applied when that flush completes.
 */
static bool proxy_needs_flush(const struct mk_proxy *p)
{
	return p->a.heap_device && p->a.ops->flush != NULL;
}

/* Post the flushes of pp's waiting signals; -EAGAIN leaves the rest for the next sweep. */
static int proxy_post_flushes(struct mk_proxy *p, struct proxy_peer *pp)
{
	while (pp->flush_head != pp->flush_tail) {
		uint32_t index = pp->flush_ring[pp->flush_head % PROXY_FLUSH_RING];
		int rc;

		pthread_mutex_lock(&pp->lock);
		rc = p->a.ops->flush(pp->pub.conn, p->a.heap, 1, p->a.heap_mr,
				     proxy_ctx((int)PROXY_FLUSH_QID, index));
		pthread_mutex_unlock(&pp->lock);
		if (rc == -EAGAIN)
			return 0;
		if (rc)
			return rc;
		pp->flush_head++;
		proxy_stat_add(&p->st.flushes, 1);
	}
	return 0;
}

static int proxy_on_event(struct mk_proxy *p, struct proxy_peer *pp, const struct mk_event *ev)
{
	uint32_t index;

	if (ev->status != 0)
		return ev->status;
	switch (ev->type) {
	case MK_EV_READ_DONE:
		if ((uint32_t)((uint64_t)(uintptr_t)ev->ctx >> 32) == PROXY_FLUSH_QID) {
			proxy_signal_add(p, (uint32_t)(uintptr_t)ev->ctx);
			return 0;
		}
		proxy_complete(p, ev->ctx); /* a read posted for a command */
		return 0;
	case MK_EV_WRITE_DONE:
		proxy_complete(p, ev->ctx);
		return 0;
	case MK_EV_IMM:
		if ((ev->imm >> MK_IMM_KIND_SHIFT) != MK_IMM_KIND_SIGNAL)
			return -EPROTO;
		index = ev->imm & MK_IMM_INDEX_MASK;
		proxy_stat_add(&p->st.imms, 1);
		if (!proxy_needs_flush(p)) {
			proxy_signal_add(p, index);
			return 0;
		}
		if (index >= p->a.nsignals)
			return -EPROTO;
		if (pp->flush_tail - pp->flush_head >= PROXY_FLUSH_RING)
			return -EOVERFLOW;
		pp->flush_ring[pp->flush_tail++ % PROXY_FLUSH_RING] = index;
		return 0;
	}
	return -EPROTO;
}

/* Reap completions and immediates of the peers this thread polls. */
static int proxy_poll_peers(struct mk_proxy *p, int thread)
{
	struct mk_event ev[PROXY_EVENTS];
	int work = 0;

	for (int r = thread; r < p->a.nranks; r += p->a.nthreads) {
		struct proxy_peer *pp = &p->peers[r];
		int n;

		if (pp->pub.conn == NULL)
			continue;
		do {
			pthread_mutex_lock(&pp->lock);
			n = p->a.ops->poll(pp->pub.conn, ev, PROXY_EVENTS);
			pthread_mutex_unlock(&pp->lock);
			if (n < 0)
				return n;
			for (int i = 0; i < n; i++) {
				int rc = proxy_on_event(p, pp, &ev[i]);

				if (rc)
					return rc;
			}
			work += n;
		} while (n == PROXY_EVENTS);
		if (pp->flush_head != pp->flush_tail) {
			int rc = proxy_post_flushes(p, pp);

			if (rc)
				return rc;
		}
	}
	return work;
}

static int proxy_check_cmd(struct mk_proxy *p, const struct mk_cmdq_slot *c)
{
	if (c->op >= MK_CMD_OP_MAX || c->peer >= (uint32_t)p->a.nranks)
		return -EINVAL;
	if (c->op == MK_CMD_NOP)
		return 0;
	if ((c->op == MK_CMD_PUT_SIGNAL || c->op == MK_CMD_SIGNAL) && c->signal >= p->a.nsignals)
		return -EINVAL;
	if (c->op == MK_CMD_SIGNAL)
		return 0;
	if (c->bytes > UINT32_MAX || c->src_off > p->a.heap_len ||
	    c->bytes > p->a.heap_len - c->src_off || c->dst_off > p->a.heap_len ||
	    c->bytes > p->a.heap_len - c->dst_off)
		return -EINVAL;
	return 0;
}

/*
 * Execute one command. 0: posted (or done); -EAGAIN: nothing posted, retry later; other: error.
 * A command to my own rank is done here (copy, then signal): ordering matches a connection's.
 */
static int proxy_exec(struct mk_proxy *p, int qid, uint32_t idx, const struct mk_cmdq_slot *c)
{
	struct mk_cmdq *q = p->queues[qid];
	uint8_t *cs = &q->cstate[idx & q->mask];
	struct proxy_peer *pp;
	char *heap = p->a.heap;
	uint64_t dst_off;
	bool has_imm;
	size_t len;
	int rc;

	rc = proxy_check_cmd(p, c);
	if (rc)
		return rc;
	if (c->op == MK_CMD_NOP) {
		__atomic_store_n(cs, MK_CSTATE_DONE, __ATOMIC_RELEASE);
		return 0;
	}
	len = c->op == MK_CMD_SIGNAL ? 0 : (size_t)c->bytes;
	has_imm = c->op != MK_CMD_PUT;
	if (c->peer == (uint32_t)p->a.rank) {
		if (p->a.heap_device && len > 0)
			return -EINVAL; /* the device API copies to itself on the GPU */
		if (len > 0)
			memmove(heap + c->dst_off, heap + c->src_off, len);
		if (has_imm)
			proxy_signal_add(p, c->signal);
		__atomic_store_n(cs, MK_CSTATE_DONE, __ATOMIC_RELEASE);
		return 0;
	}
	pp = &p->peers[c->peer];
	if (pp->pub.conn == NULL)
		return -EHOSTUNREACH;
	/* a SIGNAL carries no data: its offsets mean nothing and are never checked, so the
	 * zero-length write that delivers the immediate targets the heap's first byte */
	dst_off = len > 0 ? c->dst_off : 0;
	__atomic_store_n(cs, MK_CSTATE_POSTED, __ATOMIC_RELAXED);
	q->posted_ms[idx & q->mask] = mk_now_ms();
	pthread_mutex_lock(&pp->lock);
	rc = p->a.ops->write(pp->pub.conn,
			     c->lane % (pp->pub.conn->nlanes > 0 ? pp->pub.conn->nlanes : 1),
			     len > 0 ? heap + c->src_off : heap, len, p->a.heap_mr,
			     pp->pub.heap.base + dst_off, &pp->pub.heap, has_imm,
			     has_imm ? mk_imm_signal(c->signal) : 0, proxy_ctx(qid, idx));
	pthread_mutex_unlock(&pp->lock);
	if (rc) {
		__atomic_store_n(cs, MK_CSTATE_FREE, __ATOMIC_RELAXED);
		return rc;
	}
	proxy_stat_add(&p->st.writes, 1);
	return 0;
}

/* Take up to batch valid entries of queue qid; one credit publication for the whole burst. */
static int proxy_drain(struct mk_proxy *p, int qid, uint64_t now_ms)
{
	struct mk_cmdq *q = p->queues[qid];
	uint64_t now = 0;
	int n = 0, rc = 0;

	while (n < p->a.batch && mk_seq_dist(q->head, q->done) < q->nslots) {
		struct mk_cmdq_slot *s = &q->slots[q->head & q->mask];
		struct mk_cmdq_slot c;

		if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != q->head)
			break;
		memcpy(&c, s, sizeof(c));
		if (p->a.on_dequeue != NULL)
			p->a.on_dequeue(p->a.on_dequeue_arg, qid, q->head, &c);
		rc = proxy_exec(p, qid, q->head, &c);
		if (rc == -EAGAIN) {
			/* Back-pressure from the transport: retry the same entry, but not forever.
			 */
			proxy_stat_add(&p->st.eagain, 1);
			rc = 0;
			if (q->stall_ms == 0)
				q->stall_ms = now_ms;
			else if ((int64_t)(now_ms - q->stall_ms) > p->a.timeout_ms)
				rc = -ETIMEDOUT;
			break;
		}
		q->stall_ms = 0;
		if (rc)
			break;
		if (c.stamp != 0 && p->a.lat_cap > 0) {
			uint64_t k = __atomic_fetch_add(&p->st.lat_samples, 1, __ATOMIC_RELAXED);

			if (now == 0)
				now = mk_now_ns();
			p->a.lat_ns[k % p->a.lat_cap] =
				(uint32_t)(now > c.stamp ? now - c.stamp : 0);
		}
		q->head++;
		n++;
	}
	if (n > 0) {
		__atomic_store_n(&q->ctrl->tail, q->head, __ATOMIC_RELEASE);
		proxy_stat_add(&p->st.cmds, (uint64_t)n);
		proxy_stat_add(&p->st.batches, 1);
		proxy_stat_add(&p->st.credit_writes, 1);
	}
	return rc ? rc : n;
}

/* Advance `done` over contiguous completions; fail when the oldest one is overdue. */
static int proxy_retire(struct mk_proxy *p, int qid, uint64_t now_ms)
{
	struct mk_cmdq *q = p->queues[qid];
	uint32_t start = q->done;

	while (q->done != q->head) {
		uint8_t *cs = &q->cstate[q->done & q->mask];
		uint8_t v = __atomic_load_n(cs, __ATOMIC_ACQUIRE);

		if (v != MK_CSTATE_DONE) {
			/* Signed: the entry may have been posted after now_ms was read. */
			if (v == MK_CSTATE_POSTED &&
			    (int64_t)(now_ms - q->posted_ms[q->done & q->mask]) > p->a.timeout_ms)
				return -ETIMEDOUT;
			break;
		}
		__atomic_store_n(cs, MK_CSTATE_FREE, __ATOMIC_RELAXED);
		q->done++;
	}
	if (q->done != start)
		__atomic_store_n(&q->ctrl->done, q->done, __ATOMIC_RELEASE);
	return (int)mk_seq_dist(q->done, start);
}

int mk_proxy_progress(struct mk_proxy *p, int thread)
{
	uint64_t now_ms = mk_now_ms();
	int work, rc;

	rc = mk_proxy_error(p);
	if (rc)
		return rc;
	work = proxy_poll_peers(p, thread);
	if (work < 0) {
		rc = work;
		goto fail;
	}
	for (int qid = thread; qid < p->a.nqueues; qid += p->a.nthreads) {
		rc = proxy_drain(p, qid, now_ms);
		if (rc < 0)
			goto fail;
		work += rc;
		rc = proxy_retire(p, qid, now_ms);
		if (rc < 0)
			goto fail;
		work += rc;
	}
	return work;

fail:
	mk_proxy_fail(p, rc);
	return mk_proxy_error(p);
}

static void *proxy_main(void *arg)
{
	struct proxy_thread *t = arg;
	struct mk_proxy *p = t->p;
	unsigned idle = 0;

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		int rc = mk_proxy_progress(p, t->index);

		if (rc < 0)
			break;
		/* Spin while busy; after a long idle stretch yield the core to the application. */
		if (rc > 0)
			idle = 0;
		else if (++idle > 4096)
			sched_yield();
	}
	return NULL;
}

int mk_proxy_start(struct mk_proxy *p)
{
	for (int t = 0; t < p->a.nthreads; t++) {
		struct proxy_thread *th = &p->threads[t];
		int rc;

		th->p = p;
		th->index = t;
		rc = pthread_create(&th->tid, NULL, proxy_main, th);
		if (rc) {
			mk_proxy_stop(p);
			return -rc;
		}
		th->running = true;
	}
	return 0;
}

void mk_proxy_stop(struct mk_proxy *p)
{
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
	for (int t = 0; t < p->a.nthreads; t++) {
		if (p->threads[t].running) {
			pthread_join(p->threads[t].tid, NULL);
			p->threads[t].running = false;
		}
	}
}

void mk_proxy_destroy(struct mk_proxy *p)
{
	if (p == NULL)
		return;
	mk_proxy_stop(p);
	for (int r = 0; r < p->a.nranks; r++)
		pthread_mutex_destroy(&p->peers[r].lock);
	free(p->threads);
	free(p->queues);
	free(p->peers);
	free(p);
}

void mk_proxy_get_stats(struct mk_proxy *p, struct mk_proxy_stats *st)
{
	st->cmds = __atomic_load_n(&p->st.cmds, __ATOMIC_RELAXED);
	st->batches = __atomic_load_n(&p->st.batches, __ATOMIC_RELAXED);
	st->credit_writes = __atomic_load_n(&p->st.credit_writes, __ATOMIC_RELAXED);
	st->writes = __atomic_load_n(&p->st.writes, __ATOMIC_RELAXED);
	st->eagain = __atomic_load_n(&p->st.eagain, __ATOMIC_RELAXED);
	st->imms = __atomic_load_n(&p->st.imms, __ATOMIC_RELAXED);
	st->flushes = __atomic_load_n(&p->st.flushes, __ATOMIC_RELAXED);
	st->lat_samples = __atomic_load_n(&p->st.lat_samples, __ATOMIC_RELAXED);
}
