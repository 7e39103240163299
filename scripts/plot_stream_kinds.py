#!/usr/bin/env python3
"""Draws the CSV files of `dedupd-lab stream-kinds` as PNGs next to them.

Usage: scripts/plot_stream_kinds.py [DIR]   (default: docs/dev/rsbf-stable)

Needs matplotlib (`pip install matplotlib`); reads only the CSV files.
  rates.png        FNR and FPR against memory, per share of distinct records
  convergence.png  fraction of ones (RSBF) / non-zero cells (SBF) along the stream
  stretch_fnr.png  FNR inside each 1% of the stream
"""

import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KINDS = {"rsbf": ("RSBF", "C0", "-"), "stable": ("SBF (fpr 0.1)", "C1", "--"),
         "stable-matched": ("SBF (RSBF's FPR)", "C2", ":"), "timer": ("timer", "C3", "-.")}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def rates(d):
    rows = read(d / "summary.csv")
    shares = sorted({r["distinct_target"] for r in rows}, key=float, reverse=True)
    fig, axes = plt.subplots(2, len(shares), figsize=(4 * len(shares), 7), squeeze=False)
    for col, share in enumerate(shares):
        for kind, (label, color, style) in KINDS.items():
            pts = sorted((int(r["memory_bits"]), float(r["fnr"]), float(r["fpr"]))
                         for r in rows if r["distinct_target"] == share and r["kind"] == kind)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            axes[0][col].plot(xs, [100 * p[1] for p in pts], style, color=color, marker="o", label=label)
            axes[1][col].plot(xs, [100 * p[2] for p in pts], style, color=color, marker="o", label=label)
        records = rows[0]["records"]
        axes[0][col].set_title(f"{float(share):.0%} distinct, {int(records):,} records")
        for row, what in enumerate(["FNR %", "FPR %"]):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            ax.set_xlabel("memory (bits)")
            ax.set_ylabel(what)
            ax.grid(alpha=0.3)
        axes[1][col].set_yscale("log")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "rates.png", dpi=110)


def along(d, column, name, ylabel, kinds):
    rows = read(d / "convergence.csv")
    summary = {(r["distinct_target"], r["memory_bits"], r["kind"]): r for r in read(d / "summary.csv")}
    series = defaultdict(list)
    for r in rows:
        series[(r["distinct_target"], r["memory_bits"], r["kind"])].append((int(r["position"]), float(r[column])))
    shares = sorted({k[0] for k in series}, key=float, reverse=True)
    mems = sorted({k[1] for k in series}, key=int)
    fig, axes = plt.subplots(len(shares), len(mems), figsize=(3.6 * len(mems), 2.8 * len(shares)), squeeze=False)
    for i, share in enumerate(shares):
        for j, mem in enumerate(mems):
            ax = axes[i][j]
            for kind in kinds:
                label, color, style = KINDS[kind]
                pts = series.get((share, mem, kind))
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=label)
                s = summary.get((share, mem, kind))
                if column == "ones_fraction" and s and s["expected_ones_fraction"] not in ("", "NaN", "nan"):
                    ax.axhline(float(s["expected_ones_fraction"]), color=color, lw=0.6, alpha=0.6)
            ax.set_title(f"{float(share):.0%} distinct, 2^{int(mem).bit_length() - 1} bits", fontsize=9)
            ax.set_xlabel("records")
            ax.set_ylabel(ylabel, fontsize=8)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(d / name, dpi=100)


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dev/rsbf-stable")
    rates(d)
    along(d, "ones_fraction", "convergence.png", "fraction of ones / non-zero", ["rsbf", "stable", "stable-matched"])
    along(d, "fnr", "stretch_fnr.png", "FNR in each 1%", ["rsbf", "stable", "stable-matched"])


if __name__ == "__main__":
    main()
