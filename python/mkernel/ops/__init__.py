# SPDX-License-Identifier: Apache-2.0
"""The op registry. Each entry is one file in this folder that registers
``torch.ops.mkernel.<name>`` (torch.library custom op + fake impl + torch fallback) and defines
the Python wrapper ``<name>``; ``EXPORTS`` in the file names further public helpers.

Adding an op: write ``ops/<name>.py`` after the pattern of ``gemm_reduce_scatter.py`` and add
its name below; ``mkernel.<name>`` and ``torch.ops.mkernel.<name>`` then exist.
"""
import importlib

OPS = (
    "gemm_all_reduce",
    "gemm_reduce_scatter",
    "all_gather_gemm",
    "all_to_all",
    "attention",
    "ring_attention",
    "grouped_gemm",
    "moe_dispatch_gemm",
    "moe_gemm_combine",
)

modules = {name: importlib.import_module(f".{name}", __name__) for name in OPS}


def public():
    """{name: callable} of every wrapper and exported helper."""
    out = {}
    for name, mod in modules.items():
        out[name] = getattr(mod, name)
        for extra in getattr(mod, "EXPORTS", ()):
            out[extra] = getattr(mod, extra)
    return out
