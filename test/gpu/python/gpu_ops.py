#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One rank of the PyTorch GPU tests; scripts/gpu/python-run.sh starts one process per rank.

Modes (--mode):
  check    every op against torch.matmul + c10d in fp32 on integer-valued bf16 data (exact:
           every partial is an integer of at most 64 in magnitude and every sum at most 256,
           so bf16 holds them and fp32 adds them without rounding); attention, ring attention
           against an fp32 reference with a derived tolerance; bad input on the GPU; shapes
           that differ between ranks; a gloo group; the layers; destroy with the group.
  compile  the ops and a tensor-parallel MLP under torch.compile(fullgraph=True), exact.
  graph    gemm_all_reduce, the layers and all_to_all captured in a torch.cuda.CUDAGraph and
           replayed on new inputs, exact.
  burst    100 gemm_all_reduce calls back to back without synchronising, each checked.
  kill     the last rank SIGKILLs itself right after enqueuing a call; every other rank must
           get mkernel.MkernelError naming the error within the comm's timeout.
gemm_all_reduce and all_to_all must run on libmkernel (MKERNEL_STRICT names them: a silent
fallback fails); the ops libmkernel may not have yet must take the path the library allows
(mkernel if it exports the symbol, else torch with that reason). Exit 0 pass, 1 fail, 77 no GPU.
"""
import argparse
import datetime
import itertools
import os
import signal
import sys
import time

import torch

if not torch.cuda.is_available():
    print("no CUDA device: skipped")
    sys.exit(77)

import torch.distributed as dist  # noqa: E402

import mkernel  # noqa: E402
from mkernel.ops.attention import reference  # noqa: E402
from mkernel.ops.ring_attention import positions  # noqa: E402

BF = torch.bfloat16
FAILS = []
RANK = int(os.environ.get("RANK", "0"))


def say(*a):
    print(f"[rank {RANK}]", *a, flush=True)


def expect(cond, what):
    if cond:
        say("ok  ", what)
    else:
        FAILS.append(what)
        say("FAIL", what)


def raises(exc, text, fn, what):
    try:
        fn()
    except exc as e:
        expect(text in str(e), f"{what}: {type(e).__name__}: {str(e)[:160]}")
        return
    except Exception as e:  # noqa: BLE001 - the wrong kind of error is a failure too
        expect(False, f"{what}: wrong exception {type(e).__name__}: {e}")
        return
    expect(False, f"{what}: no exception")


def ints(shape, seed, band=1):
    """Values in {-1, 0, 1}; with band > 1 only entries with (row + col) % band == 0 are kept,
    so each row of an M x K matrix has at most K / band non-zeros."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randint(-1, 2, shape, generator=g, device="cuda", dtype=torch.int32)
    if band > 1:
        i = torch.arange(shape[0], device="cuda")[:, None]
        j = torch.arange(shape[1], device="cuda")[None, :]
        x = x * ((i + j) % band == 0)
    return x.to(BF)


def gemm_inputs(m, n, k, layout, seed):
    a = ints((m, k), seed * 7 + RANK, band=max(1, k // 64))  # <= 64 non-zeros per row
    b = ints((k, n) if layout == "kn" else (n, k), seed * 13 + 100 + RANK)
    return a, b


def partial(a, b, layout):
    return a.float() @ (b.float() if layout == "kn" else b.float().t())


def lib_has(symbol):
    return hasattr(mkernel.library().cdll, symbol)


def path_ok(op, symbol, before):
    """The op took the path the library allows: libmkernel if it exports `symbol`."""
    st = mkernel.stats().get(op, {"mkernel": 0, "torch": 0, "reason": None})
    ran = st["mkernel"] - before.get(op, {}).get("mkernel", 0)
    fell = st["torch"] - before.get(op, {}).get("torch", 0)
    if lib_has(symbol):
        expect(ran > 0 and fell == 0, f"{op}: ran on libmkernel ({ran} calls)")
    else:
        expect(fell > 0 and "has no " + symbol in (st["reason"] or ""),
               f"{op}: torch fallback because the library has no {symbol} ({fell} calls)")


SHAPES = [(512, 512, 512), (2048, 2048, 512), (4096, 4096, 256), (1000, 1003, 64),
          (8, 4096, 512), (4096, 1024, 2048)]


def check_gemm_all_reduce(group, world):
    for m, n, k in SHAPES:
        for layout in ("nk", "kn"):
            a, b = gemm_inputs(m, n, k, layout, m + n + k)
            y = mkernel.gemm_all_reduce(a, b, group, w_layout=layout)
            ref = partial(a, b, layout)
            dist.all_reduce(ref, group=group)
            expect(torch.equal(y.float(), ref), f"gemm_all_reduce {m}x{n}x{k} {layout} exact")
    # leading dimensions flattened: [S, B, K] -> [S, B, N]
    a, b = gemm_inputs(256, 384, 128, "nk", 5)
    y = mkernel.gemm_all_reduce(a.view(4, 64, 128), b, group)
    ref = partial(a, b, "nk")
    dist.all_reduce(ref, group=group)
    expect(y.shape == (4, 64, 384) and torch.equal(y.float().view(256, 384), ref),
           "gemm_all_reduce on [S, B, K] input")


def check_rs_ag(group, world):
    before = mkernel.stats()
    for m, n, k in [(512, 512, 512), (2048, 1024, 256), (1000 // world * world, 1003, 64)]:
        for layout in ("nk", "kn"):
            a, b = gemm_inputs(m, n, k, layout, m + 3 * n + k)
            y = mkernel.gemm_reduce_scatter(a, b, group, w_layout=layout)
            ref = partial(a, b, layout)
            dist.all_reduce(ref, group=group)
            rows = m // world
            expect(torch.equal(y.float(), ref[RANK * rows:(RANK + 1) * rows]),
                   f"gemm_reduce_scatter {m}x{n}x{k} {layout} exact")
            shard = a[RANK * rows:(RANK + 1) * rows].contiguous()
            c, gathered = mkernel.all_gather_gemm(shard, b, group, w_layout=layout,
                                                  return_gathered=True)
            full = torch.empty((m, k), dtype=BF, device="cuda")
            dist.all_gather_into_tensor(full, shard, group=group)
            expect(torch.equal(gathered, full) and torch.equal(c.float(), partial(full, b, layout)),
                   f"all_gather_gemm {m}x{n}x{k} {layout} exact (and the gathered A)")
    path_ok("gemm_reduce_scatter", "mkGemmReduceScatter", before)
    path_ok("all_gather_gemm", "mkAllGatherGemm", before)


def check_all_to_all(group, world):
    for count in (1, 1000, 262144, 3):
        blocks = torch.arange(world * count, device="cuda", dtype=torch.int32).view(world, count)
        x = blocks + 1000000 * RANK
        y = mkernel.all_to_all(x, group)
        want = torch.empty_like(x)
        dist.all_to_all_single(want, x, group=group)
        expect(torch.equal(y, want), f"all_to_all int32, {count} per block")
    x = torch.randn(world * 4, 33, 7, device="cuda").to(BF)
    y = mkernel.all_to_all(x, group)
    want = torch.empty_like(x)
    dist.all_to_all_single(want, x, group=group)
    expect(torch.equal(y, want), "all_to_all bf16 [R*4, 33, 7]")


def attn_tol(v):
    # bf16 output: one rounding of values bounded by max|v| (2^-8 relative) plus the
    # difference of the two fp32 accumulations; the fallback's own SDPA in bf16 adds one more.
    return 4 * 2.0 ** -8 * float(v.abs().max()) + 1e-3


def check_attention(group, world):
    before = mkernel.stats()
    torch.manual_seed(11 + RANK)
    for b, sq, skv, hq, hkv, d, causal in [(2, 128, 128, 8, 8, 64, False),
                                           (2, 100, 160, 8, 2, 128, True),
                                           (1, 257, 257, 4, 1, 64, True)]:
        q = torch.randn(b, sq, hq, d, device="cuda").to(BF)
        k = torch.randn(b, skv, hkv, d, device="cuda").to(BF)
        v = torch.randn(b, skv, hkv, d, device="cuda").to(BF)
        o, lse = mkernel.attention(q, k, v, causal=causal)
        ro, rl = reference(q.float(), k.float(), v.float(), torch.arange(sq, device="cuda") +
                           (skv - sq), torch.arange(skv, device="cuda"), causal)
        err = (o.float() - ro).abs().max().item()
        lerr = (lse - rl).abs().max().item()
        expect(err <= attn_tol(v) and lerr <= 1e-2,
               f"attention {b}x{sq}x{skv} h{hq}/{hkv} d{d} causal={causal}: |o| err {err:.2e}, "
               f"lse err {lerr:.2e}")
    path_ok("attention", "mkAttention", before)
    before = mkernel.stats()
    for causal in (False, True):
        s = 64
        q, k, v = (torch.randn(2, world * s, 4, 128, device="cuda", generator=torch.Generator(
            device="cuda").manual_seed(i)).to(BF) for i in range(3))  # same on every rank
        shard = (lambda x: mkernel.zigzag_shard(x, RANK, world)) if causal else \
            (lambda x: x.chunk(world, 1)[RANK].contiguous())
        o, lse = mkernel.ring_attention(shard(q), shard(k), shard(v), group, causal=causal)
        pos = positions(RANK, world, s, causal, "cuda")
        ro, rl = reference(shard(q).float(), k.float(), v.float(), pos,
                           torch.arange(world * s, device="cuda"), causal)
        err = (o.float() - ro).abs().max().item()
        lerr = (lse - rl).abs().max().item()
        expect(err <= attn_tol(v) and lerr <= 1e-2,
               f"ring_attention causal={causal}: |o| err {err:.2e}, lse err {lerr:.2e}")
    path_ok("ring_attention", "mkRingAttention", before)


def check_grouped_gemm():
    before = mkernel.stats()
    e, k, n = 4, 128, 256
    counts = [5, 0, 300, 17]
    off = torch.tensor([0] + list(itertools.accumulate(counts)), dtype=torch.int32,
                       device="cuda")
    total = sum(counts) + 11  # rows past offsets[E] belong to no expert
    a = ints((total, k), 3, band=2)
    for layout in ("nk", "kn"):
        w = torch.stack([ints((n, k) if layout == "nk" else (k, n), 40 + i) for i in range(e)])
        c = mkernel.grouped_gemm(a, w, off, w_layout=layout)
        ref = torch.zeros(total, n, device="cuda")
        bounds = off.tolist()
        for i in range(e):
            ref[bounds[i]:bounds[i + 1]] = partial(a[bounds[i]:bounds[i + 1]], w[i], layout)
        expect(torch.equal(c.float(), ref),
               f"grouped_gemm {layout} exact (an empty expert, tail rows)")
    path_ok("grouped_gemm", "mkGroupedGemm", before)


def check_moe(group, world):
    """moe_dispatch_gemm + moe_gemm_combine and nn.MoE against an fp32 reference of the same
    routing: exact for the pair (integer data: every product sum is an integer below 256, the
    weights are powers of two), 2e-2 relative (Frobenius) for nn.MoE (SwiGLU rounds to bf16)."""
    before = mkernel.stats()
    e, k, hd, inter = 4 * world, 3, 256, 128
    eloc = e // world
    tokens = [37 + 13 * r for r in range(world)]  # differ between ranks, multiples of nothing
    g = torch.Generator(device="cuda").manual_seed(500)
    w_up = ints((e * inter, hd), 501, band=8).view(e, inter, hd)
    w_down = ints((e * hd, inter), 502, band=8).view(e, hd, inter)
    xs = [ints((t, hd), 510 + r, band=4) for r, t in enumerate(tokens)]
    ids = [torch.stack([torch.randperm(e, device="cuda", generator=g)[:k] for _ in range(t)])
           for t in tokens]
    ids[0][0] = -1  # a token routed nowhere: zeros
    ids[-1][:, 0] = 0  # skew: expert 0 takes every last-rank token
    wts = [torch.full((t, k), 0.25, device="cuda") for t in tokens]
    mine = slice(RANK * eloc, (RANK + 1) * eloc)
    x, idx, wt = xs[RANK], ids[RANK], wts[RANK]
    mt = max(tokens)
    d = mkernel.moe_dispatch_gemm(x, idx, wt, w_up[mine].contiguous(), group,
                                  max_tokens_per_rank=mt)
    offs = [0]
    rows = []
    for le in range(eloc):
        for s in range(world):
            hit = (ids[s] == RANK * eloc + le).nonzero()
            rows += [xs[s][t].float() @ w_up[RANK * eloc + le].float().t()
                     for t, _ in hit.tolist()]
        offs.append(len(rows))
    expect(d.recv_offsets.tolist() == offs, f"moe_dispatch_gemm receive offsets {offs}")
    expect(torch.equal(d.out[:offs[-1]].float(), torch.stack(rows)),
           f"moe_dispatch_gemm exact ({offs[-1]} rows, tokens {tokens}, top-{k})")
    h = (d.out.float().clamp(-2, 2)).to(BF).contiguous()  # keep products small: exact sums
    y = mkernel.moe_gemm_combine(h, w_down[mine].contiguous(), d.layout, x.shape[0], k, group,
                                 max_tokens_per_rank=mt)
    want = torch.zeros(x.shape[0], hd, device="cuda")
    for t in range(x.shape[0]):
        for j in range(k):
            ge = int(idx[t, j])
            if ge >= 0:
                a = (x[t].float() @ w_up[ge].float().t()).clamp(-2, 2)
                want[t] += 0.25 * (a @ w_down[ge].float().t())
    expect(torch.equal(y.float(), want), "moe_gemm_combine exact (weighted, a token without "
           "experts gets zeros)")
    path_ok("moe_dispatch_gemm", "mkMoeDispatchGemm", before)
    path_ok("moe_gemm_combine", "mkMoeGemmCombine", before)
    before = mkernel.stats()
    layer = mkernel.nn.MoE(hd, inter // 2, e, k, group=group, max_tokens_per_rank=mt,
                           device="cuda", dtype=BF).shard(w_up.float().mul(0.1).to(BF),
                                                          w_down[:, :, :inter // 2]
                                                          .float().mul(0.1).to(BF))
    with torch.no_grad():
        y = layer(x, idx, wt).float()
    want = torch.zeros_like(y)
    for t in range(x.shape[0]):
        for j in range(k):
            ge = int(idx[t, j])
            if ge >= 0:
                a = x[t].float() @ w_up[ge].float().mul(0.1).to(BF).float().t()
                a = torch.nn.functional.silu(a[:inter // 2]) * a[inter // 2:]
                want[t] += 0.25 * (a @ w_down[ge, :, :inter // 2].float().mul(0.1).to(BF).float().t())
    err = float(torch.linalg.norm(y - want) / max(float(torch.linalg.norm(want)), 1e-30))
    expect(err < 2e-2, f"nn.MoE against fp32 SwiGLU reference: relative error {err:.2e}")
    path_ok("moe_dispatch_gemm", "mkMoeDispatchGemm", before)


def mlp_weights(h, f, world):
    """Full weights every rank builds alike; sparse enough that every value stays exact."""
    w1 = ints((f, h), 71, band=max(1, h // 4))   # <= 4 non-zeros per row
    b1 = ints((f, 1), 72).view(f)
    w2 = ints((h, f), 73, band=max(1, f // 8))   # <= 8 non-zeros per row
    b2 = ints((h, 1), 74).view(h)
    return w1, b1, w2, b2


def first_wrong(got, want):
    """'' when equal, else how many elements differ and the first of them."""
    if got.shape != want.shape:
        return f"; shape {tuple(got.shape)}, want {tuple(want.shape)}"
    bad = (got != want).nonzero()
    if bad.numel() == 0:
        return ""
    at = tuple(bad[0].tolist())
    return (f"; {bad.shape[0]} of {got.numel()} wrong, first at {at}: got {got[at].item()} "
            f"want {want[at].item()}")


def mlp_reference(x, w1, b1, w2, b2):
    y = torch.relu(x.float() @ w1.float().t() + b1.float())
    return y @ w2.float().t() + b2.float()


def check_layers(group, world, sp):
    h, f, s, bsz = 256, 512, 16 * world, 2
    w1, b1, w2, b2 = mlp_weights(h, f, world)
    col = mkernel.nn.ColumnParallelLinear(h, f, group=group, sequence_parallel=sp,
                                          device="cuda", dtype=BF).shard(w1, b1)
    row = mkernel.nn.RowParallelLinear(f, h, group=group, sequence_parallel=sp, device="cuda",
                                       dtype=BF).shard(w2, b2)
    x = ints((s * bsz, h), 75).view(s, bsz, h)  # same on every rank
    with torch.no_grad():
        y = row(torch.relu(col(x.chunk(world, 0)[RANK].contiguous() if sp else x)))
    want = mlp_reference(x, w1, b1, w2, b2)
    if sp:
        want = want.chunk(world, 0)[RANK]
    expect(y.shape == want.shape and torch.equal(y.float(), want),
           f"ColumnParallelLinear -> RowParallelLinear (sequence_parallel={sp}) exact"
           + first_wrong(y.float(), want))
    return col, row


def check_bad_input(group, world):
    a, b = gemm_inputs(64, 64, 64, "nk", 1)
    raises(ValueError, "must be contiguous", lambda: mkernel.gemm_all_reduce(a.t(), b, group),
           "non-contiguous a")
    raises(ValueError, "must be a CUDA tensor", lambda: mkernel.gemm_all_reduce(a.cpu(), b, group),
           "a on the CPU")
    raises(TypeError, "must have dtype", lambda: mkernel.gemm_all_reduce(a.double(), b.double(),
                                                                          group), "float64")
    raises(TypeError, "same dtype", lambda: mkernel.gemm_all_reduce(a, b.half(), group),
           "mixed dtypes")
    # shapes that differ between ranks: detected on every rank, nothing launched
    am, bm = gemm_inputs(64 * (RANK + 1), 64, 64, "nk", 2)
    if world > 1:
        raises(ValueError, "must be the same on every rank",
               lambda: mkernel.gemm_all_reduce(am, bm, group), "M differs between ranks")
    gloo = dist.new_group(backend="gloo")
    raises(ValueError, "NCCL backend", lambda: mkernel.gemm_all_reduce(a, b, gloo), "gloo group")
    raises(ValueError, "NCCL backend", lambda: mkernel.Comm(gloo), "Comm over a gloo group")


def mode_check(group, world):
    os.environ["MKERNEL_STRICT"] = "gemm_all_reduce,all_to_all"
    comm = mkernel.Comm.get(group)
    say("comm:", comm, "from", comm.source, "library", mkernel.library())
    check_gemm_all_reduce(group, world)
    check_all_to_all(group, world)
    check_rs_ag(group, world)
    check_attention(group, world)
    check_grouped_gemm()
    check_moe(group, world)
    check_layers(group, world, sp=False)
    check_layers(group, world, sp=True)
    check_bad_input(group, world)
    mkernel.check(group)
    expect(comm.async_error() == 0, "no async error after all of it")
    say("stats:", mkernel.stats())


def mode_compile(group, world):
    os.environ["MKERNEL_STRICT"] = "gemm_all_reduce"
    h, f, s = 256, 512, 16
    w1, b1, w2, b2 = mlp_weights(h, f, world)
    col = mkernel.nn.ColumnParallelLinear(h, f, group=group, device="cuda",
                                          dtype=BF).shard(w1, b1)
    row = mkernel.nn.RowParallelLinear(f, h, group=group, device="cuda", dtype=BF).shard(w2, b2)

    def mlp(x):
        return row(torch.relu(col(x)))

    cmlp = torch.compile(mlp, fullgraph=True)
    before = mkernel.stats().get("gemm_all_reduce", {}).get("mkernel", 0)
    for i in range(3):
        x = ints((s, 2, h), 80 + i)
        with torch.no_grad():
            y = cmlp(x)
        expect(torch.equal(y.float(), mlp_reference(x, w1, b1, w2, b2)),
               f"compiled tensor-parallel MLP exact (input {i})")
    ran = mkernel.stats()["gemm_all_reduce"]["mkernel"] - before
    expect(ran == 3, f"compiled MLP ran gemm_all_reduce on libmkernel ({ran} of 3)")

    @torch.compile(fullgraph=True)
    def two(a, b):
        return mkernel.gemm_all_reduce(a, b, group) * 2 + 1

    a, b = gemm_inputs(1024, 512, 256, "nk", 9)
    ref = partial(a, b, "nk")
    dist.all_reduce(ref, group=group)
    expect(torch.equal(two(a, b).float(), ref * 2 + 1), "compiled gemm_all_reduce * 2 + 1 exact")


def mode_graph(group, world):
    os.environ["MKERNEL_STRICT"] = "gemm_all_reduce"
    m, n, k = 2048, 1024, 512
    a, b = gemm_inputs(m, n, k, "nk", 21)
    static_a = a.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # creates the Comm and the shape's workspace before capture
            mkernel.gemm_all_reduce(static_a, b, group)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    h, f, sq = 256, 512, 16
    w1, b1, w2, b2 = mlp_weights(h, f, world)
    col = mkernel.nn.ColumnParallelLinear(h, f, group=group, device="cuda", dtype=BF).shard(w1, b1)
    row = mkernel.nn.RowParallelLinear(f, h, group=group, device="cuda", dtype=BF).shard(w2, b2)
    static_x = ints((sq, 2, h), 90)
    static_t = torch.arange(world * 1000, device="cuda", dtype=torch.int32).view(world, 1000)
    with torch.no_grad(), torch.cuda.stream(s):
        row(torch.relu(col(static_x)))
        mkernel.all_to_all(static_t, group)
    torch.cuda.synchronize()
    before = mkernel.stats()
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        out = mkernel.gemm_all_reduce(static_a, b, group)
        out_mlp = row(torch.relu(col(static_x)))
        out_t = mkernel.all_to_all(static_t, group)
    st = mkernel.stats()
    expect(st["gemm_all_reduce"]["mkernel"] - before["gemm_all_reduce"]["mkernel"] == 2,
           "captured gemm_all_reduce calls were libmkernel's")
    expect(st["all_to_all"]["torch"] > before["all_to_all"].get("torch", 0) and
           "CUDA graph" in st["all_to_all"]["reason"], "captured all_to_all took all_to_all_single")
    for i in range(3):
        na, _ = gemm_inputs(m, n, k, "nk", 30 + i)
        static_a.copy_(na)
        nx = ints((sq, 2, h), 91 + i)
        static_x.copy_(nx)
        static_t.add_(RANK + 1)
        want_t = torch.empty_like(static_t)
        dist.all_to_all_single(want_t, static_t, group=group)
        g.replay()
        torch.cuda.synchronize()
        ref = partial(na, b, "nk")
        dist.all_reduce(ref, group=group)
        expect(torch.equal(out.float(), ref), f"graph replay {i}: gemm_all_reduce exact")
        expect(torch.equal(out_mlp.float(), mlp_reference(nx, w1, b1, w2, b2)),
               f"graph replay {i}: tensor-parallel MLP exact")
        expect(torch.equal(out_t, want_t), f"graph replay {i}: all_to_all exact")


def mode_burst(group, world, calls=100):
    os.environ["MKERNEL_STRICT"] = "gemm_all_reduce"
    m, n, k = 1024, 1024, 512
    ins = [gemm_inputs(m, n, k, "nk", 50 + i) for i in range(4)]
    refs = []
    for a, b in ins:
        r = partial(a, b, "nk")
        dist.all_reduce(r, group=group)
        refs.append(r)
    mkernel.gemm_all_reduce(ins[0][0], ins[0][1], group)
    torch.cuda.synchronize()
    t0 = time.time()
    outs = [mkernel.gemm_all_reduce(ins[i % 4][0], ins[i % 4][1], group) for i in range(calls)]
    torch.cuda.synchronize()
    dt = time.time() - t0
    bad = [i for i in range(calls) if not torch.equal(outs[i].float(), refs[i % 4])]
    expect(not bad, f"{calls} calls back to back, each exact ({dt * 1e3:.1f} ms); wrong: {bad[:8]}")
    mkernel.check(group)


# Small outputs with fewer output tiles than ranks, odd N and K, decode M: run under each
# MKERNEL_GEMM_AR_PATH (python-all.sh's small-* steps) so every path meets these shapes.
SMALL_SHAPES = [(128, 256, 128), (128, 128, 128), (64, 256, 64), (1, 256, 128), (200, 384, 96),
                (256, 512, 128), (16, 136, 40), (128, 256, 512)]


def mode_small(group, world):
    os.environ["MKERNEL_STRICT"] = "gemm_all_reduce"
    forced = os.environ.get("MKERNEL_GEMM_AR_PATH", "cost model")
    # SMALL_REPEAT=N: the shape list N times over (a stress run of the exchange)
    for m, n, k in SMALL_SHAPES * int(os.environ.get("SMALL_REPEAT", "1")):
        for layout in ("nk", "kn"):
            a, b = gemm_inputs(m, n, k, layout, 3 * m + n + k)
            y = mkernel.gemm_all_reduce(a, b, group, w_layout=layout)
            ref = partial(a, b, layout)
            dist.all_reduce(ref, group=group)
            expect(torch.equal(y.float(), ref),
                   f"gemm_all_reduce {m}x{n}x{k} {layout} exact ({forced})"
                   + first_wrong(y.float(), ref))
    mkernel.check(group)


def mode_kill(group, world, timeout_ms):
    os.environ["MKERNEL_STRICT"] = "gemm_all_reduce"
    victim = world - 1
    a, b = gemm_inputs(4096, 4096, 512, "nk", 61)
    for _ in range(3):
        mkernel.gemm_all_reduce(a, b, group)
    torch.cuda.synchronize()
    dist.barrier(group=group)
    if RANK == victim:
        mkernel.gemm_all_reduce(a, b, group)
        if os.environ.get("KILL_IDLE") == "1":  # diagnosis: die between calls instead
            torch.cuda.synchronize()
        say("enqueued a call; dying now")
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.time()
    try:
        for i in range(200):
            mkernel.gemm_all_reduce(a, b, group)
            try:
                torch.cuda.synchronize()
            except RuntimeError as e:  # say when, for the diagnosis of a fault
                say(f"call {i}: the GPU failed after {time.time() - t0:.2f} s: {e}")
                raise
            mkernel.check(group)
    except mkernel.MkernelError as e:
        dt = time.time() - t0
        limit = 2 * timeout_ms / 1e3 + 10
        expect(e.name in ("ncclRemoteError", "ncclSystemError"),
               f"survivor got MkernelError naming {e.name}: {e}")
        expect(dt <= limit, f"within {dt:.1f} s (limit {limit:.0f} s, comm timeout "
                            f"{timeout_ms / 1e3:.0f} s)")
    else:
        expect(False, "200 calls with a dead peer raised nothing")
    time.sleep(float(os.environ.get("KILL_LINGER", "0")))  # diagnosis: outlive the peers' calls
    mkernel.abort()  # the peer is gone: no collective teardown
    say("result:", "FAIL" if FAILS else "pass")
    sys.stdout.flush()
    os._exit(1 if FAILS else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True,
                    choices=["check", "compile", "graph", "burst", "kill", "small"])
    ap.add_argument("--lazy", action="store_true",
                    help="init_process_group without device_id: the Comm must make torch "
                         "create the group's communicator")
    args = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    timeout_ms = int(os.environ.setdefault("MKERNEL_TIMEOUT", "5000" if args.mode == "kill"
                                           else "30000"))
    dev = int(os.environ.get("LOCAL_RANK", "0"))  # the rank's GPU (python-rank.sh)
    torch.cuda.set_device(dev)
    kw = {} if args.lazy else {"device_id": torch.device("cuda", dev)}
    dist.init_process_group("nccl", rank=RANK, world_size=world,
                            timeout=datetime.timedelta(seconds=120), **kw)
    group = dist.group.WORLD
    t0 = time.time()
    {"check": lambda: mode_check(group, world),
     "compile": lambda: mode_compile(group, world),
     "graph": lambda: mode_graph(group, world),
     "burst": lambda: mode_burst(group, world),
     "small": lambda: mode_small(group, world),
     "kill": lambda: mode_kill(group, world, timeout_ms)}[args.mode]()
    comm = mkernel.Comm.cached(group)
    dist.destroy_process_group()  # destroys the Comm first (mkernel's hook), then the group
    expect(comm is None or comm.handle is None, "Comm destroyed with its group")
    say(f"mode {args.mode}: {len(FAILS)} failure(s) in {time.time() - t0:.1f} s:",
        "FAIL" if FAILS else "pass")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
