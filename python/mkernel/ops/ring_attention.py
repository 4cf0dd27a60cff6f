# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.ring_attention: context-parallel attention, each rank holding seq_local
tokens (mkRingAttention; fallback all_gather of k, v + attention with global positions), and
the zigzag sharding helpers that causal ring attention expects."""
import torch
import torch.distributed as dist

from . import _base as B
from .attention import check_qkv, check_qkv_call, fused_unsupported, reference

NAME = "ring_attention"
EXPORTS = ("zigzag_shard", "zigzag_unshard")
SYMBOL = "mkRingAttention"
ARGTYPES = [B.c_void_p] * 5 + [B.c_int] * 6 + [B.c_void_p, B.c_void_p]


def positions(rank, world, seq_local, causal, device=None):
    """Global token positions rank `rank` holds: chunk r of the sequence (non-causal), or
    zigzag chunks r and 2R-1-r of seq_local/2 tokens each (causal)."""
    if not causal:
        return torch.arange(rank * seq_local, (rank + 1) * seq_local, device=device)
    half = seq_local // 2
    first = torch.arange(rank * half, (rank + 1) * half, device=device)
    last = torch.arange((2 * world - 1 - rank) * half, (2 * world - rank) * half, device=device)
    return torch.cat([first, last])


def zigzag_shard(x, rank, world, dim=1):
    """Rank `rank`'s zigzag shard of the whole sequence x (split into 2R chunks along `dim`:
    chunks rank and 2R-1-rank), the layout causal ring_attention takes."""
    if x.shape[dim] % (2 * world):
        raise ValueError(f"mkernel.zigzag_shard: x's dimension {dim} ({x.shape[dim]}) must be "
                         f"a multiple of 2 x world ({2 * world})")
    chunks = x.chunk(2 * world, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)


def zigzag_unshard(shards, world=None, dim=1):
    """The whole sequence from every rank's zigzag shard: `shards` is a list in rank order, or
    one tensor with the shards concatenated along `dim` in rank order (then pass world)."""
    if isinstance(shards, torch.Tensor):
        if world is None or shards.shape[dim] % (2 * world):
            raise ValueError("mkernel.zigzag_unshard: give world, with the shards' dimension "
                             f"{dim} a multiple of 2 x world")
        shards = list(shards.chunk(world, dim=dim))
    world = len(shards)
    firsts, lasts = [], []
    for s in shards:
        a, b = s.chunk(2, dim=dim)
        firsts.append(a)
        lasts.append(b)
    return torch.cat(firsts + lasts[::-1], dim=dim)


def _check(q, k, v, causal):
    dims = check_qkv(NAME, q, k, v, same_seq=True)
    if causal and dims[3] % 2:
        raise ValueError(f"mkernel.{NAME}: causal (zigzag) ring attention needs an even "
                         f"seq_local (two chunks per rank), got {dims[3]}")
    return dims


@torch.library.custom_op(
    "mkernel::ring_attention", mutates_args=(), tags=B.TAGS,
    schema="(Tensor q, Tensor k, Tensor v, str group_name, bool causal) -> (Tensor, Tensor)")
def ring_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_name: str,
                      causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check(q, k, v, causal)
    b, hq, hkv, s, _s, d = check_qkv_call(NAME, q, k, v, same_seq=True, device=False)
    group = B.group_of(NAME, group_name)
    B.check_device(NAME, [("q", q), ("k", k), ("v", v)])
    B.check_across_ranks(NAME, group, "(B, Hq, Hkv, seq_local, D, dtype, causal)",
                         (b, hq, hkv, s, d, B.nccl_type(q.dtype), int(causal)))
    fn, comm = B.choose(NAME, SYMBOL, ARGTYPES, group, unsupported=fused_unsupported(q, d))
    if fn is not None:
        o = torch.empty_like(q)
        lse = torch.empty((b, hq, s), dtype=torch.float32, device=q.device)
        B.call(NAME, SYMBOL, fn, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
               lse.data_ptr(), b, hq, hkv, s, d, int(causal), comm.handle, B.stream())
        return o, lse
    world, rank = group.size(), group.rank()
    kv = torch.stack([k, v])  # [2, B, S, Hkv, D]
    everyone = torch.empty((world,) + tuple(kv.shape), dtype=kv.dtype, device=kv.device)
    dist.all_gather_into_tensor(everyone, kv, group=group)
    # [R, 2, B, S, H, D] -> keys in rank order along the sequence; positions say where they sit.
    kk = everyone[:, 0].permute(1, 0, 2, 3, 4).reshape(b, world * s, hkv, d)
    vv = everyone[:, 1].permute(1, 0, 2, 3, 4).reshape(b, world * s, hkv, d)
    kpos = torch.cat([positions(r, world, s, causal, q.device) for r in range(world)])
    qpos = positions(rank, world, s, causal, q.device)
    return reference(q, kk, vv, qpos, kpos, causal)


@ring_attention_op.register_fake
def _(q, k, v, group_name, causal):
    b, hq, _hkv, s, _s, _d = _check(q, k, v, causal)
    return torch.empty_like(q), q.new_empty((b, hq, s), dtype=torch.float32)


def ring_attention(q, k, v, group=None, causal=False):
    """Context-parallel attention over the ranks of `group`: q, k, v are this rank's
    [B, seq_local, H, D] tokens; returns (o, lse fp32 [B, Hq, seq_local]) for this rank's
    queries against the whole sequence. Non-causal: rank r holds chunk r; causal: the zigzag
    shard (zigzag_shard). Collective."""
    from ..comm import group_name

    return torch.ops.mkernel.ring_attention(q, k, v, group_name(group), causal)
