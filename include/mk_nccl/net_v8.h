/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL net plugin ABI v8 (ncclNetProperties_v8_t, ncclNet_v8_t), declared from the documented
 * member lists. int sizes in isend/irecv, no profiler handles, no makeVDevice; properties lack
 * forceFlush, vProps, maxP2pBytes and maxCollBytes (64 B).
 */
#ifndef MK_NCCL_NET_V8_H
#define MK_NCCL_NET_V8_H

#include <stddef.h>
#include <stdint.h>

#include "mk_nccl/net_common.h"

struct mk_nccl_net_props_v8 {
	char *name;
	char *pciPath;
	uint64_t guid;
	int ptrSupport;
	int regIsGlobal;
	int speed;
	int port;
	float latency;
	int maxComms;
	int maxRecvs;
	enum mk_nccl_dev_type netDeviceType;
	int netDeviceVersion;
};

_Static_assert(sizeof(struct mk_nccl_net_props_v8) == 64, "net properties v8 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v8, speed) == 32, "net properties v8 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v8, netDeviceType) == 52,
	       "net properties v8 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v8, netDeviceVersion) == 56,
	       "net properties v8 layout");

struct mk_nccl_net_v8 {
	const char *name;
	ncclResult_t (*init)(mk_nccl_logger_t logFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, struct mk_nccl_net_props_v8 *props);
	ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
				struct mk_nccl_net_dev_handle **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm,
			       struct mk_nccl_net_dev_handle **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
			      void **request);
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
			      void **mhandles, void **request);
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle); /* optional */
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);	     /* optional */
};

_Static_assert(sizeof(struct mk_nccl_net_v8) == 152, "ncclNet_v8 has 19 slots");
_Static_assert(offsetof(struct mk_nccl_net_v8, irecvConsumed) == 18 * sizeof(void *),
	       "ncclNet_v8 layout");

#endif /* MK_NCCL_NET_V8_H */
