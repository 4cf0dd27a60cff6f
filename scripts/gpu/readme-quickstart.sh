#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The README's quick start exactly as written (the python block between its quickstart
# markers), under torchrun with NPROC ranks on one node, one GPU each: every rank must print
# "exact: True". mkernel must be importable (scripts/gpu/python-env.sh's mk_use, or installed).
# usage: scripts/gpu/readme-quickstart.sh OUTDIR NPROC     Exit: 0 pass, 1 fail.
set -uo pipefail
out=${1:?usage: readme-quickstart.sh OUTDIR NPROC}
nproc=${2:?usage: readme-quickstart.sh OUTDIR NPROC}
root=$(cd "$(dirname "$0")/../.." && pwd)
# Never NVLink multicast: torchrun's ranks inherit these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out"
awk '/<!-- quickstart:begin -->/ { on = 1; next } /<!-- quickstart:end -->/ { on = 0 }
	on && /^```python/ { code = 1; next } on && /^```/ { code = 0 } code' \
	"$root/README.md" >"$out/quickstart.py"
[ -s "$out/quickstart.py" ] || { echo "no quick start found in README.md"; exit 1; }
(cd "$out" && torchrun --nproc-per-node="$nproc" quickstart.py) 2>&1 | tee "$out/torchrun.log"
rc=${PIPESTATUS[0]}
got=$(grep -c 'exact: True' "$out/torchrun.log")
echo "readme-quickstart: torchrun exit $rc, $got of $nproc ranks exact"
[ "$rc" = 0 ] && [ "$got" = "$nproc" ]
