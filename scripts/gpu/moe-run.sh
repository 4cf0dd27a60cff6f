#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The MoE work on a GPU host, in one go. Grouped GEMM (mkGroupedGemm): the gpu test (Hopper
# kernel and API), the same with the portable kernel forced, the benchmark against cuBLAS per
# expert, the comparison with torch._grouped_mm through PyTorch in the same process, and
# compute-sanitizer (memcheck, racecheck) on the quick test. MoE ops (mkMoeDispatchGemm,
# mkMoeGemmCombine): the per-rank test on layouts s, a, b, c (MPS where ranks share the GPU) and
# with a rank killed. Binaries come prebuilt in BIN (scripts/gpu/moe-stage.sh); libfabric for the
# comm's transport from .carry/root like scripts/gpu/runtime-all.sh; logs go to OUTDIR. A failing
# or hanging step makes the script exit non-zero after the other steps ran, naming the step.
# BIN may also be an unpacked bundle of scripts/bundle.sh (its lib/, lib/fabric/ and bin/).
# Usage: scripts/gpu/moe-run.sh BIN OUTDIR [steps...]
#   steps: test portable bench torch sanitize moe moe-kill   (default: all, in this order)
#          moe-bench: emulated multi-rank MoE benchmark against all_to_all_single +
#          torch._grouped_mm on layout c (MOE_BENCH_ARGS for moe_bench.py, e.g. --tokens)
set -uo pipefail
src=$(cd "$1" && pwd) # what python-run.sh takes: the bundle or the build folder
bin=$src
so=$bin/libmkernel.so.0
if [ -f "$bin/env.sh" ]; then # an unpacked bundle: its libraries, its binaries
	export LD_LIBRARY_PATH="$bin/lib:$bin/lib/fabric:${LD_LIBRARY_PATH:-}"
	so=$bin/lib/libmkernel.so.0
	bin=$bin/bin
fi
out=$2
shift 2
steps=${*:-test portable bench torch sanitize moe moe-kill}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
mkdir -p "$out"
# Never NVLink multicast, in this process tree or any it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$bin:$root/.carry/root/usr/lib/x86_64-linux-gnu:${nccl_lib:+$nccl_lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLAS from the Python wheels if the toolkit lacks it.
if ! ldconfig -p | grep -q libcublas.so.13 && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
	for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, x, "lib") for x in os.listdir(p)))' 2>/dev/null); do
		export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
	done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"
ldd "$bin/test-grouped-gpu" "$bin/mkernel-grouped-bench" | grep -E "not found|cublas|cudart|mkernel" | tee -a "$out/gpu.txt"

failed=""
step() { # name, exit code
	echo "== $1: exit $2"
	[ "$2" = 0 ] || failed="$failed $1($2)"
}
for s in $steps; do
	case $s in
	test)
		echo "== test-grouped-gpu"
		timeout 400 "$bin/test-grouped-gpu" 2>&1 | tee "$out/test.log" | grep -vE '^ok'
		step test "${PIPESTATUS[0]}"
		;;
	portable)
		echo "== test-grouped-gpu --quick --expect-portable (MKERNEL_GROUPED_FORCE_PORTABLE=1)"
		MKERNEL_GROUPED_FORCE_PORTABLE=1 timeout 300 "$bin/test-grouped-gpu" --quick --expect-portable \
			2>&1 | tee "$out/test-portable.log" | grep -vE '^ok'
		step portable "${PIPESTATUS[0]}"
		;;
	bench)
		echo "== mkernel-grouped-bench"
		timeout 300 "$bin/mkernel-grouped-bench" --reps 50 --warmup 10 2>&1 | tee "$out/bench.log" | grep -v '^{'
		step bench "${PIPESTATUS[0]}"
		;;
	torch)
		echo "== moe_grouped_bench.py (torch._grouped_mm, same process)"
		timeout 300 python3 "$here/moe_grouped_bench.py" "$so" --reps 50 --warmup 10 \
			2>&1 | tee "$out/torch.log" | grep -v '^{'
		step torch "${PIPESTATUS[0]}"
		;;
	sanitize)
		for tool in memcheck racecheck; do
			echo "== compute-sanitizer --tool $tool (quick)"
			timeout 400 compute-sanitizer --tool $tool --error-exitcode 3 "$bin/test-grouped-gpu" --quick --deadline 350 \
				>"$out/sanitize-$tool.log" 2>&1
			rc=$?
			grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|Hazard|Invalid" "$out/sanitize-$tool.log" | sort | uniq -c | head -20
			step "sanitize-$tool" "$rc"
		done
		;;
	moe)
		for l in s a b c; do
			mps=1
			[ "$l" = s ] && mps=0
			echo "== test-moe-gpu layout $l"
			MPS=$mps RANK_TIMEOUT=${MOE_RANK_TIMEOUT:-240} "$here/runtime-comm.sh" "$bin/test-moe-gpu" "$l" >"$out/moe-$l.log" 2>&1
			rc=$?
			grep -E 'FAIL|failure|node [0-9]|first|WARN|exit' "$out/moe-$l.log" | head -40
			step "moe-$l" "$rc"
		done
		;;
	moe-bench)
		echo "== moe_bench.py on layout c (emulated: 4 ranks on one GPU)"
		RANK_TIMEOUT=500 timeout 560 "$here/python-run.sh" "$src" c "$here/moe_bench.py" ${MOE_BENCH_ARGS:-} \
			>"$out/moe-bench.log" 2>&1
		rc=$?
		grep -E '^\||FAIL|Traceback|Error' "$out/moe-bench.log" | head -40
		step moe-bench "$rc"
		;;
	moe-kill)
		echo "== test-moe-gpu layout c, the last rank killed"
		MPS=1 RANK_TIMEOUT=60 "$here/runtime-comm.sh" "$bin/test-moe-gpu" c --kill >"$out/moe-kill.log" 2>&1
		rc=$?
		grep -E 'FAIL|dead rank|dying|exit' "$out/moe-kill.log" | head -20
		step moe-kill "$rc"
		;;
	*)
		echo "unknown step $s"
		failed="$failed $s(unknown)"
		;;
	esac
done
if [ -n "$failed" ]; then
	echo "FAILED steps:$failed"
	exit 1
fi
echo "all steps passed: $steps"
