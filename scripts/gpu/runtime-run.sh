#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Device runtime on a GPU host, in one go: what the host offers (GPU, NCCL libraries, MPS), the
# command-queue gpu test at full size for both slot-publication scopes (throughput and round-trip
# JSON lines), compute-sanitizer (memcheck, racecheck, synccheck) on the quick queue and roles
# tests, and the CPU-producer queue benchmark. Binaries come prebuilt in BIN (test-cmdq-gpu,
# test-cmdq-gpu-sysrel, test-roles-gpu, mkernel-bench-cmdq); logs go to OUTDIR.
# Usage: scripts/gpu/runtime-run.sh BIN OUTDIR [steps...]   (BIN: build files, or an unpacked bundle of scripts/bundle.sh)
#   steps: info test sanitize bench (default: all four)
# Exits non-zero when any step failed, naming each failed step (scripts/gpu/steps.sh).
set -uo pipefail
bin=$(cd "$1" && pwd)
if [ -f "$bin/env.sh" ]; then # an unpacked bundle (scripts/bundle.sh): its lib/ and bin/
	export LD_LIBRARY_PATH="$bin/lib:$bin/lib/fabric:${LD_LIBRARY_PATH:-}"
	bin=$bin/bin
fi
out=$2
shift 2
steps=${*:-info test sanitize bench}
mkdir -p "$out"
# shellcheck source=steps.sh
. "$(dirname "$0")/steps.sh"
# Never NVLink multicast, in this process tree or any it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"

for s in $steps; do
	case $s in
	info)
		echo "== host"
		{
			nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
			date -u
			nproc
			nvcc --version | tail -2
			command -v nvidia-cuda-mps-control || echo "no nvidia-cuda-mps-control"
			ls /usr/local/cuda/lib64/libnccl* 2>&1 | head -3
			python3 -c 'import nvidia.nccl, os; d = os.path.join(nvidia.nccl.__path__[0], "lib"); print(d, os.listdir(d))' 2>&1
			python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' 2>&1
			ls "$(python3 -c 'import nvidia.nccl, os; print(nvidia.nccl.__path__[0])' 2>/dev/null)/include" 2>&1 | head
		} 2>&1 | tee "$out/info.txt"
		# the facts above are for the log; only a missing GPU fails this step
		step gpu nvidia-smi -L
		;;
	test)
		for t in test-cmdq-gpu test-cmdq-gpu-sysrel test-roles-gpu; do
			echo "== $t"
			step "$t" timeout 90 "$bin/$t" >"$out/$t.log" 2>&1
			rc=$?
			cat "$out/$t.log"
			echo "$t exit: $rc"
		done
		;;
	sanitize)
		for t in test-cmdq-gpu test-roles-gpu; do
			for tool in memcheck racecheck synccheck; do
				echo "== compute-sanitizer --tool $tool $t --quick"
				step "sanitize-$t-$tool" timeout 120 compute-sanitizer --tool $tool \
					--error-exitcode 3 "$bin/$t" --quick >"$out/sanitize-$t-$tool.log" 2>&1
				rc=$?
				show -E "ERROR SUMMARY|FAIL|failure" "$out/sanitize-$t-$tool.log" | tail -3
				echo "$t $tool exit: $rc"
			done
		done
		;;
	bench)
		echo "== mkernel-bench-cmdq (CPU producer thread)"
		timeout 40 "$bin/mkernel-bench-cmdq" -n 4000000 -l 50000 2>&1 | tee "$out/bench-cmdq.log"
		check bench-cmdq $?
		;;
	*)
		fail_step "$s" "unknown step"
		;;
	esac
done
steps_done
