# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.attention: flash-attention forward, BSHD layout, returns (o, lse)
(mkAttention; fallback scaled_dot_product_attention + a chunked fp32 logsumexp)."""
import math

import torch
import torch.nn.functional as F

from . import _base as B

NAME = "attention"
SYMBOL = "mkAttention"
ARGTYPES = [B.c_void_p] * 5 + [B.c_int] * 7 + [B.c_void_p]
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_qkv(op, q, k, v, same_seq=False):
    """(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim) of BSHD q, k, v; shape rules."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        B.check_tensor(op, name, t, dim=4)
    b, sq, hq, d = q.shape
    bk, skv, hkv, dk = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"mkernel.{op}: v must have k's shape [B, S_kv, H_kv, D], got "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if bk != b or dk != d:
        raise ValueError(f"mkernel.{op}: k must have q's batch and head_dim ([B, S, H, D] "
                         f"layout), got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"mkernel.{op}: q's heads ({hq}) must be a multiple of k's heads "
                         f"({hkv}) (GQA/MQA)")
    if same_seq and skv != sq:
        raise ValueError(f"mkernel.{op}: q, k and v must hold the same local tokens, got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}")
    if min(b, sq, skv, d) == 0:
        raise ValueError(f"mkernel.{op}: empty q or k (shape q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)})")
    return b, hq, hkv, sq, skv, d


def check_qkv_call(op, q, k, v, same_seq=False, device=True):
    dims = check_qkv(op, q, k, v, same_seq)
    for name, t in (("q", q), ("k", k), ("v", v)):
        B.check_tensor(op, name, t, dtypes=DTYPES)
        B.check_contiguous(op, name, t)
    B.check_same_dtype(op, [("q", q), ("k", k), ("v", v)])
    if device:
        B.check_device(op, [("q", q), ("k", k), ("v", v)])
    return dims


def fused_unsupported(q, d):
    if q.dtype != torch.bfloat16:
        return f"fused attention is bf16 only, got {str(q.dtype).replace('torch.', '')}"
    if d not in (64, 128):
        return f"fused attention takes head_dim 64 or 128, got {d}"
    return None


def reference(q, k, v, qpos=None, kpos=None, causal=False, chunk=1024):
    """(o, lse) of BSHD q against k, v; key j is visible to query i when kpos[j] <= qpos[i]
    (causal). o in q's dtype; lse fp32 [B, Hq, Sq]; a query that sees no key gets o = 0 and
    lse = -inf. SDPA for o, the logsumexp in fp32 over query chunks (bounded memory)."""
    b, sq, hq, d = q.shape
    hkv = k.shape[2]
    scale = 1.0 / math.sqrt(d)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if hkv != hq:
        kh = kh.repeat_interleave(hq // hkv, dim=1)
        vh = vh.repeat_interleave(hq // hkv, dim=1)
    mask = None
    if causal:
        mask = kpos[None, :] <= qpos[:, None]
    o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    for s in range(0, sq, chunk):
        e = min(sq, s + chunk)
        scores = (qh[:, :, s:e].float() @ kh.float().transpose(-1, -2)) * scale
        if mask is not None:
            scores = scores.masked_fill(~mask[s:e], float("-inf"))
        lse[:, :, s:e] = torch.logsumexp(scores, dim=-1)
    if mask is not None:
        empty = ~mask.any(dim=-1)  # queries that see no key: SDPA gives NaN there
        if bool(empty.any()):
            o = o.masked_fill(empty[None, None, :, None], 0)
    return o.transpose(1, 2).contiguous(), lse


@torch.library.custom_op(
    "mkernel::attention", mutates_args=(), tags=B.TAGS,
    schema="(Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor, Tensor)")
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, hq, hkv, sq, skv, d = check_qkv_call(NAME, q, k, v)
    fn, _ = B.choose(NAME, SYMBOL, ARGTYPES, unsupported=fused_unsupported(q, d))
    if fn is not None:
        o = torch.empty_like(q)
        lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
        B.call(NAME, SYMBOL, fn, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
               lse.data_ptr(), b, hq, hkv, sq, skv, d, int(causal), B.stream())
        return o, lse
    pos_q = torch.arange(sq, device=q.device) + (skv - sq)  # bottom-right aligned
    pos_k = torch.arange(skv, device=q.device)
    return reference(q, k, v, pos_q, pos_k, causal)


@attention_op.register_fake
def _(q, k, v, causal):
    b, hq, _hkv, sq, _skv, _d = check_qkv(NAME, q, k, v)
    return torch.empty_like(q), q.new_empty((b, hq, sq), dtype=torch.float32)


def attention(q, k, v, causal=False):
    """Attention forward on [B, S, H, D] ("BSHD", as FlashAttention takes them) q, k, v:
    returns (o [B, Sq, Hq, D], lse fp32 [B, Hq, Sq]), scale 1/sqrt(D), Hq a multiple of Hkv.
    causal: query i sees keys j <= i + (Skv - Sq) (bottom-right aligned). Fused for bf16 with
    D in {64, 128}; otherwise SDPA."""
    return torch.ops.mkernel.attention(q, k, v, causal)
