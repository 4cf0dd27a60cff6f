/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to transport/core/rdv_*.c: the eager path for small messages (docs/transport.md,
 * "Eager path"). A message up to MKERNEL_EAGER_BYTES goes without waiting for a clear-to-send:
 * the sender copies it behind a 32-byte header into staging slot e % MK_RDV_EAGER_SLOTS (e counts
 * eager messages) and writes the slot into the receiver's bounce slot of the same index, with
 * an immediate that has MK_RDV_IMM_EAGER set and e's low 10 bits. The receiver matches eager
 * messages to its receives in order, by NCCL's rule, from the group the header names as the
 * sender's frontier on; it copies them out and hands the slots back as credits (in its CTS
 * entries, or an 8-byte write into the sender's credit word).
 *
 * rdv_eager_send.c keeps the sender's half, rdv_eager_recv.c the receiver's; the send and
 * receive sides call them, never the other way round.
 */
#ifndef MK_RDV_EAGER_H
#define MK_RDV_EAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mk/compiler.h"
#include "mk/mr_cache.h"
#include "mk/transport.h"

struct mk_rdv_req;

#define MK_RDV_EAGER_SLOTS    64 /* bounce slots per connection: 2 x NCCL's 32 requests */
#define MK_RDV_EAGER_MAX      65536u
#define MK_RDV_EAGER_HDR      32
#define MK_RDV_IMM_EAGER      0x80000000u /* immediate of an eager message */
#define MK_RDV_EAGER_SEQ_MASK 0x3ffu	  /* ... and its sequence's low 10 bits */
#define MK_RDV_CREDIT_BYTES   64	  /* struct mk_rdv_eager_words, in each side's region */
#define MK_RDV_CREDIT_ERR     0x1u	  /* credit word flags: a message did not fit */

_Static_assert(MK_RDV_EAGER_SLOTS <= MK_RDV_EAGER_SEQ_MASK + 1, "slots within the imm's window");

/* Ahead of every eager payload, in the same write. */
struct mk_rdv_eager_hdr {
	uint32_t eseq;	   /* the message's eager sequence */
	uint32_t frontier; /* first CTS group the sender had not processed when it sent */
	int32_t tag;
	uint32_t len;
	uint32_t pad[4];
};
_Static_assert(sizeof(struct mk_rdv_eager_hdr) == MK_RDV_EAGER_HDR, "eager header");

/* The sender's credit word: written by the receiver, read by the sender. */
struct mk_rdv_credit {
	uint32_t freed; /* eager messages the receiver has taken out of its slots */
	uint32_t flags; /* MK_RDV_CREDIT_* */
};

/*
 * The words the two sides write into each other, one area in each side's region: on the sender
 * the credit word (the receiver writes it) and the source of its frontier writes; on the
 * receiver the source of its credit writes and the frontier word (the sender writes it).
 */
struct mk_rdv_eager_words {
	struct mk_rdv_credit credit;
	uint32_t frontier; /* the sender has processed the CTS of every group before this */
	uint32_t pad[13];
};
_Static_assert(sizeof(struct mk_rdv_eager_words) == MK_RDV_CREDIT_BYTES, "eager words");

#define MK_RDV_EAGER_DEFAULT 8192u /* where neither MKERNEL_EAGER_BYTES nor the device says */

/*
 * Payload bytes per slot this side offers or uses: MKERNEL_EAGER_BYTES clamped, or where it is
 * -1 (the default) the device's preference (props->eager_bytes), else MK_RDV_EAGER_DEFAULT;
 * 0 = off.
 */
uint32_t mk_rdv_eager_bytes(const struct mk_dev_props *props);

/* Bytes from one slot to the next for a payload of bytes (0 when off). */
static inline size_t mk_rdv_eager_stride(uint32_t bytes)
{
	return bytes ? MK_ALIGN_UP((size_t)MK_RDV_EAGER_HDR + bytes, (size_t)64) : 0;
}

/* Sender's half: staging slots and credits. */
struct mk_rdv_eager_tx {
	char *staging;			  /* our slots, inside the comm's registered region */
	size_t stride;			  /* of our slots */
	uint32_t own_bytes;		  /* MKERNEL_EAGER_BYTES here */
	struct mk_rdv_eager_words *words; /* inside the region: credit in, frontier out */
	uint64_t peer_slots;		  /* receiver's bounce slots (VA) */
	size_t peer_stride;
	uint32_t nslots;	/* slots the receiver offers: 0 (no eager) or MK_RDV_EAGER_SLOTS */
	uint32_t max_bytes;	/* largest eager payload: ours and the receiver's, the smaller */
	uint32_t next;		/* eager sequence of the next message */
	uint32_t freed;		/* messages before this one are out of the receiver's slots */
	uint64_t peer_frontier; /* receiver's frontier word (VA) */
	uint32_t told;		/* frontier the receiver has heard of (headers, frontier writes) */
	bool frontier_busy;	/* a frontier write is in flight */
	bool busy[MK_RDV_EAGER_SLOTS];		      /* staging slot's write not yet complete */
	struct mk_rdv_req *owner[MK_RDV_EAGER_SLOTS]; /* the send request it completes */
	uint8_t done_ctx[MK_RDV_EAGER_SLOTS]; /* &done_ctx[i]: completion context of slot i */
	/*
	 * Eager messages whose receive is not known here yet (their group's CTS not processed),
	 * oldest first: only their tags matter, to match them as the receiver will.
	 */
	int32_t pend_tag[MK_RDV_EAGER_SLOTS];
	int npend;
	uint64_t sent; /* messages sent eagerly, for tests and logs */
};

/* Receiver's half: bounce slots, the order they are taken in, and the credits handed back. */
struct mk_rdv_eager_rx {
	char *slots;   /* our bounce slots, inside the comm's registered region; NULL: none */
	size_t stride; /* of our slots */
	uint32_t bytes;
	struct mk_rdv_eager_words *words; /* inside the region: credit out, frontier in */
	uint64_t peer_credit;		  /* sender's credit word (VA) */
	uint32_t next;			  /* eager sequence of the next message to take */
	/*
	 * No group before this can take an eager message any more (done, or every sub-receive
	 * taken), so matching starts here when the sender's frontier lags behind it: with CTS
	 * batching the frontier trails by several groups and each message walked all of them.
	 */
	uint32_t open_from;
	uint32_t credited; /* freed count the sender has been told */
	bool credit_busy;  /* a credit write is in flight */
	uint32_t flags;	   /* MK_RDV_CREDIT_* to tell the sender */
	/* MKERNEL_EAGER_CTS_WAIT in ns: how long a receive expecting an eager message holds its
	 * CTS back (rdv_recv.c); 0 = never */
	uint64_t cts_wait_ns;
	bool arrived[MK_RDV_EAGER_SLOTS];
	uint64_t copied; /* messages taken out, for tests and logs */
};

#endif /* MK_RDV_EAGER_H */
