#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copy what the GEMM and GEMM + all-reduce GPU runs need from a build directory into one flat
# folder (default .carry/gemm, which git ignores) to carry to a GPU host: test-gemm-gpu,
# mkernel-gemm-bench, mkernel-calibrate, test-gar-gpu and libmkernel.so.0. They need only the CUDA
# runtime, cuBLAS, NCCL and the driver there (libfabric for the multi-node layouts, under
# .carry/root as scripts/gpu/runtime-all.sh expects).
# Usage: scripts/gpu/gemm-pack.sh BUILD [DEST]
set -euo pipefail
build=${1:?build directory}
dest=${2:-$(cd "$(dirname "$0")/../.." && pwd)/.carry/gemm}
mkdir -p "$dest"
for f in test/gpu/gemm/test-gemm-gpu fused/bench/mkernel-gemm-bench fused/bench/mkernel-calibrate \
	test/gpu/ops/test-gar-gpu; do
	[ -x "$build/$f" ] || { echo "gemm-pack: $build/$f is missing (build it first)"; exit 1; }
	cp "$build/$f" "$dest/"
done
cp -L "$build/fused/libmkernel.so.0" "$dest/libmkernel.so.0"
du -sh "$dest"
