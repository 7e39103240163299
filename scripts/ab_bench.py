#!/usr/bin/env python3
"""A/B comparison of two builds of the filter bench on a noisy machine.

Runs the two bench executables alternately (A, B, A, B, ...) in quick mode on
the same bench filter, and reports every bench's median throughput over the
rounds for each build and the ratio B/A. Alternating in one run is what makes
the ratio meaningful here: both builds see the same background load.

    python3 scripts/ab_bench.py BENCH_EXE_A BENCH_EXE_B FILTER [--rounds 5]

Build the executables with `cargo bench --bench filter --no-run` in two
checkouts (e.g. a `git worktree` of the base commit with its own
CARGO_TARGET_DIR); cargo prints the path of each.
"""

import argparse
import os
import re
import statistics
import subprocess
import tempfile

UNITS = {"elem/s": 1.0, "Kelem/s": 1e3, "Melem/s": 1e6, "Gelem/s": 1e9}
LINE = re.compile(r"^(\S+)\s+time:.*?\n\s+thrpt:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", re.M)


def run(exe, pattern, home):
    env = dict(os.environ, DEDUPD_BENCH_QUICK="1", CRITERION_HOME=home)
    out = subprocess.run([exe, "--bench", pattern], env=env, capture_output=True, text=True, check=True).stdout
    # Names long enough to wrap put "time:" on the next line; join them back.
    out = re.sub(r"^(\S+)\n\s+time:", r"\1 time:", out, flags=re.M)
    return {name: float(v) * UNITS[u] for name, v, u in LINE.findall(out)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("pattern")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    results = {"A": {}, "B": {}}
    with tempfile.TemporaryDirectory() as home:
        for r in range(args.rounds):
            for label, exe in (("A", args.a), ("B", args.b)):
                for name, ops in run(exe, args.pattern, os.path.join(home, label)).items():
                    results[label].setdefault(name, []).append(ops)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    print("\n| bench | A Mops/s | B Mops/s | B/A (median of per-round ratios) |")
    print("|---|---:|---:|---:|")
    for name in results["A"]:
        a, b = results["A"][name], results["B"].get(name, [])
        if not b:
            continue
        ratios = [y / x for x, y in zip(a, b)]
        print(
            f"| {name} | {statistics.median(a) / 1e6:.2f} | {statistics.median(b) / 1e6:.2f} | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |"
        )


if __name__ == "__main__":
    main()
