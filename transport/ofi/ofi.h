/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to transport/ofi/: the libfabric backend's objects and the function table that stands
 * between it and libfabric.so.1. Only the seven exported entry points below are resolved with
 * dlvsym; everything else (fi_domain, fi_endpoint, fi_writemsg, fi_cq_read, fi_mr_reg, ...) is a
 * static-inline dispatcher of <rdma/fi_*.h> that jumps through the object's own ops, so the
 * plugin never links libfabric and unit tests replace the table plus fake fid objects.
 */
#ifndef MK_TRANSPORT_OFI_OFI_H
#define MK_TRANSPORT_OFI_OFI_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* before <rdma/fabric.h>, which defines container_of only when it is not yet defined */
#include "mk/clock.h"
#include "mk/compiler.h"
#include "mk/hash.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "mk/param.h"
#include "mk/transport.h"

/* DMA-BUF registration arrived with libfabric 1.20; CUDA HMEM is only offered with it here. */
#if defined(FI_MR_DMABUF)
#define MK_OFI_HAVE_DMABUF 1
#else
#define MK_OFI_HAVE_DMABUF 0
#endif

#define MK_OFI_ADDR_MAX	    64 /* largest endpoint address kept (tcp 16, shm ~20, efa 32) */
#define MK_OFI_HANDLE_MAGIC 0x464f4b4du /* "MKOF" */
#define MK_OFI_CTRL_MAGIC   0x4c54434du /* "MCTL" */
#define MK_OFI_WIRE_VERSION 2
#define MK_OFI_CQ_BATCH_MAX 64 /* completions read per fi_cq_read at most */
#define MK_OFI_STASH	    64 /* events held back: setup, and injected writes' completions */
/*
 * CQ data of a "quiet" write: one without an immediate that still asks for remote CQ data so
 * that shm takes its command queue instead of a system call (ofi_init.c, quiet_max). The length
 * field is all ones, which no write with an immediate carries (those stay below UINT32_MAX).
 */
#define MK_OFI_QUIET_DATA   UINT64_MAX
/* Bytes the second part of a split large write carries with its immediate (ofi_data.c). */
#define MK_OFI_SPLIT_TAIL   64
/*
 * Shared endpoints (MKERNEL_OFI_SHARED_EP, ofi_sep.c): a remote write's immediate carries the
 * target connection's number in bits 18..30, which the rendezvous core leaves to backends
 * (MK_RDV_IMM_BACKEND_MASK); the target routes by it and clears it. Numbers 1..8191, 0 unused.
 */
#define MK_OFI_NUM_SHIFT    18
#define MK_OFI_NUM_BITS	    13
#define MK_OFI_NUMS	    (1u << MK_OFI_NUM_BITS)
#define MK_OFI_IMM_NUM_MASK ((MK_OFI_NUMS - 1u) << MK_OFI_NUM_SHIFT)
_Static_assert(MK_OFI_IMM_NUM_MASK == MK_TP_IMM_BACKEND_MASK,
	       "the connection number fills the bits the transport leaves to backends");
#define MK_OFI_SEP_RX 4 /* setup receives a shared endpoint keeps posted */

/* ---- library table (ofi_lib.c) ---- */

struct mk_ofi_lib {
	int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
		       const struct fi_info *hints, struct fi_info **info);
	void (*freeinfo)(struct fi_info *info);
	/* dupinfo(NULL) replaces the header's fi_allocinfo(), which calls the real symbol. */
	struct fi_info *(*dupinfo)(const struct fi_info *info);
	int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
	const char *(*strerror)(int errnum);
	uint32_t (*version)(void);
	char *(*tostr)(const void *data, enum fi_type datatype);
	const char *path; /* what was opened, for logs */
};

/* 0 and *out, -ENOENT (library absent), -ENOSYS (a required symbol missing). */
int mk_ofi_lib_open(const struct mk_ofi_lib **out);
void mk_ofi_lib_close(void);
/* Tests: make mk_ofi_lib_open() hand out lib instead of loading; NULL restores loading. */
void mk_ofi_lib_override(const struct mk_ofi_lib *lib);

/* ---- parameters (ofi_params.c) ---- */

MK_PARAM_DECLARE_STR(ofi_provider);	   /* MKERNEL_OFI_PROVIDER */
MK_PARAM_DECLARE_STR(ofi_lib);		   /* MKERNEL_OFI_LIB */
MK_PARAM_DECLARE_STR(ofi_iface);	   /* MKERNEL_OFI_IFACE */
MK_PARAM_DECLARE_INT(ofi_cq_read_count);   /* MKERNEL_OFI_CQ_READ_COUNT */
MK_PARAM_DECLARE_INT(ofi_tx_depth);	   /* MKERNEL_OFI_TX_DEPTH */
MK_PARAM_DECLARE_INT(ofi_speed_mbps);	   /* MKERNEL_OFI_SPEED_MBPS */
MK_PARAM_DECLARE_INT(ofi_progress_thread); /* MKERNEL_OFI_PROGRESS_THREAD */
MK_PARAM_DECLARE_INT(ofi_progress_cpus);   /* MKERNEL_OFI_PROGRESS_CPUS */
MK_PARAM_DECLARE_INT(ofi_lanes);	   /* MKERNEL_OFI_LANES */
MK_PARAM_DECLARE_INT(ofi_inject);	   /* MKERNEL_OFI_INJECT */
MK_PARAM_DECLARE_INT(ofi_split_writes);	   /* MKERNEL_OFI_SPLIT_WRITES */
MK_PARAM_DECLARE_INT(ofi_shared_ep);	   /* MKERNEL_OFI_SHARED_EP */

/* ---- devices (ofi_init.c) ---- */

struct mk_ofi_dev {
	struct fi_info *info; /* this domain's description, owned (freeinfo) */
	struct mk_dev_props props;
	uint64_t mr_mode;   /* domain_attr->mr_mode as returned */
	uint64_t key_limit; /* app-chosen keys must stay below this */
	bool len_in_data;   /* remote-write length travels in cq data bits 32..63 */
	size_t quiet_max;   /* writes without an immediate up to this size go quiet (0: none) */
	size_t split_min;   /* writes with an immediate from this size go in two (0: none) */
	int lanes;	    /* endpoints a connection it makes stripes over (MKERNEL_OFI_LANES) */
	bool progress;	    /* connections get progress threads (MKERNEL_OFI_PROGRESS_THREAD) */
	int sep_mode;	    /* MKERNEL_OFI_SHARED_EP as decided: 0 none, 1 one set, 2 pairs */
	size_t inject_max;  /* host writes up to this size go as injects (0: none) */
	/* lock guards refs, fabric and domain; data ops never take it. */
	pthread_mutex_t lock;
	int refs; /* endpoints + registrations using the domain */
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct mk_ofi_sep *seps; /* MKERNEL_OFI_SHARED_EP: open shared endpoints (ofi_sep.c) */
	uint64_t next_key;	 /* atomic: app-chosen MR keys, unique per domain */
	/*
	 * Released app keys, reused oldest first and only once next_key has run past key_limit
	 * (a stale remote key then reaches a new region only after every other key was used).
	 * Under lock.
	 */
	uint64_t *free_keys;
	size_t free_head, free_tail, free_cap;
};

struct mk_ofi_state {
	const struct mk_ofi_lib *lib; /* NULL when libfabric is absent */
	struct mk_ofi_dev *devs;
	int ndevs;
	uint32_t api_version; /* FI_VERSION asked of getinfo */
	uint32_t prov_hash;   /* names the provider in handles */
};

extern struct mk_ofi_state mk_ofi;

static inline struct mk_ofi_dev *mk_ofi_dev_at(int dev)
{
	if (dev < 0 || dev >= mk_ofi.ndevs)
		return NULL;
	return &mk_ofi.devs[dev];
}

/* Open the fabric and domain on first use; every get is paired with a put. */
int mk_ofi_dev_get(struct mk_ofi_dev *d);
void mk_ofi_dev_put(struct mk_ofi_dev *d);

/* libfabric's -FI_E* values match errno for the codes providers return; clamp the rest. */
static inline int mk_ofi_errno(ssize_t rc)
{
	if (rc >= 0)
		return 0;
	if (rc <= -FI_ERRNO_OFFSET)
		return -EIO;
	return (int)rc;
}

/* ---- connections (ofi_conn.c) ---- */

/* The listen handle, fixed layout in MK_TP_HANDLE_MAX bytes (checksum in the last 4). */
struct mk_ofi_handle {
	uint32_t prov_hash;
	uint64_t nonce;
	size_t addrlen;
	uint8_t addr[MK_OFI_ADDR_MAX];
};

int mk_ofi_handle_encode(const struct mk_ofi_handle *h, void *buf);
/* 0, or -EINVAL with a WARN saying which check failed. */
int mk_ofi_handle_decode(const void *buf, struct mk_ofi_handle *h);

/* Setup message, both directions (connect request and accept reply). */
enum mk_ofi_ctrl_kind {
	MK_OFI_CTRL_CONNECT = 1,
	MK_OFI_CTRL_REPLY = 2,
};

/*
 * Lane 0's endpoint carries the setup messages; the other lanes' addresses travel in them. The
 * connecting side says how many lanes it opened, the accepting side opens as many.
 */
struct mk_ofi_ctrl {
	uint32_t magic;
	uint8_t version;
	uint8_t kind;
	uint8_t addrlen; /* lane 0's address (connect request only: the reply's is in the handle) */
	uint8_t bloblen;
	uint64_t nonce;
	uint8_t addr[MK_OFI_ADDR_MAX];
	uint8_t blob[MK_TP_BLOB_MAX];
	uint8_t nlanes;
	uint8_t lane_addrlen[MK_TP_MAX_LANES]; /* [i] for lane i; 0 unused */
	uint8_t lane_addr[MK_TP_MAX_LANES][MK_OFI_ADDR_MAX];
	/*
	 * The sender's connection number on its shared endpoints, 0 without: the receiver then
	 * puts it in every immediate it writes to the sender (MK_OFI_IMM_NUM_MASK). It sits in
	 * what was the struct's tail padding (zeroed), so without sharing the message is the same.
	 */
	uint16_t num;
};

enum mk_ofi_op_kind {
	MK_OFI_OP_FREE = 0,
	MK_OFI_OP_WRITE,
	MK_OFI_OP_READ,
	MK_OFI_OP_LEAD, /* leading part of a split write (mk_ofi_write): no event of its own */
	MK_OFI_OP_CTRL, /* a setup message sent on a shared endpoint (the connection's ctrl_op) */
};

/* One posted write/read; the provider owns ctx until the completion is read. */
struct mk_ofi_op {
	struct fi_context2 ctx; /* FI_CONTEXT2 mode: provider scratch space */
	void *user;		/* caller's ctx, returned in the event */
	size_t len;
	uint8_t kind;  /* enum mk_ofi_op_kind */
	bool expired;  /* reported as timed out; free silently on completion */
	uint8_t parts; /* completions still due before the caller's event (a split write: 2) */
	uint8_t lane;  /* posted on it (counted in the connection's side_out when not 0) */
	int status;    /* first error among the parts */
	struct mk_ofi_op *whole; /* MK_OFI_OP_LEAD: the caller's op it belongs to, or NULL */
	struct mk_ofi_op *next_free;
	struct mk_ofi_conn *conn; /* owner: a shared CQ routes local completions by it */
};

/*
 * Completions a lane's progress thread has read, oldest first: the thread alone advances tail,
 * poll() alone head (free-running counts; an entry is e[count % MK_OFI_RING]).
 */
#define MK_OFI_RING 256
struct mk_ofi_ring_ent {
	struct fi_cq_data_entry ent; /* an error entry: op_context and flags only */
	int status;		     /* 0, or the error of an error entry */
};
struct mk_ofi_ring {
	unsigned head, tail;
	struct mk_ofi_ring_ent e[MK_OFI_RING];
};

/*
 * One endpoint of a connection with its own CQ and AV: lanes share nothing in the provider, so
 * polling one never waits on another's lock, and a message striped over them moves on as many
 * provider connections (sockets on tcp) at once.
 */
struct mk_ofi_conn;
struct mk_ofi_sep;

struct mk_ofi_lane {
	struct mk_ofi_conn *conn; /* the connection it belongs to */
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	fi_addr_t peer;
	uint8_t addr[MK_OFI_ADDR_MAX]; /* own endpoint name */
	size_t addrlen;
	pthread_t progress; /* MKERNEL_OFI_PROGRESS_THREAD: this lane's own */
	bool progress_on;
	/* what that thread read of the CQ, for poll() (ofi_progress.c); NULL: poll() reads */
	struct mk_ofi_ring *ring;
	/* when that thread last moved something or was told something will move (atomic) */
	uint64_t busy_ns;
	/* a quiet thread waits on nap_cond until kicked (mk_ofi_progress_kick) or timed out */
	int napping; /* atomic */
	pthread_mutex_t nap_lock;
	pthread_cond_t nap_cond;
};

enum mk_ofi_conn_state {
	MK_OFI_CONNECTING = 1, /* connect side: request not yet answered */
	MK_OFI_LISTENING,      /* accept side: waiting for a request */
	MK_OFI_READY,
};

struct mk_ofi_conn {
	struct mk_conn base; /* first: generic <-> ofi by container_of; base.nlanes = nlanes */
	struct mk_ofi_dev *dev;
	int nlanes;	/* lanes open (lane 0 first, the others once the peer's count is known) */
	int poll_first; /* lane whose CQ poll() reads first, rotating so none starves */
	int side_out;	/* ops posted on lanes other than 0 whose completion is not read */
	uint64_t swept_ns;  /* when poll() last read every lane (ofi_data.c) */
	bool peer_inserted; /* every lane knows the peer's endpoint */
	enum mk_ofi_conn_state state;
	int err; /* latched connection error, returned by write/poll */
	uint64_t nonce;
	uint64_t deadline_ns;	 /* connecting side: when connected() gives up */
	uint64_t stall_since_ns; /* ops in flight and no completion since then (0: none) */
	uint64_t last_post_ns;	 /* when a write or read was last handed to the provider */
	uint64_t timeout_ns;
	bool tx_due;		   /* ctrl_tx filled, not yet accepted by the provider */
	bool tx_posted;		   /* ctrl_tx handed to the provider, not yet completed */
	bool rx_posted;		   /* a receive for ctrl_rx is outstanding */
	bool rx_full;		   /* ctrl_rx holds a message not yet consumed */
	uint64_t tx_not_before_ns; /* resend pace after a failed setup send */
	bool len_in_data;
	size_t quiet_max;	       /* the device's: such writes carry MK_OFI_QUIET_DATA */
	size_t split_min;	       /* the device's: writes this large go in two parts */
	size_t inject_max;	       /* the device's: writes from host memory injected */
	bool virt_addr;		       /* FI_MR_VIRT_ADDR: remote addresses are VAs */
	bool blocked;		       /* the last post was refused with -FI_EAGAIN */
	uint64_t refused_idle_ns;      /* posts refused with nothing in flight since then (0: no) */
	uint64_t idle_refuse_limit_ns; /* MKERNEL_KEEPALIVE: such refusals mean a dead peer */
	/*
	 * shm only: the peer's process. A peer killed while it holds a lock in the shared region
	 * makes every later post and poll spin inside libfabric, so both check it is alive first.
	 */
	int peer_pid;
	int peer_pidfd; /* pidfd of peer_pid, -1 where the kernel has none */
	char peer_region[MK_OFI_ADDR_MAX + 16]; /* its region file in /dev/shm */
	uint64_t peer_checked_ns; /* last liveness check of peer_pid (CLOCK_MONOTONIC) */
	uint64_t last_cq_ns;	  /* last completion read: a quiet connection checks every post */
	/* a call was abandoned inside the provider (ofi_guard.c): never call it again */
	bool wedged;
	bool guarded; /* counted by the shm watchdog (mk_ofi_guard_watch) */
	int cq_batch; /* MKERNEL_OFI_CQ_READ_COUNT, clamped */
	/*
	 * MKERNEL_OFI_SHARED_EP: the lanes' ep, cq and av belong to the device's shared
	 * endpoints (sep); NULL when the connection owns them. Under sep->lock: want_kind,
	 * inbox*, q*, closed, posted and tx_posted of a closed connection.
	 */
	struct mk_ofi_sep *sep;
	uint8_t sep_role;  /* enum mk_ofi_sep_role it joined sep as */
	unsigned num;	   /* ours on sep: the peer puts it in its immediates */
	unsigned peer_num; /* the peer's, put in ours; 0: the peer routes nothing */
	int posted;	   /* ops the provider holds (completion not read yet) */
	bool closed;	   /* closed with ops in flight: parked on sep until they complete */
	uint8_t want_kind; /* setup message awaited (enum mk_ofi_ctrl_kind), 0: none */
	bool inbox_full;   /* inbox holds a setup message for this connection */
	bool q_lost;	   /* the routed queue could not grow: the connection is broken */
	struct mk_ofi_ctrl inbox;
	struct mk_ofi_qent *q; /* entries read by another connection's poll, oldest first */
	int q_head, q_len, q_cap;
	struct mk_ofi_op ctrl_op; /* context of setup sends on sep */
	/*
	 * MKERNEL_OFI_PROGRESS_THREAD: a thread per lane drives the provider's progress (the
	 * domain is FI_THREAD_SAFE), so socket copies run beside the caller's thread and writes
	 * land while nobody polls; on endpoints of the connection's own it also reads the
	 * completions into the lane's ring (ofi_progress.c).
	 */
	int progress_stop;
	int inflight;
	struct fi_context2 tx_ctx; /* setup message contexts, told apart in poll */
	struct fi_context2 rx_ctx;
	struct mk_ofi_ctrl ctrl_tx; /* ctrl_tx and ctrl_rx adjacent: one FI_MR_LOCAL region */
	struct mk_ofi_ctrl ctrl_rx;
	struct fid_mr *ctrl_mr; /* only where the provider wants FI_MR_LOCAL */
	uint64_t ctrl_key;	/* its app key, 0 with FI_MR_PROV_KEY */
	void *ctrl_desc;
	/*
	 * Events poll() hands out before reading the CQ: data events read while setup was still
	 * pending, and the completions of injected writes (made at post, ofi_data.c).
	 */
	struct mk_event stash[MK_OFI_STASH];
	int nstash;
	struct mk_ofi_op *free_ops;
	int nops;
	struct mk_ofi_lane lanes[MK_TP_MAX_LANES];
	struct mk_ofi_op ops[]; /* MKERNEL_OFI_TX_DEPTH slots, shared by the lanes */
};

/* A completion read from a shared CQ for another connection, kept until its owner polls. */
struct mk_ofi_qent {
	struct fi_cq_data_entry ent;
	int status; /* 0, or the error of an error entry */
};

static inline struct mk_ofi_conn *mk_ofi_conn_of(struct mk_conn *c)
{
	return container_of(c, struct mk_ofi_conn, base);
}

struct mk_ofi_listener {
	struct mk_listener base;
	struct mk_ofi_conn *pending; /* the endpoint the accepted connection will own */
};

static inline struct mk_ofi_listener *mk_ofi_listener_of(struct mk_listener *l)
{
	return container_of(l, struct mk_ofi_listener, base);
}

int mk_ofi_listen(int dev, void *handle, struct mk_listener **out);
int mk_ofi_connect(int dev, const void *handle, const void *blob, size_t blob_len,
		   struct mk_conn **out);
int mk_ofi_connected(struct mk_conn *c);
int mk_ofi_accept(struct mk_listener *l, const void *blob, size_t blob_len, struct mk_conn **out);
int mk_ofi_close_listen(struct mk_listener *l);
int mk_ofi_close(struct mk_conn *c);

/*
 * One RDM endpoint on conn's device into lane (ep, cq, av, its own name): its own CQ of cq_size
 * entries and AV of av_count addresses, bound and enabled (shm's retry on a stale region name
 * included); on failure nothing stays open. fi_* error codes.
 */
int mk_ofi_ep_open(struct mk_ofi_conn *conn, size_t cq_size, size_t av_count,
		   struct mk_ofi_lane *lane);

/* Setup messages seen by the data path's CQ reader (ofi_conn.c). */
void mk_ofi_ctrl_complete(struct mk_ofi_conn *conn, void *op_context, bool failed);
/* Keep an established connection's receive for stray messages posted (ofi_conn.c). */
void mk_ofi_stray_rearm(struct mk_ofi_conn *conn);

/* ---- shared endpoints (ofi_sep.c) ---- */

/* One lane index's endpoint, shared by every connection of the device. */
struct mk_ofi_sep_lane {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	uint8_t addr[MK_OFI_ADDR_MAX];
	size_t addrlen;
	/* peers inserted into av: each address once (address -> fi_addr) */
	struct mk_ofi_sep_peer *peers;
	size_t npeers, peers_cap;
};

struct mk_ofi_sep_rx {
	struct fi_context2 ctx;
	bool posted;
	struct mk_ofi_ctrl msg;
};

/*
 * A set of a device's shared endpoints, one per lane index, opened as connections need them and
 * closed with the set's last connection (a device has one set, or with MKERNEL_OFI_SHARED_EP=2
 * as many as it has connections of one role). lock serialises CQ reads, the connection table, the
 * AV map and everything a poller hands to another connection. Lock order: the registry, then lock,
 * then the device's lock.
 */
struct mk_ofi_sep {
	struct mk_ofi_dev *dev;
	struct mk_ofi_sep *next; /* the device's next set, in the order they opened */
	/* open connections (not parked ones), all and by enum mk_ofi_sep_role; registry lock */
	int refs;
	int roles[2];
	pthread_mutex_t lock;
	int nlanes; /* lanes[0..nlanes) open */
	struct mk_ofi_sep_lane lanes[MK_TP_MAX_LANES];
	struct mk_ofi_sep_rx rx[MK_OFI_SEP_RX]; /* setup receives on lane 0 */
	struct fid_mr *rx_mr;			/* FI_MR_LOCAL providers only */
	uint64_t rx_key;
	void *rx_desc;
	unsigned next_num;			/* numbers are handed out round robin */
	struct mk_ofi_conn *conns[MK_OFI_NUMS]; /* number -> connection, open or parked */
};

/*
 * How a connection came to be: a listener's (the accepting side, NCCL's receive comm) or a
 * connect's (NCCL's send comm). With MKERNEL_OFI_SHARED_EP=2 a set of shared endpoints holds at
 * most one open connection of each.
 */
enum mk_ofi_sep_role { MK_OFI_SEP_ACCEPTS, MK_OFI_SEP_CONNECTS };

/*
 * True when a connection on d shares endpoints: MKERNEL_OFI_SHARED_EP 1 or 2 and not shm (a
 * peer killed inside shm can leave a lock taken that every user of the endpoint would spin on).
 */
bool mk_ofi_sep_wanted(const struct mk_ofi_dev *d);
/*
 * Joins conn to a set of its device's shared endpoints (opened on first use) and numbers it:
 * the device's only set with MKERNEL_OFI_SHARED_EP=1, with 2 the first set holding no open
 * connection of conn's role.
 */
int mk_ofi_sep_attach(struct mk_ofi_conn *conn, enum mk_ofi_sep_role role);
/* Lane i of conn on the shared endpoint of lane index i (opened on first use). */
int mk_ofi_sep_lane(struct mk_ofi_conn *conn, int i);
/* fi_addr of a peer address on lane i, inserted once per shared endpoint. */
int mk_ofi_sep_av_insert(struct mk_ofi_conn *conn, int i, const void *addr, size_t len,
			 fi_addr_t *out);
/* The connection awaits a setup message of kind (0: none any more) for its nonce. */
void mk_ofi_sep_expect(struct mk_ofi_conn *conn, enum mk_ofi_ctrl_kind kind);
/*
 * Detaches conn: freed now, or parked while the provider still holds its ops (freed when their
 * completions are read or the endpoints close). The caller must not touch conn again.
 */
void mk_ofi_sep_detach(struct mk_ofi_conn *conn);
/* Frees what a connection owns besides its lanes (ctrl_mr, dev reference, memory). */
void mk_ofi_conn_release(struct mk_ofi_conn *conn);
/*
 * Under sep->lock, from a CQ read by conn's poll: where an entry read on lane goes. Returns the
 * connection whose it is when that is conn (the caller handles it), else NULL: it was a setup
 * message (dispatched), an entry for another connection (queued), a parked connection's (its
 * accounting done) or nobody's (dropped). A remote write's number bits are cleared in ent.
 */
struct mk_ofi_conn *mk_ofi_sep_route(struct mk_ofi_conn *conn, struct fi_cq_data_entry *ent,
				     int status);
/* Under sep->lock: moves a setup message from the inbox to ctrl_rx when that is free. */
void mk_ofi_sep_take_inbox(struct mk_ofi_conn *conn);
/* Under sep->lock: reposts setup receives that could not be posted before. */
void mk_ofi_sep_rearm(struct mk_ofi_sep *sep);
/*
 * Shared endpoints open now across devices (every lane of every set), and connections on them
 * (tests, logs).
 */
int mk_ofi_sep_count(int *conns);

/* ---- registrations (ofi_mr.c) ---- */

struct mk_bmr {
	struct mk_ofi_dev *dev;
	struct fid_mr *mr;
	void *desc; /* fi_mr_desc: passed on every op (FI_MR_LOCAL needs it) */
	bool host;  /* host memory: the provider may copy from it at post (inject) */
	uint64_t base;
	uint64_t app_key; /* the key we chose, 0 with FI_MR_PROV_KEY */
};

/* Registers with an app-chosen key where the domain lacks FI_MR_PROV_KEY; fi_* error codes. */
int mk_ofi_mr_raw(struct mk_ofi_dev *d, void *addr, size_t len, uint64_t access,
		  struct fid_mr **out, uint64_t *app_key);
/* Give an app key back for reuse (no-op for 0). */
void mk_ofi_key_put(struct mk_ofi_dev *d, uint64_t key);
int mk_ofi_reg_mr(int dev, void *addr, size_t len, const struct mk_mr_attr *attr,
		  struct mk_bmr **out, struct mk_rkey *rkey);
int mk_ofi_dereg_mr(int dev, struct mk_bmr *mr);

/* ---- data (ofi_data.c) ---- */

int mk_ofi_write(struct mk_conn *c, int lane, const void *src, size_t len, struct mk_bmr *src_mr,
		 uint64_t dst, const struct mk_rkey *rkey, bool has_imm, uint32_t imm, void *ctx);
int mk_ofi_read(struct mk_conn *c, int lane, void *dst, size_t len, struct mk_bmr *dst_mr,
		uint64_t src, const struct mk_rkey *rkey, void *ctx);
int mk_ofi_poll(struct mk_conn *c, struct mk_event *ev, int max);
/*
 * One fi_cq_read: events go to ev[0..max), overflow to the connection's stash (max 0 during
 * setup); setup-message completions are consumed here. Returns the events written to ev, or
 * the latched connection error when there are none.
 */
int mk_ofi_cq_drain(struct mk_ofi_conn *conn, struct mk_event *ev, int max);
/*
 * Reads one error entry of cq into *err and logs it once: its status (a negative errno), or 0
 * when there was none after all.
 */
int mk_ofi_cq_err_read(struct mk_ofi_conn *conn, struct fid_cq *cq, struct fi_cq_err_entry *err);

/* shm only (ofi_shm.c); each is a no-op returning 0 on other providers */
bool mk_ofi_is_shm(const struct mk_ofi_dev *d);
/* -ENOSPC, with a WARN, when /dev/shm cannot hold another endpoint's region. */
int mk_ofi_shm_room(const struct mk_ofi_dev *d);
/* Records the size of the region behind a freshly opened endpoint for later room checks. */
void mk_ofi_shm_learn(const struct mk_ofi_conn *conn);
/* fi_enable of one lane, retried where shm met a stale region of a dead process. */
int mk_ofi_enable(struct mk_ofi_conn *conn, struct mk_ofi_lane *lane);
/* Starts (and ends) watching the process behind a peer's shm address. */
void mk_ofi_peer_watch(struct mk_ofi_conn *conn, const void *addr, size_t len);
void mk_ofi_peer_unwatch(struct mk_ofi_conn *conn);
/*
 * True once the peer's region file is gone: it closed its endpoint before it exited, so it
 * holds no lock of ours and what it sent can still be read. A peer killed inside the provider
 * leaves the file behind.
 */
bool mk_ofi_peer_left_cleanly(const struct mk_ofi_conn *conn);
/*
 * 0 while the peer process runs, else -ECONNRESET (latched); a zombie counts as gone. now: the
 * caller's clock reading (mk_now_ns), shared with the rest of its post or poll.
 */
int mk_ofi_peer_gone(struct mk_ofi_conn *conn, uint64_t now);
/*
 * -ECONNREFUSED (with a WARN) when a shm address names an endpoint whose region is gone (closed,
 * in this process or another): inserting it would reach a region that no longer exists.
 */
int mk_ofi_shm_peer_present(const struct mk_ofi_conn *conn, const void *addr, size_t len);

/* ---- progress threads (ofi_progress.c) ---- */

/* A thread per lane where the device chose progress threads; stop joins them, frees the rings. */
void mk_ofi_progress_start(struct mk_ofi_conn *conn);
void mk_ofi_progress_stop(struct mk_ofi_conn *conn);
/*
 * Someone polls conn, so waits for something: its lanes' threads, which sleep after a quiet
 * millisecond, spin again. Only for a connection whose lane 0 has a ring. now: mk_now_ns().
 */
void mk_ofi_progress_kick(struct mk_ofi_conn *conn, uint64_t now);

/*
 * Provider calls that may wait on a lock a shm peer holds (ofi_guard.c): on a connection to a
 * shm peer they run under a guard that abandons the call when the peer is dead and the thread
 * spins on its lock (the connection is then wedged); elsewhere they are the plain calls.
 * Each takes the endpoint or CQ of the lane it runs on; the peer, and whether the connection
 * is wedged, belong to the connection (one process behind every lane, and a lane stuck on its
 * lock breaks them all). Return what the provider call returns, or -ECONNRESET once wedged.
 * now: the caller's mk_now_ns(), the call's start as the watchdog sees it (it looks for calls
 * of 50 ms, so a reading a few microseconds old does; one clock read per post or poll).
 */
ssize_t mk_ofi_guarded_rma(struct mk_ofi_conn *conn, struct fid_ep *ep, bool write,
			   const struct fi_msg_rma *msg, uint64_t flags, uint64_t now);
/* An inject write (fi_inject_write[data]: no completion); msg as for a write, one iov. */
ssize_t mk_ofi_guarded_inject(struct mk_ofi_conn *conn, struct fid_ep *ep,
			      const struct fi_msg_rma *msg, uint64_t flags, uint64_t now);
ssize_t mk_ofi_guarded_cq_read(struct mk_ofi_conn *conn, struct fid_cq *cq,
			       struct fi_cq_data_entry *ent, size_t count, uint64_t now);
/* A connection starts (stops) watching a shm peer: the watchdog runs while any does. */
void mk_ofi_guard_watch(void);
void mk_ofi_guard_unwatch(void);

extern const struct mk_transport_ops mk_ofi_ops;

#endif /* MK_TRANSPORT_OFI_OFI_H */
