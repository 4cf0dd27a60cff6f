/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File descriptors between the processes of one node: each rank listens on an abstract Unix
 * socket (no filesystem entry) named from a per-comm nonce, its pid and its rank, and every node
 * peer connects and sends one fd (SCM_RIGHTS) with a 64-bit value. Plain POSIX: unit-tested on the
 * CPU with memfds. Order that cannot deadlock: every rank listens, the ranks meet (an all-gather
 * that also reports failures), then each sends to every peer and accepts from every peer.
 */
#ifndef MK_FUSED_RUNTIME_FD_PASS_H
#define MK_FUSED_RUNTIME_FD_PASS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One rank of one exchange: its identity and its listening socket. */
struct mk_fdpass {
	int lfd; /* listening socket, -1 when not listening */
	uint64_t nonce;
	int32_t pid;
	int32_t rank;
};

/* A node peer: where its listener is and what its message must say. */
struct mk_fdpass_peer {
	int32_t rank;
	int32_t pid;
};

/* Binds and listens (backlog >= the peers that will connect). -EADDRINUSE: the name is taken. */
int mk_fdpass_listen(struct mk_fdpass *fp, uint64_t nonce, int32_t pid, int32_t rank, int backlog);

/* Sends fd and value to peer's listener (fp: my identity; fp->lfd is not used). */
int mk_fdpass_send(const struct mk_fdpass *fp, const struct mk_fdpass_peer *peer, int fd,
		   uint64_t value, int timeout_ms);

/*
 * Accepts one message from each of peers[n], in any order: fds[i] and values[i] are what
 * peers[i] sent (fds[i] the caller's to close). On error every received fd is closed and fds[]
 * are -1: -ETIMEDOUT when a peer did not send within timeout_ms, -EPROTO when a message is not
 * one of peers' (wrong nonce, rank, pid or user, a rank twice, no fd).
 */
int mk_fdpass_recv(struct mk_fdpass *fp, const struct mk_fdpass_peer *peers, int n, int *fds,
		   uint64_t *values, int timeout_ms);

/* Sends my fd to every peer, then receives every peer's: one deadline for the whole exchange. */
int mk_fdpass_exchange(struct mk_fdpass *fp, const struct mk_fdpass_peer *peers, int n, int fd,
		       uint64_t value, int *fds, uint64_t *values, int timeout_ms);

void mk_fdpass_close(struct mk_fdpass *fp);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_FD_PASS_H */
