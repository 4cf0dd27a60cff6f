#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Run a per-rank GPU test (test-comm-gpu, test-gar-gpu, ...) as one process per rank, placed by a
# layout of scripts/gpu/layout.sh: every rank on GPU 0 with fake nodes (one NCCL_HOSTID per
# process, one MKERNEL_HOSTID per emulated node), or one GPU per rank on a host of several GPUs
# (one host identity per node, MK_TEST_DEVICE = the rank's GPU).
# Usage: scripts/gpu/runtime-comm.sh TEST_BIN LAYOUT [test options...]
#   LAYOUT on GPU 0: s 1 rank; a 2 fake nodes x 1 rank; a4 4 fake nodes x 1 rank; b 1 node x 2
#          ranks; c 2 nodes x 2 ranks. Run b and c with MPS=1: the ranks' kernels wait for each
#          other and must run side by side.
#   LAYOUT one GPU per rank: g 1 node x G ranks; h 2 nodes x G/2 ranks; gN, hN on N GPUs (G from
#          MK_GPUS, CUDA_VISIBLE_DEVICES or nvidia-smi -L). MPS is never started for these.
# Each rank runs as `TEST_BIN RANK NRANKS IDFILE NNODES NLOCAL [test options...]`.
# WRAP="compute-sanitizer --tool memcheck --error-exitcode 3" runs every rank under that command.
# MPS=1 starts an MPS daemon first (ranks' kernels then run side by side instead of
# time-slicing) and stops it at the end. RANK_TIMEOUT: seconds per rank (default 150).
# DRY_RUN=1 prints each rank's command with its environment and runs nothing.
# Exit: 0 pass, 1 fail (naming the failing ranks), 2 bad layout, 77 no GPU (or fewer GPUs than
# the layout needs).
set -uo pipefail
bin=$1
layout=$2
shift 2
here=$(dirname "$0")
# shellcheck source=layout.sh
. "$here/layout.sh"
mk_layout "$layout" || exit $?
n=$MK_L_RANKS nodes=$MK_L_NODES nlocal=$MK_L_NLOCAL
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_MNNVL_ENABLE=0
export MKERNEL_TRANSPORT=${MKERNEL_TRANSPORT:-ofi}
export MKERNEL_OFI_PROVIDER=${MKERNEL_OFI_PROVIDER:-tcp;ofi_rxm}
export MKERNEL_OFI_IFACE=${MKERNEL_OFI_IFACE:-lo}
mps=${MPS:-0}
[ "$MK_L_PER_GPU" = 1 ] && mps=0 # one process per GPU: nothing to share

if [ "${DRY_RUN:-0}" = 1 ]; then
	echo "layout $layout: $n rank(s), $nodes node(s) x $nlocal, $([ "$MK_L_PER_GPU" = 1 ] &&
		echo "one GPU per rank (GPUs 0-$((MK_L_GPUS - 1)))" || echo "every rank on GPU 0"), MPS $mps"
	# what the ranks inherit that matters to them, then each rank's own variables
	mapfile -t common < <(env | grep -E '^(NCCL_|MKERNEL_|MK_|CUDA_VISIBLE_DEVICES=|CUDA_MPS_|TORCH_|NVSHMEM_|MASTER_|KILLED_RANK=|PYTHONPATH=|LD_LIBRARY_PATH=)' |
		grep -vE '^(MK_TEST_DEVICE|NCCL_HOSTID|MKERNEL_HOSTID|MK_GPUS)=' | LC_ALL=C sort)
	for r in $(seq 0 $((n - 1))); do
		mapfile -t own < <(mk_layout_env "$r")
		printf 'rank %d: env' "$r"
		# shellcheck disable=SC2086 # WRAP is a command line to split
		printf ' %q' "${common[@]}" "${own[@]}" timeout "${RANK_TIMEOUT:-150}" ${WRAP:-} "$bin" \
			"$r" "$n" IDFILE "$nodes" "$nlocal" "$@"
		printf '\n'
	done
	exit 0
fi

tmp=$(mktemp -d)
# Line-buffered output: a rank the timeout kills still shows how far it got.
lb=()
command -v stdbuf >/dev/null && lb=(stdbuf -oL -eL)
# shellcheck source=mps.sh
. "$here/mps.sh"
[ "$mps" = 1 ] && mps_start "$tmp"
pids=()
for r in $(seq 0 $((n - 1))); do
	mapfile -t own < <(mk_layout_env "$r")
	# shellcheck disable=SC2086 # WRAP is a command line to split
	env "${own[@]}" timeout "${RANK_TIMEOUT:-150}" "${lb[@]}" ${WRAP:-} "$bin" "$r" "$n" "$tmp/ncclid" \
		"$nodes" "$nlocal" "$@" >"$tmp/rank$r.log" 2>&1 &
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
failed=()
for r in $(seq 0 $((n - 1))); do
	[ "${rcs[$r]}" = 0 ] || failed+=("rank $r (exit ${rcs[$r]})")
done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "runtime-comm: failed: ${failed[*]}"
	exit 1
fi
exit 0
