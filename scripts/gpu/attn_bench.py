#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""mkAttention against PyTorch SDPA, one GPU, one process, one run.

For each shape (B=4, H=16, S from --seqs, D 128 and 64, causal and not) the same N(0, 1) bf16
inputs go to mkAttention (through ctypes on libmkernel.so, BSHD tensors) and to
torch.nn.functional.scaled_dot_product_attention under each backend that accepts the shape
(cuDNN, flash, efficient; BHSD views of the same tensors). Timing: warm-ups, then interleaved
rounds (every implementation once per round, --reps calls each, one CUDA event pair per call);
medians and p10/p90 over all calls; TFLOP/s with FlashAttention's convention (4 B H S^2 D,
halved when causal). Correctness with every shape: mkAttention's O against the best backend's
(max |diff|, relative RMS) and its LSE against the flash backend's logsumexp where it runs.

Output: one JSON line per implementation and shape, one summary line per shape with the ratio
mkernel / best backend (TFLOP/s), then a table. Exit 1 if mkAttention fails or an output is
off (relative RMS above 1e-2, max |diff| above 0.1, or LSE off by more than 1e-3).

Usage: attn_bench.py --lib build/fused/libmkernel.so.0 [--seqs 4096,8192] [--dims 128,64]
                     [--causal 0,1] [--rounds 3] [--reps 3] [--batch 4] [--heads 16]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
]


def load_mkernel(path):
    lib = ctypes.CDLL(path)
    fn = lib.mkAttention
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 7 + [ctypes.c_void_p]
    return fn


def git_hash(lib=None):
    """The revision of the library measured: a bundle's VERSION next to its lib/, else the
    checkout this script is in (a copied working tree's git may not be the build's)."""
    if lib:
        ver = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib))), "VERSION")
        try:
            with open(ver) as f:
                return f.read().strip() or "unknown"
        except OSError:
            pass
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                              text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                              check=False).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def flops(b, h, s, d, causal):
    return 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True, help="path to libmkernel.so")
    ap.add_argument("--seqs", default="4096,8192,16384,32768,65536")
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()

    mk = load_mkernel(args.lib)
    dev = torch.cuda.get_device_name(0)
    git = git_hash(args.lib)
    b, h = args.batch, args.heads
    summary = []
    failed = []

    for d in [int(x) for x in args.dims.split(",")]:
        for causal in [int(x) for x in args.causal.split(",")]:
            for s in [int(x) for x in args.seqs.split(",")]:
                torch.manual_seed(s + d + causal)
                q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn_like(q)
                v = torch.randn_like(q)
                o = torch.empty_like(q)
                lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # BHSD views
                stream = torch.cuda.current_stream().cuda_stream

                def run_mk():
                    rc = mk(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                            lse.data_ptr(), b, h, h, s, s, d, causal, stream)
                    if rc != 0:
                        raise RuntimeError("mkAttention returned %d" % rc)

                impls = [("mkernel", run_mk)]
                outs = {}
                for name, be in BACKENDS:
                    def run_sdpa(be=be):
                        with sdpa_kernel([be]):
                            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))
                    try:
                        outs[name] = run_sdpa()
                        torch.cuda.synchronize()
                        impls.append((name, run_sdpa))
                    except RuntimeError as e:
                        print(json.dumps({"bench": "attention_vs_sdpa", "impl": name, "B": b,
                                          "H": h, "S": s, "D": d, "causal": causal,
                                          "skipped": str(e).split("\n")[0][:160]}))

                times = {name: [] for name, _ in impls}
                try:
                    for name, fn in impls:
                        for _ in range(args.warmup):
                            fn()
                    torch.cuda.synchronize()
                    for _ in range(args.rounds):
                        for name, fn in impls:
                            ev = [(torch.cuda.Event(enable_timing=True),
                                   torch.cuda.Event(enable_timing=True)) for _ in range(args.reps)]
                            for e0, e1 in ev:
                                e0.record()
                                fn()
                                e1.record()
                            torch.cuda.synchronize()
                            times[name] += [e0.elapsed_time(e1) for e0, e1 in ev]
                except RuntimeError as e:
                    failed.append("S %d D %d causal %d: %s" % (s, d, causal, e))
                    print("FAIL:", failed[-1])
                    continue

                # correctness: mkernel against the best backend's output, LSE against flash's
                run_mk()
                torch.cuda.synchronize()
                row = {"bench": "attention_vs_sdpa_summary", "B": b, "H": h, "S": s, "D": d,
                       "causal": causal, "gpu": dev, "torch": torch.__version__, "git": git,
                       "rounds": args.rounds, "reps": args.reps, "warmup": args.warmup}
                tf = {}
                for name, _ in impls:
                    t = sorted(times[name])
                    med = statistics.median(t)
                    tf[name] = flops(b, h, s, d, causal) / (med * 1e-3) / 1e12
                    print(json.dumps({"bench": "attention_vs_sdpa", "impl": name, "B": b, "H": h,
                                      "S": s, "D": d, "causal": causal, "median_ms": round(med, 4),
                                      "p10_ms": round(t[len(t) // 10], 4),
                                      "p90_ms": round(t[(len(t) * 9) // 10], 4),
                                      "tflops": round(tf[name], 1), "gpu": dev, "git": git}))
                base = [n for n, _ in impls if n != "mkernel"]
                if base:
                    best = max(base, key=lambda n: tf[n])
                    ref = outs[best].transpose(1, 2).float()
                    diff = (o.float() - ref)
                    row["best_backend"] = best
                    row["best_tflops"] = round(tf[best], 1)
                    row["mkernel_tflops"] = round(tf["mkernel"], 1)
                    row["ratio_vs_best"] = round(tf["mkernel"] / tf[best], 3)
                    row["max_abs_diff"] = float(diff.abs().max())
                    row["rel_rms"] = float(diff.pow(2).mean().sqrt() / ref.pow(2).mean().sqrt())
                    if not (row["rel_rms"] <= 1e-2 and row["max_abs_diff"] <= 0.1):
                        failed.append("S %d D %d causal %d: O off (%g, %g)" % (
                            s, d, causal, row["max_abs_diff"], row["rel_rms"]))
                    del diff, ref
                if "flash" in outs:
                    try:
                        _, lse_ref = torch.ops.aten._scaled_dot_product_flash_attention(
                            qt, kt, vt, is_causal=bool(causal))[:2]
                        row["lse_max_abs_diff_vs_flash"] = float((lse - lse_ref.float()).abs().max())
                        if row["lse_max_abs_diff_vs_flash"] > 1e-3:
                            failed.append("S %d D %d causal %d: LSE off by %g" % (
                                s, d, causal, row["lse_max_abs_diff_vs_flash"]))
                    except RuntimeError as e:
                        row["lse_check"] = "flash logsumexp unavailable: %s" % str(e)[:80]
                print(json.dumps(row))
                sys.stdout.flush()
                summary.append(row)
                del q, k, v, o, lse, qt, kt, vt, outs
                torch.cuda.empty_cache()

    print("\n%-4s %-3s %-6s %-6s %9s %-10s %9s %7s %10s %9s" % (
        "D", "c", "S", "", "mk TF/s", "best", "TF/s", "ratio", "max|diff|", "rel rms"))
    for r in summary:
        print("%-4d %-3d %-6d %-6s %9.1f %-10s %9.1f %7.3f %10.3g %9.3g" % (
            r["D"], r["causal"], r["S"], "", r.get("mkernel_tflops", float("nan")),
            r.get("best_backend", "-"), r.get("best_tflops", float("nan")),
            r.get("ratio_vs_best", float("nan")), r.get("max_abs_diff", float("nan")),
            r.get("rel_rms", float("nan"))))
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
