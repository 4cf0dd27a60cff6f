#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Install dependencies, build, run every test suite, and end with the line 'N passed, N failed'.
# Usage: scripts/test.sh [build-dir]   (MKERNEL_SUITES="unit loopback" limits the suites)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

bash scripts/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dtests=enabled || { echo "0 passed, 1 failed"; exit 1; }
fi
ninja -C "$build" || { echo "0 passed, 1 failed"; exit 1; }

rm -f "$build/meson-logs/testlog.json"
# Network and GPU suites busy-poll: run them one test at a time (2 vCPUs on CI). The sanitize
# suite builds a second tree (ASan + UBSan) and runs unit, fuzz and loopback in it.
for suite in ${MKERNEL_SUITES:-unit fuzz loopback sanitize rdma gpu}; do
	if [ -n "$(meson test -C "$build" --list --suite "$suite" 2>/dev/null)" ]; then
		echo "=== suite $suite"
		meson test -C "$build" --suite "$suite" --print-errorlogs --num-processes 1 \
			--logbase "testlog-$suite" || true
	fi
done
# the host facts the loopback suites depend on, for reading a failed run's log
echo "host: $(nproc) cpus, /dev/shm $(df -m --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ') MiB free, ptrace scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none)"
cat "$build"/meson-logs/testlog-*.json > "$build/meson-logs/testlog.json" 2>/dev/null || true
if [ ! -s "$build/meson-logs/testlog.json" ]; then
	echo "0 passed, 0 failed"
	exit 0
fi
python3 scripts/test-summary.py "$build/meson-logs/testlog.json"
