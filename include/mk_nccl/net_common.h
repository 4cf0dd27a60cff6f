/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Constants and small types shared by every version of NCCL's net plugin ABI (v8..v11), declared
 * from the documented member lists with our own names. The per-version property structs and
 * function tables live in net_v11.h, net_v10.h, net_v9.h and net_v8.h.
 */
#ifndef MK_NCCL_NET_COMMON_H
#define MK_NCCL_NET_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "mk_nccl/common.h"

#define MK_NCCL_NET_HANDLE_MAXSIZE	     128 /* bytes listen may write into handle */
#define MK_NCCL_NET_MAX_REQUESTS	     32	 /* outstanding requests per comm */
#define MK_NCCL_PTR_HOST		     0x1
#define MK_NCCL_PTR_CUDA		     0x2
#define MK_NCCL_PTR_DMABUF		     0x4
#define MK_NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1 /* NCCL pre-stores this in *request */
#define MK_NCCL_NET_MULTI_REQUEST	     0x2
#define MK_NCCL_MAX_NET_SIZE_BYTES	     (1ULL << 40) /* upper bound of maxP2pBytes */
#define MK_NCCL_MAX_NET_SIZE_V8		     (1ULL << 30) /* what NCCL assumes for v8 plugins */
#define MK_NCCL_NET_MAX_DEVS_PER_NIC	     4
#define MK_NCCL_NET_TRAFFIC_CLASS_UNDEF	     (-1)
#define MK_NCCL_NET_ATTR_UNDEF		     (-1)
#define MK_NCCL_NET_DEVICE_INVALID_VERSION   0x0
#define MK_NCCL_NET_DEVICE_UNPACK_VERSION    0x7

/* ncclNetDeviceType: a C enum, 4 bytes. */
enum mk_nccl_dev_type {
	MK_NCCL_NET_DEVICE_HOST = 0,
	MK_NCCL_NET_DEVICE_UNPACK = 1,
	MK_NCCL_NET_DEVICE_GIN_PROXY = 2,
	MK_NCCL_NET_DEVICE_GIN_GDAKI = 3,
};

_Static_assert(sizeof(enum mk_nccl_dev_type) == 4, "ncclNetDeviceType is int-sized");

/* ncclNetDeviceHandle_v7..v11_t: what connect/accept hand back for device offload. */
struct mk_nccl_net_dev_handle {
	enum mk_nccl_dev_type netDeviceType;
	int netDeviceVersion;
	void *handle;
	size_t size;
	int needsProxyProgress;
};

_Static_assert(sizeof(struct mk_nccl_net_dev_handle) == 32, "net device handle layout");
_Static_assert(offsetof(struct mk_nccl_net_dev_handle, needsProxyProgress) == 24,
	       "net device handle layout");

/* ncclNetVDeviceProps_v9..v11_t: the physical devices under a (virtual) device. */
struct mk_nccl_vdev_props {
	int ndevs;
	int devs[MK_NCCL_NET_MAX_DEVS_PER_NIC];
};

_Static_assert(sizeof(struct mk_nccl_vdev_props) == 20, "virtual device props layout");
_Static_assert(offsetof(struct mk_nccl_vdev_props, devs) == 4, "virtual device props layout");

/* ncclNetCommConfig_v10_t / _v11_t: per-communicator settings. */
struct mk_nccl_net_comm_config {
	int trafficClass; /* MK_NCCL_NET_TRAFFIC_CLASS_UNDEF when unset */
};

_Static_assert(sizeof(struct mk_nccl_net_comm_config) == 4, "net comm config layout");

/* ncclNetCommAttr_v11_t: concurrency hints of one direction. */
struct mk_nccl_net_comm_attr {
	int32_t maxConcurrentPeers;
	int32_t minConcurrentPeers;
	int32_t maxFlowsPerPeer;
	int32_t minFlowsPerPeer;
};

_Static_assert(sizeof(struct mk_nccl_net_comm_attr) == 16, "net comm attr layout");

/* ncclNetAttr_v11_t: per-transfer hints given to setNetAttr; every field starts at -1. */
struct mk_nccl_net_attr {
	struct mk_nccl_net_comm_attr sendCommAttr;
	struct mk_nccl_net_comm_attr recvCommAttr;
	uint32_t op;	/* 1 << ncclFunc_t */
	uint32_t algo;	/* 1 << NCCL_ALGO_* */
	uint32_t proto; /* 1 << NCCL_PROTO_* */
};

_Static_assert(sizeof(struct mk_nccl_net_attr) == 44, "net attr layout");
_Static_assert(offsetof(struct mk_nccl_net_attr, proto) == 40, "net attr layout");

/* ncclProfilerCallback_t (v10+ init): NCCL's profiler hook; plugins may ignore it. */
typedef ncclResult_t (*mk_nccl_prof_cb_t)(void **eHandle, int type, void *pHandle, int64_t pluginId,
					  void *extData);

#endif /* MK_NCCL_NET_COMMON_H */
