#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# mkGemmAllReduce on one GPU host, per layout (scripts/gpu/runtime-comm.sh: s 1 rank, b 1 node x
# 2 ranks, a 2 nodes x 1 rank, c 2 nodes x 2 ranks; b and c under MPS): the GPU test (every path,
# asserted), and with OPTS="--paths" the paths benchmark against cuBLAS + ncclAllReduce, with
# "--bench" the fused sweep and adaptive against static splits ("--splits": the splits alone).
# Binaries from scripts/gpu/gemm-pack.sh in BIN; libfabric under .carry/root for a and c.
# Per layout into OUTDIR: the ranks' log, rank 0's JSON lines (gar-LAYOUT.jsonl) and the
# calibration records it measured (<outdir>/calib-gar-<layout>.txt: append them to a calibration file).
# Prints the cells below 1.0 and the adaptive splits below 0.95 of the best static one. Exits
# non-zero when a layout failed, naming it.
# Usage: OPTS="--paths" scripts/gpu/gemm-allreduce-run.sh BIN OUTDIR [layouts...]  (default s b a c)
set -uo pipefail
bin=$(cd "$1" && pwd)
out=$2
shift 2
layouts=${*:-s b a c}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$here/.carry/root/usr/lib/x86_64-linux-gnu:${nccl_lib:+$nccl_lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
failed=()
for l in $layouts; do
	log=$out/gar-$l.log
	echo "== mkGemmAllReduce layout $l ${OPTS:-}"
	mps=1
	[ "$l" = s ] && mps=0
	# shellcheck disable=SC2086
	MPS=$mps RANK_TIMEOUT=${RANK_TIMEOUT:-560} "$here/scripts/gpu/runtime-comm.sh" \
		"$bin/test-gar-gpu" "$l" ${OPTS:-} >"$log" 2>&1
	rc=$?
	echo "layout $l exit: $rc"
	[ "$rc" = 0 ] || failed+=("$l")
	# rank 0's output: the JSON lines and the calibration records
	awk '/^---- rank 0 /{r0=1; next} /^---- rank /{r0=0} r0' "$log" >"$out/rank0-$l.log"
	grep '^{' "$out/rank0-$l.log" >"$out/gar-$l.jsonl"
	sed -n 's/^calib: //p' "$out/rank0-$l.log" >"$out/calib-gar-$l.txt"
	grep -hE "FAIL|failure|HANG|timed out|cost model at" "$log" | head -20
	python3 - "$out/gar-$l.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["bench"] == "gemm_allreduce_paths":
        flag = "BELOW 1.0 " if j["ratio"] < 1.0 else ""
        print("%spaths %5d x %d x %d: %-7s ratio %.3f (%.4f vs %.4f ms)" % (
            flag, j["m"], j["n"], j["k"], j["path"], j["ratio"], j["auto_ms"],
            j["cublas_nccl_ms"]))
    elif j["bench"] == "gemm_allreduce_splits":
        if j["best_static_over_adaptive"] < 0.95:
            print("ADAPTIVE BELOW 0.95: m %(m)d best static %(best_static_ms).4f adaptive %(adaptive_ms).4f" % j)
        if j.get("heldout_best_static_over_adaptive", 1.0) < 0.95:
            print("ADAPTIVE BELOW 0.95 (held out): m %(m)d ratio %(heldout_best_static_over_adaptive).3f" % j)
PY
done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "gemm-allreduce-run: failed layouts: ${failed[*]}"
	exit 1
fi
echo "gemm-allreduce-run: every layout passed"
