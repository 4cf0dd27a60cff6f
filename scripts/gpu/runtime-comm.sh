#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Run a per-rank GPU test (test-comm-gpu, test-gar-gpu) as one process per rank on GPU 0, one
# NCCL_HOSTID per process (NCCL sees each as a node and sends everything through the net
# plugin) and one MKERNEL_HOSTID per emulated node (mkernel's nodes: NLOCAL ranks each).
# Usage: scripts/gpu/runtime-comm.sh TEST_BIN LAYOUT [test options...]
#   LAYOUT s: 1 rank;             a: 2 fake nodes x 1 rank;   a4: 4 fake nodes x 1 rank;
#          b: 1 node x 2 ranks;   c: 2 nodes x 2 ranks.
#   Nodes of several ranks: NCCL rejects two ranks with one host identity on one GPU ("Duplicate
#   GPU"), so every process keeps its own NCCL_HOSTID and the ranks of an emulated node share an
#   MKERNEL_HOSTID: mkernel then maps their heaps into each other (CUDA IPC on the one GPU) and
#   sends only between nodes through the transport. Run b and c with MPS=1: the ranks' kernels
#   wait for each other and must run side by side.
# WRAP="compute-sanitizer --tool memcheck --error-exitcode 3" runs every rank under that command.
# MPS=1 starts an MPS daemon first (ranks' kernels then run side by side instead of
# time-slicing) and stops it at the end. Exit: 0 pass, 1 fail, 77 no GPU.
set -u
bin=$1
layout=$2
shift 2
case $layout in
s) n=1 nodes=1 nlocal=1 ;;
a) n=2 nodes=2 nlocal=1 ;;
a4) n=4 nodes=4 nlocal=1 ;;
b) n=2 nodes=1 nlocal=2 ;;
c) n=4 nodes=2 nlocal=2 ;;
*) echo "unknown layout $layout"; exit 2 ;;
esac
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_MNNVL_ENABLE=0
export MKERNEL_TRANSPORT=${MKERNEL_TRANSPORT:-ofi}
export MKERNEL_OFI_PROVIDER=${MKERNEL_OFI_PROVIDER:-tcp;ofi_rxm}
export MKERNEL_OFI_IFACE=${MKERNEL_OFI_IFACE:-lo}
tmp=$(mktemp -d)
# shellcheck source=mps.sh
. "$(dirname "$0")/mps.sh"
[ "${MPS:-0}" = 1 ] && mps_start "$tmp"
pids=()
for r in $(seq 0 $((n - 1))); do
	NCCL_HOSTID=fake-node-$r MKERNEL_HOSTID=mk-node-$((r / nlocal)) timeout ${RANK_TIMEOUT:-150} ${WRAP:-} "$bin" "$r" "$n" "$tmp/ncclid" "$nodes" "$nlocal" "$@" \
		>"$tmp/rank$r.log" 2>&1 &
	pids+=($!)
done
rcs=()
for p in "${pids[@]}"; do
	wait "$p"
	rcs+=($?)
done
mps_stop
for r in $(seq 0 $((n - 1))); do
	echo "---- rank $r (exit ${rcs[$r]})"
	cat "$tmp/rank$r.log"
done
rm -rf "$tmp"
skip=1
for rc in "${rcs[@]}"; do
	[ "$rc" = 77 ] || skip=0
done
[ "$skip" = 1 ] && exit 77
for rc in "${rcs[@]}"; do
	[ "$rc" = 0 ] || exit 1
done
exit 0
