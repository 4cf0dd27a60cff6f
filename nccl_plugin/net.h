/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to nccl_plugin/: the v11 implementation (net.c, and net_devs.c for the device cache and
 * NIC fusion) as the older-version adapters and the tests see it. Every function here is the v11
 * member of the same name; the adapters in net_v10.c, net_v9.c and net_v8.c only translate
 * arguments onto them.
 */
#ifndef MK_NCCL_PLUGIN_NET_H
#define MK_NCCL_PLUGIN_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mk/transport.h"
#include "mk_nccl/net_v10.h"
#include "mk_nccl/net_v11.h"
#include "mk_nccl/net_v9.h"

/*
 * Largest transfer of one isend/irecv: test() reports sizes as int, so nothing above INT_MAX
 * (rounded down to a page) could be reported; NCCL splits larger transfers by maxP2pBytes.
 */
#define MK_NET_MAX_BYTES ((size_t)0x7ffff000)

ncclResult_t mk_net11_init(void **ctx, uint64_t commId, struct mk_nccl_net_comm_config *config,
			   mk_nccl_logger_t logFunction, mk_nccl_prof_cb_t profFunction);
ncclResult_t mk_net11_devices(int *ndev);
ncclResult_t mk_net11_getProperties(int dev, struct mk_nccl_net_props_v11 *props);
ncclResult_t mk_net11_listen(void *ctx, int dev, void *handle, void **listenComm);
ncclResult_t mk_net11_connect(void *ctx, int dev, void *handle, void **sendComm,
			      struct mk_nccl_net_dev_handle **sendDevComm);
ncclResult_t mk_net11_accept(void *listenComm, void **recvComm,
			     struct mk_nccl_net_dev_handle **recvDevComm);
ncclResult_t mk_net11_regMr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t mk_net11_regMrDmaBuf(void *comm, void *data, size_t size, int type, uint64_t offset,
				  int fd, void **mhandle);
ncclResult_t mk_net11_deregMr(void *comm, void *mhandle);
ncclResult_t mk_net11_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			    void *phandle, void **request);
ncclResult_t mk_net11_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			    void **mhandles, void **phandles, void **request);
ncclResult_t mk_net11_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			     void **request);
ncclResult_t mk_net11_test(void *request, int *done, int *sizes);
ncclResult_t mk_net11_closeSend(void *sendComm);
ncclResult_t mk_net11_closeRecv(void *recvComm);
ncclResult_t mk_net11_closeListen(void *listenComm);
ncclResult_t mk_net11_finalize(void *ctx);
ncclResult_t mk_net11_setNetAttr(void *ctx, struct mk_nccl_net_attr *netAttr);
ncclResult_t mk_net11_makeVDevice(int *d, struct mk_nccl_vdev_props *props);

/* The exported tables: net.c fills their makeVDevice once a backend is chosen. */
extern struct mk_nccl_net_v11 ncclNetPlugin_v11;
extern struct mk_nccl_net_v10 ncclNetPlugin_v10;
extern struct mk_nccl_net_v9 ncclNetPlugin_v9;

/*
 * connect with an explicit per-comm config: v11 passes its ctx's config, v10 the one NCCL
 * hands to each connect call.
 */
ncclResult_t mk_net_connect_cfg(void *ctx, int dev, const struct mk_nccl_net_comm_config *config,
				void *handle, void **sendComm,
				struct mk_nccl_net_dev_handle **sendDevComm);

/*
 * The device cache (net_devs.c). select: make ops the backend whose devices NCCL sees, reading
 * their properties when it changes (init calls it). check: 0 if dev is one of them, -EINVAL.
 */
int mk_net_devs_select(const struct mk_transport_ops *ops);
int mk_net_dev_check(int dev);

/*
 * The handles NCCL holds (net_handles.c): tokens of a generation-checked table, never object
 * pointers, so a stale, repeated or foreign handle is refused without reading any object.
 */
enum mk_net_hkind {
	MK_NET_H_LISTEN = 1,
	MK_NET_H_SEND = 2,
	MK_NET_H_RECV = 3,
	MK_NET_H_MR = 4,
};

#define MK_NET_H_BIT(kind) (1u << (kind))
#define MK_NET_H_DATA	   (MK_NET_H_BIT(MK_NET_H_SEND) | MK_NET_H_BIT(MK_NET_H_RECV))

/* What a handle stands for (handed out as a copy). */
struct mk_net_hent {
	enum mk_net_hkind kind;
	void *obj;	/* struct mk_rdv_comm * (comms) or struct mk_mr * (registrations) */
	void *owner;	/* registrations: the comm handle they were made through */
	uintptr_t addr; /* registrations: the caller's range, [addr, addr + len) */
	size_t len;
};

/* A new handle for e. 0, -ENOMEM or -ENOSPC. */
int mk_net_handle_new(const struct mk_net_hent *e, void **handle);
/* 0 and a copy of what a live handle of one of the kinds (MK_NET_H_BIT mask) stands for; else
 * -EBADF: NULL, not a handle, released, reused since, or another kind. */
int mk_net_handle_get(const void *handle, unsigned kinds, struct mk_net_hent *out);
/* Release a live handle (it and every copy of it turn stale); 0 and what it stood for, or -EBADF.
 */
int mk_net_handle_drop(const void *handle, unsigned kinds, struct mk_net_hent *out);
/* Release the registrations made through comm handle owner (at most max); returns how many. */
int mk_net_handle_drop_owned(const void *owner, struct mk_net_hent *out, int max);
/* True for anything shaped like one of these handles (live or not): never a request. */
bool mk_net_handle_tagged(const void *p);
/* Tests: the object behind a live handle, else NULL. */
void *mk_net_handle_obj(const void *handle);

/*
 * Versions without a context (v10, v9, v8) share one process-wide context, created by the
 * first call; later calls only count (NCCL initialises such plugins once per process).
 */
ncclResult_t mk_net_legacy_init(mk_nccl_logger_t logFunction, mk_nccl_prof_cb_t profFunction);
/* The shared context, or NULL before mk_net_legacy_init succeeded. */
void *mk_net_legacy_ctx(void);
/* listen / connect on the shared context (v10, v9, v8 signatures without ctx). */
ncclResult_t mk_net_legacy_listen(int dev, void *handle, void **listenComm);
ncclResult_t mk_net_legacy_connect(int dev, void *handle, void **sendComm,
				   struct mk_nccl_net_dev_handle **sendDevComm);
/*
 * getProperties for layouts that are a prefix of v11 (v10, v9): fills a v11 struct and copies
 * its first len bytes.
 */
ncclResult_t mk_net_props_prefix(int dev, void *props, size_t len);

#endif /* MK_NCCL_PLUGIN_NET_H */
