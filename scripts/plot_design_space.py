#!/usr/bin/env python3
"""Draws the CSV files of `dedupd-lab design-space` as PNGs next to them.

Usage: scripts/plot_design_space.py [DIR]   (default: docs/dev/paper-reproduction)

Needs matplotlib; reads only the CSV files.
  fig1.png   (a) FPR with f of 40 slices failed, (b) S_f against f
  fig5.png   (a) FPR against slices, (b) fairness, (c) max load share, (d) x-of-k heuristic
  fig7c.png  messages per lookup, parallel and pipelined
  fig12.png  (a) where lookups resolve, (b) accesses per level, (c) top-down testing
"""

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DATA = {"uniform": "C0", "zipf1.0": "C1", "text": "C2"}


def read(d, name):
    with open(d / name, newline="") as f:
        return list(csv.DictReader(f))


def col(rows, name, cast=float):
    return [cast(r[name]) for r in rows]


def finish(ax, xlabel, ylabel, title=None, legend=7):
    """Labels, legend and grid of one panel."""
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=legend)
    ax.grid(alpha=0.3)


def save(fig, d, name, dpi=110):
    fig.tight_layout()
    fig.savefig(d / name, dpi=dpi)


def fig1(d):
    rows = read(d, "failures.csv")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for data, c in DATA.items():
        r = [x for x in rows if x["data"] == data]
        if not r:
            continue
        x = col(r, "failed_pct")
        a.plot(x, col(r, "h_fpr"), "o", color=c, ms=4, label=f"{data} horizontal")
        a.plot(x, col(r, "v_fpr"), "s", color=c, ms=4, mfc="none", label=f"{data} vertical")
    r = [x for x in rows if x["data"] == rows[0]["data"]]
    a.plot(col(r, "failed_pct"), col(r, "eq5"), "k-", lw=1, label="Eq. 5 (horizontal)")
    a.plot(col(r, "failed_pct"), col(r, "eq6"), "k--", lw=1, label="Eq. 6 (vertical)")
    finish(a, "failed slices (% of 40)", "false-positive rate", "(a) failed slices treated as set, P_fp = 0.05, k = 4")
    sf = read(d, "sf.csv")
    for p_max, c in [("0.1", "C0"), ("0.15", "C1"), ("0.2", "C2")]:
        r = [x for x in sf if x["p_max"] == p_max and x["p_fp"] == "0.05"]
        b.plot(col(r, "failed"), col(r, "sf_horizontal"), "-", color=c, label=f"horizontal, P_max {p_max}")
        b.plot(col(r, "failed"), col(r, "sf_vertical"), "--", color=c, label=f"vertical, P_max {p_max}")
    finish(b, "failed slices f", "S_f (slices needed)", "(b) fault-tolerance parameter, P_fp = 0.05, k = 4")
    save(fig, d, "fig1.png")


def fig5(d):
    rows = read(d, "slicing.csv")
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    a, b, c, e = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    for data, color in DATA.items():
        for p, style in [("0.02", ":"), ("0.05", "-"), ("0.08", "--")]:
            for mode, marker in [("horizontal", "o"), ("vertical", "s")]:
                r = [x for x in rows if x["data"] == data and x["p"] == p and x["mode"] == mode]
                if not r:
                    continue
                label = f"{data} {mode}" if p == "0.05" else None
                a.plot(col(r, "slices"), col(r, "end_fpr"), style, marker=marker, color=color, ms=3,
                       mfc="none" if mode == "vertical" else color, label=label)
        for mode, style in [("horizontal", "-o"), ("vertical", "--s")]:
            r = [x for x in rows if x["data"] == data and x["p"] == "0.05" and x["mode"] == mode]
            if r:
                b.plot(col(r, "slices"), col(r, "fairness"), style, color=color, ms=3, label=f"{data} {mode}")
                c.plot(col(r, "slices"), col(r, "max_share"), style, color=color, ms=3, label=f"{data} {mode}")
    r = [x for x in rows if x["data"] == rows[0]["data"] and x["mode"] == "horizontal"]
    for p in ["0.02", "0.05", "0.08"]:
        rp = [x for x in r if x["p"] == p]
        a.plot(col(rp, "slices"), col(rp, "theory_end_fpr"), "k-", lw=0.7)
    a.set_title("(a) FPR of never-seen keys after the stream\n(dotted/solid/dashed: P_fp 0.02/0.05/0.08; black: Eq. 4)")
    b.set_title("(b) fairness of the load (P_fp 0.05)")
    s = sorted({int(x["slices"]) for x in rows})
    c.plot(s, [1 / x for x in s], "k:", lw=1, label="1/S (optimal)")
    c.set_title("(c) busiest slice's share of the load")
    for ax in (a, b, c):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("slices S")
        ax.grid(alpha=0.3)
    c.set_yscale("log")
    a.legend(fontsize=6)
    b.legend(fontsize=6)
    c.legend(fontsize=6)
    h = read(d, "heuristic.csv")
    for data, color in DATA.items():
        r = [x for x in h if x["data"] == data and x["p"] == "0.05"]
        if not r:
            continue
        e.plot(col(r, "x"), col(r, "fpr"), "-o", color=color, ms=3, label=f"{data} FPR")
        e.plot(col(r, "x"), col(r, "fnr"), "--s", color=color, ms=3, label=f"{data} FNR")
    r = [x for x in h if x["data"] == h[0]["data"] and x["p"] == "0.05"]
    e.plot(col(r, "x"), col(r, "theory_fpr"), "k-", lw=0.7, label="FPR, exact model")
    e.plot(col(r, "x"), col(r, "theory_fnr"), "k--", lw=0.7, label="FNR, P(Bin(k,1-f/S) < x)")
    e.set_yscale("log")
    e.set_ylim(1e-4, 1.2)
    finish(e, "x (live set cells needed for a duplicate)", "rate",
           "(d) x-of-k heuristic: k = 8, 8 of 40 slices failed, P_fp 0.05", legend=6)
    save(fig, d, "fig5.png")


def fig7c(d):
    rows = read(d, "pipelining.csv")
    fig, ax = plt.subplots(figsize=(6, 4))
    for target, color in [("0.8", "C0"), ("0.5", "C1"), ("0.2", "C2")]:
        r = [x for x in rows if x["distinct_target"] == target]
        ax.plot(col(r, "slices"), col(r, "pipelined"), "-o", color=color, ms=3,
                label=f"pipelined, {float(target):.0%} distinct")
        ax.plot(col(r, "slices"), col(r, "parallel"), ":", color=color, label=f"parallel, {float(target):.0%} distinct")
    ax.set_xscale("log", base=2)
    finish(ax, "vertical slices S (k = 4)", "slices contacted per lookup")
    save(fig, d, "fig7c.png")


def fig12(d):
    rows = [x for x in read(d, "tree.csv") if x["levels"] == "5"]
    td = read(d, "topdown.csv")
    datas = [x for x in DATA if any(r["data"] == x for r in rows)]
    fig, axes = plt.subplots(len(datas), 3, figsize=(13, 3.3 * len(datas)), squeeze=False)
    for i, data in enumerate(datas):
        for j, (what, title) in enumerate([("resolved", "(a) lookups resolved per level"),
                                           ("accesses", "(b) filter accesses per level")]):
            ax = axes[i][j]
            for k, (kind, color) in enumerate([("dense", "C0"), ("sparse", "C3")]):
                r = [x for x in rows if x["data"] == data and x["kind"] == kind]
                xs = [int(x["level"]) + (k - 0.5) * 0.35 for x in r]
                ax.bar(xs, col(r, what), width=0.35, color=color, label=kind)
            ax.set_title(f"{title}, {data}", fontsize=9)
            ax.set_xlabel("level (0 = root, 4 = leaves)")
            ax.legend(fontsize=7)
        ax = axes[i][2]
        for kind, color in [("dense", "C0"), ("sparse", "C3")]:
            for variant, style in [("paper", "-o"), ("resume", "--s")]:
                r = [x for x in td if x["data"] == data and x["kind"] == kind and x["p"] == "0.05"
                     and x["variant"] in (variant, "none")]
                xs = [0 if x["threshold"] == "none" else int(x["threshold"]) for x in r]
                ax.plot(xs, col(r, "fp"), style, color=color, ms=3, label=f"{kind}, {variant} FP")
                if variant == "paper":
                    ax.plot(xs, col(r, "fn"), ":", color=color, label=f"{kind}, paper FN")
        finish(ax, "threshold level (0 = off)", "events", legend=6)
        ax.set_title(f"(c) top-down testing, {data}, P_fp 0.05", fontsize=9)
    save(fig, d, "fig12.png", dpi=100)


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dev/paper-reproduction")
    fig1(d)
    fig5(d)
    fig7c(d)
    fig12(d)
    print(f"wrote {d}/fig1.png fig5.png fig7c.png fig12.png")


if __name__ == "__main__":
    main()
