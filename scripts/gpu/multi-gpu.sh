#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Everything of mkernel on a host of several GPUs, one process per GPU, in phases that each fit
# one call of at most ten minutes. Layouts (scripts/gpu/layout.sh), LAYOUTS="g h" by default:
#   g  1 node x G ranks: NCCL over NVLink/P2P, mkernel's node-local path (peers' heaps mapped
#      through CUDA IPC between distinct GPUs);
#   h  2 nodes x G/2 ranks: NVLink within a half, the network path between the halves (mkernel's
#      transport over libfabric on loopback; NCCL's Socket transport, or the net plugin).
# Phases (`multi-gpu.sh BUNDLE OUT list` prints their steps):
#   test-runtime  queue and roles tests, the comm test and a rank killed mid-op on each layout
#   test-gar, test-rs, test-ag, test-ring, test-moe
#                 the gpu test of each fused op on each layout (QUICK=1: their quick variants);
#                 a rank killed mid-call where the test has that case
#   python-test   the README's quick start under torchrun (G ranks), the check mode of every op
#                 and a rank killed mid-call, on each layout
#   python-extra  torch.compile, CUDA-graph replay and 100 calls back to back on each layout
#   bench-gar     mkGemmAllReduce vs cuBLAS + ncclAllReduce (2048 .. 16384, K = N/16), static
#                 splits swept, adaptive vs best static, traced calls
#   bench-gar-paths  the cost model's path vs cuBLAS + ncclAllReduce from M = 1, and the
#                 calibration records measured (OUT/calib-lines.calib)
#   bench-rs, bench-ag  mkGemmReduceScatter / mkAllGatherGemm vs cuBLAS + NCCL, splits swept
#   bench-ring    mkRingAttention vs ncclAllGather + the engine and a ncclSend/Recv ring
#   sweep-ring-g, sweep-ring-h  mkRingAttention under the policy's split, each static split
#                 (MKERNEL_ROLE_SPLIT) and adaptive, on the g (h) layouts of LAYOUTS
#                 (RING_SWEEP_ARGS, default --quick)
#   bench-moe     mkMoeDispatchGemm / mkMoeGemmCombine vs all_to_all_single + torch._grouped_mm
#   sweep-moe-g, sweep-moe-h  the fused MoE kernels under the policy's split and each
#                 communication share (MKERNEL_TUNER_SM_SPLIT), on the g (h) layouts
#   bench-comm    mkAllToAll vs ncclSend/ncclRecv all-to-all, put + signal ping-pong vs NCCL
#   bench-plugin  on h: bench-gar's and bench-comm's runs with NCCL's own traffic (the baseline)
#                 through the net plugin instead of its Socket transport
#   bench-queue   the GPU -> host queue's round trip on every GPU, the CPU-producer benchmark
#   bench-torch   the tensor-parallel MLP (mkernel.nn vs torch + c10d) on each layout; PyTorch
#                 async-TP's fused ops on 2 .. G GPUs of one node
#   bench-ring-torch  ring attention vs all-gather + SDPA and a ring of flash calls (PyTorch)
#   nccl          stock NCCL on h through the net plugin (exact results, the plugin loaded) and
#                 its bus bandwidth through the plugin (tcp, shm) vs NCCL's Socket; NCCL over
#                 NVLink on g as the baseline
#   retune        (CPU) scripts/retune.py over OUT/*.jsonl: split records and link constants
#                 into OUT/retune/calib-multi.calib, the static split table's rows, a report
# With no PHASE every phase runs in turn, each as a process of its own (its own budget, log
# folder and JSON lines); several PHASEs run those in turn. On a machine lent by the call (at
# most ten minutes a call) give one or a few phases per call.
# Every phase writes OUT/PHASE/ (one log per step, machine.info) and OUT/PHASE.jsonl: rank 0's
# JSON lines, each tagged with step, layout, GPUs, nodes x ranks, SM share, machine, date and
# the variables the step ran under ("emulated": false: one GPU per rank). No phase outlasts
# PHASE_BUDGET seconds (default 540): a step gets the time left at most, and a step that cannot
# start in time counts as failed.
# Exit: 0 when every step passed; 1 naming every failing step (and phase); 2 on bad usage;
# 77 when this host shows fewer than 2 GPUs (nothing runs: one process per GPU needs two).
# Environment: LAYOUTS, STEPS (only the steps named), QUICK=1, DRY_RUN=1 (print each step and
# each rank's command with its environment; nothing runs, no GPU is asked), MK_GPUS (the GPU
# count, instead of nvidia-smi), MK_SMS (SMs per GPU, default from torch or 132), QUEUE_GPUS
# (GPUs of bench-queue, default all), RING_SWEEP_ARGS, MOE_BENCH_ARGS, MOE_SWEEP_TOKENS.
# Usage: scripts/gpu/multi-gpu.sh BUNDLE OUT [PHASE...]   (BUNDLE: an unpacked bundle of
#        scripts/bundle.sh, or a build directory; PHASE list: the phases and their steps)
# shellcheck disable=SC2317 # the phase_* functions are called by name ("$func")
set -uo pipefail
usage="usage: multi-gpu.sh BUNDLE OUT [PHASE...] (no PHASE: all; list: the phases and steps)"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dry=${DRY_RUN:-0}
phases=(test-runtime test-gar test-rs test-ag test-ring test-moe python-test python-extra
	bench-gar bench-gar-paths bench-rs bench-ag bench-ring sweep-ring-g sweep-ring-h bench-moe
	sweep-moe-g sweep-moe-h bench-comm bench-plugin bench-queue bench-torch bench-ring-torch nccl
	retune)
# Never NVLink multicast, in this process tree or any it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_MNNVL_ENABLE=0

# shellcheck source=layout.sh
. "$here/layout.sh"
# shellcheck source=python-env.sh
. "$here/python-env.sh"

src=$(cd "$1" 2>/dev/null && pwd) || { echo "multi-gpu: no such folder: $1" >&2; exit 2; }
mkdir -p "$2" || { echo "multi-gpu: cannot make $2" >&2; exit 2; }
out=$(cd "$2" && pwd)
shift 2
sel=("$@")
[ ${#sel[@]} = 0 ] && sel=(all)
[ "${sel[*]}" = all ] && sel=("${phases[@]}")

if [ "${sel[*]}" = list ]; then
	for p in "${phases[@]}"; do
		echo "phase $p:"
		DRY_RUN=1 MK_GPUS=${MK_GPUS:-8} "$0" "$src" "$out/list" "$p" |
			sed -n 's/^== \([^ ]*\) (\(.*\))\( with .*\)*$/   \1 (\2)/p'
	done
	rm -rf "$out/list" "$out/list".jsonl
	exit 0
fi
for p in "${sel[@]}"; do
	if [[ " ${phases[*]} " != *" $p "* ]]; then
		echo "multi-gpu: unknown phase '$p'; phases: ${phases[*]} (none: all; list)" >&2
		exit 2
	fi
done

# ---- the host -------------------------------------------------------------------------------

# One process per GPU needs two GPUs at least; retune alone needs none.
if [ "${sel[*]}" != retune ]; then
	gpus=$(mk_gpu_count)
	if ! [[ $gpus =~ ^[0-9]+$ ]] || [ "$gpus" -lt 2 ]; then
		echo "multi-gpu: SKIPPED: this host shows ${gpus:-no} GPU(s); one process per GPU needs" \
			"at least 2 (counted from MK_GPUS, else CUDA_VISIBLE_DEVICES, else nvidia-smi -L)"
		exit 77
	fi
fi

# Several phases: each as a process of its own, the failing ones named at the end.
if [ ${#sel[@]} -gt 1 ]; then
	bad=()
	t_all=$(date +%s)
	for p in "${sel[@]}"; do
		"$0" "$src" "$out" "$p" || bad+=("$p")
	done
	took=$(($(date +%s) - t_all))
	if [ ${#bad[@]} = 0 ]; then
		echo "multi-gpu: every phase passed (${#sel[@]} phases, $took s)"
		exit 0
	fi
	echo "multi-gpu: FAILED phases: ${bad[*]} (of ${#sel[@]}, $took s; their steps named above)"
	exit 1
fi
phase=${sel[0]}

dir=$out/$phase
jsonl=$out/$phase.jsonl
mkdir -p "$dir"
# a phase run again replaces its records, never adds to them
[ "$dry" = 1 ] || [ "$phase" = retune ] || : >"$jsonl"
failed=()
t_start=$(date +%s)
budget=${PHASE_BUDGET:-540}

if [ "$phase" != retune ]; then
	mk_use "$src" || { echo "multi-gpu $phase: FAILED: setup (mk_use $src)"; exit 1; }
	sms=${MK_SMS:-}
	if [ -z "$sms" ] && [ "$dry" != 1 ]; then
		sms=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)' 2>/dev/null)
	fi
	if ! [[ ${sms:-} =~ ^[0-9]+$ ]]; then
		[ "$dry" = 1 ] || echo "multi-gpu: SMs per GPU unknown (no torch?): taking 132 (MK_SMS says it)"
		sms=132
	fi
	machine=unknown
	if [ "$dry" != 1 ]; then
		machine="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1) x $gpus"
		{
			echo "date: $(date -u +%FT%TZ)"
			echo "mkernel: $(cat "$src/VERSION" 2>/dev/null || git -C "$root" describe --always --dirty 2>/dev/null)"
			echo "GPUs seen: $gpus (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}), SMs per GPU: $sms"
			nvidia-smi -L
			nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
			nvidia-smi topo -m
			python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
			nproc
		} >"$dir/machine.info" 2>&1
		head -4 "$dir/machine.info"
	fi
	version=$(cat "$src/VERSION" 2>/dev/null || git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
	date_utc=$(date -u +%F)
fi
layouts=${LAYOUTS:-g h}
func=phase_${phase//-/_}
case $phase in
sweep-*-[gh]) # one kind of layout per call: each sweep fills one call
	func=phase_${phase%-*}
	func=${func//-/_}
	mine=()
	for l in $layouts; do
		[ "${l:0:1}" = "${phase##*-}" ] && mine+=("$l")
	done
	layouts=${mine[*]}
	;;
esac

# A binary of this build: bin/ of a bundle, or its place in a build directory.
bin_of() {
	local f
	for f in "$MK_BIN/$1" "$src"/test/gpu/*/"$1" "$src"/fused/*/"$1"; do
		[ -x "$f" ] && { echo "$f"; return; }
	done
	echo "$MK_BIN/$1"
}

# ---- steps ----------------------------------------------------------------------------------

# fit NAME LIMIT: sets FIT to LIMIT or the phase's time left (minus room to report), or counts
# the step as failed when less than 30 s are left.
fit() {
	local left=$((budget - ($(date +%s) - t_start) - 20))
	FIT=$2
	if [ "$left" -lt 30 ]; then
		echo "== $1: not run (the phase's $budget s are spent)"
		failed+=("$1(no-time)")
		return 1
	fi
	[ "$FIT" -gt "$left" ] && FIT=$left
	return 0
}

# tags NAME LAYOUT VAR=VALUE...: the jsonl_tag.py arguments (TAGS) of step NAME on LAYOUT with
# those variables
tags() {
	local name=$1 l=$2 v
	shift 2
	TAGS=(--set "step=$name" --set "machine=$machine" --set "date=$date_utc"
		--set "mkernel=$version" --set "share=$sms")
	if [ "$l" != - ] && mk_layout "$l" 2>/dev/null; then
		TAGS+=(--set "layout=$l" --set "gpus=$MK_L_GPUS" --set "ranks=$MK_L_RANKS"
			--set "layout_nodes=$MK_L_NODES" --set "layout_nlocal=$MK_L_NLOCAL"
			--set "emulated=$([ "$MK_L_PER_GPU" = 1 ] && echo false || echo true)")
	fi
	for v in "$@"; do
		TAGS+=(--env "$v")
	done
}

# verdict NAME RC T0 LOG: one line per step, the key lines of a failure, failures kept.
verdict() {
	printf '== %-34s exit %-3s %4ss\n' "$1" "$2" "$(($(date +%s) - $3))"
	if [ "$2" != 0 ]; then
		failed+=("$1")
		grep -hE 'FAIL|WATCHDOG|HANG|Traceback|Error|error|timed out|not run|needs' "$4" | head -12
	fi
}

# run_step launcher|plain NAME LIMIT LAYOUT [VAR=VALUE...] -- COMMAND...: run COMMAND with the
# variables (its log OUT/PHASE/NAME.log), its JSON lines tagged into OUT/PHASE.jsonl, a failure
# (or a step that cannot start in the phase's time) counted. A launcher (runtime-comm.sh,
# python-run.sh, nccl-fake-nodes.sh) gets RANK_TIMEOUT=LIMIT and at most LIMIT + 30 s in all, and
# under DRY_RUN prints each rank's command itself; a plain command gets at most LIMIT s, and
# under DRY_RUN its command line is printed. LAYOUT - : no layout (one process).
run_step() {
	local kind=$1 name=$2 limit=$3 layout=$4 vars=() rc t0 log
	shift 4
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	shift
	if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
		return 0
	fi
	if [ "$dry" = 1 ]; then
		echo "== $name (layout $layout, ${limit} s)${vars[*]:+ with ${vars[*]}}"
		if [ "$kind" = launcher ]; then
			env "${vars[@]}" RANK_TIMEOUT="$limit" DRY_RUN=1 "$@" || failed+=("$name")
		else
			printf '   '
			printf ' %q' env "${vars[@]}" timeout "$limit" "$@"
			printf '\n'
		fi
		return 0
	fi
	fit "$name" "$limit" || return 0
	log=$dir/$name.log
	t0=$(date +%s)
	if [ "$kind" = launcher ]; then
		env "${vars[@]}" RANK_TIMEOUT="$FIT" timeout -k 10 $((FIT + 30)) "$@" >"$log" 2>&1
	else
		env "${vars[@]}" timeout -k 10 "$FIT" "$@" >"$log" 2>&1
	fi
	rc=$?
	verdict "$name" "$rc" "$t0" "$log"
	tags "$name" "$layout" "${vars[@]}"
	python3 "$here/jsonl_tag.py" "${TAGS[@]}" "$log" >>"$jsonl" || failed+=("$name(jsonl)")
}
step() { run_step launcher "$@"; }
plain() { run_step plain "$@"; }

rc_bin() { # TEST LAYOUT NAME LIMIT [VAR=VALUE...] -- [options]: a per-rank test binary
	local test=$1 layout=$2 name=$3 limit=$4 vars=()
	shift 4
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	shift
	step "$name" "$limit" "$layout" "${vars[@]}" -- \
		"$here/runtime-comm.sh" "$(bin_of "test-$test-gpu")" "$layout" "$@"
}

py() { # LAYOUT NAME LIMIT [VAR=VALUE...] -- PROGRAM [args]: a Python program, one rank per GPU
	local layout=$1 name=$2 limit=$3
	shift 3
	step "$name" "$limit" "$layout" "$@"
}

ranks_of() { # LAYOUT: its rank count (0 when the host cannot hold it)
	if mk_layout "$1" 2>/dev/null; then echo "$MK_L_RANKS"; else echo 0; fi
}

# Communication CTAs of the static splits the C tests sweep (share/32 .. share/4), here for the
# runs that sweep from outside (ring attention); the MoE sweep's shares of the GPU.
split_counts() {
	local d
	for d in 32 16 8 4; do
		echo $((sms / d > 0 ? sms / d : 1))
	done
}

gpu_ops=$root/test/gpu/python/gpu_ops.py
run=$here/python-run.sh

# ---- phases ---------------------------------------------------------------------------------

phase_test_runtime() {
	local l
	plain cmdq-roles 150 - -- "$here/runtime-run.sh" "$(dirname "$(bin_of test-cmdq-gpu)")" \
		"$dir/runtime-run" test
	for l in $layouts; do
		rc_bin comm "$l" "comm-$l" 120 --
		rc_bin comm "$l" "comm-kill-$l" 50 -- --kill
	done
}

phase_test_gar() {
	local l
	for l in $layouts; do
		rc_bin gar "$l" "gar-$l" 260 -- ${QUICK:+--quick}
	done
}

# test_kill TEST PREFIX [options]: the gpu test on each layout (QUICK=1: its quick variant), then
# on each layout a rank killed mid-call
test_kill() {
	local t=$1 p=$2 l
	shift 2
	for l in $layouts; do
		rc_bin "$t" "$l" "$p-$l" 220 -- "$@" ${QUICK:+--quick}
	done
	for l in $layouts; do
		rc_bin "$t" "$l" "$p-kill-$l" 45 -- "$@" --kill
	done
}
phase_test_rs() { test_kill seqpar rs --op rs; }
phase_test_ag() { test_kill seqpar ag --op ag; }
phase_test_ring() { test_kill ring-attention ring; }
phase_test_moe() { test_kill moe moe; }

phase_python_test() {
	local l
	plain readme-torchrun 100 g -- "$here/readme-quickstart.sh" "$dir/readme" "$gpus"
	for l in $layouts; do
		py "$l" "check-$l" 140 -- "$run" "$src" "$l" "$gpu_ops" --mode check
	done
	# the last rank dies; MKERNEL_TIMEOUT 5 s: the survivors must raise within 2 x 5 + 10 s
	for l in $layouts; do
		py "$l" "kill-$l" 80 KILLED_RANK=$(($(ranks_of "$l") - 1)) MKERNEL_TIMEOUT=5000 \
			MKERNEL_GEMM_AR_FUSED=1 -- "$run" "$src" "$l" "$gpu_ops" --mode kill
	done
}

phase_python_extra() {
	local l m
	for m in compile graph burst; do
		for l in $layouts; do
			py "$l" "$m-$l" 90 -- "$run" "$src" "$l" "$gpu_ops" --mode "$m"
		done
	done
}

# bench_each TEST PREFIX [options]: the gpu test's benchmark on each layout
bench_each() {
	local t=$1 p=$2 l
	shift 2
	for l in $layouts; do
		rc_bin "$t" "$l" "$p-bench-$l" 260 -- "$@" --bench
	done
}
# shellcheck disable=SC2086 # QUICK: an option or none
phase_bench_gar() { bench_each gar gar ${QUICK:+--quick}; }

phase_bench_gar_paths() {
	local l
	[ "$dry" = 1 ] || : >"$out/calib-lines.calib"
	for l in $layouts; do
		rc_bin gar "$l" "gar-paths-$l" 260 -- --paths
		# rank 0's calibration records (coll, fused): what scripts/retune.py merges
		[ "$dry" = 1 ] || [ ! -f "$dir/gar-paths-$l.log" ] ||
			awk '/^---- rank 0 /{r0=1; next} /^---- rank /{r0=0} r0' \
				"$dir/gar-paths-$l.log" | sed -n 's/^calib: //p' >>"$out/calib-lines.calib"
	done
}

phase_bench_rs() { bench_each seqpar rs --op rs; }
phase_bench_ag() { bench_each seqpar ag --op ag; }
phase_bench_ring() { bench_each ring-attention ring; }

phase_sweep_ring() {
	local l c
	for l in $layouts; do
		# shellcheck disable=SC2086 # RING_SWEEP_ARGS: options to split
		rc_bin ring-attention "$l" "ring-policy-$l" 80 MKERNEL_SM_POLICY=static -- \
			--bench ${RING_SWEEP_ARGS:---quick}
		for c in $(split_counts); do
			# shellcheck disable=SC2086
			rc_bin ring-attention "$l" "ring-split$c-$l" 80 MKERNEL_ROLE_SPLIT=0,$c,$c,$c \
				MKERNEL_SM_POLICY=static -- --bench ${RING_SWEEP_ARGS:---quick}
		done
		# shellcheck disable=SC2086
		rc_bin ring-attention "$l" "ring-adaptive-$l" 80 MKERNEL_SM_POLICY=adaptive -- \
			--bench ${RING_SWEEP_ARGS:---quick}
	done
}

phase_bench_moe() {
	local l
	for l in $layouts; do
		# shellcheck disable=SC2086 # MOE_BENCH_ARGS: options to split
		py "$l" "moe-bench-$l" 260 -- "$run" "$src" "$l" "$here/moe_bench.py" ${MOE_BENCH_ARGS:-}
	done
}

phase_sweep_moe() {
	local l d c toks=${MOE_SWEEP_TOKENS:-16384,65536}
	for l in $layouts; do
		# the fused kernels every time (MKERNEL_MOE_FUSED=1): the sweep compares their splits
		py "$l" "moe-policy-$l" 100 MKERNEL_MOE_FUSED=1 -- "$run" "$src" "$l" \
			"$here/moe_bench.py" --tokens "$toks"
		# communication CTAs of the fused MoE kernels: share/8 .. share/2 (the table's 60 of
		# 132 lies between share/3 and share/2)
		for d in 8 4 3 2; do
			c=$((sms / d))
			py "$l" "moe-comm$c-$l" 100 MKERNEL_MOE_FUSED=1 \
				"MKERNEL_TUNER_SM_SPLIT=compute=$((sms - c)) intra=$c send=0 reduce=0" -- \
				"$run" "$src" "$l" "$here/moe_bench.py" --tokens "$toks"
		done
	done
}

phase_bench_comm() { bench_each comm comm; }

phase_bench_plugin() {
	local l
	for l in $layouts; do
		[ "${l:0:1}" = h ] || continue
		rc_bin gar "$l" "gar-bench-$l-plugin" 260 "NCCL_NET_PLUGIN=$MK_PLUGIN" NCCL_NET=mkernel \
			-- --bench ${QUICK:+--quick}
		rc_bin comm "$l" "comm-bench-$l-plugin" 220 "NCCL_NET_PLUGIN=$MK_PLUGIN" \
			NCCL_NET=mkernel -- --bench
	done
}

phase_bench_queue() {
	local i devs
	# the GPUs as CUDA numbers them for this process: CUDA_VISIBLE_DEVICES' entries or 0..G-1
	if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
		IFS=, read -r -a devs <<<"$CUDA_VISIBLE_DEVICES"
	else
		mapfile -t devs < <(seq 0 $((gpus - 1)))
	fi
	for i in ${QUEUE_GPUS:-$(seq 0 $((gpus - 1)))}; do
		if ! [[ $i =~ ^[0-9]+$ ]] || [ "$i" -ge "$gpus" ]; then
			echo "== cmdq-gpu$i: no GPU $i among the $gpus"
			failed+=("cmdq-gpu$i")
			continue
		fi
		plain "cmdq-gpu$i" 55 - "CUDA_VISIBLE_DEVICES=${devs[$i]}" -- "$(bin_of test-cmdq-gpu)"
	done
	plain cmdq-cpu 60 - -- "$(bin_of mkernel-bench-cmdq)" -n 4000000 -l 50000
}

phase_bench_torch() {
	local l w ws=()
	for l in $layouts; do
		py "$l" "mlp-bench-$l" 190 -- "$run" "$src" "$l" "$here/python-bench.py" \
			--out "$dir/mlp-bench.jsonl"
	done
	# PyTorch async-TP (symmetric memory within one node): 2, 4, .. G ranks, one GPU each
	for ((w = 2; w <= gpus; w *= 2)); do ws+=("$w"); done
	plain async-tp 150 g -- python3 "$here/ops_seqpar_torch.py" --per-gpu --ranks "${ws[@]}" \
		--limit $((140 / ${#ws[@]})) --out "$dir/async-tp.jsonl"
}

phase_bench_ring_torch() {
	local l
	for l in $layouts; do
		py "$l" "ring-torch-$l" 260 -- "$run" "$src" "$l" "$here/attn_ring_bench.py"
	done
}

phase_nccl() {
	# through the plugin between the halves, checked, then bus bandwidth: plugin vs Socket
	# one check and one round keep the step inside its budget
	step nccl-h 330 h LAYOUT=h JOB_TIMEOUT=150 CHECKS=tcp ROUNDS=1 \
		"CONFIGS=mkernel-tcp mkernel-shm nccl-socket" -- \
		"$here/nccl-fake-nodes.sh" "$src" "$dir/nccl-h"
	# the baseline: NCCL alone over NVLink, every GPU one node
	step nccl-g 150 g LAYOUT=g JOB_TIMEOUT=120 SKIP_CHECK=1 ROUNDS=1 CONFIGS=nccl-nvlink -- \
		"$here/nccl-fake-nodes.sh" "$src" "$dir/nccl-g"
}

phase_retune() {
	local inputs=()
	mapfile -t inputs < <(ls "$out"/*.jsonl 2>/dev/null)
	if [ "$dry" = 1 ]; then
		echo "== retune (CPU): scripts/retune.py over OUT/*.jsonl"
		return 0
	fi
	if [ ${#inputs[@]} = 0 ]; then
		echo "retune: no JSON lines in $out (run the bench and sweep phases first)"
		failed+=(retune)
		return 0
	fi
	mkdir -p "$out/retune"
	[ -s "$out/calib-lines.calib" ] && inputs+=(--calib-lines "$out/calib-lines.calib")
	python3 "$root/scripts/retune.py" --base "$root/tuner/calib_h200.txt" \
		--out "$out/retune/calib-multi.calib" --model "$root/tuner/model.c" \
		--model-out "$out/retune/model.c" --report "$out/retune/report.md" "${inputs[@]}" ||
		failed+=(retune)
	cat "$out/retune/report.md" 2>/dev/null
}

echo "multi-gpu $phase: layouts $layouts on ${gpus:-?} GPUs$([ "$dry" = 1 ] && echo " (dry run)")"
"$func"
if [ ${#failed[@]} -gt 0 ]; then
	echo "multi-gpu $phase: FAILED: ${failed[*]}"
	exit 1
fi
echo "multi-gpu $phase: every step passed ($(($(date +%s) - t_start)) s)"
exit 0
