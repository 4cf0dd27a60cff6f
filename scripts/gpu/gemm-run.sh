#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# mkGemm and the GEMM engine on a GPU host, step by step. Binaries come prebuilt in BIN
# (scripts/gpu/gemm-pack.sh: test-gemm-gpu, mkernel-gemm-bench, mkernel-calibrate,
# libmkernel.so.0); logs and data go to OUTDIR. Every step says its exit status; the script exits
# non-zero when any step failed, naming it.
# Usage: scripts/gpu/gemm-run.sh BIN OUTDIR [steps...]   (BIN: build files, or an unpacked bundle of scripts/bundle.sh)
#   test         test-gemm-gpu: every engine variant through mkGemm's dispatch, hooks, epilogues
#   test-notma   the same with per-thread store epilogues (MKERNEL_GEMM_NO_TMA_STORE=1)
#   calibrate    mkernel-calibrate --out <outdir>/calib.txt (JSON lines in <outdir>/calibrate.jsonl)
#   bench-cal    the mkGemm grid against cuBLAS with <outdir>/calib.txt (MKERNEL_CALIBRATION)
#   bench        the mkGemm grid against cuBLAS with the built-in calibration table
#   engine       the engine's default variant against cuBLAS (square, K = N/16, SM limits)
#   torch        mkGemm against torch.matmul / F.linear through ctypes (scripts/gpu/gemm_torch.py)
#   sanitize     compute-sanitizer memcheck and racecheck on test-gemm-gpu --quick
#   ncu          Nsight Compute of the engine and cuBLAS at 8192^3 and 16 x 4096 x 4096
#   (default: test calibrate bench-cal)
set -uo pipefail
bin=$(cd "$1" && pwd)
if [ -f "$bin/env.sh" ]; then # an unpacked bundle (scripts/bundle.sh): its lib/ and bin/
	export LD_LIBRARY_PATH="$bin/lib:$bin/lib/fabric:${LD_LIBRARY_PATH:-}"
	bin=$bin/bin
fi
out=$2
shift 2
steps=${*:-test calibrate bench-cal}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Never NVLink multicast, in this process tree or any it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$bin:${nccl_lib:+$nccl_lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLAS from the Python wheels if the toolkit lacks it.
if ! ldconfig -p | grep -q libcublas.so.13 && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
	for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, x, "lib") for x in os.listdir(p)))' 2>/dev/null); do
		export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
	done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"
ldd "$bin/test-gemm-gpu" | grep -E "not found|cublas|cudart|nccl" | tee -a "$out/gpu.txt"
failed=()

# The summary line of a benchmark log and every cell below 1.0 (ratio against the baseline).
summary() {
	python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    j = json.loads(line)
    if j["bench"].endswith("summary"):
        print(line.strip())
    elif j.get("ratio", 9) < 1.0:
        print("below 1.0: %(m)d x %(n)d x %(k)d %(b_layout)s ratio %(ratio).3f" % j,
              "path", j.get("path", "-"), "mk %.4f base %.4f ms" % (j.get("mk_ms", 0), j.get("baseline_ms", j.get("torch_ms", 0))))
PY
}

# step NAME TIMEOUT CMD...: run, keep the log, say the exit status; a timeout is a hang.
step() {
	local name=$1 limit=$2 rc
	shift 2
	echo "== $name: $*"
	timeout "$limit" "$@" >"$out/$name.log" 2>&1
	rc=$?
	echo "$name exit: $rc" | tee -a "$out/$name.log"
	[ "$rc" = 124 ] && echo "$name: TIMEOUT after $limit s"
	[ "$rc" = 0 ] || failed+=("$name")
	return 0
}

for s in $steps; do
	case $s in
	test)
		step test 240 "$bin/test-gemm-gpu"
		grep -E "^FAIL|first wrong|HANG|passed, " "$out/test.log" | head -60
		if grep -q "HANG" "$out/test.log"; then
			# a hung variant would hang the calibration and the benchmark too
			echo "gemm-run: a kernel hung in the test; the other steps are skipped"
			break
		fi
		;;
	test-notma)
		step test-notma 300 env MKERNEL_GEMM_NO_TMA_STORE=1 "$bin/test-gemm-gpu"
		grep -E "^FAIL|first wrong|HANG|passed, " "$out/test-notma.log" | head -40
		;;
	calibrate)
		step calibrate 170 bash -c "\"$bin/mkernel-calibrate\" --reps 9 --out \"$out/calib.txt\" --json 2>\"$out/calibrate.jsonl\""
		grep -E "WRONG|failed|left out|HANG" "$out/calibrate.jsonl" "$out/calib.txt" | head -20
		echo "calibration: $(grep -c '^gemm' "$out/calib.txt" 2>/dev/null) records in $out/calib.txt"
		;;
	bench-cal)
		if [ ! -s "$out/calib.txt" ]; then
			echo "bench-cal: no $out/calib.txt (run calibrate first)"
			failed+=(bench-cal)
			continue
		fi
		step bench-cal 300 env MKERNEL_CALIBRATION="$out/calib.txt" "$bin/mkernel-gemm-bench" --reps 1000 --warmup 5
		summary "$out/bench-cal.log"
		;;
	bench)
		# Up to 1000 repetitions: with 100, a 7-10 us cell's median moved by 0.5 us (the
		# same cuBLASLt algorithm on both sides read 0.93-1.0); the 0.5 s per shape cap holds.
		step bench 300 "$bin/mkernel-gemm-bench" --reps 1000 --warmup 5
		summary "$out/bench.log"
		;;
	engine)
		step engine 300 "$bin/mkernel-gemm-bench" --engine --reps 50 --warmup 10
		grep -vE '^\{' "$out/engine.log" | head -30
		;;
	torch)
		step torch 400 python3 "$here/scripts/gpu/gemm_torch.py" "$bin/libmkernel.so.0" ${MKERNEL_CALIBRATION:+--calibration "$MKERNEL_CALIBRATION"}
		summary "$out/torch.log"
		;;
	sanitize)
		for tool in memcheck racecheck; do
			step "sanitize-$tool" 400 compute-sanitizer --tool $tool --error-exitcode 3 "$bin/test-gemm-gpu" --quick
			grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|Hazard|Invalid" "$out/sanitize-$tool.log" | sort | uniq -c | head -20
		done
		;;
	ncu)
		# One launch each of mkGemm (the engine path) and the two cuBLAS calls per shape.
		i=0
		for shape in "8192 8192 8192 NK" "16 4096 4096 NK"; do
			i=$((i + 1))
			step "ncu$i" 300 ncu --clock-control none --launch-skip 4 --launch-count 6 \
				--section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
				"$bin/mkernel-gemm-bench" --shape $shape --reps 10 --warmup 1
			grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Hit Rate " "$out/ncu$i.log" | head -40
		done
		;;
	*)
		echo "unknown step $s"
		failed+=("$s")
		;;
	esac
done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "gemm-run: failed steps: ${failed[*]}"
	exit 1
fi
echo "gemm-run: every step passed"
