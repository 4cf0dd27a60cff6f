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
 *     segment count - 1 (4) | truncation flag (1); bit 31 clear. An eager message's immediate
 *     has bit 31 set and its eager sequence's low 10 bits (rdv_eager.h).
 *   - Connection blobs (rdv_conn.h): what each side must know to write into the other.
 */
#ifndef MK_RDV_INTERNAL_H
#define MK_RDV_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "mk/clock.h"
#include "mk/rdv.h"
#include "rdv_conn.h"
#include "rdv_eager.h"

#define MK_RDV_MAGIC		 0x6d6b7276u /* live comm */
#define MK_RDV_DEAD		 0x64656164u /* closed comm, object on a free list */
#define MK_RDV_REQ_MAGIC	 0x6d6b7271u
#define MK_RDV_CTS_GROUPS	 (2 * MK_RDV_MAX_REQUESTS)
#define MK_RDV_SEND_REQS	 (MK_RDV_MAX_REQUESTS * MK_RDV_MAX_RECVS)
#define MK_RDV_MAX_SEGS		 16
#define MK_RDV_CHUNK_ALIGN	 128 /* LL/LL128 lines never straddle two segments */
/*
 * Groups one write of held-back CTS carries where the device does not say (props.cts_batch).
 * Each group's entries go whole (8 x 64 B), so a batch of 8 is a 3.6 KiB write: cheap where a
 * write costs its bytes (shm copies them, a 16 KiB batch slowed its small-message latency by
 * 1.09-1.17x); the socket providers, where a write costs system calls at both ends, ask for more.
 */
#define MK_RDV_CTS_BATCH_DEFAULT 8

/* The bit mask of all n sub-receives of a group or request (used, etaken: 1 bit each). */
static inline uint8_t mk_rdv_subs_all(unsigned n)
{
	return (uint8_t)((1u << n) - 1);
}

struct mk_rdv_cts {
	uint64_t addr;	    /* receive buffer VA */
	uint64_t size;	    /* its capacity */
	uint64_t rkey_base; /* registration start VA (struct mk_rkey) */
	uint64_t rkey_key;
	uint64_t rkey_key2; /* the keys of NICs 2 and 3 of a fused device */
	int32_t tag;
	uint16_t nsub;	  /* sub-receives in this group */
	uint16_t idx;	  /* this entry's index in the group */
	uint32_t flags;	  /* MK_RDV_CTS_* */
	uint32_t credits; /* eager messages the receiver had taken out of its slots */
	uint32_t pad;
	uint32_t seq; /* written last; valid when equal to the group's sequence */
};
_Static_assert(sizeof(struct mk_rdv_cts) == 64, "CTS entry is 64 bytes");

/*
 * The receiver reads every lane for this receive (mk_conn.lanes_wanted) until its data is in:
 * the sender may stripe it. The receiver decides, so a sender with another MKERNEL_STRIPE_MIN
 * never writes on a lane nobody reads.
 */
#define MK_RDV_CTS_WIDE 1u

#define MK_RDV_IMM_SEQ_BITS 10
#define MK_RDV_IMM_SEQ_MASK ((1u << MK_RDV_IMM_SEQ_BITS) - 1)

static inline uint32_t mk_rdv_imm_pack(uint32_t seq, unsigned idx, unsigned nseg, bool trunc)
{
	return (seq & MK_RDV_IMM_SEQ_MASK) | ((idx & 7u) << 10) | (((nseg - 1) & 15u) << 13) |
	       ((trunc ? 1u : 0u) << 17);
}

/* The core's immediates stay out of the bits the transport leaves to backends. */
#define MK_RDV_IMM_BACKEND_MASK MK_TP_IMM_BACKEND_MASK
_Static_assert(((MK_RDV_IMM_SEQ_MASK | (7u << 10) | (15u << 13) | (1u << 17)) &
		MK_RDV_IMM_BACKEND_MASK) == 0,
	       "a data segment's immediate reaches into the backend's bits");
_Static_assert(((MK_RDV_IMM_EAGER | MK_RDV_EAGER_SEQ_MASK) & MK_RDV_IMM_BACKEND_MASK) == 0,
	       "an eager immediate reaches into the backend's bits");

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
	uint32_t polls_seen; /* the connection's CQ-read epoch at its post or last test */
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
	bool eager; /* went through the bounce slots: done once that write completed */
	struct mk_rdv_req *next_pending; /* segments still to post, in order */
	/* recv */
	int n;
	bool optional;
	bool cts_posted, cts_done;
	/* its CTS may wait: filled by eager messages at its post, or expecting one */
	bool cts_lazy;
	uint64_t cts_wait_until; /* expecting: its CTS is due from then on if still unfilled */
	uint32_t cts_first;	 /* the CTS write this request completes began at this group */
	int cts_status;		 /* the CTS write failed: fatal only while data is still due */
	size_t got[MK_RDV_MAX_RECVS];
	uint8_t segs_seen[MK_RDV_MAX_RECVS];
	uint8_t segs_total[MK_RDV_MAX_RECVS];
	uint8_t etaken; /* sub-receives an eager message was matched to (bit i) */
	bool wide;	/* counted in the connection's lanes_wanted until its data is in */
	/* flush */
	bool flushed;
};

struct mk_rdv_send {
	struct mk_rdv_comm head;
	struct mk_rdv_conn_state cs;
	struct mk_rdv_cts *ring; /* [MK_RDV_CTS_GROUPS][MK_RDV_MAX_RECVS] inside region */
	uint32_t next_group;	 /* oldest group not fully consumed */
	/*
	 * First group not processed yet. Groups are processed in order once all their entries
	 * have landed: shape cached, credits taken, sub-receives offered to unmatched eager
	 * messages. Sends match only in processed groups; eager messages carry it as frontier.
	 */
	uint32_t seen;
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
	struct mk_rdv_eager_tx eager;
	struct mk_rdv_req reqs[MK_RDV_SEND_REQS];
};

struct mk_rdv_recv {
	struct mk_rdv_comm head;
	struct mk_rdv_conn_state cs;
	struct mk_rdv_cts *staging; /* CTS entries before they are written to the sender */
	uint64_t peer_ring;	    /* the sender's CTS ring VA */
	uint32_t next_seq;	    /* sequence of the next receive group */
	uint32_t cts_next;	    /* first posted group whose CTS the transport has not taken */
	uint32_t cts_batch;	    /* groups one write of held-back CTS carries at most (setup) */
	bool post_reads;	    /* a small receive reads the CQ at its post (props) */
	/*
	 * No held group can want its CTS before this time (a lower bound: recv_cts_due scans
	 * the held groups only from then on; 0: scan at the next look).
	 */
	uint64_t cts_scan_ns;
	int outstanding; /* posted, not yet reported done */
	bool early_ok;	 /* writes land unpolled: optional receives may finish early */
	/*
	 * The sender has processed the CTS of every group before this (from eager headers and
	 * data immediates). A group can complete by eager messages alone, before the sender read
	 * its CTS: no group is posted 64 (the ring's depth) or more ahead of it.
	 */
	uint32_t frontier;
	struct mk_rdv_eager_rx eager;
	struct mk_rdv_req reqs[MK_RDV_CTS_GROUPS]; /* indexed by seq % MK_RDV_CTS_GROUPS */
	struct mk_rdv_req flush_reqs[MK_RDV_MAX_REQUESTS];
};

/*
 * The CTS staging entries of group seq: placed as in the sender's ring, (seq - 1) mod its depth,
 * so a run of groups is contiguous in both or in neither and a batch breaks at one wrap, not at
 * two a group apart (which cost a one-group write every ring).
 */
static inline struct mk_rdv_cts *mk_rdv_staging(const struct mk_rdv_recv *r, uint32_t seq)
{
	return &r->staging[((seq - 1) % MK_RDV_CTS_GROUPS) * MK_RDV_MAX_RECVS];
}

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

/* rdv_eager_send.c: the sender's half of the eager path */
void mk_rdv_eager_tx_init(struct mk_rdv_send *s, char *staging, struct mk_rdv_eager_words *words,
			  uint32_t own_bytes);
void mk_rdv_eager_tx_connect(struct mk_rdv_send *s, const struct mk_rdv_blob *peer);
/*
 * Send size bytes of data eagerly for req when there is a credit and a free staging slot: 0
 * (posted; req completes with the write), -EAGAIN (not now: no credit, slot busy, queue full),
 * -EOPNOTSUPP (never for this message: too large, GPU memory, no eager on this connection), or
 * a transport error.
 */
int mk_rdv_eager_send(struct mk_rdv_send *s, const void *data, size_t size, int tag,
		      const struct mk_mr *mr, struct mk_rdv_req *req);
/*
 * A send cannot go: if the receiver offers eager and has not heard of our frontier, write it
 * into its frontier word (it holds back receives 64 groups past the last frontier it knows).
 */
void mk_rdv_eager_tell_frontier(struct mk_rdv_send *s);
/* Group g of n sub-receives was just processed: take its credits, match waiting messages. */
void mk_rdv_eager_group_seen(struct mk_rdv_send *s, uint32_t g, unsigned n);
/* -EMSGSIZE once the receiver said an eager message did not fit its receive, else 0. */
int mk_rdv_eager_tx_error(const struct mk_rdv_send *s);
/* An event of the send connection that belongs to the eager path (true: consumed). */
bool mk_rdv_eager_tx_event(struct mk_rdv_send *s, const struct mk_event *ev);

/* rdv_eager_recv.c: the receiver's half */
void mk_rdv_eager_rx_init(struct mk_rdv_recv *r, char *slots, struct mk_rdv_eager_words *words,
			  uint32_t bytes);
/* The frontier the sender last wrote into our frontier word, taken into r->frontier. */
void mk_rdv_eager_read_frontier(struct mk_rdv_recv *r);
void mk_rdv_eager_rx_connect(struct mk_rdv_recv *r, const struct mk_rdv_blob *peer);
/*
 * An immediate with MK_RDV_IMM_EAGER: its slot has landed. False (dropped with a WARN): outside
 * the sender's credits, so not our peer's.
 */
bool mk_rdv_eager_arrived(struct mk_rdv_recv *r, uint32_t imm);
/* Take landed messages out in order while their receive is posted; hand credits back. */
void mk_rdv_eager_deliver(struct mk_rdv_recv *r);
/* A completion of ours that belongs to the eager path (a credit write; true: consumed). */
bool mk_rdv_eager_rx_event(struct mk_rdv_recv *r, const struct mk_event *ev);

/* rdv_setup.c, tests only: start sequences at a chosen value to exercise wrap-around. */
void mk_rdv_set_initial_seq(uint32_t seq);
uint32_t mk_rdv_initial_seq(void);

#endif /* MK_RDV_INTERNAL_H */
