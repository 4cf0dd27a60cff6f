/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU -> host command queue: memory layout and the producer protocol, shared by C (the host
 * proxy, CPU stand-in producers in tests and benchmarks) and CUDA (device.cuh includes this
 * file).
 *
 * Memory:
 *   slots[nslots]  host-pinned, written by the producer, read by the proxy. 64 B each; `seq` is
 *                  the valid word: the producer writes the body first and `seq` last (release),
 *                  the proxy reads `seq` (acquire) and then the body. A slot holds entry i when
 *                  seq == (uint32_t)i, so slots are never cleared: the value left by the previous
 *                  lap (i - nslots) never equals i.
 *   ctrl           host-pinned, written by the proxy, read by the producer: `tail` (consumer
 *                  index: entries below it have been copied out, their slots are free again =
 *                  credits), `done` (entries below it have completed: their source buffers may be
 *                  reused and their data is placed at the target), `error` (non-zero once the
 *                  proxy failed: producers and waiters stop instead of spinning).
 *   prod           producer state, in GPU memory for a GPU producer: `head` (next ticket, claimed
 *                  with an atomic add) and `tail_cache` (last `tail` read across PCIe, so the
 *                  producer checks credits locally and crosses the bus only when it looks full).
 *
 * Indices are free-running 32-bit counters. nslots is a power of two (so slot = i & mask stays
 * consistent across the 2^32 wrap) and at most 2^30; distances are compared as (uint32_t)(a - b),
 * valid while the two indices are less than 2^31 apart.
 */
#ifndef MK_FUSED_RUNTIME_CMDQ_H
#define MK_FUSED_RUNTIME_CMDQ_H

#include <stdint.h>

#ifdef __CUDACC__
#define MK_CMDQ_HD __host__ __device__ __forceinline__
#else
#define MK_CMDQ_HD static inline
#endif

#define MK_CMDQ_SLOT_BYTES 64
#define MK_CMDQ_MAX_SLOTS  (1u << 30)

/* Command opcodes (mk_cmdq_slot.op). */
enum mk_cmd_op {
	MK_CMD_NOP = 0,	       /* completes at once: benchmarks, tests, padding */
	MK_CMD_PUT = 1,	       /* bytes from my heap at src_off to peer's heap at dst_off */
	MK_CMD_PUT_SIGNAL = 2, /* PUT, then peer's signal word `signal` += 1 after the data */
	MK_CMD_SIGNAL = 3,     /* peer's signal word `signal` += 1, no data (ordered after PUTs) */
	MK_CMD_OP_MAX = 4,
};

/* One 64-byte command. Field order keeps the 64-bit members naturally aligned. */
struct mk_cmdq_slot {
	uint32_t seq;	  /* valid word: == entry index once the body is complete */
	uint8_t op;	  /* enum mk_cmd_op */
	uint8_t lane;	  /* connection lane hint (taken modulo the connection's lanes) */
	uint16_t flags;	  /* reserved, 0 */
	uint32_t peer;	  /* target rank in the comm */
	uint32_t signal;  /* signal word index at the target (PUT_SIGNAL, SIGNAL) */
	uint64_t bytes;	  /* payload length (PUT, PUT_SIGNAL); <= 2^32 - 1 */
	uint64_t src_off; /* offset in my symmetric heap */
	uint64_t dst_off; /* offset in the target's symmetric heap */
	uint64_t stamp;	  /* producer's timestamp in ns (0 = none): latency statistics only */
	uint64_t user;	  /* opaque to the proxy: tests tag commands with it */
	uint64_t pad;
};

/* Proxy -> producer mirror; each word on its own 64-byte line (no false sharing over PCIe). */
struct mk_cmdq_ctrl {
	uint32_t tail; /* consumer index (credits) */
	uint32_t pad0[15];
	uint32_t done; /* completion index (quiet) */
	uint32_t pad1[15];
	int32_t error; /* 0, or -errno of the proxy's first failure */
	uint32_t pad2[15];
};

/* Producer state (GPU memory for a GPU producer). */
struct mk_cmdq_prod {
	uint32_t head;	     /* next ticket */
	uint32_t tail_cache; /* last tail observed */
};

/* What a producer needs; passed by value to kernels. */
struct mk_cmdq_dev {
	struct mk_cmdq_slot *slots;
	struct mk_cmdq_ctrl *ctrl;
	struct mk_cmdq_prod *prod;
	uint32_t mask; /* nslots - 1 */
};

#if defined(__cplusplus) && !defined(__CUDACC__)
static_assert(sizeof(struct mk_cmdq_slot) == MK_CMDQ_SLOT_BYTES, "command slot is 64 bytes");
#elif !defined(__cplusplus)
_Static_assert(sizeof(struct mk_cmdq_slot) == MK_CMDQ_SLOT_BYTES, "command slot is 64 bytes");
_Static_assert(sizeof(struct mk_cmdq_ctrl) == 192, "three 64-byte lines");
#endif

/* a is after b (wrap-safe): true when a - b, as a signed 32-bit distance, is positive. */
MK_CMDQ_HD int mk_seq_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

/* Entries between b (inclusive) and a (exclusive), wrap-safe. */
MK_CMDQ_HD uint32_t mk_seq_dist(uint32_t a, uint32_t b)
{
	return a - b;
}

/*
 * Immediate data of a signal write: kind in bit 31, signal index in bits 0..17. Bits 18..30 are
 * the transport backend's (MK_TP_IMM_BACKEND_MASK: the ofi backend's shared endpoints route by
 * them), so the index has 18 bits (MK_COMM_SIGNALS is 8192).
 */
#define MK_IMM_KIND_SHIFT  31
#define MK_IMM_KIND_SIGNAL 0x1u
#define MK_IMM_INDEX_BITS  18
#define MK_IMM_INDEX_MASK  ((1u << MK_IMM_INDEX_BITS) - 1)

MK_CMDQ_HD uint32_t mk_imm_signal(uint32_t index)
{
	return (MK_IMM_KIND_SIGNAL << MK_IMM_KIND_SHIFT) | (index & MK_IMM_INDEX_MASK);
}

#ifndef __CUDA_ARCH__
#include <errno.h>
#include <sched.h>

static inline void mk_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/*
 * CPU producer (tests, benchmarks, host-side helpers): the same protocol a GPU producer follows,
 * with C11-style atomics. Claims a ticket, waits for a credit (spinning at most spin_limit
 * iterations; < 0 = no limit), writes the body, then publishes `seq` with release. Returns the
 * ticket (>= 0 as int64), -EPIPE when the proxy reported an error, -ETIMEDOUT after spin_limit.
 * A ticket whose credit wait timed out is lost: the queue is then unusable (callers abort).
 */
static inline int64_t mk_cmdq_push_host(const struct mk_cmdq_dev *q, const struct mk_cmdq_slot *c,
					long spin_limit)
{
	uint32_t i = __atomic_fetch_add(&q->prod->head, 1, __ATOMIC_RELAXED);
	uint32_t cached = __atomic_load_n(&q->prod->tail_cache, __ATOMIC_RELAXED);
	struct mk_cmdq_slot *s = &q->slots[i & q->mask];
	long spins = 0;

	while (mk_seq_dist(i, cached) > q->mask) {
		uint32_t t = __atomic_load_n(&q->ctrl->tail, __ATOMIC_ACQUIRE);

		if (__atomic_load_n(&q->ctrl->error, __ATOMIC_RELAXED) != 0)
			return -EPIPE;
		if (mk_seq_after(t, cached)) {
			/* Several producers may race here: keep the newest value. */
			__atomic_store_n(&q->prod->tail_cache, t, __ATOMIC_RELAXED);
			cached = t;
			continue;
		}
		if (spin_limit >= 0 && spins >= spin_limit)
			return -ETIMEDOUT;
		/* A CPU stand-in may share cores with the consumer: do not starve it. */
		if ((++spins & 255) == 0)
			sched_yield();
		else
			mk_cpu_relax();
	}
	s->op = c->op;
	s->lane = c->lane;
	s->flags = c->flags;
	s->peer = c->peer;
	s->signal = c->signal;
	s->bytes = c->bytes;
	s->src_off = c->src_off;
	s->dst_off = c->dst_off;
	s->stamp = c->stamp;
	s->user = c->user;
	__atomic_store_n(&s->seq, i, __ATOMIC_RELEASE);
	return (int64_t)i;
}
#endif

#endif /* MK_FUSED_RUNTIME_CMDQ_H */
