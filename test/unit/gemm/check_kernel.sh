#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build-time checks of the GEMM engine on a machine without a GPU:
#  - ptxas -v: every variant's kernels compile for the target with no spills and no stack frame;
#  - PTX: the Hopper instructions the design relies on are really there (wgmma n256 and n128,
#    TMA, mbarrier transaction counts, setmaxnreg, release flags, split-K counters and L2 reads);
#  - libmkernel.so exports exactly the mk* API.
# Usage: check_kernel.sh NVCC ARCH SOURCE LIBMKERNEL -I... (include flags)
set -uo pipefail
nvcc=$1 arch=$2 src=$3 lib=$4
shift 4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
gencode="-gencode=arch=$(echo "$arch" | sed 's/sm_/compute_/'),code=$arch"

# One front-end pass to PTX, then ptxas on it: the PTX checks and the register report share it.
ptxas=$(dirname "$(command -v "$nvcc")")/ptxas
if ! "$nvcc" $gencode -std=c++17 "$@" -ptx "$src" -o "$tmp/k.ptx" >"$tmp/ptx.txt" 2>&1; then
	cat "$tmp/ptx.txt"
	echo "not ok 1 - PTX generation"
	exit 1
fi
if ! "$ptxas" -arch="$arch" -v "$tmp/k.ptx" -o "$tmp/k.cubin" >"$tmp/ptxas.txt" 2>&1; then
	cat "$tmp/ptxas.txt"
	echo "not ok 1 - kernel compiles"
	exit 1
fi
echo "ok 1 - kernel compiles for $arch"

n=0
kernels="mk_gemm_kernel_nk mk_gemm_kernel_kn"
for v in 64x256 128x128 64x128; do
	kernels="$kernels mk_gemm_kernel_nk_$v mk_gemm_kernel_kn_$v"
done
for k in $kernels; do
	props=$(grep -A2 "Function properties for $k\$" "$tmp/ptxas.txt")
	line=$(echo "$props" | grep "spill stores")
	regs=$(echo "$props" | sed -n 's/.*Used \([0-9]*\) registers.*/\1/p')
	if [ -z "$line" ]; then
		echo "not ok 2 - $k: no ptxas report"
		fail=1
		continue
	fi
	n=$((n + 1))
	if grep -q "^ *0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" <<<"$line"; then
		echo "ok 2 - $k: no spills, no stack ($regs registers at entry)"
	else
		echo "not ok 2 - $k: $line"
		fail=1
	fi
done
[ "$n" -eq 8 ] || fail=1

for ins in 'wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16' \
	'wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16' 'atom.global.add.u32' \
	'ld.global.cg.v4.f32' \
	'cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes' \
	'mbarrier.arrive.expect_tx' 'mbarrier.try_wait.parity' 'setmaxnreg.inc.sync.aligned.u32' \
	'setmaxnreg.dec.sync.aligned.u32' 'red.release.gpu.global.add.u32' 'wgmma.wait_group'; do
	if grep -qF "$ins" "$tmp/k.ptx"; then
		echo "ok 3 - PTX has $ins"
	else
		echo "not ok 3 - PTX lacks $ins"
		fail=1
	fi
done

syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^$' | sort | tr '\n' ' ')
# exactly the global names of the version script meson generated (fused/exports.map.in)
want=$(sed -n '/global:/,/local:/p' "${MK_EXPORTS_MAP:?path of the generated mkernel.map}" |
	tr -d ' \t;' | grep -v -e 'global:' -e 'local:' -e '^$' | sort | tr '\n' ' ')
if [ "$syms" = "$want" ]; then
	echo "ok 4 - $lib exports exactly: $syms"
else
	echo "not ok 4 - $lib exports: $syms"
	fail=1
fi
if grep -q 'libcudart\.so' <<<"$(ldd "$lib")"; then
	echo "ok 5 - shared cudart"
else
	echo "not ok 5 - libcudart.so not in ldd (static cudart?)"
	fail=1
fi
exit $fail
