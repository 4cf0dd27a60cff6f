// SPDX-License-Identifier: Apache-2.0
/* Knobs of the libfabric backend: provider and interface choice, library path, queue depths. */
#include "ofi.h"

MK_PARAM_STR(
	ofi_provider, "ofi", "MKERNEL_OFI_PROVIDER", "",
	"libfabric provider: efa, tcp, 'tcp;ofi_rxm', net, shm, 'udp;ofi_rxd'; empty = fastest "
	"one that crosses nodes (efa, tcp/net, tcp;ofi_rxm, udp;ofi_rxd; shm only when named)")
MK_PARAM_STR(ofi_lib, "ofi", "MKERNEL_OFI_LIB", "libfabric.so.1",
	     "libfabric library dlopened at init (a path or a soname)")
MK_PARAM_STR(ofi_iface, "ofi", "MKERNEL_OFI_IFACE", "",
	     "comma list of interfaces/domains to use; empty = all but docker*/virbr*, and lo only "
	     "when nothing else exists")
MK_PARAM_INT(ofi_cq_read_count, "ofi", "MKERNEL_OFI_CQ_READ_COUNT", 16,
	     "completions read per fi_cq_read call in poll (1..64)")
MK_PARAM_INT(ofi_tx_depth, "ofi", "MKERNEL_OFI_TX_DEPTH", 256,
	     "writes+reads one connection may have in flight; more return -EAGAIN (8..65536)")
MK_PARAM_INT(ofi_speed_mbps, "ofi", "MKERNEL_OFI_SPEED_MBPS", 0,
	     "port speed reported to NCCL in Mbit/s; 0 = from the provider or sysfs, else 10000")
MK_PARAM_INT(ofi_progress_thread, "ofi", "MKERNEL_OFI_PROGRESS_THREAD", -1,
	     "1: a thread per connection and lane drives the provider's progress (tcp/net/shm copy "
	     "the bytes there) and, on endpoints of the connection's own, reads its completions; "
	     "0: progress only inside the caller's polls; -1 the device's choice: on over "
	     "tcp;ofi_rxm and net where the process may run on at least MKERNEL_OFI_PROGRESS_CPUS "
	     "cores, off elsewhere")
MK_PARAM_INT(ofi_progress_cpus, "ofi", "MKERNEL_OFI_PROGRESS_CPUS", 8,
	     "cores (of the process's CPU affinity) from which MKERNEL_OFI_PROGRESS_THREAD=-1 "
	     "turns the progress threads on")
MK_PARAM_INT(ofi_lanes, "ofi", "MKERNEL_OFI_LANES", -1,
	     "endpoints (lanes) one connection stripes over, each with its own CQ; messages above "
	     "MKERNEL_STRIPE_MIN are split across them (1..16; the accepting side follows the "
	     "connecting side); -1 the device's choice: 2 on tcp;ofi_rxm and net, 1 elsewhere")
MK_PARAM_INT(ofi_inject, "ofi", "MKERNEL_OFI_INJECT", 1,
	     "writes from host memory up to the provider's inject size as fi_inject_write, their "
	     "completion made at the post instead of read from the CQ: 1 on shm (4 KiB), 2 on "
	     "every provider (tcp;ofi_rxm 64 B; libfabric 1.17's rxm crashes injecting to a dead "
	     "peer), 0 off")
MK_PARAM_INT(ofi_split_writes, "ofi", "MKERNEL_OFI_SPLIT_WRITES", -1,
	     "writes with an immediate of at least this many bytes go as a plain write of all but "
	     "the last 64 bytes and a write of those with the immediate, in order on the lane, "
	     "where the provider keeps writes in order (FI_ORDER_WAW); 0 off, -1 the device's "
	     "choice: 1 MiB on tcp;ofi_rxm and net, off elsewhere")
MK_PARAM_INT(ofi_shared_ep, "ofi", "MKERNEL_OFI_SHARED_EP", -1,
	     "connections sharing endpoints (with their CQ and AV) on a device, not on shm: 2 a "
	     "set per accepting and connecting pair (NCCL's receive and send comms of a channel: "
	     "one tcp;ofi_rxm socket for both directions), 1 all of them (one socket per pair of "
	     "processes), 0 none (an endpoint per connection and lane); -1 the device's choice: "
	     "0 where progress threads run (each connection's thread then reads its own CQ), 2 "
	     "elsewhere")
