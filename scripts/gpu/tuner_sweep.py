#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""all_reduce sweep for the tuner check, and the log/result checker.

  tuner_sweep.py run   --out FILE [--sizes 4K,64K,...] [--iters N] [--warmup N]
      One rank of a torch.distributed (NCCL) job: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
      come from the environment; every rank uses cuda:0 (fake nodes share one GPU). Times each
      size with a CUDA-event pair per iteration; rank 0 writes one JSON line per size with the
      median over iterations, reduced across ranks with max.

  tuner_sweep.py check --log RANK0_LOG --sizes ... [--decisions] [--rules-expect SPEC]
                       [--expect-tuner yes|no]
      Reads rank 0's NCCL log and checks that NCCL's choices are the tuner's: every
      'AllReduce: <n> Bytes -> Algo <a> proto <p> channel{Lo..Hi}={lo..hi}' line for a sweep
      size matches the tuner's own decision line (--decisions) or the rules given as
      'lo-hi:algo:proto:channels;...' (--rules-expect). Exit 1 on any mismatch.

  tuner_sweep.py compare --with FILE --without FILE
      JSON lines + a table of busbw with and without the tuner, ratio per size.
"""
import argparse
import json
import os
import re
import statistics
import sys

NCCL_LINE = re.compile(
    r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")
OUR_LINE = re.compile(
    r"TUNER/mkernel decision allreduce (\d+) bytes .*-> algo (\w+) proto (\w+) channels (\d+) "
    r"\(algo from (\w+)")
SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def norm(name):
    """NCCL prints RING/Ring/LL128/Simple; ours are ring/ll128/simple."""
    return name.replace("_", "").lower()


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    if s and s[-1] in SUFFIX:
        return int(s[:-1]) * SUFFIX[s[-1]]
    return int(s)


def parse_sizes(spec):
    return [parse_size(x) for x in spec.split(",") if x]


def cmd_run(a):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rows = []
    for nbytes in parse_sizes(a.sizes):
        x = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=dev)
        for _ in range(a.warmup):
            dist.all_reduce(x)
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(a.iters)]
        for s, e in pairs:
            x.fill_(1.0)
            s.record()
            dist.all_reduce(x)
            e.record()
        torch.cuda.synchronize()
        ok = bool(torch.all(x == float(world)).item())
        times = sorted(s.elapsed_time(e) * 1e3 for s, e in pairs)  # us
        med = torch.tensor([statistics.median(times), times[len(times) // 10],
                            times[(len(times) * 9) // 10], 0.0 if ok else 1.0],
                           dtype=torch.float64, device=dev)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)  # same reduction for every run
        m, p10, p90, bad = med.tolist()
        algbw = nbytes / (m * 1e3)  # GB/s
        rows.append({"bytes": nbytes, "median_us": m, "p10_us": p10, "p90_us": p90,
                     "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world,
                     "correct": bad == 0.0})
    if rank == 0:
        with open(a.out, "w") as f:
            for r in rows:
                r.update({"nranks": world, "iters": a.iters, "warmup": a.warmup})
                f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()
    return 0 if all(r["correct"] for r in rows) else 1


def read_log(path):
    nccl, ours, text = {}, {}, open(path, errors="replace").read()
    for m in NCCL_LINE.finditer(text):
        n = int(m.group(1))
        nccl.setdefault(n, []).append((norm(m.group(2)), norm(m.group(3)),
                                       int(m.group(5)) - int(m.group(4)) + 1))
    for m in OUR_LINE.finditer(text):
        ours[int(m.group(1))] = (norm(m.group(2)), norm(m.group(3)), int(m.group(4)),
                                 m.group(5))
    return text, nccl, ours


def cmd_check(a):
    text, nccl, ours = read_log(a.log)
    fails = []
    has_tuner = "TUNER/Plugin: Using mkernel" in text
    if (a.expect_tuner == "yes") != has_tuner:
        fails.append("'TUNER/Plugin: Using mkernel' %s in %s" %
                     ("missing" if a.expect_tuner == "yes" else "present", a.log))
    rules = []
    for item in (a.rules_expect or "").split(";"):
        if item:
            rng, algo, proto, ch = item.split(":")
            lo, hi = rng.split("-")
            rules.append((parse_size(lo), parse_size(hi), algo, proto, int(ch)))
    for n in parse_sizes(a.sizes):
        seen = nccl.get(n)
        if not seen:
            fails.append("%d bytes: no NCCL TUNING line" % n)
            continue
        want = None
        if a.decisions:
            d = ours.get(n)
            if d is None:
                fails.append("%d bytes: no tuner decision line" % n)
                continue
            if d[3] != "nccl":
                want = (d[0], d[1], d[2])
        for lo, hi, algo, proto, ch in rules:
            if lo <= n <= hi:
                want = (algo, proto, ch)
                break
        for algo, proto, nch in seen:
            if want is not None and (algo, proto) != (want[0], want[1]):
                fails.append("%d bytes: NCCL used %s/%s, tuner chose %s/%s" %
                             (n, algo, proto, want[0], want[1]))
            if want is not None and want[2] > 0 and nch > want[2]:
                fails.append("%d bytes: NCCL used %d channels, tuner allowed %d" %
                             (n, nch, want[2]))
        print(json.dumps({"check": a.label, "bytes": n, "nccl": seen[0],
                          "tuner": list(want) if want else None}))
    for f in fails:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if fails else 0


def cmd_compare(a):
    def load(p):
        return {r["bytes"]: r for r in map(json.loads, open(p))}
    w, wo = load(a.with_), load(a.without)
    print("%12s %14s %14s %8s" % ("bytes", "busbw tuner", "busbw none", "ratio"),
          file=sys.stderr)
    for n in sorted(set(w) & set(wo)):
        ratio = w[n]["busbw_gbps"] / wo[n]["busbw_gbps"] if wo[n]["busbw_gbps"] else 0.0
        rec = {"tool": "tuner-check", "coll": "all_reduce", "bytes": n,
               "busbw_gbps_tuner": w[n]["busbw_gbps"], "busbw_gbps_none": wo[n]["busbw_gbps"],
               "median_us_tuner": w[n]["median_us"], "median_us_none": wo[n]["median_us"],
               "ratio": ratio, "emulated": True, "meta": json.loads(a.meta or "{}")}
        print(json.dumps(rec))
        print("%12d %14.3f %14.3f %8.2f" % (n, w[n]["busbw_gbps"], wo[n]["busbw_gbps"], ratio),
              file=sys.stderr)
    return 0 if set(w) == set(wo) and w else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M")
    r.add_argument("--iters", type=int, default=20)
    r.add_argument("--warmup", type=int, default=5)
    c = sub.add_parser("check")
    c.add_argument("--log", required=True)
    c.add_argument("--label", default="check")
    c.add_argument("--sizes", required=True)
    c.add_argument("--decisions", action="store_true")
    c.add_argument("--rules-expect")
    c.add_argument("--expect-tuner", choices=["yes", "no"], default="yes")
    m = sub.add_parser("compare")
    m.add_argument("--with", dest="with_", required=True)
    m.add_argument("--without", required=True)
    m.add_argument("--meta")
    a = p.parse_args()
    return {"run": cmd_run, "check": cmd_check, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
