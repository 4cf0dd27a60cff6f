/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device-side API of the runtime for fused kernels (CUDA in C style): the GPU producer of the
 * command queue (cmdq.h); put / put_signal / signal, by stores through mapped heaps for ranks of
 * my node and through the host proxy for the others; land (arrivals from other nodes into the
 * heap when they come through a host mirror); signal_wait, quiet, peer-pointer loads and stores
 * with the memory ordering they need, and a node-local barrier.
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
 * returns -EPIPE as soon as the proxy reported an error. The memory-ordering wrappers and the
 * bounded wait itself are fused/common/wait.cuh's; the queue and the comm's words are here.
 */
#ifndef MK_FUSED_RUNTIME_DEVICE_CUH
#define MK_FUSED_RUNTIME_DEVICE_CUH

#include <stdint.h>

#include "fused/common/ptx.cuh"
#include "fused/common/wait.cuh"
#include "fused/runtime/cmdq.h"
#include "fused/runtime/dev_comm.h"

#ifndef MK_CMDQ_SYS_RELEASE
#define MK_CMDQ_SYS_RELEASE 0
#endif

#define MK_RT_DEV MK_DEV

/* Publish a queue slot: GPU scope by default (see the header comment). */
MK_RT_DEV void mk_st_release_slot_u32(uint32_t *p, uint32_t v)
{
#if MK_CMDQ_SYS_RELEASE
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
	asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

/* ---- the queue producer ---- */

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
	struct mk_dev_wait wt = { 0, 0 };

	while (mk_seq_dist(i, cached) > q.mask) {
		uint32_t t = mk_ld_acquire_sys_u32(&q.ctrl->tail);

		if (mk_seq_after(t, cached)) {
			/* Racing producers may store an older value: harmless, it only re-reads. */
			asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(&q.prod->tail_cache),
				     "r"(t) : "memory");
			cached = t;
			continue;
		}
		int rc = mk_dev_wait_step(&q.ctrl->error, &wt, timeout_ns);

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

/* ---- where a peer is: node-local peers (and myself) by pointer, the others by the proxy ---- */

/* The peer's index among my node's ranks, or -1 when it is on another node. */
MK_RT_DEV int mk_dev_local_of(const struct mk_dev_comm *c, int peer)
{
	if (c->peer_local != NULL)
		return c->peer_local[peer];
	return peer == c->rank ? c->local_rank : -1;
}

/* The peer's heap as a pointer I can store to, or NULL when it is on another node. */
MK_RT_DEV char *mk_dev_peer_heap(const struct mk_dev_comm *c, int peer)
{
	int l = mk_dev_local_of(c, peer);

	return l >= 0 ? c->peer_heap[l] : NULL;
}

/* The peer's node-signal words (node-local peers only). */
MK_RT_DEV uint64_t *mk_dev_peer_signals(const struct mk_dev_comm *c, int peer)
{
	int l = mk_dev_local_of(c, peer);

	return l >= 0 ? c->peer_nvl_signals[l] : NULL;
}

/*
 * Copy by threads [tid, ..., step): 16 bytes at a time when both ends and the length allow.
 * `src_volatile` reads the source past the L1 (a host mirror a NIC writes between kernels'
 * reads of the same lines).
 */
MK_RT_DEV uint4 mk_dev_ld16(const uint4 *p, bool src_volatile)
{
	return src_volatile ? __ldcv(p) : *p;
}

MK_RT_DEV void mk_dev_copy(char *dst, const char *src, uint64_t bytes, uint32_t tid, uint32_t step,
			   bool src_volatile)
{
	if (((uintptr_t)src % 16) == 0 && ((uintptr_t)dst % 16) == 0 && bytes % 16 == 0) {
		const uint4 *s4 = (const uint4 *)src;
		uint4 *d4 = (uint4 *)dst;
		const uint64_t n = bytes / 16;
		uint64_t i = tid;

		/* Four loads in flight per thread before the stores: one side is often host memory
		 * across PCIe, where a single outstanding load per thread leaves the link idle. */
		for (; i + 3 * (uint64_t)step < n; i += 4 * (uint64_t)step) {
			uint4 a = mk_dev_ld16(s4 + i, src_volatile);
			uint4 b = mk_dev_ld16(s4 + i + step, src_volatile);
			uint4 c = mk_dev_ld16(s4 + i + 2 * (uint64_t)step, src_volatile);
			uint4 d = mk_dev_ld16(s4 + i + 3 * (uint64_t)step, src_volatile);

			d4[i] = a;
			d4[i + step] = b;
			d4[i + 2 * (uint64_t)step] = c;
			d4[i + 3 * (uint64_t)step] = d;
		}
		for (; i < n; i += step)
			d4[i] = mk_dev_ld16(s4 + i, src_volatile);
		return;
	}
	for (uint64_t i = tid; i < bytes; i += step)
		dst[i] = src_volatile ? (char)__ldcv((const signed char *)src + i) : src[i];
}

/* A ticket that quiet() passes once everything pushed so far completed. */
MK_RT_DEV uint32_t mk_dev_ticket_now(const struct mk_dev_comm *c)
{
	return mk_ld_relaxed_gpu_u32(&c->q.prod->head) - 1u;
}

/* Threads [tid, ..., step) copy [src_off, +bytes) of the heap into the host mirror, if any. */
MK_RT_DEV void mk_dev_mirror_out(const struct mk_dev_comm *c, uint64_t src_off, uint64_t bytes,
				 uint32_t tid, uint32_t step)
{
	if (c->stage != NULL)
		mk_dev_copy(c->stage + src_off, c->heap + src_off, bytes, tid, step, false);
}

/* Threads [tid, ..., step) copy what `from` put at [off, +bytes) out of the mirror, if it
 * went through one (another node's put, a mirror in use). */
MK_RT_DEV void mk_dev_mirror_in(const struct mk_dev_comm *c, int from, uint64_t off,
				uint64_t bytes, uint32_t tid, uint32_t step)
{
	if (c->stage != NULL && mk_dev_peer_heap(c, from) == NULL)
		mk_dev_copy(c->heap + off, c->stage + off, bytes, tid, step, true);
}

/* A PUT or PUT_SIGNAL to another node by one thread: mirror the source, then push. */
MK_RT_DEV int mk_dev_push(const struct mk_dev_comm *c, uint8_t op, int peer, uint64_t dst_off,
			  uint64_t src_off, uint64_t bytes, uint32_t signal, uint32_t *ticket)
{
	mk_dev_mirror_out(c, src_off, bytes, 0, 1);
	mk_fence_acq_rel_sys();
	return mk_dev_put_cmd(c, op, peer, dst_off, src_off, bytes, signal, ticket);
}

/*
 * put: bytes from my heap at src_off to peer's heap at dst_off. A node-local peer (or myself)
 * gets them by stores through its mapped heap; another node's through the proxy, from the host
 * mirror when there is one (the bytes are copied there first). One thread; the source must be
 * written (and visible to this thread) before the call. *ticket is what quiet() waits for.
 */
MK_RT_DEV int mk_dev_put(const struct mk_dev_comm *c, int peer, uint64_t dst_off,
			 uint64_t src_off, uint64_t bytes, uint32_t *ticket)
{
	char *to = mk_dev_peer_heap(c, peer);

	if (to == NULL)
		return mk_dev_push(c, MK_CMD_PUT, peer, dst_off, src_off, bytes, 0, ticket);
	mk_dev_copy(to + dst_off, c->heap + src_off, bytes, 0, 1, false);
	*ticket = mk_dev_ticket_now(c);
	return 0;
}

/* Peer's signal word `signal` += 1, ordered after every put this thread made to it before. */
MK_RT_DEV int mk_dev_signal(const struct mk_dev_comm *c, int peer, uint32_t signal,
			    uint32_t *ticket)
{
	uint64_t *words = mk_dev_peer_signals(c, peer);

	if (words != NULL) {
		mk_fence_acq_rel_sys();
		mk_peer_signal_add(&words[signal], 1);
		*ticket = mk_dev_ticket_now(c);
		return 0;
	}
	return mk_dev_put_cmd(c, MK_CMD_SIGNAL, peer, 0, 0, 0, signal, ticket);
}

/* put, then peer's signal word `signal` += 1 once the data is placed there. */
MK_RT_DEV int mk_dev_put_signal(const struct mk_dev_comm *c, int peer, uint64_t dst_off,
				uint64_t src_off, uint64_t bytes, uint32_t signal, uint32_t *ticket)
{
	int rc;

	if (mk_dev_peer_heap(c, peer) == NULL)
		return mk_dev_push(c, MK_CMD_PUT_SIGNAL, peer, dst_off, src_off, bytes, signal,
				   ticket);
	rc = mk_dev_put(c, peer, dst_off, src_off, bytes, ticket);
	return rc ? rc : mk_dev_signal(c, peer, signal, ticket);
}

/*
 * land: make bytes that `from` put at my heap offset `off` readable in my heap. Puts from
 * another node arrive in the host mirror when there is one; this copies them in. Nothing to do
 * for node-local senders or when the NIC writes the heap. Call after the signal that announced
 * the data was seen (the waiting thread's acquire, then a barrier for the other threads).
 */
MK_RT_DEV void mk_dev_land(const struct mk_dev_comm *c, int from, uint64_t off, uint64_t bytes)
{
	mk_dev_mirror_in(c, from, off, bytes, 0, 1);
}

/* ---- the same for a whole CTA (every thread calls; the result is the same in all) ---- */

/*
 * A PUT or PUT_SIGNAL to another node by the CTA: every thread copies its share into the host
 * mirror (when there is one), then thread 0 pushes the command. Ends with the CTA synchronised.
 */
MK_RT_DEV int mk_dev_push_block(const struct mk_dev_comm *c, uint8_t op, int peer,
				uint64_t dst_off, uint64_t src_off, uint64_t bytes, uint32_t signal,
				uint32_t *ticket)
{
	__shared__ int rc_s;
	__shared__ uint32_t ticket_s;

	mk_dev_mirror_out(c, src_off, bytes, threadIdx.x, blockDim.x);
	__syncthreads();
	if (threadIdx.x == 0) {
		mk_fence_acq_rel_sys();
		rc_s = mk_dev_put_cmd(c, op, peer, dst_off, src_off, bytes, signal, &ticket_s);
	}
	__syncthreads();
	*ticket = ticket_s;
	return rc_s;
}

/* put by every thread of the CTA; ends with the CTA synchronised. */
MK_RT_DEV int mk_dev_put_block(const struct mk_dev_comm *c, int peer, uint64_t dst_off,
			       uint64_t src_off, uint64_t bytes, uint32_t *ticket)
{
	char *to = mk_dev_peer_heap(c, peer);

	if (to == NULL)
		return mk_dev_push_block(c, MK_CMD_PUT, peer, dst_off, src_off, bytes, 0, ticket);
	mk_dev_copy(to + dst_off, c->heap + src_off, bytes, threadIdx.x, blockDim.x, false);
	__syncthreads();
	*ticket = mk_dev_ticket_now(c);
	return 0;
}

/* signal by thread 0 after the CTA's earlier stores (call after mk_dev_put_block). */
MK_RT_DEV int mk_dev_signal_block(const struct mk_dev_comm *c, int peer, uint32_t signal,
				  uint32_t *ticket)
{
	__shared__ int rc_s;
	__shared__ uint32_t ticket_s;

	__syncthreads();
	if (threadIdx.x == 0)
		rc_s = mk_dev_signal(c, peer, signal, &ticket_s);
	__syncthreads();
	*ticket = ticket_s;
	return rc_s;
}

/* put + signal by the CTA: one command (one write with immediate) to another node. */
MK_RT_DEV int mk_dev_put_signal_block(const struct mk_dev_comm *c, int peer, uint64_t dst_off,
				      uint64_t src_off, uint64_t bytes, uint32_t signal,
				      uint32_t *ticket)
{
	int rc;

	if (mk_dev_peer_heap(c, peer) == NULL)
		return mk_dev_push_block(c, MK_CMD_PUT_SIGNAL, peer, dst_off, src_off, bytes,
					 signal, ticket);
	rc = mk_dev_put_block(c, peer, dst_off, src_off, bytes, ticket);
	return rc ? rc : mk_dev_signal_block(c, peer, signal, ticket);
}

/* land by every thread of the CTA; ends with the CTA synchronised. */
MK_RT_DEV void mk_dev_land_block(const struct mk_dev_comm *c, int from, uint64_t off,
				 uint64_t bytes)
{
	__syncthreads();
	mk_dev_mirror_in(c, from, off, bytes, threadIdx.x, blockDim.x);
	__syncthreads();
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
	struct mk_dev_wait wt = { 0, 0 };

	while (mk_dev_signal_read(c, signal) < value) {
		int rc = mk_dev_wait_step(c->q.ctrl != NULL ? &c->q.ctrl->error : NULL, &wt,
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
	struct mk_dev_wait wt = { 0, 0 };

	while (!mk_seq_after(mk_ld_acquire_sys_u32(&c->q.ctrl->done), ticket)) {
		int rc = mk_dev_wait_step(&c->q.ctrl->error, &wt, c->timeout_ns);

		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Node-local barrier, one thread per rank calls it with a rising epoch (1, 2, ...): adds 1 to
 * every local peer's counter, then waits until its own counter reaches epoch * nlocal.
 */
MK_RT_DEV int mk_dev_node_barrier(const struct mk_dev_comm *c, uint64_t epoch)
{
	struct mk_dev_wait wt = { 0, 0 };

	for (int p = 0; p < c->nlocal; p++)
		mk_peer_signal_add(c->peer_barrier[p], 1);
	while (mk_ld_acquire_sys_u64(c->barrier) < epoch * (uint64_t)c->nlocal) {
		int rc = mk_dev_wait_step(NULL, &wt, c->timeout_ns);

		if (rc)
			return rc;
	}
	return 0;
}

#endif /* MK_FUSED_RUNTIME_DEVICE_CUH */
