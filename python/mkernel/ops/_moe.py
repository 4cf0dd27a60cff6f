# SPDX-License-Identifier: Apache-2.0
"""What the MoE pair (moe_dispatch_gemm, moe_gemm_combine) shares: mkMoeConfig_t, the argument
checks both the ops and their fake impls run, the size of the layout buffer, the path choice
(both ops always take the same one, so a layout is read by the path that wrote it) and the torch
fallback of both directions.

The layout is an opaque uint8 tensor. Its first E / R + 1 int32 are the receive offsets (local
expert e's rows of out are [off[e], off[e + 1])) on both paths; the rest is the path's own.
Its size must be known without a communicator (fake impls, torch.compile), so it is an upper
bound of mkMoeLayoutSize's (the C layout map with one node per rank, the most nodes a group can
have) and of the fallback's; the fused path checks the bound against mkMoeLayoutSize.
"""
import ctypes

import torch
import torch.distributed as dist

from . import _base as B
from .. import _lib

DISPATCH, COMBINE = "moe_dispatch_gemm", "moe_gemm_combine"
SYM_DISPATCH, SYM_COMBINE, SYM_SIZE = "mkMoeDispatchGemm", "mkMoeGemmCombine", "mkMoeLayoutSize"
DISPATCH_ARGTYPES = [B.c_void_p] * 6 + [B.c_size_t, B.c_void_p, B.c_void_p, B.c_void_p]
COMBINE_ARGTYPES = [B.c_void_p] * 7
SIZE_ARGTYPES = [B.c_void_p] * 3
MAX_TOPK = 16  # MK_MOE_MAX_TOPK
W_LAYOUTS = {"kn": B.LAYOUT_KN, "nk": B.LAYOUT_NK}

# The fallback's layout, in int32 after the receive offsets: a header, then regions.
FB_MAGIC = 0x4D4B4642
H_MAGIC, H_NTOK, H_NVALID, H_NRECV, HDR = 0, 1, 2, 3, 4


class Config(ctypes.Structure):
    """mkMoeConfig_t (include/mkernel.h)."""
    _fields_ = [("numExperts", ctypes.c_int), ("topk", ctypes.c_int),
                ("hidden", ctypes.c_size_t), ("inter", ctypes.c_size_t),
                ("maxTokensPerRank", ctypes.c_size_t), ("maxRecv", ctypes.c_size_t),
                ("wLayout", ctypes.c_int), ("type", ctypes.c_int)]


def _align(v):
    return (v + 255) & ~255


def layout_bytes(num_experts, world, topk, max_tokens, max_recv):
    """Bytes of the layout: at least mkMoeLayoutSize's for any split of the group into nodes
    (its map, fused/ops/moe_plan.c, grows with the node count, at most one per rank) and at
    least the fallback's."""
    eloc, n, pairs = num_experts // world, world, max_tokens * topk
    entry_ints = (1 + 3 * topk + 3) & ~3
    o = _align((eloc + 1) * 4)
    o = _align(o + 32)  # struct mk_moe_lhdr
    for region in (pairs, pairs, pairs, max_tokens * n, n * max_tokens, n, n,
                   n * max_tokens * entry_ints, pairs, 2 * world, max_recv):
        o = _align(o + region * 4)
    fallback = _align(4 * (fb_regions(eloc, world, topk, max_tokens, max_recv)["end"]))
    return max(o, fallback)


def fb_regions(eloc, world, topk, max_tokens, max_recv):
    """int32 offsets of the fallback layout's regions."""
    pairs = max_tokens * topk
    r = {"off": 0, "hdr": eloc + 1}
    r["send"] = r["hdr"] + HDR            # rows sent to each rank
    r["recv"] = r["send"] + world         # rows received from each rank
    r["order"] = r["recv"] + world        # sent pairs (token * topk + slot), by expert id
    r["weight"] = r["order"] + pairs      # their weights (fp32 bits)
    r["scatter"] = r["weight"] + pairs    # received row -> row of out
    r["end"] = r["scatter"] + max_recv
    return r


def group_of(op, group_name):
    """(ProcessGroup, backend name); the MoE ops run any backend's group through the fallback."""
    pg = B.named_group(op, group_name)
    return pg, str(dist.get_backend(pg)).lower()


def _expert_out(op, name, w, w_layout, letters, k, what):
    """Output width of the experts' weights `w` (E/R, out, in) for nk, (E/R, in, out) for kn,
    whose input width must be k (`letters`: the names of out and in in the message)."""
    nk = w_layout == B.LAYOUT_NK
    out, inp = (w.shape[1], w.shape[2]) if nk else (w.shape[2], w.shape[1])
    if inp != k:
        o, i = letters
        form = f"(E/R, {o}, {i})" if nk else f"(E/R, {i}, {o})"
        raise ValueError(f"mkernel.{op}: {name} {form} must have {what} = {k}, got "
                         f"shape {tuple(w.shape)}")
    return out


def _check_w_layout(op, w_layout):
    if w_layout not in (B.LAYOUT_KN, B.LAYOUT_NK):
        raise ValueError(f"mkernel.{op}: w_layout must be 0 (kn: w_up H x I, w_down I x H per "
                         f"expert) or 1 (nk: nn.Linear weights), got {w_layout}")


def _check_topk(op, topk):
    if not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"mkernel.{op}: topk must be 1 .. {MAX_TOPK}, got {topk}")


def _check_tokens(op, num_tokens, max_tokens):
    if max_tokens < 1:
        raise ValueError(f"mkernel.{op}: max_tokens_per_rank must be >= 1, got {max_tokens}")
    if not 0 <= num_tokens <= max_tokens:
        raise ValueError(f"mkernel.{op}: this rank's {num_tokens} tokens must be at most "
                         f"max_tokens_per_rank ({max_tokens})")


def _experts(op, name, w, world, num_experts):
    if num_experts < 1 or num_experts % world:
        raise ValueError(f"mkernel.{op}: num_experts ({num_experts}) must be a positive "
                         f"multiple of the group size {world} (every rank owns E / {world} "
                         "experts)")
    eloc = num_experts // world
    if w.shape[0] != eloc:
        raise ValueError(f"mkernel.{op}: {name} must stack this rank's num_experts / ranks = "
                         f"{num_experts} / {world} = {eloc} experts, got shape "
                         f"{tuple(w.shape)}")
    return eloc


def dispatch_dims(x, topk_idx, topk_weight, w_up, num_experts, max_tokens, max_recv, w_layout,
                  world):
    """Every check of the dispatch that needs no device: (T, H, I, topk, eloc)."""
    op = DISPATCH
    B.check_tensor(op, "x", x, dim=2)
    B.check_tensor(op, "topk_idx", topk_idx, dim=2)
    B.check_tensor(op, "topk_weight", topk_weight, dim=2)
    B.check_tensor(op, "w_up", w_up, dim=3)
    _check_w_layout(op, w_layout)
    B.check_tensor(op, "x", x, dtypes=B.GEMM_DTYPES)
    B.check_tensor(op, "w_up", w_up, dtypes=B.GEMM_DTYPES)
    B.check_same_dtype(op, [("x", x), ("w_up", w_up)])
    B.check_tensor(op, "topk_idx", topk_idx, dtypes=(torch.int32,))
    B.check_tensor(op, "topk_weight", topk_weight, dtypes=(torch.float32,))
    t, h = x.shape
    if topk_idx.shape[0] != t:
        raise ValueError(f"mkernel.{op}: topk_idx must have one row per token of x ({t}), got "
                         f"shape {tuple(topk_idx.shape)}")
    k = topk_idx.shape[1]
    _check_topk(op, k)
    if tuple(topk_weight.shape) != tuple(topk_idx.shape):
        raise ValueError(f"mkernel.{op}: topk_weight must have topk_idx's shape "
                         f"{tuple(topk_idx.shape)}, got {tuple(topk_weight.shape)}")
    eloc = _experts(op, "w_up", w_up, world, num_experts)
    inter = _expert_out(op, "w_up", w_up, w_layout, ("I", "H"), h, "x's hidden size H")
    if h == 0 or inter == 0:
        raise ValueError(f"mkernel.{op}: empty expert GEMM (H, I) = ({h}, {inter})")
    _check_tokens(op, t, max_tokens)
    if max_recv < 1:
        raise ValueError(f"mkernel.{op}: max_recv must be >= 1, got {max_recv}")
    return t, h, inter, k, eloc


def combine_dims(h, w_down, layout, num_tokens, topk, max_tokens, w_layout, world):
    """Every check of the combine that needs no device: (max_recv, I, H, eloc)."""
    op = COMBINE
    B.check_tensor(op, "h", h, dim=2)
    B.check_tensor(op, "w_down", w_down, dim=3)
    B.check_tensor(op, "layout", layout, dtypes=(torch.uint8,), dim=1)
    _check_w_layout(op, w_layout)
    B.check_tensor(op, "h", h, dtypes=B.GEMM_DTYPES)
    B.check_tensor(op, "w_down", w_down, dtypes=B.GEMM_DTYPES)
    B.check_same_dtype(op, [("h", h), ("w_down", w_down)])
    max_recv, inter = h.shape
    eloc = w_down.shape[0]
    if eloc < 1:
        raise ValueError(f"mkernel.{op}: w_down holds no expert, shape {tuple(w_down.shape)}")
    hidden = _expert_out(op, "w_down", w_down, w_layout, ("H", "I"), inter, "h's width I")
    if hidden == 0 or inter == 0 or max_recv == 0:
        raise ValueError(f"mkernel.{op}: empty expert GEMM (rows, H, I) = ({max_recv}, "
                         f"{hidden}, {inter})")
    _check_topk(op, topk)
    _check_tokens(op, num_tokens, max_tokens)
    need = layout_bytes(eloc * world, world, topk, max_tokens, max_recv)
    if layout.shape[0] < need:
        raise ValueError(f"mkernel.{op}: layout has {layout.shape[0]} bytes but this geometry "
                         f"needs {need}: pass the layout moe_dispatch_gemm returned, with its "
                         "topk and max_tokens_per_rank")
    return max_recv, inter, hidden, eloc


def path(op, pg, backend, tensors, dtype):
    """(C functions {symbol: fn}, Comm) when the MoE pair runs on libmkernel, else
    (None, None) after fallback(). The same answer for the dispatch and its combine: the same
    group, device and dtype, and both symbols (a layout is only read by the path that wrote
    it)."""
    why = None
    if "nccl" not in backend:
        why = f"group backend '{backend}', not NCCL"
    else:
        B.check_device(op, tensors)
        if dtype != torch.bfloat16:
            why = (f"dtype {str(dtype).replace('torch.', '')}: libmkernel's MoE ops take "
                   "bfloat16")
    fns = {}
    if why is None:
        for sym, argtypes in ((SYM_SIZE, SIZE_ARGTYPES), (SYM_DISPATCH, DISPATCH_ARGTYPES),
                              (SYM_COMBINE, COMBINE_ARGTYPES)):
            fns[sym], why = _lib.function(sym, argtypes)
            if why is not None:
                break
    own = SYM_DISPATCH if op == DISPATCH else SYM_COMBINE
    fn, comm = B.choose(op, own, None, pg if why is None else None, unsupported=why)
    return (fns, comm) if fn is not None else (None, None)


def config(num_experts, topk, hidden, inter, max_tokens, max_recv, w_layout):
    c = Config()
    c.numExperts, c.topk, c.hidden, c.inter = num_experts, topk, hidden, inter
    c.maxTokensPerRank, c.maxRecv = max_tokens, max_recv
    c.wLayout, c.type = w_layout, B.nccl_type(torch.bfloat16)
    return c


def check_layout_size(op, fns, cfg, comm, have):
    n = ctypes.c_size_t()
    _lib.check(f"mkernel.{op} ({SYM_SIZE})",
               fns[SYM_SIZE](ctypes.addressof(cfg), comm.handle, ctypes.addressof(n)))
    if n.value > have:
        raise RuntimeError(f"mkernel.{op}: {SYM_SIZE} asks {n.value} bytes, more than the "
                           f"{have} this package allots (its bound no longer matches the "
                           "library's layout map)")


def _expert_mm(rows, w, e, w_layout):
    return rows @ (w[e].t() if w_layout == B.LAYOUT_NK else w[e])


def fallback_dispatch(x, topk_idx, topk_weight, w_up, num_experts, max_tokens, max_recv,
                      w_layout, pg, out, layout):
    """The dispatch in torch: per-expert counts all-gathered (every rank then knows every
    placement and refuses bad ids and overflow alike, before any row moves), rows exchanged
    with all_to_all_single, one matmul per local expert. Same row order as the C API."""
    world, me = pg.size(), pg.rank()
    t, k = topk_idx.shape
    eloc = num_experts // world
    dev = x.device
    ids = topk_idx.reshape(-1).long()
    bad = torch.nonzero((ids < -1) | (ids >= num_experts)).flatten()
    first_bad = int(bad[0]) if bad.numel() else -1
    valid = torch.nonzero(ids >= 0).flatten()
    if first_bad < 0:
        counts = torch.bincount(ids[valid], minlength=num_experts)
    else:
        counts = torch.zeros(num_experts, dtype=torch.long, device=dev)
    mine = torch.cat([counts.to(torch.long), torch.tensor(
        [first_bad, int(ids[first_bad]) if first_bad >= 0 else 0], device=dev)])
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=pg)
    mat = torch.stack(every).cpu()
    for s in range(world):
        p = int(mat[s, num_experts])
        if p >= 0:
            raise ValueError(f"mkernel.{DISPATCH}: expert id {int(mat[s, num_experts + 1])} of "
                             f"token {p // k}, slot {p % k} on rank {s} is outside [-1, "
                             f"{num_experts}); no token moved on any rank")
    c = mat[:, :num_experts].view(world, world, eloc)  # [source, destination, local expert]
    needed = c.sum(dim=(0, 2))
    if int(needed.max()) > max_recv:
        r = int(needed.argmax())
        raise ValueError(f"mkernel.{DISPATCH}: rank {r} would receive {int(needed[r])} (token, "
                         f"expert) rows but max_recv is {max_recv}: raise max_recv to at least "
                         f"{int(needed.max())}; no token moved on any rank")
    send = c[me].sum(-1)
    recv = c[:, me].sum(-1)
    per = c[:, me, :]                                   # [source, local expert]
    offs = torch.zeros(eloc + 1, dtype=torch.long)
    offs[1:] = torch.cumsum(per.sum(0), 0)
    # Received rows come source by source, each source's by expert: row (s, e, i) lands at
    # offs[e] + rows of e from sources before s + i.
    base = (offs[:-1][None, :] + torch.cumsum(per, 0) - per).flatten()
    n = per.flatten()
    total = int(n.sum())
    starts = torch.repeat_interleave(base, n)
    first = torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
    scatter = starts + torch.arange(total) - first
    order = valid[torch.sort(ids[valid], stable=True).indices]   # by expert id: by rank
    rows = x[order // k].contiguous()
    got = x.new_empty((total, x.shape[1]))
    dist.all_to_all_single(got, rows, recv.tolist(), send.tolist(), group=pg)
    xs = x.new_empty((total, x.shape[1]))
    xs[scatter.to(dev)] = got
    bounds = offs.tolist()
    for e in range(eloc):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            out[lo:hi] = _expert_mm(xs[lo:hi], w_up, e, w_layout)
    li = layout.view(torch.int32)
    reg = fb_regions(eloc, world, k, max_tokens, max_recv)
    li[:eloc + 1] = offs.to(torch.int32).to(dev)
    li[reg["hdr"]:reg["hdr"] + HDR] = torch.tensor([FB_MAGIC, t, order.numel(), total],
                                                   dtype=torch.int32, device=dev)
    li[reg["send"]:reg["send"] + world] = send.to(torch.int32).to(dev)
    li[reg["recv"]:reg["recv"] + world] = recv.to(torch.int32).to(dev)
    li[reg["order"]:reg["order"] + order.numel()] = order.to(torch.int32)
    li[reg["weight"]:reg["weight"] + order.numel()] = \
        topk_weight.reshape(-1)[order].contiguous().view(torch.int32)
    li[reg["scatter"]:reg["scatter"] + total] = scatter.to(torch.int32).to(dev)


def fallback_combine(h, w_down, layout, num_tokens, topk, max_tokens, w_layout, pg):
    """The combine in torch, backwards through the fallback dispatch's layout; the weighted
    sum per token in fp32."""
    world = pg.size()
    max_recv, _inter = h.shape
    eloc = w_down.shape[0]
    hidden = w_down.shape[1] if w_layout == B.LAYOUT_NK else w_down.shape[2]
    dev = h.device
    li = layout.view(torch.int32)
    reg = fb_regions(eloc, world, topk, max_tokens, max_recv)
    magic, ntok, nvalid, total = li[reg["hdr"]:reg["hdr"] + HDR].tolist()
    if magic != FB_MAGIC:
        raise ValueError(f"mkernel.{COMBINE}: layout was not filled by the torch path of "
                         "moe_dispatch_gemm; the combine must take the dispatch's path (same "
                         "group, device and dtype)")
    if ntok != num_tokens:
        raise ValueError(f"mkernel.{COMBINE}: the dispatch that filled layout had {ntok} "
                         f"tokens, num_tokens is {num_tokens}")
    offs = li[:eloc + 1].tolist()
    send = li[reg["send"]:reg["send"] + world].tolist()
    recv = li[reg["recv"]:reg["recv"] + world].tolist()
    order = li[reg["order"]:reg["order"] + nvalid].long()
    weight = li[reg["weight"]:reg["weight"] + nvalid].view(torch.float32)
    scatter = li[reg["scatter"]:reg["scatter"] + total].long()
    ys = h.new_empty((total, hidden))
    for e in range(eloc):
        lo, hi = offs[e], offs[e + 1]
        if hi > lo:
            ys[lo:hi] = _expert_mm(h[lo:hi], w_down, e, w_layout)
    back = ys[scatter].contiguous()
    ret = h.new_empty((nvalid, hidden))
    dist.all_to_all_single(ret, back, send, recv, group=pg)
    y = torch.zeros((num_tokens, hidden), dtype=torch.float32, device=dev)
    y.index_add_(0, order // topk, ret.float() * weight[:, None])
    return y.to(h.dtype)
