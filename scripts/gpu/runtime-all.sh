#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Everything of the device runtime on one GPU host, in two phases that each fit one call:
#   test:  queue and roles tests, the comm test on every layout (a: 2 nodes x 1 rank, b: 1 node
#          x 2 ranks, c: 2 nodes x 2 ranks, a4: 4 nodes x 1 rank) and a rank killed mid-op on
#          a, b and c;
#   extra: compute-sanitizer on the queue, roles and comm tests, the benchmarks on a, b and c,
#          the CPU queue benchmark;
#   bench: the benchmarks on a, b and c only;
#   gar:   mkGemmAllReduce on layouts s (1 rank), b, a and c (GAR_LAYOUTS picks); GAR_BENCH="s b"
#          adds its benchmark on those layouts; GAR_QUICK=1 stops both at 4096.
# Layouts with several ranks per node run under MPS (their kernels wait for each other).
# Key lines go to stdout; all logs into OUTDIR/rt-PHASE.tgz.
# Usage: scripts/gpu/runtime-all.sh BIN OUTDIR [test|extra|bench|gar|all]   (libfabric under .carry/root; BIN may be an unpacked bundle of scripts/bundle.sh)
# Exits non-zero when any step failed, naming each failed step (scripts/gpu/steps.sh).
set -uo pipefail
bin=$(cd "$1" && pwd)
if [ -f "$bin/env.sh" ]; then # an unpacked bundle (scripts/bundle.sh): its lib/ and bin/
	export LD_LIBRARY_PATH="$bin/lib:$bin/lib/fabric:${LD_LIBRARY_PATH:-}"
	bin=$bin/bin
fi
outdir=$2
phase=${3:-all}
here=$(cd "$(dirname "$0")/../.." && pwd)
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$here/.carry/root/usr/lib/x86_64-linux-gnu:${nccl_lib:+$nccl_lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
r=$(mktemp -d)/rt-$phase
mkdir -p "$r"
# shellcheck source=steps.sh
. "$here/scripts/gpu/steps.sh"
# per_rank TEST NAME LAYOUT [options]: one per-rank test through runtime-comm.sh, log kept.
per_rank() {
	local test=$1 name=$2 rc
	shift 2
	step "$test-$name" "$here/scripts/gpu/runtime-comm.sh" "$bin/test-$test-gpu" "$@" \
		>"$r/$test-$name.log" 2>&1
	rc=$?
	echo "== $test $name ($*): exit $rc"
	show -E '^\{|FAIL|failure|node [0-9]|async|dying|exit|transport writes|ERROR SUMMARY|WARN' \
		"$r/$test-$name.log" | head -60
}
comm() { per_rank comm "$@"; }
gar() { per_rank gar "$@"; }
if [ "$phase" = test ] || [ "$phase" = all ]; then
	"$here/scripts/gpu/runtime-run.sh" "$bin" "$r" info test 2>&1 | tee "$r/run1.log" |
		show -vE '^ok '
	check runtime-run-test $?
	# heaps shared through CUDA VMM (the default; each run fails if init chose otherwise), and
	# through legacy CUDA IPC on request
	RANK_TIMEOUT=90 comm a a --expect-vmm
	MPS=1 RANK_TIMEOUT=90 comm b b --expect-vmm
	MPS=1 RANK_TIMEOUT=120 comm c c --expect-vmm
	MPS=1 RANK_TIMEOUT=90 comm a4 a4 --expect-vmm
	MPS=1 MKERNEL_HEAP_SHARE=legacy RANK_TIMEOUT=90 comm b-legacy b --expect-legacy
	MPS=1 MKERNEL_HEAP_SHARE=legacy RANK_TIMEOUT=120 comm c-legacy c --expect-legacy
	RANK_TIMEOUT=40 comm kill-a a --kill --expect-vmm
	MPS=1 RANK_TIMEOUT=40 comm kill-b b --kill --expect-vmm
	MPS=1 RANK_TIMEOUT=40 comm kill-c c --kill --expect-vmm
fi
if [ "$phase" = extra ] || [ "$phase" = all ]; then
	"$here/scripts/gpu/runtime-run.sh" "$bin" "$r" sanitize 2>&1 | tee "$r/run2.log"
	check runtime-run-sanitize $?
	for tool in memcheck racecheck synccheck; do
		# NCCL's init probes kernels of other architectures: API errors it handles itself.
		WRAP="compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 3" \
			RANK_TIMEOUT=150 \
			comm "sanitize-$tool" a --quick
	done
	# Node-local peers through mapped heaps; no MPS under the sanitizer (kernels time-slice).
	WRAP="compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3" \
		RANK_TIMEOUT=200 comm sanitize-memcheck-b b --quick
fi
if [ "$phase" = extra ] || [ "$phase" = bench ] || [ "$phase" = all ]; then
	MPS=1 RANK_TIMEOUT=150 comm bench-a a --bench
	MPS=1 RANK_TIMEOUT=150 comm bench-b b --bench
	MPS=1 RANK_TIMEOUT=200 comm bench-c c --bench
fi
if [ "$phase" = extra ] || [ "$phase" = all ]; then
	"$here/scripts/gpu/runtime-run.sh" "$bin" "$r" bench 2>&1 | tee "$r/run3.log"
	check runtime-run-bench $?
fi
if [ "$phase" = gar ] || [ "$phase" = all ]; then
	# GAR_QUICK=1: shapes up to 4096 only (a first check of a new build).
	for l in ${GAR_LAYOUTS:-s b a c}; do
		if [ "$l" = s ]; then
			RANK_TIMEOUT=400 gar s s ${GAR_QUICK:+--quick}
		else
			MPS=1 RANK_TIMEOUT=400 gar "$l" "$l" ${GAR_QUICK:+--quick}
		fi
	done
	for l in ${GAR_BENCH:-}; do
		if [ "$l" = s ]; then
			RANK_TIMEOUT=400 gar bench-s s --bench ${GAR_QUICK:+--quick}
		else
			MPS=1 RANK_TIMEOUT=400 gar "bench-$l" "$l" --bench ${GAR_QUICK:+--quick}
		fi
	done
fi
mkdir -p "$outdir"
step archive tar czf "$outdir/rt-$phase.tgz" -C "$(dirname "$r")" "rt-$phase"
steps_done
