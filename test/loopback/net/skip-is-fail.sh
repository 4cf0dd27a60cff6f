#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A loopback run whose precondition holds cannot turn into skips: with libfabric offering the
# provider, a module that fails init (here: its libfabric hidden from it, so it reports no
# backend with ncclInvalidUsage) is a FAIL; only a provider libfabric does not offer is a SKIP.
# usage: skip-is-fail.sh <test-net-loopback> <plugin .so>
set -uo pipefail
exe=$1 plugin=$2
fails=0
# the precondition, asked of libfabric itself (its fi_info), never of the module under test
if ! fi_info -p 'tcp;ofi_rxm' >/dev/null 2>&1; then
	echo "SKIP: libfabric does not offer tcp;ofi_rxm on this host"
	exit 77
fi
export MKERNEL_TRANSPORT=ofi MKERNEL_OFI_IFACE=lo MKERNEL_OFI_LIB=/nonexistent/libfabric.so.1

# expect NAME PROVIDER WANT_RC WANT_LINE
expect() {
	out=$(MKERNEL_OFI_PROVIDER=$2 "$exe" --version 11 --case connect_first "$plugin" 2>&1)
	rc=$?
	echo "$out"
	if [ "$rc" -ne "$3" ] || ! grep -q "$4" <<<"$out"; then
		echo "FAIL: $1: exit $rc (want $3)"
		fails=$((fails + 1))
	else
		echo "PASS: $1"
	fi
}

expect "init failing where libfabric offers the provider is a failure" 'tcp;ofi_rxm' 1 \
	"although libfabric offers the provider"
expect "a provider libfabric does not offer is a skip" 'no-such-provider' 77 \
	"^SKIP connect_first v11\$"
[ $fails -eq 0 ]
