#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Check the dynamic symbol surface of the NCCL plugin library:
#   - nm -D --defined-only lists exactly the plugin tables (tuner tables with --tuner);
#   - nothing undefined comes from libibverbs, libfabric or CUDA (backends dlopen them);
#   - ldd shows none of those libraries; the module carries no SONAME.
# Usage: check-exports.sh [--tuner] path/to/libnccl-net-mkernel.so
set -uo pipefail

tuner=0
if [ "${1:-}" = "--tuner" ]; then
	tuner=1
	shift
fi
lib=${1:?usage: check-exports.sh [--tuner] LIBRARY}
fail=0

if [ ! -f "$lib" ]; then
	echo "FAIL: $lib does not exist"
	exit 1
fi

expected="ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v8 ncclNetPlugin_v9"
if [ "$tuner" = 1 ]; then
	expected="$expected ncclTunerPlugin_v4 ncclTunerPlugin_v5"
fi
expected=$(printf '%s\n' $expected | LC_ALL=C sort)

defined=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' |
	LC_ALL=C sort -u)
if [ "$defined" != "$expected" ]; then
	echo "FAIL: exported symbols differ from the plugin tables"
	echo "--- expected"
	printf '%s\n' "$expected"
	echo "--- nm -D --defined-only"
	printf '%s\n' "$defined"
	fail=1
else
	echo "ok: exports are exactly: $(printf '%s ' $defined)"
fi

bad_undef=$(nm -D --undefined-only "$lib" | awk '{ print $NF }' | sed 's/@.*//' |
	grep -E '^(ibv_|fi_|cuda|cu[A-Z]|nccl)' || true)
if [ -n "$bad_undef" ]; then
	echo "FAIL: undefined symbols that must be reached through dlopen tables:"
	printf '  %s\n' $bad_undef
	fail=1
else
	echo "ok: no ibv_*/fi_*/cuda*/cu*/nccl* undefined symbols"
fi

bad_libs=$(ldd "$lib" 2>&1 | grep -E 'libfabric|libibverbs|libcuda|libcudart|libnccl' || true)
if [ -n "$bad_libs" ]; then
	echo "FAIL: linked against libraries the plugin must only dlopen:"
	printf '%s\n' "$bad_libs"
	fail=1
else
	echo "ok: ldd shows no libfabric/libibverbs/libcuda/libcudart"
fi

if readelf -d "$lib" | grep '(SONAME)' >/dev/null; then
	echo "FAIL: the module has a SONAME"
	fail=1
else
	echo "ok: no SONAME"
fi

exit $fail
