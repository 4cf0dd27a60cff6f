/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory ordering between agents and bounded waits, for every fused kernel (engines, runtime,
 * ops): loads and stores at system scope for words the CPU or a peer GPU writes or reads,
 * peer-pointer release/acquire, the GPU global timer, and waits that give up.
 *
 * Rules: a word another agent writes is read with an acquire (or relaxed, then ordered by a
 * fence) at the scope of that agent; data a peer reads is stored first, then announced with a
 * release at system scope. Every wait is bounded: it returns -ETIMEDOUT (MK_DEV_ETIMEDOUT) after
 * timeout_ns of the global timer and -EPIPE (MK_DEV_EPIPE) soon after the error word it watches
 * is set, backing off as it grows so that pollers do not slow the SMs doing the work.
 */
#ifndef MK_FUSED_COMMON_WAIT_CUH
#define MK_FUSED_COMMON_WAIT_CUH

#include <stdint.h>

#include "fused/common/ptx.cuh"

/* errno values device code returns negated (no <errno.h> on the device) */
#define MK_DEV_EPIPE	 32
#define MK_DEV_ETIMEDOUT 110

MK_DEV uint64_t mk_globaltimer_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Read a word the CPU or a peer GPU writes, ordering later reads after it. */
MK_DEV uint32_t mk_ld_acquire_sys_u32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

MK_DEV uint64_t mk_ld_acquire_sys_u64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

MK_DEV int32_t mk_ld_relaxed_sys_s32(const int32_t *p)
{
	int32_t v;

	asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

/* A word other CTAs of this GPU update (a producer index in GPU memory). */
MK_DEV uint32_t mk_ld_relaxed_gpu_u32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

/* Stores other agents read without ordering of their own (bodies, published after a release). */
MK_DEV void mk_st_relaxed_sys_u32(uint32_t *p, uint32_t v)
{
	asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

MK_DEV void mk_st_relaxed_sys_u64(uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Peer-pointer helpers: data moves with plain stores, then a release announces it. */
MK_DEV void mk_peer_signal_add(uint64_t *peer_word, uint64_t v)
{
	asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(peer_word), "l"(v) : "memory");
}

MK_DEV void mk_peer_st_release_u64(uint64_t *peer_word, uint64_t v)
{
	asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(peer_word), "l"(v) : "memory");
}

MK_DEV void mk_peer_st_release_u32(uint32_t *peer_word, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(peer_word), "r"(v) : "memory");
}

MK_DEV uint64_t mk_peer_ld_acquire_u64(const uint64_t *peer_word)
{
	return mk_ld_acquire_sys_u64(peer_word);
}

/*
 * How often a waiter reads the error word. It lives in mapped host memory, so each read is a
 * PCIe round trip: thousands of threads polling it every microsecond (the one-shot all-reduce
 * has one waiter per line) flooded the bus the GPU also fetches its launches over, and calls
 * of both ranks stalled for milliseconds. The first read comes once a wait outlasts a normal
 * peer's lag, then one per interval: an error still ends a wait within a fraction of a
 * millisecond.
 */
#define MK_DEV_ERROR_FIRST_NS 16000u
#define MK_DEV_ERROR_EVERY_NS 256000u

/* A bounded wait's state; zero-initialise before the first step. */
struct mk_dev_wait {
	uint64_t t0;	     /* the first step's time, 0 before it */
	uint64_t next_error; /* when the error word is read next */
};

/*
 * One step of a bounded wait: 0 to keep waiting, -EPIPE once *error is set (the runtime's proxy
 * or another kernel failed; error may be NULL), -ETIMEDOUT once timeout_ns passed since the
 * first step.
 */
MK_DEV int mk_dev_wait_step(const int32_t *error, struct mk_dev_wait *w, uint64_t timeout_ns)
{
	const uint64_t now = mk_globaltimer_ns();
	uint64_t waited;

	if (w->t0 == 0) {
		w->t0 = now;
		w->next_error = now + MK_DEV_ERROR_FIRST_NS;
	}
	if (error != NULL && now >= w->next_error) {
		w->next_error = now + MK_DEV_ERROR_EVERY_NS;
		if (mk_ld_relaxed_sys_s32(error) != 0)
			return -MK_DEV_EPIPE;
	}
	waited = now - w->t0;
	if (waited > timeout_ns)
		return -MK_DEV_ETIMEDOUT;
	/*
	 * Back off as the wait grows (an eighth of it, at most 1 us): dozens of CTAs polling
	 * system-scope words at full rate slowed the SMs that do the work (a fused GEMM ran many
	 * times slower next to them), while a short wait still sees its word within 32 ns.
	 */
	__nanosleep(waited < 256 ? 32u : waited < 8000 ? (unsigned int)(waited >> 3) : 1000u);
	return 0;
}

/* Wait (one thread) until *word >= want, bounded as above. 0, -EPIPE or -ETIMEDOUT. */
MK_DEV int mk_dev_wait_u32_ge(const uint32_t *word, uint32_t want, const int32_t *error,
			      uint64_t timeout_ns)
{
	struct mk_dev_wait wt = { 0, 0 };

	while (mk_ld_acquire_sys_u32(word) < want) {
		int rc = mk_dev_wait_step(error, &wt, timeout_ns);

		if (rc)
			return rc;
	}
	return 0;
}

/* Record a kernel's error in an error word in mapped host memory (a comm's). First error wins,
 * roughly: atomics on mapped host memory are not guaranteed over PCIe. */
MK_DEV void mk_dev_record_error(int32_t *error, int rc)
{
	if (mk_ld_relaxed_sys_s32(error) == 0)
		mk_st_relaxed_sys_u32((uint32_t *)error, (uint32_t)rc);
}

#endif /* MK_FUSED_COMMON_WAIT_CUH */
