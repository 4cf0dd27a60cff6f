# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.moe_dispatch_gemm: every (token, expert) pair to the rank owning the expert,
times that expert's up projection there (mkMoeDispatchGemm; fallback: counts all-gathered,
all_to_all_single, one matmul per expert)."""
from typing import NamedTuple

import torch

from . import _base as B
from . import _moe as M

NAME = M.DISPATCH
EXPORTS = ("MoeDispatch", "worst_case_recv")


class MoeDispatch(NamedTuple):
    """What moe_dispatch_gemm returns: `out` (max_recv x I) the received rows times their
    expert's w_up, grouped by local expert; `layout` (opaque uint8) for moe_gemm_combine;
    `recv_offsets` (int32 E/R + 1, a view of layout's head): local expert e's rows of out are
    [recv_offsets[e], recv_offsets[e + 1]); rows from recv_offsets[E/R] on are unused."""
    out: torch.Tensor
    layout: torch.Tensor
    recv_offsets: torch.Tensor


def _outputs(x, inter, num_experts, world, topk, max_tokens, max_recv):
    out = x.new_empty((max_recv, inter))
    nbytes = M.layout_bytes(num_experts, world, topk, max_tokens, max_recv)
    return out, torch.zeros(nbytes, dtype=torch.uint8, device=x.device)


@torch.library.custom_op(
    "mkernel::moe_dispatch_gemm", mutates_args=(), tags=B.TAGS,
    schema="(Tensor x, Tensor topk_idx, Tensor topk_weight, Tensor w_up, int num_experts, "
           "int max_tokens_per_rank, int max_recv, int w_layout, str group_name) "
           "-> (Tensor, Tensor)")
def moe_dispatch_gemm_op(x: torch.Tensor, topk_idx: torch.Tensor, topk_weight: torch.Tensor,
                         w_up: torch.Tensor, num_experts: int, max_tokens_per_rank: int,
                         max_recv: int, w_layout: int, group_name: str):
    pg, backend = M.group_of(NAME, group_name)
    world = pg.size()
    t, h, inter, k, _eloc = M.dispatch_dims(x, topk_idx, topk_weight, w_up, num_experts,
                                            max_tokens_per_rank, max_recv, w_layout, world)
    for name, v in (("x", x), ("topk_idx", topk_idx), ("topk_weight", topk_weight),
                    ("w_up", w_up)):
        B.check_contiguous(NAME, name, v)
    tensors = [("x", x), ("topk_idx", topk_idx), ("topk_weight", topk_weight), ("w_up", w_up)]
    if x.device.type == "cuda" and "nccl" not in backend:
        raise ValueError(f"mkernel.{NAME}: CUDA tensors need an NCCL group; group "
                         f"{group_name!r} is '{backend}'")
    fns, comm = M.path(NAME, pg, backend, tensors, x.dtype)
    out, layout = _outputs(x, inter, num_experts, world, k, max_tokens_per_rank, max_recv)
    if fns is None:
        out.zero_()
        M.fallback_dispatch(x, topk_idx, topk_weight, w_up, num_experts, max_tokens_per_rank,
                            max_recv, w_layout, pg, out, layout)
        return out, layout
    cfg = M.config(num_experts, k, h, inter, max_tokens_per_rank, max_recv, w_layout)
    B.check_across_ranks(NAME, pg, "num_experts, topk, H, I, max_tokens_per_rank, max_recv "
                         "and w_layout", (num_experts, k, h, inter, max_tokens_per_rank,
                                          max_recv, w_layout))
    M.check_layout_size(NAME, fns, cfg, comm, layout.shape[0])
    B.call(NAME, M.SYM_DISPATCH, fns[M.SYM_DISPATCH], B.ptr(x) if t else None,
           B.ptr(topk_idx) if t else None, B.ptr(topk_weight) if t else None, w_up.data_ptr(),
           out.data_ptr(), layout.data_ptr(), t, M.ctypes.addressof(cfg), comm.handle,
           B.stream())
    return out, layout


@moe_dispatch_gemm_op.register_fake
def _(x, topk_idx, topk_weight, w_up, num_experts, max_tokens_per_rank, max_recv, w_layout,
      group_name):
    world = B.world_size(group_name)
    _t, _h, inter, k, _e = M.dispatch_dims(x, topk_idx, topk_weight, w_up, num_experts,
                                           max_tokens_per_rank, max_recv, w_layout, world)
    nbytes = M.layout_bytes(num_experts, world, k, max_tokens_per_rank, max_recv)
    return x.new_empty((max_recv, inter)), x.new_empty((nbytes,), dtype=torch.uint8)


def worst_case_recv(world, max_tokens_per_rank, topk, experts_per_rank):
    """The max_recv no routing can exceed: R x max_tokens_per_rank x min(topk, E / R)."""
    return world * max_tokens_per_rank * min(topk, experts_per_rank)


def moe_dispatch_gemm(x, topk_idx, topk_weight, w_up, group=None, *, num_experts=None,
                      max_tokens_per_rank=None, max_recv=None, w_layout="nk"):
    """MoE dispatch + up projection over the R ranks of `group` (collective); rank r owns
    experts [r E/R, (r+1) E/R), and w_up stacks its E/R experts: (E/R, I, H) for w_layout "nk"
    (nn.Linear weights), (E/R, H, I) for "kn".

    x (T x H, contiguous), topk_idx (T x topk global expert ids, -1 = no expert in that slot;
    int32, or int64 as torch.topk gives, converted), topk_weight (T x topk, float32; other
    floats converted). Every (token, slot) pair goes to the expert's rank, where its row of
    `out` is x[token] @ w_up[expert]: rows grouped by local expert, inside an expert by source
    rank, token, slot. num_experts defaults to w_up.shape[0] x R; max_tokens_per_rank (the
    most tokens any rank passes, the same on every rank) to T; max_recv (rows of out) to the
    worst case R x max_tokens_per_rank x min(topk, E/R), with which libmkernel never
    synchronises the host (smaller: counts are read first, more pairs than max_recv on any
    rank raise on every rank, nothing moves).

    bf16 CUDA tensors on an NCCL group run libmkernel; anything else (another dtype, CPU
    tensors on a gloo group, a library without the MoE ops) the torch fallback, said once at
    INFO. Returns MoeDispatch(out, layout, recv_offsets); pass out's activation (h) and layout
    to moe_gemm_combine with the same topk and max_tokens_per_rank."""
    from ..comm import resolve_group

    pg = resolve_group(group)
    world = pg.size()
    if isinstance(topk_idx, torch.Tensor) and topk_idx.dtype == torch.int64:
        topk_idx = topk_idx.to(torch.int32)
    if isinstance(topk_weight, torch.Tensor) and topk_weight.dtype in (torch.bfloat16,
                                                                       torch.float16,
                                                                       torch.float64):
        topk_weight = topk_weight.float()
    if not isinstance(w_up, torch.Tensor) or w_up.dim() != 3:
        B.check_tensor(NAME, "w_up", w_up, dim=3)
    if w_layout not in M.W_LAYOUTS:
        raise ValueError(f"mkernel.{NAME}: w_layout must be 'nk' or 'kn', got {w_layout!r}")
    e = w_up.shape[0] * world if num_experts is None else num_experts
    t = x.shape[0] if isinstance(x, torch.Tensor) and x.dim() == 2 else 0
    mt = t if max_tokens_per_rank is None else max_tokens_per_rank
    k = topk_idx.shape[-1] if isinstance(topk_idx, torch.Tensor) and topk_idx.dim() == 2 else 1
    mr = worst_case_recv(world, max(mt, 1), k, max(e // world, 1)) if max_recv is None \
        else max_recv
    out, layout = torch.ops.mkernel.moe_dispatch_gemm(x, topk_idx, topk_weight, w_up, e, mt, mr,
                                                      M.W_LAYOUTS[w_layout], pg.group_name)
    return MoeDispatch(out, layout, layout[:4 * (e // world + 1)].view(torch.int32))

