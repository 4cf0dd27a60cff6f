#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# mkGemmReduceScatter and mkAllGatherGemm on one GPU host, in phases that each fit one call of
# at most ten minutes:
#   test-rs, test-ag: the per-rank test (test-seqpar-gpu) of one op on every layout in LAYOUTS
#          (default "s b a c": 1 rank; 1 node x 2 ranks; 2 nodes x 1 rank; 2 nodes x 2 ranks),
#          then a rank killed mid-call on c; test: both ops (with QUICK=1 it fits one call: one
#          run per layout tests both ops on one comm, then the kill of each op on c);
#   bench-rs, bench-ag: its benchmark on every layout in LAYOUTS (sweep to TOP: default 32768
#          with one rank, 16384 with several; BOTTOM=N starts it at N), JSON lines into
#          OUTDIR/seqpar-bench.jsonl;
#          bench: both ops;
#   torch: PyTorch async-TP's fused ops (scripts/gpu/ops_seqpar_torch.py) on 1, 2 and 4 ranks,
#          where they run (JSON lines, "unsupported" with the reason where they do not);
#   all:   every phase in turn (longer than one call: for a host of your own).
# QUICK=1 is a first check of a new build: every kind of case once at small sizes (sweep 2048),
# a watchdog of 60 s per case; BIG=1 adds 32768 to the tests (BOTTOM=N leaves out the sweep
# shapes below N, the other cases kept). Layouts with several ranks run under MPS (their
# kernels wait for each other). Key lines go to stdout (per step its exit, its wall time and
# each rank's time split with its slowest cases); every log into
# OUTDIR/seqpar-PHASE/ as each step ends (kept when the run is cut short), and
# OUTDIR/seqpar-PHASE.tgz at the end. Exit: 0 when every step passed, 1 otherwise (the failing
# steps are named at the end).
# Usage: scripts/gpu/ops-seqpar.sh BIN OUTDIR PHASE    (BIN: the build's test/gpu/ops folder;
#        libfabric and friends under .carry/root as for runtime-all.sh)
set -u
set -o pipefail
bin=$(cd "$1" && pwd)
outdir=$2
phase=${3:-all}
here=$(cd "$(dirname "$0")/../.." && pwd)
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$here/.carry/root/usr/lib/x86_64-linux-gnu:${nccl_lib:+$nccl_lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$outdir"
r=$outdir/seqpar-$phase
rm -rf "$r"
mkdir -p "$r"
failed=()

# step NAME LAYOUT [options]: one per-rank run through runtime-comm.sh, its log kept.
step() {
	local name=$1 layout=$2 rc mps=1 t0=$SECONDS
	shift 2
	[ "$layout" = s ] && mps=0
	MPS=$mps RANK_TIMEOUT=${RANK_TIMEOUT:-540} \
		"$here/scripts/gpu/runtime-comm.sh" "$bin/test-seqpar-gpu" "$layout" "$@" \
		>"$r/$name.log" 2>&1
	rc=$?
	echo "== $name ($layout $*): exit $rc, $((SECONDS - t0)) s"
	[ "$rc" = 0 ] || failed+=("$name")
	grep -E '^\{|FAIL|WATCHDOG|failure\(s\)|dying|node [0-9]|: time ' "$r/$name.log" | head -80
	grep -h '^{' "$r/$name.log" >>"$r/seqpar-bench.jsonl" || true
}

# tests OP...: the per-rank test of each op on every layout (quick: both ops in one run per
# layout), then each op's kill on c.
tests() {
	local op l quick_op=$1
	[ $# = 2 ] && quick_op=both
	if [ -n "${QUICK:-}" ]; then
		for l in ${LAYOUTS:-s b a c}; do
			step "test-$quick_op-$l" "$l" --op "$quick_op" --quick ${BIG:+--big}
		done
	else
		for op in "$@"; do
			for l in ${LAYOUTS:-s b a c}; do
				step "test-$op-$l" "$l" --op "$op" ${BIG:+--big} ${BOTTOM:+--bottom $BOTTOM}
			done
		done
	fi
	for op in "$@"; do
		RANK_TIMEOUT=120 step "kill-$op-c" c --op "$op" --kill
	done
}

benches() {
	local op=$1
	for l in ${LAYOUTS:-s b a c}; do
		step "bench-$op-$l" "$l" --op "$op" --bench ${BOTTOM:+--bottom $BOTTOM} ${TOP:+--top $TOP}
	done
}

case $phase in
test-rs) tests rs ;;
test-ag) tests ag ;;
test) tests rs ag ;;
bench-rs) benches rs ;;
bench-ag) benches ag ;;
bench)
	benches rs
	benches ag
	;;
torch)
	# several ranks share the GPU: their kernels wait for each other, so under MPS
	# shellcheck source=mps.sh
	. "$here/scripts/gpu/mps.sh"
	mps_start "$r"
	timeout 540 python3 "$here/scripts/gpu/ops_seqpar_torch.py" --out "$r/torch.jsonl" \
		>"$r/torch.log" 2>&1
	rc=$?
	mps_stop
	echo "== torch async-TP: exit $rc"
	[ "$rc" = 0 ] || failed+=(torch)
	grep -E '^\{|Error|error' "$r/torch.log" | head -40
	;;
all)
	for p in test-rs test-ag bench-rs bench-ag torch; do
		"$0" "$1" "$outdir" "$p" || failed+=("$p")
	done
	;;
*)
	echo "unknown phase $phase (test-rs, test-ag, test, bench-rs, bench-ag, bench, torch, all)"
	exit 2
	;;
esac
[ -f "$r/seqpar-bench.jsonl" ] && cat "$r/seqpar-bench.jsonl" >>"$outdir/seqpar-bench.jsonl"
[ -f "$r/torch.jsonl" ] && cat "$r/torch.jsonl" >>"$outdir/seqpar-torch.jsonl"
tar czf "$outdir/seqpar-$phase.tgz" -C "$outdir" "seqpar-$phase"
if [ "${#failed[@]}" -gt 0 ]; then
	echo "ops-seqpar $phase: FAILED: ${failed[*]}"
	exit 1
fi
echo "ops-seqpar $phase: every step passed"
exit 0
