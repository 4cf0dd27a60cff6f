/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL net plugin ABI v11 (ncclNetProperties_v11_t, ncclNet_v11_t), declared from the documented
 * member lists. Member order is ABI; the asserts below pin the LP64 layout.
 */
#ifndef MK_NCCL_NET_V11_H
#define MK_NCCL_NET_V11_H

#include <stddef.h>
#include <stdint.h>

#include "mk_nccl/net_common.h"

struct mk_nccl_net_props_v11 {
	char *name;	 /* unique per device: NCCL keys its topology by it */
	char *pciPath;	 /* NULL: attached to the first CPU */
	uint64_t guid;	 /* equal GUID = same physical port */
	int ptrSupport;	 /* MK_NCCL_PTR_* */
	int regIsGlobal; /* 1: registrations are not tied to a comm */
	int forceFlush;	 /* 1: always iflush GPU receives */
	int speed;	 /* Mbit/s */
	int port;
	float latency; /* us, 0 = default */
	int maxComms;
	int maxRecvs; /* largest n of irecv */
	enum mk_nccl_dev_type netDeviceType;
	int netDeviceVersion;
	struct mk_nccl_vdev_props vProps;
	size_t maxP2pBytes;
	size_t maxCollBytes;
	int maxMultiRequestSize; /* new in v11 */
};

_Static_assert(sizeof(struct mk_nccl_net_props_v11) == 112, "net properties v11 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v11, vProps) == 64, "net properties v11 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v11, maxP2pBytes) == 88,
	       "net properties v11 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v11, maxCollBytes) == 96,
	       "net properties v11 layout");
_Static_assert(offsetof(struct mk_nccl_net_props_v11, maxMultiRequestSize) == 104,
	       "net properties v11 layout");

struct mk_nccl_net_v11 {
	/* Compared case-insensitively with NCCL_NET. */
	const char *name;
	/* Once per communicator: *ctx is per comm; config carries its traffic class. */
	ncclResult_t (*init)(void **ctx, uint64_t commId, struct mk_nccl_net_comm_config *config,
			     mk_nccl_logger_t logFunction, mk_nccl_prof_cb_t profFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, struct mk_nccl_net_props_v11 *props);
	/* Never blocks; writes at most MK_NCCL_NET_HANDLE_MAXSIZE bytes into handle. */
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	/* Never blocks: *sendComm stays NULL until established; called again with the handle. */
	ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
				struct mk_nccl_net_dev_handle **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm,
			       struct mk_nccl_net_dev_handle **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	/* The fd is closed by NCCL right after the call: import it during the call. */
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	/* *request NULL: cannot post now, retry later. */
	ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			      void *phandle, void **request);
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			      void **mhandles, void **phandles, void **request);
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	/* sizes may be NULL (flush requests); one entry per sub-receive, one for a send. */
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	/* Optional (NULL): device offload only. */
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
	/* Optional (NULL): device offload only. */
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
	/* Optional (NULL): fuse physical devices into a virtual one. */
	ncclResult_t (*makeVDevice)(int *d, struct mk_nccl_vdev_props *props);
	/* New in v11: per comm; also called with NULL or a half-built ctx. */
	ncclResult_t (*finalize)(void *ctx);
	/* New in v11, optional: per-transfer hints. */
	ncclResult_t (*setNetAttr)(void *ctx, struct mk_nccl_net_attr *netAttr);
};

_Static_assert(sizeof(struct mk_nccl_net_v11) == 22 * sizeof(void *), "ncclNet_v11 has 22 slots");
_Static_assert(offsetof(struct mk_nccl_net_v11, makeVDevice) == 19 * sizeof(void *),
	       "ncclNet_v11 layout");
_Static_assert(offsetof(struct mk_nccl_net_v11, finalize) == 20 * sizeof(void *),
	       "ncclNet_v11 layout");
_Static_assert(offsetof(struct mk_nccl_net_v11, setNetAttr) == 21 * sizeof(void *),
	       "ncclNet_v11 layout");

#endif /* MK_NCCL_NET_V11_H */
