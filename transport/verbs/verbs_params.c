// SPDX-License-Identifier: Apache-2.0
/* Knobs of the verbs backend: library, GID and routing, queue pairs, timeouts, sysfs root. */
#include "verbs.h"

MK_PARAM_STR(ibverbs_lib, "verbs", "MKERNEL_IBVERBS_LIB", "libibverbs.so.1",
	     "libibverbs to dlopen (file name or path); missing library = no verbs devices")
MK_PARAM_INT(ib_gid_index, "verbs", "MKERNEL_IB_GID_INDEX", -1,
	     "RoCE GID index; -1 picks the first IPv4-mapped RoCE v2 GID of the port")
MK_PARAM_INT(ib_qps_per_conn, "verbs", "MKERNEL_IB_QPS_PER_CONN", 1,
	     "RC queue pairs (lanes) per connection, 1..16")
MK_PARAM_INT(ib_timeout, "verbs", "MKERNEL_IB_TIMEOUT", 20,
	     "IB ack timeout exponent: 4.096 us * 2^value before a retry (1..31)")
MK_PARAM_INT(ib_retry_cnt, "verbs", "MKERNEL_IB_RETRY_CNT", 7,
	     "retries before a write fails with 'retry exceeded' (0..7)")
MK_PARAM_INT(ib_tc, "verbs", "MKERNEL_IB_TC", 0, "RoCE traffic class of the GRH (0..255)")
MK_PARAM_INT(ib_sl, "verbs", "MKERNEL_IB_SL", 0, "InfiniBand service level (0..15)")
MK_PARAM_INT(ib_sq_depth, "verbs", "MKERNEL_IB_SQ_DEPTH", 256,
	     "send work requests in flight per queue pair; write/read return -EAGAIN beyond it")
MK_PARAM_INT(ib_rq_depth, "verbs", "MKERNEL_IB_RQ_DEPTH", 256,
	     "receives kept posted per queue pair for incoming immediates")
MK_PARAM_INT(ib_force_flush, "verbs", "MKERNEL_IB_FORCE_FLUSH", 0,
	     "1: flush by loopback RDMA READ even for host memory (normally GPU memory only)")
MK_PARAM_STR(ib_socket_ifname, "verbs", "MKERNEL_SOCKET_IFNAME", "",
	     "interface whose IPv4 address goes into listen handles; empty = first one that is up "
	     "and not loopback, docker* or virbr*, else 127.0.0.1")
MK_PARAM_STR(ib_sysfs_root, "verbs", "MKERNEL_IB_SYSFS_ROOT", "/sys",
	     "sysfs mount the device scan reads (GID types, PCI paths, peer-memory modules)")
