# SPDX-License-Identifier: Apache-2.0
"""The MoE ops' and nn.MoE's argument rules (each named in its error, before anything runs),
on a 4-rank fake world; the fallback's accounting and MKERNEL_STRICT on a 1-rank gloo world."""
import pytest
import torch

import mkernel
from mkernel.ops import _moe

BF = torch.bfloat16
I32, F32 = torch.int32, torch.float32


def t(*shape, dtype=BF):
    return torch.zeros(shape, dtype=dtype)


def dispatch(g, x=None, idx=None, w=None, w_up=None, e=8, mt=16, mr=40, layout=1):
    """torch.ops.mkernel.moe_dispatch_gemm with valid defaults (E 8 over 4 ranks, top-3)."""
    return torch.ops.mkernel.moe_dispatch_gemm(
        t(13, 32) if x is None else x, t(13, 3, dtype=I32) if idx is None else idx,
        t(13, 3, dtype=F32) if w is None else w, t(2, 48, 32) if w_up is None else w_up, e, mt,
        mr, layout, g.group_name)


def combine(g, h=None, w_down=None, layout=None, n=13, k=3, mt=16, wl=1):
    lay = t(_moe.layout_bytes(8, 4, k, mt, 40), dtype=torch.uint8) if layout is None else layout
    return torch.ops.mkernel.moe_gemm_combine(
        t(40, 48) if h is None else h, t(2, 32, 48) if w_down is None else w_down, lay, n, k, mt,
        wl, g.group_name)


@pytest.mark.parametrize("kw, exc, text", [
    ({"idx": t(13, 3, dtype=torch.int16)}, TypeError, "topk_idx must have dtype int32; got int16"),
    ({"idx": t(13, 3, dtype=F32)}, TypeError, "topk_idx must have dtype int32"),
    ({"idx": t(13, dtype=I32)}, ValueError, r"topk_idx must have 2 dimensions, got shape \(13,\)"),
    ({"idx": t(12, 3, dtype=I32)}, ValueError,
     r"topk_idx must have one row per token of x \(13\), got shape \(12, 3\)"),
    ({"idx": t(13, 17, dtype=I32), "w": t(13, 17, dtype=F32)}, ValueError,
     "topk must be 1 .. 16, got 17"),
    ({"idx": t(13, 0, dtype=I32), "w": t(13, 0, dtype=F32)}, ValueError, "topk must be 1 .. 16"),
    ({"w": t(13, 2, dtype=F32)}, ValueError,
     r"topk_weight must have topk_idx's shape \(13, 3\), got \(13, 2\)"),
    ({"w": t(13, 3)}, TypeError, "topk_weight must have dtype float32; got bfloat16"),
    ({"x": t(13, 32, dtype=torch.int8)}, TypeError, "x must have dtype bfloat16, float16, float32"),
    ({"x": t(13, 32, dtype=F32)}, TypeError, "w_up and x must have the same dtype"),
    ({"w_up": t(3, 48, 32)}, ValueError,
     r"w_up must stack this rank's num_experts / ranks = 8 / 4 = 2 experts, got shape \(3, 48"),
    ({"w_up": t(2, 48)}, ValueError, "w_up must have 3 dimensions"),
    ({"e": 6, "w_up": t(1, 48, 32)}, ValueError,
     r"num_experts \(6\) must be a positive multiple of the group size 4"),
    ({"e": 0}, ValueError, r"num_experts \(0\) must be a positive multiple"),
    ({"w_up": t(2, 48, 33)}, ValueError,
     r"w_up \(E/R, I, H\) must have x's hidden size H = 32, got shape \(2, 48, 33\)"),
    ({"w_up": t(2, 48, 32), "layout": 0}, ValueError,
     r"w_up \(E/R, H, I\) must have x's hidden size H = 32"),
    ({"layout": 2}, ValueError, "w_layout must be 0 .* or 1 .*, got 2"),
    ({"mt": 12}, ValueError, r"this rank's 13 tokens must be at most max_tokens_per_rank \(12\)"),
    ({"mt": 0, "x": t(0, 32), "idx": t(0, 3, dtype=I32), "w": t(0, 3, dtype=F32)}, ValueError,
     "max_tokens_per_rank must be >= 1"),
    ({"mr": 0}, ValueError, "max_recv must be >= 1, got 0"),
    ({"w_up": t(2, 0, 32)}, ValueError, r"empty expert GEMM \(H, I\) = \(32, 0\)"),
])
def test_dispatch_rules(fake_world, kw, exc, text):
    with pytest.raises(exc, match=r"mkernel.moe_dispatch_gemm: " + text):
        dispatch(fake_world, **kw)
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    with pytest.raises(exc, match=text):  # the fake impl checks alike
        dispatch(fake_world, **{"x": t(13, 32).to("meta"), **meta}) if "x" not in kw else \
            dispatch(fake_world, **meta)


@pytest.mark.parametrize("kw, exc, text", [
    ({"w_down": t(2, 32, 47)}, ValueError,
     r"w_down \(E/R, H, I\) must have h's width I = 48, got shape \(2, 32, 47\)"),
    ({"w_down": t(2, 32, 48), "wl": 0}, ValueError, r"w_down \(E/R, I, H\) must have h's width"),
    ({"w_down": t(2, 32, 48, dtype=F32)}, TypeError, "w_down and h must have the same dtype"),
    ({"w_down": t(0, 32, 48)}, ValueError, "w_down holds no expert"),
    ({"h": t(40, 48, dtype=torch.int32)}, TypeError, "h must have dtype"),
    ({"layout": t(64, dtype=torch.uint8)}, ValueError,
     "layout has 64 bytes but this geometry needs"),
    ({"layout": t(1 << 20, dtype=I32)}, TypeError, "layout must have dtype uint8"),
    ({"k": 0}, ValueError, "topk must be 1 .. 16, got 0"),
    ({"n": 17}, ValueError, r"this rank's 17 tokens must be at most max_tokens_per_rank \(16\)"),
    ({"wl": 3}, ValueError, "w_layout must be 0"),
])
def test_combine_rules(fake_world, kw, exc, text):
    with pytest.raises(exc, match=r"mkernel.moe_gemm_combine: " + text):
        combine(fake_world, **kw)


def test_non_contiguous_refused(fake_world):
    with pytest.raises(ValueError, match="moe_dispatch_gemm: x must be contiguous"):
        dispatch(fake_world, x=t(32, 13).t())
    with pytest.raises(ValueError, match="moe_gemm_combine: h must be contiguous"):
        combine(fake_world, h=t(48, 40).t())


def test_wrapper_rules(fake_world):
    g = fake_world
    with pytest.raises(ValueError, match="w_layout must be 'nk' or 'kn', got 'xy'"):
        mkernel.moe_dispatch_gemm(t(4, 32), t(4, 2, dtype=torch.int64), t(4, 2), t(2, 48, 32),
                                  g, w_layout="xy")
    with pytest.raises(TypeError, match="w_up must be a torch.Tensor, got list"):
        mkernel.moe_dispatch_gemm(t(4, 32), t(4, 2, dtype=torch.int64), t(4, 2), [1], g)
    # int64 ids and bf16 weights are converted; the defaults: E = 2 x 4, max_recv worst case
    d = mkernel.moe_dispatch_gemm(t(5, 32).to("meta"), t(5, 2, dtype=torch.int64).to("meta"),
                                  t(5, 2).to("meta"), t(2, 48, 32).to("meta"), g)
    assert tuple(d.out.shape) == (4 * 5 * 2, 48) and tuple(d.recv_offsets.shape) == (3,)
    assert d.recv_offsets.dtype == torch.int32
    assert mkernel.worst_case_recv(4, 5, 8, 2) == 40


def test_layout_bound_covers_the_fallback_and_grows():
    for e, r, k, mt, mr in [(8, 4, 3, 16, 40), (256, 64, 8, 4096, 1 << 18), (2, 2, 1, 1, 1)]:
        n = _moe.layout_bytes(e, r, k, mt, mr)
        assert n % 256 == 0 and n >= 4 * _moe.fb_regions(e // r, r, k, mt, mr)["end"]
        assert _moe.layout_bytes(e, r, k, mt + 1, mr) >= n
        assert _moe.layout_bytes(e, r, k, mt, mr + 64) >= n


def test_layer_rules(fake_world):
    with pytest.raises(ValueError, match=r"num_experts \(6\) must be a multiple of the "
                                         r"tensor-parallel size 4"):
        mkernel.nn.MoE(16, 8, 6, 2, group=fake_world)
    with pytest.raises(ValueError, match="topk must be 1 .. 16, got 0"):
        mkernel.nn.MoE(16, 8, 8, 0, group=fake_world)
    layer = mkernel.nn.MoE(16, 8, 8, 2, group=fake_world)
    assert tuple(layer.w_up.shape) == (2, 16, 16) and tuple(layer.w_down.shape) == (2, 16, 8)
    with pytest.raises(ValueError, match="no topk_idx given and no router module"):
        layer(t(3, 16))
    with pytest.raises(ValueError, match="topk_idx has 3 slots per token, the layer's topk is 2"):
        layer(t(3, 16), t(3, 3, dtype=I32), t(3, 3, dtype=F32))
    with pytest.raises(ValueError, match=r"want full_w_up \(8, 16, 16\) and full_w_down "
                                         r"\(8, 16, 8\)"):
        layer.shard(t(8, 8, 16), t(8, 16, 8))
    fused = mkernel.nn.MoE.fuse_gate_up(torch.ones(8, 8, 16), torch.zeros(8, 8, 16))
    layer.shard(fused, t(8, 16, 8))  # rank 1 of 4: experts 2, 3; gate rows first
    assert layer.w_up[:, :8].eq(1).all() and layer.w_up[:, 8:].eq(0).all()


def test_fallback_counted_and_strict(gloo_world, monkeypatch, caplog):
    # One gloo rank: every pair stays here; the fallback counts both ops and says why.
    g = torch.Generator().manual_seed(3)
    x, w_up, w_down = torch.randn(7, 8, generator=g), torch.randn(4, 6, 8, generator=g), \
        torch.randn(4, 8, 6, generator=g)
    idx = torch.tensor([[0, 3], [1, -1], [2, 2], [3, 0], [-1, -1], [1, 2], [0, 1]])
    w = torch.rand(7, 2, generator=g)
    with caplog.at_level("INFO", logger="mkernel"):
        d = mkernel.moe_dispatch_gemm(x, idx, w, w_up)
        y = mkernel.moe_gemm_combine(d.out, w_down, d.layout, 7, 2)
    want = torch.zeros(7, 8, dtype=torch.float64)
    for i in range(7):
        for j in range(2):
            e = int(idx[i, j])
            if e >= 0:
                want[i] += w[i, j].double() * (x[i].double() @ w_up[e].double().t()
                                               @ w_down[e].double().t())
    assert torch.allclose(y.double(), want, atol=1e-4)
    assert d.recv_offsets.tolist() == [0, 3, 6, 9, 11]
    st = mkernel.stats()
    for op in ("moe_dispatch_gemm", "moe_gemm_combine"):
        assert st[op] == {"mkernel": 0, "torch": 1, "reason": "group backend 'gloo', not NCCL"}
    assert "moe_dispatch_gemm: torch fallback: group backend 'gloo'" in caplog.text
    monkeypatch.setenv("MKERNEL_STRICT", "moe_gemm_combine")
    with pytest.raises(mkernel.FallbackRefused, match="moe_gemm_combine: torch fallback refused"):
        mkernel.moe_gemm_combine(d.out, w_down, d.layout, 7, 2)
    monkeypatch.setenv("MKERNEL_STRICT", "1")
    with pytest.raises(mkernel.FallbackRefused, match="moe_dispatch_gemm"):
        mkernel.moe_dispatch_gemm(x, idx, w, w_up)
    monkeypatch.delenv("MKERNEL_STRICT")
    with pytest.raises(ValueError, match="the dispatch that filled layout had 7 tokens, "
                                         "num_tokens is 6"):
        mkernel.moe_gemm_combine(d.out, w_down, d.layout, 6, 2, max_tokens_per_rank=7)
    with pytest.raises(ValueError, match="layout was not filled by the torch path"):
        mkernel.moe_gemm_combine(d.out, w_down, torch.zeros_like(d.layout), 7, 2)
