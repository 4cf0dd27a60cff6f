#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The attention work on a GPU host, in one go. The engine (mkAttention): the gpu-suite test
# (Hopper path), the same test with the portable path forced, compute-sanitizer (memcheck,
# racecheck) on the quick test, the C benchmark, and the comparison with PyTorch SDPA (every
# backend that runs) in one process. Ring attention (mkRingAttention): the per-rank test on the
# layouts s, a, b, c (MPS where ranks share the GPU) and with a rank killed, the emulated C
# benchmark (fused against ncclAllGather + the engine and a ring of ncclSend/ncclRecv + the
# engine) and the emulated PyTorch one (against all-gather + SDPA and a ring of flash calls).
# SRC is an unpacked bundle of scripts/bundle.sh or a build directory made elsewhere; logs go to
# OUTDIR. A failing step makes the script exit non-zero after the other steps ran, naming it.
# Usage: scripts/gpu/attn-run.sh SRC OUTDIR [steps...]
#   steps: test portable sanitize bench torch torch-quick ring ring-kill ring-bench ring-torch
#   (default: test portable ring ring-kill)
#   RING_BENCH_ARGS: options of attn_ring_bench.py (e.g. --seqs 1536,3072 --causal 1)
set -u -o pipefail
src=$(cd "$1" && pwd)
out=$2
shift 2
steps=${*:-test portable ring ring-kill}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# Never NVLink multicast, in this process tree or any it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# shellcheck source=python-env.sh
. "$here/python-env.sh"
mk_use "$src" || exit 1
# cuBLAS (libmkernel.so's other dependency) from the Python wheels if the toolkit lacks it.
for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, x, "lib") for x in os.listdir(p)))' 2>/dev/null); do
	export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
# A binary of this build: bin/ of a bundle, or its place in a build directory.
bin_of() {
	for f in "$MK_BIN/$1" "$src/test/gpu/attn/$1" "$src/test/gpu/ops/$1"; do
		[ -x "$f" ] && { echo "$f"; return; }
	done
	echo "$MK_BIN/$1"
}
test_bin=$(bin_of test-attn-gpu)
bench_bin=$(bin_of mkernel-attn-bench)
ring_bin=$(bin_of test-ring-attention-gpu)
lib=${MKERNEL_LIB:-$src/fused/libmkernel.so.0}
[ -d "$lib" ] && lib=$lib/libmkernel.so.0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"
ldd "$test_bin" "$ring_bin" | grep -E "not found|cudart|mkernel|nccl|cublas" | tee -a "$out/gpu.txt"
fail=0

for s in $steps; do
	case $s in
	test)
		echo "== test-attn-gpu (Hopper path)"
		# the log has every case as it starts ("# > ..."); the console only the rest
		timeout 420 "$test_bin" 2>&1 | tee "$out/test.log" | grep -vE '^(ok|# >)'
		rc=${PIPESTATUS[0]}
		echo "test exit: $rc" | tee -a "$out/test.log"
		[ "$rc" = 0 ] || { echo "step test failed ($rc)"; fail=1; }
		[ "$rc" = 124 ] && { echo "test hung: stopping"; exit 1; }
		;;
	portable)
		echo "== test-attn-gpu, MKERNEL_ATTN_FORCE_PORTABLE=1 --quick --expect-portable"
		MKERNEL_ATTN_FORCE_PORTABLE=1 timeout 300 "$test_bin" --quick --expect-portable \
			>"$out/test-portable.log" 2>&1
		rc=$?
		echo "test (portable) exit: $rc" | tee -a "$out/test-portable.log"
		grep -E "FAIL|HANG|passed" "$out/test-portable.log"
		[ "$rc" = 0 ] || { echo "step portable failed ($rc)"; fail=1; }
		;;
	sanitize)
		for tool in memcheck racecheck; do
			echo "== compute-sanitizer --tool $tool (quick)"
			timeout 500 compute-sanitizer --tool $tool --error-exitcode 3 "$test_bin" --quick \
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
		timeout 400 "$bench_bin" --reps 10 --warmup 3 2>&1 | tee "$out/bench.log" | grep -v '^{'
		[ "${PIPESTATUS[0]}" = 0 ] || { echo "step bench failed"; fail=1; }
		;;
	torch | torch-quick)
		seqs=4096,8192,16384,32768,65536
		[ "$s" = torch-quick ] && seqs=4096,8192
		echo "== attn_bench.py (mkAttention vs SDPA backends, S = $seqs)"
		timeout 500 python3 "$here/attn_bench.py" --lib "$lib" --seqs "$seqs" 2>&1 |
			tee "$out/$s.log" | grep -v '^{'
		[ "${PIPESTATUS[0]}" = 0 ] || { echo "step $s failed"; fail=1; }
		;;
	ring)
		for l in s a b c; do
			mps=1
			[ "$l" = s ] && mps=0
			echo "== test-ring-attention-gpu layout $l"
			MPS=$mps RANK_TIMEOUT=200 "$here/runtime-comm.sh" "$ring_bin" "$l" >"$out/ring-$l.log" 2>&1
			rc=$?
			grep -E 'FAIL|WATCHDOG|failure|node [0-9]|WARN|exit' "$out/ring-$l.log" | head -40
			echo "ring $l exit: $rc"
			[ "$rc" = 0 ] || { echo "step ring-$l failed ($rc)"; fail=1; }
		done
		;;
	ring-kill)
		echo "== test-ring-attention-gpu layout c, the last rank killed"
		MPS=1 RANK_TIMEOUT=90 "$here/runtime-comm.sh" "$ring_bin" c --kill >"$out/ring-kill.log" 2>&1
		rc=$?
		grep -E 'FAIL|WATCHDOG|dead peer|dying|exit' "$out/ring-kill.log" | head -20
		echo "ring-kill exit: $rc"
		[ "$rc" = 0 ] || { echo "step ring-kill failed ($rc)"; fail=1; }
		;;
	ring-bench)
		for l in a c; do
			echo "== test-ring-attention-gpu --bench layout $l (emulated: ranks share the GPU)"
			MPS=1 RANK_TIMEOUT=280 "$here/runtime-comm.sh" "$ring_bin" "$l" --bench >"$out/ring-bench-$l.log" 2>&1
			rc=$?
			grep -E '^\{|FAIL|WATCHDOG|exit' "$out/ring-bench-$l.log" | head -40
			[ "$rc" = 0 ] || { echo "step ring-bench-$l failed ($rc)"; fail=1; }
		done
		;;
	ring-torch)
		echo "== attn_ring_bench.py on layout c (emulated: 4 ranks on one GPU)"
		# shellcheck disable=SC2086
		RANK_TIMEOUT=500 timeout 560 "$here/python-run.sh" "$src" c "$here/attn_ring_bench.py" ${RING_BENCH_ARGS:-} \
			>"$out/ring-torch.log" 2>&1
		rc=$?
		grep -E '^\||FAIL|Traceback|Error' "$out/ring-torch.log" | head -40
		[ "$rc" = 0 ] || { echo "step ring-torch failed ($rc)"; fail=1; }
		;;
	*)
		echo "unknown step $s"
		fail=1
		;;
	esac
done
exit $fail
