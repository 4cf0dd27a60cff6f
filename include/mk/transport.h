/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transport contract: what a backend (transport/ofi, transport/verbs, ...) provides and what
 * the three consumers build on.
 *
 * Two levels:
 *   1. Backend ops (struct mk_transport_ops): devices, non-blocking connection setup with a small
 *      blob exchanged each way, memory registration returning a remote key, one-sided write with
 *      an optional 32-bit immediate, optional read, and completion polling. A backend implements
 *      only these primitives.
 *   2. Messaging (include/mk/rdv.h, transport/core/rdv_*.c): NCCL's two-sided isend/irecv/test
 *      semantics (order, tags, multi-receive, sizes, 32 in flight) implemented ONCE over the
 *      primitives with a receiver-driven rendezvous. The NCCL net plugin uses it; the fused-op
 *      host proxy and a GIN proxy use the primitives directly (put + signal = write + imm).
 *
 * Threading and cost rules (every backend):
 *   - control ops (init, listen, connect, accept, reg_mr, close) may allocate, take locks and log
 *     at INFO; connect and accept never block: they return 0 with *out == NULL until established;
 *   - data ops (write, read, poll) never block, never allocate, log nothing above TRACE, and
 *     return -EAGAIN when a queue is full (the caller retries later);
 *   - one connection's data ops are called from one thread at a time; reg_mr/dereg_mr may run
 *     concurrently on another thread (backends keep their device/domain state locked there).
 *
 * Errors are 0 or a negative errno. A failed operation on a connection reported by poll()
 * carries -errno in mk_event.status; a dead or unreachable peer shows up as an error event or as
 * a write that never completes (callers time out with MKERNEL_TIMEOUT).
 */
#ifndef MK_TRANSPORT_H
#define MK_TRANSPORT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MK_TP_HANDLE_MAX       120 /* bytes a backend's listen handle may use (NCCL gives 128) */
#define MK_TP_BLOB_MAX	       96  /* bytes each side hands the other during connection setup */
#define MK_TP_MAX_LANES	       16  /* QPs / endpoints one connection may stripe over */
#define MK_TP_NAME_MAX	       64
#define MK_TP_MAX_FUSED	       4 /* physical devices one fused device may span (NCCL's limit) */
/*
 * Bits 18..30 of a write's immediate belong to the backend: callers keep them zero, and the
 * backend clears them before MK_EV_IMM reports the immediate (the ofi backend's shared endpoints
 * name the target connection there, MKERNEL_OFI_SHARED_EP). Callers have bits 0..17 and 31.
 */
#define MK_TP_IMM_BACKEND_MASK 0x7ffc0000u

/* Pointer kinds a device can register (values match NCCL's NCCL_PTR_*). */
#define MK_PTR_HOST   0x1
#define MK_PTR_CUDA   0x2
#define MK_PTR_DMABUF 0x4

struct mk_dev_props {
	char name[MK_TP_NAME_MAX];  /* unique per device: NCCL keys its topology by it */
	char pci_path[256];	    /* realpath of the PCI device in sysfs; "" when virtual */
	uint64_t guid;		    /* equal GUID = same physical port */
	int ptr_support;	    /* MK_PTR_* this device can register (probed once) */
	int speed_mbps;		    /* port speed in Mbit/s */
	int port;		    /* port number (1-based for verbs, 0 otherwise) */
	float latency_us;	    /* 0 = unknown */
	int max_comms;		    /* connections the device supports */
	int max_lanes;		    /* lanes (QPs) a connection can stripe over */
	int force_flush;	    /* 1: received GPU data needs a read-back flush */
	size_t max_msg;		    /* largest single write */
	int rma_lands_unpolled;	    /* 1: a peer's write reaches memory without this side
				     * calling poll() (NIC offload); 0: the target must poll */
	char provider[32];	    /* backend detail for logs: "tcp;ofi_rxm", "rxe", "mlx5" */
	int nfused;		    /* fused device: how many physical devices it spans; 0 when
				     * this is a physical device */
	uint32_t eager_bytes;	    /* the eager size this device prefers where MKERNEL_EAGER_BYTES
				     * is not set (0: the core's default) */
	uint32_t cts_batch;	    /* receive groups one held-back CTS write may carry (0: the
				     * core's default; clamped to half its ring) */
	uint32_t eager_write_max;   /* largest eager write, header included, the device handles
				     * well where MKERNEL_EAGER_BYTES is not set (0: no limit) */
	int cq_read_rearms;	    /* 1: a poll() re-arms the provider's wakeup, so the next
				     * completion pays a system call pair: poll only to wait */
	uint32_t stripe_min;	    /* the size above which messages are striped over the lanes
				     * where MKERNEL_STRIPE_MIN is not set (0: the core's default) */
	int fused[MK_TP_MAX_FUSED]; /* their indexes */
};

/*
 * What a peer needs to write into (or read from) a registration: the VA of the registered region
 * start in the owner's address space and the key. Writes name the target by its VA; a backend
 * whose provider addresses by offset subtracts base itself.
 */
struct mk_rkey {
	uint64_t base;
	uint64_t key;
	/*
	 * A fused device registers once per physical device and has one key per NIC. Backends
	 * whose keys are 32-bit (verbs) pack them: NIC 0 and 1 in key (low half first), NIC 2
	 * and 3 in key2; NIC 0's key alone reads the same as an unfused key. 0 otherwise.
	 */
	uint64_t key2;
};

/* Registration request. Exactly one of (host/cuda VA) or (dmabuf fd + offset) describes it. */
struct mk_mr_attr {
	int type;      /* MK_PTR_HOST or MK_PTR_CUDA */
	int dmabuf_fd; /* -1 unless registering a DMA-BUF; imported during the call */
	uint64_t dmabuf_offset;
	int cuda_device;    /* CUDA ordinal for MK_PTR_CUDA (FI_HMEM), else -1 */
	unsigned int flags; /* MK_MR_FLAG_* */
};

#define MK_MR_FLAG_STRICT_ORDER 0x1 /* no relaxed ordering: signal words (GIN FORCE_SO) */

/* Completion events returned by poll(). */
enum mk_event_type {
	MK_EV_WRITE_DONE = 1, /* a local write finished (ctx = caller's) */
	MK_EV_READ_DONE = 2,  /* a local read finished (ctx = caller's) */
	MK_EV_IMM = 3,	      /* a peer's write with immediate landed here: imm, len */
};

struct mk_event {
	enum mk_event_type type;
	int status;   /* 0, or -errno: the operation (or the connection) failed */
	void *ctx;    /* the ctx given to write/read; NULL for MK_EV_IMM */
	uint32_t imm; /* MK_EV_IMM only */
	size_t len;   /* MK_EV_IMM: bytes written by that write; else the op's length */
};

struct mk_transport_ops;

/*
 * A connection: unidirectional for NCCL, but both sides may write to each other once setup is
 * done (the receiver writes clear-to-send slots into the sender). Backends embed it first in
 * their own struct and recover theirs with container_of.
 */
struct mk_conn {
	const struct mk_transport_ops *ops;
	int dev;
	int nlanes;			   /* lanes write() accepts: 0 .. nlanes-1 */
	uint8_t peer_blob[MK_TP_BLOB_MAX]; /* what the other side passed to connect/accept */
	size_t peer_blob_len;
	void *user; /* consumer state (rdv, proxy); backends ignore it */
	/*
	 * A backend whose poll() reads the clock (mk_now_ns) stores that reading here, taken
	 * before it reads its CQ; 0 = not read. A consumer that stamps its reads with the time
	 * zeroes it before polling and takes it afterwards instead of reading the clock again:
	 * two readings per CQ read were 15 % of a small-message receiver's samples on shm.
	 */
	uint64_t polled_ns;
	/*
	 * Set by the consumer: how much it expects on lanes other than 0 (the rendezvous core:
	 * its striped receives whose data has not all landed; the proxy: 1, as its GPU commands
	 * name lanes unannounced). A backend whose CQ read costs system calls even when idle (the
	 * socket providers) reads those lanes only while this, or ops of its own on them, say
	 * something may arrive there.
	 */
	uint32_t lanes_wanted;
};

/* A listening endpoint; accepts exactly one connection (as NCCL uses it). */
struct mk_listener {
	const struct mk_transport_ops *ops;
	int dev;
};

/* A registration as the backend sees it; the MR cache (mr_cache.h) wraps it. */
struct mk_bmr;

struct mk_transport_ops {
	const char *name; /* "ofi", "verbs": MKERNEL_TRANSPORT selects by it */

	/* ---- control ---- */

	/*
	 * Load the library and discover devices. Returns 0 even when the library or devices are
	 * missing (ndevs() is then 0 and an INFO line says why); errors only for real failures.
	 * Called once per process under the registry lock; fini undoes it.
	 */
	int (*init)(void);
	void (*fini)(void);
	/* physical devices first, then the fused ones make_vdev added */
	int (*ndevs)(void);
	int (*dev_props)(int dev, struct mk_dev_props *props);
	/*
	 * Optional (NULL = cannot fuse): a new device that spreads every connection over the
	 * ndevs physical devices devs[] (NCCL's makeVDevice). Its index is written to *out and
	 * stays valid until fini. -EINVAL for a bad list, -ENOSPC when the table is full.
	 */
	int (*make_vdev)(int ndevs, const int *devs, int *out);

	/* Writes at most MK_TP_HANDLE_MAX bytes into handle; never blocks. */
	int (*listen)(int dev, void *handle, struct mk_listener **out);
	/*
	 * Start connecting to the listener described by handle and return the new connection at
	 * once; it is usable only after connected() returned 1. blob (len <= MK_TP_BLOB_MAX)
	 * reaches the peer's conn->peer_blob. A malformed or foreign handle is -EINVAL here.
	 */
	int (*connect)(int dev, const void *handle, const void *blob, size_t blob_len,
		       struct mk_conn **out);
	/*
	 * Non-blocking: 1 when the connection is established (peer_blob filled), 0 while pending,
	 * -ETIMEDOUT when the peer did not answer within MKERNEL_TIMEOUT, other -errno on failure.
	 */
	int (*connected)(struct mk_conn *c);
	/*
	 * Non-blocking: *out stays NULL until a peer's connect arrived; the connection returned is
	 * established (peer_blob filled) and has been sent blob.
	 */
	int (*accept)(struct mk_listener *l, const void *blob, size_t blob_len,
		      struct mk_conn **out);
	/* Never waits on the peer; in-flight operations are dropped. */
	int (*close_listen)(struct mk_listener *l);
	int (*close)(struct mk_conn *c);

	/*
	 * Register [addr, addr+len) on device dev (global to the device: any connection of it may
	 * use it). Fills *rkey for peers. Called by the MR cache only, with page-aligned ranges.
	 */
	int (*reg_mr)(int dev, void *addr, size_t len, const struct mk_mr_attr *attr,
		      struct mk_bmr **out, struct mk_rkey *rkey);
	int (*dereg_mr)(int dev, struct mk_bmr *mr);

	/* ---- data ---- */

	/*
	 * One-sided write of len bytes (len may be 0 with an immediate) from src (inside src_mr) to
	 * the peer's VA dst inside the region described by rkey, on lane. With has_imm the peer's
	 * poll() reports MK_EV_IMM{imm, len} after the data is placed. ctx comes back in this
	 * side's MK_EV_WRITE_DONE. -EAGAIN: queue full, nothing posted. -ETIMEDOUT (or the latched
	 * connection error) once posts have been refused for MKERNEL_TIMEOUT with nothing
	 * completing: the connection is then broken.
	 */
	int (*write)(struct mk_conn *c, int lane, const void *src, size_t len,
		     struct mk_bmr *src_mr, uint64_t dst, const struct mk_rkey *rkey, bool has_imm,
		     uint32_t imm, void *ctx);
	/* Optional (NULL = unsupported): one-sided read from the peer into dst. */
	int (*read)(struct mk_conn *c, int lane, void *dst, size_t len, struct mk_bmr *dst_mr,
		    uint64_t src, const struct mk_rkey *rkey, void *ctx);
	/*
	 * Optional (NULL = nothing to do): make data that peers wrote into local GPU memory at
	 * [addr, addr+len) visible to the GPU (a loopback read of the last bytes). Completes with
	 * MK_EV_READ_DONE{ctx}.
	 */
	int (*flush)(struct mk_conn *c, void *addr, size_t len, struct mk_bmr *mr, void *ctx);
	/*
	 * Drive progress (manual-progress providers need the target to poll for writes to land)
	 * and return up to max events. Returns the number of events or -errno when the connection
	 * itself is broken.
	 */
	int (*poll)(struct mk_conn *c, struct mk_event *ev, int max);
};

/* Optional ops through one dispatcher each: NULL means -EOPNOTSUPP. */
static inline int mk_tp_read(struct mk_conn *c, int lane, void *dst, size_t len,
			     struct mk_bmr *dst_mr, uint64_t src, const struct mk_rkey *rkey,
			     void *ctx)
{
	if (c->ops->read == NULL)
		return -EOPNOTSUPP;
	return c->ops->read(c, lane, dst, len, dst_mr, src, rkey, ctx);
}

/* ---- registry (transport/core/registry.c) ---- */

/*
 * Pick and initialise the backend named by MKERNEL_TRANSPORT (auto|ofi|verbs). auto takes the
 * first built backend, in registry order (verbs, then ofi), that reports devices. Idempotent and
 * thread-safe; returns 0 and *out, -ENODEV when no backend has a device, -EINVAL for an unknown
 * name (with a WARN listing the built ones).
 */
int mk_transport_get(const struct mk_transport_ops **out);

/* Find a built backend by name without initialising it (tests, tools). */
int mk_transport_find(const char *name, const struct mk_transport_ops **out);

/* Names of the backends built into this binary, NULL-terminated. */
const char *const *mk_transport_built(void);

/* Release the selected backend (last user). */
void mk_transport_put(void);

/*
 * Tests only: make mk_transport_get() return ops (an in-memory fake backend, say) instead of a
 * built backend; NULL restores normal selection.
 */
void mk_transport_override(const struct mk_transport_ops *ops);

#endif /* MK_TRANSPORT_H */
