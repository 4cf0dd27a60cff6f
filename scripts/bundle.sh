#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# One relocatable tarball for a GPU node without a package registry: the NCCL plugin,
# libmkernel.so, headers, mkernel.pc, the parameter table, the Python package (as a wheel and as
# an importable folder), the GPU tests and benchmarks of this build (bin/), and the libfabric
# runtime the plugin was built against (Debian's libfabric1 of the installed version and the
# libraries it needs: apt-get download + dpkg -x, no root needed on the node). The node brings
# CUDA, NCCL and cuBLAS (torch's wheels or the toolkit).
#
# usage: scripts/bundle.sh BUILD [OUT.tar.gz]    (default OUT: BUILD/mkernel-bundle.tar.gz)
#   MKERNEL_BUNDLE_NO_FABRIC=1  leave libfabric out (the node has its own)
#   MKERNEL_BUNDLE_DIR=DIR      also leave the unpacked bundle in DIR (what scripts/gpu/* take)
# Layout: README env.sh lib/ lib/fabric/ lib/pkgconfig/ include/ bin/ python/ wheels/ share/
set -euo pipefail
build=$(cd "${1:?usage: scripts/bundle.sh BUILD [OUT.tar.gz]}" && pwd)
out=${2:-$build/mkernel-bundle.tar.gz}
root=$(cd "$(dirname "$0")/.." && pwd)
step() { echo "bundle: $*"; }
fail() {
	echo "bundle: FAILED: $*" >&2
	exit 1
}

[ -f "$build/build.ninja" ] || fail "$build is not a meson build directory"
# Meson before 1.3 passes nvcc no dependency flags, so ninja knows no header of a CUDA object
# (`ninja -t deps` lists none) and a changed header (the adaptive controller's, say) would ship
# stale kernels. Objects older than the newest header of the tree are compiled again.
newest=$(git -C "$root" ls-files -z '*.h' '*.cuh' | (cd "$root" && xargs -0 stat -c %Y) | sort -n | tail -1)
stale=0
while IFS= read -r -d '' o; do
	if [ "$(stat -c %Y "$o")" -lt "${newest:-0}" ]; then
		rm -f "$o"
		stale=$((stale + 1))
	fi
done < <(find "$build" -name '*.cu.o' -print0)
[ "$stale" = 0 ] || step "$stale CUDA objects older than the newest header: compiled again"
ninja -C "$build" >/dev/null || fail "ninja -C $build"
version=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
name=mkernel-$version
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
b=$tmp/$name
mkdir -p "$b"/{lib/pkgconfig,include,bin,python,wheels,share}

step "meson install into a scratch destdir"
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/inst" >/dev/null ||
	fail "meson install"
so=$(find "$tmp/inst" -name 'libmkernel.so.0' | head -1)
[ -n "$so" ] || fail "libmkernel.so is not built in $build (CUDA toolkit missing at setup?)"
libdir=$(dirname "$so")
prefix_dir=$(dirname "$(dirname "$(find "$tmp/inst" -path '*/include/mkernel.h' | head -1)")")
cp -a "$libdir"/libmkernel.so* "$libdir"/libnccl-net-mkernel.so "$libdir"/libnccl-tuner-mkernel.so \
	"$b/lib/"
cp -a "$prefix_dir/include/mkernel.h" "$b/include/"
cp -a "$prefix_dir/share/man" "$prefix_dir/share/doc" "$b/share/"
cp -a "$prefix_dir"/bin/* "$b/bin/"
# pkg-config relative to the file itself, wherever the bundle is unpacked
sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' -e 's|^libdir=.*|libdir=${prefix}/lib|' \
	"$libdir/pkgconfig/mkernel.pc" >"$b/lib/pkgconfig/mkernel.pc"

step "GPU tests and benchmarks of this build into bin/"
find "$build/test/gpu" "$build/fused" -maxdepth 3 -type f -perm -u+x \
	\( -name 'test-*-gpu*' -o -name 'mkernel-*bench*' \) ! -name '*.p' -exec cp -a {} "$b/bin/" \;

step "Python package and wheel"
cp -a "$root/python" "$tmp/pysrc"
rm -rf "$tmp/pysrc/build" "$tmp/pysrc"/*.egg-info
find "$tmp/pysrc" -name __pycache__ -prune -exec rm -rf {} +
cp -a "$tmp/pysrc/mkernel" "$b/python/"
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$b/wheels" "$tmp/pysrc" >/dev/null ||
	fail "pip wheel ./python"

if [ -z "${MKERNEL_BUNDLE_NO_FABRIC:-}" ]; then
	# The libfabric the plugin was built against (libfabric-dev's version), and what it needs
	# beyond glibc: the list verified on Ubuntu 24.04 GPU hosts.
	fab_version=$(dpkg-query -W -f='${Version}' libfabric1 2>/dev/null) ||
		fail "libfabric1 is not installed here: which version was the plugin built against?"
	pkgs=("libfabric1=$fab_version" libfabric-bin ibverbs-providers libibverbs1 librdmacm1
		libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libatomic1)
	step "libfabric $fab_version runtime: apt-get download ${pkgs[*]}"
	mkdir -p "$tmp/debs" "$tmp/fab"
	(cd "$tmp/debs" && apt-get download -q "${pkgs[@]}" >/dev/null 2>&1) ||
		fail "apt-get download (run apt-get update once)"
	for d in "$tmp"/debs/*.deb; do
		dpkg -x "$d" "$tmp/fab"
	done
	mkdir -p "$b/lib/fabric"
	for d in "$tmp/fab/lib/x86_64-linux-gnu" "$tmp/fab/usr/lib/x86_64-linux-gnu"; do
		[ -d "$d" ] && cp -a "$d/." "$b/lib/fabric/"
	done
	# libpsm-infinipath1 ships its library under libpsm1/ and names it through
	# update-alternatives at install time: link its soname here instead.
	for f in "$tmp"/fab/usr/lib/libpsm1/*.so.*; do
		[ -f "$f" ] || continue
		cp -a "$f" "$b/lib/fabric/"
		soname=$(objdump -p "$f" | awk '$1 == "SONAME" { print $2 }')
		ln -sf "$(basename "$f")" "$b/lib/fabric/$soname"
	done
	if [ -x "$tmp/fab/usr/bin/fi_info" ]; then
		cp -a "$tmp/fab/usr/bin/fi_info" "$b/bin/"
	fi
	# Every library a bundled one needs is bundled too, or is on every Debian or Ubuntu node (glibc,
	# libgcc, libuuid of util-linux, all essential packages): checked
	# on the ELF headers, since ldd here would find this machine's own copies.
	base='^(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libgcc_s|libuuid)\.so'
	missing=$(for f in "$b"/lib/fabric/*.so.*; do
		[ -L "$f" ] && continue
		objdump -p "$f" | awk '$1 == "NEEDED" { print $2 }'
	done | sort -u | while read -r need; do
		[[ $need =~ $base ]] || [ -e "$b/lib/fabric/$need" ] || echo "$need"
	done)
	[ -z "$missing" ] || fail "libfabric runtime incomplete, not bundled: $missing"
	ls "$b"/lib/fabric/libfabric.so.1 >/dev/null || fail "no libfabric.so.1 in the packages"
fi

cat >"$b/env.sh" <<'EOF'
# Source me (bash): mkernel's libraries, NCCL plugin and Python package from this folder.
mk_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$mk_bundle/lib:$mk_bundle/lib/fabric${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NET_PLUGIN=$mk_bundle/lib/libnccl-net-mkernel.so
export MKERNEL_LIB=$mk_bundle/lib
export PYTHONPATH="$mk_bundle/python${PYTHONPATH:+:$PYTHONPATH}"
export PKG_CONFIG_PATH="$mk_bundle/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PATH="$mk_bundle/bin:$PATH"
EOF
cat >"$b/README" <<'EOF'
Everything at once: `source env.sh` (library path with lib/ and lib/fabric/, NCCL_NET_PLUGIN, MKERNEL_LIB, PYTHONPATH, PKG_CONFIG_PATH, PATH).
NCCL alone: NCCL_NET_PLUGIN=$PWD/lib/libnccl-net-mkernel.so NCCL_NET=mkernel LD_LIBRARY_PATH=$PWD/lib:$PWD/lib/fabric:$LD_LIBRARY_PATH <your job>
Python: pip install --no-deps wheels/mkernel-*.whl && MKERNEL_LIB=$PWD/lib python3 -c 'import mkernel; print(mkernel.library())'
EOF
echo "$version" >"$b/VERSION"

mkdir -p "$(dirname "$out")"
tar czf "$out" -C "$tmp" "$name"
if [ -n "${MKERNEL_BUNDLE_DIR:-}" ]; then
	rm -rf "$MKERNEL_BUNDLE_DIR"
	mkdir -p "$(dirname "$MKERNEL_BUNDLE_DIR")"
	cp -a "$b" "$MKERNEL_BUNDLE_DIR"
fi
step "$out ($(du -h "$out" | cut -f1), $(tar tzf "$out" | wc -l) entries)"
