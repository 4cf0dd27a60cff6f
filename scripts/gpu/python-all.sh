#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Every PyTorch GPU test of mkernel on one GPU host, from an unpacked bundle (scripts/bundle.sh)
# or a build directory, in phases that each fit one 10-minute call:
#   test:  the wheel installs and imports; the README's quick start as written (torchrun, one
#          rank; and on layout b); the check mode (every op, exact) on layouts s, a, b, c; a rank
#          killed mid-call on b, a, c;
#   compile: torch.compile(fullgraph=True) of the ops and a tensor-parallel MLP on s, a, b, c;
#   extra: CUDA-graph capture and replay, 100 calls back to back on s, a, b, c; the check mode
#          with a lazily created group communicator (a) and a dedicated NCCL communicator (b);
#   bench: the tensor-parallel MLP benchmark (mkernel.nn vs torch + c10d) on layouts b and c
#          (BENCH_LAYOUTS), JSON lines in OUT/bench.jsonl;
#   all:   every phase (longer than one call).
# STEPS="check-s kill-b ..." runs only the steps named (to split a phase over several calls).
# Ranks sharing the GPU run under MPS (python-run.sh). Logs in OUT/<step>/; one line per step on
# stdout; exit 1 naming every failing step.
# usage: scripts/gpu/python-all.sh BUNDLE_OR_BUILD OUT [test|compile|extra|bench|all]
set -uo pipefail
src=$(cd "${1:?usage: python-all.sh BUNDLE_OR_BUILD OUT [test|compile|extra|bench|all]}" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
phase=${3:-test}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ops=$root/test/gpu/python/gpu_ops.py
failed=()

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "python-all: no GPU: skipped"
	exit 77
fi

# step NAME COMMAND...: run it with its log in OUT/NAME.log, one verdict line, failures kept.
step() {
	local name=$1 t0 rc
	shift
	if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
		return 0
	fi
	t0=$(date +%s)
	"$@" >"$out/$name.log" 2>&1
	rc=$?
	printf '== %-28s exit %-3s %4ss\n' "$name" "$rc" "$(($(date +%s) - t0))"
	if [ "$rc" != 0 ]; then
		failed+=("$name")
		grep -E 'FAIL|Error|error|Traceback' "$out/$name.log" | head -12
	fi
}

layout_run() { # LAYOUT [VAR=VALUE...] -- PROGRAM-ARGS...
	local layout=$1 vars=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	shift
	env "${vars[@]}" "$here/python-run.sh" "$src" "$layout" "$ops" "$@"
}

{
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
	date -u
	(
		# shellcheck source=python-env.sh
		. "$here/python-env.sh"
		mk_use "$src"
		python3 -c 'import torch, mkernel; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version()); print(mkernel.library())'
	)
} 2>&1 | tee "$out/info.txt" | grep -v '^$'

wheel_test() {
	# pip install of the wheel (no registry: --no-index, no dependencies) into a scratch
	# target, then import from there with the library from SRC.
	local tmp whl
	tmp=$(mktemp -d)
	if [ -d "$src/wheels" ]; then
		whl=$(ls "$src"/wheels/mkernel-*.whl)
	else
		cp -a "$root/python" "$tmp/src" && rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
		python3 -m pip wheel -q --no-deps --no-build-isolation -w "$tmp" "$tmp/src" || return 1
		whl=$(ls "$tmp"/mkernel-*.whl)
	fi
	python3 -m pip install -q --no-index --no-deps --target "$tmp/site" "$whl" || return 1
	(
		. "$here/python-env.sh"
		mk_use "$src"
		cd "$tmp" && PYTHONPATH="$tmp/site" python3 -c "
import mkernel, sys
assert mkernel.__file__.startswith('$tmp/site'), mkernel.__file__
print('imported', mkernel.__file__, 'library', mkernel.library())"
	)
}

readme_test() { # s (torchrun) or b (python-run.sh)
	local tmp=$out/readme
	mkdir -p "$tmp"
	# the README's quick start, exactly as written between its python fences
	awk '/<!-- quickstart:begin -->/ { on = 1; next } /<!-- quickstart:end -->/ { on = 0 }
		on && /^```python/ { code = 1; next } on && /^```/ { code = 0 } code' \
		"$root/README.md" >"$tmp/quickstart.py"
	[ -s "$tmp/quickstart.py" ] || { echo "no quick start found in README.md"; return 1; }
	if [ "$1" = s ]; then
		(
			. "$here/python-env.sh"
			mk_use "$src"
			cd "$tmp" && torchrun --nproc-per-node=1 quickstart.py
		) | tee "$tmp/s.log"
		grep -q "exact: True" "$tmp/s.log"
	else
		"$here/python-run.sh" "$src" b "$tmp/quickstart.py" | tee "$tmp/b.log"
		[ "$(grep -c 'exact: True' "$tmp/b.log")" = 2 ]
	fi
}

if [ "$phase" = test ] || [ "$phase" = all ]; then
	step wheel wheel_test
	step readme-torchrun-s readme_test s
	step readme-b readme_test b
	for l in s a b c; do
		step "check-$l" layout_run "$l" -- --mode check
	done
	# small outputs (fewer tiles than ranks) on every forced path, on the layouts of most ranks
	for l in b c; do
		for p in model oneshot fused unfused; do
			# model: the cost model's choice (an empty MKERNEL_GEMM_AR_PATH forces nothing)
			step "small-$l-$p" layout_run "$l" MKERNEL_GEMM_AR_PATH="${p#model}" -- --mode small
		done
	done
	# the last rank dies; MKERNEL_TIMEOUT 5 s: the survivors must raise within 2 x 5 + 10 s.
	# kill-c runs its four ranks without MPS (contexts time-sliced, as ranks on GPUs of their
	# own). Under MPS (kill-c-mps, only when named in STEPS) it fails, by MPS's error
	# containment rather than the library (docs/reliability.md, Limits): the victim's kernel,
	# left waiting when its cross-node peer gives up at once, faults once the driver unmaps the
	# dead process's memory, and MPS ends the work of every client then on the GPU. Without
	# MPS the fault stays in the dead process's context and every survivor raises. Diagnosis
	# variants under MPS (only when named): survivors linger before they abort (they still
	# fault: their own teardown is not the cause); the victim dies between calls (passes).
	step kill-c layout_run c MPS=0 KILLED_RANK=3 MKERNEL_TIMEOUT=5000 MKERNEL_GEMM_AR_FUSED=1 \
		RANK_TIMEOUT=240 -- --mode kill
	[ -n "${STEPS:-}" ] && step kill-c-mps layout_run c KILLED_RANK=3 MKERNEL_TIMEOUT=5000 \
		MKERNEL_GEMM_AR_FUSED=1 RANK_TIMEOUT=120 -- --mode kill
	[ -n "${STEPS:-}" ] && step kill-c-linger layout_run c KILLED_RANK=3 MKERNEL_TIMEOUT=5000 MKERNEL_GEMM_AR_FUSED=1 \
		RANK_TIMEOUT=120 KILL_LINGER=12 -- --mode kill
	[ -n "${STEPS:-}" ] && step kill-c-idle layout_run c KILLED_RANK=3 MKERNEL_TIMEOUT=5000 MKERNEL_GEMM_AR_FUSED=1 \
		RANK_TIMEOUT=120 KILL_IDLE=1 -- --mode kill
	for lk in b:1 a:1; do
		step "kill-${lk%:*}" layout_run "${lk%:*}" KILLED_RANK="${lk#*:}" MKERNEL_TIMEOUT=5000 \
			MKERNEL_GEMM_AR_FUSED=1 RANK_TIMEOUT=120 -- --mode kill
	done
fi
if [ "$phase" = compile ] || [ "$phase" = all ]; then
	for l in s a b c; do
		step "compile-$l" layout_run "$l" -- --mode compile
	done
fi
if [ "$phase" = extra ] || [ "$phase" = all ]; then
	for l in s a b c; do
		step "graph-$l" layout_run "$l" -- --mode graph
		step "burst-$l" layout_run "$l" -- --mode burst
	done
	step check-lazy-a layout_run a -- --mode check --lazy
	step check-dedicated-b layout_run b MKERNEL_COMM_SOURCE=dedicated -- --mode check
fi
if [ "$phase" = bench ] || [ "$phase" = all ]; then
	rm -f "$out/bench.jsonl"
	for l in ${BENCH_LAYOUTS:-b c}; do
		step "bench-$l" env RANK_TIMEOUT=550 "$here/python-run.sh" "$src" "$l" \
			"$here/python-bench.py" --out "$out/bench.jsonl" ${BENCH_ARGS:-}
	done
	[ -s "$out/bench.jsonl" ] && python3 "$here/python-bench.py" --table "$out/bench.jsonl"
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "python-all $phase: FAILED: ${failed[*]}"
	exit 1
fi
echo "python-all $phase: every step passed"
exit 0
