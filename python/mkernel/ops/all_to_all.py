# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.all_to_all: block r of x goes to rank r, block r of the result comes from
rank r (mkAllToAll through two buffers of the symmetric heap; fallback all_to_all_single)."""
import torch
import torch.distributed as dist

from . import _base as B

NAME = "all_to_all"
SYMBOL = "mkAllToAll"
ARGTYPES = [B.c_void_p, B.c_void_p, B.c_size_t, B.c_int, B.c_void_p, B.c_void_p]


def _check_shape(x, world):
    B.check_tensor(NAME, "x", x)
    if x.dim() == 0 or x.shape[0] % world:
        raise ValueError(f"mkernel.{NAME}: x's first dimension must be a multiple of the group "
                         f"size {world} (one block per rank), got shape {tuple(x.shape)}")


@torch.library.custom_op(
    "mkernel::all_to_all", mutates_args=(), tags=B.TAGS,
    schema="(Tensor x, str group_name) -> Tensor")
def all_to_all_op(x: torch.Tensor, group_name: str) -> torch.Tensor:
    group = B.group_of(NAME, group_name)
    _check_shape(x, group.size())
    B.check_contiguous(NAME, "x", x)
    B.check_device(NAME, [("x", x)])
    B.check_across_ranks(NAME, group, "x's shape and dtype",
                         tuple(x.shape) + (x.element_size(),))
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    nbytes = x.numel() * x.element_size()
    # mkAllToAll waits for a running total of signals that is fixed when it is enqueued: a
    # CUDA-graph replay would wait for the captured total, so capture takes all_to_all_single.
    why = "mkAllToAll is not replayable in a CUDA graph" if B.capturing() else None
    fn, comm = B.choose(NAME, SYMBOL, ARGTYPES, group, unsupported=why)
    if fn is not None:
        send, recv = comm.symmetric(nbytes)
        send[:nbytes].copy_(x.reshape(-1).view(torch.uint8))
        B.call(NAME, SYMBOL, fn, send.data_ptr(), recv.data_ptr(), nbytes // group.size(),
               B.nccl_type(torch.uint8), comm.handle, B.stream())
        out.reshape(-1).view(torch.uint8).copy_(recv[:nbytes])
        return out
    dist.all_to_all_single(out, x, group=group)
    return out


@all_to_all_op.register_fake
def _(x, group_name):
    _check_shape(x, B.world_size(group_name))
    return torch.empty_like(x)


def all_to_all(x, group=None):
    """All-to-all over the R ranks of `group` with ncclAllToAll's meaning: x's first dimension
    holds R equal blocks; block r goes to rank r, and block r of the result came from rank r.
    Any dtype (moved as bytes); contiguous, on the current CUDA device. Collective."""
    from ..comm import group_name

    return torch.ops.mkernel.all_to_all(x, group_name(group))
