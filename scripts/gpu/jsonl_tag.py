#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The JSON lines of a benchmark log, each tagged with where and how it was measured.

usage: jsonl_tag.py [--set KEY=VALUE]... [--env VAR=VALUE]... LOG...

Prints every line of LOG that starts with '{' and parses as a JSON object, with KEY set to
VALUE (parsed as JSON when it parses: numbers, true, false; a string otherwise) and "env" an
object of the VAR=VALUE pairs (the variables the step ran under: a forced split, a policy). A
log of scripts/gpu/runtime-comm.sh (sections "---- rank R (exit N)") gives rank 0's lines only:
rank 0 prints the records, the others' lines would be duplicates or partial. Lines that start
with '{' and do not parse are left out and counted on stderr. The tags replace what the record
says of itself: a per-rank test prints "emulated": true whatever the layout, the launcher knows.
Exit: 0, or 1 when a LOG cannot be read.
"""
import json
import re
import sys

RANK_HEADER = re.compile(r"^---- rank (\d+) \(exit")


def parse_value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def records(lines):
    """Yield (line number, dict) of the JSON objects among lines (rank 0's where ranked)."""
    ranked = any(RANK_HEADER.match(line) for line in lines)
    rank = None
    for no, line in enumerate(lines, 1):
        m = RANK_HEADER.match(line)
        if m:
            rank = int(m.group(1))
            continue
        if ranked and rank != 0:
            continue
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            yield no, None
            continue
        yield no, rec if isinstance(rec, dict) else None


def tag(lines, tags, env):
    """The tagged records of lines (a list of str) and the count of lines left out."""
    out, bad = [], 0
    for _, rec in records(lines):
        if rec is None:
            bad += 1
            continue
        rec.update(tags)
        if env:
            rec["env"] = dict(env)
        out.append(rec)
    return out, bad


def pairs(items, what):
    got = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"jsonl_tag: {what} '{item}' is not KEY=VALUE")
        got[key] = value
    return got


def main(argv):
    tags, env, logs = [], [], []
    it = iter(argv)
    for a in it:
        if a in ("--set", "--env"):
            value = next(it, None)
            if value is None:
                raise SystemExit(f"jsonl_tag: {a} needs KEY=VALUE")
            (tags if a == "--set" else env).append(value)
        elif a.startswith("-"):
            raise SystemExit(__doc__)
        else:
            logs.append(a)
    if not logs:
        raise SystemExit(__doc__)
    tagv = {k: parse_value(v) for k, v in pairs(tags, "--set").items()}
    envv = pairs(env, "--env")
    rc = 0
    for log in logs:
        try:
            with open(log, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as e:
            print(f"jsonl_tag: {log}: {e.strerror}", file=sys.stderr)
            rc = 1
            continue
        out, bad = tag(lines, tagv, envv)
        for rec in out:
            print(json.dumps(rec, sort_keys=False))
        if bad:
            print(f"jsonl_tag: {log}: {bad} line(s) starting with '{{' are not JSON objects; "
                  "left out", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
