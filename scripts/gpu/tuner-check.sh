#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Tuner check on one GPU host with stock NCCL (through PyTorch): two processes on one GPU, each
# its own fake node (distinct NCCL_HOSTID), so NCCL sees 2 nodes x 1 rank and every byte goes
# through libnccl-net-mkernel.so. Three runs of an all_reduce sweep:
#   tuner  our tuner, default policy (cost model)   -> NCCL's choices equal the tuner's decisions
#   rules  a rules file forcing choices + a bad line -> forced choices and channel caps obeyed,
#                                                      the bad line WARNed with file:line
#   none   NCCL_TUNER_PLUGIN=none                    -> baseline busbw, tuner absent
# Prints JSON lines (checks, busbw with/without the tuner per size) and a table; exits non-zero
# when a check fails. Figures are one-host emulation: they show that decisions take effect and
# what they cost or gain over loopback, not NIC or NVLink speed.
#
# Usage: BUILD=<build dir> scripts/gpu/tuner-check.sh
# Environment: BUILD (default build), PLUGIN (default $BUILD/nccl_plugin/libnccl-net-mkernel.so),
# GPU (default 0), OUT (directory for logs; default a new temporary one), SIZES, ITERS, WARMUP,
# PYTHON (default python3). The transport's own settings (MKERNEL_OFI_PROVIDER,
# LD_LIBRARY_PATH for libfabric, ...) are taken from the caller's environment as they are.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-build}
if [ -f "$BUILD/env.sh" ]; then # an unpacked bundle (scripts/bundle.sh)
	export LD_LIBRARY_PATH="$BUILD/lib:$BUILD/lib/fabric:${LD_LIBRARY_PATH:-}"
	PLUGIN=${PLUGIN:-$BUILD/lib/libnccl-net-mkernel.so}
fi
PLUGIN=${PLUGIN:-$BUILD/nccl_plugin/libnccl-net-mkernel.so}
GPU=${GPU:-0}
PYTHON=${PYTHON:-python3}
SIZES=${SIZES:-4K,16K,64K,256K,1M,4M,16M,64M}
RULE_SIZES=${RULE_SIZES:-4K,64K,1M,4M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
OUT=${OUT:-$(mktemp -d -t mkernel-tuner-check.XXXXXX)}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
sweep="$here/tuner_sweep.py"
failed=0

die() {
	echo "tuner-check: $*" >&2
	exit 2
}

[ -f "$PLUGIN" ] || die "plugin not found: $PLUGIN (set BUILD or PLUGIN)"
PLUGIN=$(cd "$(dirname "$PLUGIN")" && pwd)/$(basename "$PLUGIN")
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs a GPU host"
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
	die "$PYTHON cannot import torch with CUDA"
mkdir -p "$OUT"

# NCCL_TUNER_PLUGIN=mkernel finds libnccl-tuner-mkernel.so on the library path; a path works
# everywhere, so use the symlink next to the plugin when it is there.
tuner_lib=$PLUGIN
[ -e "$(dirname "$PLUGIN")/libnccl-tuner-mkernel.so" ] &&
	tuner_lib=$(dirname "$PLUGIN")/libnccl-tuner-mkernel.so

export NCCL_NET_PLUGIN=$PLUGIN NCCL_NET=mkernel NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0 \
	TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_SOCKET_IFNAME=lo \
	NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,TUNING CUDA_VISIBLE_DEVICES=$GPU \
	MASTER_ADDR=127.0.0.1 WORLD_SIZE=2
unset NCCL_TUNER_PLUGIN MKERNEL_TUNER_ALGO MKERNEL_TUNER_PROTO MKERNEL_TUNER_CHANNELS \
	MKERNEL_TUNER_MAX_CHANNELS MKERNEL_TUNER_CONFIG MKERNEL_TUNER_MODEL

# Two ranks on one GPU: MPS unless MKERNEL_NO_MPS is set (scripts/gpu/mps.sh says why).
# shellcheck source=mps.sh
. "$here/mps.sh"
[ -n "${MKERNEL_NO_MPS:-}" ] || mps_start "$OUT"
trap mps_stop EXIT

free_port() {
	"$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_pair LABEL SIZES VAR=VALUE...: both ranks with the extra variables; logs in $OUT.
run_pair() {
	local label=$1 sizes=$2 port pids=() rc=0
	shift 2
	port=$(free_port)
	for r in 0 1; do
		env "$@" RANK=$r NCCL_HOSTID="mkernel-fake-node-$r" MASTER_PORT="$port" \
			timeout "$RUN_TIMEOUT" "$PYTHON" "$sweep" run --out "$OUT/$label.jsonl" \
			--sizes "$sizes" --iters "$ITERS" --warmup "$WARMUP" \
			>"$OUT/$label.rank$r.log" 2>&1 &
		pids+=($!)
	done
	# A rank that dies leaves its peer blocked in NCCL: stop the peer instead of waiting it out.
	while [ ${#pids[@]} -gt 0 ]; do
		local done_pid= st left=()
		wait -n -p done_pid "${pids[@]}"
		st=$?
		[ -z "$done_pid" ] && break
		for p in "${pids[@]}"; do
			[ "$p" != "$done_pid" ] && left+=("$p")
		done
		pids=("${left[@]}")
		if [ $st -ne 0 ]; then
			rc=1
			for p in "${pids[@]}"; do
				kill "$p" 2>/dev/null
			done
		fi
	done
	wait
	if [ $rc -ne 0 ]; then
		echo "FAIL: run '$label' exited non-zero; see $OUT/$label.rank{0,1}.log" >&2
		tail -5 "$OUT/$label.rank0.log" >&2
		failed=1
	fi
	return $rc
}

check() {
	"$PYTHON" "$sweep" check "$@" || failed=1
}

start=$(date +%s)
# 1. Our tuner with its default policy; every decision logged for the comparison.
if run_pair tuner "$SIZES" NCCL_TUNER_PLUGIN="$tuner_lib" MKERNEL_TUNER_LOG_DECISIONS=1; then
	check --label tuner-decisions --log "$OUT/tuner.rank0.log" --sizes "$SIZES" --decisions
	grep -q "Assigned NET plugin mkernel" "$OUT/tuner.rank0.log" ||
		{ echo "FAIL: net plugin not assigned in the tuner run" >&2; failed=1; }
fi

# 2. A rules file forcing choices NCCL would not make on its own, plus one bad line.
rules="$OUT/tuner-check.rules"
cat >"$rules" <<'EOF'
# tuner-check: forced choices (first match wins)
allreduce 0-256K  nodes=2 -> algo=ring proto=simple channels=1
allreduce 256K-*  nodes=2 -> algo=ring proto=ll channels=2
allreduce 1K-2K -> algo=spiral
EOF
rules_expect="0-256K:ring:simple:1;256K-1T:ring:ll:2"
if run_pair rules "$RULE_SIZES" NCCL_TUNER_PLUGIN="$tuner_lib" MKERNEL_TUNER_CONFIG="$rules"; then
	check --label rules --log "$OUT/rules.rank0.log" --sizes "$RULE_SIZES" \
		--rules-expect "$rules_expect"
	grep -q "rules file $rules:4: unknown algorithm" "$OUT/rules.rank0.log" ||
		{ echo "FAIL: the bad rule was not reported with file:line" >&2; failed=1; }
fi

# 3. Baseline: no tuner at all.
if run_pair none "$SIZES" NCCL_TUNER_PLUGIN=none; then
	check --label none --log "$OUT/none.rank0.log" --sizes "$SIZES" --expect-tuner no
fi

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i "$GPU" | head -1)
nccl=$("$PYTHON" -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))')
torchv=$("$PYTHON" -c 'import torch; print(torch.__version__)')
git=$(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)
meta=$(printf '{"gpu":"%s","nccl":"%s","torch":"%s","git":"%s","date":"%s","host":"%s","provider":"%s","ranks":2,"fake_nodes":2,"iters":%s,"warmup":%s}' \
	"$gpu" "$nccl" "$torchv" "$git" "$(date -u +%FT%TZ)" "$(hostname)" \
	"${MKERNEL_OFI_PROVIDER:-default}" "$ITERS" "$WARMUP")
if [ -s "$OUT/tuner.jsonl" ] && [ -s "$OUT/none.jsonl" ]; then
	"$PYTHON" "$sweep" compare --with "$OUT/tuner.jsonl" --without "$OUT/none.jsonl" \
		--meta "$meta" || failed=1
else
	echo "FAIL: no busbw to compare" >&2
	failed=1
fi
echo "{\"tool\":\"tuner-check\",\"result\":\"$([ $failed -eq 0 ] && echo pass || echo fail)\",\"seconds\":$(($(date +%s) - start)),\"logs\":\"$OUT\"}"
exit $failed
