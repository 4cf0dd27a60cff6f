#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build-time checks of the grouped GEMM's kernels on a machine without a GPU:
#  - ptxas -v: the Hopper kernels (both B layouts) and the portable kernel (every target) compile
#    with no spills and no stack frame;
#  - PTX: the Hopper kernels issue 3-D TMA loads for B, 2-D for A, TMA stores, wgmma, and the
#    schedule's window of offsets loads is issued as one batch (nine loads in a row, not sunk
#    into the branches that use them).
# Usage: check_grouped_kernel.sh NVCC ARCH HOPPER_SRC PORTABLE_SRC -I... (include flags)
set -uo pipefail
nvcc=$1 arch=$2 src=$3 psrc=$4
shift 4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
gencode="-gencode=arch=$(echo "$arch" | sed 's/sm_/compute_/'),code=$arch"

if ! "$nvcc" $gencode -std=c++17 -Xptxas -v "$@" -c "$src" -o "$tmp/k.o" >"$tmp/ptxas.txt" 2>&1; then
	cat "$tmp/ptxas.txt"
	echo "not ok 1 - Hopper kernels compile"
	exit 1
fi
echo "ok 1 - Hopper kernels compile for $arch"
if ! "$nvcc" '-gencode=arch=compute_75,code=[compute_75,sm_75,sm_80,sm_90]' -std=c++17 -Xptxas -v \
	"$@" -c "$psrc" -o "$tmp/p.o" >>"$tmp/ptxas.txt" 2>&1; then
	cat "$tmp/ptxas.txt"
	echo "not ok 1 - portable kernel compiles"
	exit 1
fi
echo "ok 1 - portable kernel compiles for sm_75, sm_80, sm_90"

# Every "Function properties" block of a grouped kernel: no stack, no spills.
n=$(grep -c "Function properties for mk_grouped_" "$tmp/ptxas.txt")
bad=$(grep -A1 "Function properties for mk_grouped_" "$tmp/ptxas.txt" | grep "stack frame" |
	grep -vc "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads")
if [ "$n" -ge 5 ] && [ "$bad" -eq 0 ]; then
	echo "ok 2 - $n grouped kernel builds: no spills, no stack"
else
	grep -A2 "Function properties for mk_grouped_" "$tmp/ptxas.txt"
	echo "not ok 2 - spills or stack in a grouped kernel ($n reports, $bad bad)"
	fail=1
fi

if ! "$nvcc" $gencode -std=c++17 "$@" -ptx "$src" -o "$tmp/k.ptx" >/dev/null 2>&1; then
	echo "not ok 3 - PTX generation"
	exit 1
fi
for ins in 'wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16' \
	'cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes' \
	'cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes' \
	'cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group' \
	'setmaxnreg.dec.sync.aligned.u32' 'setmaxnreg.inc.sync.aligned.u32'; do
	if grep -qF "$ins" "$tmp/k.ptx"; then
		echo "ok 3 - PTX has $ins"
	else
		echo "not ok 3 - PTX lacks $ins"
		fail=1
	fi
done
# The window's offsets loads: 9 consecutive ld.global.s32 (other lines between them are address
# arithmetic only, no branch or label) in each of the two kernels.
runs=$(awk '/ld.global.s32/ { if (run == 0) start = NR; run++; if (run == 9) found++; next }
	/bra|^\$L|^}/ { run = 0 } END { print found + 0 }' "$tmp/k.ptx")
if [ "$runs" -ge 2 ]; then
	echo "ok 4 - offsets window loaded as one batch ($runs kernels)"
else
	echo "not ok 4 - offsets window loads are split by branches ($runs batches)"
	fail=1
fi
exit $fail
