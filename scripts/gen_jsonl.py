#!/usr/bin/env python3
"""Writes a JSONL stream for measuring `dedupd filter` (docs/dev/performance.md):

    python3 scripts/gen_jsonl.py RECORDS > events.jsonl

One record per millisecond of event time, like
`{"seq":17,"id":"click-000000000012","ts":1700000000017,"src":"feed"}`
(~70 bytes). Half of the records are new keys; the other half repeat a key
first seen 0.1 to 90 s earlier, so with a 60 s window about 2/3 of the
repeats are duplicates and ~30k distinct keys are in a window. Deterministic.
"""

import random
import sys


def main():
    n = int(sys.argv[1])
    rng = random.Random(2026)
    out = sys.stdout
    recent = []  # (first seen seq, key id), oldest first
    next_id = 0
    lines = []
    for seq in range(n):
        if seq == 0 or rng.random() < 0.5:
            key = next_id
            next_id += 1
            recent.append((seq, key))
        else:
            # A key first seen 100 ms to 90 s ago (one record per ms).
            back = rng.randint(100, 90_000)
            target = seq - back
            lo, hi = 0, len(recent)
            while lo < hi:
                mid = (lo + hi) // 2
                if recent[mid][0] < target:
                    lo = mid + 1
                else:
                    hi = mid
            key = recent[min(lo, len(recent) - 1)][1]
        if len(recent) > 200_000:
            del recent[:100_000]
        lines.append('{"seq":%d,"id":"click-%012d","ts":%d,"src":"feed"}\n' % (seq, key, 1_700_000_000_000 + seq))
        if len(lines) == 100_000:
            out.write("".join(lines))
            lines.clear()
    out.write("".join(lines))


if __name__ == "__main__":
    main()
