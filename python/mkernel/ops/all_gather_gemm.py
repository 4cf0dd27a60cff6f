# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.all_gather_gemm: C = all_gather(A_shard) @ B (mkAllGatherGemm; fallback
all_gather_into_tensor + torch.matmul). Optionally returns the gathered A (kept by Megatron-style
layers for the backward pass)."""

import torch
import torch.distributed as dist

from . import _base as B

NAME = "all_gather_gemm"
SYMBOL = "mkAllGatherGemm"
ARGTYPES = [B.c_void_p] * 4 + [B.c_size_t] * 3 + [B.c_int, B.c_int, B.c_void_p, B.c_void_p]


@torch.library.custom_op(
    "mkernel::all_gather_gemm", mutates_args=(), tags=B.TAGS,
    schema=("(Tensor a_shard, Tensor b, str group_name, int b_layout,"
            " bool gather_out) -> (Tensor, Tensor)"))
def all_gather_gemm_op(a_shard: torch.Tensor, b: torch.Tensor, group_name: str, b_layout: int,
                       gather_out: bool) -> tuple[torch.Tensor, torch.Tensor]:
    ms, n, k = B.check_gemm(NAME, a_shard, b, b_layout, a_name="a_shard")
    group = B.group_of(NAME, group_name)
    B.check_device(NAME, [("a_shard", a_shard), ("b", b)])
    m = ms * group.size()
    B.check_across_ranks(NAME, group, "(M/R, N, K, dtype, b_layout)",
                         (ms, n, k, B.nccl_type(a_shard.dtype), b_layout))
    c = torch.empty((m, n), dtype=a_shard.dtype, device=a_shard.device)
    shape_g = (m, k) if gather_out else (0,)
    gathered = torch.empty(shape_g, dtype=a_shard.dtype, device=a_shard.device)
    fn, comm = B.choose(NAME, SYMBOL, ARGTYPES, group)
    if fn is not None:
        B.call(NAME, SYMBOL, fn, a_shard.data_ptr(), b.data_ptr(), c.data_ptr(),
               gathered.data_ptr() if gather_out else None, m, n, k,
               B.nccl_type(a_shard.dtype), b_layout, comm.handle, B.stream())
        return c, gathered
    full = gathered if gather_out else torch.empty((m, k), dtype=a_shard.dtype,
                                                   device=a_shard.device)
    dist.all_gather_into_tensor(full, a_shard, group=group)
    torch.matmul(full, b if b_layout == B.LAYOUT_KN else b.t(), out=c)
    return c, gathered


@all_gather_gemm_op.register_fake
def _(a_shard, b, group_name, b_layout, gather_out):
    ms, n, k = B.gemm_dims(NAME, a_shard, b, b_layout, a_name="a_shard")
    m = ms * B.world_size(group_name)
    return a_shard.new_empty((m, n)), a_shard.new_empty((m, k) if gather_out else (0,))


def _setup(ctx, inputs, output):
    _a, b, group, layout, gather_out = inputs
    if not gather_out:
        raise RuntimeError("mkernel.all_gather_gemm: backward needs the gathered A: call it "
                           "with gather_out=True when a_shard requires grad")
    ctx.save_for_backward(output[1], b)
    ctx.group, ctx.layout = group, layout


def _backward(ctx, grad, _grad_gathered):
    # all-gather's gradient is a reduce-scatter of the row blocks.
    from torch.distributed import _functional_collectives as fc

    gathered, b = ctx.saved_tensors
    if ctx.layout == B.LAYOUT_KN:
        da, db = grad @ b.t(), gathered.t() @ grad
    else:
        da, db = grad @ b, grad.t() @ gathered
    return fc.reduce_scatter_tensor(da.contiguous(), "sum", 0, ctx.group), db, None, None, None


all_gather_gemm_op.register_autograd(_backward, setup_context=_setup)


def all_gather_gemm(a_shard, w, group=None, *, w_layout="nk", return_gathered=False):
    """all_gather(a_shard) @ w^T (w_layout "nk") or @ w ("kn") over the ranks of `group`: a
    column-parallel linear layer fed by a sequence-parallel input.

    a_shard: (M/R, K) (or (S/R, ..., K): gathered along the first dimension), contiguous on the
    current CUDA device, bf16 (fused) or fp16/fp32; rank r's rows are rows r*M/R.. of the
    gathered A. Collective. Returns (M, ..., N), and the gathered A too with
    return_gathered=True (computed anyway when a_shard or w requires grad)."""
    from ..comm import group_name

    B.check_contiguous(NAME, "a_shard", a_shard)  # reshape would copy a strided input silently
    lead = a_shard.shape[:-1]
    need = return_gathered or (torch.is_grad_enabled()
                               and (a_shard.requires_grad or w.requires_grad))
    c, gathered = torch.ops.mkernel.all_gather_gemm(a_shard.reshape(-1, a_shard.shape[-1]), w,
                                                    group_name(group), B.LAYOUTS[w_layout], need)
    if len(lead) > 1:
        c = c.view(-1, *lead[1:], c.shape[-1])
    return (c, gathered) if return_gathered else c
