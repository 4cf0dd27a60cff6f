#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A /dev/shm too small for libfabric's shm regions (a container's 64 MiB default, here 40 MiB in
# a private mount namespace): the module must refuse the connection with a WARN that names
# /dev/shm, and neither peer may die of the provider's SIGBUS. Skips (77) where a mount
# namespace cannot be made.
# usage: small-devshm.sh <test-net-loopback> <plugin .so>
set -uo pipefail
exe=$1 plugin=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' >/dev/null 2>&1; then
	echo "no private mount namespace here: skipping"
	exit 77
fi
unshare -m sh -c 'mount -t tmpfs -o size=40m tmpfs /dev/shm &&
	MKERNEL_TEST_SHM_FORCE=1 exec "$0" --version 11 --case many_comms --transport ofi \
		--provider shm "$1"' "$exe" "$plugin" >"$log" 2>&1
rc=$?
cat "$log"
# Which endpoint runs out first depends on how the two peers' setups interleave: a listen
# refused mid-case fails it (exit 1), a peer whose init found no room ends it as "no device"
# (exit 77). Both are clean refusals; a pass is not.
if { [ $rc -ne 1 ] || ! grep -q "^FAIL many_comms v11" "$log"; } &&
	{ [ $rc -ne 77 ] || ! grep -q "peer ended with code" "$log"; }; then
	echo "FAIL: expected many_comms to be refused on a 40 MiB /dev/shm (exit $rc)"
	exit 1
fi
if grep -q "ended with signal" "$log"; then
	echo "FAIL: a peer died of a signal instead of getting an error"
	exit 1
fi
if ! grep -q "/dev/shm has [0-9]* MiB free" "$log"; then
	echo "FAIL: no WARN naming /dev/shm"
	exit 1
fi
echo "ok - refused cleanly on a small /dev/shm"
