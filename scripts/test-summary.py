#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summarise meson-logs/testlog.json: one line per suite, then the plain 'N passed, N failed'."""
import collections
import json
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "build/meson-logs/testlog.json"
counts = collections.defaultdict(collections.Counter)
failed_names = []
with open(path) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        t = json.loads(line)
        # meson 1.0 writes no suite key: the name reads "<project>:<suite> / <test>"
        suite = t.get("name", "?").split(" / ")[0].split(":")[-1]
        res = t.get("result", "ERROR")
        counts[suite][res] += 1
        if res in ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"):
            failed_names.append(t.get("name", "?"))

passed = failed = skipped = 0
for suite in sorted(counts):
    c = counts[suite]
    p = c["OK"] + c["EXPECTEDFAIL"]
    fl = c["FAIL"] + c["TIMEOUT"] + c["ERROR"] + c["UNEXPECTEDPASS"]
    s = c["SKIP"]
    passed, failed, skipped = passed + p, failed + fl, skipped + s
    print(f"suite {suite}: {p} passed, {fl} failed, {s} skipped")
for n in failed_names:
    print(f"FAILED: {n}")
print(f"{skipped} skipped")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
