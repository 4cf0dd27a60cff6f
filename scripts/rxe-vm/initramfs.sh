#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build the guest initramfs: static busybox, the kernel modules in load order, the stock rdma tools
# with every library ldd lists (plus what libibverbs and glibc dlopen), /init and the guest helper.
# The archive is cached under a name that hashes the kernel version, the scripts and the file list.
# Usage: initramfs.sh <kernel dir> <cache dir> [--share DIR]... [ELF file]...
#   --share DIR: libraries under DIR are reached over 9p in the guest, so they are not copied.
#   ELF files: binaries the guest will run (from the share); only their libraries are copied.
# Prints the path of the .cpio.gz.
set -euo pipefail

kdir=${1:?usage: initramfs.sh <kernel dir> <cache dir> [--share DIR]... [ELF]...}
cache=${2:?usage: initramfs.sh <kernel dir> <cache dir> [--share DIR]... [ELF]...}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
shares=()
extra=()
while [ $# -gt 0 ]; do
	case $1 in
	--share) shares+=("$(readlink -f "$2")"); shift 2 ;;
	*) extra+=("$1"); shift ;;
	esac
done

log() { echo "rxe-vm: $*" >&2; }
# set -e ends the script without a word; say which command stopped it
trap 'log "initramfs.sh: line $LINENO: \"$BASH_COMMAND\" failed"' ERR

# Stock tools run inside the guest (perftest, ibverbs-utils, rdmacm-utils, iproute2).
tools=(ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong rdma ip ib_write_bw ib_read_bw
	ib_send_lat ib_write_lat rping)
# Loaded with dlopen, so ldd of the tools does not list them; libfabric only where installed.
dlopened=(libibverbs.so.1 librdmacm.so.1 libgcc_s.so.1 libfabric.so.1)

busybox=$(command -v busybox || true)
# (a captured string, not a pipe into grep -q: see soname_path below for why)
case $([ -n "$busybox" ] && file -L "$busybox") in
*'statically linked'*) static=1 ;;
*) static=0 ;;
esac
if [ "$static" = 0 ]; then
	log "static busybox not found (apt-get install busybox-static)"
	exit 1
fi

# path of a shared library by soname, from the loader cache. awk reads to the end: leaving
# early would kill ldconfig with SIGPIPE, which pipefail turns into a silent exit of this script
# whenever ldconfig had not finished writing (it failed the rdma suite now and then).
soname_path() {
	ldconfig -p | awk -v n="$1" '!f && $1 == n && /x86-64/ { print $NF; f = 1 }'
}

under_share() {
	local s
	for s in "${shares[@]}"; do
		case $1 in "$s"/*) return 0 ;; esac
	done
	return 1
}

# ldd lines: "libx.so.1 => /path (0x..)" or "/lib64/ld-linux-x86-64.so.2 (0x..)".
# mawk has no \s: whitespace classes are spelled [ \t].
ldd_paths() {
	ldd "$1" 2>/dev/null | awk '
		$2 == "=>" && $3 ~ /^\// { print $3; next }
		$2 == "=>" && $3 == "not" { print "MISSING " $1; next }
		$1 ~ /^\// { print $1 }' || true
}

files=()	# host paths to copy into the same place in the guest
add_file() {
	files+=("$1")
}

for t in "${tools[@]}"; do
	p=$(command -v "$t" || true)
	if [ -z "$p" ]; then
		log "tool $t not found on the host"
		exit 1
	fi
	add_file "$p"
done
for n in "${dlopened[@]}"; do
	p=$(soname_path "$n")
	if [ -n "$p" ]; then
		add_file "$p"
	elif [ "$n" != libfabric.so.1 ]; then
		log "library $n not found on the host"
		exit 1
	fi
done
provider=$(find /usr/lib/x86_64-linux-gnu/libibverbs /usr/lib64/libibverbs -maxdepth 1 \
	-name 'librxe-rdmav*.so' -print -quit 2>/dev/null || true)
if [ -z "$provider" ] || [ ! -f /etc/libibverbs.d/rxe.driver ]; then
	log "rxe provider not found (apt-get install ibverbs-providers)"
	exit 1
fi
add_file "$provider"

libs=()
for f in "${files[@]}" "${extra[@]}"; do
	while read -r l; do
		case $l in
		MISSING*) log "warning: ${l#MISSING } needed by $f not found on the host" ;;
		*) under_share "$(readlink -f "$l")" || libs+=("$l") ;;
		esac
	done < <(ldd_paths "$f")
done
mapfile -t all < <(printf '%s\n' "${files[@]}" "${libs[@]}" | sort -u)

# Cache key: kernel, every script that shapes the archive, and the files with size and time.
key=$( {
	basename "$kdir"
	cat "$here/init.sh" "$here/guest-lib.sh" "$here/initramfs.sh" "$kdir/modules.order"
	for f in "${all[@]}"; do stat -L -c '%n %s %Y' "$f"; done
	stat -L -c '%n %s %Y' "$busybox" /etc/libibverbs.d/rxe.driver
} | sha256sum | cut -c1-16)
out=$cache/initramfs-$(basename "$kdir")-$key.cpio.gz
if [ -f "$out" ]; then
	echo "$out"
	exit 0
fi

root=$(mktemp -d "$cache/initramfs.XXXXXX")
trap 'rm -rf "$root"' EXIT
# Merged /usr like the host, so every path ldd printed is valid in the guest.
mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{dev,proc,sys,tmp,run,mnt/host,mnt/build,etc,root}
for d in bin sbin lib lib64; do
	ln -s "usr/$d" "$root/$d"
done
cp "$busybox" "$root/usr/bin/busybox"

# Copy each file to its real directory under its own name (sonames are symlinks on the host).
copy_in() {
	local dir dest
	dir=$(readlink -f "$(dirname "$1")")
	dest=$root$dir/$(basename "$1")
	mkdir -p "$root$dir"
	cp -L "$1" "$dest"
}
for f in "${all[@]}"; do
	copy_in "$f"
done
# The ELF interpreter path (PT_INTERP) points through /lib64.
if [ ! -e "$root/lib64/ld-linux-x86-64.so.2" ]; then
	ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/usr/lib64/ld-linux-x86-64.so.2"
fi

mkdir -p "$root/etc/libibverbs.d" "$root/lib/modules" "$root/lib/rxe-vm"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
cp /etc/protocols /etc/services "$root/etc/"
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
echo '127.0.0.1 localhost' >"$root/etc/hosts"
cp "$kdir"/modules/*.ko "$kdir/modules.order" "$root/lib/modules/"
install -m 0755 "$here/init.sh" "$root/init"
install -m 0644 "$here/guest-lib.sh" "$root/lib/rxe-vm/guest-lib.sh"

rm -f "$cache"/initramfs-*.cpio.gz
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp"
mv "$out.tmp" "$out"
log "initramfs $(basename "$out") ($(du -k "$out" | cut -f1) KiB, ${#all[@]} files)"
echo "$out"
