/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to transport/core/rdv_*.c: wire formats of the rendezvous protocol and the comm and
 * request objects. Read in this order: rdv_setup.c makes comms, rdv_send.c and rdv_recv.c move
 * data, both over the connection state of rdv_conn.h; rdv_req.c hands a request to its side.
 *
 * Wire formats (both sides run the same build, but every field has a fixed width and offset):
 *   - CTS entry (64 B), one per sub-receive, written by the receiver into the sender's ring at
 *     group (seq - 1) % MK_RDV_CTS_GROUPS, slot idx. seq (full 32 bits, starts at 1) is the
 *     last field and the valid flag; the sender compares with == so wrap-around is harmless.
 *   - Immediate (32 b) on every data segment: seq low 10 bits | sub-receive index (3) |
 *     segment count - 1 (4) | truncation flag (1).
 *   - Connection blobs (rdv_conn.h): what each side must know to write into the other.
 */
#ifndef MK_RDV_INTERNAL_H
#define MK_RDV_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "mk/clock.h"
#include "mk/rdv.h"
#include "rdv_conn.h"

#define MK_RDV_MAGIC	   0x6d6b7276u /* live comm */
#define MK_RDV_DEAD	   0x64656164u /* closed comm, object on a free list */
#define MK_RDV_REQ_MAGIC   0x6d6b7271u
#define MK_RDV_CTS_GROUPS  (2 * MK_RDV_MAX_REQUESTS)
#define MK_RDV_SEND_REQS   (MK_RDV_MAX_REQUESTS * MK_RDV_MAX_RECVS)
#define MK_RDV_MAX_SEGS	   16
#define MK_RDV_CHUNK_ALIGN 128 /* LL/LL128 lines never straddle two segments */

struct mk_rdv_cts {
	uint64_t addr;	    /* receive buffer VA */
	uint64_t size;	    /* its capacity */
	uint64_t rkey_base; /* registration start VA (struct mk_rkey) */
	uint64_t rkey_key;
	uint64_t rkey_key2; /* the keys of NICs 2 and 3 of a fused device */
	int32_t tag;
	uint16_t nsub; /* sub-receives in this group */
	uint16_t idx;  /* this entry's index in the group */
	uint32_t flags;
	uint32_t pad[2];
	uint32_t seq; /* written last; valid when equal to the group's sequence */
};
_Static_assert(sizeof(struct mk_rdv_cts) == 64, "CTS entry is 64 bytes");

#define MK_RDV_IMM_SEQ_BITS 10
#define MK_RDV_IMM_SEQ_MASK ((1u << MK_RDV_IMM_SEQ_BITS) - 1)

static inline uint32_t mk_rdv_imm_pack(uint32_t seq, unsigned idx, unsigned nseg, bool trunc)
{
	return (seq & MK_RDV_IMM_SEQ_MASK) | ((idx & 7u) << 10) | (((nseg - 1) & 15u) << 13) |
	       ((trunc ? 1u : 0u) << 17);
}

static inline uint32_t mk_rdv_imm_seq(uint32_t imm)
{
	return imm & MK_RDV_IMM_SEQ_MASK;
}

static inline unsigned mk_rdv_imm_idx(uint32_t imm)
{
	return (imm >> 10) & 7u;
}

static inline unsigned mk_rdv_imm_nseg(uint32_t imm)
{
	return ((imm >> 13) & 15u) + 1;
}

static inline bool mk_rdv_imm_trunc(uint32_t imm)
{
	return (imm >> 17) & 1u;
}

/* Handle trailer after the backend's bytes: rejects handles of another backend or program. */
struct mk_rdv_handle_tail {
	uint32_t tag;	  /* MK_RDV_HANDLE_TAG */
	uint32_t backend; /* hash of the backend name */
};

#define MK_RDV_TAIL_OFF (MK_RDV_HANDLE_SIZE - sizeof(struct mk_rdv_handle_tail))
_Static_assert(MK_TP_HANDLE_MAX <= MK_RDV_TAIL_OFF, "backend handle and trailer fit in 128 B");

enum mk_rdv_req_kind {
	MK_RDV_REQ_SEND = 1,
	MK_RDV_REQ_RECV = 2,
	MK_RDV_REQ_FLUSH = 3,
};

enum mk_rdv_req_state {
	MK_RDV_REQ_FREE = 0,
	MK_RDV_REQ_POSTED, /* in flight, caller polls it */
	MK_RDV_REQ_LINGER, /* reported done early (optional completion); data still due */
};

struct mk_rdv_req {
	uint32_t magic;
	enum mk_rdv_req_kind kind;
	enum mk_rdv_req_state state;
	int status; /* first error, 0 if none */
	struct mk_rdv_comm *comm;
	struct mk_rdv_req *next_free;
	/* send */
	const char *src;
	struct mk_mr *mr;
	size_t size;
	uint64_t dst;
	struct mk_rkey rkey;
	uint32_t seq;
	unsigned idx;
	unsigned nseg, posted, completed;
	size_t chunk;
	bool trunc; /* send larger than the receive: tell the peer, fail both */
	struct mk_rdv_req *next_pending; /* segments still to post, in order */
	/* recv */
	int n;
	bool optional;
	bool cts_posted, cts_done;
	size_t got[MK_RDV_MAX_RECVS];
	uint8_t segs_seen[MK_RDV_MAX_RECVS];
	uint8_t segs_total[MK_RDV_MAX_RECVS];
	/* flush */
	bool flushed;
};

struct mk_rdv_send {
	struct mk_rdv_comm head;
	struct mk_rdv_conn_state cs;
	struct mk_rdv_cts *ring; /* [MK_RDV_CTS_GROUPS][MK_RDV_MAX_RECVS] inside region */
	uint32_t next_group;	 /* oldest group not fully consumed */
	/*
	 * Per ring group: consumed sub-slots (bitmask), and the group's sequence and size cached
	 * when first seen, because the receiver may overwrite a fully consumed group's entries
	 * with a later group before an older group is retired.
	 */
	uint8_t used[MK_RDV_CTS_GROUPS];
	uint8_t gn[MK_RDV_CTS_GROUPS];
	uint32_t gseq[MK_RDV_CTS_GROUPS];
	struct mk_rdv_req *pending_head, *pending_tail;
	struct mk_rdv_req *free_reqs;
	struct mk_rdv_req reqs[MK_RDV_SEND_REQS];
};

struct mk_rdv_recv {
	struct mk_rdv_comm head;
	struct mk_rdv_conn_state cs;
	struct mk_rdv_cts *staging; /* CTS entries before they are written to the sender */
	uint64_t peer_ring;	    /* the sender's CTS ring VA */
	uint32_t next_seq;	    /* sequence of the next receive group */
	int outstanding;	    /* posted, not yet reported done */
	bool early_ok;		    /* writes land unpolled: optional receives may finish early */
	struct mk_rdv_req reqs[MK_RDV_CTS_GROUPS]; /* indexed by seq % MK_RDV_CTS_GROUPS */
	struct mk_rdv_req flush_reqs[MK_RDV_MAX_REQUESTS];
};

struct mk_rdv_listen {
	struct mk_rdv_comm head;
	struct mk_listener *l;
	struct mk_rdv_recv *recv; /* prepared at listen so accept can send its blob */
};

/* rdv_send.c / rdv_recv.c: each side's progress and test (rdv_req.c dispatches to them) */
int mk_rdv_send_progress(struct mk_rdv_send *s);
int mk_rdv_recv_progress(struct mk_rdv_recv *r);
int mk_rdv_send_test(struct mk_rdv_req *req, int *done, size_t *sizes);
int mk_rdv_recv_test(struct mk_rdv_req *req, int *done, size_t *sizes);

/* rdv_setup.c, tests only: start sequences at a chosen value to exercise wrap-around. */
void mk_rdv_set_initial_seq(uint32_t seq);
uint32_t mk_rdv_initial_seq(void);

#endif /* MK_RDV_INTERNAL_H */
