#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A case whose peer is meant to die may skip before it gets there (v8 has no makeVDevice, so
# --fuse skips in both peers): that is a SKIP, not the FAIL of a peer that lived through its
# own SIGKILL. The rdma guest runs every version with --fuse and turned this into a failure.
# usage: killed-skip.sh <test-net-loopback> <plugin .so>
set -uo pipefail
exe=$1 plugin=$2
fails=0
for c in recv_killed send_killed; do
	out=$("$exe" --version 8 --case "$c" --fuse 0,1 --transport ofi "$plugin" 2>&1)
	echo "$out"
	if ! grep -q "^SKIP $c v8\$" <<<"$out"; then
		echo "FAIL: $c v8 with --fuse must be reported as SKIP"
		fails=$((fails + 1))
	fi
done
[ $fails -eq 0 ] || exit 1
echo "PASS: a killed case that skips before the kill is a SKIP"
