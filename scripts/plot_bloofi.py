#!/usr/bin/env python3
"""Draws docs/dev/provenance/bloofi.csv (from `dedupd-lab bloofi`) as bloofi.png beside it:
filters checked per query and query time against N, for the naive scan, Bloofi with and
without the saturation rule, and Flat-Bloofi, with the Bloofi paper's figures marked.

Usage: scripts/plot_bloofi.py [DIR]   (default: docs/dev/provenance)

Needs matplotlib (`pip install matplotlib`).
"""

import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The paper's search bf-cost with and without the saturation rule (Section 7.2.1).
PAPER = {"bloofi": {10_000: 104.29, 100_000: 876.33}, "bloofi-no-saturation-rule": {10_000: 110.17, 100_000: 974.92}}
STYLE = {
    "naive": ("tab:grey", "o"),
    "bloofi": ("tab:blue", "s"),
    "bloofi-no-saturation-rule": ("tab:cyan", "^"),
    "flat-bloofi": ("tab:red", "D"),
}


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dev/provenance")
    rows = defaultdict(list)
    with open(d / "bloofi.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows[r["index"]].append(r)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for index, sel in rows.items():
        color, marker = STYLE.get(index, ("black", "x"))
        n = [int(r["filters"]) for r in sel]
        if index != "flat-bloofi":
            ax1.plot(n, [float(r["checked_per_query"]) for r in sel], color=color, marker=marker, label=index)
        ax2.plot(n, [float(r["micros_per_query"]) for r in sel], color=color, marker=marker, label=index)
        for x, y in PAPER.get(index, {}).items():
            ax1.scatter([x], [y], color=color, marker=marker, facecolors="none", s=120, zorder=5)
    ax1.scatter([], [], color="black", marker="o", facecolors="none", s=120, label="the paper (hollow)")
    ax1.set(xlabel="filters N", ylabel="filters (tree nodes) checked per query",
            title="Search cost: m = 100,992, k = 7, n = 100, d = 2")
    ax2.set(xlabel="filters N", ylabel="µs per query (fastest of 5 passes)", title="Search time on this machine")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "bloofi.png", dpi=110)
    print(f"wrote {d / 'bloofi.png'}")


if __name__ == "__main__":
    main()
