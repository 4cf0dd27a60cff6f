#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# GEMM engine on a GPU host, in one go: the gpu-suite test, the benchmark, compute-sanitizer
# (memcheck, racecheck) on the quick test, and an Nsight Compute profile of the engine and of
# cuBLAS at 8192^3. Binaries come prebuilt in BIN (test-gemm-gpu, mkernel-gemm-bench,
# libmkernel.so.0); logs go to OUTDIR.
# Usage: scripts/gpu/gemm-run.sh BIN OUTDIR [steps...]   (BIN: build files, or an unpacked bundle of scripts/bundle.sh)
#   steps: test bench bench2 (a second, for run-to-run spread) bench-normal (N(0,1) inputs)
#          prev (an earlier benchmark build, for A/B) torch (cuBLAS through PyTorch) sanitize ncu
#   (default: test bench sanitize ncu)
set -u
bin=$(cd "$1" && pwd)
if [ -f "$bin/env.sh" ]; then # an unpacked bundle (scripts/bundle.sh): its lib/ and bin/
	export LD_LIBRARY_PATH="$bin/lib:$bin/lib/fabric:${LD_LIBRARY_PATH:-}"
	bin=$bin/bin
fi
out=$2
shift 2
steps=${*:-test bench sanitize ncu}
mkdir -p "$out"
# Never NVLink multicast, in this process tree or any it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLAS from the Python wheels if the toolkit lacks it.
if ! ldconfig -p | grep -q libcublas.so.13 && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
	for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, x, "lib") for x in os.listdir(p)))' 2>/dev/null); do
		export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
	done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"
ldd "$bin/test-gemm-gpu" | grep -E "not found|cublas|cudart|mkernel" | tee -a "$out/gpu.txt"

for s in $steps; do
	case $s in
	test)
		echo "== test-gemm-gpu"
		timeout 150 "$bin/test-gemm-gpu" 2>&1 | tee "$out/test.log" | grep -vE '^ok'
		rc=${PIPESTATUS[0]}
		echo "test exit: $rc" | tee -a "$out/test.log"
		[ "$rc" = 124 ] && { echo "test hung: stopping"; exit 1; }
		echo "== test-gemm-gpu, per-thread store epilogue (MKERNEL_GEMM_NO_TMA_STORE=1)"
		MKERNEL_GEMM_NO_TMA_STORE=1 timeout 150 "$bin/test-gemm-gpu" >"$out/test-notma.log" 2>&1
		echo "test (no TMA store) exit: $?" | tee -a "$out/test-notma.log"
		grep -E "FAIL|passed" "$out/test-notma.log"
		;;
	bench | bench2)
		echo "== mkernel-gemm-bench ($s)"
		timeout 200 "$bin/mkernel-gemm-bench" --reps 50 --warmup 10 2>&1 | tee "$out/$s.log" | grep -v '^{'
		;;
	bench-normal)
		echo "== mkernel-gemm-bench --dist normal"
		timeout 200 "$bin/mkernel-gemm-bench" --reps 50 --warmup 10 --dist normal 2>&1 | tee "$out/$s.log" | grep -v '^{'
		;;
	prev)
		# An earlier build of the benchmark (BIN/mkernel-gemm-bench-prev), same run, for A/B.
		echo "== mkernel-gemm-bench-prev"
		timeout 200 "$bin/mkernel-gemm-bench-prev" --reps 50 --warmup 10 2>&1 | tee "$out/bench-prev.log" | grep -v '^{'
		;;
	torch)
		# Cross-check of the absolute cuBLAS rate through PyTorch, timed the same way (medians of
		# back-to-back event-timed runs after warm-ups).
		echo "== torch.matmul 8192^3 bf16"
		python3 - <<'PY' 2>&1 | tee "$out/torch.log"
import torch
def run(name, a, b):
    for _ in range(10):
        a @ b
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(50)]
    for s, e in ev:
        s.record(); a @ b; e.record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in ev)
    print("torch %s %-8s median %.4f ms = %.1f TFLOP/s" % (torch.__version__, name, t[25], 2 * 8192**3 / t[25] / 1e9))
n = 8192
run("normal", torch.randn(n, n, dtype=torch.bfloat16, device="cuda"), torch.randn(n, n, dtype=torch.bfloat16, device="cuda"))
run("uniform", torch.rand(n, n, device="cuda").mul(2).sub(1).bfloat16(), torch.rand(n, n, device="cuda").mul(2).sub(1).bfloat16())
PY
		;;
	sanitize)
		for tool in memcheck racecheck; do
			echo "== compute-sanitizer --tool $tool (quick)"
			timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 "$bin/test-gemm-gpu" --quick \
				>"$out/sanitize-$tool.log" 2>&1
			echo "$tool exit: $?" | tee -a "$out/sanitize-$tool.log"
			grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|Hazard|Invalid" "$out/sanitize-$tool.log" | sort | uniq -c | head -20
		done
		;;
	ncu)
		# One engine launch and the two cuBLAS launches per shape (after the 2 fill kernels).
		i=0
		for shape in "8192 8192 8192 NK" "8192 8192 512 NK"; do
			i=$((i + 1))
			echo "== ncu $shape: engine, cublasGemmEx, cublasLt"
			timeout 200 ncu --clock-control none --launch-skip 2 --launch-count 3 \
				--section SpeedOfLight --section ComputeWorkloadAnalysis \
				--section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
				--section WarpStateStats --section SchedulerStats \
				"$bin/mkernel-gemm-bench" --shape $shape --reps 1 --warmup 1 >"$out/ncu$i.txt" 2>&1
			echo "ncu exit: $?"
			grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Hit Rate |Issue Slots Busy|No Eligible" "$out/ncu$i.txt" | head -40
		done
		;;
	esac
done
