// SPDX-License-Identifier: Apache-2.0
/*
 * ncclNet v10 as a translation onto the v11 implementation: no per-comm context (the shared one
 * is used), the traffic class arrives with each connect, properties end before
 * maxMultiRequestSize.
 */
#include <stddef.h>

#include "mk/compiler.h"
#include "mk_nccl/net_v10.h"
#include "net.h"

_Static_assert(sizeof(struct mk_nccl_net_props_v10) ==
		       offsetof(struct mk_nccl_net_props_v11, maxMultiRequestSize),
	       "v10 properties are a prefix of v11");
_Static_assert(offsetof(struct mk_nccl_net_props_v10, maxCollBytes) ==
		       offsetof(struct mk_nccl_net_props_v11, maxCollBytes),
	       "v10 properties are a prefix of v11");

static ncclResult_t net10_init(mk_nccl_logger_t logFunction, mk_nccl_prof_cb_t profFunction)
{
	return mk_net_legacy_init(logFunction, profFunction);
}

static ncclResult_t net10_getProperties(int dev, struct mk_nccl_net_props_v10 *props)
{
	return mk_net_props_prefix(dev, props, sizeof(*props));
}

static ncclResult_t net10_connect(int dev, struct mk_nccl_net_comm_config *config, void *handle,
				  void **sendComm, struct mk_nccl_net_dev_handle **sendDevComm)
{
	return mk_net_connect_cfg(mk_net_legacy_ctx(), dev, config, handle, sendComm, sendDevComm);
}

MK_EXPORT struct mk_nccl_net_v10 ncclNetPlugin_v10 = {
	.name = "mkernel",
	.init = net10_init,
	.devices = mk_net11_devices,
	.getProperties = net10_getProperties,
	.listen = mk_net_legacy_listen,
	.connect = net10_connect,
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
	.getDeviceMr = NULL,
	.irecvConsumed = NULL,
	.makeVDevice = NULL, /* set by net.c where the backend can fuse devices */
};
