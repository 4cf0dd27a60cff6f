#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Fetch the Debian kernel behind linux-image-amd64 without installing it, and keep what the guest
# needs (vmlinuz, the soft-RoCE/9p modules in load order) in a cache keyed by kernel version.
# Usage: kernel.sh <cache dir>   -> prints the kernel directory (vmlinuz, modules/, modules.order)
# Exit 77: no kernel in the cache and the package cannot be resolved or downloaded.
set -euo pipefail

cache=${1:?usage: kernel.sh <cache dir>}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$cache/debs"
cache=$(cd "$cache" && pwd)

# shellcheck source=modules.list
mapfile -t modules < <(grep -v '^[ \t]*#' "$here/modules.list" | tr -s ' \t' '\n' | grep -v '^$')

log() { echo "rxe-vm: $*" >&2; }

# The versioned package the metapackage points at, e.g. linux-image-6.1.0-57-amd64.
resolve_pkg() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '!f && $1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; f = 1 }'
}

pkg=$(resolve_pkg || true)
if [ -z "$pkg" ]; then
	# Offline or no package lists: fall back to the newest kernel already in the cache.
	kdir=$(find "$cache" -maxdepth 1 -name 'kernel-*' -type d | sort -V | tail -n 1)
	if [ -n "$kdir" ] && [ -f "$kdir/complete" ]; then
		log "linux-image-amd64 not resolvable; using cached $kdir"
		echo "$kdir"
		exit 0
	fi
	log "cannot resolve linux-image-amd64 (run apt-get update) and no cached kernel"
	exit 77
fi
kver=${pkg#linux-image-}
kdir=$cache/kernel-$kver
if [ -f "$kdir/complete" ]; then
	echo "$kdir"
	exit 0
fi

deb=$(find "$cache/debs" -maxdepth 1 -name "${pkg}_*.deb" -print -quit)
if [ -z "$deb" ]; then
	log "downloading $pkg"
	# apt's sandbox user may not write here; the download still works unsandboxed as root.
	if ! (cd "$cache/debs" && apt-get download -q "$pkg" >&2); then
		log "apt-get download $pkg failed"
		exit 77
	fi
	deb=$(find "$cache/debs" -maxdepth 1 -name "${pkg}_*.deb" -print -quit)
fi

tmp=$(mktemp -d "$cache/unpack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "unpacking $(basename "$deb")"
dpkg-deb -x "$deb" "$tmp"

rm -rf "$kdir"
mkdir -p "$kdir/modules"
cp "$tmp/boot/vmlinuz-$kver" "$kdir/vmlinuz"
moddir=
for d in "$tmp/lib/modules/$kver" "$tmp/usr/lib/modules/$kver"; do
	[ -d "$d" ] && moddir=$d && break
done
if [ -z "$moddir" ]; then
	log "no lib/modules/$kver in $pkg"
	exit 1
fi
: >"$kdir/modules.order"
for m in "${modules[@]}"; do
	f=$(find "$moddir" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" \
		-o -name "$m.ko.gz" \) -print -quit)
	if [ -z "$f" ]; then
		log "module $m missing from $pkg"
		exit 1
	fi
	# busybox insmod takes plain .ko files: decompress on the host.
	case $f in
	*.xz) xz -dc "$f" >"$kdir/modules/$m.ko" ;;
	*.zst) zstd -qdc "$f" >"$kdir/modules/$m.ko" ;;
	*.gz) gzip -dc "$f" >"$kdir/modules/$m.ko" ;;
	*) cp "$f" "$kdir/modules/$m.ko" ;;
	esac
	echo "$m" >>"$kdir/modules.order"
done
echo "$pkg" >"$kdir/complete"
log "kernel $kver cached in $kdir"
echo "$kdir"
