# SPDX-License-Identifier: Apache-2.0
# Sourced by scripts/gpu/*: where mkernel's files come from, given one directory that is
#   an unpacked bundle (scripts/bundle.sh: env.sh, lib/, lib/fabric/, bin/, python/),
#   a meson build directory (build.ninja: fused/, nccl_plugin/, test/gpu/...), or
#   a flat folder of copied build files (libmkernel.so.0, test-*-gpu, ...: the older way).
#
#   mk_use DIR   exports MKERNEL_LIB, LD_LIBRARY_PATH (+ libfabric), PYTHONPATH (the package)
#                and sets MK_BIN (test binaries), MK_PLUGIN (the NCCL net plugin), MK_KIND.
#   mk_bin DIR   prints the folder of test binaries for DIR (DIR itself unless a bundle).
mk_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

mk_bin() {
	if [ -f "$1/env.sh" ] && [ -d "$1/bin" ]; then
		echo "$1/bin"
	else
		echo "$1"
	fi
}

mk_use() {
	local dir nccl_lib
	dir=$(cd "$1" && pwd) || return 1
	if [ -f "$dir/env.sh" ] && [ -d "$dir/lib" ]; then
		MK_KIND=bundle
		# shellcheck source=/dev/null
		. "$dir/env.sh"
		unset NCCL_NET_PLUGIN # NCCL's own transport unless a script asks for the plugin
		MK_BIN=$dir/bin
		MK_PLUGIN=$dir/lib/libnccl-net-mkernel.so
	else
		# libfabric from the carried Debian packages, as the runtime scripts use it
		export LD_LIBRARY_PATH="$mk_root/.carry/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
		export PYTHONPATH="$mk_root/python${PYTHONPATH:+:$PYTHONPATH}"
		if [ -f "$dir/build.ninja" ]; then
			MK_KIND=build
			export MKERNEL_LIB=$dir/fused/libmkernel.so
			MK_BIN=$dir
			MK_PLUGIN=$dir/nccl_plugin/libnccl-net-mkernel.so
		else
			MK_KIND=flat
			export MKERNEL_LIB=$dir
			MK_BIN=$dir
			MK_PLUGIN=$dir/libnccl-net-mkernel.so
		fi
		export LD_LIBRARY_PATH="$dir:$LD_LIBRARY_PATH"
	fi
	# C programs need NCCL and cuBLAS where torch's wheels keep them (Python finds them itself).
	nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
	export LD_LIBRARY_PATH="$LD_LIBRARY_PATH${nccl_lib:+:$nccl_lib}:/usr/local/cuda/lib64"
	export MK_BIN MK_PLUGIN MK_KIND
}
