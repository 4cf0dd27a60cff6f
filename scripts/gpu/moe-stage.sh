#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copy what scripts/gpu/moe-run.sh needs from a build directory into one folder (binaries and
# libmkernel.so.0, links resolved), to carry to a GPU host that has only the CUDA runtime and
# driver. Usage: scripts/gpu/moe-stage.sh BUILD DEST
set -euo pipefail
build=${1:?build dir}
dest=${2:?destination}
mkdir -p "$dest"
for f in test/gpu/moe/test-grouped-gpu test/gpu/moe/mkernel-grouped-bench test/gpu/moe/test-moe-gpu; do
	cp "$build/$f" "$dest/" || { echo "missing $build/$f: build it first"; exit 1; }
done
cp -L "$build/fused/libmkernel.so.0" "$dest/libmkernel.so.0"
ls -la "$dest"
