/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL net plugin ABI v10 (ncclNetProperties_v10_t, ncclNet_v10_t), declared from the documented
 * member lists. No context: listen/connect take the device only; connect takes the comm config
 * per call. Properties end at maxCollBytes (104 B).
 */
#ifndef MK_NCCL_NET_V10_H
#define MK_NCCL_NET_V10_H

#include <stddef.h>
#include <stdint.h>

#include "mk_nccl/net_common.h"

struct mk_nccl_net_props_v10 {
	char *name;
	char *pciPath;
	uint64_t guid;
	int ptrSupport;
	int regIsGlobal;
	int forceFlush;
	int speed;
	int port;
	float latency;
	int maxComms;
	int maxRecvs;
	enum mk_nccl_dev_type netDeviceType;
	int netDeviceVersion;
	struct mk_nccl_vdev_props vProps;
	size_t maxP2pBytes;
	size_t maxCollBytes;
};

_Static_assert(sizeof(struct mk_nccl_net_props_v10) == 104, "net properties v10 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v10, vProps) == 64, "net properties v10 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v10, maxP2pBytes) == 88,
	       "net properties v10 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v10, maxCollBytes) == 96,
	       "net properties v10 layout");

struct mk_nccl_net_v10 {
	const char *name;
	ncclResult_t (*init)(mk_nccl_logger_t logFunction, mk_nccl_prof_cb_t profFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, struct mk_nccl_net_props_v10 *props);
	ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(int dev, struct mk_nccl_net_comm_config *config, void *handle,
				void **sendComm, struct mk_nccl_net_dev_handle **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm,
			       struct mk_nccl_net_dev_handle **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			      void *phandle, void **request);
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			      void **mhandles, void **phandles, void **request);
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle); /* optional */
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);	     /* optional */
	ncclResult_t (*makeVDevice)(int *d, struct mk_nccl_vdev_props *props);	     /* optional */
};

_Static_assert(sizeof(struct mk_nccl_net_v10) == 160, "ncclNet_v10 has 20 slots");
_Static_assert(offsetof(struct mk_nccl_net_v10, makeVDevice) == 19 * sizeof(void *),
	       "ncclNet_v10 layout");

#endif /* MK_NCCL_NET_V10_H */
