/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host proxy of a comm: threads that drain GPU -> host command queues (cmdq.h) in batches and
 * execute PUT / PUT_SIGNAL / SIGNAL as one-sided writes (+ 32-bit immediate) through mk_transport;
 * on the target side they turn arriving immediates into signal-word increments in memory the GPU
 * polls. Transport errors, dead peers and operations that stay incomplete past MKERNEL_TIMEOUT
 * become the proxy's async error, which is mirrored into every queue's ctrl->error so producers
 * and GPU waiters stop instead of spinning. Plain C: no CUDA, no NCCL.
 *
 * Threads: thread t owns queues q with q % nthreads == t (it alone consumes them and advances their
 * indices) and polls the connections of peers p with p % nthreads == t. Writes to a peer are
 * posted under that peer's lock, so any thread may post to any peer. Completions may therefore be
 * reaped by a thread other than the poster; they are recorded with atomics in the queue's
 * completion ring and the owning thread advances `done` over contiguous completions only.
 */
#ifndef MK_FUSED_RUNTIME_PROXY_H
#define MK_FUSED_RUNTIME_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "fused/runtime/cmdq.h"
#include "mk/clock.h" /* mk_now_ns(): the proxy, benchmarks and tests */
#include "mk/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host side of one queue: memory (owned by the caller) plus the consumer's state. */
struct mk_cmdq {
	struct mk_cmdq_slot *slots; /* nslots, host memory the producer writes */
	struct mk_cmdq_ctrl *ctrl;  /* host memory the producer reads */
	uint32_t nslots;
	uint32_t mask;
	uint32_t head;	     /* next entry to read (consumer index) */
	uint32_t done;	     /* next entry to complete */
	uint8_t *cstate;     /* per slot: MK_CSTATE_* (atomic) */
	uint64_t *posted_ms; /* per slot: when its operation was posted */
	uint64_t stall_ms;   /* when the head entry was first refused (-EAGAIN); 0 = none */
};

/*
 * Prepare a queue over caller-provided memory: slots (nslots * 64 B) and ctrl. nslots must be a
 * power of two in [2, MK_CMDQ_MAX_SLOTS]. start is the first entry index (tests start near 2^32
 * to cross the wrap); every slot gets the previous lap's sequence so no slot looks valid early.
 * prod (may be NULL) is initialised for a producer starting at start.
 */
int mk_cmdq_init(struct mk_cmdq *q, struct mk_cmdq_slot *slots, struct mk_cmdq_ctrl *ctrl,
		 uint32_t nslots, uint32_t start, struct mk_cmdq_prod *prod);
void mk_cmdq_fini(struct mk_cmdq *q);

/* The producer's view of q (prod lives wherever the producer runs). */
struct mk_cmdq_dev mk_cmdq_dev(const struct mk_cmdq *q, struct mk_cmdq_prod *prod);

/* One remote (or local) rank as the proxy sees it. */
struct mk_proxy_peer {
	struct mk_conn *conn; /* NULL: not reachable through the transport */
	struct mk_rkey heap;  /* the peer's symmetric heap registration */
};

struct mk_proxy_attr {
	const struct mk_transport_ops *ops; /* transport of every conn below */
	int rank;
	int nranks;
	struct mk_proxy_peer *peers; /* nranks entries (copied); peers[rank] may be empty */
	void *heap;		     /* my symmetric heap: source of puts, target of peers' */
	size_t heap_len;	     /* same on every rank */
	int heap_device;	     /* heap is GPU memory: no host copy for commands to myself, and
				      * signals wait for ops->flush (when the transport has one) */
	struct mk_bmr *heap_mr;	     /* its registration (NULL with only local targets) */
	uint64_t *signals;	     /* my signal words; immediates increment them */
	uint32_t nsignals;	     /* same on every rank */
	struct mk_cmdq **queues;     /* queues to drain (copied; the queues stay the caller's) */
	int nqueues;
	int nthreads;	    /* proxy threads (>= 1) */
	int batch;	    /* most entries taken from one queue per sweep (>= 1) */
	int64_t timeout_ms; /* an operation incomplete for longer is an error */
	uint32_t *lat_ns;   /* optional: dequeue latency of stamped commands, ring */
	uint32_t lat_cap;   /* entries in lat_ns */
	/* Optional tracing hook, called by the consuming thread for each entry before it runs
	 * (again for an entry retried after the transport refused it with -EAGAIN). */
	void (*on_dequeue)(void *arg, int queue, uint32_t index, const struct mk_cmdq_slot *c);
	void *on_dequeue_arg;
};

struct mk_proxy_stats {
	uint64_t cmds;		/* entries dequeued */
	uint64_t batches;	/* sweeps that dequeued >= 1 entry from a queue */
	uint64_t credit_writes; /* ctrl->tail publications (one per batch) */
	uint64_t writes;	/* transport writes posted */
	uint64_t eagain;	/* writes refused with -EAGAIN and retried */
	uint64_t imms;		/* immediates turned into signal increments */
	uint64_t flushes;	/* flushes posted before applying a signal (GPU-memory heap) */
	uint64_t lat_samples;	/* entries written to lat_ns (modulo lat_cap) */
};

struct mk_proxy;

/* Validates attr, allocates; no threads yet. -EINVAL for a bad attr. */
int mk_proxy_create(const struct mk_proxy_attr *attr, struct mk_proxy **out);
/* Start attr.nthreads threads, each looping mk_proxy_progress() until stopped or failed. */
int mk_proxy_start(struct mk_proxy *p);
/*
 * One sweep of thread slot `thread` (what each proxy thread runs in a loop; tests call it
 * directly to interleave several proxies on one thread): reap completions and immediates, take
 * up to `batch` entries from each owned queue, check timeouts. Returns the amount of work done
 * (0 = idle) or the proxy's error (negative) once it failed.
 */
int mk_proxy_progress(struct mk_proxy *p, int thread);
/* 0 or the first error (-errno). Safe from any thread. */
int mk_proxy_error(struct mk_proxy *p);
/* Record err as the async error (first one wins) and stop producers and waiters. */
void mk_proxy_fail(struct mk_proxy *p, int err);
/* Stop and join the threads (never waits on a peer). Idempotent. */
void mk_proxy_stop(struct mk_proxy *p);
void mk_proxy_destroy(struct mk_proxy *p);
void mk_proxy_get_stats(struct mk_proxy *p, struct mk_proxy_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_PROXY_H */
