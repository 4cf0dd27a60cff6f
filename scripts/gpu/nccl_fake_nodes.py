#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One rank of the fake-node NCCL check: stock NCCL (PyTorch's) with the mkernel net plugin.

Launched twice by scripts/gpu/nccl-fake-nodes.sh with distinct NCCL_HOSTID values, so NCCL
counts two nodes and routes every byte through the net plugin even though both ranks share
GPU 0. Modes:
  check  exact results for all_reduce, all_gather, reduce_scatter, broadcast and send/recv
         from 1 B to 256 MiB (integer-valued data, so every sum is exact);
  bench  all_reduce and all_gather bus bandwidth per size, 1 MiB to 256 MiB (CUDA events,
         warm-ups, median of repetitions; at least ~512 MiB of payload per repetition so the
         largest sizes stay within a few seconds).
Prints JSON lines on rank 0.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

SIZES_CHECK = [1, 3, 4, 1000, 4096, 65536, 1 << 20, 16 << 20, 256 << 20]
SIZES_BENCH = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
# Knobs of the plugin a configuration may set; each record names the ones in effect.
KNOBS = ("MKERNEL_OFI_PROVIDER", "MKERNEL_OFI_LANES", "MKERNEL_EAGER_BYTES",
         "MKERNEL_OFI_PROGRESS_THREAD", "NCCL_NET")


def numel_for(nbytes, dtype):
    return max(1, nbytes // torch.tensor([], dtype=dtype).element_size())


def check(rank, world, dev):
    failures = []
    for nbytes in SIZES_CHECK:
        dtype = torch.uint8 if nbytes < 4 else torch.int32
        n = numel_for(nbytes, dtype)
        base = torch.arange(n, device=dev, dtype=torch.int64)
        # all_reduce: rank r contributes (i % 7) + r; the sum is exact in int32/uint8
        x = ((base % 7) + rank).to(dtype)
        dist.all_reduce(x)
        want = ((base % 7) * world + sum(range(world))).to(dtype)
        if not torch.equal(x, want):
            failures.append(("all_reduce", nbytes))
        # all_gather
        mine = ((base % 5) + 10 * rank).to(dtype)
        out = torch.empty(n * world, device=dev, dtype=dtype)
        dist.all_gather_into_tensor(out, mine)
        want = torch.cat([((base % 5) + 10 * r).to(dtype) for r in range(world)])
        if not torch.equal(out, want):
            failures.append(("all_gather", nbytes))
        # reduce_scatter over world * n elements
        full = torch.arange(n * world, device=dev, dtype=torch.int64)
        src = ((full % 3) + rank).to(dtype)
        out = torch.empty(n, device=dev, dtype=dtype)
        dist.reduce_scatter_tensor(out, src)
        sl = full[rank * n:(rank + 1) * n]
        want = ((sl % 3) * world + sum(range(world))).to(dtype)
        if not torch.equal(out, want):
            failures.append(("reduce_scatter", nbytes))
        # broadcast from the last rank
        y = ((base % 11) + 100).to(dtype) if rank == world - 1 else torch.zeros(n, device=dev, dtype=dtype)
        dist.broadcast(y, src=world - 1)
        if not torch.equal(y, ((base % 11) + 100).to(dtype)):
            failures.append(("broadcast", nbytes))
        # send/recv around the ring
        s = ((base % 13) + rank).to(dtype)
        r = torch.zeros(n, device=dev, dtype=dtype)
        peer_to, peer_from = (rank + 1) % world, (rank - 1) % world
        ops = [dist.P2POp(dist.isend, s, peer_to), dist.P2POp(dist.irecv, r, peer_from)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        if not torch.equal(r, ((base % 13) + peer_from).to(dtype)):
            failures.append(("send_recv", nbytes))
        torch.cuda.synchronize()
    return failures


def timed(op, iters, reps):
    """Median seconds per op over reps repetitions of iters back-to-back calls."""
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        start.record()
        for _ in range(iters):
            op()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / iters)
    return statistics.median(times)


def bench(rank, world, dev, reps, iters, label):
    rows = []
    knobs = {k: os.environ[k] for k in KNOBS if k in os.environ}
    for nbytes in SIZES_BENCH:
        n_iters = max(2, min(iters, (512 << 20) // nbytes))
        x = torch.ones(nbytes // 4, device=dev, dtype=torch.float32)
        shard = torch.ones(nbytes // 4 // world, device=dev, dtype=torch.float32)
        gathered = torch.empty(shard.numel() * world, device=dev, dtype=torch.float32)
        ops = {
            # busbw factors as nccl-tests: all_reduce 2(n-1)/n, all_gather (n-1)/n of the
            # whole (gathered) buffer
            "all_reduce": (lambda: dist.all_reduce(x), 2 * (world - 1) / world),
            "all_gather": (lambda: dist.all_gather_into_tensor(gathered, shard),
                           (world - 1) / world),
        }
        for name, (op, factor) in ops.items():
            for _ in range(3):
                op()
            torch.cuda.synchronize()
            t = torch.tensor([timed(op, n_iters, reps)], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # same reduction for every configuration
            rows.append({"tool": "nccl-fake-nodes", "config": label, "op": name,
                         "bytes": nbytes, "iters": n_iters, "reps": reps,
                         "time_us_median": t.item() * 1e6,
                         "busbw_gbps": nbytes / t.item() * factor / 1e9, "world": world,
                         "knobs": knobs,
                         # ranks sharing one GPU are emulation; one GPU each is not
                         "emulated": os.environ.get("MK_EMULATED", "1") != "0"})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["check", "bench"], required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))  # the rank's GPU
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    t0 = time.time()
    if args.mode == "check":
        failures = check(rank, world, dev)
        if rank == 0:
            print(json.dumps({"tool": "nccl-fake-nodes", "config": args.label, "mode": "check",
                              "failures": failures, "seconds": round(time.time() - t0, 1),
                              "nccl": ".".join(map(str, torch.cuda.nccl.version()))}), flush=True)
        code = 1 if failures else 0
    else:
        for row in bench(rank, world, dev, args.reps, args.iters, args.label):
            row["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            if rank == 0:
                print(json.dumps(row), flush=True)
        code = 0
    dist.destroy_process_group()
    sys.exit(code)


if __name__ == "__main__":
    main()
