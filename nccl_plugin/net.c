// SPDX-License-Identifier: Apache-2.0
/*
 * NCCL net plugin v11, implemented once over the messaging layer (mk/rdv.h) and the backend
 * registry: the per-communicator contexts, connections, registrations and requests. Owns the
 * check of every pointer NCCL hands in (once, here) and the single -errno -> ncclResult_t
 * conversion per call (mk_result_net, with a WARN naming the call). The devices NCCL sees and
 * NIC fusion are in net_devs.c. The older ABI versions are adapters over the
 * mk_net11_* functions below (net_v10.c, net_v9.c, net_v8.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mk/compiler.h"
#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/rdv.h"
#include "mk/result.h"
#include "mk/transport.h"
#include "net.h"

#define MK_NET_CTX_MAGIC 0x6d6b6e78u /* "mknx" */

_Static_assert(MK_PTR_HOST == MK_NCCL_PTR_HOST && MK_PTR_CUDA == MK_NCCL_PTR_CUDA &&
		       MK_PTR_DMABUF == MK_NCCL_PTR_DMABUF,
	       "pointer kinds are passed to NCCL unchanged");
_Static_assert(MK_RDV_HANDLE_SIZE <= MK_NCCL_NET_HANDLE_MAXSIZE, "listen handle fits NCCL's");
_Static_assert(MK_NET_MAX_BYTES <= INT_MAX, "test() reports sizes as int");

/* Per-communicator context (v11 init); one shared context serves the older versions. */
struct mk_net_ctx {
	uint32_t magic;			       /* MK_NET_CTX_MAGIC while in use, else 0 */
	uint64_t comm_id;		       /* NCCL's comm hash, for logs */
	struct mk_nccl_net_comm_config config; /* traffic class of this comm */
	struct mk_nccl_net_attr attr;	       /* last setNetAttr hints; kept, not acted on */
	const struct mk_transport_ops *ops;    /* backend reference taken by init */
	struct mk_net_ctx *next_free;	       /* on net_free_ctxs after finalize */
};

/* Contexts, under net_lock. The data path reads none of it. */
static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
/* Finalized contexts are reused, never freed: a stale pointer fails the magic check. */
static struct mk_net_ctx *net_free_ctxs;
static bool net_params_dumped;

/* The context of the versions without one (v10, v9, v8). */
static pthread_mutex_t net_legacy_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mk_net_ctx *net_legacy;
static int net_legacy_refs;

static int net_ctx_check(const void *ctx)
{
	const struct mk_net_ctx *c = ctx;

	if (c == NULL)
		return -EINVAL;
	if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != MK_NET_CTX_MAGIC)
		return -EBADF;
	return 0;
}

/* Take a backend reference and build a context; under net_lock. */
static int net_ctx_create(uint64_t comm_id, const struct mk_nccl_net_comm_config *config,
			  struct mk_net_ctx **out)
{
	const struct mk_transport_ops *ops;
	struct mk_net_ctx *c;
	int rc;

	rc = mk_transport_get(&ops);
	if (rc == -EINVAL)
		rc = -EPROTONOSUPPORT; /* MKERNEL_TRANSPORT names no built backend (WARNed) */
	if (rc)
		return rc;
	rc = mk_net_devs_select(ops);
	if (rc)
		goto undo_backend;
	c = net_free_ctxs;
	if (c != NULL) {
		net_free_ctxs = c->next_free;
		memset(c, 0, sizeof(*c));
	} else {
		c = calloc(1, sizeof(*c));
		if (c == NULL) {
			rc = -ENOMEM;
			goto undo_backend;
		}
	}
	c->comm_id = comm_id;
	c->config.trafficClass =
		config != NULL ? config->trafficClass : MK_NCCL_NET_TRAFFIC_CLASS_UNDEF;
	memset(&c->attr, 0xff, sizeof(c->attr)); /* NCCL_NET_ATTR_UNDEF everywhere */
	c->ops = ops;
	__atomic_store_n(&c->magic, MK_NET_CTX_MAGIC, __ATOMIC_RELEASE);
	*out = c;
	return 0;

undo_backend:
	mk_transport_put();
	return rc;
}

ncclResult_t mk_net11_init(void **ctx, uint64_t commId, struct mk_nccl_net_comm_config *config,
			   mk_nccl_logger_t logFunction, mk_nccl_prof_cb_t profFunction)
{
	struct mk_net_ctx *c = NULL;
	bool dump = false;
	int rc = -EINVAL;

	(void)profFunction; /* no profiler events yet */
	mk_log_set_sink(logFunction);
	if (ctx == NULL)
		goto fail;
	*ctx = NULL;
	pthread_mutex_lock(&net_lock);
	rc = net_ctx_create(commId, config, &c);
	if (rc == 0 && !net_params_dumped) {
		net_params_dumped = true;
		dump = mk_param_dump_params() != 0;
	}
	pthread_mutex_unlock(&net_lock);
	if (rc)
		goto fail;
	if (dump)
		mk_param_dump();
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "init comm 0x%" PRIx64 " traffic class %d", commId,
		c->config.trafficClass);
	*ctx = c;
	return ncclSuccess;

fail:
	MK_WARN("init(comm 0x%" PRIx64 ") failed: %s", commId, mk_strerror(rc));
	return mk_result_net(rc);
}

/* A comm behind a handle: 0 and the rendezvous object, or -EBADF. */
static int net_comm(const void *handle, unsigned kinds, struct mk_rdv_comm **out)
{
	struct mk_net_hent e;
	int rc = mk_net_handle_get(handle, kinds, &e);

	*out = rc == 0 ? e.obj : NULL;
	return rc;
}

/* Hand a new comm to NCCL as a handle; on failure the comm is closed again. */
static int net_comm_out(struct mk_rdv_comm *c, enum mk_net_hkind kind, void **out)
{
	struct mk_net_hent e = { .kind = kind, .obj = c };
	int rc = mk_net_handle_new(&e, out);

	if (rc)
		mk_rdv_close(c);
	return rc;
}

ncclResult_t mk_net11_listen(void *ctx, int dev, void *handle, void **listenComm)
{
	struct mk_net_ctx *c = ctx;
	struct mk_rdv_comm *l = NULL;
	int rc = -EINVAL;

	if (listenComm == NULL || handle == NULL)
		goto fail;
	*listenComm = NULL;
	rc = net_ctx_check(c);
	if (rc == 0)
		rc = mk_net_dev_check(dev);
	if (rc == 0)
		rc = mk_rdv_listen(c->ops, dev, handle, &l);
	if (rc == 0)
		rc = net_comm_out(l, MK_NET_H_LISTEN, listenComm);
	if (rc)
		goto fail;
	return ncclSuccess;

fail:
	MK_WARN("listen(ctx %p, dev %d) failed: %s", ctx, dev, mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net_connect_cfg(void *ctx, int dev, const struct mk_nccl_net_comm_config *config,
				void *handle, void **sendComm,
				struct mk_nccl_net_dev_handle **sendDevComm)
{
	struct mk_net_ctx *c = ctx;
	struct mk_rdv_comm *s = NULL;
	int rc = -EINVAL;

	(void)sendDevComm; /* HOST device type: device offload requests are ignored */
	if (sendComm == NULL || handle == NULL)
		goto fail;
	*sendComm = NULL;
	rc = net_ctx_check(c);
	if (rc == 0)
		rc = mk_net_dev_check(dev);
	if (rc == 0)
		rc = mk_rdv_connect(c->ops, dev, handle, &s);
	if (rc == 0 && s != NULL)
		rc = net_comm_out(s, MK_NET_H_SEND, sendComm);
	if (rc)
		goto fail;
	if (s != NULL)
		MK_INFO(MK_SUBSYS_NET, "connected on dev %d (comm 0x%" PRIx64 ", traffic class %d)",
			dev, c->comm_id,
			config != NULL ? config->trafficClass : MK_NCCL_NET_TRAFFIC_CLASS_UNDEF);
	return ncclSuccess;

fail:
	MK_WARN("connect(ctx %p, dev %d) failed: %s", ctx, dev, mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_connect(void *ctx, int dev, void *handle, void **sendComm,
			      struct mk_nccl_net_dev_handle **sendDevComm)
{
	const struct mk_nccl_net_comm_config *config = NULL;

	if (net_ctx_check(ctx) == 0)
		config = &((struct mk_net_ctx *)ctx)->config;
	return mk_net_connect_cfg(ctx, dev, config, handle, sendComm, sendDevComm);
}

ncclResult_t mk_net11_accept(void *listenComm, void **recvComm,
			     struct mk_nccl_net_dev_handle **recvDevComm)
{
	struct mk_rdv_comm *l = NULL, *r = NULL;
	int rc = -EINVAL;

	(void)recvDevComm; /* HOST device type */
	if (recvComm == NULL)
		goto fail;
	*recvComm = NULL;
	rc = net_comm(listenComm, MK_NET_H_BIT(MK_NET_H_LISTEN), &l);
	if (rc == 0)
		rc = mk_rdv_accept(l, &r);
	if (rc == 0 && r != NULL)
		rc = net_comm_out(r, MK_NET_H_RECV, recvComm);
	if (rc)
		goto fail;
	if (r != NULL)
		MK_INFO(MK_SUBSYS_NET, "accepted on dev %d", r->dev);
	return ncclSuccess;

fail:
	MK_WARN("accept(listenComm %p) failed: %s", listenComm, mk_strerror(rc));
	return mk_result_net(rc);
}

/* regMr and regMrDmaBuf: fd -1 for a plain virtual-address registration. */
static int net_reg(void *comm, void *data, size_t size, int type, int fd, uint64_t offset,
		   void **mhandle)
{
	struct mk_net_hent e = { .kind = MK_NET_H_MR, .owner = comm };
	struct mk_rdv_comm *c;
	struct mk_mr *mr = NULL;
	int rc;

	if (mhandle == NULL)
		return -EINVAL;
	*mhandle = NULL;
	rc = net_comm(comm, MK_NET_H_DATA, &c);
	if (rc)
		return rc;
	if (type != MK_NCCL_PTR_HOST && type != MK_NCCL_PTR_CUDA)
		return -EINVAL;
	rc = mk_rdv_reg(c, data, size, type, fd, offset, &mr);
	if (rc)
		return rc;
	e.obj = mr;
	e.addr = (uintptr_t)data;
	e.len = size;
	rc = mk_net_handle_new(&e, mhandle);
	if (rc)
		mk_rdv_dereg(c, mr);
	return rc;
}

ncclResult_t mk_net11_regMr(void *comm, void *data, size_t size, int type, void **mhandle)
{
	int rc = net_reg(comm, data, size, type, -1, 0, mhandle);

	if (rc == 0)
		return ncclSuccess;
	MK_WARN("regMr(comm %p, %p, %zu bytes, type %d) failed: %s", comm, data, size, type,
		mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_regMrDmaBuf(void *comm, void *data, size_t size, int type, uint64_t offset,
				  int fd, void **mhandle)
{
	int rc = fd >= 0 ? net_reg(comm, data, size, type, fd, offset, mhandle) : -EBADF;

	if (rc == 0)
		return ncclSuccess;
	if (fd < 0 && mhandle != NULL)
		*mhandle = NULL;
	MK_WARN("regMrDmaBuf(comm %p, %p, %zu bytes, type %d, fd %d, offset %" PRIu64
		") failed: %s",
		comm, data, size, type, fd, offset, mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_deregMr(void *comm, void *mhandle)
{
	struct mk_rdv_comm *c;
	struct mk_net_hent e;
	int rc = net_comm(comm, MK_NET_H_DATA, &c);

	/* registrations are per comm: another comm's handle is refused, not released */
	if (rc == 0)
		rc = mk_net_handle_get(mhandle, MK_NET_H_BIT(MK_NET_H_MR), &e);
	if (rc == 0 && e.owner != comm)
		rc = -EBADF;
	if (rc == 0)
		rc = mk_net_handle_drop(mhandle, MK_NET_H_BIT(MK_NET_H_MR), &e);
	if (rc == 0)
		rc = mk_rdv_dereg(c, e.obj);
	if (rc == 0)
		return ncclSuccess;
	MK_WARN("deregMr(comm %p, mhandle %p) failed: %s", comm, mhandle, mk_strerror(rc));
	return mk_result_net(rc);
}

/*
 * The registration behind mhandle, made through comm, and [data, data + size) inside the range
 * that was registered: a transfer outside it would read or write memory nobody registered.
 */
static int net_mr(const void *comm, const void *mhandle, const void *data, size_t size,
		  struct mk_mr **out)
{
	struct mk_net_hent e;
	uintptr_t p = (uintptr_t)data;

	if (mhandle == NULL || size > MK_NET_MAX_BYTES)
		return -EINVAL;
	if (mk_net_handle_get(mhandle, MK_NET_H_BIT(MK_NET_H_MR), &e) || e.owner != comm)
		return -EBADF;
	if (size > 0 &&
	    (data == NULL || p < e.addr || p - e.addr > e.len || size > e.len - (p - e.addr))) {
		MK_WARN("%zu bytes at %p are not inside the registration of %zu bytes at %p", size,
			data, e.len, (void *)e.addr);
		return -EINVAL;
	}
	*out = e.obj;
	return 0;
}

ncclResult_t mk_net11_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			    void *phandle, void **request)
{
	struct mk_rdv_req *r = NULL;
	struct mk_rdv_comm *s;
	struct mk_mr *mr;
	int rc = -EINVAL;

	(void)phandle; /* profiler handles are not used */
	if (request == NULL)
		goto fail;
	*request = NULL;
	rc = net_comm(sendComm, MK_NET_H_BIT(MK_NET_H_SEND), &s);
	if (rc == 0)
		rc = net_mr(sendComm, mhandle, data, size, &mr);
	if (rc == 0)
		rc = mk_rdv_isend(s, data, size, tag, mr, &r);
	if (rc)
		goto fail;
	*request = r;
	return ncclSuccess;

fail:
	MK_WARN("isend(comm %p, %p, %zu bytes, tag %d, mhandle %p) failed: %s", sendComm, data,
		size, tag, mhandle, mk_strerror(rc));
	return mk_result_net(rc);
}

/*
 * Shape of a grouped receive or flush: 1 <= n <= maxRecvs, every array present, every buffer
 * inside a live registration of this comm (sizes are size_t for irecv, int for iflush).
 */
static int net_group_check(const void *comm, int n, void **data, const size_t *zsizes,
			   const int *isizes, void **mhandles, struct mk_mr **mrs)
{
	if (n < 1 || n > mk_rdv_max_recvs() || data == NULL || mhandles == NULL ||
	    (zsizes == NULL && isizes == NULL))
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		size_t size;
		int rc;

		if (isizes != NULL && isizes[i] < 0)
			return -EINVAL;
		size = zsizes != NULL ? zsizes[i] : (size_t)isizes[i];
		rc = net_mr(comm, mhandles[i], data[i], size, &mrs[i]);
		if (rc)
			return rc;
	}
	return 0;
}

ncclResult_t mk_net11_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			    void **mhandles, void **phandles, void **request)
{
	struct mk_mr *mrs[MK_RDV_MAX_RECVS];
	struct mk_rdv_req *r = NULL;
	struct mk_rdv_comm *c;
	bool optional;
	int rc = -EINVAL;

	(void)phandles;
	if (request == NULL)
		goto fail;
	/* NCCL may pre-store NCCL_NET_OPTIONAL_RECV_COMPLETION; always overwrite it. */
	optional = *request == (void *)MK_NCCL_NET_OPTIONAL_RECV_COMPLETION;
	*request = NULL;
	rc = net_comm(recvComm, MK_NET_H_BIT(MK_NET_H_RECV), &c);
	if (rc == 0)
		rc = sizes != NULL ? net_group_check(recvComm, n, data, sizes, NULL, mhandles, mrs)
				   : -EINVAL;
	if (rc == 0 && tags == NULL)
		rc = -EINVAL;
	if (rc == 0)
		rc = mk_rdv_irecv(c, n, data, sizes, tags, mrs, optional, &r);
	if (rc)
		goto fail;
	*request = r;
	return ncclSuccess;

fail:
	MK_WARN("irecv(comm %p, n %d, first %zu bytes tag %d) failed: %s", recvComm, n,
		n > 0 && sizes != NULL ? sizes[0] : 0, n > 0 && tags != NULL ? tags[0] : -1,
		mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			     void **request)
{
	struct mk_mr *mrs[MK_RDV_MAX_RECVS];
	struct mk_rdv_req *r = NULL;
	struct mk_rdv_comm *c;
	int rc = -EINVAL;

	if (request == NULL)
		goto fail;
	*request = NULL;
	rc = net_comm(recvComm, MK_NET_H_BIT(MK_NET_H_RECV), &c);
	if (rc == 0)
		rc = sizes != NULL ? net_group_check(recvComm, n, data, NULL, sizes, mhandles, mrs)
				   : -EINVAL;
	if (rc == 0)
		rc = mk_rdv_iflush(c, n, data, sizes, mrs, &r);
	if (rc)
		goto fail;
	*request = r;
	return ncclSuccess;

fail:
	MK_WARN("iflush(comm %p, n %d) failed: %s", recvComm, n, mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_test(void *request, int *done, int *sizes)
{
	/* The layer below writes one size per sub-receive; unwritten slots keep the marker. */
	size_t got[MK_RDV_MAX_RECVS];
	int rc = -EINVAL;

	if (request == NULL || done == NULL)
		goto fail;
	/* a comm or registration handle passed as a request is refused before it is read */
	rc = mk_net_handle_tagged(request) ? -EBADF : mk_rdv_req_check(request);
	if (rc)
		goto fail;
	for (int i = 0; i < MK_RDV_MAX_RECVS; i++)
		got[i] = SIZE_MAX;
	rc = mk_rdv_test(request, done, sizes != NULL ? got : NULL);
	if (rc)
		goto fail;
	if (*done && sizes != NULL) {
		/* Posted sizes are capped at MK_NET_MAX_BYTES, so each fits an int. */
		for (int i = 0; i < MK_RDV_MAX_RECVS && got[i] != SIZE_MAX; i++)
			sizes[i] = (int)got[i];
	}
	return ncclSuccess;

fail:
	MK_WARN("test(request %p) failed: %s", request, mk_strerror(rc));
	return mk_result_net(rc);
}

#define NET_OWNED_BATCH 64

/*
 * Close a comm handle: the handle turns stale first (a second close is refused), registrations
 * NCCL left on the comm are released with it, then the comm itself.
 */
static ncclResult_t net_close(void *comm, enum mk_net_hkind kind, const char *call)
{
	struct mk_net_hent e, owned[NET_OWNED_BATCH];
	int rc = mk_net_handle_drop(comm, MK_NET_H_BIT(kind), &e), n;

	if (rc == 0 && kind != MK_NET_H_LISTEN) {
		do {
			n = mk_net_handle_drop_owned(comm, owned, NET_OWNED_BATCH);
			for (int i = 0; i < n; i++)
				mk_rdv_dereg(e.obj, owned[i].obj);
		} while (n == NET_OWNED_BATCH);
	}
	if (rc == 0)
		rc = mk_rdv_close(e.obj);
	if (rc == 0)
		return ncclSuccess;
	MK_WARN("%s(comm %p) failed: %s", call, comm, mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_closeSend(void *sendComm)
{
	return net_close(sendComm, MK_NET_H_SEND, "closeSend");
}

ncclResult_t mk_net11_closeRecv(void *recvComm)
{
	return net_close(recvComm, MK_NET_H_RECV, "closeRecv");
}

ncclResult_t mk_net11_closeListen(void *listenComm)
{
	return net_close(listenComm, MK_NET_H_LISTEN, "closeListen");
}

ncclResult_t mk_net11_finalize(void *ctx)
{
	struct mk_net_ctx *c = ctx;
	int rc;

	/* NCCL also calls finalize after a failed init, with whatever ctx holds. */
	if (c == NULL)
		return ncclSuccess;
	pthread_mutex_lock(&net_lock);
	rc = net_ctx_check(c);
	if (rc == 0) {
		__atomic_store_n(&c->magic, 0, __ATOMIC_RELEASE);
		c->next_free = net_free_ctxs;
		net_free_ctxs = c;
		mk_transport_put();
	}
	pthread_mutex_unlock(&net_lock);
	if (rc == 0)
		return ncclSuccess;
	MK_WARN("finalize(ctx %p) failed: %s", ctx, mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_setNetAttr(void *ctx, struct mk_nccl_net_attr *netAttr)
{
	struct mk_net_ctx *c = ctx;
	int rc = net_ctx_check(c);

	if (rc) {
		MK_WARN("setNetAttr(ctx %p) failed: %s", ctx, mk_strerror(rc));
		return mk_result_net(rc);
	}
	/* Hints only: remembered for later policies; NULL means "no hints". */
	if (netAttr != NULL)
		c->attr = *netAttr;
	return ncclSuccess;
}

ncclResult_t mk_net_legacy_init(mk_nccl_logger_t logFunction, mk_nccl_prof_cb_t profFunction)
{
	ncclResult_t ret = ncclSuccess;
	void *c = NULL;

	pthread_mutex_lock(&net_legacy_lock);
	if (net_legacy == NULL) {
		ret = mk_net11_init(&c, 0, NULL, logFunction, profFunction);
		if (ret == ncclSuccess)
			__atomic_store_n(&net_legacy, (struct mk_net_ctx *)c, __ATOMIC_RELEASE);
	} else {
		mk_log_set_sink(logFunction);
	}
	if (ret == ncclSuccess)
		net_legacy_refs++;
	pthread_mutex_unlock(&net_legacy_lock);
	return ret;
}

void *mk_net_legacy_ctx(void)
{
	return __atomic_load_n(&net_legacy, __ATOMIC_ACQUIRE);
}

ncclResult_t mk_net_legacy_listen(int dev, void *handle, void **listenComm)
{
	return mk_net11_listen(mk_net_legacy_ctx(), dev, handle, listenComm);
}

ncclResult_t mk_net_legacy_connect(int dev, void *handle, void **sendComm,
				   struct mk_nccl_net_dev_handle **sendDevComm)
{
	return mk_net11_connect(mk_net_legacy_ctx(), dev, handle, sendComm, sendDevComm);
}

MK_EXPORT struct mk_nccl_net_v11 ncclNetPlugin_v11 = {
	.name = "mkernel",
	.init = mk_net11_init,
	.devices = mk_net11_devices,
	.getProperties = mk_net11_getProperties,
	.listen = mk_net11_listen,
	.connect = mk_net11_connect,
	.accept = mk_net11_accept,
	.regMr = mk_net11_regMr,
	.regMrDmaBuf = mk_net11_regMrDmaBuf,
	.deregMr = mk_net11_deregMr,
	.isend = mk_net11_isend,
	.irecv = mk_net11_irecv,
	.iflush = mk_net11_iflush,
	.test = mk_net11_test,
	.closeSend = mk_net11_closeSend,
	.closeRecv = mk_net11_closeRecv,
	.closeListen = mk_net11_closeListen,
	.getDeviceMr = NULL, /* HOST device type: no device offload */
	.irecvConsumed = NULL,
	.makeVDevice = NULL, /* set at init when the backend can fuse (net_devs.c) */
	.finalize = mk_net11_finalize,
	.setNetAttr = mk_net11_setNetAttr,
};
