/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL-style two-sided messaging over any backend (transport/core/rdv_*.c), implemented once
 * with a receiver-driven rendezvous:
 *
 *   irecv  -> the receiver writes one clear-to-send (CTS) entry per sub-receive (buffer VA, size,
 *             remote key, tag, sequence as valid flag) into the sender's CTS ring;
 *   isend  -> the sender takes the oldest CTS group, picks the sub-receive whose tag matches,
 *             writes the data (striped over lanes above MKERNEL_STRIPE_MIN, 128-B aligned), every
 *             segment carrying a 32-bit immediate (sequence, sub-receive index, segment count);
 *   test   -> polls the backend; the receiver completes when every sub-receive has all its
 *             segments; sizes come from the immediates' write lengths.
 *
 * A send of at most MKERNEL_EAGER_BYTES whose CTS is not there yet goes eagerly instead, into a
 * bounce slot the receiver registered, and the receiver matches it by the same rule and copies
 * it out (docs/transport.md, "Eager path"); out of bounce-slot credits it waits for its CTS.
 *
 * Semantics follow NCCL's net API (docs/transport.md, "What the core adds"): sends and receives
 * match in posting order; tags only pick the buffer inside a multi-receive; 32 requests in
 * flight per comm (send side 32 x maxRecvs); a receive larger than the send is normal, a send
 * larger than the receive fails the receive with -EMSGSIZE, and the send too (at once by
 * rendezvous, at the send comm's next call when it went eagerly); connect/accept never block;
 * close never waits on the peer; a peer that stops answering is reported within MKERNEL_TIMEOUT
 * (-ETIMEDOUT, or the transport error), and what it sent before it went is still received.
 *
 * Every comm and request pointer handed out stays readable for the life of the process (objects
 * are recycled, never unmapped) and carries a magic, so a stale or foreign pointer can be told
 * apart instead of crashing. The functions below trust their arguments: the caller checks what
 * it was handed once, at its edge, with mk_rdv_check() (comms), mk_rdv_req_check() (requests)
 * and mk_mr_valid() (registrations), and passes only what passed (the net plugin does).
 */
#ifndef MK_RDV_H
#define MK_RDV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mk/mr_cache.h"
#include "mk/transport.h"

#define MK_RDV_HANDLE_SIZE  128 /* NCCL_NET_HANDLE_MAXSIZE */
#define MK_RDV_MAX_REQUESTS 32	/* NCCL_NET_MAX_REQUESTS */
#define MK_RDV_MAX_RECVS    8	/* largest multi-receive */

enum mk_rdv_kind {
	MK_RDV_LISTEN = 1,
	MK_RDV_SEND = 2,
	MK_RDV_RECV = 3,
};

/* Common head of listen, send and recv comms: what the plugin may read. */
struct mk_rdv_comm {
	uint32_t magic; /* MK_RDV_MAGIC while alive */
	enum mk_rdv_kind kind;
	const struct mk_transport_ops *ops;
	int dev;
	struct mk_rdv_comm *pool_next; /* private: link in the free list of recycled objects */
};

struct mk_rdv_req;

/* Validate a caller-supplied comm pointer: 0, or -EBADF (NULL, stale, wrong kind). */
int mk_rdv_check(const void *comm, enum mk_rdv_kind kind);
/* Validate a caller-supplied request: 0, or -EBADF (NULL, foreign, finished, comm closed). */
int mk_rdv_req_check(const void *req);

int mk_rdv_listen(const struct mk_transport_ops *ops, int dev, void *handle,
		  struct mk_rdv_comm **out);
/* Non-blocking: 0 with *out NULL while pending; call again with the same handle. */
int mk_rdv_connect(const struct mk_transport_ops *ops, int dev, const void *handle,
		   struct mk_rdv_comm **out);
int mk_rdv_accept(struct mk_rdv_comm *listen, struct mk_rdv_comm **out);
/* Any order, any time; pending requests are dropped; never waits on the peer. */
int mk_rdv_close(struct mk_rdv_comm *comm);

/* Register on the comm's device through the MR cache (MK_PTR_HOST or _CUDA; fd -1 unless
 * DMA-BUF). */
int mk_rdv_reg(struct mk_rdv_comm *comm, void *data, size_t size, int type, int dmabuf_fd,
	       uint64_t dmabuf_offset, struct mk_mr **out);
int mk_rdv_dereg(struct mk_rdv_comm *comm, struct mk_mr *mr);

/* *req NULL (return 0) means "cannot post now, retry". */
int mk_rdv_isend(struct mk_rdv_comm *send, void *data, size_t size, int tag, struct mk_mr *mr,
		 struct mk_rdv_req **req);
/*
 * n in 1..MK_RDV_MAX_RECVS. optional: NCCL pre-stored NCCL_NET_OPTIONAL_RECV_COMPLETION; the
 * request may then complete once the CTS is out (the data still lands before the sender's
 * request completes, and NCCL polls flags inside the data).
 */
int mk_rdv_irecv(struct mk_rdv_comm *recv, int n, void **data, const size_t *sizes, const int *tags,
		 struct mk_mr **mrs, bool optional, struct mk_rdv_req **req);
/* Make received GPU data visible; completes at once where the backend needs no flush. */
int mk_rdv_iflush(struct mk_rdv_comm *recv, int n, void **data, const int *sizes,
		  struct mk_mr **mrs, struct mk_rdv_req **req);
/*
 * *done = 1 when finished; then sizes[i] (if sizes != NULL) holds the bytes received per
 * sub-receive (one entry for a send: the bytes sent) and the request is recycled. Errors are
 * final for the comm.
 */
int mk_rdv_test(struct mk_rdv_req *req, int *done, size_t *sizes);

/* Largest multi-receive this build offers (MKERNEL_MAX_RECVS clamped to 1..8). */
int mk_rdv_max_recvs(void);

#endif /* MK_RDV_H */
