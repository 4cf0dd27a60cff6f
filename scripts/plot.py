#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turn mkernel benchmark JSON lines into PNG plots.

usage: scripts/plot.py <jsonl> [<jsonl> ...] --out DIR

Recognised records (one plot per kind found):
  mkernel-netbench / rawbench-ofi bandwidth  -> netbench-bw-w<window>.png (GB/s vs size, plugin
                                                 and raw ceiling)
  nccl-fake-nodes all_reduce, all_gather     -> nccl-busbw.png (busbw vs size per configuration,
                                                medians over rounds)
  mkernel-gemm-bench                         -> gemm-ratio.png (engine / cuBLAS per shape)
  mkernel-gemm-bench grid (mkgemm)            -> gemm-grid.png (cuBLAS / mkGemm per cell vs M,
                                                 one panel per B layout, marker = path taken)
  test-gar-gpu --bench (gemm_allreduce)      -> gemm-allreduce.png (fused, cuBLAS + NCCL and
                                                 GEMM alone vs M = N, one panel per layout)
  test-gar-gpu --bench (gemm_allreduce_splits) -> gemm-allreduce-splits.png (adaptive controller
                                                 and policy split vs the best static split)
  test-seqpar-gpu --bench (gemm_rs, ag_gemm)  -> gemm-rs.png, ag-gemm.png (fused and default path
                                                 vs cuBLAS + NCCL, fused vs max(GEMM, collective))
                                                 and gemm-rs-splits.png, ag-gemm-splits.png
  moe_bench.py (moe_dispatch_gemm, moe_gemm_combine) -> moe.png (ratio vs global tokens)
  attn_bench.py (attention_vs_sdpa_summary)  -> attention.png (mkAttention / fastest SDPA backend
                                                 vs sequence, per head dim and mask)
  attn_ring_bench.py (ring_attention)         -> ring-attention.png (speedup vs total sequence,
                                                 against all-gather + SDPA and a ring of SDPA)
Emulated records are labelled in the plot titles.
"""
import argparse
import collections
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def plot_netbench(rows, out):
    bw = [r for r in rows if r.get("mode") == "bw" and r.get("tool") in
          ("mkernel-netbench", "rawbench-ofi") and "gbps_median" in r]
    made = []
    for win in sorted({r["window"] for r in bw}):
        series = collections.defaultdict(list)
        for r in bw:
            if r["window"] == win:
                key = "plugin" if r["tool"] == "mkernel-netbench" else "raw libfabric"
                series[key].append((r["size"], r["gbps_median"]))
        fig, ax = plt.subplots(figsize=(6, 4))
        for key, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key)
        prov = next((r.get("provider") for r in bw if r.get("provider")), "")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("GB/s (median)")
        ax.set_title(f"mkernel-netbench, {prov}, {win} in flight")
        ax.grid(True, alpha=0.3)
        ax.legend()
        path = os.path.join(out, f"netbench-bw-w{win}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        made.append(path)
    return made


def plot_nccl(rows, out):
    recs = [r for r in rows if r.get("tool") == "nccl-fake-nodes" and "busbw_gbps" in r]
    if not recs:
        return []
    ops = sorted({r["op"] for r in recs})
    fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4), squeeze=False)
    for ax, op in zip(axes[0], ops):
        # several rounds per point: the median, as the script's summary takes it
        pts = collections.defaultdict(list)
        for r in recs:
            if r["op"] == op:
                pts[(r["config"], r["bytes"])].append(r["busbw_gbps"])
        for config in sorted({k[0] for k in pts}):
            xs = sorted(b for c, b in pts if c == config)
            ax.plot(xs, [statistics.median(pts[(config, b)]) for b in xs], marker="o",
                    label=config)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"{op} size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"stock NCCL {op}, 2 fake nodes on one GPU (emulated)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    path = os.path.join(out, "nccl-busbw.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def plot_gemm(rows, out):
    g = [r for r in rows if r.get("tool") == "mkernel-gemm-bench" and "ratio" in r]
    if not g:
        return []
    labels = [f"{r.get('m')}x{r.get('n')}x{r.get('k')} {r.get('sms', '')}" for r in g]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(range(len(g)), [r["ratio"] for r in g])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(g)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("cuBLAS time / engine time")
    ax.set_title("mkernel GEMM engine vs cuBLAS")
    return save(fig, out, "gemm-ratio.png")


def save(fig, out, name):
    """Lay out, write out/name at 120 dpi, close; the list of written paths."""
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def plot_gemm_grid(rows, out):
    g = [r for r in rows if r.get("bench") == "mkgemm" and r.get("group") == "grid"]
    if not g:
        return []
    marks = {"skinny": "*", "cublas": "o", "cublaslt": "s"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, lay in zip(axes, ("NK", "KN")):
        by_path = collections.defaultdict(list)
        for r in g:
            if r["b_layout"] == lay:
                path = r["path"] if r["path"] in marks else "engine"
                by_path[path].append(r)
        for path, rs in sorted(by_path.items()):
            ax.scatter([r["m"] for r in rs], [r["ratio"] for r in rs], s=18,
                       marker=marks.get(path, "^"), label=f"{path} ({len(rs)})")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(0.95, color="r", lw=0.6, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (9 N x K pairs per M)")
        ax.set_title(f"B {lay}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("cuBLAS time / mkGemm time")
    fig.suptitle("mkGemm vs the faster of cuBLASLt and cublasGemmEx, per cell (path taken)")
    return save(fig, out, "gemm-grid.png")


def layout_panels(rows, bench, out, name, draw, xlabel="M = N (K = N / 16)"):
    """One panel per (nodes, ranks per node) of the `bench` records, x = M; `draw(ax, rs, x)`
    adds the curves and the y axis."""
    g = [r for r in rows if r.get("bench") == bench]
    if not g:
        return []
    layouts = sorted({(r["nnodes"], r["nlocal"]) for r in g})
    fig, axes = plt.subplots(1, len(layouts), figsize=(5 * len(layouts), 4), squeeze=False)
    for ax, (nn, nl) in zip(axes[0], layouts):
        rs = sorted((r for r in g if (r["nnodes"], r["nlocal"]) == (nn, nl)),
                    key=lambda r: r["m"])
        draw(ax, rs, [r["m"] for r in rs])
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        emu = " (emulated)" if any(r.get("emulated") for r in rs) else ""
        ax.set_title(f"{nn} node(s) x {nl} rank(s){emu}")
        ax.legend(fontsize=7)
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def draw_splits(ax, rs, x):
    for key, label in (("adaptive_ms", "adaptive controller"),
                       ("policy_static_ms", "policy engine's static split")):
        ax.plot(x, [r["best_static_ms"] / r[key] for r in rs], marker="o", label=label)
    ax.axhline(0.95, color="grey", linestyle="--", linewidth=1, label="goal 0.95")
    ax.set_ylabel("best static time / time (higher is better)")


def plot_seqpar(rows, out):
    """mkGemmReduceScatter / mkAllGatherGemm benchmarks: speed against cuBLAS + NCCL (forced
    fused path and the default choice) and against the overlap bound max(GEMM, collective)."""
    made = []
    for bench, name, xlabel in (("gemm_rs", "gemm-rs", "M = N (K = N / 16)"),
                                ("ag_gemm", "ag-gemm", "M = K (N = M / ranks)")):
        def draw(ax, rs, x):
            for key, label in (("speedup_fused", "fused / cuBLAS + NCCL"),
                               ("speedup_auto", "default path / cuBLAS + NCCL")):
                ax.plot(x, [r[key] for r in rs], marker="o", label=label)
            ax.plot(x, [1 / r["fused_over_bound"] for r in rs], marker="s",
                    label="max(GEMM, collective) / fused")
            ax.axhline(1.0, color="k", linewidth=0.8)
            ax.set_ylabel("speed ratio (higher is better)")

        made += layout_panels(rows, bench, out, name + ".png", draw, xlabel)
        made += layout_panels(rows, bench + "_splits", out, name + "-splits.png", draw_splits,
                              xlabel)
    return made


def plot_gemm_allreduce_splits(rows, out):
    return layout_panels(rows, "gemm_allreduce_splits", out, "gemm-allreduce-splits.png",
                         draw_splits)


def plot_gemm_allreduce(rows, out):
    def draw(ax, rs, x):
        for key, label in (("fused_ms", "mkGemmAllReduce (fused)"),
                           ("cublas_nccl_ms", "cuBLAS + ncclAllReduce"),
                           ("gemm_only_ms", "GEMM alone")):
            ax.plot(x, [r[key] for r in rs], marker="o", label=label)
        ax.set_yscale("log")
        ax.set_ylabel("ms (median)")

    return layout_panels(rows, "gemm_allreduce", out, "gemm-allreduce.png", draw)


def emulated(rs):
    return " (emulated)" if any(r.get("emulated") for r in rs) else ""


def finish_ratio(fig, ax, out, name, xlabel, ylabel, title, legend_size=None):
    """A ratio-against-baseline plot over log2 x: the 1.0 line, labels, saved as out/name."""
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def plot_moe(rows, out):
    g = [r for r in rows if r.get("bench") in ("moe_dispatch_gemm", "moe_gemm_combine")]
    if not g:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for op in ("moe_dispatch_gemm", "moe_gemm_combine"):
        rs = sorted((r for r in g if r["bench"] == op), key=lambda r: r["tokens_global"])
        if rs:
            ax.plot([r["tokens_global"] for r in rs], [r["ratio"] for r in rs], marker="o",
                    label=op)
    return finish_ratio(fig, ax, out, "moe.png", "tokens (global)",
                        "all_to_all_single + torch._grouped_mm time / mkernel time",
                        "MoE dispatch+GEMM and GEMM+combine" + emulated(g))


def plot_ring(rows, out):
    g = [r for r in rows if r.get("bench") == "ring_attention"]
    if not g:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for causal in (0, 1):
        rs = sorted((r for r in g if r["causal"] == causal), key=lambda r: r["seq_total"])
        for key, what in (("speedup_vs_allgather_sdpa", "all-gather K,V + SDPA"),
                          ("speedup_vs_ring_sdpa", "ring of SDPA")):
            if rs:
                ax.plot([r["seq_total"] for r in rs], [r[key] for r in rs], marker="o",
                        label=f"vs {what}, {'causal' if causal else 'non-causal'}")
    return finish_ratio(fig, ax, out, "ring-attention.png", "total sequence",
                        "baseline time / mkRingAttention time", "mkRingAttention" + emulated(g),
                        legend_size=7)


def plot_attention(rows, out):
    g = [r for r in rows if r.get("bench") == "attention_vs_sdpa_summary"]
    if not g:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for d in sorted({r["D"] for r in g}, reverse=True):
        for causal in (0, 1):
            rs = sorted((r for r in g if r["D"] == d and r["causal"] == causal),
                        key=lambda r: r["S"])
            if rs:
                ax.plot([r["S"] for r in rs], [r["ratio_vs_best"] for r in rs], marker="o",
                        label=f"D {d}, {'causal' if causal else 'non-causal'}")
    ax.axhline(0.9, color="gray", lw=0.8, ls="--")
    return finish_ratio(fig, ax, out, "attention.png", "sequence length S (B 4, H 16)",
                        "fastest SDPA backend time / mkAttention time",
                        "mkAttention vs PyTorch SDPA" + emulated(g))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = load(a.jsonl)
    made = (plot_netbench(rows, a.out) + plot_nccl(rows, a.out) + plot_gemm(rows, a.out) + plot_gemm_grid(rows, a.out) +
            plot_gemm_allreduce(rows, a.out) + plot_gemm_allreduce_splits(rows, a.out) +
            plot_seqpar(rows, a.out) + plot_moe(rows, a.out) + plot_ring(rows, a.out) +
            plot_attention(rows, a.out))
    for m in made:
        print(m)
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
