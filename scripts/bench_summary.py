#!/usr/bin/env python3
"""Summarises `cargo bench --bench filter` (criterion's JSON under
target/criterion/tti_*) as markdown tables: median ops/s of every bench, each
as a fraction of the random-read limit of its size, and the ratios issue #5
asks for (dedupd against fastbloom and the exact hashbrown map).

    python3 scripts/bench_summary.py [CRITERION_DIR] [--bench-name-prefix dedupd-]

Throughput is elements (events, or reads for the limit) per second from the
median time of one iteration; the interval is criterion's 95% interval of the
mean, converted to ops/s.
"""

import json
import sys
from pathlib import Path


def load(group_dir: Path):
    rows = {}
    for bench in sorted(p for p in group_dir.iterdir() if (p / "new" / "estimates.json").exists()):
        meta = json.loads((bench / "new" / "benchmark.json").read_text())
        est = json.loads((bench / "new" / "estimates.json").read_text())
        elems = meta["throughput"]["Elements"]
        median = est["median"]["point_estimate"]
        lo = est["mean"]["confidence_interval"]["lower_bound"]
        hi = est["mean"]["confidence_interval"]["upper_bound"]
        rows[meta["function_id"]] = (elems / median * 1e9, elems / hi * 1e9, elems / lo * 1e9)
    return rows


def order(name: str):
    kinds = ["dedupd", "fastbloom", "bloomfilter", "hashbrown", "moka", "limit"]
    return (next((i for i, k in enumerate(kinds) if name.startswith(k)), len(kinds)), name)


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("target/criterion")
    groups = sorted(root.glob("tti_*"), key=lambda p: ["256KiB", "8MiB", "1GiB"].index(p.name[4:]) if p.name[4:] in ["256KiB", "8MiB", "1GiB"] else 9)
    for g in groups:
        rows = load(g)
        if not rows:
            continue
        limit = rows.get("limit-random-read", (None,))[0]
        fast = rows.get("fastbloom", (None,))[0]
        exact = rows.get("hashbrown-exact", (None,))[0]
        print(f"\n### {g.name[4:]}\n")
        print("| bench | Mops/s (median) | 95% CI of mean | ÷ limit | ÷ fastbloom | ÷ hashbrown-exact |")
        print("|---|---:|---:|---:|---:|---:|")
        for name in sorted(rows, key=order):
            ops, lo, hi = rows[name]
            cols = [f"{ops / x:.2f}" if x else "–" for x in (limit, fast, exact)]
            print(f"| {name} | {ops / 1e6:.2f} | {lo / 1e6:.2f}–{hi / 1e6:.2f} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
