#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One plugin binary serves hosts that have only one of the two RDMA stacks. The caller hides a
# library from the loader (MKERNEL_IBVERBS_LIB or MKERNEL_OFI_LIB pointing nowhere); with
# MKERNEL_TRANSPORT=auto the plugin must still load, pick the other backend, and move data.
# usage: hidden-lib.sh <mkernel-netbench> <plugin .so> <expected device-name prefix>
set -u
# pipefail where the shell has it (bash, busybox ash; Debian's dash lacks it)
(set -o pipefail) 2>/dev/null && set -o pipefail
netbench=$1 plugin=$2 want=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$netbench" --plugin "$plugin" --transport auto --raw none --sizes 64K --windows 1 \
	--lat-sizes 8 --reps 1 --warmup 0 --min-bytes 1M >/dev/null 2>"$log"
rc=$?
cat "$log"
if [ $rc -ne 0 ]; then
	echo "FAIL: netbench exited $rc with a library hidden"
	exit 1
fi
if ! grep -q "device 0 '$want" "$log"; then
	echo "FAIL: expected the plugin to pick a '$want' device"
	exit 1
fi
echo "PASS: plugin loaded without the hidden library and used '$want'"
