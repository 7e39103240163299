#!/usr/bin/env python3
"""Draws the growth-of-cost CSV of `cargo run --release --example cost_curve`
as two PNGs next to it: time per event and memory against filter size, and
against window population.

    scripts/plot_cost.py [CSV]     (default: docs/dev/performance/cost.csv)

Needs matplotlib; reads only the CSV, so it can be re-run without re-measuring.
"""

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# This machine's caches (lscpu): where the size curve is expected to bend.
CACHES = [("L1d 48 KiB", 48 << 10), ("L2 1 MiB", 1 << 20), ("L3 32 MiB", 32 << 20)]


def main():
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dev/performance/cost.csv")
    rows = list(csv.DictReader(path.open()))
    size = [r for r in rows if r["curve"] == "size"]
    pop = [r for r in rows if r["curve"] == "population"]

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for layout, style in (("standard", "o-"), ("blocked", "s--")):
        pts = [r for r in size if r["layout"] == layout]
        ax.plot([int(r["cells_bytes"]) for r in pts], [float(r["ns_per_event"]) for r in pts], style, label=layout)
    for name, at in CACHES:
        ax.axvline(at, color="grey", lw=0.8, ls=":")
        ax.text(at, ax.get_ylim()[1] * 0.95, " " + name, fontsize=8, color="grey", va="top")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes of cells (8-bit timers, k = 7, window filling it to 1% FPR)")
    ax.set_ylabel("ns per test-then-insert (hashing included)")
    ax.set_title("Time per event against filter size")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = path.with_name("cost_vs_size.png")
    fig.savefig(out, dpi=110)
    print(out)

    fig, ax1 = plt.subplots(figsize=(8, 4.5))
    keys = [int(r["window_keys"]) for r in pop]
    ax1.plot(keys, [float(r["ns_per_event"]) for r in pop], "o-", color="C0", label="ns per event")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel(f"keys in the window (filter configured for {int(pop[0]['expected_keys']):,}; density growth)")
    ax1.set_ylabel("ns per test-then-insert", color="C0")
    ax2 = ax1.twinx()
    ax2.plot(keys, [int(r["memory_bytes"]) / 2**20 for r in pop], "s--", color="C1", label="memory")
    ax2.set_ylabel("MiB of cells and histograms", color="C1")
    for r in pop:
        ax2.annotate(f"{r['generations']} gen", (int(r["window_keys"]), int(r["memory_bytes"]) / 2**20),
                     fontsize=7, textcoords="offset points", xytext=(0, 6), ha="center")
    ax1.set_title("Time per event and memory against window population")
    ax1.grid(alpha=0.3)
    fig.tight_layout()
    out = path.with_name("cost_vs_population.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
