// SPDX-License-Identifier: Apache-2.0
/*
 * ncclNet v9 as a translation onto the v11 implementation: shared context, no profiler
 * callback or handles, no per-connect config; properties are the v10 layout.
 */
#include <stddef.h>

#include "mk/compiler.h"
#include "mk_nccl/net_v9.h"
#include "net.h"

_Static_assert(sizeof(struct mk_nccl_net_props_v9) ==
		       offsetof(struct mk_nccl_net_props_v11, maxMultiRequestSize),
	       "v9 properties are a prefix of v11");
_Static_assert(offsetof(struct mk_nccl_net_props_v9, vProps) ==
		       offsetof(struct mk_nccl_net_props_v11, vProps),
	       "v9 properties are a prefix of v11");

static ncclResult_t net9_init(mk_nccl_logger_t logFunction)
{
	return mk_net_legacy_init(logFunction, NULL);
}

static ncclResult_t net9_getProperties(int dev, struct mk_nccl_net_props_v9 *props)
{
	return mk_net_props_prefix(dev, props, sizeof(*props));
}

static ncclResult_t net9_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			       void **request)
{
	return mk_net11_isend(sendComm, data, size, tag, mhandle, NULL, request);
}

static ncclResult_t net9_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			       void **mhandles, void **request)
{
	return mk_net11_irecv(recvComm, n, data, sizes, tags, mhandles, NULL, request);
}

MK_EXPORT struct mk_nccl_net_v9 ncclNetPlugin_v9 = {
	.name = "mkernel",
	.init = net9_init,
	.devices = mk_net11_devices,
	.getProperties = net9_getProperties,
	.listen = mk_net_legacy_listen,
	.connect = mk_net_legacy_connect,
	.accept = mk_net11_accept,
	.regMr = mk_net11_regMr,
	.regMrDmaBuf = mk_net11_regMrDmaBuf,
	.deregMr = mk_net11_deregMr,
	.isend = net9_isend,
	.irecv = net9_irecv,
	.iflush = mk_net11_iflush,
	.test = mk_net11_test,
	.closeSend = mk_net11_closeSend,
	.closeRecv = mk_net11_closeRecv,
	.closeListen = mk_net11_closeListen,
	.getDeviceMr = NULL,
	.irecvConsumed = NULL,
	.makeVDevice = NULL, /* set by net.c where the backend can fuse devices */
};
