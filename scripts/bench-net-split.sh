#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Where the plugin's one-way latency goes, per provider and size: the raw libfabric ping-pong on
# one endpoint (the ceiling), the same ping-pong with each side sending from one endpoint and
# receiving on another (mkernel-rawbench-ofi --endpoints 2: the shape NCCL's separate send and
# receive comms give the plugin, one socket per direction on tcp), and the plugin itself
# (mkernel-netbench). The three take turns within each session, the order rotating, and the
# figures are ratios taken within a session: this host's speed changes by up to 3x from one
# minute to the next, so only figures measured seconds apart compare.
#
# usage: scripts/bench-net-split.sh <build-dir> <out.jsonl>
# Environment: SESSIONS (default 12), PROVIDERS (default "tcp;ofi_rxm shm"), SIZES (default
# 8,64,512,4K), ITERS (round trips per repetition of the raw runs, default 3000).
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out.jsonl}
here=$(cd "$(dirname "$0")/.." && pwd)
netbench=$build/nccl_plugin/tools/mkernel-netbench
raw=$build/transport/tools/rawbench/mkernel-rawbench-ofi
for f in "$netbench" "$raw"; do
	[ -x "$f" ] || { echo "bench-net-split: $f is not built"; exit 1; }
done
sizes=${SIZES:-8,64,512,4K}
rev=$(git -C "$here" rev-parse --short HEAD)
dirty=$(git -C "$here" status --porcelain --untracked-files=no | grep -c . || true)
[ "$dirty" = 0 ] || rev="$rev-dirty"
export MKERNEL_OFI_IFACE=lo
: >"$out"

# tag SIDE SESSION: the records of one side of one session, with the run's fields (the plugin's
# records name their build's revision already; the raw tool's do not)
tag() {
	local git=",\"git\":\"$rev\""
	[ "$1" = plugin ] && git=""
	sed "s/}\$/,\"ab_side\":\"$1\",\"ab_session\":$2$git,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\"}/"
}

raw_side() { # provider endpoints session
	local iface=(--iface lo) port=$((20000 + RANDOM % 20000)) rc=0
	[ "$1" = shm ] && iface=() # shm has no interface; a source address names its region
	timeout 120 "$raw" --provider "$1" "${iface[@]}" --server "$port" >/dev/null &
	local srv=$!
	timeout 120 "$raw" --provider "$1" "${iface[@]}" --client "127.0.0.1:$port" --mode lat \
		--sizes "$sizes" --iters "${ITERS:-3000}" --warmup 300 --reps 5 --endpoints "$2" \
		| tag "raw-$2ep" "$3" >>"$out" || rc=$?
	wait "$srv" || rc=$?
	[ "$rc" = 0 ] || { echo "bench-net-split: raw $1 --endpoints $2 failed ($rc)"; exit 1; }
}

plugin_side() { # provider session
	local t
	t=$(mktemp)
	if ! "$netbench" --transport ofi --provider "$1" --sizes 8 --windows 1 --lat-sizes "$sizes" \
		--reps 5 --rounds 1 --warmup 1 --raw none --json "$t" >/dev/null 2>"$t.log"; then
		echo "bench-net-split: mkernel-netbench failed on $1"; cat "$t.log"; exit 1
	fi
	grep '"mode":"lat"' "$t" | grep '"path":"plugin"' | tag plugin "$2" >>"$out"
	rm -f "$t" "$t.log"
}

for s in $(seq 1 "${SESSIONS:-12}"); do
	for prov in ${PROVIDERS:-"tcp;ofi_rxm" shm}; do
		case $((s % 3)) in
		0) raw_side "$prov" 1 "$s"; raw_side "$prov" 2 "$s"; plugin_side "$prov" "$s" ;;
		1) raw_side "$prov" 2 "$s"; plugin_side "$prov" "$s"; raw_side "$prov" 1 "$s" ;;
		2) plugin_side "$prov" "$s"; raw_side "$prov" 1 "$s"; raw_side "$prov" 2 "$s" ;;
		esac
	done
done

python3 - "$out" <<'PY'
import collections, json, statistics, sys
sess = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r = json.loads(line)
    sess[(r["provider"], r["size"])].setdefault(r["ab_session"], {})[r["ab_side"]] = r["lat_us_median"]
print(f"{'provider':<12} {'size':>5} {'2 eps / 1 ep':>14} {'plugin / 2 eps':>15} {'plugin / 1 ep':>14}"
      "   (one-way latency, median of per-session ratios)")
for (prov, size), by in sorted(sess.items()):
    full = [v for v in by.values() if len(v) == 3]
    if not full:
        sys.exit(f"bench-net-split: no complete session for {prov} {size}")
    med = lambda a, b: statistics.median(v[a] / v[b] for v in full)
    print(f"{prov:<12} {size:>5} {med('raw-2ep', 'raw-1ep'):>14.2f} {med('plugin', 'raw-2ep'):>15.2f}"
          f" {med('plugin', 'raw-1ep'):>14.2f}   ({len(full)} sessions)")
PY
