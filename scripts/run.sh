#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The main job: install what is missing, build, and run the plugin bandwidth benchmark between
# two local processes over the libfabric plugin (and the raw libfabric ceiling in the same run),
# printing a table. Usage: scripts/run.sh [build-dir] [extra mkernel-netbench options]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

bash scripts/deps.sh
[ -f "$build/build.ninja" ] || meson setup "$build"
ninja -C "$build"
export MKERNEL_OFI_IFACE=${MKERNEL_OFI_IFACE:-lo}
provider=${MKERNEL_OFI_PROVIDER:-tcp;ofi_rxm}
mkdir -p "$build/bench"
"$build/nccl_plugin/tools/mkernel-netbench" --transport ofi --provider "$provider" \
	--json "$build/bench/netbench.jsonl" "$@"
echo "JSON lines: $build/bench/netbench.jsonl"
