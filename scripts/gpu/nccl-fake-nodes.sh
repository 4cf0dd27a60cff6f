#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Stock NCCL (PyTorch's) with the mkernel net plugin on one GPU host: by default two processes
# on GPU 0 made into two nodes with distinct NCCL_HOSTID (layout a of scripts/gpu/layout.sh);
# LAYOUT=h puts one process on each GPU of a host of several, in two nodes of half the GPUs each
# (NVLink inside a half, the network path between the halves). Checks exact results of every
# collective and send/recv from 1 B to 256 MiB through the plugin over libfabric's tcp, net and
# shm providers, proves from NCCL's own log that the plugin was loaded and assigned, then
# measures all_reduce and all_gather bus bandwidth (1 MiB to 256 MiB) through the plugin and
# through NCCL's internal Socket transport in the same run, the configurations taken in turn
# ROUNDS times.
#
# usage: scripts/gpu/nccl-fake-nodes.sh <build-dir or unpacked bundle> [out-dir]
# Environment: CONFIGS (bandwidth configurations to run; nccl-nvlink = NCCL's own transports
# with no network forced, NVLink between the GPUs of layout g), CHECKS (providers whose results
# are checked, default "tcp net shm"; CHECK_PROVIDERS is read where CHECKS is unset),
# SKIP_CHECK=1 (bandwidth only), ROUNDS (turns over the
# configurations, default 2; the summary takes the median per point), LANES (endpoints per
# connection in the *-lanes configurations, default 4),
# LAYOUT (default a), JOB_TIMEOUT (s per job, default 600), DRY_RUN=1 (print each rank's command).
# The plugin's libfabric must be loadable (LD_LIBRARY_PATH). Figures of layouts on one GPU are
# one-host emulation.
set -uo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:-$build/nccl-fake-nodes}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
plugin=$build/nccl_plugin/libnccl-net-mkernel.so
if [ -f "$build/env.sh" ]; then # an unpacked bundle (scripts/bundle.sh)
	export LD_LIBRARY_PATH="$build/lib:$build/lib/fabric:${LD_LIBRARY_PATH:-}"
	plugin=$build/lib/libnccl-net-mkernel.so
fi
[ -f "$plugin" ] || { echo "no plugin at $plugin"; exit 1; }
# shellcheck source=layout.sh
. "$here/layout.sh"
mk_layout "${LAYOUT:-a}" || exit $?
nranks=$MK_L_RANKS
dry=${DRY_RUN:-0}

# Never NVLink multicast; fake nodes must not probe multi-node NVLink.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_MNNVL_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,TUNING
export NCCL_TUNER_PLUGIN=none PYTHONUNBUFFERED=1

# shellcheck source=mps.sh
. "$here/mps.sh"
# ranks sharing GPU 0 run side by side under MPS; one process per GPU needs none
if [ "$dry" != 1 ] && [ "$MK_L_PER_GPU" = 0 ]; then
	mps_start "$out"
	trap mps_stop EXIT
fi

port=29500
# run_job <label> <mode> <extra env...>: every rank of the layout, logs in
# $out/<label>-<mode>-rank<r>.log
run_job() {
	local label=$1 mode=$2 own dev
	shift 2
	port=$((port + 1))
	local pids=()
	for r in $(seq 0 $((nranks - 1))); do
		mapfile -t own < <(mk_layout_env "$r")
		dev=$(printf '%s\n' "${own[@]}" | sed -n 's/^MK_TEST_DEVICE=//p')
		local cmd=(env "$@" "${own[@]}" LOCAL_RANK="$dev" RANK="$r" WORLD_SIZE="$nranks"
			MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" MK_EMULATED=$((1 - MK_L_PER_GPU))
			timeout "${JOB_TIMEOUT:-600}" python3 "$here/nccl_fake_nodes.py" --mode "$mode"
			--label "$label")
		if [ "$dry" = 1 ]; then
			printf 'rank %d:' "$r"
			printf ' %q' "${cmd[@]}"
			printf '\n'
			continue
		fi
		"${cmd[@]}" >"$out/$label-$mode-rank$r.out" 2>"$out/$label-$mode-rank$r.log" &
		pids+=($!)
	done
	[ "$dry" = 1 ] && return 0
	# pid, not p: the caller's loop over providers is named p, and bash functions share it
	local rc=0 pid
	for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
	# NCCL's INFO lines go to stdout too: keep only our JSON records
	grep -h '^{' "$out/$label-$mode-rank0.out"
	return $rc
}

fail=0
plugin_env=("NCCL_NET_PLUGIN=$plugin" NCCL_NET=mkernel MKERNEL_TRANSPORT=ofi MKERNEL_OFI_IFACE=lo)
echo "nccl-fake-nodes: layout ${LAYOUT:-a}: $nranks ranks, $MK_L_NODES node(s) x $MK_L_NLOCAL"
# provider_of <short name>: the libfabric provider string
provider_of() { case $1 in tcp) echo "tcp;ofi_rxm" ;; *) echo "$1" ;; esac; }
checks=${CHECKS:-${CHECK_PROVIDERS:-tcp net shm}}
if [ -z "${SKIP_CHECK:-}" ]; then
	# exact results over each provider the plugin is used with, and from NCCL's own log that
	# the plugin was loaded and assigned in every one of those runs
	for p in $checks; do
		run_job "mkernel-$p" check "${plugin_env[@]}" "MKERNEL_OFI_PROVIDER=$(provider_of "$p")" ||
			{ echo "check over $p: FAIL"; fail=1; }
		[ "$dry" = 1 ] && continue
		# NCCL writes its INFO lines to stdout, its WARN lines to stderr: search both.
		logs=("$out/mkernel-$p-check-rank0.out" "$out/mkernel-$p-check-rank0.log")
		for want in "Loaded net plugin mkernel" "Assigned NET plugin mkernel" "NET/mkernel"; do
			if grep -qh "$want" "${logs[@]}"; then
				echo "log ($p): found '$want'"
			else
				echo "log ($p): MISSING '$want'"
				fail=1
			fi
		done
		grep -h -m3 "NET/mkernel" "${logs[@]}"
	done
fi
# Bandwidth configurations (CONFIGS selects a subset): the plugin over libfabric's tcp, net and
# shm providers (tcp and net with their default, endpoints shared by a channel's send and receive
# comms), tcp (or shm) striped over LANES endpoints, tcp with the eager path off, a progress
# thread per endpoint, every comm of a process on one endpoint (mkernel-tcp-shared: NCCL's
# channels then ride one TCP stream) or an endpoint per comm (mkernel-tcp-own-ep), NCCL's own
# Socket transport, and NCCL with nothing forced
# (nccl-nvlink: on layout g its P2P transport over NVLink).
configs=${CONFIGS:-mkernel-tcp mkernel-tcp-lanes mkernel-net mkernel-shm nccl-socket}
tcp="MKERNEL_OFI_PROVIDER=tcp;ofi_rxm"
[ "$dry" = 1 ] || rm -f "$out"/*-bench-r*-rank*.out
for ((round = 1; round <= ${ROUNDS:-2}; round++)); do
	for c in $configs; do
		case $c in
		mkernel-tcp) env=("${plugin_env[@]}" "$tcp") ;;
		mkernel-tcp-lanes) env=("${plugin_env[@]}" "$tcp" "MKERNEL_OFI_LANES=${LANES:-4}") ;;
		mkernel-tcp-eager0) env=("${plugin_env[@]}" "$tcp" MKERNEL_EAGER_BYTES=0) ;;
		mkernel-tcp-pt) env=("${plugin_env[@]}" "$tcp" MKERNEL_OFI_PROGRESS_THREAD=1) ;;
		mkernel-tcp-shared) env=("${plugin_env[@]}" "$tcp" MKERNEL_OFI_SHARED_EP=1) ;;
		mkernel-tcp-own-ep) env=("${plugin_env[@]}" "$tcp" MKERNEL_OFI_SHARED_EP=0) ;;
		mkernel-net) env=("${plugin_env[@]}" MKERNEL_OFI_PROVIDER=net) ;;
		mkernel-shm) env=("${plugin_env[@]}" MKERNEL_OFI_PROVIDER=shm) ;;
		mkernel-shm-lanes) env=("${plugin_env[@]}" MKERNEL_OFI_PROVIDER=shm \
			"MKERNEL_OFI_LANES=${LANES:-4}") ;;
		nccl-socket) env=(NCCL_NET=Socket NCCL_IB_DISABLE=1) ;;
		nccl-nvlink) env=(NCCL_IB_DISABLE=1) ;;
		*) echo "unknown configuration $c" >&2; fail=1; continue ;;
		esac
		if [ "$dry" = 1 ]; then
			run_job "$c" bench "${env[@]}" >&2
			continue
		fi
		# the label keeps the configuration; the round goes into the file names only
		run_job "$c" bench "${env[@]}" >/dev/null || { echo "bench $c round $round: FAIL" >&2; fail=1; }
		lab=$c-bench-r$round
		for r in $(seq 0 $((nranks - 1))); do
			mv "$out/$c-bench-rank$r.out" "$out/$lab-rank$r.out" 2>/dev/null
			mv "$out/$c-bench-rank$r.log" "$out/$lab-rank$r.log" 2>/dev/null
		done
		grep -h '^{' "$out/$lab-rank0.out" | sed "s/^{/{\"round\": $round, /"
	done
done >"$out/bench.jsonl"
[ "$dry" = 1 ] && exit $fail
python3 - "$out/bench.jsonl" "$configs" <<'PY' || fail=1
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
configs = sys.argv[2].split()
if not rows:
    print("no bandwidth records"); sys.exit(1)
by = {}
for r in rows:
    by.setdefault((r["op"], r["bytes"]), {}).setdefault(r["config"], []).append(r["busbw_gbps"])
rounds = max(r["round"] for r in rows)
print(f"busbw GB/s, median of {rounds} round(s); ratios against nccl-socket (goal >= 1.00)")
ratio_cols = [c for c in configs if c != "nccl-socket"] if "nccl-socket" in configs else []
print(f"{'op':<11} {'bytes':>10} " + " ".join(f"{c:>18}" for c in configs) +
      "".join(f" {c.replace('mkernel-', '') + '/sock':>14}" for c in ratio_cols))
miss = 0
for (op, b) in sorted(by):
    med = {c: statistics.median(v) for c, v in by[(op, b)].items()}
    line = f"{op:<11} {b:>10} " + " ".join(f"{med.get(c, 0):>18.3f}" for c in configs)
    k = med.get("nccl-socket", 0)
    for c in ratio_cols:
        q = med.get(c, 0) / k if k else 0
        flag = "*" if c in ("mkernel-tcp", "mkernel-shm") and q < 1.0 else " "
        miss += flag == "*"
        line += f" {q:>13.2f}{flag}"
    print(line)
print(f"points where tcp or shm through the plugin trail Socket (*): {miss}")
PY
echo "nccl-fake-nodes: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
