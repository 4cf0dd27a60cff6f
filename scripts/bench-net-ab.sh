#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# An A/B of the plugin against itself on this host: mkernel-netbench with setting A and with
# setting B in turn, session after session (the order flipping each session), small-message
# bandwidth and one-way latency. Each side is an environment assignment (MKERNEL_X=1) and,
# optionally, a plugin library (PLUGIN_A, PLUGIN_B: compare two builds). Prints, per point, the
# median over sessions of the per-session ratio B / A (bandwidth: above 1 is B faster; latency:
# below 1 is B faster): this host's speed drifts by up to 3x from one minute to the next, so only
# figures taken seconds apart compare.
#
# usage: scripts/bench-net-ab.sh <build-dir> <out.jsonl> 'VAR=a' 'VAR=b'
# Environment: SESSIONS (default 12), PROVIDER (default tcp;ofi_rxm), SIZES (default
# 8,64,512,4K), WINDOWS (default 1,8,32), LAT_SIZES (default SIZES), REPS (default 3),
# PLUGIN_A, PLUGIN_B.
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out.jsonl}
env_a=${3:?setting A, e.g. MKERNEL_OFI_SHARED_EP=0}
env_b=${4:?setting B, e.g. MKERNEL_OFI_SHARED_EP=1}
netbench=$build/nccl_plugin/tools/mkernel-netbench
[ -x "$netbench" ] || { echo "bench-net-ab: $netbench is not built"; exit 1; }
prov=${PROVIDER:-tcp;ofi_rxm}
sizes=${SIZES:-8,64,512,4K}
export MKERNEL_OFI_IFACE=lo
: >"$out"

side() { # A|B session
	local setting plugin=() t
	if [ "$1" = A ]; then setting=$env_a; [ -n "${PLUGIN_A:-}" ] && plugin=(--plugin "$PLUGIN_A"); fi
	if [ "$1" = B ]; then setting=$env_b; [ -n "${PLUGIN_B:-}" ] && plugin=(--plugin "$PLUGIN_B"); fi
	t=$(mktemp)
	if ! env "$setting" "$netbench" "${plugin[@]}" --transport ofi --provider "$prov" \
		--sizes "$sizes" --windows "${WINDOWS:-1,8,32}" --lat-sizes "${LAT_SIZES:-$sizes}" \
		--reps "${REPS:-3}" --rounds 1 --warmup 1 --raw none --json "$t" >/dev/null 2>"$t.log"; then
		echo "bench-net-ab: mkernel-netbench failed with $setting"; cat "$t.log"; exit 1
	fi
	grep '"path":"plugin"' "$t" | sed "s/}\$/,\"ab_side\":\"$1\",\"ab_setting\":\"$setting\",\"ab_session\":$2,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\"}/" >>"$out"
	rm -f "$t" "$t.log"
}

for s in $(seq 1 "${SESSIONS:-12}"); do
	if [ $((s % 2)) = 1 ]; then side A "$s"; side B "$s"; else side B "$s"; side A "$s"; fi
done

python3 - "$out" "$env_a" "$env_b" <<'PY'
import collections, json, statistics, sys
pts = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["mode"], r["size"], r.get("window", 1))
    v = r["gbps_median"] if r["mode"] == "bw" else r["lat_us_median"]
    pts[key].setdefault(r["ab_session"], {})[r["ab_side"]] = v
print(f"B / A, B = {sys.argv[3]}, A = {sys.argv[2]}: median of per-session ratios [range]")
for (mode, size, win), by in sorted(pts.items()):
    rat = sorted(v["B"] / v["A"] for v in by.values() if len(v) == 2)
    if not rat:
        sys.exit(f"bench-net-ab: no complete session at {mode} {size}")
    what = f"bw {size} B x{win}" if mode == "bw" else f"lat {size} B"
    print(f"{what:<16} {statistics.median(rat):6.3f} [{rat[0]:.2f}-{rat[-1]:.2f}]  ({len(rat)} sessions)")
PY
