/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which mkComm_t values are live (comm_live.c). A comm is registered when mkCommInit hands it
 * out and taken off when mkCommDestroy or mkCommAbort begins, so a second destroy, an abort after
 * a destroy, or any other call with a stale or foreign pointer is refused after a lookup that
 * reads nothing behind the pointer. The header of a destroyed comm is kept (quarantined, its
 * magic cleared) instead of being freed: code that still reads a stale comm's magic reads a dead
 * header, never freed memory, and the address is never handed out again for a newer comm.
 * Plain C, no CUDA: unit-tested on every machine.
 */
#ifndef MK_FUSED_RUNTIME_COMM_LIVE_H
#define MK_FUSED_RUNTIME_COMM_LIVE_H

#ifdef __cplusplus
extern "C" {
#endif

/* c is live from now on. 0, or -ENOMEM (the caller then treats the comm as never made). */
int mk_comm_live_add(const void *c);
/* 0 if c is live (it stays live), else -EBADF. Never dereferences c. */
int mk_comm_live_check(const void *c);
/* 0 and c is no longer live (the caller tears it down), or -EBADF. Never dereferences c. */
int mk_comm_live_take(const void *c);
/* Keep a torn-down comm's header for the life of the process instead of freeing it. */
void mk_comm_quarantine(void *c);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_COMM_LIVE_H */
