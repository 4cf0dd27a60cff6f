#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The reliability tier's sanitizer run: a second build of the project with AddressSanitizer +
# UndefinedBehaviorSanitizer (LeakSanitizer included), in which one meson suite is run. Any
# sanitizer report in a test fails that test (halt_on_error, LSan's exit code); leaks inside
# libfabric or the dynamic loader are suppressed by test/sanitize/lsan.supp, nothing else.
# The build is configured once and rebuilt incrementally; CUDA is off (nvcc code is not
# instrumented, and the GPU suite needs a GPU anyway).
# Usage: scripts/sanitize.sh BUILD_DIR SUITE     (meson's sanitize suite calls it per suite)
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?build dir}
suite=${2:?suite}
supp=$src/test/sanitize/lsan.supp

# One configure + build at a time, whatever runs this (meson runs the suite serially anyway).
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/build.ninja" ]; then
	meson setup "$dir" "$src" -Dtests=enabled -Dcuda=disabled -Db_sanitize=address,undefined \
		-Db_lundef=false -Dbuildtype=debugoptimized >"$dir.setup.log" 2>&1 ||
		{ cat "$dir.setup.log"; echo "sanitize: configure failed"; exit 1; }
fi
ninja -C "$dir" -j "${MKERNEL_SANITIZE_JOBS:-2}" >"$dir.build.log" 2>&1 ||
	{ tail -50 "$dir.build.log"; echo "sanitize: build failed"; exit 1; }
flock -u 9

# Report and stop at the first error; the exit code says so even where a child is the one hit.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:print_summary=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=1"
log=$dir/meson-logs/testlog-$suite.txt
names=()
if [ "$suite" = loopback ]; then
	# The loopback suite once more, kept to what instruments new code paths: v11 only of the
	# plugin cases (v10-v8 are argument adapters over it), the fault scenarios scaled down,
	# and not the variants that rerun the same cases (progress thread, no CMA, net, small
	# /dev/shm, rawbench): CI time matters more there than a third copy of one path.
	export MKERNEL_TEST_NET_VERSION=11 MKERNEL_FAULT_SCALE=0.25
	mapfile -t names < <(meson test -C "$dir" --list --suite loopback 2>/dev/null |
		sed -n 's|^.* / ||p' | grep -vE 'progress-thread|no-cma|^net-loopback-net$|small-devshm|rawbench')
	[ "${#names[@]}" -gt 0 ] || { echo "sanitize: no loopback tests listed"; exit 1; }
elif [ "$suite" = unit ]; then
	# Not the Python package's test: it runs pytest over torch and a meson install, where
	# the only instrumented code is the parameter dump the plain run already covers.
	mapfile -t names < <(meson test -C "$dir" --list --suite unit 2>/dev/null |
		sed -n 's|^.* / ||p' | grep -vx 'python')
	[ "${#names[@]}" -gt 0 ] || { echo "sanitize: no unit tests listed"; exit 1; }
fi
meson test -C "$dir" --suite "$suite" --no-rebuild --print-errorlogs --num-processes 1 \
	--logbase "testlog-$suite" "${names[@]}"
rc=$?
# A report inside a forked peer that ended with _exit() can still have printed: count those too.
reports=$(grep -cE '^(==[0-9]+==ERROR: |SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer|.*runtime error: )' \
	"$log" 2>/dev/null)
if [ "${reports:-0}" -gt 0 ]; then
	grep -E -A30 '^==[0-9]+==ERROR: |runtime error: ' "$log" | head -120
	echo "sanitize $suite: $reports sanitizer report(s)"
	rc=1
fi
echo "sanitize $suite: exit $rc"
exit $rc
