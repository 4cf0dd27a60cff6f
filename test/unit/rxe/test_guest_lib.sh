#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The rdma guest's verdict helpers (scripts/rxe-vm/guest-lib.sh), run on the host with a POSIX
# shell: a test that skips (77) is a SKIP only until the guest has proven rxe0 ACTIVE, then a
# FAIL; a binary the guest must run but that was not built is a FAIL, never a SKIP.
# Usage: test_guest_lib.sh GUEST_LIB
# pipefail where the shell has it (bash, busybox ash; Debian's dash lacks it)
(set -o pipefail) 2>/dev/null && set -o pipefail
. "$1"
MK_TIMEOUT=10
fails=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

expect() { # expect <name> <want rc> <want marker> <cmd...>
	e_name=$1 e_rc=$2 e_mark=$3
	shift 3
	"$@" >"$out" 2>&1
	e_got=$?
	if [ "$e_got" != "$e_rc" ] || ! grep -q "^RXEVM: .* $e_mark\$" "$out"; then
		echo "not ok - $e_name: exit $e_got (want $e_rc), output:"
		sed 's/^/#   /' "$out"
		fails=$((fails + 1))
	else
		echo "ok - $e_name"
	fi
}

expect "77 before rxe0 is proven is a skip" 0 SKIP mk_run t sh -c 'exit 77'
MK_SKIP_IS_FAIL=1
expect "77 once rxe0 is ACTIVE is a failure" 1 FAIL mk_run t sh -c 'exit 77'
expect "a pass stays a pass" 0 PASS mk_run t true
expect "a failure stays a failure" 1 FAIL mk_run t false
expect "a binary that was not built is a failure" 1 FAIL mk_need t /nonexistent/binary
[ "$fails" -eq 0 ]
