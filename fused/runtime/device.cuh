/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device-side API of the runtime for fused kernels (CUDA in C style): the GPU producer of the
 * command queue (cmdq.h), put / put_signal / signal through the host proxy, signal_wait, quiet,
 * peer-pointer loads and stores with the memory ordering they need, and a node-local barrier.
 *
 * Memory-ordering rules used here:
 *   - queue slot bodies are written with relaxed system-scope stores and the slot's valid word
 *     with a GPU-scope release (no .sys fence per push: that drains L2 and costs microseconds);
 *     MK_CMDQ_SYS_RELEASE=1 at compile time publishes with a system-scope release instead;
 *   - words the CPU writes (credits, completion index, error, signals the proxy increments) are
 *     read with system-scope acquire loads;
 *   - words a peer GPU observes (signals, barrier counters in its memory) are written with
 *     system-scope release reductions, after the data they announce.
 * Every wait is bounded: it gives up with -ETIMEDOUT after timeout_ns of the GPU global timer and
 * returns -EPIPE as soon as the proxy reported an error.
 */
#ifndef MK_FUSED_RUNTIME_DEVICE_CUH
#define MK_FUSED_RUNTIME_DEVICE_CUH

#include <stdint.h>

#include "fused/gemm/ptx.cuh"
#include "fused/runtime/cmdq.h"
#include "fused/runtime/dev_comm.h"

#ifndef MK_CMDQ_SYS_RELEASE
#define MK_CMDQ_SYS_RELEASE 0
#endif

#define MK_RT_DEV MK_DEV

#define MK_DEV_EPIPE	 32
#define MK_DEV_ETIMEDOUT 110

/* ---- memory-model wrappers ---- */

MK_RT_DEV uint64_t mk_globaltimer_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Read a word the CPU or a peer GPU writes, ordering later reads after it. */
MK_RT_DEV uint32_t mk_ld_acquire_sys_u32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

MK_RT_DEV uint64_t mk_ld_acquire_sys_u64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

MK_RT_DEV int32_t mk_ld_relaxed_sys_s32(const int32_t *p)
{
	int32_t v;

	asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

/* Stores other agents read without ordering of their own (bodies, published after a release). */
MK_RT_DEV void mk_st_relaxed_sys_u32(uint32_t *p, uint32_t v)
{
	asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

MK_RT_DEV void mk_st_relaxed_sys_u64(uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Publish a queue slot: GPU scope by default (see the header comment). */
MK_RT_DEV void mk_st_release_slot_u32(uint32_t *p, uint32_t v)
{
#if MK_CMDQ_SYS_RELEASE
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
	asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

/* Peer-pointer helpers: data moves with plain stores, then a release announces it. */
MK_RT_DEV void mk_peer_signal_add(uint64_t *peer_word, uint64_t v)
{
	asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(peer_word), "l"(v) : "memory");
}

MK_RT_DEV void mk_peer_st_release_u64(uint64_t *peer_word, uint64_t v)
{
	asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(peer_word), "l"(v) : "memory");
}

MK_RT_DEV uint64_t mk_peer_ld_acquire_u64(const uint64_t *peer_word)
{
	return mk_ld_acquire_sys_u64(peer_word);
}

/*
 * One step of a bounded wait: 0 to keep waiting, -EPIPE once the proxy failed, -ETIMEDOUT once
 * timeout_ns passed since the first step (*t0 starts at 0).
 */
MK_RT_DEV int mk_dev_wait_step(const int32_t *error, uint64_t *t0, uint64_t timeout_ns)
{
	if (error != NULL && mk_ld_relaxed_sys_s32(error) != 0)
		return -MK_DEV_EPIPE;
	if (*t0 == 0)
		*t0 = mk_globaltimer_ns();
	else if (mk_globaltimer_ns() - *t0 > timeout_ns)
		return -MK_DEV_ETIMEDOUT;
	__nanosleep(32);
	return 0;
}

/* ---- the queue producer ---- */

MK_RT_DEV uint32_t mk_ld_relaxed_gpu_u32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

/*
 * Push one command (one thread). Claims a ticket with an atomic add on the producer index in GPU
 * memory, checks credits against the cached consumer index and reads the host's copy only when
 * the ring looks full, writes the body, then the valid word. Returns 0 and *ticket, -EPIPE if the
 * proxy failed, -ETIMEDOUT if no credit came within timeout_ns (the queue is then unusable).
 */
MK_RT_DEV int mk_cmdq_push(const struct mk_cmdq_dev q, const struct mk_cmdq_slot *c,
			   uint64_t timeout_ns, uint32_t *ticket)
{
	uint32_t i = atomicAdd(&q.prod->head, 1u);
	uint32_t cached = mk_ld_relaxed_gpu_u32(&q.prod->tail_cache);
	struct mk_cmdq_slot *s = &q.slots[i & q.mask];
	uint64_t t0 = 0;

	while (mk_seq_dist(i, cached) > q.mask) {
		uint32_t t = mk_ld_acquire_sys_u32(&q.ctrl->tail);

		if (mk_seq_after(t, cached)) {
			/* Racing producers may store an older value: harmless, it only re-reads. */
			asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(&q.prod->tail_cache),
				     "r"(t) : "memory");
			cached = t;
			continue;
		}
		int rc = mk_dev_wait_step(&q.ctrl->error, &t0, timeout_ns);

		if (rc)
			return rc;
	}
	{
		uint64_t *w = (uint64_t *)s;

		/* Bytes 4..7 (op, lane, flags) share the first qword with seq: store them 32-bit. */
		mk_st_relaxed_sys_u32((uint32_t *)s + 1, (uint32_t)c->op | ((uint32_t)c->lane << 8) |
							 ((uint32_t)c->flags << 16));
		mk_st_relaxed_sys_u64(&w[1], (uint64_t)c->peer | ((uint64_t)c->signal << 32));
		mk_st_relaxed_sys_u64(&w[2], c->bytes);
		mk_st_relaxed_sys_u64(&w[3], c->src_off);
		mk_st_relaxed_sys_u64(&w[4], c->dst_off);
		mk_st_relaxed_sys_u64(&w[5], c->stamp);
		mk_st_relaxed_sys_u64(&w[6], c->user);
	}
	mk_st_release_slot_u32(&s->seq, i);
	*ticket = i;
	return 0;
}

MK_RT_DEV int mk_dev_put_cmd(const struct mk_dev_comm *c, uint8_t op, int peer, uint64_t dst_off,
			     uint64_t src_off, uint64_t bytes, uint32_t signal, uint32_t *ticket)
{
	struct mk_cmdq_slot cmd;

	cmd.seq = 0;
	cmd.op = op;
	cmd.lane = 0;
	cmd.flags = 0;
	cmd.peer = (uint32_t)peer;
	cmd.signal = signal;
	cmd.bytes = bytes;
	cmd.src_off = src_off;
	cmd.dst_off = dst_off;
	cmd.stamp = 0;
	cmd.user = 0;
	cmd.pad = 0;
	return mk_cmdq_push(c->q, &cmd, c->timeout_ns, ticket);
}

/*
 * put: bytes from my heap at src_off to peer's heap at dst_off, through the proxy. The source
 * must be written (and visible at system scope: the proxy or NIC reads it) before the call; the
 * caller's own stores to the heap are ordered before the push by a system-scope fence here.
 */
MK_RT_DEV int mk_dev_put(const struct mk_dev_comm *c, int peer, uint64_t dst_off,
			 uint64_t src_off, uint64_t bytes, uint32_t *ticket)
{
	mk_fence_acq_rel_sys();
	return mk_dev_put_cmd(c, MK_CMD_PUT, peer, dst_off, src_off, bytes, 0, ticket);
}

/* put, then peer's signal word `signal` += 1 once the data is placed there. */
MK_RT_DEV int mk_dev_put_signal(const struct mk_dev_comm *c, int peer, uint64_t dst_off,
				uint64_t src_off, uint64_t bytes, uint32_t signal, uint32_t *ticket)
{
	mk_fence_acq_rel_sys();
	return mk_dev_put_cmd(c, MK_CMD_PUT_SIGNAL, peer, dst_off, src_off, bytes, signal, ticket);
}

/* Current value of signal word `signal`: proxy increments plus node peers' increments. */
MK_RT_DEV uint64_t mk_dev_signal_read(const struct mk_dev_comm *c, uint32_t signal)
{
	uint64_t v = mk_ld_acquire_sys_u64(&c->net_signals[signal]);

	if (c->nvl_signals != NULL)
		v += mk_ld_acquire_sys_u64(&c->nvl_signals[signal]);
	return v;
}

/* Wait until signal word `signal` >= value. 0, -EPIPE (proxy failed) or -ETIMEDOUT. */
MK_RT_DEV int mk_dev_signal_wait(const struct mk_dev_comm *c, uint32_t signal, uint64_t value)
{
	uint64_t t0 = 0;

	while (mk_dev_signal_read(c, signal) < value) {
		int rc = mk_dev_wait_step(c->q.ctrl != NULL ? &c->q.ctrl->error : NULL, &t0,
					  c->timeout_ns);

		if (rc)
			return rc;
	}
	return 0;
}

/*
 * quiet: every command up to and including `ticket` has completed (its source may be reused,
 * its data is placed at the target). Commands complete in queue order as far as `done` shows.
 */
MK_RT_DEV int mk_dev_quiet(const struct mk_dev_comm *c, uint32_t ticket)
{
	uint64_t t0 = 0;

	while (!mk_seq_after(mk_ld_acquire_sys_u32(&c->q.ctrl->done), ticket)) {
		int rc = mk_dev_wait_step(&c->q.ctrl->error, &t0, c->timeout_ns);

		if (rc)
			return rc;
	}
	return 0;
}

/* Node-local signal through a peer pointer: data stored before it is visible first. */
MK_RT_DEV void mk_dev_nvl_signal(const struct mk_dev_comm *c, int local_peer, uint32_t signal)
{
	mk_peer_signal_add(&c->peer_nvl_signals[local_peer][signal], 1);
}

/*
 * Node-local barrier, one thread per rank calls it with a rising epoch (1, 2, ...): adds 1 to
 * every local peer's counter, then waits until its own counter reaches epoch * nlocal.
 */
MK_RT_DEV int mk_dev_node_barrier(const struct mk_dev_comm *c, uint64_t epoch)
{
	uint64_t t0 = 0;

	for (int p = 0; p < c->nlocal; p++)
		mk_peer_signal_add(c->peer_barrier[p], 1);
	while (mk_ld_acquire_sys_u64(c->barrier) < epoch * (uint64_t)c->nlocal) {
		int rc = mk_dev_wait_step(NULL, &t0, c->timeout_ns);

		if (rc)
			return rc;
	}
	return 0;
}

#endif /* MK_FUSED_RUNTIME_DEVICE_CUH */
