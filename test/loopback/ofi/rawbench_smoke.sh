#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Runs mkernel-rawbench-ofi briefly on tcp;ofi_rxm over lo in both modes and checks that the
# client printed one JSON record per size with a positive figure, measured with every method
# (tagged send/recv, RMA write, and the write in two parts where the tool offers it), the best
# one named and reported; then again with
# --endpoints 2 (one endpoint to send from, one to receive on), whose records must say so. Exit
# 77: provider absent.
set -uo pipefail
bench=$1
prov='tcp;ofi_rxm'
dir=$(mktemp -d)
trap 'kill "$srv" 2>/dev/null; rm -rf "$dir"' EXIT

run_mode() {
    mode=$1 key=$2 eps=$3
    # the backgrounded server truncates its output file only once it has started: the old
    # server's "listening" line must not be there for the loop below to read its dead port
    rm -f "$dir/srv"
    timeout 60 "$bench" --provider "$prov" --iface lo --server 0 >"$dir/srv" 2>&1 &
    srv=$!
    port=''
    for _ in $(seq 100); do
        port=$(awk '/^listening/ {print $2}' "$dir/srv" 2>/dev/null)
        [ -n "$port" ] && break
        if ! kill -0 "$srv" 2>/dev/null; then
            wait "$srv"
            rc=$?
            [ "$rc" -eq 77 ] && exit 77
            echo "server exited with $rc: $(cat "$dir/srv")"
            exit 1
        fi
        sleep 0.1
    done
    [ -n "$port" ] || { echo "server never listened"; exit 1; }
    timeout 60 "$bench" --provider "$prov" --iface lo --client "127.0.0.1:$port" --mode "$mode" \
        --sizes 4096,65536 --window 8 --iters 200 --warmup 20 --reps 3 --endpoints "$eps" >"$dir/out" || {
        echo "client failed in $mode mode, $eps endpoints"; exit 1; }
    wait "$srv" || { echo "server failed in $mode mode, $eps endpoints"; exit 1; }
    cat "$dir/out"
    n=$(grep -c "\"tool\":\"rawbench-ofi\",\"provider\":\"$prov\",\"mode\":\"$mode\"" "$dir/out")
    [ "$n" -eq 2 ] || { echo "expected 2 $mode records, got $n"; exit 1; }
    # every median must be a positive number
    if grep -o "\"${key}_median\":[0-9.]*" "$dir/out" | awk -F: '$2 <= 0 {bad=1} END {exit !bad}'; then
        echo "non-positive $key"; exit 1
    fi
    # both methods ran, and the reported figure is the better of the two
    python3 - "$dir/out" "$key" "$eps" <<'PY' || exit 1
import json, sys
key, eps = sys.argv[2], int(sys.argv[3])
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    # every method the tool ran (tagged, write, and the write in two parts where offered)
    meds = {m: r[f"{m}_{key}_median"] for m in ("tagged", "write", "split")
            if f"{m}_{key}_median" in r}
    assert "tagged" in meds and "write" in meds, r
    for m in meds:
        assert len(r[f"{m}_{key}"]) == r["reps"], r
    best = max(meds.values()) if key == "gbps" else min(meds.values())
    assert r["method"] in meds and meds[r["method"]] == best, r
    assert r[f"{key}_median"] == best, r
    assert r["endpoints"] == eps, r
PY
}

for eps in 1 2; do
    run_mode bw gbps "$eps"
    run_mode lat lat_us "$eps"
done
echo "ok - rawbench bw and lat on $prov, one and two endpoints"
