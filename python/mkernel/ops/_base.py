# SPDX-License-Identifier: Apache-2.0
"""What every op file shares: argument checks, the choice between libmkernel and the torch
fallback (with its reason logged once at INFO), per-op path counters, dtype codes.

An op file calls ``choose()`` and either runs the C function it got or its torch fallback; it
never decides quietly: ``stats()`` counts which path ran, ``MKERNEL_STRICT=1`` turns every
fallback into an error (tests of the fast path set it).
"""
import ctypes
import logging
import os
import threading

import torch

from .. import _lib
from ..comm import Comm, check_nccl_group, resolve_group

log = logging.getLogger("mkernel")

c_void_p, c_size_t, c_int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int

# mkLayout_t: how B of C = A @ B is stored.
LAYOUT_KN = 0  # B row-major K x N
LAYOUT_NK = 1  # B row-major N x K (an nn.Linear weight: C = A @ W^T)
LAYOUTS = {"kn": LAYOUT_KN, "nk": LAYOUT_NK}

# ncclDataType_t codes (nccl.h).
NCCL_TYPES = {
    torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6,
    torch.float32: 7, torch.float64: 8, torch.bfloat16: 9,
}
if hasattr(torch, "float8_e4m3fn"):
    NCCL_TYPES[torch.float8_e4m3fn] = 10
    NCCL_TYPES[torch.float8_e5m2] = 11

# Inductor must hand the ops contiguous inputs (the C functions take row-major buffers and the
# ops refuse anything else): the strongest stride tag this torch has.
TAGS = tuple(getattr(torch.Tag, t) for t in ("needs_contiguous_strides",
                                              "needs_fixed_stride_order")
             if hasattr(torch.Tag, t))[:1]

GEMM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
GEMM_ARGTYPES = [c_void_p, c_void_p, c_void_p, c_size_t, c_size_t, c_size_t, c_int, c_int,
                 c_void_p, c_void_p]


class FallbackRefused(RuntimeError):
    """MKERNEL_STRICT=1 and an op would have run its torch fallback."""


_lock = threading.Lock()
_stats = {}
_logged = set()


def _count(op, path, reason=None):
    with _lock:
        s = _stats.setdefault(op, {"mkernel": 0, "torch": 0, "reason": None})
        s[path] += 1
        if reason is not None:
            s["reason"] = reason


def stats():
    """{op: {"mkernel": calls on libmkernel, "torch": fallback calls, "reason": last reason}}.
    Counts eager calls (a CUDA-graph replay runs no Python and counts nothing)."""
    with _lock:
        return {k: dict(v) for k, v in _stats.items()}


def reset_stats():
    with _lock:
        _stats.clear()
        _logged.clear()


def strict(op):
    """MKERNEL_STRICT: "1" refuses every fallback, a comma list ("gemm_all_reduce,all_to_all")
    those of the ops named."""
    v = os.environ.get("MKERNEL_STRICT", "0").strip()
    if v in ("", "0"):
        return False
    return v == "1" or op in {x.strip() for x in v.split(",")}


def fallback(op, reason):
    """Record that `op` runs its torch implementation, say why once at INFO; refuse under
    MKERNEL_STRICT."""
    if strict(op):
        raise FallbackRefused(f"mkernel.{op}: torch fallback refused (MKERNEL_STRICT="
                              f"{os.environ.get('MKERNEL_STRICT')}): {reason}")
    _count(op, "torch", reason)
    key = (op, reason)
    if key not in _logged:
        _logged.add(key)
        log.info("mkernel.%s: torch fallback: %s", op, reason)


def ran_mkernel(op):
    _count(op, "mkernel")


def capturing():
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def choose(op, symbol, argtypes, group=None, unsupported=None):
    """(C function, Comm) when `op` can run on libmkernel, else (None, None) after fallback().

    `unsupported`: a reason this call cannot go to the C function (dtype, shape), or None.
    With a group, the Comm is created at the first call; under CUDA-graph capture it must
    already exist (creating one is collective and synchronises)."""
    if unsupported is None:
        fn, why = _lib.function(symbol, argtypes)
    else:
        fn, why = None, unsupported
    comm = None
    if fn is not None and group is not None:
        comm = Comm.cached(group)
        if comm is None and capturing():
            fn, why = None, (f"no mkernel Comm for group {group.group_name} yet: call the op "
                             "once before capturing a CUDA graph")
        elif comm is None:
            comm = Comm.get(group)
        if comm is not None:
            comm.check()
    if fn is None:
        fallback(op, why)
        return None, None
    return fn, comm


def call(op, symbol, fn, *args):
    """Run the C function; a non-success result raises MkernelError naming it."""
    rc = fn(*args)
    _lib.check(f"mkernel.{op} ({symbol})", rc)
    ran_mkernel(op)


def stream():
    return torch.cuda.current_stream().cuda_stream


def nccl_type(dtype):
    return NCCL_TYPES[dtype]


def ptr(t):
    return t.data_ptr() if t is not None else None


# ---- argument checks: every error names the argument and the rule ----

def check_tensor(op, name, t, dtypes=None, dim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mkernel.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"mkernel.{op}: {name} must have {dim} dimensions, got shape "
                         f"{tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"mkernel.{op}: {name} must have dtype {allowed}; got "
                        f"{str(t.dtype).replace('torch.', '')}")


def check_contiguous(op, name, t):
    if not t.is_contiguous():
        raise ValueError(f"mkernel.{op}: {name} must be contiguous (row-major), got strides "
                         f"{t.stride()} for shape {tuple(t.shape)}; call .contiguous() first")


def check_device(op, tensors):
    """Every tensor on the current CUDA device (the one the group's communicator uses)."""
    for name, t in tensors:
        if t is not None and t.device.type != "cuda":
            raise ValueError(f"mkernel.{op}: {name} must be a CUDA tensor (on the rank's "
                             f"current device), got device {t.device}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"mkernel.{op}: needs a CUDA device; none is available")
    want = torch.cuda.current_device()
    for name, t in tensors:
        if t is not None and t.device.index != want:
            raise ValueError(f"mkernel.{op}: {name} is on {t.device} but the current device is "
                             f"cuda:{want} (torch.cuda.set_device to the rank's GPU)")


def check_same_dtype(op, named):
    (n0, t0), rest = named[0], named[1:]
    for n, t in rest:
        if t.dtype != t0.dtype:
            raise TypeError(f"mkernel.{op}: {n} and {n0} must have the same dtype, got "
                            f"{str(t.dtype).replace('torch.', '')} and "
                            f"{str(t0.dtype).replace('torch.', '')}")


def check_layout(op, b_layout):
    if b_layout not in (LAYOUT_KN, LAYOUT_NK):
        raise ValueError(f"mkernel.{op}: b_layout must be 0 (B is K x N) or 1 (B is N x K, "
                         f"an nn.Linear weight), got {b_layout}")


def gemm_dims(op, a, b, b_layout, a_name="a"):
    """(m, n, k) of A (m x k) @ B, with shape checks only (fake tensors pass through)."""
    check_tensor(op, a_name, a, dim=2)
    check_tensor(op, "b", b, dim=2)
    check_layout(op, b_layout)
    m, k = a.shape
    if b_layout == LAYOUT_KN:
        kb, n = b.shape
        rule = "b (K x N) must have as many rows as a has columns"
    else:
        n, kb = b.shape
        rule = "b (N x K, b_layout=1) must have as many columns as a"
    if kb != k:
        raise ValueError(f"mkernel.{op}: {rule}: {a_name} {tuple(a.shape)}, b {tuple(b.shape)}")
    if m == 0 or n == 0 or k == 0:
        raise ValueError(f"mkernel.{op}: empty GEMM (M, N, K) = ({m}, {n}, {k}): every size "
                         "must be >= 1")
    return m, n, k


def check_gemm(op, a, b, b_layout, a_name="a", dtypes=GEMM_DTYPES):
    """Shape, dtype and layout checks of a GEMM's operands (the device is checked after the
    group): (m, n, k)."""
    m, n, k = gemm_dims(op, a, b, b_layout, a_name)
    check_tensor(op, a_name, a, dtypes=dtypes)
    check_tensor(op, "b", b, dtypes=dtypes)
    check_same_dtype(op, [(a_name, a), ("b", b)])
    check_contiguous(op, a_name, a)
    check_contiguous(op, "b", b)
    return m, n, k


def named_group(op, group_name):
    """The ProcessGroup named `group_name`, any backend; ValueError when it names none."""
    resolve_group(None)  # torch.distributed initialised, else its own clear error
    try:
        return resolve_group(group_name)
    except (KeyError, ValueError, RuntimeError) as e:
        raise ValueError(f"mkernel.{op}: group_name {group_name!r} names no process group "
                         f"({e})") from None


def group_of(op, group_name):
    """The NCCL ProcessGroup named `group_name`; ValueError for another backend."""
    pg = named_group(op, group_name)
    check_nccl_group(pg, f"mkernel.{op}: group {group_name!r}")
    return pg


def world_size(group_name):
    """Size of the group (for fake impls: no backend check, no device)."""
    return resolve_group(group_name).size()


_agreed = set()


def check_across_ranks(op, group, what, values):
    """Once per (group, op, values): every rank passed the same `values` (ints), else a
    ValueError on every rank naming each rank's values. A collective of 16 int64 on the group;
    skipped under CUDA-graph capture and with MKERNEL_CHECK_SHAPES=0."""
    if os.environ.get("MKERNEL_CHECK_SHAPES", "1") == "0" or capturing():
        return
    key = (group.group_name, op, tuple(values))
    if key in _agreed:
        return
    import torch.distributed as dist

    vals = [len(values)] + [int(v) for v in values][:15]
    vals += [0] * (16 - len(vals))
    mine = torch.tensor(vals, dtype=torch.int64, device="cuda")
    everyone = torch.empty(16 * group.size(), dtype=torch.int64, device="cuda")
    dist.all_gather_into_tensor(everyone, mine, group=group)
    rows = everyone.view(group.size(), 16).tolist()
    if any(r != rows[0] for r in rows):
        per_rank = "; ".join(f"rank {i}: {tuple(r[1:1 + r[0]])}" for i, r in enumerate(rows))
        raise ValueError(f"mkernel.{op}: {what} must be the same on every rank of group "
                         f"{group.group_name}; got {per_rank}")
    _agreed.add(key)
