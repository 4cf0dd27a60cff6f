#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Host side of the rdma test suite: boot a qemu TCG guest (Debian 12 kernel, rdma_rxe on a netdev),
# run a guest script from the 9p-shared repository inside it, and turn the serial markers into an
# exit status: 0 pass, 1 fail, 77 skip (qemu or the kernel package unavailable).
# Usage: see scripts/rxe-vm/README.md.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() {
	cat <<'USAGE'
usage: run.sh --build <build dir> --guest-script <path> [options]
       run.sh --selftest [--build <build dir>] [options]
options:
  --timeout S       host-side limit for the whole guest run (default 480)
  --log FILE        serial log (default <build dir>/rxe-vm/serial.log)
  --netdev lo|dummy netdev under rxe0 (default lo; dummy for rdma_cm tests)
  --bin FILE        extra binary the guest runs: its libraries go into the initramfs
  --cache DIR       kernel and initramfs cache (default <build dir>/rxe-vm)
USAGE
}

die() {
	echo "rxe-vm: $*" >&2
	exit 1
}

build=
guest_script=
selftest=0
timeout_s=480
log=
netdev=lo
cache=
bins=()
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--guest-script) guest_script=$2; shift 2 ;;
	--selftest) selftest=1; shift ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--log) log=$2; shift 2 ;;
	--netdev) netdev=$2; shift 2 ;;
	--bin) bins+=("$2"); shift 2 ;;
	--cache) cache=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 1 ;;
	esac
done
[ "$selftest" = 1 ] || [ -n "$guest_script" ] || { usage >&2; exit 1; }
[ "$selftest" = 1 ] || [ -n "$build" ] || { usage >&2; exit 1; }
case $timeout_s in ''|*[!0-9]*) die "--timeout takes seconds" ;; esac
case $netdev in lo|dummy) ;; *) die "--netdev is lo or dummy" ;; esac

# Selftest without a build dir keeps its cache in a scratch dir of the checkout (git-ignored).
[ -n "$build" ] || build=$repo/build-rxe
mkdir -p "$build" || die "cannot create $build"
build=$(cd "$build" && pwd -P)
repo=$(cd "$repo" && pwd -P)
[ -n "$cache" ] || cache=$build/rxe-vm
mkdir -p "$cache" || die "cannot create $cache"
cache=$(cd "$cache" && pwd -P)
if [ -z "$log" ]; then
	if [ "$selftest" = 1 ]; then log=$cache/selftest-serial.log; else log=$cache/serial.log; fi
fi
mkdir -p "$(dirname "$log")"

# One run at a time per user on this host: TCG takes every core it is given, and runs sharing a
# cache must not rebuild the initramfs under each other.
lock=${TMPDIR:-/tmp}/rxe-vm-$(id -u).lock
exec 9>"$lock"
if ! flock -n 9; then
	echo "rxe-vm: another guest is running; waiting up to ${timeout_s} s for it"
	flock -w "$timeout_s" 9 || die "another guest is still running (lock $lock)"
fi

# 1. host packages
need_deps=0
for c in qemu-system-x86_64 cpio busybox file ib_write_bw ibv_devinfo ibv_rc_pingpong rping rdma; do
	command -v "$c" >/dev/null || need_deps=1
done
if [ "$need_deps" = 1 ]; then
	"$here/deps.sh"
	rc=$?
	[ "$rc" = 0 ] || exit "$rc"
fi

# 2. kernel (cached by version)
kdir=$("$here/kernel.sh" "$cache")
rc=$?
[ "$rc" = 0 ] || exit "$rc"

# Guest paths: the repository is host0 at /mnt/host; a build dir outside it is host1 at /mnt/build.
share2=0
case $build/ in
"$repo"/*) guest_build=/mnt/host${build#"$repo"} ;;
*) share2=1; guest_build=/mnt/build ;;
esac
to_guest() {
	case $1 in
	"$build"/*) echo "$guest_build${1#"$build"}" ;;
	"$repo"/*) echo "/mnt/host${1#"$repo"}" ;;
	*) return 1 ;;
	esac
}

# 3. guest script and the binaries it declares ("# rxe-vm-needs: <path under the build dir>")
guest_path=
if [ -n "$guest_script" ]; then
	gs=
	for cand in "$guest_script" "$repo/$guest_script" "$build/$guest_script"; do
		case $cand in /*) [ -f "$cand" ] && gs=$(readlink -f "$cand") && break ;; esac
	done
	[ -n "$gs" ] || die "guest script $guest_script not found in $repo or $build"
	guest_path=$(to_guest "$gs") || die "guest script $gs is outside the repository and build dir"
	while read -r rel; do
		[ -f "$build/$rel" ] && bins+=("$build/$rel")
	done < <(awk '$1 == "#" && $2 == "rxe-vm-needs:" { for (i = 3; i <= NF; i++) print $i }' "$gs")
fi
for p in "$repo" "$build" "$guest_path"; do
	case $p in *[[:space:]]*) die "paths with blanks are not supported: $p" ;; esac
done

shares=(--share "$repo" --share "$build")
initrd=$("$here/initramfs.sh" "$kdir" "$cache" "${shares[@]}" "${bins[@]}") ||
	die "initramfs build failed"

# 4. boot
guest_timeout=$((timeout_s > 120 ? timeout_s - 60 : 60))
tests=1
[ -z "$guest_path" ] || tests=0	# the guest script runs the stock checks itself
append="console=ttyS0 panic=-1 quiet rxe_netdev=$netdev rxe_tests=$tests rxe_src=/mnt/host"
append+=" rxe_build=$guest_build rxe_share2=$share2 rxe_timeout=$guest_timeout"
[ -z "$guest_path" ] || append+=" rxe_script=$guest_path"
qemu=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 2048
	-kernel "$kdir/vmlinuz" -initrd "$initrd" -nic none
	-virtfs "local,path=$repo,mount_tag=host0,security_model=none,id=host0"
	-nographic -no-reboot -append "$append")
[ "$share2" = 0 ] ||
	qemu+=(-virtfs "local,path=$build,mount_tag=host1,security_model=none,id=host1")


echo "rxe-vm: kernel $(basename "$kdir"), initramfs $(basename "$initrd"), log $log"
start=$(date +%s.%N)
# Serial console -> strip ANSI/VT100 escapes and CRs -> log and stdout.
timeout -k 10 "$timeout_s" "${qemu[@]}" </dev/null 2>&1 |
	sed -u -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1b[()][A-Za-z0-9]//g' \
		-e 's/\x1b[=>c78]//g' -e 's/\r//g' | tee "$log"
qrc=${PIPESTATUS[0]}
end=$(date +%s.%N)
exec 9>&-

# 5. verdict: the markers decide; qemu's exit status only tells a timeout apart.
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
npass=$(grep -c 'RXEVM: [^ ]* PASS$' "$log")
nskip=$(grep -c 'RXEVM: [^ ]* SKIP$' "$log")
nfail=$(grep -cE 'RXEVM: [^ ]+ FAIL|RXEVM: [^ ]+ exit=[1-9]' "$log")
done_seen=0
grep -q 'RXEVM: done' "$log" && done_seen=1
echo "rxe-vm: wall ${wall} s, qemu exit $qrc; markers: $npass pass, $nskip skip, $nfail fail"
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	echo "rxe-vm: guest killed after the ${timeout_s} s limit"
fi
if [ "$done_seen" = 1 ] && [ "$nfail" = 0 ]; then
	echo "rxe-vm: PASS"
	exit 0
fi
grep -E 'RXEVM: [^ ]+ FAIL|RXEVM: [^ ]+ exit=[1-9]' "$log" | sed 's/^/rxe-vm: failed: /'
[ "$done_seen" = 1 ] || echo "rxe-vm: no 'RXEVM: done' marker: the guest did not finish"
echo "rxe-vm: FAIL (serial log: $log)"
exit 1
