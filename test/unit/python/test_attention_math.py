# SPDX-License-Identifier: Apache-2.0
"""The torch paths of attention and ring attention on the CPU: the reference against a direct
softmax, bottom-right causal alignment, GQA, rows that see no key, zigzag sharding."""
import math

import torch

import mkernel
from mkernel.ops.attention import reference
from mkernel.ops.ring_attention import positions


def naive(q, k, v, causal):
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=2)
    v = v.repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / math.sqrt(d)
    if causal:
        i = torch.arange(sq)[:, None]
        j = torch.arange(skv)[None, :]
        s = s.masked_fill(j > i + (skv - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    o = torch.einsum("bhqk,bkhd->bqhd", p, v.double())
    return o, lse


def test_reference_matches_softmax_gqa_causal_bottom_right():
    torch.manual_seed(0)
    q = torch.randn(2, 5, 4, 16)
    k = torch.randn(2, 9, 2, 16)
    v = torch.randn(2, 9, 2, 16)
    for causal in (False, True):
        o, lse = reference(q, k, v, torch.arange(5) + 4, torch.arange(9), causal)
        wo, wl = naive(q, k, v, causal)
        assert torch.allclose(o.double(), wo, atol=1e-5), causal
        assert torch.allclose(lse.double(), wl, atol=1e-5), causal
        assert o.shape == q.shape and lse.shape == (2, 4, 5) and lse.dtype == torch.float32


def test_query_that_sees_no_key_gets_zero_and_minus_inf():
    q = torch.randn(1, 6, 2, 8)
    k = torch.randn(1, 3, 2, 8)
    # Sq > Skv, bottom-right: queries 0..2 see no key
    o, lse = reference(q, k, k, torch.arange(6) - 3, torch.arange(3), True)
    assert torch.all(o[:, :3] == 0) and torch.all(torch.isneginf(lse[:, :, :3]))
    assert torch.isfinite(lse[:, :, 3:]).all() and not torch.isnan(o).any()


def test_zigzag_round_trip_and_positions():
    world, s = 4, 16
    x = torch.arange(2 * s * world).view(2, s * world)  # [B, S]
    shards = [mkernel.zigzag_shard(x, r, world, dim=1) for r in range(world)]
    for r, sh in enumerate(shards):
        assert torch.equal(sh[0], positions(r, world, s, causal=True))
    assert torch.equal(mkernel.zigzag_unshard(shards, dim=1), x)
    assert torch.equal(mkernel.zigzag_unshard(torch.cat(shards, 1), world, dim=1), x)
    # non-causal ranks hold contiguous chunks
    assert torch.equal(positions(2, world, s, causal=False), torch.arange(32, 48))


def test_ring_positions_give_the_whole_sequence_result():
    # The ring fallback's masking by global positions equals attention on the whole sequence.
    torch.manual_seed(1)
    world, s = 3, 4
    q, k, v = (torch.randn(1, world * s, 2, 8) for _ in range(3))
    whole_o, whole_l = naive(q, k, v, causal=True)
    qs = [mkernel.zigzag_shard(q, r, world) for r in range(world)]
    ks = torch.cat([mkernel.zigzag_shard(k, r, world) for r in range(world)], 1)
    vs = torch.cat([mkernel.zigzag_shard(v, r, world) for r in range(world)], 1)
    kpos = torch.cat([positions(r, world, s, True) for r in range(world)])
    outs, lses = [], []
    for r in range(world):
        o, l = reference(qs[r], ks, vs, positions(r, world, s, True), kpos, True)
        outs.append(o)
        lses.append(l)
    o = mkernel.zigzag_unshard(outs)
    lse = mkernel.zigzag_unshard([x.transpose(1, 2) for x in lses]).transpose(1, 2)
    assert torch.allclose(o.double(), whole_o, atol=1e-5)
    assert torch.allclose(lse.double(), whole_l, atol=1e-5)
