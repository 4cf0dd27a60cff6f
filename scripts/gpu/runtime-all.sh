#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Everything of the device runtime on one GPU host in one call: queue, roles and comm tests
# (two fake nodes; a dead rank; the benchmarks under MPS), compute-sanitizer, the CPU queue
# benchmark. Key lines go to stdout; all logs into OUTDIR/rt.tgz.
# Usage: scripts/gpu/runtime-all.sh BIN OUTDIR   (libfabric unpacked under .carry/root)
set -u
bin=$(cd "$1" && pwd)
outdir=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$here/.carry/root/usr/lib/x86_64-linux-gnu:${nccl_lib:+$nccl_lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
r=$(mktemp -d)/rt
mkdir -p "$r"
"$here/scripts/gpu/runtime-run.sh" "$bin" "$r" info test 2>&1 | tee "$r/run1.log" | grep -vE '^ok '
comm() {
	local name=$1
	shift
	"$here/scripts/gpu/runtime-comm.sh" "$bin/test-comm-gpu" "$@" >"$r/comm-$name.log" 2>&1
	echo "== comm $name ($*): exit $?"
	grep -E '^\{|FAIL|failure|node [0-9]|async|dying|exit' "$r/comm-$name.log" | head -40
}
RANK_TIMEOUT=90 comm a a
RANK_TIMEOUT=40 comm kill a --kill
MPS=1 RANK_TIMEOUT=90 comm a4-mps a4
MPS=1 RANK_TIMEOUT=150 comm bench a --bench
"$here/scripts/gpu/runtime-run.sh" "$bin" "$r" sanitize bench 2>&1 | tee "$r/run2.log"
mkdir -p "$outdir"
tar czf "$outdir/rt.tgz" -C "$(dirname "$r")" rt
