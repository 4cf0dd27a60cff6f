# SPDX-License-Identifier: Apache-2.0
"""One rank of test_moe.py: the MoE ops' torch path and mkernel.nn.MoE over gloo (CPU) against
a plain PyTorch reference: pairs gathered by routing, one fp32 matmul per pair, weighted sum.
argv: rank world store_dir. Prints one line per case; exit 1 on the first wrong result."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.environ["MKERNEL_PY_SOURCE"])
import mkernel  # noqa: E402

rank, world, store_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", rank=rank, world_size=world,
                        store=dist.FileStore(os.path.join(store_dir, "store"), world))


def routing(kind, t, e, k, g):
    """(topk_idx int64, topk_weight fp32) of t tokens; every rank builds every rank's alike."""
    if kind == "uniform":
        idx = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)]) if t else \
            torch.zeros(0, k, dtype=torch.long)
    elif kind == "skewed":  # most pairs on expert 0, the rest on the last rank's experts
        idx = torch.stack([torch.cat([torch.tensor([0]), e - 1 - torch.randperm(
            e // world, generator=g)[:k - 1]]) for _ in range(t)]) if t else \
            torch.zeros(0, k, dtype=torch.long)
    elif kind == "holes":  # slots with no expert (-1) and experts no token picks
        idx = torch.stack([torch.randperm(e // 2, generator=g)[:k] * 2 for _ in range(t)]) \
            if t else torch.zeros(0, k, dtype=torch.long)
        idx[torch.rand(idx.shape, generator=g) < 0.3] = -1
        if t:
            idx[0] = -1  # a token routed nowhere gets zeros
    w = torch.rand((t, k), generator=g) + 0.1
    return idx.long(), w / w.sum(-1, keepdim=True)


def problem(kind, tokens, e, k, h, i, seed, gated):
    g = torch.Generator().manual_seed(seed)
    w_up = torch.randn((e, 2 * i if gated else i, h), generator=g) / h ** 0.5
    w_down = torch.randn((e, h, i), generator=g) / i ** 0.5
    xs, routes = [], []
    for t in tokens:
        xs.append(torch.randn((t, h), generator=g))
        routes.append(routing(kind, t, e, k, g))
    return w_up, w_down, xs, routes


def dispatch_reference(xs, routes, w_up, e):
    """Rows of out on this rank, in the documented order: by local expert, then source rank,
    token, slot; and the receive offsets."""
    eloc = e // world
    rows, offs = [], [0]
    for le in range(eloc):
        ge = rank * eloc + le
        for s in range(world):
            idx = routes[s][0]
            for t in range(idx.shape[0]):
                for j in range(idx.shape[1]):
                    if int(idx[t, j]) == ge:
                        rows.append(xs[s][t].double() @ w_up[ge].double().t())
        offs.append(len(rows))
    return (torch.stack(rows) if rows else torch.zeros(0, w_up.shape[1], dtype=torch.double)), offs


def moe_reference(x, idx, w, w_up, w_down, gated, i):
    y = torch.zeros(x.shape[0], w_down.shape[1], dtype=torch.double)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            ge = int(idx[t, j])
            if ge < 0:
                continue
            a = x[t].double() @ w_up[ge].double().t()
            if gated:
                a = F.silu(a[:i]) * a[i:]
            y[t] += float(w[t, j]) * (a @ w_down[ge].double().t())
    return y


def close(got, want, tol, what):
    err = float((got.double() - want).abs().max()) if want.numel() else 0.0
    scale = max(float(want.abs().max()) if want.numel() else 0.0, 1.0)
    if not err <= tol * scale:
        print(f"rank {rank} FAIL {what}: max error {err:.3g} (scale {scale:.3g})", flush=True)
        sys.exit(1)
    return err


def ops_case(kind, tokens, e, k, h, i, dtype, max_recv=None):
    w_up, w_down, xs, routes = problem(kind, tokens, e, k, h, i, 1000 + sum(tokens) * k, False)
    eloc = e // world
    mine = slice(rank * eloc, (rank + 1) * eloc)
    x, (idx, w) = xs[rank], routes[rank]
    mt = max(tokens)
    d = mkernel.moe_dispatch_gemm(x.to(dtype), idx, w, w_up[mine].to(dtype).contiguous(),
                                  max_tokens_per_rank=mt, max_recv=max_recv)
    want, offs = dispatch_reference(xs, routes, w_up, e)
    tol = 1e-5 if dtype == torch.float32 else 3e-2  # bf16: inputs and outputs rounded
    assert d.recv_offsets.tolist() == offs, (d.recv_offsets.tolist(), offs)
    n = offs[-1]
    close(d.out[:n], want, tol, f"{kind} dispatch T={tokens} E={e} k={k}")
    assert d.out.shape[0] == (max_recv or world * mt * min(k, eloc))
    assert not d.out[n:].any(), "rows past the receive offsets are zero on the torch path"
    y = mkernel.moe_gemm_combine(d.out, w_down[mine].to(dtype).contiguous(), d.layout,
                                 x.shape[0], k, max_tokens_per_rank=mt)
    want_y = moe_reference(x, idx, w, w_up, w_down, False, i)
    err = close(y, want_y, tol, f"{kind} combine T={tokens} E={e} k={k}")
    print(f"rank {rank} ok ops {kind} tokens={tokens} E={e} k={k} {dtype} err {err:.2g}",
          flush=True)


def raises(fn, text):
    try:
        fn()
    except ValueError as ex:
        assert text in str(ex), str(ex)
        print(f"rank {rank} ok raises: {str(ex)[:100]}", flush=True)
        return
    print(f"rank {rank} FAIL no ValueError ({text})", flush=True)
    sys.exit(1)


torch.manual_seed(0)
ops_case("uniform", [13, 13], 4, 2, 24, 40, torch.float32)
ops_case("uniform", [7, 5], 8, 8, 16, 8, torch.float32)
ops_case("uniform", [1, 3], 2, 1, 8, 8, torch.float32)
ops_case("skewed", [11, 6], 8, 3, 16, 24, torch.float32)
ops_case("holes", [9, 17], 8, 4, 16, 8, torch.float32)
ops_case("holes", [0, 5], 4, 2, 8, 8, torch.float32)          # a rank without tokens
ops_case("uniform", [6, 6], 16, 5, 16, 16, torch.float32, max_recv=64)
ops_case("skewed", [33, 29], 4, 2, 32, 16, torch.bfloat16)

# Capacity: every rank refuses alike, naming the rows needed.
w_up, w_down, xs, routes = problem("skewed", [8, 8], 4, 2, 8, 8, 7, False)
raises(lambda: mkernel.moe_dispatch_gemm(xs[rank], routes[rank][0], routes[rank][1],
                                         w_up[rank * 2:rank * 2 + 2].contiguous(), max_recv=3),
       "raise max_recv to at least")
# A bad expert id on rank 1 only: both ranks refuse, naming rank 1's token and slot.
bad = routes[rank][0].clone()
if rank == 1:
    bad[3, 1] = 4
raises(lambda: mkernel.moe_dispatch_gemm(xs[rank], bad, routes[rank][1],
                                         w_up[rank * 2:rank * 2 + 2].contiguous()),
       "expert id 4 of token 3, slot 1 on rank 1 is outside [-1, 4)")

# nn.MoE (SwiGLU between the GEMMs) with the caller's routing and with a router module.
e, k, hd, i = 8, 3, 16, 12
w_up, w_down, xs, routes = problem("uniform", [10, 7], e, k, hd, i, 99, True)
layer = mkernel.nn.MoE(hd, i, e, k, max_tokens_per_rank=10).shard(w_up, w_down)
assert tuple(layer.w_up.shape) == (e // world, 2 * i, hd)
x, (idx, w) = xs[rank], routes[rank]
with torch.no_grad():
    y = layer(x.reshape(1, -1, hd), idx, w)
assert tuple(y.shape) == (1, x.shape[0], hd)
err = close(y[0], moe_reference(x, idx, w, w_up, w_down, True, i), 1e-5, "nn.MoE")
print(f"rank {rank} ok nn.MoE err {err:.2g}", flush=True)


class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(hd, e, bias=False)

    def forward(self, x2):
        p = torch.softmax(self.proj(x2), -1)
        w, ix = torch.topk(p, k, dim=-1)
        return ix, w / w.sum(-1, keepdim=True)


torch.manual_seed(5)
router = Router()
layer = mkernel.nn.MoE(hd, i, e, k, router=router, max_tokens_per_rank=10).shard(w_up, w_down)
with torch.no_grad():
    y = layer(x)
    ix, wt = router(x)
err = close(y, moe_reference(x, ix, wt, w_up, w_down, True, i), 1e-5, "nn.MoE with a router")
print(f"rank {rank} ok nn.MoE router err {err:.2g}", flush=True)

st = mkernel.stats()
for op in ("moe_dispatch_gemm", "moe_gemm_combine"):
    assert st[op]["mkernel"] == 0 and st[op]["torch"] > 0, st
    assert "group backend 'gloo', not NCCL" in st[op]["reason"], st
dist.destroy_process_group()
print(f"rank {rank} all ok", flush=True)
os._exit(0)  # without the interpreter's teardown: see layers_gloo_worker.py
