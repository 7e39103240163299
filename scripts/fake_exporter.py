#!/usr/bin/env python3
"""A stand-in for dedupd's admin /metrics, for debugging the dashboard and
scripts/prometheus_check.sh without Kafka. NOT used by any test: the real check runs
against a real dedupd (tests/ops.rs).

  scripts/fake_exporter.py [--port 0] [--slices 2] [--omit NAME ...] [--quiet-after S]

Serves every metric of docs/metrics.md with plausible labels and values; counters and
histograms grow with the wall clock (~100 input records/s, half duplicates, a dead letter
every 10 s), so rates are non-empty. --omit leaves metrics out (to see how the check reports
them); --quiet-after S stops all traffic after S seconds (counters freeze, histograms stop).
Prints "listening on 127.0.0.1:PORT" once it serves. Stdlib only.
"""

import argparse
import http.server
import math
import random
import threading
import time

BUCKETS = [0.001 * 2**i for i in range(18)]


def fmt(v):
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


class Exposition:
    def __init__(self, omit):
        self.omit = set(omit)
        self.lines = []

    def metric(self, name, mtype, help_text, samples):
        """samples: [(labels dict, value)] for counters/gauges."""
        if name in self.omit:
            return
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {mtype}")
        for labels, value in samples:
            self.lines.append(f"{name}{self.labels(labels)} {fmt(value)}")

    def histogram(self, name, help_text, buckets, observations):
        """observations: (count, sum, cumulative fraction per bucket)."""
        if name in self.omit:
            return
        count, total, cdf = observations
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} histogram")
        for le, frac in zip(buckets, cdf):
            self.lines.append(f'{name}_bucket{{le="{fmt(float(le))}"}} {int(count * frac)}')
        self.lines.append(f'{name}_bucket{{le="+Inf"}} {int(count)}')
        self.lines.append(f"{name}_sum {fmt(total)}")
        self.lines.append(f"{name}_count {int(count)}")

    @staticmethod
    def labels(labels):
        if not labels:
            return ""
        return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"

    def text(self):
        return "\n".join(self.lines) + "\n"


def lognormal_cdf(median, sigma, buckets):
    return [0.5 * (1 + math.erf((math.log(b) - math.log(median)) / (sigma * math.sqrt(2)))) for b in buckets]


class Fake:
    def __init__(self, slices, omit, quiet_after):
        self.start = time.time()
        self.slices = slices
        self.omit = omit
        self.quiet_after = quiet_after
        self.rng = random.Random(7)

    def render(self):
        t = time.time() - self.start
        if self.quiet_after is not None:
            t = min(t, self.quiet_after)
        wall = time.time() - self.start
        s = [str(i) for i in range(self.slices)]
        per = 100.0 * t / self.slices  # input records per slice so far
        e = Exposition(self.omit)
        e.metric("dedupd_build_info", "gauge", "1, labelled with the dedupd version.", [({"version": "0.1.0"}, 1)])
        e.metric("dedupd_input_records_total", "counter", "Input records read, by topic.", [({"topic": "clicks"}, int(100 * t))])
        recs = []
        for sl in s:
            recs += [
                ({"slice": sl, "result": "distinct"}, int(per * 0.5)),
                ({"slice": sl, "result": "duplicate"}, int(per * 0.49)),
                ({"slice": sl, "result": "invalid"}, int(t / 10 / self.slices)),
                ({"slice": sl, "result": "resend"}, 0),
            ]
        e.metric("dedupd_records_total", "counter", "Slice verdicts by slice and result.", recs)
        k = 7
        dup = 49 * t
        e.histogram("dedupd_duplicate_equal_timers", "Largest number of a duplicate's k cells holding the same time.",
                    list(range(1, k + 1)), (dup, dup * 6.5, [0.01, 0.02, 0.03, 0.04, 0.1, 0.3, 1.0]))
        reasons = ["bad_json", "missing_key", "empty_key", "missing_time", "bad_time", "too_large"]
        e.metric("dedupd_dead_letters_total", "counter", "Records sent to the dead-letter topic, by reason.",
                 [({"reason": r}, int(t / 10) if r == "bad_json" else 0) for r in reasons])
        wave = lambda i, period: 0.5 + 0.5 * math.sin(wall / period + i)
        e.metric("dedupd_filter_density", "gauge", "Live-cell density of the slice's newest generation.",
                 [({"slice": sl}, 0.3 + 0.1 * wave(i, 30)) for i, sl in enumerate(s)])
        e.metric("dedupd_filter_generations", "gauge", "Generations alive in the slice's filter.", [({"slice": sl}, 1) for sl in s])
        e.metric("dedupd_filter_memory_bytes", "gauge", "Bytes of the slice's filter.", [({"slice": sl}, 98304) for sl in s])
        e.metric("dedupd_filter_estimated_fpr", "gauge", "False-positive rate the live densities predict.",
                 [({"slice": sl}, 0.004 + 0.002 * wave(i, 20)) for i, sl in enumerate(s)])
        for name, help_text in [
            ("dedupd_filter_generations_created_total", "Generations started."),
            ("dedupd_filter_generations_dropped_total", "Generations dropped when expired."),
            ("dedupd_filter_saturated_inserts_total", "Inserts into a full newest generation at the generation cap."),
        ]:
            e.metric(name, "counter", help_text, [({"slice": sl}, 1 if "created" in name else 0) for sl in s])
        e.metric("dedupd_checkpoints_total", "counter", "Slice snapshots written.", [({"slice": sl}, int(t)) for sl in s])
        e.metric("dedupd_checkpoint_failures_total", "counter", "Slice snapshot writes that failed.", [({"slice": sl}, 0) for sl in s])
        n = t * self.slices
        e.histogram("dedupd_checkpoint_duration_seconds", "Time to flush outputs, encode and write one snapshot.",
                    BUCKETS, (n, n * 0.012, lognormal_cdf(0.01, 0.6, BUCKETS)))
        e.metric("dedupd_checkpoint_bytes", "gauge", "Size of the slice's last snapshot.", [({"slice": sl}, 50210) for sl in s])
        e.metric("dedupd_checkpoint_age_seconds", "gauge", "Seconds since the slice's last snapshot.",
                 [({"slice": sl}, round(wall % 1.0, 3)) for sl in s])
        e.metric("dedupd_restores_total", "counter", "Slice restores by source of the state.",
                 [({"source": "snapshot"}, 0), ({"source": "empty"}, self.slices), ({"source": "corrupt"}, 0)])
        e.histogram("dedupd_restore_duration_seconds", "Time to restore one slice.", BUCKETS,
                    (self.slices, self.slices * 0.2, lognormal_cdf(0.2, 0.3, BUCKETS)))
        e.metric("dedupd_replayed_records_total", "counter", "Records replayed silently after a restore.", [({"slice": sl}, 0) for sl in s])
        e.metric("dedupd_rebalances_total", "counter", "Group rebalance events of the slice workers.",
                 [({"kind": "assign"}, 1), ({"kind": "revoke"}, 0)])
        e.metric("dedupd_slices_owned", "gauge", "Slices this process owns.", [({}, self.slices)])
        e.metric("dedupd_consumer_lag", "gauge", "Records of the slice log not yet processed.",
                 [({"slice": sl}, self.rng.randint(0, 40)) for sl in s])
        e.metric("dedupd_producer_queue_messages", "gauge", "Messages in the output producer's queue.", [({}, self.rng.randint(0, 20))])
        out = 50 * t
        e.histogram("dedupd_end_to_end_latency_seconds", "Record timestamp to output acknowledged by the broker.",
                    BUCKETS, (out, out * 0.03, lognormal_cdf(0.025, 0.5, BUCKETS)))
        return e.text()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--slices", type=int, default=2)
    ap.add_argument("--omit", nargs="*", default=[])
    ap.add_argument("--quiet-after", type=float)
    args = ap.parse_args()
    fake = Fake(args.slices, args.omit, args.quiet_after)
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            with lock:
                body = fake.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
