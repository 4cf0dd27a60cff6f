#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""mkGroupedGemm (libmkernel.so through ctypes) against torch._grouped_mm, same process, same
inputs, same stream, alternating repetitions timed with CUDA event pairs after warm-ups; medians
(p10, p90) of each, TFLOP/s of useful work (2 x rows x N x K) and the ratio torch time / mkernel
time (above 1: mkernel is faster).

Shapes: DeepSeek-V3 experts (hidden 7168, expert intermediate 2048), 32 local experts, up
projection (N 2048, K 7168) and down projection (N 7168, K 2048), multinomial routing of 256 ..
65536 rows; B as nn.Linear weights (E x N x K, "NK") and as E x K x N ("KN").

Every shape is checked: mkernel's output against torch's (elements out of 2^-7 |torch| + 1e-5 K)
and both against an fp32 reference on 64 sampled rows (2^-8 |ref| + 1e-5 K). A wrong result
exits 1. One JSON line per shape, then a table.

usage: moe_grouped_bench.py LIBMKERNEL [--reps N] [--warmup N] [--quick] [--experts E]
"""
import argparse
import ctypes
import json
import subprocess
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32

NCCL_BFLOAT16 = 9
MK_LAYOUT_KN, MK_LAYOUT_NK = 0, 1


def load(path):
    lib = ctypes.CDLL(path)
    f = lib.mkGroupedGemm
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                  ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return f


def counts_multinomial(experts, rows, gen):
    pick = torch.randint(0, experts, (rows,), generator=gen)
    return torch.bincount(pick, minlength=experts)


def stats(ts):
    ts = sorted(ts)
    return ts[len(ts) // 2], ts[len(ts) // 10], ts[(len(ts) * 9) // 10]


def run_shape(mk, direction, rows, n, k, nk, experts, reps, warmup, gen):
    dev = torch.device("cuda")
    counts = counts_multinomial(experts, rows, gen)
    ends = torch.cumsum(counts, 0).to(torch.int32)
    offs_mk = torch.cat([torch.zeros(1, dtype=torch.int32), ends]).to(dev)  # E + 1, from 0
    offs_t = ends.to(dev)  # torch: end of each group
    a = (torch.rand(rows, k, device=dev) * 2 - 1).to(torch.bfloat16)
    if nk:
        w = (torch.rand(experts, n, k, device=dev) * 2 - 1).to(torch.bfloat16)
        mat_b = w.transpose(-2, -1)  # logical E x K x N, K contiguous
    else:
        w = (torch.rand(experts, k, n, device=dev) * 2 - 1).to(torch.bfloat16)
        mat_b = w
    c_mk = torch.empty(rows, n, device=dev, dtype=torch.bfloat16)
    stream = torch.cuda.current_stream()
    layout = MK_LAYOUT_NK if nk else MK_LAYOUT_KN

    def call_mk():
        r = mk(a.data_ptr(), w.data_ptr(), c_mk.data_ptr(), offs_mk.data_ptr(), experts,
               rows, n, k, NCCL_BFLOAT16, layout, stream.cuda_stream)
        if r != 0:
            raise RuntimeError("mkGroupedGemm returned %d" % r)

    def call_torch():
        return torch._grouped_mm(a, mat_b, offs=offs_t)

    # If libmkernel cannot run in this process (e.g. a CUDA runtime clash with torch's), torch
    # is still timed and the failure reported: mkernel-grouped-bench has mkernel's figures.
    mk_error = None
    try:
        call_mk()
        torch.cuda.synchronize()
    except Exception as ex:  # noqa: BLE001 - report any failure of the foreign library
        mk_error = str(ex)
    for _ in range(warmup):
        if mk_error is None:
            call_mk()
        c_t = call_torch()
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(reps)]
    for e in ev:
        e[0].record()
        if mk_error is None:
            call_mk()
        e[1].record()
        e[2].record()
        c_t = call_torch()
        e[3].record()
    torch.cuda.synchronize()
    t_mk = [e[0].elapsed_time(e[1]) for e in ev]
    t_t = [e[2].elapsed_time(e[3]) for e in ev]
    if mk_error is not None:
        t_med, t_p10, t_p90 = stats(t_t)
        return {"bench": "grouped_gemm_vs_torch", "dir": direction, "experts": experts,
                "rows": rows, "n": n, "k": k, "b_layout": "NK" if nk else "KN",
                "mk_error": mk_error, "baseline": "torch._grouped_mm", "baseline_ms": t_med,
                "baseline_p10_ms": t_p10, "baseline_p90_ms": t_p90,
                "baseline_tflops": 2.0 * rows * n * k / t_med / 1e9, "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name()}

    # Correctness: mkernel vs torch on every row; both vs fp32 on sampled rows.
    atol = 1e-5 * k
    diff = (c_mk.float() - c_t.float()).abs()
    bad_vs_torch = int((~(diff <= c_t.float().abs() * 2 ** -7 + atol)).sum())
    rows_s = torch.randint(0, rows, (64,), generator=gen).to(dev)
    expert_of = torch.searchsorted(ends.to(dev), rows_s, right=True)
    bad_ref = [0, 0]
    for i in range(rows_s.numel()):
        r, e = int(rows_s[i]), int(expert_of[i])
        be = w[e].float().t() if nk else w[e].float()
        ref = a[r].float() @ be
        for j, out in enumerate((c_mk, c_t)):
            err = (out[r].float() - ref).abs()
            bad_ref[j] += int((~(err <= ref.abs() * 2 ** -8 + atol)).sum())
    flop = 2.0 * rows * n * k
    m_med, m_p10, m_p90 = stats(t_mk)
    t_med, t_p10, t_p90 = stats(t_t)
    return {
        "bench": "grouped_gemm_vs_torch", "dir": direction, "experts": experts, "rows": rows,
        "n": n, "k": k, "b_layout": "NK" if nk else "KN", "routing": "multinomial",
        "min_count": int(counts.min()), "max_count": int(counts.max()),
        "empty_experts": int((counts == 0).sum()),
        "mk_ms": m_med, "mk_p10_ms": m_p10, "mk_p90_ms": m_p90, "mk_tflops": flop / m_med / 1e9,
        "baseline": "torch._grouped_mm", "baseline_ms": t_med, "baseline_p10_ms": t_p10,
        "baseline_p90_ms": t_p90, "baseline_tflops": flop / t_med / 1e9,
        "ratio": t_med / m_med, "bad_vs_torch": bad_vs_torch,
        "bad_vs_fp32_mk": bad_ref[0], "bad_vs_fp32_torch": bad_ref[1],
        "reps": reps, "warmup": warmup, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("lib")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    mk = load(args.lib)
    gen = torch.Generator().manual_seed(2026)
    rows_list = [1024, 8192] if args.quick else [256, 1024, 8192, 65536]
    try:
        git = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        git = "unknown"
    out, failed = [], False
    for direction, n, k in (("up", 2048, 7168), ("down", 7168, 2048)):
        for rows in rows_list:
            for nk in (True, False):
                if not nk and rows != 8192:
                    continue  # K x N at the headline size only
                r = run_shape(mk, direction, rows, n, k, nk, args.experts, args.reps,
                              args.warmup, gen)
                r["git"] = git
                print(json.dumps(r), flush=True)
                out.append(r)
                if "mk_error" in r:
                    print("FAIL %s rows %d: mkernel did not run: %s" % (direction, rows,
                          r["mk_error"]), file=sys.stderr)
                    failed = True
                    continue
                if r["bad_vs_torch"] or r["bad_vs_fp32_mk"]:
                    print("FAIL %s rows %d %s: %d elements off torch, %d off fp32" %
                          (direction, rows, r["b_layout"], r["bad_vs_torch"],
                           r["bad_vs_fp32_mk"]), file=sys.stderr)
                    failed = True
    print("\n| dir | rows | B | counts min..max | mkernel ms | TFLOP/s | torch._grouped_mm ms "
          "| TFLOP/s | ratio |\n|---|---|---|---|---|---|---|---|---|")
    for r in out:
        if "mk_error" in r:
            continue
        print("| %s | %d | %s | %d..%d | %.4f | %.1f | %.4f | %.1f | **%.3f** |" %
              (r["dir"], r["rows"], r["b_layout"], r["min_count"], r["max_count"], r["mk_ms"],
               r["mk_tflops"], r["baseline_ms"], r["baseline_tflops"], r["ratio"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
