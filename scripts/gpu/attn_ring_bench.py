#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Emulated multi-rank ring-attention benchmark, one process per rank (scripts/gpu/python-run.sh
BIN LAYOUT scripts/gpu/attn_ring_bench.py ...): mkRingAttention (through ctypes on the group's
mkComm) against two PyTorch pipelines on the same inputs in the same run:

  allgather_sdpa  dist.all_gather_into_tensor of K and V, then SDPA (flash backend where it runs,
                  else the default choice) for this rank's query rows against the whole
                  sequence: one call non-causal, one per zigzag chunk causal with the
                  bottom-right mask (torch.nn.attention.bias.causal_lower_right);
  ring_sdpa       the ring-flash-attention pattern: R steps, K and V passed to rank + 1 with
                  dist.batch_isend_irecv while the flash kernel (aten._scaled_dot_product_
                  flash_attention, which returns the LSE) computes on the current block, the
                  partials merged in fp32 with the LSE rule; causal with zigzag sharding (step 0
                  causal on the local block, then all queries against a source's first chunk
                  or the second query chunk against all of it).

Repetitions alternate the three, each timed with CUDA events; per rank the median, then the
slowest rank (all_reduce MAX). Ranks share one GPU (fake nodes): the figures measure the
pipelines and overheads, not NVLink or NIC speed. Every shape is checked: mkRingAttention's O
against allgather_sdpa's and ring_sdpa's (relative Frobenius error below 2e-2). JSON lines from
rank 0, then a table. Exit 1 on a wrong result.

Shapes: B 4, H 16, D 128 (--batch, --heads, --dim), seq_local 1536 .. 12288 (--seqs), causal and
not (--causal). MKERNEL_RING_ATTN_FUSED is set to 1 unless --path auto (the cost model's
choice) or --path unfused.
"""
import argparse
import ctypes
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F


def bind(lib):
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.mkRingAttention.argtypes = [vp] * 5 + [i] * 6 + [vp, vp]
    lib.mkRingAttention.restype = ctypes.c_int


def sdpa_lse(q, k, v, causal):
    """Flash forward on BSHD tensors: (o fp32 [B, S, H, D], lse [B, H, S])."""
    out = torch.ops.aten._scaled_dot_product_flash_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, causal, False)
    return out[0].transpose(1, 2).float(), out[1]


def merge(acc, lse, o, lse_i, rows=None):
    """(acc, lse) = LSE-rule merge with (o, lse_i) over query rows `rows` (a slice) or all."""
    if rows is None:
        rows = slice(None)
    a, l = acc[:, rows], lse[:, :, rows]
    new = torch.logaddexp(l, lse_i)
    w_old = torch.exp(l - new).transpose(1, 2).unsqueeze(-1)
    w_new = torch.exp(lse_i - new).transpose(1, 2).unsqueeze(-1)
    acc[:, rows] = a * w_old + o * w_new
    lse[:, :, rows] = new


class Problem:
    def __init__(self, b, h, s, d, causal, rank, world):
        dev = torch.device("cuda")
        self.b, self.h, self.s, self.d, self.causal = b, h, s, d, causal
        self.rank, self.world = rank, world
        g = torch.Generator(device=dev)
        g.manual_seed(1000 + rank + s)
        self.q, self.k, self.v = [
            torch.randn(b, s, h, d, device=dev, generator=g).to(torch.bfloat16)
            for _ in range(3)]
        self.o = torch.empty_like(self.q)
        self.lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
        self.kv = torch.stack([self.k, self.v])


# The baselines allocate their buffers per call and drop them before they return (the caching
# allocator keeps them for the next call): with four ranks on one GPU, buffers held for the
# whole run kept the 196k-token point out of its memory.


def allgather_sdpa(p):
    """All-gather K, V; attention of my rows against the whole sequence."""
    R, r, half = p.world, p.rank, p.s // 2
    everyone = torch.empty((R,) + tuple(p.kv.shape), dtype=p.kv.dtype, device=p.kv.device)
    dist.all_gather_into_tensor(everyone, p.kv)
    if not p.causal:
        # [R, 2, B, s, H, D] -> [2, B, R s, H, D]: K and V of the whole sequence, one copy
        seq = everyone.permute(1, 2, 0, 3, 4, 5).reshape(2, p.b, R * p.s, p.h, p.d)
        del everyone
        return F.scaled_dot_product_attention(p.q.transpose(1, 2), seq[0].transpose(1, 2),
                                              seq[1].transpose(1, 2)).transpose(1, 2)
    # zigzag: rank j holds chunks j and 2R-1-j; the sequence in position order
    seq = torch.empty(2, p.b, 2 * R * half, p.h, p.d, dtype=p.kv.dtype, device=p.kv.device)
    by_chunk = seq.view(2, p.b, 2 * R, half, p.h, p.d)
    by_chunk[:, :, :R] = everyone[:, :, :, :half].permute(1, 2, 0, 3, 4, 5)  # chunks 0..R-1
    by_chunk[:, :, R:] = everyone[:, :, :, half:].flip(0).permute(1, 2, 0, 3, 4, 5)  # R..2R-1
    del everyone, by_chunk
    from torch.nn.attention.bias import causal_lower_right

    outs = []
    for c, rows in ((r, slice(0, half)), (2 * R - 1 - r, slice(half, p.s))):
        n = (c + 1) * half
        q = p.q[:, rows].transpose(1, 2)
        k, v = seq[0, :, :n].transpose(1, 2), seq[1, :, :n].transpose(1, 2)
        outs.append(F.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_lower_right(half, n)).transpose(1, 2))
    return torch.cat(outs, 1)


def ring_sdpa(p):
    """R steps of flash on the current K, V block while the next one travels."""
    R, r, half = p.world, p.rank, p.s // 2
    nxt, prv = (r + 1) % R, (r - 1) % R
    acc = torch.zeros(p.b, p.s, p.h, p.d, device=p.q.device, dtype=torch.float32)
    lse = torch.full((p.b, p.h, p.s), float("-inf"), device=p.q.device, dtype=torch.float32)
    cur = p.kv
    bufs = [torch.empty_like(p.kv), torch.empty_like(p.kv)] if R > 1 else []
    for step in range(R):
        reqs = []
        if step + 1 < R:
            nb = bufs[step % 2]
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, cur, nxt),
                                           dist.P2POp(dist.irecv, nb, prv)])
        k, v = cur[0], cur[1]
        if step == 0:
            o, l = sdpa_lse(p.q, k, v, p.causal)
            merge(acc, lse, o, l)
        elif not p.causal:
            o, l = sdpa_lse(p.q, k, v, False)
            merge(acc, lse, o, l)
        elif step <= r:  # the source's first chunk precedes both of mine, its second follows
            o, l = sdpa_lse(p.q, k[:, :half], v[:, :half], False)
            merge(acc, lse, o, l)
        else:  # the source's chunks both precede my second chunk, follow my first
            o, l = sdpa_lse(p.q[:, half:], k, v, False)
            merge(acc, lse, o, l, slice(half, p.s))
        for q_ in reqs:
            q_.wait()
        if step + 1 < R:
            cur = bufs[step % 2]
    return acc.to(torch.bfloat16)


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
    ap.add_argument("--seqs", default="1536,3072,6144,12288", help="seq_local per rank")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--path", choices=("fused", "auto", "unfused"), default="fused")
    args = ap.parse_args()
    if args.path != "auto":
        os.environ["MKERNEL_RING_ATTN_FUSED"] = "1" if args.path == "fused" else "0"
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    dev = int(os.environ.get("LOCAL_RANK", "0"))  # the rank's GPU (python-rank.sh)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    rank, world = dist.get_rank(), dist.get_world_size()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    from mkernel.comm import Comm  # noqa: E402 (the package of this tree or the bundle)

    nlocal = int(os.environ.get("MK_NLOCAL", "1"))
    nnodes = world // nlocal
    seqs = [int(s) for s in args.seqs.split(",")]
    blk = args.batch * max(seqs) * args.heads * args.dim * 2
    comm = Comm.get(None, heap_bytes=2 * nnodes * blk + (64 << 20), timeout_ms=60000)
    lib = comm._lib
    bind(lib)
    rows, failed = [], False
    for causal in [int(c) for c in args.causal.split(",")]:
        for s in seqs:
            p = Problem(args.batch, args.heads, s, args.dim, causal, rank, world)

            def mk():
                rc = lib.mkRingAttention(p.q.data_ptr(), p.k.data_ptr(), p.v.data_ptr(),
                                         p.o.data_ptr(), p.lse.data_ptr(), p.b, p.h, p.h, p.s,
                                         p.d, causal, comm.handle,
                                         ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                if rc != 0:
                    raise RuntimeError("mkRingAttention returned %d" % rc)
                return p.o

            fns = {"mk": mk, "allgather_sdpa": lambda: allgather_sdpa(p),
                   "ring_sdpa": lambda: ring_sdpa(p)}
            times = {k: [] for k in fns}
            outs = {}
            for it in range(args.warmup + args.reps):
                evs = {}
                for name, fn in fns.items():
                    dist.barrier()
                    outs[name], evs[name] = timed(fn)
                torch.cuda.synchronize()
                if it >= args.warmup:
                    for name, ev in evs.items():
                        times[name].append(ev[0].elapsed_time(ev[1]))
            err_ag = rel_err(outs["mk"], outs["allgather_sdpa"])
            err_ring = rel_err(outs["ring_sdpa"], outs["allgather_sdpa"])
            med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            slow = {k: slowest(v) for k, v in med.items()}
            bad = not (err_ag < 2e-2 and err_ring < 2e-2)
            bad_any = torch.tensor([1 if bad else 0], device="cuda")
            dist.all_reduce(bad_any, op=dist.ReduceOp.MAX)
            failed |= bool(bad_any.item())
            S = world * s
            flop = 4.0 * args.batch * args.heads * S * S * args.dim * (0.5 if causal else 1.0)
            r = {"bench": "ring_attention", "emulated": True,
                 "layout": os.environ.get("MK_LAYOUT"), "world": world, "nodes": nnodes,
                 "B": args.batch, "H": args.heads, "D": args.dim, "causal": causal,
                 "seq_local": s, "seq_total": S, "path": args.path, "mk_ms": slow["mk"],
                 "allgather_sdpa_ms": slow["allgather_sdpa"], "ring_sdpa_ms": slow["ring_sdpa"],
                 "speedup_vs_allgather_sdpa": slow["allgather_sdpa"] / slow["mk"],
                 "speedup_vs_ring_sdpa": slow["ring_sdpa"] / slow["mk"],
                 "tflops_all_ranks_mk": flop / slow["mk"] / 1e9,
                 "rel_err_vs_allgather_sdpa": err_ag, "rel_err_ring_sdpa": err_ring,
                 "reps": args.reps, "warmup": args.warmup, "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name()}
            rows.append(r)
            if rank == 0:
                print(json.dumps(r), flush=True)
            if bad:
                print("rank %d FAIL causal %d seq_local %d: rel err vs allgather_sdpa %.3g, "
                      "ring_sdpa vs allgather_sdpa %.3g" % (rank, causal, s, err_ag, err_ring),
                      file=sys.stderr)
            del p, outs
            torch.cuda.empty_cache()
    if rank == 0:
        print("\n| causal | seq_local (total) | mkernel ms | allgather+SDPA ms | ring SDPA ms | "
              "vs allgather | vs ring |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print("| %d | %d (%d) | %.3f | %.3f | %.3f | **%.2f** | **%.2f** |" % (
                r["causal"], r["seq_local"], r["seq_total"], r["mk_ms"],
                r["allgather_sdpa_ms"], r["ring_sdpa_ms"], r["speedup_vs_allgather_sdpa"],
                r["speedup_vs_ring_sdpa"]))
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
