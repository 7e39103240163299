#!/usr/bin/env python3
"""Fault runner for `dedupd run` on the local broker (issue 19, "Faults").

  scripts/faults.py SCENARIO [options]      (normally through scripts/faults.sh)

Scenarios (each bounded in time, each ends with one `RESULT <scenario> PASS|FAIL key=value ...`
line; the figures go into docs/reliability.md):

  kills-ip      SIGKILL at random moments (seeded, --seed; printed) --kills times, input-partitions
                mode, while a keyed stream with unreadable records (1 in 50) is produced; an
                uninterrupted daemon reads the same input. Both write a duplicates topic and
                batch their writes for 50 ms (linger.ms), so a killed process can leave the
                duplicates or dead-letter partition written further than the output's. Output,
                duplicates and dead letters each identical per partition (key, value, timestamp,
                slice offset, release position).
  kills-rep     the same in repartition mode (the router is killed too, so slice offsets differ
                between the runs): the same multiset of output records (key, value, timestamp),
                no record delivered twice; the same set of duplicates (those of the router's
                re-sends, `dedupd.rule: resend`, counted apart) and of dead letters (the router
                dead-letters again what it reads again: counted, not a difference).
  broker-pause  the broker SIGSTOPped for --pause seconds mid-stream and SIGCONTed (--mode): dedupd
                must stay alive and answer /healthz throughout; what /readyz and dedupd_consumer_lag
                showed is reported; afterwards the output must hold the same records as a fresh
                daemon run over the complete input (none lost, none extra, none twice); records
                whose position differs (an idle flush during the outage) are counted.
  daemon-pause  two members of one group; the first SIGSTOPped for --pause seconds (beyond
                session.timeout.ms = 6000), the second takes its slices, the first is SIGCONTed
                (--mode): counts records delivered twice in the union of outputs (and copies that
                repeat a release position), and records lost or extra against a fresh run over
                the complete input (per key in repartition mode).
  storm         a rebalance storm (--mode): three members of one group, one SIGKILLed, stopped
                cleanly or started again every 3-5 s (seeded, --seed) for --minutes (3), while an
                uninterrupted daemon reads the same input. input-partitions: each partition holds
                the same records (key, value, timestamp, slice offset; records at another place or
                release position, from an idle flush in either run, are counted apart); repartition:
                the same multiset of records; both: none twice, the same dead letters, every
                SIGTERM a clean exit.
  unwritable    the output topic unwritable for --pause (60) s (a Tansu of its own, --ports, behind
                scripts/produce_block_proxy.py): back-pressure (judging stalls once the producer
                queue, --queue, is full), RSS while blocked, recovery time, and the output against
                a fresh run over the complete input (none lost, extra or twice).
  soak          (not CI) --minutes at --rate records/s (examples/daemon_bench produce, repartition
                mode, 8 slices, filter.expected_keys = max(400 000, 30 x rate)): RSS of dedupd
                and of the broker every 10 s, dead-letter / checkpoint-failure / late-record
                counters and what dedupd holds (its buffers' gauges, its heap); reports RSS
                first/last/max, slope, counter growth and a table per five minutes. Every
                producer sends large compressed batches (--linger-ms 250, --compression lz4):
                the memory broker lists every batch of a partition per fetch (docs/dev/broker.md);
                with 100 ms its fetches slowed from minute ~17 (docs/reliability.md, run C).

Environment: DEDUPD_BROKER_PORT (9092), DEDUPD_BIN (target/release/dedupd), DAEMON_BENCH
(target/release/examples/daemon_bench). Logs: target/faults/<run>/.
"""

import argparse
import atexit
import collections
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = os.environ.get("DEDUPD_BROKER_PORT", "9092")
BROKER = f"127.0.0.1:{PORT}"
DEDUPD = os.environ.get("DEDUPD_BIN", os.path.join(ROOT, "target/release/dedupd"))
BENCH = os.environ.get("DAEMON_BENCH", os.path.join(ROOT, "target/release/examples/daemon_bench"))
BASE_TS = 1_700_000_000_000
RUN = f"faults-{int(time.time())}"
LOGS = os.path.join(ROOT, "target/faults", RUN)


def say(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# --- broker side -----------------------------------------------------------------------------


def create_topic(topic, partitions):
    admin = AdminClient({"bootstrap.servers": BROKER, "log_level": 2})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    deadline = time.time() + 15
    while time.time() < deadline:
        t = admin.list_topics(topic, timeout=5).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.1)
    raise SystemExit(f"topic {topic} did not appear")


def read_all(topic, quiet=3.0):
    """Every record of `topic`: {partition: [record dict in offset order]}; reads until no
    record has arrived for `quiet` seconds (Tansu's ListOffsets end is not exact)."""
    c = Consumer({"bootstrap.servers": BROKER, "group.id": f"faults-reader-{time.time_ns()}",
                  "enable.auto.commit": False, "log_level": 2})
    md = c.list_topics(topic, timeout=10).topics.get(topic)
    parts = sorted(md.partitions) if md is not None and md.error is None else []
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out = {p: [] for p in parts}
    last = time.time()
    while time.time() - last < quiet:
        for m in c.consume(1000, 0.2):
            if m.error():
                raise SystemExit(f"reading {topic}: {m.error()}")
            last = time.time()
            out[m.partition()].append({
                "key": m.key(), "value": m.value(), "timestamp": m.timestamp()[1],
                "headers": dict(m.headers() or []), "offset": m.offset(),
            })
    c.close()
    return out


def pid_rss_kib(pid):
    """Resident memory of process `pid` (VmRSS), KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def broker_pid():
    with open(os.path.join(ROOT, f"target/broker/broker-{PORT}.pid")) as f:
        return int(f.read().strip())


# --- the input stream ------------------------------------------------------------------------


def partition_of(key, partitions):
    """FNV-1a 64 of the key, as tests/support/mod.rs: all copies of a key in one partition."""
    h = 0xCBF29CE484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % partitions


class Stream:
    """The keyed, disordered click stream of tests/daemon.rs (`keyed_stream`), produced in
    batches of 150 every 250 ms until stopped: keys from a pool of `keys`, event time advancing
    `step` ms per record, jittered by up to `jitter` ms; with `disorder`, also 1% 3-6 s late and
    1 in 2000 a day ahead (dead-lettered as a time jump); with `unreadable`, 1 in 50 payloads
    are not JSON (dead-lettered as bad_json). `by_key`: partition = hash of the key
    (input-partitions mode), else round robin."""

    def __init__(self, topic, partitions, seed, by_key, disorder, step=25, jitter=1500, keys=3000,
                 unreadable=False):
        self.topic, self.partitions, self.by_key, self.disorder = topic, partitions, by_key, disorder
        self.unreadable = unreadable
        self.unreadable_produced = 0  # of `produced`: payloads that are not JSON
        self.batch, self.every, self.keys, self.step, self.jitter = 150, 0.25, keys, step, jitter
        self.rng = random.Random(seed)
        self.produced = 0
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, _msg):
        if err is not None:
            self.errors += 1

    def _run(self):
        p = Producer({"bootstrap.servers": BROKER, "enable.idempotence": True, "linger.ms": 5,
                      "log_level": 2})
        seq = unreadable = 0
        while not self.stop.is_set():
            for _ in range(self.batch):
                rid = f"k{self.rng.randrange(self.keys)}"
                ts = BASE_TS + seq * self.step + self.rng.randrange(self.jitter)
                if self.disorder:
                    if self.rng.randrange(100) == 0:
                        ts -= 3000 + self.rng.randrange(3000)
                    elif self.rng.randrange(2000) == 0:
                        ts += 86_400_000
                part = partition_of(rid, self.partitions) if self.by_key else seq % self.partitions
                value = json.dumps({"id": rid, "ts": ts, "seq": seq}, separators=(",", ":"))
                if self.unreadable and self.rng.randrange(50) == 0:
                    value = f"{{not json {seq}"
                    unreadable += 1
                p.produce(self.topic, value=value, key=rid, partition=part, timestamp=ts,
                          on_delivery=self._on_delivery)
                seq += 1
            # Waits for delivery, so `produced` counts acknowledged records (also across a
            # broker pause: the producer retries until the broker answers).
            p.flush(120)
            self.produced, self.unreadable_produced = seq, unreadable
            self.stop.wait(self.every)

    def start(self):
        self.thread.start()

    def finish(self):
        self.stop.set()
        self.thread.join()
        if self.errors:
            raise SystemExit(f"{self.errors} records of the input stream were not delivered")
        return self.produced


# --- dedupd processes ------------------------------------------------------------------------


def app_env(app, topic, mode, slices):
    """tests/support/mod.rs `app_env`: topics named after `app`, 60 s window, checkpoints
    every 1 s or 500 records."""
    return {
        "DEDUPD__APP__ID": app, "DEDUPD__INPUT__TOPICS": topic,
        "DEDUPD__INPUT__KEY": "json:/id", "DEDUPD__INPUT__TIME": "json:/ts",
        "DEDUPD__SLICING__MODE": mode, "DEDUPD__FILTER__SLICES": str(slices),
        "DEDUPD__FILTER__WINDOW": "60s", "DEDUPD__FILTER__EXPECTED_KEYS": "20000",
        "DEDUPD__OUTPUT__TOPIC": f"{app}.out", "DEDUPD__OUTPUT__DEAD_LETTER_TOPIC": f"{app}.dlq",
        "DEDUPD__CHECKPOINT__TOPIC": f"{app}.ckpt", "DEDUPD__CHECKPOINT__INTERVAL": "1s",
        "DEDUPD__CHECKPOINT__INTERVAL_RECORDS": "500",
    }


STARTED = []  # every Daemon, so that an aborted scenario leaves no process behind


def cleanup():
    for d in STARTED:
        if d.alive():
            d.proc.send_signal(signal.SIGCONT)
            d.kill()


class Daemon:
    """One `dedupd run` process; its log is appended to target/faults/<run>/<name>.log."""

    def __init__(self, name, env):
        self.name, self.env = name, env
        # Port 0, read back from the log: a port picked here could be taken
        # (by an outgoing connection's ephemeral port) before dedupd binds it.
        self.port = None
        os.makedirs(LOGS, exist_ok=True)
        self.log = os.path.join(LOGS, f"{name}.log")
        self.log_start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        full = dict(os.environ)
        full.pop("DEDUPD_CONFIG", None)
        full.update({
            "DEDUPD__KAFKA__BROKERS": BROKER, "DEDUPD__ADMIN__LISTEN": "127.0.0.1:0",
            "DEDUPD__KAFKA__SESSION_TIMEOUT_MS": "6000", "DEDUPD__KAFKA__HEARTBEAT_INTERVAL_MS": "500",
            "RUST_LOG": "info,librdkafka=warn,rdkafka=warn",
        })
        full.update(env)
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen([DEDUPD, "run", "--config", "config/dedupd.toml"], cwd=ROOT,
                                         env=full, stdout=f, stderr=subprocess.STDOUT)
        STARTED.append(self)

    def alive(self):
        return self.proc.poll() is None

    def get(self, path, timeout=2.0):
        """(status, body) of an admin GET, or (None, error) if it does not answer."""
        if self.port is None:
            with open(self.log, "rb") as f:
                f.seek(self.log_start)
                found = re.search(rb"admin endpoint on http://127\.0\.0\.1:(\d+)", f.read())
            if not found:
                return None, "the admin port is not in the log yet"
            self.port = int(found.group(1))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (OSError, urllib.error.URLError) as e:
            return None, str(e)

    def ready(self):
        return self.get("/readyz")[0] == 200

    def wait_ready(self, within=90):
        deadline = time.time() + within
        while time.time() < deadline:
            if not self.alive():
                raise SystemExit(f"{self.name} exited ({self.proc.returncode}); see {self.log}")
            if self.ready():
                return
            time.sleep(0.2)
        raise SystemExit(f"{self.name} not ready after {within} s; see {self.log}")

    def slice_total(self, fields=("distinct", "duplicates", "invalid")):
        code, body = self.get("/v1/slices")
        if code != 200:
            return 0
        return sum(s.get(f, 0) for s in json.loads(body) for f in fields)

    def metric(self, name):
        """Sum of every series of a metric, or None if /metrics does not answer."""
        return self.metrics([name])[name]

    def metrics(self, names):
        """{name: sum of its series} from one scrape (values None if /metrics does not answer)."""
        code, body = self.get("/metrics")
        if code != 200:
            return {n: None for n in names}
        totals = {n: 0.0 for n in names}
        for line in body.splitlines():
            # A name with labels (`name{k="v"}`) is that one series; a bare name sums all of them.
            series = line.rsplit(" ", 1)[0]
            for name in (series, series.split("{", 1)[0]):
                if name in totals:
                    totals[name] += float(line.rsplit(" ", 1)[1])
        return totals

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self, within=60):
        """SIGTERM; True if it exited 0 in time."""
        if not self.alive():
            return self.proc.returncode == 0
        self.proc.terminate()
        try:
            return self.proc.wait(within) == 0
        except subprocess.TimeoutExpired:
            self.kill()
            return False

    def rss_kib(self):
        return pid_rss_kib(self.proc.pid)

    def warnings(self):
        with open(self.log, errors="replace") as f:
            return [l.rstrip() for l in f if l.startswith("[") and l.split()[1:2] in (["WARN"], ["ERROR"])]


def wait_judged(daemons, total, within, fields=("distinct", "duplicates", "invalid")):
    """Waits until the daemons together have judged `total` records; True if they did."""
    deadline = time.time() + within
    while time.time() < deadline:
        if sum(d.slice_total(fields) for d in daemons) >= total:
            return True
        time.sleep(0.5)
    return False


# --- comparing outputs -----------------------------------------------------------------------


def signature(r, release=True):
    h = r["headers"]
    sig = (r["key"], r["value"], r["timestamp"], h.get("dedupd.slice.offset"))
    return sig + (h.get("dedupd.release"),) if release else sig


def per_partition(out, release=True):
    """Each partition's records in order; without `release`, whether a record was released by
    the watermark or by an idle flush (which depends on the wall clock) is left out."""
    return {p: [signature(r, release) for r in recs] for p, recs in out.items()}


def content(out):
    """The multiset of (key, value, timestamp) over all partitions."""
    return collections.Counter((r["key"], r["value"], r["timestamp"]) for recs in out.values() for r in recs)


def release_pos(header):
    """`dedupd.release` (`after/rank` or `after/flush/rank`) as a tuple that orders as the
    engine's ReleasePos (after, flush, rank)."""
    parts = header.decode().split("/")
    return int(parts[0]), len(parts) == 3, int(parts[-1])


def repeated_releases(out):
    """Records whose release position is not above the last one of their partition: what a
    stopped member queued and sent on waking after the slice's next owner went on. A consumer
    that keeps the highest release position per partition drops exactly these."""
    n = 0
    for recs in out.values():
        last = None
        for r in recs:
            pos = release_pos(r["headers"]["dedupd.release"])
            if last is not None and pos <= last:
                n += 1
            else:
                last = pos
    return n


def keys(out):
    """How often each key was delivered."""
    return collections.Counter(r["key"] for recs in out.values() for r in recs)


def compare_partitions(want, got):
    """Records that differ per partition: positions where the two lists disagree plus the
    length difference."""
    diff = 0
    for p in set(want) | set(got):
        a, b = want.get(p, []), got.get(p, [])
        diff += sum(1 for x, y in zip(a, b) if x != y) + abs(len(a) - len(b))
    return diff


def twice(out):
    """Output records (values) present more than once: a record delivered twice."""
    return sum(n - 1 for n in content(out).values() if n > 1)


def missing_and_extra(want, got):
    """(records of `want` absent from `got`, records of `got` absent from `want`), as multisets."""
    return sum((want - got).values()), sum((got - want).values())


def result(name, ok, **figures):
    print(f"RESULT {name} {'PASS' if ok else 'FAIL'} " + " ".join(f"{k}={v}" for k, v in figures.items()),
          flush=True)
    return ok


# --- scenarios -------------------------------------------------------------------------------


def stream_for(mode, topic, partitions, seed, disorder=False, unreadable=False):
    """The input stream of a scenario in `mode` (not started); `unreadable`: with records that
    are not JSON."""
    # input-partitions: the disordered stream of tests/daemon.rs (late records and time jumps
    # included; per-partition identity holds for them too). repartition: disorder within the
    # lateness only, the scope in which the output does not depend on how the router
    # interleaves input partitions (README "Event time under disorder"). There a batch must
    # also span little event time: the router passes on one input partition's part of a batch
    # before the others' have arrived, so with 25 ms per record (3.75 s per batch of 150) a
    # slice sees records up to ~5 s behind its largest time, beyond the 2 s lateness, and the
    # verdicts depend on the interleaving (tried: 167 of 66 782 outputs swapped a copy for its
    # original between the runs). 2 ms per record and 1 s of jitter keep it within 1.3 s.
    if mode == "input-partitions":
        return Stream(topic, partitions, seed, by_key=True, disorder=True, unreadable=unreadable)
    return Stream(topic, partitions, seed, by_key=False, disorder=disorder, step=2, jitter=1000, keys=20000,
                  unreadable=unreadable)


def started_stream(name, mode, partitions, seed):
    """Creates the input topic of scenario `name` and starts its stream: (topic, stream)."""
    topic = f"{RUN}-{name}.in"
    create_topic(topic, partitions)
    stream = stream_for(mode, topic, partitions, seed)
    stream.start()
    return topic, stream


def kills_env(app, topic, mode, partitions):
    """`app_env` with a duplicates topic and producers that batch for 50 ms: a killed process then
    leaves its output topics' partitions written to different points."""
    env = app_env(app, topic, mode, partitions)
    env.update({"DEDUPD__OUTPUT__DUPLICATES_TOPIC": f"{app}.dups", "DEDUPD__KAFKA__LINGER_MS": "50"})
    return env


def kills(args, mode):
    name = "kills-ip" if mode == "input-partitions" else "kills-rep"
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    say(f"{name}: kill schedule seed {seed}, {args.kills} kills, log dir {LOGS}")
    rng = random.Random(seed)
    partitions = 4
    topic = f"{RUN}-{name}.in"
    create_topic(topic, partitions)
    stream = stream_for(mode, topic, partitions, seed, args.disorder, unreadable=True)
    stream.start()
    ref_app, crash_app = f"{RUN}-{name}-ref", f"{RUN}-{name}-crash"
    ref = Daemon(f"{name}-reference", kills_env(ref_app, topic, mode, partitions))
    ref.wait_ready()
    crash_env = kills_env(crash_app, topic, mode, partitions)
    crashing = Daemon(f"{name}-crashing", crash_env)
    started = time.time()
    survived = before_ready = 0
    for k in range(1, args.kills + 1):
        # A quarter of the kills land while restoring or replaying, the rest while processing.
        if rng.randrange(4) > 0:
            crashing.wait_ready()
        else:
            before_ready += 1
        time.sleep(0.2 + rng.randrange(3000) / 1000)
        if not crashing.alive():
            raise SystemExit(f"the crashing daemon exited by itself ({crashing.proc.returncode}); see {crashing.log}")
        crashing.kill()
        survived += 1
        say(f"kill {k} ({stream.produced} records produced)")
        crashing = Daemon(f"{name}-crashing", crash_env)
    crashing.wait_ready()
    time.sleep(3)
    total = stream.finish()
    # In repartition mode the router dead-letters the unreadable records: the slices never see them.
    judged = total - (stream.unreadable_produced if mode == "repartition" else 0)
    say(f"{total} records produced ({stream.unreadable_produced} unreadable); waiting for both daemons to judge "
        f"{judged}")
    done = wait_judged([ref], judged, 180) and wait_judged([crashing], judged, 180)
    time.sleep(3)
    topics = {t: (read_all(f"{ref_app}.{t}"), read_all(f"{crash_app}.{t}")) for t in ("out", "dups", "dlq")}
    want, got = topics["out"]
    n_out = sum(len(v) for v in want.values())
    n_dups, n_dlq = (sum(len(v) for v in topics[t][0].values()) for t in ("dups", "dlq"))
    resends = repeated_dead_letters = None
    if mode == "input-partitions":
        # Record for record, partition for partition, in each of the three topics.
        diff, dups_diff, dlq_diff = (compare_partitions(per_partition(topics[t][0]), per_partition(topics[t][1]))
                                     for t in ("out", "dups", "dlq"))
    else:
        diff = sum(missing_and_extra(content(want), content(got)))
        # A restarted router sends records again: the slices judge them `resend` (to the
        # duplicates topic) and the router dead-letters the unreadable ones again. As sets.
        is_resend = lambda r: r["headers"].get("dedupd.rule") == b"resend"
        ref_dups, crash_dups = ({t: [r for r in recs if not is_resend(r)] for t, recs in topics["dups"][i].items()}
                                for i in (0, 1))
        resends = sum(1 for recs in topics["dups"][1].values() for r in recs if is_resend(r))
        dups_diff = len(set(content(ref_dups)) ^ set(content(crash_dups)))
        dlq_diff = len(set(content(topics["dlq"][0])) ^ set(content(topics["dlq"][1])))
        repeated_dead_letters = twice(topics["dlq"][1])
    dup = twice(got)
    flushes = (ref.metric("dedupd_idle_flushes_total"), crashing.metric("dedupd_idle_flushes_total"))
    late = (ref.slice_total(("late",)), crashing.slice_total(("late",)))
    ref_warn = ref.warnings()
    ok_ref, ok_crash = ref.stop(), crashing.stop()
    for w in ref_warn[:5]:
        say("reference WARN/ERROR:", w)
    # Every topic must have something to compare.
    filled = n_out > 0 and n_dups > 0 and n_dlq > 0
    ok = (done and filled and diff == 0 and dup == 0 and dups_diff == 0 and dlq_diff == 0 and not ref_warn
          and ok_ref and ok_crash)
    figures = dict(seed=seed, kills=survived, kills_before_ready=before_ready, records=total, outputs=n_out,
                   duplicates=n_dups, dead_letters=n_dlq, differences=diff, delivered_twice=dup,
                   duplicate_differences=dups_diff, dead_letter_differences=dlq_diff)
    if mode != "input-partitions":
        figures.update(resends=resends, dead_letters_repeated=repeated_dead_letters)
    return result(name, ok, **figures,
                  idle_flushes_ref_crash=f"{flushes[0]:.0f}/{flushes[1]:.0f}", late_ref_crash=f"{late[0]}/{late[1]}",
                  judged_all=done, reference_warnings=len(ref_warn), seconds=round(time.time() - started))


def reference_of(name, topic, mode, partitions, total):
    """A fresh daemon over the complete input (after the fault): the uninterrupted answer."""
    ref = Daemon(f"{name}-reference", app_env(f"{RUN}-{name}-ref", topic, mode, partitions))
    ref.wait_ready()
    done = wait_judged([ref], total, 180)
    time.sleep(3)
    out = read_all(f"{RUN}-{name}-ref.out")
    ref.stop()
    return out, done


def broker_pause(args):
    name = "broker-pause"
    partitions = 4
    mode = args.mode
    topic, stream = started_stream(name, mode, partitions, 5)
    d = Daemon(f"{name}-subject", app_env(f"{RUN}-{name}", topic, mode, partitions))
    d.wait_ready()
    time.sleep(8)
    pid = broker_pid()
    lag_before = d.metric("dedupd_consumer_lag")
    say(f"SIGSTOP broker pid {pid} for {args.pause} s ({stream.produced} records produced)")
    os.kill(pid, signal.SIGSTOP)
    paused = time.time()
    samples = []  # (seconds since pause, healthz, readyz, lag, process alive)
    try:
        while time.time() - paused < args.pause:
            samples.append((round(time.time() - paused, 1), d.get("/healthz")[0], d.get("/readyz")[0],
                            d.metric("dedupd_consumer_lag"), d.alive()))
            time.sleep(2)
    finally:
        os.kill(pid, signal.SIGCONT)
    say(f"SIGCONT broker after {time.time() - paused:.1f} s")
    for s in samples:
        say(f"  t={s[0]}s healthz={s[1]} readyz={s[2]} consumer_lag={s[3]} alive={s[4]}")
    resumed = time.time()
    lag_after = []
    for _ in range(10):
        lag_after.append(d.metric("dedupd_consumer_lag"))
        time.sleep(1)
    time.sleep(10)
    total = stream.finish()
    done = wait_judged([d], total, 180)
    caught_up = round(time.time() - resumed)
    time.sleep(3)
    got = read_all(f"{RUN}-{name}.out")
    warn = d.warnings()
    alive_throughout = all(s[4] for s in samples) and d.alive()
    healthy = all(s[1] == 200 for s in samples)
    clean_exit = d.stop()
    want, ref_done = reference_of(name, topic, mode, partitions, total)
    diff = compare_partitions(per_partition(want), per_partition(got))
    lost, extra = missing_and_extra(content(want), content(got))
    for w in warn[:10]:
        say("subject WARN/ERROR:", w)
    not_ready = sum(1 for s in samples if s[2] != 200)
    lags = [s[3] for s in samples if s[3] is not None]
    return result(name, done and ref_done and alive_throughout and healthy and lost == 0 and extra == 0
                  and twice(got) == 0 and clean_exit,
                  mode=mode, pause_seconds=args.pause, records=total, outputs=sum(len(v) for v in got.values()),
                  lost=lost, extra=extra, delivered_twice=twice(got), positional_differences=diff,
                  alive=alive_throughout, healthz_200=f"{sum(1 for s in samples if s[1] == 200)}/{len(samples)}",
                  readyz_not_200=f"{not_ready}/{len(samples)}", lag_before=lag_before,
                  lag_max_during=max(lags) if lags else None, lag_after=lag_after,
                  warn_lines=len(warn), clean_exit=clean_exit, judged_all=done, reference_judged_all=ref_done,
                  caught_up_seconds=caught_up)


def daemon_pause(args):
    name = "daemon-pause"
    mode = args.mode
    partitions = 4
    topic, stream = started_stream(name, mode, partitions, 9)
    env = app_env(f"{RUN}-{name}", topic, mode, partitions)
    a = Daemon(f"{name}-a", env)
    a.wait_ready()
    b = Daemon(f"{name}-b", env)
    b.wait_ready()
    deadline = time.time() + 60
    owned = lambda d: len(json.loads(d.get("/v1/slices")[1] or "[]")) if d.get("/v1/slices")[0] == 200 else 0
    while time.time() < deadline and not (owned(a) and owned(b)):
        time.sleep(0.5)
    time.sleep(5)
    before = (owned(a), owned(b))
    say(f"slices owned before: a={before[0]} b={before[1]}; SIGSTOP a for {args.pause} s")
    a.signal(signal.SIGSTOP)
    time.sleep(args.pause)
    during = owned(b)
    a.signal(signal.SIGCONT)
    say(f"SIGCONT a; b owned {during} slices meanwhile")
    time.sleep(15)
    after = (owned(a), owned(b))
    total = stream.finish()
    done = wait_judged([a, b], total, 180)
    time.sleep(3)
    got = read_all(f"{RUN}-{name}.out")
    alive = a.alive() and b.alive()
    late = a.slice_total(("late",)) + b.slice_total(("late",))
    ok_stop = a.stop() and b.stop()
    want, ref_done = reference_of(name, topic, mode, partitions, total)
    lost, extra = missing_and_extra(content(want), content(got))
    dup = twice(got)
    diff = compare_partitions(per_partition(want), per_partition(got)) if mode == "input-partitions" else None
    # Per key: how often each was delivered. In repartition mode the stopped member's router
    # also stops, so its input partitions arrive far beyond the lateness once the other
    # router takes them over; such late records may swap which copy of a key is delivered
    # (README: judged at their own time), which `lost`/`extra` count, but not how often.
    key_diff = sum(missing_and_extra(keys(want), keys(got)))
    exact = lost == 0 and extra == 0 if mode == "input-partitions" else key_diff == 0
    return result(name, done and ref_done and alive and exact and dup == 0 and ok_stop,
                  mode=mode, pause_seconds=args.pause, session_timeout_ms=6000, records=total,
                  outputs=sum(len(v) for v in got.values()), delivered_twice=dup, lost=lost, extra=extra,
                  key_count_differences=key_diff, late=late, repeated_release_positions=repeated_releases(got),
                  positional_differences=diff, slices_before=f"{before[0]}/{before[1]}",
                  b_owned_during=during, slices_after=f"{after[0]}/{after[1]}", both_alive=alive,
                  rejoined=after[0] > 0)


def storm(args):
    """Three members of one group; every 3-5 s (seeded) one of them is SIGKILLed, stopped cleanly
    (SIGTERM) or started again, for --minutes, while the stream flows and an uninterrupted daemon
    reads the same input. At least one member runs at any time."""
    mode = args.mode
    name = "storm-ip" if mode == "input-partitions" else "storm-rep"
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    rng = random.Random(seed)
    say(f"{name}: seed {seed}, {args.minutes} minutes, log dir {LOGS}")
    partitions = 4
    topic, stream = started_stream(name, mode, partitions, seed)
    ref = Daemon(f"{name}-reference", app_env(f"{RUN}-{name}-ref", topic, mode, partitions))
    ref.wait_ready()
    env = app_env(f"{RUN}-{name}", topic, mode, partitions)
    members = [Daemon(f"{name}-m{i}", env) for i in range(3)]
    for m in members:
        m.wait_ready()
    actions = collections.Counter()
    started = time.time()
    while time.time() - started < args.minutes * 60:
        time.sleep(3 + rng.random() * 2)
        alive = [i for i, m in enumerate(members) if m.alive()]
        # A member that was stopped cleanly has exited by now or is still draining; either
        # way only exited slots are restarted.
        if len(alive) < 3 and (len(alive) == 1 or rng.random() < 0.5):
            slot = rng.choice([i for i in range(3) if i not in alive])
            members[slot] = Daemon(f"{name}-m{slot}", env)
            actions["start"] += 1
            say(f"start m{slot} ({stream.produced} records produced)")
            continue
        victim = members[rng.choice(alive)]
        if rng.random() < 0.5:
            victim.kill()
            actions["kill"] += 1
            say(f"SIGKILL {victim.name}")
        else:
            victim.proc.terminate()
            actions["stop"] += 1
            say(f"SIGTERM {victim.name}")
    total = stream.finish()
    say(f"storm over ({dict(actions)}); {total} records produced; all three members again")
    exit_codes = []
    for i, m in enumerate(members):
        if not m.alive():
            exit_codes.append(m.proc.wait())
            members[i] = Daemon(f"{name}-m{i}", env)
    for m in members:
        m.wait_ready(180)
    done = wait_judged([ref], total, 180) and wait_judged(members, total, 180)
    time.sleep(3)
    want, got = read_all(f"{RUN}-{name}-ref.out"), read_all(f"{RUN}-{name}.out")
    want_dlq, got_dlq = read_all(f"{RUN}-{name}-ref.dlq"), read_all(f"{RUN}-{name}.dlq")
    release_diff = None
    order_diff = None
    if mode == "input-partitions":
        # Per partition, the same records (key, value, timestamp, slice offset); how many sit at
        # another place or release position (an idle flush in either run) is counted apart.
        diff = compare_partitions(*({p: sorted(v) for p, v in per_partition(o, False).items()} for o in (want, got)))
        order_diff = compare_partitions(per_partition(want, False), per_partition(got, False))
        release_diff = compare_partitions(per_partition(want), per_partition(got))
    else:
        diff = sum(missing_and_extra(content(want), content(got)))
    flushes = (ref.metric("dedupd_idle_flushes_total"), sum(m.metric("dedupd_idle_flushes_total") or 0 for m in members))
    key_diff = sum(missing_and_extra(keys(want), keys(got)))
    dlq_diff = sum(missing_and_extra(content(want_dlq), content(got_dlq)))
    dup = twice(got)
    late = (ref.slice_total(("late",)), sum(m.slice_total(("late",)) for m in members))
    ref_warn = ref.warnings()
    ok_stop = all([m.stop() for m in members]) and ref.stop()
    # SIGTERM must end a member cleanly (exit 0); SIGKILL ends it with -9.
    unclean = sum(1 for c in exit_codes if c not in (0, -signal.SIGKILL))
    for w in ref_warn[:5]:
        say("reference WARN/ERROR:", w)
    return result(name, done and diff == 0 and dup == 0 and dlq_diff == 0 and unclean == 0 and ok_stop
                  and not ref_warn,
                  mode=mode, seed=seed, minutes=args.minutes, kills=actions["kill"], clean_stops=actions["stop"],
                  starts=actions["start"], records=total, outputs=sum(len(v) for v in want.values()),
                  differences=diff, order_differences=order_diff, release_position_differences=release_diff,
                  idle_flushes_ref_members=f"{flushes[0]:.0f}/{flushes[1]:.0f}",
                  key_count_differences=key_diff, delivered_twice=dup,
                  repeated_release_positions=repeated_releases(got), dead_letter_differences=dlq_diff,
                  unclean_exits=unclean, late_ref_members=f"{late[0]}/{late[1]}", judged_all=done,
                  reference_warnings=len(ref_warn), seconds=round(time.time() - started))


def start_process(argv, log, port, within=30):
    """Starts argv (output appended to `log`) and waits until 127.0.0.1:`port` accepts."""
    f = open(log, "ab")
    proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.time() + within
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{argv[0]} exited ({proc.returncode}); see {log}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{argv[0]} did not listen on {port}; see {log}")


def unwritable(args):
    """The output topic unwritable for --pause seconds: a Tansu of its own behind
    scripts/produce_block_proxy.py, which holds back produce requests for the output topic while
    everything else flows. dedupd must apply back-pressure (stop consuming once its bounded
    producer queue is full), keep its memory bounded, and lose and duplicate nothing."""
    global BROKER
    name = "unwritable"
    mode = args.mode
    tansu_port, proxy_port = args.ports
    os.makedirs(LOGS, exist_ok=True)
    tansu = start_process([os.path.join(ROOT, "target/tools/nisshi"), "broker", "--listener-url",
                           f"tcp://127.0.0.1:{tansu_port}", "--advertised-listener-url",
                           f"tcp://127.0.0.1:{proxy_port}", "--silent"], os.path.join(LOGS, "tansu.log"), tansu_port)
    out_topic = f"{RUN}-{name}.out"
    proxy = start_process([sys.executable, os.path.join(ROOT, "scripts/produce_block_proxy.py"), "--listen",
                           str(proxy_port), "--to", f"127.0.0.1:{tansu_port}", "--topic", out_topic],
                          os.path.join(LOGS, "proxy.log"), proxy_port)
    BROKER = f"127.0.0.1:{proxy_port}"
    try:
        partitions = 4
        topic, stream = started_stream(name, mode, partitions, 11)
        env = app_env(f"{RUN}-{name}", topic, mode, partitions)
        if args.queue:
            env["DEDUPD__KAFKA__QUEUE_BUFFERING_MAX_MESSAGES"] = str(args.queue)
        d = Daemon(f"{name}-subject", env)
        d.wait_ready()
        time.sleep(8)
        judged = lambda: d.slice_total(("distinct", "duplicates", "invalid"))
        say(f"blocking produce requests for {out_topic} for {args.pause} s ({stream.produced} records produced, "
            f"{judged()} judged, rss {d.rss_kib() / 1024:.1f} MiB)")
        samples = []  # (seconds, produced, judged, rss MiB, healthz, readyz, alive)
        proxy.send_signal(signal.SIGUSR1)
        blocked = time.time()
        try:
            while time.time() - blocked < args.pause:
                samples.append((round(time.time() - blocked), stream.produced, judged(), d.rss_kib() / 1024,
                                d.get("/healthz")[0], d.get("/readyz")[0], d.alive()))
                say("  t={}s produced={} judged={} rss_mib={:.1f} healthz={} readyz={} alive={}".format(*samples[-1]))
                if not d.alive():
                    break
                time.sleep(5)
        finally:
            proxy.send_signal(signal.SIGUSR2)
        unblocked = time.time()
        say(f"unblocked after {unblocked - blocked:.1f} s")
        # Caught up: every record produced by the moment of unblocking judged.
        at_unblock = stream.produced
        caught_up = wait_judged([d], at_unblock, 300)
        recovery = round(time.time() - unblocked, 1)
        time.sleep(5)
        total = stream.finish()
        done = wait_judged([d], total, 180)
        time.sleep(3)
        got = read_all(out_topic)
        warn = d.warnings()
        alive = d.alive()
        clean_exit = d.stop()
        want, ref_done = reference_of(name, topic, mode, partitions, total)
        lost, extra = missing_and_extra(content(want), content(got))
        diff = compare_partitions(per_partition(want), per_partition(got)) if mode == "input-partitions" else None
        for w in warn[:10]:
            say("subject WARN/ERROR:", w)
        during = [x[2] for x in samples]
        # Back-pressure: judging stopped while blocked (no progress over the last half of the block).
        stalled = len(during) >= 4 and during[-1] == during[len(during) // 2]
        rss = [x[3] for x in samples]
        return result(name, done and ref_done and caught_up and alive and lost == 0 and extra == 0
                      and twice(got) == 0 and clean_exit,
                      mode=mode, pause_seconds=args.pause, queue_buffering_max_messages=args.queue or "default",
                      records=total, outputs=sum(len(v) for v in got.values()), lost=lost, extra=extra,
                      delivered_twice=twice(got), positional_differences=diff,
                      judged_at_block=during[0] if during else None, judged_at_unblock=during[-1] if during else None,
                      produced_at_unblock=at_unblock, judging_stalled=stalled,
                      rss_mib_first_max=f"{rss[0]:.1f}/{max(rss):.1f}" if rss else None,
                      healthz_200=f"{sum(1 for x in samples if x[4] == 200)}/{len(samples)}",
                      readyz_200=f"{sum(1 for x in samples if x[5] == 200)}/{len(samples)}",
                      recovery_seconds=recovery, alive=alive, warn_lines=len(warn), clean_exit=clean_exit,
                      judged_all=done, reference_judged_all=ref_done)
    finally:
        proxy.kill()
        tansu.kill()


def soak(args):
    name = "soak"
    topic = f"{RUN}-{name}.in"
    create_topic(topic, 3)
    env = app_env(f"{RUN}-{name}", topic, "repartition", 8)
    # The driver's stream: half new ids, so rate/2 * 60 s distinct keys per window (at least the
    # 400 000 of the earlier runs).
    expected_keys = max(400_000, args.rate * 30)
    env.update({"DEDUPD__FILTER__EXPECTED_KEYS": str(expected_keys), "DEDUPD__CHECKPOINT__INTERVAL": "30s",
                "DEDUPD__CHECKPOINT__INTERVAL_RECORDS": "1000000"})
    # Every producer of the pipeline (the driver's, dedupd's router, slices and checkpoints) sends
    # batches of --linger-ms, compressed: the memory broker lists every stored batch of a
    # partition on each fetch, so a long run in 5 ms batches slows its fetches to nothing
    # (docs/dev/broker.md), and it holds every record in memory.
    batching = {"linger.ms": str(args.linger_ms), "compression.type": args.compression}
    env.update({f"DEDUPD__KAFKA__{k.upper().replace('.', '_')}": v for k, v in batching.items()})
    d = Daemon(f"{name}-daemon", env)
    d.wait_ready()
    time.sleep(5)
    seconds = int(args.minutes * 60)
    with open(os.path.join(LOGS, "soak-produce.log"), "w") as plog:
        producer = subprocess.Popen([BENCH, "produce", BROKER, topic, str(args.rate * seconds), "3", str(args.rate)],
                                    stdout=plog, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, DEDUPD_BENCH_LINGER_MS=batching["linger.ms"],
                                             DEDUPD_BENCH_COMPRESSION=batching["compression.type"]))
    counters = ["dedupd_dead_letters_total", "dedupd_checkpoint_failures_total", "dedupd_late_records_total",
                "dedupd_records_total"]
    # What dedupd holds, beside its filter: where resident memory can grow when the broker slows.
    held = ["dedupd_router_buffered_records", "dedupd_router_producer_queue_messages", "dedupd_waiting_records",
            "dedupd_producer_queue_messages", "dedupd_consumer_queue_bytes", "dedupd_consumer_lag",
            'dedupd_heap_bytes{kind="allocated"}', 'dedupd_heap_bytes{kind="resident"}']
    samples = []  # (seconds, rss MiB, {metric: value}, broker RSS MiB)
    t0 = time.time()
    while producer.poll() is None and d.alive():
        samples.append((round(time.time() - t0), d.rss_kib() / 1024, d.metrics(counters + held),
                        pid_rss_kib(broker_pid()) / 1024))
        s = samples[-1]
        say(f"t={s[0]}s rss_mib={s[1]:.1f} broker_rss_mib={s[3]:.0f} "
            + " ".join(f"{k[7:].replace('_bytes{kind=', '_').replace(chr(34), '').rstrip('}')}={v:.0f}"
                       for k, v in s[2].items() if v is not None))
        time.sleep(10)
    producer.wait()
    judged = wait_judged([d], args.rate * seconds, 120, ("distinct", "duplicates", "invalid", "resends"))
    warn = d.warnings()
    alive = d.alive()
    clean = d.stop()
    rss = [s[1] for s in samples]
    # Slope over the second half (the first fills the filter's window and the buffers).
    half = samples[len(samples) // 2:]
    slope = 0.0
    if len(half) >= 2:
        xs, ys = [s[0] / 60 for s in half], [s[1] for s in half]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0
    growth = {c[7:]: (samples[-1][2][c] or 0) - (samples[0][2][c] or 0) for c in counters} if samples else {}
    for w in warn[:10]:
        say("soak WARN/ERROR:", w)
    soak_table(samples, held)
    with open(os.path.join(LOGS, "soak-produce.log")) as f:
        say("producer:", f.read().strip().replace("\n", " | "))
    errors = growth.get("dead_letters_total", 0) + growth.get("checkpoint_failures_total", 0)
    return result(name, alive and clean and judged and errors == 0 and not warn,
                  minutes=args.minutes, rate=args.rate, samples=len(samples),
                  rss_first_mib=f"{rss[0]:.1f}" if rss else None, rss_last_mib=f"{rss[-1]:.1f}" if rss else None,
                  rss_max_mib=f"{max(rss):.1f}" if rss else None, rss_slope_mib_per_min_second_half=f"{slope:.3f}",
                  dead_letters_growth=growth.get("dead_letters_total"),
                  checkpoint_failures_growth=growth.get("checkpoint_failures_total"),
                  late_growth=growth.get("late_records_total"), records_judged=growth.get("records_total"),
                  judged_all=judged, warn_lines=len(warn), clean_exit=clean)


def soak_table(samples, held):
    """Per 5 minutes: dedupd's resident memory and the maxima of what it held (a Markdown table)."""
    short = {"dedupd_router_buffered_records": "router held", "dedupd_router_producer_queue_messages": "router queue",
             "dedupd_waiting_records": "slices held", "dedupd_producer_queue_messages": "output queue",
             "dedupd_consumer_queue_bytes": "prefetch MiB", "dedupd_consumer_lag": "lag",
             'dedupd_heap_bytes{kind="allocated"}': "heap allocated MiB",
             'dedupd_heap_bytes{kind="resident"}': "heap resident MiB"}
    say("| minutes | dedupd RSS MiB min-max | " + " | ".join(f"{short[h]} max" for h in held) + " | broker RSS GB |")
    say("|---|---|" + "---:|" * len(held) + "---:|")
    for start in range(0, (samples[-1][0] // 300 + 1) * 300 if samples else 0, 300):
        window = [s for s in samples if start <= s[0] < start + 300]
        if not window:
            continue
        rss = [s[1] for s in window]
        cells = []
        for h in held:
            top = max((s[2][h] or 0) for s in window)
            cells.append(f"{top / 2**20:.1f}" if "_bytes" in h else f"{top:.0f}")
        say(f"| {start // 60}-{start // 60 + 5} | {min(rss):.0f}-{max(rss):.0f} | " + " | ".join(cells)
            + f" | {window[-1][3] / 1024:.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario",
                    choices=["kills-ip", "kills-rep", "kills", "broker-pause", "daemon-pause", "storm",
                             "unwritable", "soak"])
    ap.add_argument("--seed", type=int, help="kill schedule seed (default: from the clock; printed)")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--disorder", action="store_true",
                    help="kills-rep: also 1%% late records and time jumps (beyond the lateness)")
    ap.add_argument("--pause", type=float, default=None,
                    help="seconds (broker-pause 30, daemon-pause 15, unwritable 60)")
    ap.add_argument("--queue", type=int, default=None,
                    help="unwritable: librdkafka queue.buffering.max.messages (default: dedupd's, 100000)")
    ap.add_argument("--ports", type=int, nargs=2, default=[19326, 19327], metavar=("TANSU", "PROXY"),
                    help="unwritable: ports of its own broker and of the proxy")
    ap.add_argument("--mode", default="input-partitions", choices=["input-partitions", "repartition"],
                    help="broker-pause, daemon-pause and storm: slicing mode")
    ap.add_argument("--minutes", type=float, default=None, help="soak (30) or storm (3) duration")
    ap.add_argument("--rate", type=int, default=20000, help="soak input records/s")
    ap.add_argument("--linger-ms", type=int, default=250,
                    help="soak: linger.ms of every producer in the pipeline (large batches)")
    ap.add_argument("--compression", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                    help="soak: compression.type of every producer in the pipeline")
    args = ap.parse_args()
    if args.minutes is None:
        args.minutes = 3.0 if args.scenario == "storm" else 30.0
    if args.pause is None:
        args.pause = {"broker-pause": 30.0, "unwritable": 60.0}.get(args.scenario, 15.0)
    say(f"run {RUN}, broker {BROKER}, dedupd {DEDUPD}")
    atexit.register(cleanup)
    if args.scenario == "kills":
        ok = kills(args, "input-partitions") & kills(args, "repartition")
    elif args.scenario in ("kills-ip", "kills-rep"):
        ok = kills(args, "input-partitions" if args.scenario == "kills-ip" else "repartition")
    else:
        ok = {"broker-pause": broker_pause, "daemon-pause": daemon_pause, "storm": storm,
              "unwritable": unwritable, "soak": soak}[args.scenario](args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
