#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Run a Python program as one process per rank through runtime-comm.sh (which sets the
# transport and no-multicast variables and places the ranks): on GPU 0, one NCCL_HOSTID per
# process (NCCL sees a node each) and one MKERNEL_HOSTID per emulated node (mkernel maps the
# heaps of the ranks sharing it); or one GPU per rank (LOCAL_RANK = the rank's GPU).
# usage: scripts/gpu/python-run.sh BUNDLE_OR_BUILD LAYOUT PROGRAM [args...]
#   LAYOUT s: 1 rank; a: 2 nodes x 1 rank; b: 1 node x 2 ranks; c: 2 nodes x 2 ranks;
#   g, h, gN, hN: one GPU per rank (scripts/gpu/layout.sh)
# Environment: MPS=1 (default for several ranks on GPU 0) starts an MPS daemon; RANK_TIMEOUT (s, default
#   300); NCCL_VIA_PLUGIN=1 sends NCCL's own traffic through libnccl-net-mkernel.so (default:
#   NCCL's Socket transport, as runtime-comm.sh); KILLED_RANK=r: rank r is meant to die by
#   SIGKILL (exit 137 required of it, 0 of the others); DRY_RUN=1 prints each rank's command.
# Exit: 0 every rank passed, 77 every rank skipped (no GPU), 1 otherwise (the failing ranks named).
set -uo pipefail
src=${1:?usage: python-run.sh BUNDLE_OR_BUILD LAYOUT PROGRAM [args...]}
layout=$2
prog=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=layout.sh
. "$here/layout.sh"
mk_layout "$layout" || exit $?
n=$MK_L_RANKS
if [ "${DRY_RUN:-0}" != 1 ] && { ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; }; then
	echo "python-run: no GPU: skipped"
	exit 77
fi
# shellcheck source=python-env.sh
. "$here/python-env.sh"
mk_use "$src" || exit 1
# Never NVLink multicast (runtime-comm.sh sets them too; said here for whoever reads this alone).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 MASTER_ADDR=127.0.0.1 MK_LAYOUT=$layout RANK_TIMEOUT=${RANK_TIMEOUT:-300}
if [ "${NCCL_VIA_PLUGIN:-0}" = 1 ]; then
	export NCCL_NET_PLUGIN=$MK_PLUGIN NCCL_NET=mkernel
else
	unset NCCL_NET_PLUGIN NCCL_NET
fi
MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MASTER_PORT
# runtime-comm.sh starts the ranks (fake nodes, MPS, logs, exit codes); python-rank.sh turns its
# positional rank arguments into torch.distributed's environment.
[ "$n" -gt 1 ] && [ "$MK_L_PER_GPU" = 0 ] && export MPS=${MPS:-1}
"$here/runtime-comm.sh" "$here/python-rank.sh" "$layout" "$prog" "$@"
rc=$?
[ "${DRY_RUN:-0}" = 1 ] && exit "$rc"
case $rc in
0) echo "python-run $layout $(basename "$prog") $*: passed" ;;
77) echo "python-run $layout $(basename "$prog") $*: skipped (no GPU)" ;;
*) echo "python-run $layout $(basename "$prog") $*: FAILED (exit $rc; per-rank exits above)" ;;
esac
exit "$rc"
