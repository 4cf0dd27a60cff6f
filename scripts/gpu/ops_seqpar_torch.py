#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch async-TP's fused sequence-parallel ops as an extra benchmark column.

torch.ops.symm_mem.fused_all_gather_matmul and fused_matmul_reduce_scatter (what
torch.distributed._symmetric_memory._fused_all_gather_matmul and _fused_matmul_reduce_scatter
run) against all_gather_into_tensor + matmul and matmul + reduce_scatter_tensor on the same
inputs, timed the same way (CUDA events around one call, interleaved rounds, medians, the
slowest rank's) over mKernel's sweep shapes (GEMM + RS: M = N, K = N / 16; AG + GEMM: M = K,
N = M / ranks). Every rank is a process on GPU 0 with its own NCCL_HOSTID (as in the mkernel
tests, so NCCL accepts several ranks on one GPU), or with --per-gpu on GPU <rank> of one node
(one host identity: NVLink between the GPUs, a host of several GPUs). Symmetric memory maps the
other processes' buffers through CUDA IPC; where that (or anything else) does not run, a JSON
line says "unsupported" with the error instead of a figure.

usage: ops_seqpar_torch.py [--ranks 1 2 4] [--top N] [--out FILE] [--per-gpu]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emit(line, out):
    text = json.dumps(line)
    print(text, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(text + "\n")


def sweep(op, top, world):
    shapes, s = [], 2048 if op == "gemm_rs" else 4096
    while s <= top:
        if op == "gemm_rs":
            shapes.append((s, s, s // 16))
        else:
            shapes.append((s, s // world, s))
        s *= 2
    return shapes


def worker(rank, world, port, top, out, dev):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", dev))
    group = dist.group.WORLD
    name = group.group_name
    # ranks of their own GPUs (dev differs from 0 on some) are no emulation
    per_gpu = os.environ.get("MK_ASYNC_TP_PER_GPU") == "1"
    base = {"bench": "torch_async_tp", "nranks": world, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(dev), "emulated": not per_gpu}
    try:
        from torch.distributed import _symmetric_memory as symm_mem

        symm_mem.enable_symm_mem_for_group(name)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        if rank == 0:
            emit(dict(base, status="unsupported", error=f"symmetric memory: {e}"[:400]), out)
        dist.destroy_process_group()
        return 0
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)

    def timed(fn):
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)

    for op in ("gemm_rs", "ag_gemm"):
        for m, n, k in sweep(op, top, world):
            line = dict(base, op=op, m=m, n=n, k=k)
            try:
                g = torch.Generator(device="cuda").manual_seed(1000 * rank + m)
                if op == "gemm_rs":
                    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
                    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
                    out_t = torch.empty(m // world, n, device="cuda", dtype=torch.bfloat16)

                    def fused():
                        return torch.ops.symm_mem.fused_matmul_reduce_scatter(
                            a, b, "sum", 0, name)

                    def unfused():
                        dist.reduce_scatter_tensor(out_t, a @ b)
                        return out_t
                else:
                    a = torch.randn(m // world, k, device="cuda", dtype=torch.bfloat16,
                                    generator=g)
                    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
                    gathered = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)

                    def fused():
                        return torch.ops.symm_mem.fused_all_gather_matmul(
                            a, [b], 0, name, return_A=True)[1][0]

                    def unfused():
                        dist.all_gather_into_tensor(gathered, a)
                        return gathered @ b
                want = unfused().float()
                got = fused().float()
                err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
                tf, tu = [], []
                for r in range(3 + 11):
                    f = timed(fused)
                    u = timed(unfused)
                    if r >= 3:
                        tf.append(f)
                        tu.append(u)
                med = torch.tensor([sorted(tf)[len(tf) // 2], sorted(tu)[len(tu) // 2]],
                                   device="cuda")
                dist.all_reduce(med, op=dist.ReduceOp.MAX)
                line.update(status="ok", torch_fused_ms=round(med[0].item(), 4),
                            torch_unfused_ms=round(med[1].item(), 4),
                            speedup=round(med[1].item() / med[0].item(), 3),
                            max_rel_err=round(err, 5))
            except Exception as e:  # noqa: BLE001 - reported per shape
                line.update(status="unsupported", error=str(e)[:400])
            if rank == 0:
                emit(line, out)
            if line["status"] != "ok":
                break  # the group may be unusable now: next op
            del a, b
            torch.cuda.empty_cache()
    dist.destroy_process_group()
    return 0


def run(world, top, out, limit, per_gpu):
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, NCCL_HOSTID="gpu-node-0" if per_gpu else f"fake-node-{rank}",
                   NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1", NCCL_NVLS_ENABLE="0",
                   NCCL_MNNVL_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
                   NVSHMEM_DISABLE_NVLS="1", MK_ASYNC_TP_PER_GPU="1" if per_gpu else "0")
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", str(rank), str(world), str(port), str(top),
             out or "", str(rank if per_gpu else 0)], env=env))
    t0, rcs = time.time(), []
    for p in procs:
        try:
            rcs.append(p.wait(timeout=max(1, limit - (time.time() - t0))))
        except subprocess.TimeoutExpired:
            rcs.append(None)
    if None in rcs:
        for p in procs:
            p.kill()
        emit({"bench": "torch_async_tp", "nranks": world, "status": "unsupported",
              "error": f"no result within {limit} s (killed)", "emulated": not per_gpu}, out)
        return 0
    if any(rc != 0 for rc in rcs):
        emit({"bench": "torch_async_tp", "nranks": world, "status": "unsupported",
              "error": f"worker exits {rcs}", "emulated": not per_gpu}, out)
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        rank, world, port, top = (int(x) for x in sys.argv[2:6])
        return worker(rank, world, port, top, sys.argv[6] or None, int(sys.argv[7]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--top", type=int, default=16384)
    ap.add_argument("--out", default=None)
    ap.add_argument("--limit", type=int, default=150, help="seconds per rank count")
    ap.add_argument("--per-gpu", action="store_true",
                    help="rank r on GPU r, one node (a host with at least max(--ranks) GPUs)")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401 - only to say so when it is missing
    except ImportError as e:
        emit({"bench": "torch_async_tp", "status": "unsupported", "error": str(e)}, args.out)
        return 0
    for world in args.ranks:
        run(world, args.top, args.out, args.limit, args.per_gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
