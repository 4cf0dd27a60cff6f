// SPDX-License-Identifier: Apache-2.0
/*
 * ncclNet v8 as a translation onto the v11 implementation: shared context, int sizes in
 * isend/irecv, no makeVDevice, and the 64-byte properties without forceFlush, vProps and the
 * size limits. A negative int size (what a size above INT_MAX became on NCCL's side) converts to
 * a size_t far above maxP2pBytes, which the v11 path rejects with ncclInternalError.
 */
#include <stddef.h>

#include "mk/compiler.h"
#include "mk/rdv.h"
#include "mk_nccl/net_v8.h"
#include "net.h"

static ncclResult_t net8_init(mk_nccl_logger_t logFunction)
{
	return mk_net_legacy_init(logFunction, NULL);
}

static ncclResult_t net8_getProperties(int dev, struct mk_nccl_net_props_v8 *props)
{
	struct mk_nccl_net_props_v11 p11;
	ncclResult_t ret = mk_net11_getProperties(dev, props != NULL ? &p11 : NULL);

	if (ret != ncclSuccess)
		return ret;
	props->name = p11.name;
	props->pciPath = p11.pciPath;
	props->guid = p11.guid;
	props->ptrSupport = p11.ptrSupport;
	props->regIsGlobal = p11.regIsGlobal;
	props->speed = p11.speed;
	props->port = p11.port;
	props->latency = p11.latency;
	props->maxComms = p11.maxComms;
	props->maxRecvs = p11.maxRecvs;
	props->netDeviceType = p11.netDeviceType;
	props->netDeviceVersion = p11.netDeviceVersion;
	return ncclSuccess;
}

static ncclResult_t net8_isend(void *sendComm, void *data, int size, int tag, void *mhandle,
			       void **request)
{
	return mk_net11_isend(sendComm, data, (size_t)size, tag, mhandle, NULL, request);
}

static ncclResult_t net8_irecv(void *recvComm, int n, void **data, int *sizes, int *tags,
			       void **mhandles, void **request)
{
	size_t wide[MK_RDV_MAX_RECVS];

	/* Entries past MK_RDV_MAX_RECVS are never read: the v11 path rejects such an n first. */
	for (int i = 0; sizes != NULL && i < n && i < MK_RDV_MAX_RECVS; i++)
		wide[i] = (size_t)sizes[i];
	return mk_net11_irecv(recvComm, n, data, sizes != NULL ? wide : NULL, tags, mhandles, NULL,
			      request);
}

MK_EXPORT struct mk_nccl_net_v8 ncclNetPlugin_v8 = {
	.name = "mkernel",
	.init = net8_init,
	.devices = mk_net11_devices,
	.getProperties = net8_getProperties,
	.listen = mk_net_legacy_listen,
	.connect = mk_net_legacy_connect,
	.accept = mk_net11_accept,
	.regMr = mk_net11_regMr,
	.regMrDmaBuf = mk_net11_regMrDmaBuf,
	.deregMr = mk_net11_deregMr,
	.isend = net8_isend,
	.irecv = net8_irecv,
	.iflush = mk_net11_iflush,
	.test = mk_net11_test,
	.closeSend = mk_net11_closeSend,
	.closeRecv = mk_net11_closeRecv,
	.closeListen = mk_net11_closeListen,
	.getDeviceMr = NULL,
	.irecvConsumed = NULL,
};
