#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Stock NCCL (PyTorch's) with the mkernel net plugin on one GPU host: by default two processes
# on GPU 0 made into two nodes with distinct NCCL_HOSTID (layout a of scripts/gpu/layout.sh);
# LAYOUT=h puts one process on each GPU of a host of several, in two nodes of half the GPUs each
# (NVLink inside a half, the network path between the halves). Checks exact results of every
# collective and send/recv from 1 B to 256 MiB through the plugin over libfabric's tcp, net and
# shm providers, proves from NCCL's own log that the plugin was loaded and assigned, then
# measures all_reduce bus bandwidth through the plugin (tcp and shm providers) and through
# NCCL's internal Socket transport in the same run.
#
# usage: scripts/gpu/nccl-fake-nodes.sh <build-dir or unpacked bundle> [out-dir]
# Environment: CONFIGS (bandwidth configurations to run; nccl-nvlink = NCCL's own transports
# with no network forced, NVLink between the GPUs of layout g), CHECK_PROVIDERS (the providers
# whose exact results are checked: tcp, net, shm by default), SKIP_CHECK=1 (bandwidth only),
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
	local rc=0
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	# NCCL's INFO lines go to stdout too: keep only our JSON records
	grep -h '^{' "$out/$label-$mode-rank0.out"
	return $rc
}

fail=0
plugin_env=("NCCL_NET_PLUGIN=$plugin" NCCL_NET=mkernel MKERNEL_TRANSPORT=ofi MKERNEL_OFI_IFACE=lo)
echo "nccl-fake-nodes: layout ${LAYOUT:-a}: $nranks ranks, $MK_L_NODES node(s) x $MK_L_NLOCAL"
if [ -z "${SKIP_CHECK:-}" ]; then
	# exact results over each provider the plugin is used with (CHECK_PROVIDERS selects)
	for prov in ${CHECK_PROVIDERS:-tcp net shm}; do
		ofi=$prov
		[ "$prov" = tcp ] && ofi="tcp;ofi_rxm"
		label=mkernel-$prov
		run_job "$label" check "${plugin_env[@]}" "MKERNEL_OFI_PROVIDER=$ofi" ||
			{ echo "FAILED: exact results over $ofi"; fail=1; }
		[ "$dry" = 1 ] && continue
		# NCCL writes its INFO lines to stdout, its WARN lines to stderr: search both.
		logs=("$out/$label-check-rank0.out" "$out/$label-check-rank0.log")
		for want in "Loaded net plugin mkernel" "Assigned NET plugin mkernel" "NET/mkernel"; do
			if grep -qh "$want" "${logs[@]}"; then
				echo "log ($prov): found '$want'"
			else
				echo "log ($prov): MISSING '$want'"
				fail=1
			fi
		done
		grep -h -m3 "NET/mkernel" "${logs[@]}"
	done
fi
# Bandwidth configurations (CONFIGS selects a subset): the plugin over libfabric's tcp, net and
# shm providers, tcp with a progress thread per connection, NCCL's own Socket transport, and
# NCCL with nothing forced (nccl-nvlink: on layout g its P2P transport over NVLink).
for c in ${CONFIGS:-mkernel-tcp mkernel-tcp-pt mkernel-net mkernel-shm nccl-socket}; do
	case $c in
	mkernel-tcp) run_job "$c" bench "${plugin_env[@]}" "MKERNEL_OFI_PROVIDER=tcp;ofi_rxm" || fail=1 ;;
	mkernel-tcp-pt) run_job "$c" bench "${plugin_env[@]}" "MKERNEL_OFI_PROVIDER=tcp;ofi_rxm" \
		MKERNEL_OFI_PROGRESS_THREAD=1 || fail=1 ;;
	mkernel-net) run_job "$c" bench "${plugin_env[@]}" MKERNEL_OFI_PROVIDER=net || fail=1 ;;
	mkernel-shm) run_job "$c" bench "${plugin_env[@]}" MKERNEL_OFI_PROVIDER=shm || fail=1 ;;
	nccl-socket) run_job "$c" bench NCCL_NET=Socket NCCL_IB_DISABLE=1 || fail=1 ;;
	nccl-nvlink) run_job "$c" bench NCCL_IB_DISABLE=1 || fail=1 ;;
	*) echo "unknown configuration $c"; fail=1 ;;
	esac
done
[ "$dry" = 1 ] && exit $fail
grep -h '^{' "$out"/*-bench-rank0.out > "$out/bench.jsonl"
python3 - "$out/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["bytes"], {})[r["config"]] = r["busbw_gbps"]
cols = ["mkernel-tcp", "mkernel-tcp-pt", "mkernel-net", "mkernel-shm", "nccl-socket", "nccl-nvlink"]
cols = [c for c in cols if any(c in d for d in by.values())]
print(f"{'bytes':>12} " + " ".join(f"{c:>12}" for c in cols) + f" {'tcp/socket':>10}")
for b in sorted(by):
    d = by[b]
    k = d.get("nccl-socket", 0)
    print(f"{b:>12} " + " ".join(f"{d.get(c, 0):>12.3f}" for c in cols) +
          f" {d.get('mkernel-tcp', 0) / k if k else 0:>10.2f}")
PY
echo "nccl-fake-nodes: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
