#!/usr/bin/env python3
"""Draws the CSV files of `dedupd-lab accuracy` as PNGs next to them.

Usage: scripts/plot_accuracy.py [DIR]   (default: docs/dev/accuracy)

Needs matplotlib (`pip install matplotlib`); reads only the CSV files, so it
can be re-run without re-running the experiments.
"""

import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(row, col):
    return float(row[col])


def slicing(d):
    rows = read(d / "slicing.csv")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for keys, marker in (("uniform", "o"), ("zipf1.0", "s")):
        sel = [r for r in rows if r["keys"] == keys]
        s = [num(r, "slices") for r in sel]
        ax1.plot(s, [num(r, "end_fpr") for r in sel], marker=marker, label=f"{keys}: measured")
        ax1.plot(s, [num(r, "theory_eq4_fpr") for r in sel], ls="--", marker=marker, mfc="none", label=f"{keys}: Eq. 4")
        ax2.plot(s, [num(r, "end_fpr") / num(r, "theory_eq4_fpr") for r in sel], marker=marker,
                 label=f"{keys}: end state")
        ax2.plot(s, [num(r, "stream_fpr") / num(r, "theory_stream_fpr") for r in sel], ls=":", marker=marker,
                 label=f"{keys}: along the stream")
    ax1.set(xlabel="slices S", ylabel="FPR", title="Horizontal slicing, k = 4, p = 0.02")
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set(xlabel="slices S", ylabel="measured / theory", title="Excess over Eq. 4")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ticks = sorted({int(num(r, "slices")) for r in rows})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "slicing.png", dpi=110)
    plt.close(fig)


def equal_timers(d):
    rows = read(d / "equal_timers.csv")
    dist = read(d / "equal_timers_distribution.csv")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for stream, marker, color in (("recurring", "o", "tab:blue"), ("zipf1.0", "s", "tab:orange")):
        sel = [r for r in rows if r["stream"] == stream]
        kp = [num(r, "k_prime") for r in sel]
        axes[0].plot(kp, [num(r, "fpr") for r in sel], marker=marker, color=color, label=f"{stream}: FPR")
        axes[0].plot(kp, [max(num(r, "fpr_collision"), 1e-6) for r in sel], ls=":", marker=marker, color=color,
                     label=f"{stream}: FPR from collisions (0 drawn at 1e-6)")
        axes[1].plot(kp, [num(r, "fnr") for r in sel], marker=marker, color=color, label=f"{stream}: FNR")
        sel = [r for r in dist if r["stream"] == stream]
        x = [num(r, "x_equal") + (-0.2 if stream == "recurring" else 0.2) for r in sel]
        axes[2].bar(x, [num(r, "share_of_true_duplicates") for r in sel], width=0.4, color=color,
                    label=f"{stream}: true duplicates")
        axes[2].plot([num(r, "x_equal") for r in sel], [num(r, "share_of_false_positives") for r in sel], marker=marker,
                     color="navy" if stream == "recurring" else "darkred", label=f"{stream}: false positives")
    axes[0].set(yscale="log", xlabel="k' (0 = off)", ylabel="rate", title="FPR vs k' (k = 8)")
    axes[1].set(xlabel="k' (0 = off)", ylabel="rate", title="FNR vs k'")
    axes[2].set(xlabel="largest group of equal timers x", ylabel="share", title="Duplicate verdicts by x (k' = 0)")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(d / "equal_timers.png", dpi=110)
    plt.close(fig)


def rolling(xs, n):
    """Mean of the last n values at each point (samples are every W/20)."""
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= n:
            acc -= xs[i - n]
        out.append(acc / min(i + 1, n))
    return out


def growth_bursts(d):
    rows = read(d / "growth_bursts.csv")
    runs = defaultdict(list)
    for r in rows:
        runs[(r["window_units"], r["burst"], r["growth"], r["mode"])].append(r)
    windows = sorted({k[0] for k in runs}, key=int)
    for burst in sorted({k[1] for k in runs}, key=int):
        fig, axes = plt.subplots(len(windows), 3, figsize=(16, 3.2 * len(windows)), squeeze=False)
        for i, w in enumerate(windows):
            for (rw, rb, growth, mode), sel in sorted(runs.items()):
                if rw != w or rb != burst:
                    continue
                t = [num(r, "t_units") for r in sel]
                label = growth if mode == "-" else f"{growth}, {mode}"
                axes[i][0].step(t, [num(r, "generations") for r in sel], where="post", label=label)
                axes[i][1].step(t, [num(r, "memory_bytes") / 1e3 for r in sel], where="post", label=label)
                fpr = rolling([num(r, "measured_fpr") for r in sel], 20)
                axes[i][2].plot(t, [max(x, 1e-5) for x in fpr], lw=0.8, label=label)
            axes[i][0].set(ylabel=f"W = {w}\ngenerations")
            axes[i][1].set(ylabel="memory (kB)", yscale="log")
            axes[i][2].set(ylabel="measured FPR", yscale="log")
        for j, title in enumerate(("generations alive", "memory", f"measured FPR, mean over W (burst {burst}x)")):
            axes[0][j].set_title(title)
            axes[-1][j].set_xlabel("time (units)")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(d / f"growth_bursts_{burst}x.png", dpi=100)
        plt.close(fig)


def undersized(d):
    rows = read(d / "undersized.csv")
    fig, ax = plt.subplots(figsize=(10, 4))
    labels, values, colors = [], [], []
    for r in rows:
        sized = "right size" if r["expected_keys"] == r["true_keys"] else "10x small"
        labels.append(f"{r['stream']}\n{r['growth']} {r['mode']}\n{sized}")
        values.append(max(num(r, "fpr"), 1e-5))
        colors.append("tab:blue" if r["stream"] == "recurring" else "tab:orange")
    ax.bar(range(len(values)), values, color=colors)
    ax.axhline(0.03, color="red", ls="--", lw=0.8, label="design limit 0.03")
    ax.axhline(0.01, color="grey", ls=":", lw=0.8, label="target 0.01")
    ax.set_xticks(range(len(values)), labels, fontsize=6)
    ax.set(yscale="log", ylabel="FPR", title="expected_keys 10x too small")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "undersized.png", dpi=110)
    plt.close(fig)


def timer_widths(d):
    rows = read(d / "timer_widths.csv")
    exact = next(r for r in rows if r["timer_bits"] == "exact")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for growth, marker in (("none", "o"), ("density", "s")):
        sel = [r for r in rows if r["growth"] == growth]
        bits = [num(r, "timer_bits") for r in sel]
        ax1.plot(bits, [num(r, "bits_per_key") for r in sel], marker=marker, label=f"growth {growth}")
        ax2.plot(bits, [num(r, "fpr") for r in sel], marker=marker, label=f"FPR, growth {growth}")
        ax2.plot(bits, [num(r, "fpr_edge") for r in sel], ls=":", marker=marker, label=f"edge FPR, growth {growth}")
    ax1.axhline(num(exact, "bits_per_key"), color="red", ls="--", label="exact table (80% load)")
    ax1.axhline(num(exact, "cell_bits_per_key"), color="red", ls=":", label="exact, raw 96 bits")
    ax1.set(xlabel="timer bits", ylabel="bits per in-window key", title="Memory")
    ax2.set(yscale="log", xlabel="timer bits", ylabel="rate", title="FPR (target 0.01)")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks([4, 6, 8, 12, 16, 32], ["4", "6", "8", "12", "16", "32"])
        ax.minorticks_off()
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "timer_widths.png", dpi=110)
    plt.close(fig)


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dev/accuracy")
    for plot in (slicing, equal_timers, growth_bursts, undersized, timer_widths):
        plot(d)
        print(f"{plot.__name__}: done", file=sys.stderr)


if __name__ == "__main__":
    main()
