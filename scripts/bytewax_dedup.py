#!/usr/bin/env python3
"""A second peer in scripts/bench_peer.sh: an exact dedup with Bytewax (issue 45).

  bytewax_dedup.py --install
  bytewax_dedup.py --broker H:P --input T --output T [--progress-file F]

A Bytewax dataflow (PyPI bytewax, pinned below; a Rust (Timely) runtime with Python
operators) run with 1 worker, its state in memory and no recovery: records are keyed by the
record key, and one `stateful_map` step keeps, per key, the event time at which the key was
last delivered. A record is a duplicate iff its key was delivered less than 60 s (of event
time, the payload's "ts") before it; otherwise it goes to the output topic, key, payload and
timestamp unchanged. The same rule as scripts/quix_dedup.py: per key the stream is in time
order, so this is the exact event-time answer dedupd's verdicts are measured against. The
step does not use Bytewax's event-time windows (their watermark would drop late records);
the state is dropped for no key (Bytewax has no state TTL), so it grows with the distinct keys.

Input and output are Bytewax's Kafka connector (bytewax.connectors.kafka) with its defaults:
the source assigns every partition of the input itself (no consumer group: Bytewax keeps
positions in its recovery store, and there is none here) from the start of the topic, up to
1000 records per poll; the sink produces each batch and flushes it.

--progress-file: the number of records judged so far, rewritten every 1000 records (as
quix_dedup.py does), for `daemon_bench wait file:PATH` to time the run from outside.

Bytewax is not a dependency of dedupd: it is installed on first use, by this script, into a
virtual environment under target/ (the versions in scripts/bytewax_requirements.txt); run
under another Python, the script re-executes itself with that one.
"""

import argparse
import json
import os
import subprocess
import sys
import venv
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from quix_dedup import WINDOW_MS, Progress

BYTEWAX_VERSION = "0.21.1"
ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "bytewax-venv"
VENV_PYTHON = VENV / "bin" / "python"
REQUIREMENTS = ROOT / "scripts" / "bytewax_requirements.txt"


def bytewax_installed():
    try:
        return version("bytewax") == BYTEWAX_VERSION
    except PackageNotFoundError:
        return False


def ensure_bytewax():
    """Returns when the pinned Bytewax is importable here; otherwise installs it into VENV
    (created if missing) and re-executes this script with VENV's Python."""
    if bytewax_installed():
        return
    if os.environ.get("BYTEWAX_DEDUP_REEXEC"):
        raise SystemExit(f"bytewax_dedup: bytewax {BYTEWAX_VERSION} is not importable with {sys.executable}")
    if not VENV_PYTHON.exists():
        print(f"bytewax_dedup: creating {VENV}", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    probe = "from importlib.metadata import version; print(version('bytewax'))"
    has = subprocess.run([VENV_PYTHON, "-c", probe], capture_output=True, text=True).stdout.strip()
    if has != BYTEWAX_VERSION:
        print(f"bytewax_dedup: installing bytewax {BYTEWAX_VERSION} into {VENV}", file=sys.stderr)
        subprocess.run([VENV_PYTHON, "-m", "pip", "install", "--quiet", "-r", REQUIREMENTS], check=True)
    os.environ["BYTEWAX_DEDUP_REEXEC"] = "1"
    os.execv(VENV_PYTHON, [VENV_PYTHON, Path(__file__).resolve(), *sys.argv[1:]])


def dataflow(broker, input_topic, output_topic, progress):
    """The dedup dataflow: input → key → first in window → distinct → output."""
    import bytewax.operators as op
    from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
    from bytewax.dataflow import Dataflow

    flow = Dataflow("dedup")
    records = op.input("in", flow, KafkaSource([broker], [input_topic]))
    keyed = op.key_on("key", records, lambda m: m.key.decode())

    def first_in_window(delivered_at, m):
        progress.tick()
        ts = json.loads(m.value)["ts"]
        if delivered_at is not None and ts - delivered_at < WINDOW_MS:
            return delivered_at, None
        return ts, m

    judged = op.stateful_map("first_in_window", keyed, first_in_window)

    def distinct(key_and_record):
        m = key_and_record[1]
        if m is None:
            return None
        return KafkaSinkMessage(m.key, m.value, timestamp=m.timestamp[1])

    out = op.filter_map("distinct", judged, distinct)
    op.output("out", out, KafkaSink([broker], output_topic))
    return flow


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--install", action="store_true", help="install Bytewax and exit")
    ap.add_argument("--broker", help="HOST:PORT")
    ap.add_argument("--input", help="input topic (records with a key and a JSON payload with \"ts\")")
    ap.add_argument("--output", help="output topic for the distinct records")
    ap.add_argument("--progress-file", help="file for the count of judged records")
    args = ap.parse_args()
    if not args.install:
        missing = [f"--{n}" for n in ("broker", "input", "output") if getattr(args, n) is None]
        if missing:
            ap.error(f"missing {', '.join(missing)}")
    ensure_bytewax()
    if args.install:
        print(f"bytewax_dedup: bytewax {BYTEWAX_VERSION} ready in {sys.prefix}")
        return

    from bytewax._bytewax import cli_main

    # What `python -m bytewax.run` does with one worker and no recovery.
    cli_main(dataflow(args.broker, args.input, args.output, Progress(args.progress_file)), workers_per_process=1)


if __name__ == "__main__":
    main()
