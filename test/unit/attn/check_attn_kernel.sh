#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build-time checks of the Hopper attention kernels on a machine without a GPU:
#  - ptxas -v: both kernels compile with no spills, no stack frame, and ptxas did not serialise
#    the wgmmas (advisory C7520: the intra-warpgroup overlap would be lost);
#  - the register split of each kernel's PTX (setmaxnreg.dec for the producer warpgroup, .inc
#    for the consumers, .maxntid threads) fits the registers the CTA holds at launch (ptxas's
#    "Used N registers" x threads: 168 x 384 = 64512 for a 384-thread kernel, not the SM's
#    65536), the pool setmaxnreg.inc draws from: over-allocation compiles but waits forever at
#    setmaxnreg.inc; dec lowers and inc raises the launch count, as PTX requires. A kernel that
#    runs the engine as one role and then goes back to an even split (the ring kernel) has two
#    values of each: the engine's split (lowest .dec, highest .inc) and the even one (the value
#    both take) must both fit the launch pool;
#  - the PTX has the instructions the design relies on (both wgmma shapes, 4-D TMA loads,
#    mbarrier transaction counts, exp2).
# Usage: [KERNELS="name ..."] check_attn_kernel.sh NVCC ARCH SOURCE -I... (include flags)
#   KERNELS: the entry points to check (default: the engine's two standalone kernels)
set -uo pipefail
nvcc=$1 arch=$2 src=$3
shift 3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
gencode="-gencode=arch=$(echo "$arch" | sed 's/sm_/compute_/'),code=$arch"

if ! "$nvcc" $gencode -std=c++17 -Xptxas -v "$@" -c "$src" -o "$tmp/k.o" >"$tmp/ptxas.txt" 2>&1; then
	cat "$tmp/ptxas.txt"
	echo "not ok 1 - kernel compiles"
	exit 1
fi
echo "ok 1 - kernel compiles for $arch"
if grep -q "C7520" "$tmp/ptxas.txt"; then
	grep "C7520" "$tmp/ptxas.txt"
	echo "not ok 2 - ptxas serialises wgmma"
	fail=1
else
	echo "ok 2 - no wgmma serialisation advisory"
fi

if ! "$nvcc" $gencode -std=c++17 "$@" -ptx "$src" -o "$tmp/k.ptx" >/dev/null 2>&1; then
	echo "not ok 3 - PTX generation"
	exit 1
fi

kernels=${KERNELS:-mk_attn_kernel_d64 mk_attn_kernel_d128}
n=0
for k in $kernels; do
	props=$(grep -A2 "Function properties for $k\$" "$tmp/ptxas.txt")
	regs=$(echo "$props" | sed -n 's/.*Used \([0-9]*\) registers.*/\1/p')
	line=$(echo "$props" | grep "spill stores")
	if [ -z "$line" ]; then
		echo "not ok 3 - $k: no ptxas report"
		fail=1
		continue
	fi
	n=$((n + 1))
	if grep -q "^ *0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" <<<"$line"; then
		echo "ok 3 - $k: no spills, no stack"
	else
		echo "not ok 3 - $k: $line"
		fail=1
	fi
	# this kernel's PTX: from its .entry to the next one
	awk -v k="$k" '/\.entry /{on = index($0, k "(") > 0} on' "$tmp/k.ptx" >"$tmp/$k.ptx"
	threads=$(sed -n 's/^\.maxntid \([0-9]*\),.*/\1/p' "$tmp/$k.ptx")
	dec=$(sed -n 's/.*setmaxnreg\.dec\.sync\.aligned\.u32 \([0-9]*\);.*/\1/p' "$tmp/$k.ptx" | sort -n -u)
	inc=$(sed -n 's/.*setmaxnreg\.inc\.sync\.aligned\.u32 \([0-9]*\);.*/\1/p' "$tmp/$k.ptx" | sort -n -u)
	nd=$(echo "$dec" | wc -w) ni=$(echo "$inc" | wc -w)
	if [ -z "$threads" ] || [ -z "$regs" ] || [ "$nd" != "$ni" ] || [ "$nd" -lt 1 ] ||
		[ "$nd" -gt 2 ]; then
		echo "not ok 4 - $k: register split not found (threads '$threads', registers '$regs'," \
			"dec '$dec', inc '$inc')"
		fail=1
		continue
	fi
	lo=$(echo "$dec" | head -1) hi=$(echo "$inc" | tail -1)
	total=$((128 * lo + (threads - 128) * hi))
	pool=$((threads * regs))
	if [ "$total" -le "$pool" ] && [ "$lo" -le "$regs" ] && [ "$regs" -le "$hi" ]; then
		echo "ok 4 - $k: 128 x $lo + $((threads - 128)) x $hi = $total registers <=" \
			"$threads x $regs = $pool at launch"
	else
		echo "not ok 4 - $k: 128 x $lo + $((threads - 128)) x $hi = $total registers," \
			"launch holds $threads x $regs = $pool (dec must be <= $regs <= inc)"
		fail=1
	fi
	if [ "$nd" = 2 ]; then
		even=$(printf '%s\n%s\n' "$dec" "$inc" | sort | uniq -d)
		if [ "$(echo "$even" | wc -w)" = 1 ] && [ $((threads * even)) -le "$pool" ]; then
			echo "ok 4 - $k: even split after the role: $threads x $even = $((threads * even)) <= $pool"
		else
			echo "not ok 4 - $k: no even split that fits (dec '$dec', inc '$inc', $threads threads)"
			fail=1
		fi
	fi
done
[ "$n" -eq "$(echo "$kernels" | wc -w)" ] || fail=1

for ins in 'wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16' \
	'wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16' \
	'cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes' \
	'mbarrier.arrive.expect_tx' 'mbarrier.try_wait.parity' 'wgmma.wait_group.sync.aligned 1' \
	'ex2.approx.ftz.f32' 'prefetch.tensormap'; do
	if grep -qF "$ins" "$tmp/k.ptx"; then
		echo "ok 5 - PTX has $ins"
	else
		echo "not ok 5 - PTX lacks $ins"
		fail=1
	fi
done
exit $fail
