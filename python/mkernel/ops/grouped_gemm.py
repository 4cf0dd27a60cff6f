# SPDX-License-Identifier: Apache-2.0
"""torch.ops.mkernel.grouped_gemm: per expert e, rows [offsets[e], offsets[e+1]) of A times
B_e (mkGroupedGemm; fallback one torch.matmul per expert)."""
import torch

from . import _base as B

NAME = "grouped_gemm"
SYMBOL = "mkGroupedGemm"
ARGTYPES = [B.c_void_p] * 4 + [B.c_int, B.c_size_t, B.c_size_t, B.c_size_t, B.c_int, B.c_int,
                               B.c_void_p]


def _dims(a, b, offsets, b_layout):
    B.check_tensor(NAME, "a", a, dim=2)
    B.check_tensor(NAME, "b", b, dim=3)
    B.check_tensor(NAME, "offsets", offsets, dim=1)
    B.check_layout(NAME, b_layout)
    total, k = a.shape
    e = b.shape[0]
    kb, n = (b.shape[1], b.shape[2]) if b_layout == B.LAYOUT_KN else (b.shape[2], b.shape[1])
    if kb != k:
        raise ValueError(f"mkernel.{NAME}: each expert's B must have K = {k} (a's columns), "
                         f"got b {tuple(b.shape)} with b_layout={b_layout}")
    if offsets.shape[0] != e + 1:
        raise ValueError(f"mkernel.{NAME}: offsets must have num_experts + 1 = {e + 1} "
                         f"entries, got {offsets.shape[0]}")
    if e == 0 or n == 0 or k == 0:
        raise ValueError(f"mkernel.{NAME}: empty problem (experts {e}, N {n}, K {k})")
    return total, n, k, e


@torch.library.custom_op(
    "mkernel::grouped_gemm", mutates_args=(), tags=B.TAGS,
    schema="(Tensor a, Tensor b, Tensor offsets, int b_layout) -> Tensor")
def grouped_gemm_op(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor,
                    b_layout: int) -> torch.Tensor:
    total, n, k, e = _dims(a, b, offsets, b_layout)
    B.check_tensor(NAME, "a", a, dtypes=B.GEMM_DTYPES)
    B.check_tensor(NAME, "b", b, dtypes=B.GEMM_DTYPES)
    B.check_tensor(NAME, "offsets", offsets, dtypes=(torch.int32,))
    B.check_same_dtype(NAME, [("a", a), ("b", b)])
    for name, t in (("a", a), ("b", b), ("offsets", offsets)):
        B.check_contiguous(NAME, name, t)
    B.check_device(NAME, [("a", a), ("b", b), ("offsets", offsets)])
    # Rows from offsets[E] on belong to no expert: zero, on both paths.
    c = torch.zeros((total, n), dtype=a.dtype, device=a.device)
    fn, _ = B.choose(NAME, SYMBOL, ARGTYPES)
    if fn is not None:
        B.call(NAME, SYMBOL, fn, a.data_ptr(), b.data_ptr(), c.data_ptr(), offsets.data_ptr(), e,
               total, n, k, B.nccl_type(a.dtype), b_layout, B.stream())
        return c
    # The host reads the offsets (one synchronisation; not capturable in a CUDA graph).
    bounds = offsets.tolist()
    for i in range(e):
        lo, hi = bounds[i], bounds[i + 1]
        if not 0 <= lo <= hi <= total:
            raise ValueError(f"mkernel.{NAME}: offsets must grow from 0 to at most a's rows "
                             f"({total}), got offsets[{i}:{i + 2}] = [{lo}, {hi}]")
        if hi > lo:
            w = b[i] if b_layout == B.LAYOUT_KN else b[i].t()
            torch.matmul(a[lo:hi], w, out=c[lo:hi])
    return c


@grouped_gemm_op.register_fake
def _(a, b, offsets, b_layout):
    total, n, _k, _e = _dims(a, b, offsets, b_layout)
    return a.new_empty((total, n))


def grouped_gemm(a, w, offsets, *, w_layout="nk"):
    """Grouped GEMM (MoE experts): rows [offsets[e], offsets[e+1]) of a (total x K) times
    expert e's weight, w being (E, N, K) (w_layout "nk", nn.Linear weights stacked) or
    (E, K, N) ("kn"); offsets: int32 CUDA tensor of E + 1 entries (read on the device by the
    fused path). Rows from offsets[E] on are zero. Returns (total, N)."""
    return torch.ops.mkernel.grouped_gemm(a, w, offsets, B.LAYOUTS[w_layout])
