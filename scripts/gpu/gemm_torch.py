#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""mkGemm through ctypes against PyTorch, as a new user would compare them: torch.matmul for a
K x N B (A @ B) and torch.nn.functional.linear for an N x K B (an nn.Linear weight), same process,
same inputs, on torch's current stream. Each round calls both, alternating which goes first,
each between its own CUDA events; 10 warm-up rounds, medians of the rest. ratio = torch time /
mkGemm time (above 1: mkGemm is faster). The outputs are compared (relative error). One JSON
line per shape and a summary line (lowest ratio, geometric mean).

usage: gemm_torch.py LIBMKERNEL [--reps N] [--calibration FILE] [--quick]
"""
import argparse
import ctypes
import json
import math
import os
import sys

import torch

NCCL_BFLOAT16 = 9  # ncclDataType_t
LAYOUT_KN, LAYOUT_NK = 0, 1  # mkLayout_t

MS = [1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
NKS = [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (3000, 1000), (1000, 5000)]
REPORTED = [(3000, 5000, 1000), (1001, 1003, 1000), (4096, 4096, 512), (512, 4096, 4096)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--calibration")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.calibration:
        os.environ["MKERNEL_CALIBRATION"] = args.calibration
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    lib = ctypes.CDLL(args.lib)
    lib.mkGemm.restype = ctypes.c_int
    lib.mkGemm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                           ctypes.c_void_p]
    gpu = torch.cuda.get_device_name(0)
    shapes = [(m, n, k) for (n, k) in NKS for m in MS] + REPORTED
    if args.quick:
        shapes = shapes[::7]
    ratios, failed = [], 0
    for (m, n, k) in shapes:
        for nk in (True, False):
            g = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
            a = torch.rand(m, k, device="cuda", generator=g).mul(2).sub(1).bfloat16()
            b = torch.rand((n, k) if nk else (k, n), device="cuda",
                           generator=g).mul(2).sub(1).bfloat16()
            c_mk = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            stream = torch.cuda.current_stream().cuda_stream

            def run_mk():
                rc = lib.mkGemm(a.data_ptr(), b.data_ptr(), c_mk.data_ptr(), m, n, k,
                                NCCL_BFLOAT16, LAYOUT_NK if nk else LAYOUT_KN, stream)
                if rc != 0:
                    raise RuntimeError("mkGemm returned %d" % rc)

            def run_torch():
                return torch.nn.functional.linear(a, b) if nk else a @ b

            times = {"mk": [], "torch": []}
            flops = 2.0 * m * n * k
            reps = max(10, min(args.reps, int(0.5 / max(flops / 600e12, 5e-6) / 2)))
            for r in range(10 + reps):
                order = (("mk", run_mk), ("torch", run_torch))
                for name, fn in (order if r % 2 == 0 else order[::-1]):
                    e0 = torch.cuda.Event(enable_timing=True)
                    e1 = torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fn()
                    e1.record()
                    if r >= 10:
                        times[name].append((e0, e1))
            torch.cuda.synchronize()
            med = {}
            for name, evs in times.items():
                t = sorted(e0.elapsed_time(e1) for e0, e1 in evs)
                med[name] = t[len(t) // 2]
            c_mk.fill_(float("nan"))
            run_mk()
            ref = run_torch().float()
            err = ((c_mk.float() - ref).norm() / ref.norm()).item()
            ok = math.isfinite(err) and err < 1e-2
            failed += not ok
            ratio = med["torch"] / med["mk"]
            ratios.append(ratio)
            print(json.dumps({"bench": "torch", "m": m, "n": n, "k": k,
                              "b_layout": "NK" if nk else "KN", "mk_ms": round(med["mk"], 5),
                              "torch_ms": round(med["torch"], 5), "ratio": round(ratio, 3),
                              "rel_err": err, "torch": torch.__version__, "gpu": gpu,
                              "reps": reps}), flush=True)
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print(json.dumps({"bench": "torch_summary", "cells": len(ratios),
                      "min_ratio": round(min(ratios), 3), "geomean": round(geo, 3),
                      "below_0.95": sum(x < 0.95 for x in ratios), "wrong_outputs": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
