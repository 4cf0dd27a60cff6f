/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private declarations of the rdma-core verbs backend: the dlopen function table (the only way
 * this backend reaches libibverbs' exported symbols, and the unit-test seam), the device,
 * connection, listener and registration objects, and the helpers the verbs_*.c files share.
 */
#ifndef MK_TRANSPORT_VERBS_VERBS_H
#define MK_TRANSPORT_VERBS_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "mk/clock.h"
#include "mk/compiler.h"
#include "mk/hash.h"
#include "mk/param.h"
#include "mk/transport.h"

#define MK_VERBS_MAX_DEVS    32
#define MK_VERBS_POLL_BATCH  16	 /* completions read per ibv_poll_cq call */
#define MK_VERBS_FAST_MAX    64	 /* host-memory flushes waiting to be reported */
#define MK_VERBS_FLUSH_DEPTH 16	 /* flush reads in flight per connection */
#define MK_VERBS_INLINE	     256 /* inline bytes asked for per QP (CTS entries, eager slots) */
#define MK_VERBS_MAX_RAILS   MK_TP_MAX_FUSED /* ports one fused device spans */

/*
 * Entry points of libibverbs, resolved once by mk_verbs_lib_load(). The fast path does not go
 * through this table: ibv_post_send/ibv_post_recv/ibv_poll_cq are inline dispatchers through the
 * provider's ops. Names that rdma-core's header turns into macros (ibv_reg_mr, ibv_query_port)
 * are reached only through here.
 */
struct mk_ibv_lib {
	struct ibv_device **(*get_device_list)(int *num);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
	/* takes the full struct ibv_port_attr, zeroed by the caller */
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
	int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*destroy_qp)(struct ibv_qp *qp);
	const char *(*wc_status_str)(enum ibv_wc_status status);
	/* optional: IBVERBS_1.8 */
	struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				       unsigned int access);
	/* optional: IBVERBS_1.12 */
	struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len,
					uint64_t iova, int fd, int access);
};

/* The table in use: the loaded library, or a test's mock. NULL until loaded. */
extern const struct mk_ibv_lib *mk_verbs_ibv;

/* dlopen + resolve; 0, -ENOENT (no library) or -ENOSYS (a required symbol is missing). */
int mk_verbs_lib_load(void);
void mk_verbs_lib_unload(void);
/* Tests: use lib instead of dlopen (NULL restores loading). */
void mk_verbs_lib_override(const struct mk_ibv_lib *lib);

/*
 * One usable (device, port) with its own context and protection domain, or a fused device
 * (makeVDevice) that has neither and spreads each connection's QPs over its rails: lane i runs
 * on rails[i % nrails]. A port is its own single rail.
 */
struct mk_verbs_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t port;
	uint8_t link_layer; /* IBV_LINK_LAYER_INFINIBAND / _ETHERNET */
	enum ibv_mtu mtu;   /* active MTU */
	uint16_t lid;
	int gid_index; /* -1 for InfiniBand LID routing */
	union ibv_gid gid;
	int max_qp_wr;
	int max_cqe;
	bool dmabuf;  /* ibv_reg_dmabuf_mr works here (probed once) */
	bool peermem; /* nv_peer_mem / nvidia_peermem loaded */
	struct mk_dev_props props;
	int nrails;
	struct mk_verbs_dev *rails[MK_VERBS_MAX_RAILS];
};

/* Routing identity of one rail, as the peer needs it to address our QPs on that port. */
struct mk_verbs_wire_rail {
	uint16_t lid;
	uint8_t link_layer;
	uint8_t mtu;
	uint8_t gid[16];
};

/* Connection setup message, sent once each way over the bootstrap socket. */
struct mk_verbs_wire {
	uint32_t magic;
	uint16_t version;
	uint16_t nqps;
	uint64_t nonce; /* the listener's, echoed by the connector */
	uint32_t qpn[MK_TP_MAX_LANES];
	uint32_t psn;
	uint16_t nrails; /* ports this side spans (1 unless fused); the peer's may differ */
	uint16_t reserved;
	struct mk_verbs_wire_rail rail[MK_VERBS_MAX_RAILS];
	uint32_t blob_len;
	uint8_t blob[MK_TP_BLOB_MAX];
	uint32_t check; /* FNV-1a over everything above */
};

/* Listen handle, carried by the consumer to the connecting side. */
struct mk_verbs_handle {
	uint32_t magic;
	uint16_t version;
	uint16_t size;	    /* sizeof(struct mk_verbs_handle) */
	uint64_t nonce;	    /* random per listener: a stale handle finds no match */
	uint32_t ip;	    /* IPv4, network order */
	uint16_t port;	    /* network order */
	uint16_t reserved;  /* 0 */
	uint32_t reserved2; /* 0; keeps the struct free of padding */
	uint32_t check;	    /* FNV-1a over everything above */
};

_Static_assert(sizeof(struct mk_verbs_handle) <= MK_TP_HANDLE_MAX, "verbs handle too large");
_Static_assert(sizeof(struct mk_verbs_handle) == offsetof(struct mk_verbs_handle, check) + 4,
	       "every byte of the handle is covered by its checksum");

#define MK_VERBS_HANDLE_MAGIC 0x4d4b5642u /* "MKVB" */
#define MK_VERBS_WIRE_MAGIC   0x4d4b5657u /* "MKVW" */
#define MK_VERBS_ACK_MAGIC    0x4d4b5641u /* "MKVA" */
#define MK_VERBS_VERSION      2		  /* 2: per-rail routing for fused devices */

enum mk_verbs_conn_state {
	MK_VC_CONNECTING = 1, /* TCP connect in progress (or waiting to retry) */
	MK_VC_SEND_INFO,
	MK_VC_RECV_INFO,
	MK_VC_SEND_ACK,
	MK_VC_RECV_ACK,
	MK_VC_READY,
	MK_VC_FAILED,
};

/* A posted send-side work request: what poll() reports when it completes. */
struct mk_verbs_slot {
	void *ctx;
	size_t len;
	uint8_t type; /* MK_EV_WRITE_DONE / MK_EV_READ_DONE */
	uint8_t lane; /* MK_VERBS_FLUSH_LANE for the flush QP */
};

#define MK_VERBS_FLUSH_LANE 0xff
#define MK_VERBS_WR_RECV    (1ull << 63) /* wr_id of a receive: flag | lane */

struct mk_verbs_conn {
	struct mk_conn base; /* first: generic <-> verbs by container_of */
	struct mk_verbs_dev *vdev;
	int fd; /* bootstrap socket; kept open as a liveness signal */
	enum mk_verbs_conn_state state;
	bool acceptor;
	uint64_t deadline_ns; /* setup fails with -ETIMEDOUT after this */
	uint64_t retry_ns;    /* connector: next TCP attempt after a refusal */
	uint32_t retry_ms;
	uint32_t peer_ip; /* connector: listener address, network order */
	uint16_t peer_port;
	uint64_t nonce;
	struct mk_verbs_wire local;
	struct mk_verbs_wire remote;
	uint32_t ack;
	size_t io_done; /* bytes of the current setup message moved so far */

	struct ibv_cq *cqs[MK_VERBS_MAX_RAILS]; /* per rail: completions of its QPs */
	int nrails;
	/*
	 * The peer's ports, from its setup message (ours until then): lane i runs from our rail
	 * i % nrails to its rail i % peer_nrails, as NCCL's own IB transport pairs merged NICs of
	 * different widths, so two hosts that fused differently still connect.
	 */
	int peer_nrails;
	struct ibv_qp *qps[MK_TP_MAX_LANES]; /* lane i on rail i % nrails */
	int nqps;
	uint32_t psn;
	int sq_depth; /* send WRs per QP */
	/*
	 * Bytes a write may carry inside its work request (IBV_SEND_INLINE): the HCA copies them
	 * at post time instead of reading the buffer by DMA. The smallest the data QPs got.
	 */
	uint32_t max_inline;
	int rq_depth; /* receives kept posted per QP */
	int sq_used[MK_TP_MAX_LANES];
	struct mk_verbs_slot *slots; /* sq_depth * nqps + flush slots */
	uint32_t *free_slots;	     /* stack of free slot indexes */
	int nfree;
	int err; /* sticky: 0 or the first error that broke the connection */
	bool err_warned;
	unsigned int idle_polls;

	/* flush: RDMA READ over a QP connected to itself (GPU memory, or MKERNEL_IB_FORCE_FLUSH) */
	struct ibv_qp *flush_qp;
	struct ibv_mr *flush_mr;
	int flush_used;	       /* reads in flight on flush_qp */
	uint32_t flush_buf[4]; /* landing zone of flush reads */
	/* host-memory flushes: completed at once, reported by the next poll */
	struct {
		void *ctx;
		size_t len;
	} fast[MK_VERBS_FAST_MAX];
	unsigned int fast_head, fast_tail; /* free-running; head - tail = waiting */
};

struct mk_verbs_listener {
	struct mk_listener base;
	int fd;
	uint64_t nonce;
	struct mk_verbs_conn *pending; /* a peer whose setup is in progress */
	bool done;		       /* accepted its one connection */
};

/* One registration per rail of the device it was made on. */
struct mk_bmr {
	struct ibv_mr *mr[MK_VERBS_MAX_RAILS];
	int nmr;
	int type;
};

/* Rail of a lane, and the peer's key for that rail (packed as struct mk_rkey documents). */
static inline int mk_verbs_lane_rail(int lane, int nrails)
{
	return nrails > 1 ? lane % nrails : 0;
}

static inline uint32_t mk_verbs_rkey_of(const struct mk_rkey *rk, int rail)
{
	uint64_t w = rail < 2 ? rk->key : rk->key2;

	return (uint32_t)(w >> (32 * (rail & 1)));
}

static inline struct mk_verbs_conn *mk_verbs_conn_of(struct mk_conn *c)
{
	return container_of(c, struct mk_verbs_conn, base);
}

static inline struct mk_verbs_listener *mk_verbs_listener_of(struct mk_listener *l)
{
	return container_of(l, struct mk_verbs_listener, base);
}

/* ---- verbs_init.c ---- */
extern const struct mk_transport_ops mk_verbs_ops;
struct mk_verbs_dev *mk_verbs_dev_get(int dev);
/* Ports found at init (devices 0 .. n-1); fused devices follow them. */
int mk_verbs_nports(void);
/* A zeroed slot after the last device, NULL when the table is full. */
struct mk_verbs_dev *mk_verbs_dev_append(int *index);

/* ---- verbs_vdev.c ---- */
int mk_verbs_make_vdev(int ndevs, const int *devs, int *out);
/* Pick the first IPv4-mapped RoCE v2 GID of (ibdev, port) from sysfs: index or -ENOENT. */
int mk_verbs_gid_autopick(const char *ibdev, int port, int tbl_len);
int mk_verbs_speed_mbps(int width, int speed);

/* ---- verbs_boot.c: listen handle and the setup socket (addresses and ports network order) ---- */
int mk_verbs_handle_encode(void *buf, uint32_t ip, uint16_t port, uint64_t nonce);
int mk_verbs_handle_decode(const void *buf, struct mk_verbs_handle *out);
/* Nonces and PSNs: getrandom(), else the clock mixed with the pid. */
uint64_t mk_verbs_boot_random64(void);
/* IPv4 of MKERNEL_SOCKET_IFNAME, else of the first up, non-loopback, non-bridge interface. */
uint32_t mk_verbs_boot_local_ip(void);
int mk_verbs_boot_listen(int *fd, uint16_t *port);
int mk_verbs_boot_accept(int lfd, int *fd);
int mk_verbs_boot_dial(uint32_t ip, uint16_t port, int *fd);
int mk_verbs_boot_dial_done(int fd);
bool mk_verbs_boot_retryable(int rc);
/* Move bytes of one setup message: 1 done, 0 would block, -errno (-ECONNRESET on EOF). */
int mk_verbs_boot_io(int fd, bool out, void *buf, size_t len, size_t *done);

/* ---- verbs_conn.c: the connect / accept state machine ---- */
int mk_verbs_listen(int dev, void *handle, struct mk_listener **out);
int mk_verbs_connect(int dev, const void *handle, const void *blob, size_t blob_len,
		     struct mk_conn **out);
int mk_verbs_connected(struct mk_conn *c);
int mk_verbs_accept(struct mk_listener *l, const void *blob, size_t blob_len, struct mk_conn **out);
int mk_verbs_close_listen(struct mk_listener *l);
int mk_verbs_close(struct mk_conn *c);

/* ---- verbs_qp.c: a connection's objects and its QPs' state transitions ---- */
/* A connection with no objects yet, its setup deadline running (MKERNEL_TIMEOUT). */
struct mk_verbs_conn *mk_verbs_conn_alloc(int dev, struct mk_verbs_dev *vdev);
/* CQ per rail, nqps QPs in INIT with receives posted, slots, flush QP; undone on failure. */
int mk_verbs_conn_objects(struct mk_verbs_conn *conn, int nqps);
/* Both of the above (setup tests use it). */
int mk_verbs_conn_create(struct mk_verbs_dev *vdev, int nqps, struct mk_verbs_conn **out);
void mk_verbs_conn_destroy(struct mk_verbs_conn *conn);
/* Every QP (and the flush QP) INIT -> RTR -> RTS towards the peer's setup message. */
int mk_verbs_qps_connect(struct mk_verbs_conn *conn, const struct mk_verbs_wire *peer);

/* ---- verbs_mr.c ---- */
int mk_verbs_reg_mr(int dev, void *addr, size_t len, const struct mk_mr_attr *attr,
		    struct mk_bmr **out, struct mk_rkey *rkey);
int mk_verbs_dereg_mr(int dev, struct mk_bmr *mr);
/* true when ibv_reg_dmabuf_mr exists and the stack accepts DMA-BUF (probe with fd -1). */
bool mk_verbs_dmabuf_probe(struct ibv_pd *pd);
bool mk_verbs_peermem_present(void);

/* ---- verbs_data.c ---- */
int mk_verbs_write(struct mk_conn *c, int lane, const void *src, size_t len, struct mk_bmr *mr,
		   uint64_t dst, const struct mk_rkey *rkey, bool has_imm, uint32_t imm, void *ctx);
int mk_verbs_read(struct mk_conn *c, int lane, void *dst, size_t len, struct mk_bmr *mr,
		  uint64_t src, const struct mk_rkey *rkey, void *ctx);
int mk_verbs_flush(struct mk_conn *c, void *addr, size_t len, struct mk_bmr *mr, void *ctx);
int mk_verbs_poll(struct mk_conn *c, struct mk_event *ev, int max);
int mk_verbs_post_recvs(struct mk_verbs_conn *conn, int lane, int n);
int mk_verbs_wc_errno(enum ibv_wc_status status);

/* ---- verbs_params.c ---- */
MK_PARAM_DECLARE_STR(ibverbs_lib);
MK_PARAM_DECLARE_INT(ib_gid_index);
MK_PARAM_DECLARE_INT(ib_qps_per_conn);
MK_PARAM_DECLARE_INT(ib_timeout);
MK_PARAM_DECLARE_INT(ib_retry_cnt);
MK_PARAM_DECLARE_INT(ib_tc);
MK_PARAM_DECLARE_INT(ib_sl);
MK_PARAM_DECLARE_INT(ib_sq_depth);
MK_PARAM_DECLARE_INT(ib_rq_depth);
MK_PARAM_DECLARE_INT(ib_force_flush);
MK_PARAM_DECLARE_STR(ib_socket_ifname);
MK_PARAM_DECLARE_STR(ib_sysfs_root);

#endif /* MK_TRANSPORT_VERBS_VERBS_H */
