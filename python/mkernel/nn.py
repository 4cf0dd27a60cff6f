# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel linear layers on mkernel's fused ops, with Megatron-LM's weight layout.

* ColumnParallelLinear(in, out): weight (out / R, in) on each rank (rows of the full weight
  split over the R ranks), bias (out / R); y_r = x @ W_r^T + b_r. With sequence_parallel the
  input is this rank's sequence shard [S/R, ...] and the layer runs all_gather_gemm.
* RowParallelLinear(in, out): weight (out, in / R) (columns split), bias (out) added once
  after the reduction; the input is the column-parallel output [.., in / R]. It runs
  gemm_all_reduce, or gemm_reduce_scatter with sequence_parallel (output [S/R, ..., out]).
* MoE(hidden, inter, num_experts, topk): expert parallelism, E / R experts per rank; tokens
  routed by the caller's topk_idx / topk_weight (or a router module), moe_dispatch_gemm ->
  SwiGLU -> moe_gemm_combine.

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
from .ops.moe_dispatch_gemm import moe_dispatch_gemm
from .ops.moe_gemm_combine import moe_gemm_combine


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


class MoE(torch.nn.Module):
    """A mixture-of-experts FFN with expert parallelism over the group's R ranks:
    y = sum_j topk_weight[:, j] * W_down[e_j] (silu(W_gate[e_j] x) * W_up[e_j] x).

    Rank r holds experts [r E/R, (r+1) E/R) as nn.Linear weights stacked: w_up (E/R, 2 I, H),
    each expert's rows [0, I) its gate projection and rows [I, 2 I) its up projection (one GEMM
    makes both halves; fuse_gate_up builds it from separate tensors), w_down (E/R, H, I). The
    router is the caller's: forward(x, topk_idx, topk_weight) with global expert ids (-1: no
    expert in that slot), or a `router` module called as router(x2d) -> (topk_idx,
    topk_weight). Collective: every rank calls forward alike (a rank with no tokens passes
    x of 0 rows).

    Args: hidden (H), inter (I, each expert's intermediate size), num_experts (E, a multiple
    of R), topk, router, group (None: the default group), max_tokens_per_rank (the most tokens
    any rank passes per call; None: this call's tokens, which must then be equal on every rank
    for libmkernel), max_recv (rows per rank the dispatch can take; None: the worst case),
    device, dtype. Forward only (the ops define no backward). bf16 CUDA input on an NCCL group
    runs libmkernel; anything else the ops' torch fallback (mkernel.stats())."""

    def __init__(self, hidden, inter, num_experts, topk, router=None, group=None,
                 max_tokens_per_rank=None, max_recv=None, device=None, dtype=None):
        super().__init__()
        self.group = _comm.resolve_group(group)
        world = self.group.size()
        self.experts_per_rank = _split(num_experts, world, "num_experts")
        if not 1 <= topk <= 16:
            raise ValueError(f"mkernel.nn: topk must be 1 .. 16, got {topk}")
        self.hidden, self.inter, self.num_experts, self.topk = hidden, inter, num_experts, topk
        self.router = router
        self.max_tokens_per_rank, self.max_recv = max_tokens_per_rank, max_recv
        kw = {"device": device, "dtype": dtype}
        e = self.experts_per_rank
        self.w_up = torch.nn.Parameter(torch.empty((e, 2 * inter, hidden), **kw))
        self.w_down = torch.nn.Parameter(torch.empty((e, hidden, inter), **kw))
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Linear's initialisation of every expert's projections.
        for w, fan_in in ((self.w_up, self.hidden), (self.w_down, self.inter)):
            bound = 1 / math.sqrt(fan_in)
            torch.nn.init.uniform_(w, -bound, bound)

    @staticmethod
    def fuse_gate_up(w_gate, w_up):
        """(E, 2 I, H) from per-expert gate and up weights (E, I, H) each: gate rows first."""
        return torch.cat([w_gate, w_up], dim=1)

    def shard(self, full_w_up, full_w_down):
        """Copy this rank's experts of full per-expert weights: full_w_up (E, 2 I, H) (gate
        rows, then up rows; see fuse_gate_up), full_w_down (E, H, I)."""
        e, i, h = self.num_experts, self.inter, self.hidden
        if tuple(full_w_up.shape) != (e, 2 * i, h) or tuple(full_w_down.shape) != (e, h, i):
            raise ValueError(f"mkernel.nn.MoE.shard: want full_w_up {(e, 2 * i, h)} and "
                             f"full_w_down {(e, h, i)}, got {tuple(full_w_up.shape)} and "
                             f"{tuple(full_w_down.shape)}")
        r = self.group.rank()
        mine = slice(r * self.experts_per_rank, (r + 1) * self.experts_per_rank)
        with torch.no_grad():
            self.w_up.copy_(full_w_up[mine])
            self.w_down.copy_(full_w_down[mine])
        return self

    def forward(self, x, topk_idx=None, topk_weight=None):
        """x [..., H]; topk_idx, topk_weight [tokens, topk] (tokens = x's rows flattened), or
        None to ask the router. Output x's shape."""
        x2 = x.reshape(-1, self.hidden).contiguous()
        if topk_idx is None:
            if self.router is None:
                raise ValueError("mkernel.nn.MoE: no topk_idx given and no router module")
            topk_idx, topk_weight = self.router(x2)
        if topk_idx.shape[-1] != self.topk:
            raise ValueError(f"mkernel.nn.MoE: topk_idx has {topk_idx.shape[-1]} slots per "
                             f"token, the layer's topk is {self.topk}")
        t = x2.shape[0]
        mt = t if self.max_tokens_per_rank is None else self.max_tokens_per_rank
        d = moe_dispatch_gemm(x2, topk_idx.contiguous(), topk_weight.contiguous(), self.w_up,
                              self.group, num_experts=self.num_experts,
                              max_tokens_per_rank=mt, max_recv=self.max_recv)
        gate, up = d.out.split(self.inter, dim=-1)
        h = (F.silu(gate) * up).contiguous()
        y = moe_gemm_combine(h, self.w_down, d.layout, t, self.topk, self.group,
                             max_tokens_per_rank=mt)
        return y.reshape(x.shape)
