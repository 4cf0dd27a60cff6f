#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every benchmark record in docs/data must name the exact code it measured: a "git" field
holding a commit id (7 to 40 hex digits) of a clean tree, not "-dirty", "unknown", a remark or
nothing. Files measured before the rule are listed, each with why, in docs/data/UNCLEAN; they
are reported, not failed, and leave the list once measured again. A listed file that has
become clean, or a listed file that does not exist, fails the check too (the list must stay
true). Usage: check-data-revisions.py DATA_DIR"""
import json
import os
import re
import sys

CLEAN = re.compile(r"^[0-9a-f]{7,40}$")


def unclean_records(path):
    bad = 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rev = json.loads(line).get("git")
            if not isinstance(rev, str) or not CLEAN.match(rev):
                bad += 1
    return bad


def main():
    data = sys.argv[1]
    listed = {}
    with open(os.path.join(data, "UNCLEAN")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, why = line.partition(" ")
                listed[name] = why.strip()
    fails = 0
    for name in sorted(os.listdir(data)):
        if not name.endswith(".jsonl"):
            continue
        bad = unclean_records(os.path.join(data, name))
        if bad and name in listed:
            print(f"known: {name}: {bad} record(s) without a clean revision ({listed[name]})")
        elif bad:
            print(f"FAIL: {name}: {bad} record(s) without a clean git revision")
            fails += 1
        elif name in listed:
            print(f"FAIL: {name} is clean now: remove it from docs/data/UNCLEAN")
            fails += 1
    for name in sorted(set(listed) - set(os.listdir(data))):
        print(f"FAIL: docs/data/UNCLEAN lists {name}, which does not exist")
        fails += 1
    print(f"data revisions: {fails} problem(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
