# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel linear layers on mkernel's fused ops, with Megatron-LM's weight layout.

* ColumnParallelLinear(in, out): weight (out / R, in) on each rank (rows of the full weight
  split over the R ranks), bias (out / R); y_r = x @ W_r^T + b_r. With sequence_parallel the
  input is this rank's sequence shard [S/R, ...] and the layer runs all_gather_gemm.
* RowParallelLinear(in, out): weight (out, in / R) (columns split), bias (out) added once
  after the reduction; the input is the column-parallel output [.., in / R]. It runs
  gemm_all_reduce, or gemm_reduce_scatter with sequence_parallel (output [S/R, ..., out]).

Sequence parallelism splits the first dimension (Megatron's [s, b, h] order). Where mkernel
cannot run the call at all (a CPU tensor, a group of another backend), the layer computes the
same thing with F.linear and torch.distributed collectives and says why once at INFO; within
mkernel's ops, a missing fused op falls back the same way (mkernel.stats() tells which ran).
"""
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import comm as _comm
from .ops import _base
from .ops.all_gather_gemm import all_gather_gemm
from .ops.gemm_all_reduce import gemm_all_reduce
from .ops.gemm_reduce_scatter import gemm_reduce_scatter


def _compiling():
    return hasattr(torch, "compiler") and torch.compiler.is_compiling()


def _split(total, world, what):
    if total % world:
        raise ValueError(f"mkernel.nn: {what} ({total}) must be a multiple of the "
                         f"tensor-parallel size {world}")
    return total // world


class _ParallelLinear(torch.nn.Module):
    def __init__(self, in_features, out_features, w_shape, b_len, bias, group,
                 sequence_parallel, device, dtype):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.group = _comm.resolve_group(group)
        # fixed per layer, so torch.compile sees constants
        self.backend = str(dist.get_backend(self.group)).lower()
        self.sequence_parallel = sequence_parallel
        kw = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(w_shape, **kw))
        self.bias = torch.nn.Parameter(torch.empty(b_len, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Linear's initialisation on the local shard (fan-in of the full layer).
        bound = 1 / math.sqrt(self.in_features)
        torch.nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def _pg(self):
        return self.group

    def _why_not_mkernel(self, x):
        """None when the fused ops can run this input, else why not (said once at INFO)."""
        if x.device.type != "cuda":
            why = f"input on {x.device}, not a CUDA device"
        elif "nccl" not in self.backend:
            why = f"group backend '{self.backend}', not NCCL"
        else:
            return None
        if not _compiling():
            _base.fallback(f"nn.{type(self).__name__}", why)
        return why


class ColumnParallelLinear(_ParallelLinear):
    """y = x @ W^T + b with W's rows (the outputs) split over the group's ranks.

    Args: in_features, out_features (of the whole layer; out_features a multiple of R),
    bias, group (None: the default group), sequence_parallel (x is this rank's [S/R, ..., in]
    shard; all-gathered along dim 0 inside the fused all_gather_gemm), device, dtype.
    Output: [..., out_features / R] (the full sequence when sequence_parallel)."""

    def __init__(self, in_features, out_features, bias=True, group=None,
                 sequence_parallel=False, device=None, dtype=None):
        world = _comm.resolve_group(group).size()
        self.out_per_rank = _split(out_features, world, "out_features")
        super().__init__(in_features, out_features, (self.out_per_rank, in_features),
                         self.out_per_rank, bias, group, sequence_parallel, device, dtype)

    def shard(self, full_weight, full_bias=None):
        """Copy this rank's rows of a full (out_features, in_features) weight (and bias)."""
        r = self._pg().rank()
        rows = slice(r * self.out_per_rank, (r + 1) * self.out_per_rank)
        with torch.no_grad():
            self.weight.copy_(full_weight[rows])
            if self.bias is not None and full_bias is not None:
                self.bias.copy_(full_bias[rows])
        return self

    def forward(self, x):
        pg = self._pg()
        if not self.sequence_parallel:
            # No communication in the forward pass: a plain GEMM on the local rows.
            return F.linear(x, self.weight, self.bias)
        if self._why_not_mkernel(x) is None:
            y = all_gather_gemm(x.contiguous(), self.weight, pg)
        else:
            parts = [torch.empty_like(x) for _ in range(pg.size())]
            dist.all_gather(parts, x.contiguous(), group=pg)
            y = F.linear(torch.cat(parts, dim=0), self.weight)
        return y + self.bias if self.bias is not None else y


class RowParallelLinear(_ParallelLinear):
    """y = x @ W^T + b with W's columns (the inputs) split over the group's ranks; the partial
    products are summed by the fused GEMM + all-reduce, or GEMM + reduce-scatter along dim 0
    with sequence_parallel (output: this rank's [S/R, ..., out_features] shard).

    Args: in_features (a multiple of R), out_features, bias (added once, after the sum),
    group, sequence_parallel, device, dtype. Input: [..., in_features / R]."""

    def __init__(self, in_features, out_features, bias=True, group=None,
                 sequence_parallel=False, device=None, dtype=None):
        world = _comm.resolve_group(group).size()
        self.in_per_rank = _split(in_features, world, "in_features")
        super().__init__(in_features, out_features, (out_features, self.in_per_rank),
                         out_features, bias, group, sequence_parallel, device, dtype)

    def shard(self, full_weight, full_bias=None):
        """Copy this rank's columns of a full (out_features, in_features) weight (and bias)."""
        r = self._pg().rank()
        cols = slice(r * self.in_per_rank, (r + 1) * self.in_per_rank)
        with torch.no_grad():
            self.weight.copy_(full_weight[:, cols])
            if self.bias is not None and full_bias is not None:
                self.bias.copy_(full_bias)
        return self

    def forward(self, x):
        pg = self._pg()
        x = x.contiguous()
        if self._why_not_mkernel(x) is None:
            if self.sequence_parallel:
                y = gemm_reduce_scatter(x, self.weight, pg)
            else:
                y = gemm_all_reduce(x, self.weight, pg)
        else:
            y = F.linear(x, self.weight)
            if self.sequence_parallel:
                # all_reduce + my chunk: every backend has all_reduce (gloo lacks
                # reduce_scatter on some builds).
                dist.all_reduce(y, group=pg)
                y = y.chunk(pg.size(), dim=0)[pg.rank()].contiguous()
            else:
                dist.all_reduce(y, group=pg)
        return y + self.bias if self.bias is not None else y
