#!/usr/bin/env python3
"""The peer in scripts/bench_peer.sh: an exact dedup with Quix Streams (issue 20).

  quix_dedup.py --install
  quix_dedup.py --broker H:P --input T --output T --group G --state-dir DIR [--progress-file F]

A Quix Streams application (PyPI quixstreams, pinned below) that keeps, per key, the event time
at which the key was last delivered, in its RocksDB state with a 60 s TTL: a record is a
duplicate iff its key was delivered less than 60 s (of event time) before it; otherwise it goes
to the output topic and its time is stored, to expire 60 s later. Event time is the payload's
"ts" (epoch ms), the key is the record's key. Per key the stream is in time order, so this is
the exact event-time answer that dedupd's verdicts are measured against (src/bench/oracle.rs).

Everything else is Quix's defaults (at-least-once, a changelog topic for the state, a commit
every 5 s, JSON values), except session.timeout.ms = 6000: with librdkafka's default the local
test broker takes over 20 s to assign partitions (docs/dev/broker.md).

--progress-file: the number of records judged so far, rewritten every 1000 records, for
`daemon_bench wait file:PATH` to time the run from outside.

Quix Streams is not a dependency of dedupd: it is installed on first use, by this script, into
a virtual environment under target/ (the versions in scripts/quix_requirements.txt); run under
another Python, the script re-executes itself with that one.
"""

import argparse
import os
import subprocess
import sys
import venv
from datetime import timedelta
from pathlib import Path

QUIX_VERSION = "3.28.1"
ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "quix-venv"
VENV_PYTHON = VENV / "bin" / "python"
REQUIREMENTS = ROOT / "scripts" / "quix_requirements.txt"
WINDOW_MS = 60_000
WINDOW = timedelta(milliseconds=WINDOW_MS)


def quix_installed():
    try:
        import quixstreams
    except ImportError:
        return False
    return quixstreams.__version__ == QUIX_VERSION


def ensure_quix():
    """Returns when the pinned Quix Streams is importable here; otherwise installs it into
    VENV (created if missing) and re-executes this script with VENV's Python."""
    if quix_installed():
        return
    if os.environ.get("QUIX_DEDUP_REEXEC"):
        raise SystemExit(f"quix_dedup: quixstreams {QUIX_VERSION} is not importable with {sys.executable}")
    if not VENV_PYTHON.exists():
        print(f"quix_dedup: creating {VENV}", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    has = subprocess.run([VENV_PYTHON, "-c", "import quixstreams as q; print(q.__version__)"],
                         capture_output=True, text=True).stdout.strip()
    if has != QUIX_VERSION:
        print(f"quix_dedup: installing quixstreams {QUIX_VERSION} into {VENV}", file=sys.stderr)
        subprocess.run([VENV_PYTHON, "-m", "pip", "install", "--quiet", "-r", REQUIREMENTS], check=True)
    os.environ["QUIX_DEDUP_REEXEC"] = "1"
    os.execv(VENV_PYTHON, [VENV_PYTHON, Path(__file__).resolve(), *sys.argv[1:]])


class Progress:
    """Counts judged records; every 1000, writes the count to a file (fixed width, in place)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if path else None
        self.count = 0

    def tick(self):
        self.count += 1
        if self.fd is not None and self.count % 1000 == 0:
            os.pwrite(self.fd, b"%019d\n" % self.count, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--install", action="store_true", help="install Quix Streams and exit")
    ap.add_argument("--broker", help="HOST:PORT")
    ap.add_argument("--input", help="input topic (records with a key and a JSON payload with \"ts\")")
    ap.add_argument("--output", help="output topic for the distinct records")
    ap.add_argument("--group", help="consumer group (also names Quix's changelog topic)")
    ap.add_argument("--state-dir", help="directory for the RocksDB state")
    ap.add_argument("--progress-file", help="file for the count of judged records")
    args = ap.parse_args()
    if not args.install:
        missing = [f"--{n.replace('_', '-')}" for n in ("broker", "input", "output", "group", "state_dir")
                   if getattr(args, n) is None]
        if missing:
            ap.error(f"missing {', '.join(missing)}")
    ensure_quix()
    if args.install:
        print(f"quix_dedup: quixstreams {QUIX_VERSION} ready in {sys.prefix}")
        return

    from quixstreams import Application

    app = Application(
        broker_address=args.broker,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        consumer_extra_config={"session.timeout.ms": 6000},
    )
    source = app.topic(
        args.input,
        key_deserializer="bytes",
        value_deserializer="json",
        timestamp_extractor=lambda value, headers, timestamp, timestamp_type: value["ts"],
    )
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="json")
    progress = Progress(args.progress_file)

    def first_in_window(value, state):
        # The state is the record key's. The comparison decides; the TTL (in event time, from
        # the extractor above) only removes entries. Quix applies TTLs from a partition's
        # first commit on (before it, in the first batch, nothing expires: "Flipping state
        # store partition into TTL mode" in its log), so a TTL alone would keep some keys
        # longer than 60 s at the start of a backlog.
        progress.tick()
        ts = value["ts"]
        delivered_at = state.get("delivered_at")
        if delivered_at is not None and ts - delivered_at < WINDOW_MS:
            return False
        state.set("delivered_at", ts, ttl=WINDOW)
        return True

    app.dataframe(source).filter(first_in_window, stateful=True).to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
