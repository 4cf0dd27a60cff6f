# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.moe_gemm_combine: the inverse of a moe_dispatch_gemm, each received row
times its expert's down projection, back to the token's rank, summed with the token's top-k
weights (mkMoeGemmCombine; fallback: one matmul per expert, all_to_all_single, index_add_)."""
import torch

from . import _base as B
from . import _moe as M

NAME = M.COMBINE


@torch.library.custom_op(
    "mkernel::moe_gemm_combine", mutates_args=(), tags=B.TAGS,
    schema="(Tensor h, Tensor w_down, Tensor layout, int num_tokens, int topk, "
           "int max_tokens_per_rank, int w_layout, str group_name) -> Tensor")
def moe_gemm_combine_op(h: torch.Tensor, w_down: torch.Tensor, layout: torch.Tensor,
                        num_tokens: int, topk: int, max_tokens_per_rank: int, w_layout: int,
                        group_name: str) -> torch.Tensor:
    pg, backend = M.group_of(NAME, group_name)
    world = pg.size()
    max_recv, inter, hidden, eloc = M.combine_dims(h, w_down, layout, num_tokens, topk,
                                                   max_tokens_per_rank, w_layout, world)
    for name, v in (("h", h), ("w_down", w_down), ("layout", layout)):
        B.check_contiguous(NAME, name, v)
    tensors = [("h", h), ("w_down", w_down), ("layout", layout)]
    if h.device.type == "cuda" and "nccl" not in backend:
        raise ValueError(f"mkernel.{NAME}: CUDA tensors need an NCCL group; group "
                         f"{group_name!r} is '{backend}'")
    fns, comm = M.path(NAME, pg, backend, tensors, h.dtype)
    if fns is None:
        return M.fallback_combine(h, w_down, layout, num_tokens, topk, max_tokens_per_rank,
                                  w_layout, pg)
    e = eloc * world
    cfg = M.config(e, topk, hidden, inter, max_tokens_per_rank, max_recv, w_layout)
    B.check_across_ranks(NAME, pg, "num_experts, topk, H, I, max_tokens_per_rank, max_recv "
                         "and w_layout", (e, topk, hidden, inter, max_tokens_per_rank,
                                          max_recv, w_layout))
    M.check_layout_size(NAME, fns, cfg, comm, layout.shape[0])
    y = h.new_empty((num_tokens, hidden))
    B.call(NAME, M.SYM_COMBINE, fns[M.SYM_COMBINE], h.data_ptr(), w_down.data_ptr(),
           B.ptr(y) if num_tokens else None, layout.data_ptr(), M.ctypes.addressof(cfg),
           comm.handle, B.stream())
    return y


@moe_gemm_combine_op.register_fake
def _(h, w_down, layout, num_tokens, topk, max_tokens_per_rank, w_layout, group_name):
    _r, _i, hidden, _e = M.combine_dims(h, w_down, layout, num_tokens, topk,
                                        max_tokens_per_rank, w_layout,
                                        B.world_size(group_name))
    return h.new_empty((num_tokens, hidden))


def moe_gemm_combine(h, w_down, layout, num_tokens, topk, group=None, *,
                     max_tokens_per_rank=None, w_layout="nk"):
    """MoE down projection + combine over `group` (collective), the inverse of the
    moe_dispatch_gemm that returned `layout`: h (max_recv x I, rows as that dispatch's out,
    e.g. its SwiGLU) times each row's expert's w_down ((E/R, H, I) for w_layout "nk",
    (E/R, I, H) for "kn"), back on the token's rank, weighted by its topk_weight and summed
    (fp32 sum on the fallback). num_tokens, topk, max_tokens_per_rank (default num_tokens):
    those of the dispatch. Returns y (num_tokens x H, h's dtype); a token routed to no expert
    gets zeros. Takes the path its dispatch took (same group, device, dtype)."""
    from ..comm import resolve_group

    if w_layout not in M.W_LAYOUTS:
        raise ValueError(f"mkernel.{NAME}: w_layout must be 'nk' or 'kn', got {w_layout!r}")
    mt = num_tokens if max_tokens_per_rank is None else max_tokens_per_rank
    return torch.ops.mkernel.moe_gemm_combine(h, w_down, layout, num_tokens, topk, mt,
                                              M.W_LAYOUTS[w_layout],
                                              resolve_group(group).group_name)
