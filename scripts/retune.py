#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Re-tune the policy engine from a multi-GPU sweep (scripts/gpu/multi-gpu.sh's JSON lines).

usage: retune.py [--base CALIB] [--calib-lines FILE]... [--sms N] [--how TEXT] --out CALIB
                 [--model tuner/model.c --model-out FILE] [--report FILE] JSONL...

Reads the JSON lines of the benchmarks (tagged by scripts/gpu/jsonl_tag.py: layout, SM share,
the variables each run had) and writes:

* a calibration file (format: tuner/calib.h) = the records of --base, less those the sweep
  measures again, plus
  - `split OP NODES LOCAL M SHARE INTRA SEND REDUCE`: the fastest static split per fused op,
    layout and M. From the sweeps inside the C tests (`*_splits` records: communication CTAs
    share/32 .. share/4 given to every role the layout uses), from runs under
    MKERNEL_ROLE_SPLIT=0,c,c,c (ring attention) and from runs under MKERNEL_TUNER_SM_SPLIT
    (MoE: the kernels take all communication CTAs as one number, written as INTRA). Shapes that
    share an M (causal and not) are combined by the geometric mean of their times; a `*_splits`
    record times every split in one run, so where several runs (other builds, other hosts) give
    one M, each split is judged by the geometric mean of its time over its own run's fastest;
  - `link nvl LAT_US GBPS`: half the NCCL send/recv round trip between two GPUs of one node at
    the smallest size (the ping-pong records), and the all-to-all bandwidth per GPU and
    direction at the largest size over one node (the faster of mkAllToAll and NCCL's);
  - `coll reducescatter|allgather nccl|fused NODES LOCAL BYTES US`: from the sequence-parallel
    benchmark's records (`gemm_rs`, `ag_gemm` of test-seqpar-gpu --bench, several ranks): NCCL's
    collective alone (`coll_only_ms`) and what the fused kernel took beyond the GEMM engine alone
    (`fused_ms` - `gemm_only_ms`), BYTES as the cost model counts them (M x N x 2 scattered,
    M x K x 2 gathered), the median of repeated runs: the cost model then compares the two
    measured times instead of its link model's guess;
  - the records of each --calib-lines FILE (`coll`, `fused`, ...: what test-gar-gpu --paths
    prints as `calib:` lines), the last of equal keys winning.
  No `link net` record is written: the network leg of these layouts is loopback, no NIC.
* with --model: tuner/model.c with the static split table's rows (ref_split, 132 SMs) replaced
  for the ops measured on a layout of several nodes of several GPUs (the table's reference
  topology): the one static split that is best over all the sweep's M for that layout (least
  geometric-mean slowdown against each M's best), scaled to 132 SMs. MoE rows keep their
  proportions between roles and take the measured total. Written to --model-out.
* with --report: a Markdown summary (every static split's time, the policy's split and the
  adaptive controller against the best static one per op, layout and M; the rows before and
  after; the links).
Exit: 0; 1 when nothing could be derived or an input is malformed (the line is named); 2 usage.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

REF_SMS = 132  # the static table's SM count (tuner/model.c MODEL_REF_SMS)

# C test's *_splits record -> policy op name (tuner/rules.c op_names)
SPLIT_BENCHES = {
    "gemm_allreduce_splits": "gemm_allreduce",
    "gemm_rs_splits": "gemm_reducescatter",
    "ag_gemm_splits": "allgather_gemm",
}
# sequence-parallel benchmark record -> (collective, the dimension besides M that travels)
COLL_BENCHES = {"gemm_rs": ("reducescatter", "n"), "ag_gemm": ("allgather", "k")}
MOE_BENCHES = {"moe_dispatch_gemm": "moe_dispatch", "moe_gemm_combine": "moe_combine"}
MODEL_ROWS = {
    "GEMM_ALLREDUCE": "gemm_allreduce",
    "GEMM_REDUCESCATTER": "gemm_reducescatter",
    "ALLGATHER_GEMM": "allgather_gemm",
    "RING_ATTENTION": "ring_attention",
    "MOE_DISPATCH": "moe_dispatch",
    "MOE_COMBINE": "moe_combine",
}
TOTAL_OPS = ("moe_dispatch", "moe_combine")  # one communication count, not one per role


class InputError(Exception):
    pass


def used_roles(op, nodes, local):
    """Roles (intra, send, reduce) that keep CTAs under MKERNEL_ROLE_SPLIT=0,c,c,c: the roles the
    op's plan uses on this layout (fused/ops/*_api.c: mk_gar_split_plan, then the op's fix)."""
    intra, remote = local > 1, nodes > 1
    if op == "gemm_allreduce":
        return (intra, remote, remote or intra)
    return (intra, remote, remote)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


class Point:
    """One (op, layout, M): each swept split's time, the policy's and the adaptive one."""

    def __init__(self, op, nodes, local, m, share):
        self.op, self.nodes, self.local, self.m, self.share = op, nodes, local, m, share
        self.cands = {}  # comm CTAs -> [ms]
        # comm CTAs -> [ms / the fastest split's ms of the same run], for records that time
        # every split in one run: runs of other builds or hosts differ in speed, so their times
        # are compared within each run, not pooled
        self.rel = {}
        self.policy, self.adaptive = [], []
        self.shapes = set()

    def key(self):
        return (self.op, self.nodes, self.local, self.m)

    def best(self):
        """The fastest split and its median time: by the geometric mean of its per-run ratios
        where every split has them, else by the median of its times."""
        med = {c: statistics.median(v) for c, v in self.cands.items()}
        if self.rel and set(self.rel) == set(med):
            rel = {c: geomean(v) for c, v in self.rel.items()}
            c = min(rel, key=lambda x: (rel[x], x))
        else:
            c = min(med, key=lambda x: (med[x], x))
        return c, med[c]


def num(rec, key, where, cast=float):
    try:
        v = cast(rec[key])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where}: '{key}' missing or not a number") from None
    if isinstance(v, float) and not math.isfinite(v):
        raise InputError(f"{where}: '{key}' is not finite")
    return v


def share_of(rec, default, where):
    s = rec.get("share", default)
    if not isinstance(s, int) or not 8 <= s <= 4096:
        raise InputError(f"{where}: SM share {s!r} (tag 'share' or --sms) is not 8 .. 4096")
    return s


def parse_role_split(text, where):
    """MKERNEL_ROLE_SPLIT "c,i,s,r" of a sweep run -> the one comm count of every role."""
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
        raise InputError(f"{where}: MKERNEL_ROLE_SPLIT '{text}' is not four counts")
    comm = {int(p) for p in parts[1:]}
    if len(comm) != 1:
        raise InputError(f"{where}: MKERNEL_ROLE_SPLIT '{text}' gives the roles different counts")
    return comm.pop()


def parse_sm_split(text, where):
    """MKERNEL_TUNER_SM_SPLIT "compute=.. intra=.. send=.. reduce=.." -> comm CTAs in all."""
    roles = {}
    for item in text.split():
        k, sep, v = item.partition("=")
        if not sep or k not in ("compute", "intra", "send", "reduce") or not v.isdigit():
            raise InputError(f"{where}: MKERNEL_TUNER_SM_SPLIT '{text}': bad '{item}'")
        roles[k] = int(v)
    comm = sum(roles.get(k, 0) for k in ("intra", "send", "reduce"))
    if comm < 1:
        raise InputError(f"{where}: MKERNEL_TUNER_SM_SPLIT '{text}' gives no CTA to communicate")
    return comm


class Sweep:
    def __init__(self, sms):
        self.sms = sms
        self.points = {}  # (op, nodes, local, m, shape) -> Point
        self.pingpong, self.alltoall = [], []
        self.colls = {}  # (kind, impl, nodes, local, bytes) -> [us]
        self.machine = set()

    def point(self, op, nodes, local, m, share, shape, where):
        key = (op, nodes, local, m, shape)
        p = self.points.get(key)
        if p is None:
            p = self.points[key] = Point(op, nodes, local, m, share)
            p.shapes.add(shape)
        elif p.share != share:
            raise InputError(f"{where}: SM share {share} where other runs of {op} had {p.share}")
        return p

    def add(self, rec, where):
        bench = rec.get("bench")
        if rec.get("machine"):
            self.machine.add(str(rec["machine"]))
        env = rec.get("env") or {}
        if bench in SPLIT_BENCHES:
            op = SPLIT_BENCHES[bench]
            nodes, local = num(rec, "nnodes", where, int), num(rec, "nlocal", where, int)
            m = num(rec, "m", where, int)
            static = rec.get("static")
            if not isinstance(static, dict) or not static:
                raise InputError(f"{where}: 'static' is not an object of split times")
            shape = (m, rec.get("n"), rec.get("k"))
            p = self.point(op, nodes, local, m, share_of(rec, self.sms, where), shape, where)
            times = {}
            for c, ms in static.items():
                if not str(c).isdigit():
                    raise InputError(f"{where}: static split '{c}' is not a CTA count")
                times[int(c)] = num(static, c, where)
            fastest = min(times.values())
            if fastest <= 0:
                raise InputError(f"{where}: a static split's time is not positive")
            for c, ms in times.items():
                p.cands.setdefault(c, []).append(ms)
                p.rel.setdefault(c, []).append(ms / fastest)
            p.policy.append(num(rec, "policy_static_ms", where))
            p.adaptive.append(num(rec, "adaptive_ms", where))
        elif bench in COLL_BENCHES and "coll_only_ms" in rec:
            self.coll(rec, where)
        elif bench == "ring_attention" and "fused_ms" in rec:
            nodes, local = num(rec, "nnodes", where, int), num(rec, "nlocal", where, int)
            m = num(rec, "seq_local", where, int)
            shape = (m, rec.get("causal"), rec.get("B"), rec.get("H"), rec.get("D"))
            self.config(rec, "ring_attention", nodes, local, m, shape, "fused_ms", env, where)
        elif bench in MOE_BENCHES and "mk_ms" in rec:
            nodes, world = num(rec, "nodes", where, int), num(rec, "world", where, int)
            m = num(rec, "tokens_per_rank", where, int) * num(rec, "topk", where, int)
            shape = (rec.get("tokens_global"), rec.get("hidden"), rec.get("inter"),
                     rec.get("experts"))
            self.config(rec, MOE_BENCHES[bench], nodes, world // nodes, m, shape, "mk_ms", env,
                        where)
        elif bench == "pingpong" and rec.get("path") == "node-local":
            self.pingpong.append((num(rec, "bytes", where, int), num(rec, "nccl_rtt_us", where)))
        elif bench == "alltoall" and rec.get("nnodes") == 1:
            self.alltoall.append((num(rec, "bytes_per_peer", where, int),
                                  num(rec, "nranks", where, int),
                                  min(num(rec, "mkernel_ms", where), num(rec, "nccl_ms", where))))

    def coll(self, rec, where):
        """NCCL's collective alone and the fused kernel's time beyond the GEMM, several ranks."""
        kind, dim = COLL_BENCHES[rec["bench"]]
        nodes, local = num(rec, "nnodes", where, int), num(rec, "nlocal", where, int)
        if nodes * local < 2:
            return  # one rank: nothing travels
        nbytes = num(rec, "m", where, int) * num(rec, dim, where, int) * 2
        nccl = num(rec, "coll_only_ms", where)
        beyond = num(rec, "fused_ms", where) - num(rec, "gemm_only_ms", where)
        if nccl > 0:
            self.colls.setdefault((kind, "nccl", nodes, local, nbytes), []).append(nccl * 1e3)
        if beyond > 0:
            self.colls.setdefault((kind, "fused", nodes, local, nbytes), []).append(beyond * 1e3)

    def config(self, rec, op, nodes, local, m, shape, field, env, where):
        """A run of a sweep from outside: which split it ran under (env), and its time. A run
        under no variable at all is a plain benchmark, not part of a sweep: left out."""
        if not env:
            return
        p = self.point(op, nodes, local, m, share_of(rec, self.sms, where), shape, where)
        ms = num(rec, field, where)
        if "MKERNEL_ROLE_SPLIT" in env and env["MKERNEL_ROLE_SPLIT"]:
            p.cands.setdefault(parse_role_split(env["MKERNEL_ROLE_SPLIT"], where), []).append(ms)
        elif env.get("MKERNEL_TUNER_SM_SPLIT"):
            p.cands.setdefault(parse_sm_split(env["MKERNEL_TUNER_SM_SPLIT"], where), []).append(ms)
        elif env.get("MKERNEL_SM_POLICY") == "adaptive":
            p.adaptive.append(ms)
        else:
            p.policy.append(ms)

    def merged(self):
        """Points of one (op, nodes, local, M): shapes combined (geometric mean per split)."""
        groups = {}
        for p in self.points.values():
            if p.cands:
                groups.setdefault(p.key(), []).append(p)
        out = []
        for (op, nodes, local, m), ps in sorted(groups.items()):
            common = set.intersection(*(set(p.cands) for p in ps))
            if not common:
                continue
            q = Point(op, nodes, local, m, ps[0].share)
            for c in common:
                q.cands[c] = [geomean([statistics.median(p.cands[c]) for p in ps])]
                if all(c in p.rel for p in ps):
                    q.rel[c] = [geomean([geomean(p.rel[c]) for p in ps])]
            for attr in ("policy", "adaptive"):
                if all(getattr(p, attr) for p in ps):
                    getattr(q, attr).append(geomean([statistics.median(getattr(p, attr))
                                                     for p in ps]))
            for p in ps:
                q.shapes |= p.shapes
            out.append(q)
        return out


def split_roles(p, comm):
    if p.op in TOTAL_OPS:
        return (comm, 0, 0)
    return tuple(comm if u else 0 for u in used_roles(p.op, p.nodes, p.local))


def split_records(points):
    recs = []
    for p in points:
        if p.nodes * p.local < 2:
            continue
        c, _ = p.best()
        roles = split_roles(p, c)
        if sum(roles) >= p.share:
            raise InputError(f"{p.op} on {p.nodes} x {p.local} at M {p.m}: the best split "
                             f"{roles} leaves no compute CTA of {p.share}")
        recs.append("split %s %d %d %d %d %d %d %d" % ((p.op, p.nodes, p.local, p.m, p.share)
                                                        + roles))
    return recs


def coll_records(sweep):
    return ["coll %s %s %d %d %d %.2f" % (key + (statistics.median(us),))
            for key, us in sorted(sweep.colls.items())]


def link_record(sweep):
    """`link nvl LAT GBPS` from the ping-pong and the one-node all-to-all, or None."""
    if not sweep.pingpong or not sweep.alltoall:
        return None, "no node-local ping-pong or one-node all-to-all records"
    small = min(b for b, _ in sweep.pingpong)
    lat = statistics.median(rtt for b, rtt in sweep.pingpong if b == small) / 2
    big = max(b for b, _, _ in sweep.alltoall)
    gbps = max((b * (n - 1)) / (ms * 1e-3) / 1e9 for b, n, ms in sweep.alltoall if b == big)
    why = (f"latency: half the NCCL round trip at {small} B; bandwidth: all-to-all at {big} B "
           "per peer")
    return "link nvl %.2f %.1f" % (lat, gbps), why


RECORD_KEYS = {"gemm": 6, "link": 2, "fused": 2, "coll": 6, "split": 5, "device": 1}


def record_key(line):
    tok = line.split()
    if not tok or tok[0].startswith("#"):
        return None
    if tok[0] == "mkernel-calibration":
        return ("header",)
    n = RECORD_KEYS.get(tok[0])
    if n is None:
        raise InputError(f"unknown calibration record '{tok[0]}'")
    if n > 1 and len(tok) <= n:
        raise InputError(f"calibration record too short: '{line.strip()}'")
    return tuple(tok[:n])


def read_calib_lines(path):
    out = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            line = line.strip()
            try:
                key = record_key(line)
            except InputError as e:
                raise InputError(f"{path}:{no}: {e}") from None
            if key is not None and key[0] not in ("header", "device"):
                out.append(line)
    return out


def merge(base_lines, new_records, note):
    """base_lines with records of the same key as a new one left out, then the new ones."""
    new_by_key = {}
    for r in new_records:
        new_by_key[record_key(r)] = r  # the last wins
    out, header = [], False
    for no, line in enumerate(base_lines, 1):
        try:
            key = record_key(line)
        except InputError as e:
            raise InputError(f"base line {no}: {e}") from None
        header |= key == ("header",)
        if key is None or key not in new_by_key:
            out.append(line.rstrip("\n"))
    if not header:
        raise InputError("the base calibration has no 'mkernel-calibration 1' record")
    out.append("")
    out.extend("# " + n for n in note)
    out.extend(sorted(new_by_key.values()))
    return out


ROW = re.compile(r"^(\s*\[MK_FUSED_(\w+)\]\s*=\s*\{\s*)(\d+),\s*(\d+),\s*(\d+),\s*(\d+)(\s*\},.*)$")


def model_rows(text):
    """The ref_split table's rows of tuner/model.c: {op: (compute, intra, send, reduce)}."""
    start = text.find("ref_split[")
    end = text.find("};", start)
    if start < 0 or end < 0:
        raise InputError("no ref_split table in the model source")
    rows = {}
    for line in text[start:end].splitlines():
        m = ROW.match(line)
        if m and m.group(2) in MODEL_ROWS:
            rows[MODEL_ROWS[m.group(2)]] = tuple(int(m.group(i)) for i in range(3, 7))
    return rows, start, end


def replace_rows(text, new):
    rows, start, end = model_rows(text)
    lines = text[start:end].split("\n")
    for i, line in enumerate(lines):
        m = ROW.match(line)
        if m and MODEL_ROWS.get(m.group(2)) in new:
            v = new[MODEL_ROWS[m.group(2)]]
            lines[i] = "%s%d, %d, %d, %d%s" % (m.group(1), *v, m.group(7))
    return text[:start] + "\n".join(lines) + text[end:]


def table_row(op, points, current):
    """The static row of op from its points on the reference-like layout, or (None, why)."""
    ref = [p for p in points if p.op == op and p.nodes >= 2 and p.local >= 2]
    if not ref:
        return None, "no sweep on several nodes of several GPUs"
    local = max(p.local for p in ref)
    nodes = max(p.nodes for p in ref if p.local == local)
    ref = [p for p in ref if p.local == local and p.nodes == nodes]
    common = set.intersection(*(set(p.cands) for p in ref))
    if not common:
        return None, f"no split measured at every M on {nodes} x {local}"

    def slowdown(c):
        return geomean([statistics.median(p.cands[c]) / p.best()[1] for p in ref])

    c = min(common, key=lambda x: (slowdown(x), x))
    share = ref[0].share
    scaled = max(1, round(c * REF_SMS / share))
    if op in TOTAL_OPS:
        old = current[1:]
        tot = sum(old)
        roles = [scaled * r // tot for r in old] if tot else [scaled, 0, 0]
        roles[max(range(3), key=lambda i: old[i])] += scaled - sum(roles)
    else:
        roles = [scaled if u else 0 for u in used_roles(op, nodes, local)]
    row = (REF_SMS - sum(roles), *roles)
    if row[0] < 1:
        return None, f"the best split {row} leaves no compute SM"
    why = ("%d x %d, M %s: %d CTAs of %d (slowdown %.3f over the best per M)" %
           (nodes, local, ",".join(str(p.m) for p in sorted(ref, key=lambda p: p.m)), c, share,
            slowdown(c)))
    return row, why


def report(points, rows_before, rows_after, row_why, link, link_why, machines):
    out = ["# Re-tuned from the multi-GPU sweep", ""]
    if machines:
        out += ["Machine: " + "; ".join(sorted(machines)), ""]
    out += ["## Static splits, the policy's split and the adaptive controller", "",
            "Communication CTAs of each static split (per role the layout uses; MoE: in all), "
            "median ms; `best / adaptive` above 1 means the controller beat every static split.",
            "", "| op | nodes x ranks | M | static splits (CTAs: ms) | best | policy ms | "
            "adaptive ms | best / adaptive |", "|---|---|---|---|---|---|---|---|"]
    for p in points:
        c, best = p.best()
        cells = " ".join("%d: %.4f" % (k, statistics.median(v)) for k, v in sorted(p.cands.items()))
        pol = "%.4f" % statistics.median(p.policy) if p.policy else "-"
        ada = "%.4f" % statistics.median(p.adaptive) if p.adaptive else "-"
        ratio = "%.3f" % (best / statistics.median(p.adaptive)) if p.adaptive else "-"
        out.append(f"| {p.op} | {p.nodes} x {p.local} | {p.m} | {cells} | {c} | {pol} | {ada} "
                   f"| {ratio} |")
    out += ["", "## Static split table (tuner/model.c, 132 SMs: compute intra send reduce)", "",
            "| op | before | after | from |", "|---|---|---|---|"]
    for op in MODEL_ROWS.values():
        if op not in rows_before:
            continue
        after = rows_after.get(op)
        out.append("| %s | %s | %s | %s |" % (op, " ".join(map(str, rows_before[op])),
                                              " ".join(map(str, after)) if after else "unchanged",
                                              row_why.get(op, "")))
    out += ["", "## Links", "", (f"`{link}` ({link_why})" if link else f"no nvl link: {link_why}"),
            "", "No `link net` record: the network leg of these layouts is loopback, no NIC.", ""]
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+", help="JSON lines of the sweep (tagged)")
    ap.add_argument("--base", help="calibration file to start from (tuner/calib_h200.txt)")
    ap.add_argument("--calib-lines", action="append", default=[],
                    help="calibration records measured elsewhere (test-gar-gpu --paths)")
    ap.add_argument("--sms", type=int, default=REF_SMS,
                    help="SM share of records without a 'share' tag (default 132)")
    ap.add_argument("--out", required=True, help="calibration file to write")
    ap.add_argument("--model", help="tuner/model.c to take the static table's rows from")
    ap.add_argument("--model-out", help="where to write the model source with new rows")
    ap.add_argument("--report", help="Markdown summary to write")
    ap.add_argument("--how", help="how the sweep was measured, for the file's note (default: "
                    "one process per GPU, scripts/gpu/multi-gpu.sh)")
    args = ap.parse_args(argv)
    if args.model_out and not args.model:
        ap.error("--model-out needs --model")
    sweep = Sweep(args.sms)
    try:
        for path in args.jsonl:
            with open(path) as f:
                for no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    where = f"{path}:{no}"
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        raise InputError(f"{where}: not JSON") from None
                    if not isinstance(rec, dict):
                        raise InputError(f"{where}: not a JSON object")
                    sweep.add(rec, where)
        points = sweep.merged()
        records = split_records(points)
        link, link_why = link_record(sweep)
        if link:
            records.append(link)
        records += coll_records(sweep)
        for path in args.calib_lines:
            records += read_calib_lines(path)
        records = list({record_key(r): r for r in records}.values())  # the last of a key wins
        if not records:
            raise InputError("nothing to re-tune: no split sweep, link or calibration record "
                             "in the inputs")
        how = args.how or "one process per GPU (scripts/gpu/multi-gpu.sh)"
        note = ["Measured with " + how + " on " +
                ("; ".join(sorted(sweep.machine)) or "an unnamed machine") + ",",
                "re-tuned by scripts/retune.py from " +
                ", ".join(os.path.basename(p) for p in args.jsonl + args.calib_lines)]
        if args.base:
            with open(args.base) as f:
                lines = merge(f.read().splitlines(), records, note)
        else:
            lines = merge(["mkernel-calibration 1"], records, note)
        rows_before, rows_after, row_why = {}, {}, {}
        if args.model:
            with open(args.model) as f:
                text = f.read()
            rows_before = model_rows(text)[0]
            for op, cur in rows_before.items():
                row, why = table_row(op, points, cur)
                row_why[op] = why
                if row is not None and row != cur:
                    rows_after[op] = row
    except (InputError, OSError) as e:
        print(f"retune: {e}", file=sys.stderr)
        return 1
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.model_out:
        with open(args.model_out, "w") as f:
            f.write(replace_rows(text, rows_after))
    summary = report(points, rows_before, rows_after, row_why, link, link_why, sweep.machine)
    if args.report:
        with open(args.report, "w") as f:
            f.write(summary)
    n_split = sum(1 for r in records if r.startswith("split "))
    print(f"retune: {args.out}: {n_split} split record(s), {'a' if link else 'no'} link record, "
          f"{len(records) - n_split - bool(link)} other record(s); "
          f"{len(rows_after)} table row(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
