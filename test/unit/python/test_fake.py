# SPDX-License-Identifier: Apache-2.0
"""Shape propagation of every op without a GPU: fake impls on meta tensors, fake CUDA tensors
under FakeTensorMode, and torch.compile(fullgraph=True) of the Python wrappers (a graph break
or a missing fake impl fails), on a 4-rank fake world (this process rank 1)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import mkernel

BF = torch.bfloat16


def cases(g):
    """(op, args, expected output shapes) for every op, world of 4."""
    name = g.group_name
    m = lambda *s, dtype=BF: torch.empty(s, dtype=dtype, device="meta")  # noqa: E731
    return [
        ("gemm_all_reduce", (m(64, 32), m(48, 32), name, 1), [(64, 48)]),
        ("gemm_all_reduce", (m(64, 32), m(32, 48), name, 0), [(64, 48)]),
        ("gemm_reduce_scatter", (m(64, 32), m(48, 32), name, 1), [(16, 48)]),
        ("all_gather_gemm", (m(16, 32), m(48, 32), name, 1, True), [(64, 48), (64, 32)]),
        ("all_gather_gemm", (m(16, 32), m(32, 48), name, 0, False), [(64, 48), (0,)]),
        ("all_to_all", (m(8, 3, 5), name), [(8, 3, 5)]),
        ("attention", (m(2, 100, 8, 64), m(2, 120, 2, 64), m(2, 120, 2, 64), True),
         [(2, 100, 8, 64), (2, 8, 100)]),
        ("ring_attention", (m(2, 64, 8, 128), m(2, 64, 4, 128), m(2, 64, 4, 128), name, True),
         [(2, 64, 8, 128), (2, 8, 64)]),
        ("grouped_gemm", (m(50, 32), m(4, 48, 32), m(5, dtype=torch.int32), 1), [(50, 48)]),
        # E 8 over 4 ranks, top-3, 13 tokens of at most 16, 40 rows; nk and kn weights
        ("moe_dispatch_gemm", (m(13, 32), m(13, 3, dtype=torch.int32),
                               m(13, 3, dtype=torch.float32), m(2, 48, 32), 8, 16, 40, 1, name),
         [(40, 48), (moe_layout(8, 4, 3, 16, 40),)]),
        ("moe_dispatch_gemm", (m(0, 32), m(0, 1, dtype=torch.int32),
                               m(0, 1, dtype=torch.float32), m(2, 32, 48), 8, 5, 7, 0, name),
         [(7, 48), (moe_layout(8, 4, 1, 5, 7),)]),
        ("moe_gemm_combine", (m(40, 48), m(2, 32, 48), m(moe_layout(8, 4, 3, 16, 40),
                                                         dtype=torch.uint8), 13, 3, 16, 1, name),
         [(13, 32)]),
    ]


def moe_layout(*a):
    from mkernel.ops import _moe

    return _moe.layout_bytes(*a)


def _shapes(out):
    out = out if isinstance(out, tuple) else (out,)
    return [tuple(t.shape) for t in out]


def test_every_op_has_a_case(fake_world):
    covered = {c[0] for c in cases(fake_world)}
    assert covered == set(mkernel.ops.OPS)


def test_meta_shapes(fake_world):
    for op, args, want in cases(fake_world):
        got = _shapes(getattr(torch.ops.mkernel, op)(*args))
        assert got == want, (op, got, want)


def test_fake_cuda_tensors(fake_world):
    # Fake CUDA tensors on a machine with no GPU: what torch.compile hands a fake impl.
    for op, args, want in cases(fake_world):
        with FakeTensorMode():
            fargs = [torch.empty(a.shape, dtype=a.dtype, device="cuda")
                     if isinstance(a, torch.Tensor) else a for a in args]
            out = getattr(torch.ops.mkernel, op)(*fargs)
            outs = out if isinstance(out, tuple) else (out,)
            assert all(t.device.type == "cuda" for t in outs), op
            assert _shapes(out) == want, op
        if op in ("attention", "ring_attention"):
            assert outs[1].dtype == torch.float32  # lse


def test_fake_impls_check_shapes(fake_world):
    name = fake_world.group_name
    m = lambda *s: torch.empty(s, dtype=BF, device="meta")  # noqa: E731
    with pytest.raises(ValueError, match="multiple of the group size 4"):
        torch.ops.mkernel.gemm_reduce_scatter(m(66, 32), m(48, 32), name, 1)
    with pytest.raises(ValueError, match="b .N x K, b_layout=1. must have as many columns"):
        torch.ops.mkernel.gemm_all_reduce(m(64, 32), m(48, 33), name, 1)
    with pytest.raises(ValueError, match="even seq_local"):
        torch.ops.mkernel.ring_attention(m(1, 7, 2, 64), m(1, 7, 2, 64), m(1, 7, 2, 64), name,
                                         True)


class _Graphs:
    """A torch.compile backend that keeps each graph and runs nothing: the fake shapes in
    node.meta are what compilation propagated."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        outs = gm.graph.output_node().args[0]

        def run(*args):
            return tuple(torch.zeros(n.meta["example_value"].shape
                                     if "example_value" in n.meta else n.meta["val"].shape)
                         for n in outs)

        return run

    def ops(self):
        return [str(n.target) for gm in self.graphs for n in gm.graph.nodes
                if str(n.target).startswith("mkernel.")]


def test_compile_fullgraph_tp_mlp(fake_world):
    # Column-parallel (sequence-parallel input) -> row-parallel (reduce-scatter) through the
    # wrappers, traced whole: tokens [S/R, B, H] in, [S/R, B, H] out.
    g = fake_world
    h, f = 32, 64

    def mlp(x, w1, w2):
        y = mkernel.all_gather_gemm(x, w1, g)          # [S, B, F/R]
        y = torch.nn.functional.silu(y)
        return mkernel.gemm_reduce_scatter(y, w2, g)   # [S/R, B, H]

    be = _Graphs()
    out = torch.compile(mlp, fullgraph=True, backend=be)(
        torch.randn(4, 2, h), torch.randn(f // 4, h), torch.randn(h, f // 4))
    assert be.ops() == ["mkernel.all_gather_gemm", "mkernel.gemm_reduce_scatter"]
    assert tuple(out.shape) == (4, 2, h)


def test_compile_fullgraph_every_wrapper(fake_world):
    g = fake_world
    be = _Graphs()

    def everything(a, w, x, q, kv, ex, off, idx, tw):
        d = mkernel.moe_dispatch_gemm(a, idx, tw, ex, g, num_experts=12)
        y = mkernel.moe_gemm_combine(torch.nn.functional.silu(d.out), ex.transpose(1, 2)
                                     .contiguous(), d.layout, a.shape[0], idx.shape[1], g)
        r = [d.out, d.recv_offsets, y] + [mkernel.gemm_all_reduce(a, w, g), mkernel.gemm_reduce_scatter(a, w, g),
             mkernel.all_gather_gemm(a, w, g), mkernel.all_to_all(x, g)]
        r += list(mkernel.attention(q, kv, kv, causal=True))
        r += list(mkernel.ring_attention(q, kv, kv, g, causal=True))
        r.append(mkernel.grouped_gemm(a, ex, off))
        return r

    out = torch.compile(everything, fullgraph=True, backend=be)(
        torch.randn(8, 16), torch.randn(24, 16), torch.randn(4, 3), torch.randn(1, 6, 4, 64),
        torch.randn(1, 6, 2, 64), torch.randn(3, 24, 16), torch.zeros(4, dtype=torch.int32),
        torch.zeros(8, 2, dtype=torch.int64), torch.rand(8, 2))
    assert sorted(set(be.ops())) == sorted(f"mkernel.{n}" for n in mkernel.ops.OPS)
    # moe: 12 experts over 4 ranks (3 each), top-2, 8 tokens: 4 x 8 x min(2, 3) = 64 rows
    assert [tuple(t.shape) for t in out] == [
        (64, 24), (4,), (8, 16), (8, 24), (2, 24), (32, 24), (4, 3), (1, 6, 4, 64), (1, 4, 6), (1, 6, 4, 64), (1, 4, 6),
        (8, 24)]


def test_make_fx_fake(fake_world):
    from torch.fx.experimental.proxy_tensor import make_fx

    g = fake_world
    gm = make_fx(lambda a, w: mkernel.gemm_all_reduce(a, w, g), tracing_mode="fake")(
        torch.randn(3, 5, 16, dtype=BF), torch.randn(24, 16, dtype=BF))
    node = [n for n in gm.graph.nodes if "mkernel" in str(n.target)][0]
    assert tuple(node.meta["val"].shape) == (15, 24)


@pytest.mark.parametrize("sp", [False, True])
def test_compile_fullgraph_layers(fake_world, monkeypatch, sp):
    # The layers' fused branch traced whole. On this CPU-only machine inputs are CPU tensors,
    # which the layers would send to torch: the path decision is pinned to the fused branch
    # (nothing runs; the backend only keeps the graph).
    monkeypatch.setattr(mkernel.nn._ParallelLinear, "_why_not_mkernel", lambda self, x: None)
    col = mkernel.nn.ColumnParallelLinear(32, 64, group=fake_world, sequence_parallel=sp)
    row = mkernel.nn.RowParallelLinear(64, 32, sequence_parallel=sp)  # default group
    be = _Graphs()
    out = torch.compile(lambda x: row(torch.relu(col(x))), fullgraph=True, backend=be)(
        torch.randn(8, 2, 32))
    if sp:
        assert be.ops() == ["mkernel.all_gather_gemm", "mkernel.gemm_reduce_scatter"]
        assert tuple(out.shape) == (8, 2, 32)  # [S/R, B, H] in and out, S/R = 8
    else:
        assert be.ops() == ["mkernel.gemm_all_reduce"]
        assert tuple(out.shape) == (8, 2, 32)


def test_layers_fall_back_on_cpu_when_compiled(fake_world):
    row = mkernel.nn.RowParallelLinear(64, 32, group=fake_world)
    be = _Graphs()
    torch.compile(lambda x: row(x), fullgraph=True, backend=be)(torch.randn(4, 16))
    nodes = [str(n.target) for gm in be.graphs for n in gm.graph.nodes]
    assert any("all_reduce" in t for t in nodes) and not be.ops()


def test_gemm_ops_gradients_have_the_inputs_shapes(fake_world):
    # The autograd formulas on meta tensors (a 4-rank fake world): gradients shaped like the
    # inputs, through the all-gather / reduce-scatter of the backward passes.
    g = fake_world.group_name
    for op, a_shape, b_shape, layout in [
            ("gemm_all_reduce", (64, 32), (48, 32), 1),
            ("gemm_all_reduce", (64, 32), (32, 48), 0),
            ("gemm_reduce_scatter", (64, 32), (48, 32), 1),
            ("gemm_reduce_scatter", (64, 32), (32, 48), 0)]:
        a = torch.empty(a_shape, device="meta", requires_grad=True)
        b = torch.empty(b_shape, device="meta", requires_grad=True)
        getattr(torch.ops.mkernel, op)(a, b, g, layout).sum().backward()
        assert a.grad.shape == a.shape and b.grad.shape == b.shape, op
    for layout, b_shape in ((1, (48, 32)), (0, (32, 48))):
        a = torch.empty((16, 32), device="meta", requires_grad=True)
        b = torch.empty(b_shape, device="meta", requires_grad=True)
        c, gathered = torch.ops.mkernel.all_gather_gemm(a, b, g, layout, True)
        assert gathered.shape == (64, 32)
        c.sum().backward()
        assert a.grad.shape == a.shape and b.grad.shape == b.shape


def test_compile_fullgraph_moe_layer(fake_world):
    # nn.MoE traced whole: dispatch, SwiGLU, combine; x [2, 5, H] in and out.
    layer = mkernel.nn.MoE(16, 8, 8, 2, group=fake_world, max_tokens_per_rank=12)
    be = _Graphs()
    out = torch.compile(lambda x, i, w: layer(x, i, w), fullgraph=True, backend=be)(
        torch.randn(2, 5, 16), torch.zeros(10, 2, dtype=torch.int32), torch.rand(10, 2))
    assert be.ops() == ["mkernel.moe_dispatch_gemm", "mkernel.moe_gemm_combine"]
    assert tuple(out.shape) == (2, 5, 16)
