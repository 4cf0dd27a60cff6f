#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel Llama-style MLP forward: mkernel.nn layers against the same block written
with torch.matmul + c10d collectives, in the same run, interleaved.

One process per rank (scripts/gpu/python-run.sh). Block: gate_up = x @ W1^T (W1: 2F/R x H on
each rank, Megatron's column split), h = silu(gate) * up, y = h @ W2^T (W2: H x F/R, row split)
summed over the ranks. Hidden H 8192, intermediate F 28672 over R ranks, tokens 4096..16384
plus decode and odd sizes. Two configurations:
  ar: input replicated; mkernel: ColumnParallelLinear + RowParallelLinear (gemm_all_reduce);
      torch: matmul, matmul, dist.all_reduce.
  sp: sequence parallel, input [T/R, H]; mkernel: all_gather_gemm + gemm_reduce_scatter;
      torch: all_gather_into_tensor, matmul, matmul, reduce_scatter_tensor.
Each repetition times both variants (alternating which goes first) with CUDA events after a
barrier; per rank the median of the repetitions, across ranks the max of the medians (the same
reduction for both). Outputs compared every size. Rank 0 prints one JSON line per
(configuration, tokens); `--table FILE` prints them as a table, `--plot FILE --png OUT` draws them.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time


def table(path):
    rows = [json.loads(x) for x in open(path) if x.startswith("{")]
    print(f"{'layout':>6} {'cfg':>3} {'tokens':>7} {'mkernel ms':>11} {'torch ms':>9} "
          f"{'speedup':>8} {'paths':>20} {'ok':>3}")
    for r in rows:
        print(f"{r['layout']:>6} {r['config']:>3} {r['tokens']:>7} {r['mkernel_ms']:>11.3f} "
              f"{r['torch_ms']:>9.3f} {r['speedup']:>8.3f} {r['row_path']:>20} "
              f"{'yes' if r['outputs_match'] else 'NO':>3}")


def plot(path, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(x) for x in open(path) if x.startswith("{")]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in sorted({(r["layout"], r["config"]) for r in rows}):
        rs = sorted((r for r in rows if (r["layout"], r["config"]) == key),
                    key=lambda r: r["tokens"])
        ax.plot([r["tokens"] for r in rs], [r["speedup"] for r in rs], marker="o",
                label=f"layout {key[0]}, {key[1]}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens")
    ax.set_ylabel("torch + c10d time / mkernel.nn time")
    emulated = " (emulated: ranks share one GPU)" if any(r.get("emulated") for r in rows) else ""
    ax.set_title(f"TP MLP forward, H 8192, F 28672{emulated}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="append JSON lines here (rank 0)")
    ap.add_argument("--tokens", default="1,128,4095,4096,8192,16384")
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--intermediate", type=int, default=28672)
    ap.add_argument("--configs", default="ar,sp")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--table")
    ap.add_argument("--plot")
    ap.add_argument("--png", default="python-mlp.png")
    args = ap.parse_args()
    if args.table:
        table(args.table)
        return 0
    if args.plot:
        plot(args.plot, args.png)
        return 0

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 77
    import torch.distributed as dist
    import torch.nn.functional as F

    import mkernel

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = int(os.environ.get("LOCAL_RANK", "0"))  # the rank's GPU (python-rank.sh)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            device_id=torch.device("cuda", dev),
                            timeout=datetime.timedelta(seconds=300))
    g = dist.group.WORLD
    h, f = args.hidden, args.intermediate
    tokens = [int(t) for t in args.tokens.split(",")]
    # The fused GEMM + all-reduce keeps up to 2.5 x T x H x 2 bytes of the symmetric heap.
    heap = int(3 * max(tokens) * h * 2) + (256 << 20)
    mkernel.Comm.get(g, heap_bytes=heap)
    torch.manual_seed(1)
    bf = torch.bfloat16
    col = mkernel.nn.ColumnParallelLinear(h, 2 * f, bias=False, device="cuda", dtype=bf)
    row = mkernel.nn.RowParallelLinear(f, h, bias=False, device="cuda", dtype=bf)
    col_sp = mkernel.nn.ColumnParallelLinear(h, 2 * f, bias=False, sequence_parallel=True,
                                             device="cuda", dtype=bf)
    row_sp = mkernel.nn.RowParallelLinear(f, h, bias=False, sequence_parallel=True,
                                          device="cuda", dtype=bf)
    with torch.no_grad():
        col_sp.weight.copy_(col.weight)
        row_sp.weight.copy_(row.weight)
    w1, w2 = col.weight, row.weight  # [2F/R, H], [H, F/R]

    def act(gu):
        gate, up = gu.chunk(2, dim=-1)
        return F.silu(gate) * up

    def mk_ar(x):
        return row(act(col(x)))

    def torch_ar(x):
        y = act(x @ w1.t()) @ w2.t()
        dist.all_reduce(y, group=g)
        return y

    def mk_sp(x):
        return row_sp(act(col_sp(x)))

    def torch_sp(x):
        full = torch.empty((x.shape[0] * world, h), dtype=bf, device="cuda")
        dist.all_gather_into_tensor(full, x, group=g)
        y = act(full @ w1.t()) @ w2.t()
        out = torch.empty((x.shape[0], h), dtype=bf, device="cuda")
        dist.reduce_scatter_tensor(out, y, group=g)
        return out

    variants = {"ar": (mk_ar, torch_ar), "sp": (mk_sp, torch_sp)}
    meta = {
        "tool": "python-bench", "hidden": h, "intermediate": f, "ranks": world,
        "layout": os.environ.get("MK_LAYOUT", "?"), "emulated": True,
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "mkernel_lib": mkernel.library().path,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git": subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)),
                               "describe", "--always", "--dirty"], capture_output=True,
                              text=True).stdout.strip() or "unknown",
        "reps": args.reps, "warmup": args.warmup,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("MKERNEL_", "NCCL_"))
                and k != "NCCL_HOSTID"},
    }
    for cfg in args.configs.split(","):
        mk, base = variants[cfg]
        for t in tokens:
            if cfg == "sp" and t % world:
                continue
            rows_in = t // world if cfg == "sp" else t
            x = torch.randn(rows_in, h, device="cuda", dtype=bf)
            mkernel.reset_stats()
            with torch.no_grad():
                for _ in range(args.warmup):
                    y_mk, y_t = mk(x), base(x)
                torch.cuda.synchronize()
                # same inputs, both variants: the outputs agree within the roundings of a bf16
                # partial per rank and of the sums (the gemm-allreduce tolerance)
                diff = (y_mk.float() - y_t.float()).abs()
                scale = y_t.float().abs() + y_t.float().abs().mean()
                ok = bool((diff <= (world + 1) * 2.0 ** -7 * scale).all())
                times = {"mk": [], "torch": []}
                for rep in range(args.reps):
                    order = [("mk", mk), ("torch", base)]
                    if rep % 2:
                        order.reverse()
                    for name, fn in order:
                        dist.barrier(group=g)
                        torch.cuda.synchronize()
                        s, e = torch.cuda.Event(enable_timing=True), \
                            torch.cuda.Event(enable_timing=True)
                        s.record()
                        fn(x)
                        e.record()
                        e.synchronize()
                        times[name].append(s.elapsed_time(e))
            st = mkernel.stats()
            med = torch.tensor([statistics.median(times["mk"]),
                                statistics.median(times["torch"])], device="cuda")
            dist.all_reduce(med, op=dist.ReduceOp.MAX, group=g)
            okt = torch.tensor([0 if ok else 1], device="cuda")
            dist.all_reduce(okt, group=g)
            row_op = "gemm_all_reduce" if cfg == "ar" else "gemm_reduce_scatter"
            r = dict(meta, config=cfg, tokens=t, mkernel_ms=med[0].item(),
                     torch_ms=med[1].item(), speedup=med[1].item() / med[0].item(),
                     mkernel_p10_p90_ms=[sorted(times["mk"])[len(times["mk"]) // 10],
                                         sorted(times["mk"])[-1 - len(times["mk"]) // 10]],
                     torch_p10_p90_ms=[sorted(times["torch"])[len(times["torch"]) // 10],
                                       sorted(times["torch"])[-1 - len(times["torch"]) // 10]],
                     outputs_match=okt.item() == 0,
                     row_path="mkernel" if st.get(row_op, {}).get("mkernel") else "torch",
                     paths=st)
            if rank == 0:
                line = json.dumps(r)
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(line + "\n")
            del x, y_mk, y_t
            torch.cuda.empty_cache()
    mkernel.check(g)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    sys.exit(rc)
