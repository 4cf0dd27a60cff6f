#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The transport's recorded figures on a CI-class host: mkernel-netbench through the plugin against
# the best raw libfabric point (tagged send/recv, RMA write or a write in two parts, measured in
# the same run, rounds interleaved), on tcp;ofi_rxm and shm, every size from 8 B to 64 MiB at 1,
# 8 and 32 in flight, and one-way latency from 8 B to 64 KiB. Writes one JSON file per provider
# plus a run record, and prints every plugin / best-raw ratio against the 0.90 goal.
#
# usage: scripts/bench-net.sh <build-dir> [out-dir]
# Environment: PROVIDERS (default "tcp;ofi_rxm shm"), REPS and ROUNDS (default 2 and 3: medians
# of 6 repetitions each side), SIZES, LAT_SIZES, WINDOWS, EXTRA (more netbench options),
# STRICT=1 (exit 3 when a point misses the goal). Take the recorded run on a quiet machine: the
# run record keeps the load average at start and end, and the kernel's tcp_rmem (the socket
# receive buffer it starts from decides the 64 KiB ping-pong over tcp: docs/benchmarks.md, 1).
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:-$build/bench-net}
here=$(cd "$(dirname "$0")/.." && pwd)
netbench=$build/nccl_plugin/tools/mkernel-netbench
raw=$build/transport/tools/rawbench/mkernel-rawbench-ofi
for f in "$netbench" "$raw"; do
	[ -x "$f" ] || { echo "bench-net: $f is not built"; exit 1; }
done
mkdir -p "$out"

sizes=${SIZES:-8,64,512,4K,64K,1M,4M,16M,64M}
lat_sizes=${LAT_SIZES:-8,64,512,4K,64K}
windows=${WINDOWS:-1,8,32}
reps=${REPS:-2}
rounds=${ROUNDS:-3}
rev=$(git -C "$here" rev-parse --short HEAD)
dirty=$(git -C "$here" status --porcelain --untracked-files=no | grep -c . || true)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)

export MKERNEL_OFI_IFACE=lo
for prov in ${PROVIDERS:-"tcp;ofi_rxm" shm}; do
	tag=${prov//;/-}
	echo "bench-net: $prov (sizes $sizes, windows $windows, latency $lat_sizes)"
	# shellcheck disable=SC2086 # EXTRA is a list of options
	if ! "$netbench" --transport ofi --provider "$prov" --sizes "$sizes" --windows "$windows" \
		--lat-sizes "$lat_sizes" --reps "$reps" --rounds "$rounds" --warmup 2 \
		--raw "$raw" --json "$out/netbench-$tag.jsonl" ${EXTRA:-} 2>"$out/netbench-$tag.log"; then
		echo "bench-net: mkernel-netbench failed on $prov (log: $out/netbench-$tag.log)"
		exit 1
	fi
done

cat >"$out/run.json" <<EOF
{"tool":"bench-net","start":"$start","end":"$(date -u +%Y-%m-%dT%H:%M:%SZ)","git":"$rev","dirty_files":$dirty,"host":"$(hostname)","cpus":$(nproc),"cpu":"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')","load_start":"$load_start","load_end":"$(cut -d' ' -f1-3 /proc/loadavg)","libfabric":"$(pkg-config --modversion libfabric 2>/dev/null || echo unknown)","tcp_rmem":"$(tr -s "\t " " " </proc/sys/net/ipv4/tcp_rmem 2>/dev/null)","sizes":"$sizes","windows":"$windows","lat_sizes":"$lat_sizes","reps":$reps,"rounds":$rounds}
EOF

python3 - "$out" ${STRICT:+--strict} <<'PY'
import glob, json, sys
out, strict = sys.argv[1], "--strict" in sys.argv
miss = total = 0
for path in sorted(glob.glob(f"{out}/netbench-*.jsonl")):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    ratios = [r for r in rows if r.get("path") == "ratio"]
    if not ratios:
        print(f"{path}: no ratio records"); sys.exit(1)
    print(f"\n{ratios[0]['provider']}:")
    print(f"{'mode':<5} {'size':>10} {'win':>4} {'plugin':>10} {'best raw':>10} {'method':>7} {'ratio':>6}")
    for r in ratios:
        key = "gbps" if r["mode"] == "bw" else "lat_us"
        total += 1
        bad = r["ratio"] < 0.90
        miss += bad
        print(f"{r['mode']:<5} {r['size']:>10} {r['window']:>4} {r['plugin_' + key + '_median']:>10.3f} "
              f"{r['raw_' + key + '_median']:>10.3f} {r['raw_method']:>7} {r['ratio']:>6.2f}{'  < 0.90' if bad else ''}")
print(f"\ngoal (plugin / best raw >= 0.90; latency: raw / plugin): {total - miss} of {total} points")
sys.exit(3 if strict and miss else 0)
PY
echo "bench-net: JSON in $out"
