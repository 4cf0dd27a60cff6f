#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The attention engine on a GPU host, in one go: the gpu-suite test (Hopper path), the same test
# with the portable path forced, compute-sanitizer (memcheck, racecheck) on the quick test, the
# C benchmark, and the comparison with PyTorch SDPA (every backend that runs) in one process.
# BUILD is a build directory made elsewhere (binaries link cudart and libmkernel.so shared);
# logs go to OUTDIR.
# Usage: scripts/gpu/attn-run.sh BUILD OUTDIR [steps...]
#   steps: test portable sanitize bench torch torch-quick (default: test portable bench torch)
set -u -o pipefail
build=$(cd "$1" && pwd)
out=$2
shift 2
steps=${*:-test portable bench torch}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# Never NVLink multicast, in this process tree or any it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$build/fused:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NCCL and cuBLAS (libmkernel.so's other dependencies) from the Python wheels if the toolkit
# lacks them.
for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, x, "lib") for x in os.listdir(p)))' 2>/dev/null); do
	export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
test_bin=$build/test/gpu/attn/test-attn-gpu
bench_bin=$build/test/gpu/attn/mkernel-attn-bench
lib=$build/fused/libmkernel.so.0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"
ldd "$test_bin" | grep -E "not found|cudart|mkernel|nccl|cublas" | tee -a "$out/gpu.txt"
fail=0

for s in $steps; do
	case $s in
	test)
		echo "== test-attn-gpu (Hopper path)"
		timeout 900 "$test_bin" 2>&1 | tee "$out/test.log" | grep -vE '^ok'
		rc=${PIPESTATUS[0]}
		echo "test exit: $rc" | tee -a "$out/test.log"
		[ "$rc" = 0 ] || { echo "step test failed ($rc)"; fail=1; }
		[ "$rc" = 124 ] && { echo "test hung: stopping"; exit 1; }
		;;
	portable)
		echo "== test-attn-gpu, MKERNEL_ATTN_FORCE_PORTABLE=1 --quick --expect-portable"
		MKERNEL_ATTN_FORCE_PORTABLE=1 timeout 600 "$test_bin" --quick --expect-portable \
			>"$out/test-portable.log" 2>&1
		rc=$?
		echo "test (portable) exit: $rc" | tee -a "$out/test-portable.log"
		grep -E "FAIL|HANG|passed" "$out/test-portable.log"
		[ "$rc" = 0 ] || { echo "step portable failed ($rc)"; fail=1; }
		;;
	sanitize)
		for tool in memcheck racecheck; do
			echo "== compute-sanitizer --tool $tool (quick)"
			timeout 900 compute-sanitizer --tool $tool --error-exitcode 3 "$test_bin" --quick \
				--sanitize >"$out/sanitize-$tool.log" 2>&1
			rc=$?
			echo "$tool exit: $rc" | tee -a "$out/sanitize-$tool.log"
			grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|Hazard|Invalid|HANG" \
				"$out/sanitize-$tool.log" | sort | uniq -c | head -20
			[ "$rc" = 0 ] || { echo "step sanitize ($tool) failed ($rc)"; fail=1; }
		done
		;;
	bench)
		echo "== mkernel-attn-bench"
		timeout 600 "$bench_bin" --reps 10 --warmup 3 2>&1 | tee "$out/bench.log" | grep -v '^{'
		[ "${PIPESTATUS[0]}" = 0 ] || { echo "step bench failed"; fail=1; }
		;;
	torch | torch-quick)
		seqs=4096,8192,16384,32768,65536
		[ "$s" = torch-quick ] && seqs=4096,8192
		echo "== attn_bench.py (mkAttention vs SDPA backends, S = $seqs)"
		timeout 900 python3 "$here/attn_bench.py" --lib "$lib" --seqs "$seqs" 2>&1 |
			tee "$out/$s.log" | grep -v '^{'
		[ "${PIPESTATUS[0]}" = 0 ] || { echo "step $s failed"; fail=1; }
		;;
	*)
		echo "unknown step $s"
		fail=1
		;;
	esac
done
exit $fail
