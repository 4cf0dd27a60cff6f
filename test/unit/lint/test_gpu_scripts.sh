#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The GPU scripts cannot pass a failed step: every script of scripts/gpu that is run (not
# sourced) sets pipefail, and the step helpers (scripts/gpu/steps.sh) turn a failing command,
# one failing inside a pipeline, or a filter that selects nothing into the right exit status,
# naming the failed steps. Runs on the host without a GPU.
# Usage: test_gpu_scripts.sh SOURCE_ROOT
set -uo pipefail
src=${1:?source root}
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
not_ok() {
	echo "not ok - $1"
	fails=$((fails + 1))
}

for f in "$src"/scripts/gpu/*.sh; do
	name=${f#"$src"/}
	if sed -n '1,6p' "$f" | grep -q '^# Sourced by'; then
		continue # runs inside its caller, under the caller's options
	fi
	if grep -qE '^set( -[a-z]+)* -[a-z]*o pipefail' "$f"; then
		ok "$name sets pipefail"
	else
		not_ok "$name runs without pipefail: a failing command before a filter would pass"
	fi
done

# run_steps NAME WANT_RC WANT_OUTPUT BODY: a script sourcing steps.sh, its exit and output
run_steps() {
	local name=$1 want_rc=$2 want=$3 body=$4 rc
	printf 'set -uo pipefail\n. "%s"\n%s\nsteps_done\n' "$src/scripts/gpu/steps.sh" "$body" \
		>"$tmp/s.sh"
	bash "$tmp/s.sh" >"$tmp/out" 2>&1
	rc=$?
	if [ "$rc" -eq "$want_rc" ] && grep -q -- "$want" "$tmp/out"; then
		ok "$name"
	else
		not_ok "$name: exit $rc (want $want_rc), output:"
		sed 's/^/#   /' "$tmp/out"
	fi
}

run_steps "every step passing exits 0" 0 "every step passed" 'step a true; step b true'
run_steps "a failing step exits 1 and is named" 1 "failing step(s): b$" \
	'step a true; step b false; step c true'
run_steps "a step failing inside a pipeline is counted" 1 "failing step(s): p$" \
	'false | cat; check p $?'
run_steps "a filter that selects nothing is not a failure" 0 "every step passed" \
	'echo x | show nothing; check f $?'
run_steps "a failed grep (bad file) is a failure" 1 "failing step(s): g$" \
	'show x /nonexistent/file; check g $?'
run_steps "fail_step records a step without running it" 1 "failing step(s): w$" \
	'fail_step w "not built"'
[ "$fails" -eq 0 ]
