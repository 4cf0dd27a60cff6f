#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Run a Python program as one process per rank on GPU 0, ranks on fake nodes as in
# runtime-comm.sh: one NCCL_HOSTID per process (NCCL sees a node each), one MKERNEL_HOSTID per
# emulated node (mkernel maps the heaps of the ranks sharing it).
# usage: scripts/gpu/python-run.sh BUNDLE_OR_BUILD LAYOUT PROGRAM [args...]
#   LAYOUT s: 1 rank; a: 2 nodes x 1 rank; b: 1 node x 2 ranks; c: 2 nodes x 2 ranks
# Environment: MPS=1 (default for several ranks) starts an MPS daemon; RANK_TIMEOUT (s, default
#   300); NCCL_VIA_PLUGIN=1 sends NCCL's own traffic through libnccl-net-mkernel.so (default:
#   NCCL's Socket transport, as runtime-comm.sh); LOGDIR keeps the per-rank logs;
#   KILLED_RANK=r: rank r is meant to die by SIGKILL (exit 137 required of it, 0 of the others).
# Exit: 0 every rank passed, 77 every rank skipped (no GPU), 1 otherwise (the failing ranks named).
set -uo pipefail
src=${1:?usage: python-run.sh BUNDLE_OR_BUILD LAYOUT PROGRAM [args...]}
layout=$2
prog=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
case $layout in
s) n=1 nlocal=1 ;;
a) n=2 nlocal=1 ;;
b) n=2 nlocal=2 ;;
c) n=4 nlocal=2 ;;
*)
	echo "python-run: unknown layout $layout"
	exit 2
	;;
esac
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "python-run: no GPU: skipped"
	exit 77
fi
# shellcheck source=python-env.sh
. "$here/python-env.sh"
mk_use "$src" || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_MNNVL_ENABLE=0
export MKERNEL_TRANSPORT=${MKERNEL_TRANSPORT:-ofi}
export MKERNEL_OFI_PROVIDER=${MKERNEL_OFI_PROVIDER:-tcp;ofi_rxm}
export MKERNEL_OFI_IFACE=${MKERNEL_OFI_IFACE:-lo}
export PYTHONUNBUFFERED=1 MASTER_ADDR=127.0.0.1 WORLD_SIZE=$n MK_LAYOUT=$layout MK_NLOCAL=$nlocal
if [ "${NCCL_VIA_PLUGIN:-0}" = 1 ]; then
	export NCCL_NET_PLUGIN=$MK_PLUGIN NCCL_NET=mkernel
else
	unset NCCL_NET_PLUGIN NCCL_NET
fi
MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MASTER_PORT
logdir=${LOGDIR:-$(mktemp -d)}
mkdir -p "$logdir"
# shellcheck source=mps.sh
. "$here/mps.sh"
if [ "${MPS:-$((n > 1))}" = 1 ]; then
	mps_start "$logdir"
fi
pids=()
for r in $(seq 0 $((n - 1))); do
	RANK=$r LOCAL_RANK=0 NCCL_HOSTID=fake-node-$r MKERNEL_HOSTID=mk-node-$((r / nlocal)) \
		timeout "${RANK_TIMEOUT:-300}" python3 "$prog" "$@" >"$logdir/rank$r.log" 2>&1 &
	pids+=($!)
done
rcs=()
for p in "${pids[@]}"; do
	wait "$p"
	rcs+=($?)
done
mps_stop
bad=()
skip=1
for r in $(seq 0 $((n - 1))); do
	echo "---- rank $r (exit ${rcs[$r]}) [$MK_KIND $src, layout $layout]"
	grep -vE '^NCCL INFO|^ *$' "$logdir/rank$r.log" | tail -"${TAIL:-40}"
	[ "${rcs[$r]}" = 77 ] || skip=0
	if [ "$r" = "${KILLED_RANK:-}" ]; then
		[ "${rcs[$r]}" = 137 ] || bad+=("rank $r: exit ${rcs[$r]}, not killed")
	elif [ "${rcs[$r]}" != 0 ] && [ "${rcs[$r]}" != 77 ]; then
		bad+=("rank $r: exit ${rcs[$r]}")
	fi
done
[ -z "${LOGDIR:-}" ] && rm -rf "$logdir"
[ "$skip" = 1 ] && exit 77
if [ ${#bad[@]} -gt 0 ]; then
	echo "python-run $layout $(basename "$prog") $*: FAILED (${bad[*]})"
	exit 1
fi
echo "python-run $layout $(basename "$prog") $*: passed"
exit 0
