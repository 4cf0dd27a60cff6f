# SPDX-License-Identifier: Apache-2.0
"""mkernel for PyTorch: fused multi-GPU ops over a torch.distributed NCCL process group.

    import torch, torch.distributed as dist, mkernel
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    y = mkernel.gemm_all_reduce(x, w)          # sum over ranks of x @ w.T

Ops are ``torch.ops.mkernel.*`` (torch.library, with fake impls for torch.compile, enqueued
on the current CUDA stream, capturable in CUDA graphs after their first call); each runs
libmkernel.so when it has the op and the call is supported, and its torch implementation
(torch.matmul + c10d collectives, SDPA, per-expert matmul) otherwise, saying why once at INFO
on the "mkernel" logger. Importing needs neither a GPU nor libmkernel.so: the library is
looked for at the first call (see mkernel.library()).
"""
from . import _lib
from ._lib import LibraryNotFound, MkernelError
from .comm import Comm, destroy, group_name, install_hooks
from .ops import public as _public
from .ops._base import FallbackRefused, reset_stats, stats

__version__ = "0.1.0"

globals().update(_public())
install_hooks()

from . import nn  # noqa: E402  (needs the ops above)


def library():
    """The loaded libmkernel.so as LibInfo (path, source: MKERNEL_LIB / package / prefix /
    system); raises LibraryNotFound listing every place tried and why each failed."""
    return _lib.load()


def check(group=None):
    """Raise MkernelError if an earlier mkernel call on `group` failed asynchronously (dead
    peer, timeout); a no-op when the group has no mkernel Comm yet."""
    comm = Comm.cached(group)
    if comm is not None:
        comm.check()


def abort(group=None):
    """Abort mkernel's Comm of `group` (None: all) locally, without talking to any peer: after
    an error, before leaving a process whose peers may be gone."""
    comms = list(Comm._cache.values()) if group is None else [Comm.cached(group)]
    for c in comms:
        if c is not None:
            c.abort()


__all__ = ["Comm", "LibraryNotFound", "MkernelError", "FallbackRefused", "library", "check",
           "abort", "destroy", "group_name", "stats", "reset_stats", "nn"] + sorted(_public())
