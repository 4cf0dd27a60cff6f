#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Emulated multi-rank MoE benchmark, one process per rank (scripts/gpu/python-run.sh BIN LAYOUT
scripts/gpu/moe_bench.py ...): mkMoeDispatchGemm and mkMoeGemmCombine (through ctypes on the
group's mkComm) against the unfused PyTorch pipeline on the same inputs in the same run:
counts exchanged with dist.all_to_all_single and read on the host, token rows exchanged with
dist.all_to_all_single, sorted by expert, torch._grouped_mm; and back (torch._grouped_mm,
all_to_all_single, weighted index_add_). Repetitions alternate the two, each timed with CUDA
events; per rank the median, then the slowest rank (all_reduce MAX) for both.

Shapes: DeepSeek-V3's experts (hidden 7168, expert intermediate 2048, top-8), scaled: 256
experts over the ranks at --experts 256, or fewer (--experts) where memory runs short; global
tokens 8k .. 131k (--tokens). Ranks share one GPU (fake nodes), so the figures are emulation:
they measure the ops' overheads and pipelines, not NVLink or NIC speed.

Every measurement is checked: the dispatch's out against the baseline's (the same rows in the
same order), the combine's y likewise (relative Frobenius error below 2e-2). JSON lines from
rank 0, then a table. Exit 1 on a wrong result.
"""
import argparse
import ctypes
import json
import os
import sys

import torch
import torch.distributed as dist

torch.backends.cuda.matmul.allow_tf32 = False

NCCL_BFLOAT16 = 9
MK_LAYOUT_NK = 1


class MoeConfig(ctypes.Structure):
    _fields_ = [("numExperts", ctypes.c_int), ("topk", ctypes.c_int),
                ("hidden", ctypes.c_size_t), ("inter", ctypes.c_size_t),
                ("maxTokensPerRank", ctypes.c_size_t), ("maxRecv", ctypes.c_size_t),
                ("wLayout", ctypes.c_int), ("type", ctypes.c_int)]


def bind(lib):
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.mkMoeLayoutSize.argtypes = [ctypes.POINTER(MoeConfig), vp, ctypes.POINTER(sz)]
    lib.mkMoeDispatchGemm.argtypes = [vp, vp, vp, vp, vp, vp, sz, ctypes.POINTER(MoeConfig), vp,
                                      vp]
    lib.mkMoeGemmCombine.argtypes = [vp, vp, vp, vp, ctypes.POINTER(MoeConfig), vp, vp]
    for f in (lib.mkMoeLayoutSize, lib.mkMoeDispatchGemm, lib.mkMoeGemmCombine):
        f.restype = ctypes.c_int


def heap_bytes(nnodes, tmax, max_recv, hidden, topk):
    """The fused workspace (fused/ops/moe_plan.c, mk_moe_wmap_init), with room to spare."""
    row = hidden * 2
    entry = ((1 + 3 * topk + 3) & ~3) * 4 + row
    need = 2 * max_recv * row + 2 * nnodes * tmax * entry + 2 * nnodes * tmax * row
    return int(need * 1.05) + (256 << 20)


class Problem:
    def __init__(self, args, tokens_global, rank, world, gen):
        dev = torch.device("cuda")
        self.world, self.rank = world, rank
        self.E, self.k, self.H, self.I = args.experts, args.topk, args.hidden, args.inter
        self.eloc = self.E // world
        self.T = tokens_global // world
        self.x = (torch.randn(self.T, self.H, device=dev) * 0.5).to(torch.bfloat16)
        logits = torch.randn(self.T, self.E, device=dev)
        w, idx = torch.topk(torch.softmax(logits, -1), self.k, dim=-1)
        self.topk_idx = idx.to(torch.int32).contiguous()
        self.topk_w = (w / w.sum(-1, keepdim=True)).float().contiguous()
        self.w_up = (torch.randn(self.eloc, self.I, self.H, device=dev) / self.H ** 0.5).to(
            torch.bfloat16)
        self.w_down = (torch.randn(self.eloc, self.H, self.I, device=dev) / self.I ** 0.5).to(
            torch.bfloat16)
        worst = world * self.T * min(self.k, self.eloc)
        expect = self.T * self.k
        self.max_recv = worst if worst <= 2 * expect or args.worst_case else 2 * expect
        self.host_counts = self.max_recv < worst
        self.h = (torch.randn(self.max_recv, self.I, device=dev) * 0.5).to(torch.bfloat16)
        self.out = torch.empty(self.max_recv, self.I, device=dev, dtype=torch.bfloat16)
        self.y = torch.empty(self.T, self.H, device=dev, dtype=torch.bfloat16)

    def config(self):
        c = MoeConfig()
        c.numExperts, c.topk, c.hidden, c.inter = self.E, self.k, self.H, self.I
        c.maxTokensPerRank, c.maxRecv = self.T, self.max_recv
        c.wLayout, c.type = MK_LAYOUT_NK, NCCL_BFLOAT16
        return c


def mk_calls(lib, comm, p, layout):
    cfg = p.config()
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def dispatch():
        rc = lib.mkMoeDispatchGemm(p.x.data_ptr(), p.topk_idx.data_ptr(), p.topk_w.data_ptr(),
                                   p.w_up.data_ptr(), p.out.data_ptr(), layout.data_ptr(), p.T,
                                   ctypes.byref(cfg), comm.handle, stream)
        if rc != 0:
            raise RuntimeError("mkMoeDispatchGemm returned %d" % rc)

    def combine(h):
        rc = lib.mkMoeGemmCombine(h.data_ptr(), p.w_down.data_ptr(), p.y.data_ptr(),
                                  layout.data_ptr(), ctypes.byref(cfg), comm.handle, stream)
        if rc != 0:
            raise RuntimeError("mkMoeGemmCombine returned %d" % rc)
    return dispatch, combine


class Baseline:
    """counts -> all_to_all_single -> sort by expert -> torch._grouped_mm, and back."""

    def __init__(self, p):
        self.p = p

    def dispatch(self):
        p = self.p
        flat = p.topk_idx.reshape(-1).long()
        owner = flat // p.eloc
        order = torch.sort(owner, stable=True).indices  # by destination rank, then (t, j)
        self.send_order = order
        send_counts = torch.bincount(owner, minlength=p.world)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        self.sc, self.rc = send_counts.tolist(), recv_counts.tolist()  # the host round trip
        rows = p.x[order // p.k]
        recv = torch.empty(sum(self.rc), p.H, device=rows.device, dtype=rows.dtype)
        dist.all_to_all_single(recv, rows, self.rc, self.sc)
        experts = torch.empty(sum(self.rc), device=rows.device, dtype=torch.long)
        dist.all_to_all_single(experts, flat[order], self.rc, self.sc)
        local = experts - p.rank * p.eloc
        self.by_expert = torch.sort(local, stable=True).indices  # expert, then source, t, j
        counts = torch.bincount(local, minlength=p.eloc)
        self.offs = torch.cumsum(counts, 0).to(torch.int32)
        xs = recv[self.by_expert]
        return torch._grouped_mm(xs, p.w_up.transpose(-2, -1), offs=self.offs)

    def combine(self, h_rows):
        p = self.p
        ys = torch._grouped_mm(h_rows, p.w_down.transpose(-2, -1), offs=self.offs)
        back = torch.empty_like(ys)
        back[self.by_expert] = ys
        ret = torch.empty(p.T * p.k, p.H, device=ys.device, dtype=ys.dtype)
        dist.all_to_all_single(ret, back, self.sc, self.rc)
        pairs = torch.empty_like(ret)
        pairs[self.send_order] = ret
        w = p.topk_w.reshape(-1, 1)
        y = torch.zeros(p.T, p.H, device=ys.device, dtype=torch.float32)
        y.index_add_(0, torch.arange(p.T * p.k, device=ys.device) // p.k, pairs.float() * w)
        return y.to(torch.bfloat16)


def timed(fn):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    r = fn()
    e.record()
    return r, (s, e)


def slowest(ms):
    t = torch.tensor([ms], device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def rel_err(a, b):
    a, b = a.float(), b.float()
    return float(torch.linalg.norm(a - b) / max(float(torch.linalg.norm(b)), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="8192,16384,32768,65536")
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--inter", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--worst-case", action="store_true",
                    help="maxRecv at the worst case always (no host round trip for mkernel)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    dev = int(os.environ.get("LOCAL_RANK", "0"))  # the rank's GPU (python-rank.sh)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.experts % world:
        print("experts must be a multiple of the ranks")
        return 2
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    from mkernel.comm import Comm  # noqa: E402 (the package of this tree or the bundle)

    nlocal = int(os.environ.get("MK_NLOCAL", "1"))
    nnodes = world // nlocal
    tokens = [int(t) for t in args.tokens.split(",")]
    tmax = max(tokens) // world
    probe = Problem(args, max(tokens), rank, world, None)
    comm = Comm.get(None, heap_bytes=heap_bytes(nnodes, tmax, probe.max_recv, args.hidden,
                                                args.topk), timeout_ms=60000)
    del probe
    lib = comm._lib
    bind(lib)
    rows, failed = [], False
    for tg in tokens:
        torch.manual_seed(1000 + rank + tg)
        p = Problem(args, tg, rank, world, None)
        nbytes = ctypes.c_size_t()
        cfg = p.config()
        if lib.mkMoeLayoutSize(ctypes.byref(cfg), comm.handle, ctypes.byref(nbytes)) != 0:
            raise RuntimeError("mkMoeLayoutSize")
        layout = torch.empty(nbytes.value, device="cuda", dtype=torch.uint8)
        mk_dispatch, mk_combine = mk_calls(lib, comm, p, layout)
        base = Baseline(p)
        times = {"mk_d": [], "mk_c": [], "t_d": [], "t_c": []}
        for it in range(args.warmup + args.reps):
            _, ed = timed(mk_dispatch)
            _, ec = timed(lambda: mk_combine(p.h))
            t_out, etd = timed(base.dispatch)
            h_rows = p.h[:t_out.shape[0]]
            t_y, etc_ = timed(lambda: base.combine(h_rows))
            torch.cuda.synchronize()
            if it >= args.warmup:
                for key, ev in (("mk_d", ed), ("mk_c", ec), ("t_d", etd), ("t_c", etc_)):
                    times[key].append(ev[0].elapsed_time(ev[1]))
        n = t_out.shape[0]
        err_out = rel_err(p.out[:n], t_out)
        err_y = rel_err(p.y, t_y)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        slow = {k: slowest(v) for k, v in med.items()}
        bad = not (err_out < 2e-2 and err_y < 2e-2)
        bad_any = torch.tensor([1 if bad else 0], device="cuda")
        dist.all_reduce(bad_any, op=dist.ReduceOp.MAX)
        failed |= bool(bad_any.item())
        flop = 2.0 * n * args.hidden * args.inter
        for op, mk_key, t_key in (("dispatch_gemm", "mk_d", "t_d"),
                                  ("gemm_combine", "mk_c", "t_c")):
            r = {"bench": "moe_" + op, "emulated": True, "layout": os.environ.get("MK_LAYOUT"),
                 "world": world, "nodes": nnodes, "tokens_global": tg, "tokens_per_rank": p.T,
                 "experts": args.experts, "topk": args.topk, "hidden": args.hidden,
                 "inter": args.inter, "max_recv": p.max_recv, "mk_host_counts": p.host_counts,
                 "mk_ms": slow[mk_key], "baseline": "all_to_all_single+torch._grouped_mm",
                 "baseline_ms": slow[t_key], "ratio": slow[t_key] / slow[mk_key],
                 "rank0_gemm_tflops_mk": flop / med[mk_key] / 1e9,
                 "rel_err_vs_baseline": err_out if op == "dispatch_gemm" else err_y,
                 "reps": args.reps, "warmup": args.warmup, "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name()}
            rows.append(r)
            if rank == 0:
                print(json.dumps(r), flush=True)
        if bad:
            print("rank %d FAIL tokens %d: out rel err %.3g, y rel err %.3g" %
                  (rank, tg, err_out, err_y), file=sys.stderr)
        del layout, p, base
        torch.cuda.empty_cache()
    if rank == 0:
        print("\n| op | tokens (global) | mkernel ms | torch ms | ratio | host counts |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print("| %s | %d | %.3f | %.3f | **%.2f** | %s |" % (
                r["bench"], r["tokens_global"], r["mk_ms"], r["baseline_ms"], r["ratio"],
                "yes" if r["mk_host_counts"] else "no"))
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
