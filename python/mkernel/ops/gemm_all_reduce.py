# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.gemm_all_reduce: C = sum over the group's ranks of A_r @ B_r
(mkGemmAllReduce; fallback torch.matmul + all_reduce)."""
import torch
import torch.distributed as dist

from . import _base as B

NAME = "gemm_all_reduce"
SYMBOL = "mkGemmAllReduce"


@torch.library.custom_op(
    "mkernel::gemm_all_reduce", mutates_args=(), tags=B.TAGS,
    schema="(Tensor a, Tensor b, str group_name, int b_layout) -> Tensor")
def gemm_all_reduce_op(a: torch.Tensor, b: torch.Tensor, group_name: str,
                       b_layout: int) -> torch.Tensor:
    m, n, k = B.check_gemm(NAME, a, b, b_layout)
    group = B.group_of(NAME, group_name)
    B.check_device(NAME, [("a", a), ("b", b)])
    B.check_across_ranks(NAME, group, "(M, N, K, dtype, b_layout)",
                         (m, n, k, B.nccl_type(a.dtype), b_layout))
    fn, comm = B.choose(NAME, SYMBOL, B.GEMM_ARGTYPES, group)
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if fn is not None:
        B.call(NAME, SYMBOL, fn, a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k,
               B.nccl_type(a.dtype), b_layout, comm.handle, B.stream())
        return c
    torch.matmul(a, b if b_layout == B.LAYOUT_KN else b.t(), out=c)
    dist.all_reduce(c, group=group)
    return c


@gemm_all_reduce_op.register_fake
def _(a, b, group_name, b_layout):
    m, n, _k = B.gemm_dims(NAME, a, b, b_layout)
    return a.new_empty((m, n))


def _setup(ctx, inputs, output):
    a, b, _group, layout = inputs
    ctx.save_for_backward(a, b)
    ctx.layout = layout


def _backward(ctx, grad):
    # The all-reduce's gradient is the identity (grad is the same on every rank): each rank's
    # A_r and B_r get the plain GEMM gradients, no communication.
    a, b = ctx.saved_tensors
    if ctx.layout == B.LAYOUT_KN:
        return grad @ b.t(), a.t() @ grad, None, None
    return grad @ b, grad.t() @ a, None, None


gemm_all_reduce_op.register_autograd(_backward, setup_context=_setup)


def gemm_all_reduce(a, w, group=None, *, w_layout="nk"):
    """C = sum over the ranks of `group` of a @ w^T (w_layout "nk", an nn.Linear weight of
    shape (N, K)) or a @ w (w_layout "kn", (K, N)); every rank gets the whole sum.

    a: (..., K) on the current CUDA device, contiguous, bf16 (fused) or fp16/fp32 (libmkernel's
    unfused path); leading dimensions are flattened. Collective: every rank calls it with the
    same shapes. Runs torch.ops.mkernel.gemm_all_reduce (CUDA-graph capturable after the first
    call of a shape; torch.compile traces it). Returns (..., N)."""
    from ..comm import group_name

    B.check_contiguous(NAME, "a", a)  # reshape would copy a strided input silently
    lead = a.shape[:-1]
    out = torch.ops.mkernel.gemm_all_reduce(a.reshape(-1, a.shape[-1]), w, group_name(group),
                                            B.LAYOUTS[w_layout])
    return out.view(*lead, out.shape[-1])
