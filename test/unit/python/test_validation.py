# SPDX-License-Identifier: Apache-2.0
"""Bad input gets an exception naming the argument and the rule, before anything runs."""
import pytest
import torch

import mkernel
from mkernel.ops import _base

BF = torch.bfloat16


def t(*shape, dtype=BF):
    return torch.zeros(shape, dtype=dtype)


def test_wrong_dtype_named(fake_world):
    g = fake_world.group_name
    with pytest.raises(TypeError, match=r"gemm_all_reduce: a must have dtype bfloat16, float16, "
                                        r"float32; got float64"):
        torch.ops.mkernel.gemm_all_reduce(t(8, 4, dtype=torch.float64), t(4, 4), g, 0)
    with pytest.raises(TypeError, match=r"b and a must have the same dtype, got float16 and "
                                        r"bfloat16"):
        torch.ops.mkernel.gemm_reduce_scatter(t(8, 4), t(4, 4, dtype=torch.float16), g, 0)
    with pytest.raises(TypeError, match=r"offsets must have dtype int32; got int64"):
        torch.ops.mkernel.grouped_gemm(t(8, 4), t(2, 4, 4), torch.zeros(3, dtype=torch.int64), 0)
    with pytest.raises(TypeError, match=r"attention: q must have dtype .*; got int32"):
        torch.ops.mkernel.attention(t(1, 4, 2, 64, dtype=torch.int32), t(1, 4, 2, 64),
                                    t(1, 4, 2, 64), False)


def test_non_contiguous_named(fake_world):
    g = fake_world.group_name
    with pytest.raises(ValueError, match=r"gemm_all_reduce: b must be contiguous \(row-major\), "
                                         r"got strides \(1, 4\)"):
        torch.ops.mkernel.gemm_all_reduce(t(8, 4), t(4, 4).t(), g, 0)
    with pytest.raises(ValueError, match=r"all_gather_gemm: a_shard must be contiguous"):
        torch.ops.mkernel.all_gather_gemm(t(4, 8)[:, :4], t(4, 4), g, 0, False)
    with pytest.raises(ValueError, match=r"ring_attention: k must be contiguous"):
        torch.ops.mkernel.ring_attention(t(1, 4, 2, 64), t(1, 2, 4, 64).transpose(1, 2),
                                         t(1, 4, 2, 64), g, False)


def test_shapes_named(fake_world):
    g = fake_world.group_name
    with pytest.raises(ValueError, match=r"b \(K x N\) must have as many rows as a has columns: "
                                         r"a \(8, 4\), b \(5, 4\)"):
        torch.ops.mkernel.gemm_all_reduce(t(8, 4), t(5, 4), g, 0)
    with pytest.raises(ValueError, match=r"a must have 2 dimensions, got shape \(8,\)"):
        torch.ops.mkernel.gemm_all_reduce(t(8), t(4, 4), g, 0)
    with pytest.raises(ValueError, match=r"b_layout must be 0 .* or 1 .*, got 2"):
        torch.ops.mkernel.gemm_all_reduce(t(8, 4), t(4, 4), g, 2)
    with pytest.raises(ValueError, match=r"empty GEMM \(M, N, K\) = \(0, 4, 4\)"):
        torch.ops.mkernel.gemm_all_reduce(t(0, 4), t(4, 4), g, 0)
    with pytest.raises(ValueError, match=r"a's rows \(M = 6\) must be a multiple of the group "
                                         r"size 4"):
        torch.ops.mkernel.gemm_reduce_scatter(t(6, 4).to("meta"), t(4, 4).to("meta"), g, 0)
    with pytest.raises(ValueError, match=r"x's first dimension must be a multiple of the group "
                                         r"size 4"):
        torch.ops.mkernel.all_to_all(t(6, 2).to("meta"), g)
    with pytest.raises(ValueError, match=r"q's heads \(6\) must be a multiple of k's heads \(4\)"):
        torch.ops.mkernel.attention(t(1, 4, 6, 64), t(1, 4, 4, 64), t(1, 4, 4, 64), False)
    with pytest.raises(ValueError, match=r"v must have k's shape"):
        torch.ops.mkernel.attention(t(1, 4, 4, 64), t(1, 4, 4, 64), t(1, 5, 4, 64), False)
    with pytest.raises(ValueError, match=r"offsets must have num_experts \+ 1 = 3 entries, got 2"):
        torch.ops.mkernel.grouped_gemm(t(8, 4), t(2, 4, 4), torch.zeros(2, dtype=torch.int32), 0)


def test_cpu_tensor_named():
    with pytest.raises(ValueError, match=r"mkernel.gemm_all_reduce: b must be a CUDA tensor .*"
                                         r"got device cpu"):
        _base.check_device("gemm_all_reduce", [("a", None), ("b", t(2, 2))])


def test_wrong_argument_types(fake_world):
    with pytest.raises(TypeError, match=r"grouped_gemm: a must be a torch.Tensor, got list"):
        mkernel.ops.modules["grouped_gemm"]._dims([[1.0]], t(1, 1, 1),
                                                  torch.zeros(2, dtype=torch.int32), 0)


def test_gloo_group_refused(gloo_world):
    name = gloo_world.group_name
    with pytest.raises(ValueError, match=r"group '.*': must be a process group with the NCCL "
                                         r"backend, got 'gloo'"):
        torch.ops.mkernel.gemm_all_reduce(t(8, 4), t(4, 4), name, 0)
    with pytest.raises(ValueError, match=r"must be a process group with the NCCL backend, got "
                                         r"'gloo'"):
        mkernel.Comm(gloo_world)
    with pytest.raises(ValueError, match="NCCL backend"):
        torch.ops.mkernel.all_to_all(t(4, 2), name)


def test_unknown_group_name(gloo_world):
    with pytest.raises(ValueError, match=r"group_name 'no-such-group' names no process group"):
        torch.ops.mkernel.gemm_all_reduce(t(8, 4), t(4, 4), "no-such-group", 0)


def test_no_distributed():
    import torch.distributed as dist

    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="torch.distributed is not initialised"):
        mkernel.gemm_all_reduce(t(8, 4), t(4, 4))


def test_layer_sizes_checked(fake_world):
    with pytest.raises(ValueError, match=r"out_features \(10\) must be a multiple of the "
                                         r"tensor-parallel size 4"):
        mkernel.nn.ColumnParallelLinear(8, 10, group=fake_world)
    with pytest.raises(ValueError, match=r"in_features \(6\) must be a multiple"):
        mkernel.nn.RowParallelLinear(6, 8, group=fake_world)
    col = mkernel.nn.ColumnParallelLinear(8, 12, group=fake_world)
    row = mkernel.nn.RowParallelLinear(12, 8, group=fake_world)
    assert tuple(col.weight.shape) == (3, 8) and tuple(col.bias.shape) == (3,)
    assert tuple(row.weight.shape) == (8, 3) and tuple(row.bias.shape) == (8,)


def test_wrappers_refuse_strided_input_instead_of_copying(fake_world):
    # reshape would copy a transposed input silently: the wrappers refuse it like the ops
    with pytest.raises(ValueError, match=r"gemm_all_reduce: a must be contiguous"):
        mkernel.gemm_all_reduce(t(4, 8).t(), t(4, 4), fake_world)
    with pytest.raises(ValueError, match=r"gemm_reduce_scatter: a must be contiguous"):
        mkernel.gemm_reduce_scatter(t(4, 8).t(), t(4, 4), fake_world)
    with pytest.raises(ValueError, match=r"all_gather_gemm: a_shard must be contiguous"):
        mkernel.all_gather_gemm(t(4, 8).t(), t(4, 4), fake_world)
