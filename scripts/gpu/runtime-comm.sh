#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Run test-comm-gpu as one process per rank on GPU 0, one NCCL_HOSTID per fake node, so NCCL and
# mkernel both see separate nodes and every byte between ranks crosses the transport.
# Usage: scripts/gpu/runtime-comm.sh TEST_BIN LAYOUT [--bench] [--kill]
#   LAYOUT a: 2 fake nodes x 1 rank;  a4: 4 fake nodes x 1 rank.
#   (Several ranks of one node on one GPU cannot be built on NCCL: it rejects two ranks with the
#   same host identity on the same GPU as a duplicate GPU.)
# MPS=1 starts an MPS daemon first (ranks' kernels then run side by side instead of
# time-slicing) and stops it at the end. Exit: 0 pass, 1 fail, 77 no GPU.
set -u
bin=$1
layout=$2
shift 2
case $layout in
a) n=2 nodes=2 nlocal=1 ;;
a4) n=4 nodes=4 nlocal=1 ;;
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
	NCCL_HOSTID=fake-node-$r timeout ${RANK_TIMEOUT:-150} "$bin" "$r" "$n" "$tmp/ncclid" "$nodes" "$nlocal" "$@" \
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
