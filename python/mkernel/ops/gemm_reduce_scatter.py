# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.gemm_reduce_scatter: this rank's M/R rows of sum over ranks of A_r @ B_r
(mkGemmReduceScatter; fallback torch.matmul + reduce_scatter_tensor)."""
import torch
import torch.distributed as dist

from . import _base as B

NAME = "gemm_reduce_scatter"
SYMBOL = "mkGemmReduceScatter"


def _dims(a, b, b_layout, world):
    m, n, k = B.gemm_dims(NAME, a, b, b_layout)
    if m % world:
        raise ValueError(f"mkernel.{NAME}: a's rows (M = {m}) must be a multiple of the group "
                         f"size {world} (each rank receives M / {world} rows)")
    return m, n, k


@torch.library.custom_op(
    "mkernel::gemm_reduce_scatter", mutates_args=(), tags=B.TAGS,
    schema="(Tensor a, Tensor b, str group_name, int b_layout) -> Tensor")
def gemm_reduce_scatter_op(a: torch.Tensor, b: torch.Tensor, group_name: str,
                           b_layout: int) -> torch.Tensor:
    B.check_gemm(NAME, a, b, b_layout)
    group = B.group_of(NAME, group_name)
    m, n, k = _dims(a, b, b_layout, group.size())
    B.check_device(NAME, [("a", a), ("b", b)])
    B.check_across_ranks(NAME, group, "(M, N, K, dtype, b_layout)",
                         (m, n, k, B.nccl_type(a.dtype), b_layout))
    c = torch.empty((m // group.size(), n), dtype=a.dtype, device=a.device)
    fn, comm = B.choose(NAME, SYMBOL, B.GEMM_ARGTYPES, group)
    if fn is not None:
        B.call(NAME, SYMBOL, fn, a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k,
               B.nccl_type(a.dtype), b_layout, comm.handle, B.stream())
        return c
    full = torch.matmul(a, b if b_layout == B.LAYOUT_KN else b.t())
    dist.reduce_scatter_tensor(c, full, group=group)
    return c


@gemm_reduce_scatter_op.register_fake
def _(a, b, group_name, b_layout):
    world = B.world_size(group_name)
    m, n, _k = _dims(a, b, b_layout, world)
    return a.new_empty((m // world, n))


def _setup(ctx, inputs, output):
    a, b, group, layout = inputs
    ctx.save_for_backward(a, b)
    ctx.group, ctx.layout = group, layout


def _backward(ctx, grad):
    # reduce-scatter's gradient is an all-gather of the row blocks.
    from torch.distributed import _functional_collectives as fc

    a, b = ctx.saved_tensors
    full = fc.all_gather_tensor(grad.contiguous(), 0, ctx.group)
    if ctx.layout == B.LAYOUT_KN:
        return full @ b.t(), a.t() @ full, None, None
    return full @ b, full.t() @ a, None, None


gemm_reduce_scatter_op.register_autograd(_backward, setup_context=_setup)


def gemm_reduce_scatter(a, w, group=None, *, w_layout="nk"):
    """Rows [r*M/R, (r+1)*M/R) of sum over the R ranks of `group` of a @ w^T (w_layout "nk")
    or a @ w ("kn"), for this rank r: a row-parallel linear layer whose output stays
    sequence-parallel.

    a: (M, K) (or (S, ..., K): the first dimension is split), M a multiple of R, contiguous on
    the current CUDA device, bf16 (fused) or fp16/fp32. Collective. Returns (M/R, ..., N)."""
    from ..comm import group_name

    B.check_contiguous(NAME, "a", a)  # reshape would copy a strided input silently
    lead = a.shape[:-1]
    out = torch.ops.mkernel.gemm_reduce_scatter(a.reshape(-1, a.shape[-1]), w, group_name(group),
                                                B.LAYOUTS[w_layout])
    if len(lead) <= 1:
        return out
    return out.view(-1, *lead[1:], out.shape[-1])
