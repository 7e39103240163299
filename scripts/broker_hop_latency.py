#!/usr/bin/env python3
"""One broker hop's latency against the age of the topic, at a constant rate.

A producer sends small records at RATE records/s to a fresh topic of PARTITIONS partitions for
SECONDS; a consumer reads them and measures record timestamp -> consumed. Every WINDOW seconds
it prints p50/p99/max of the hop over the records consumed in that window, the records the
topic holds so far, and the broker's CPU over the window (from /proc, when BROKER_PID is set).

Why: Tansu's memory storage lists every stored batch of a partition on every fetch that has data
to return (docs/dev/broker.md, finding 10), so if that is what the latency is made of, the hop
grows with the topic's size at a constant rate, and a fresh topic starts fast again.

    BROKER_PID=$(cat target/broker/broker-$DEDUPD_BROKER_PORT.pid) \
      python3 scripts/broker_hop_latency.py --broker 127.0.0.1:$DEDUPD_BROKER_PORT --rate 20000 --seconds 120
"""

import argparse
import os
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def quantile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def broker_cpu_seconds(pid):
    if not pid:
        return None
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--broker", required=True)
    ap.add_argument("--rate", type=int, default=20000, help="records per second")
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--window", type=int, default=15, help="seconds per printed row")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--fetch-wait-ms", type=int, default=20)
    args = ap.parse_args()
    broker_pid = os.environ.get("BROKER_PID")

    topic = f"hop-latency-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.broker})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result()

    consumer = Consumer(
        {
            "bootstrap.servers": args.broker,
            "group.id": topic,
            "fetch.wait.max.ms": args.fetch_wait_ms,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
    window_latencies = []  # ms, of the records consumed since the last printed row
    lock = threading.Lock()
    done = threading.Event()

    def consume():
        while not done.is_set():
            for m in consumer.consume(10000, 0.1):
                if m.error():
                    continue
                latency = time.time() * 1000 - m.timestamp()[1]
                with lock:
                    window_latencies.append(latency)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()

    producer = Producer({"bootstrap.servers": args.broker, "linger.ms": args.linger_ms, "enable.idempotence": True})
    value = b'{"id":"0123456789abcdef","ts":0}'
    start = time.time()
    next_row, sent, row_start_cpu = start + args.window, 0, broker_cpu_seconds(broker_pid)
    print(f"topic {topic}: {args.rate}/s for {args.seconds} s, {args.partitions} partitions, "
          f"linger.ms={args.linger_ms}, fetch.wait.max.ms={args.fetch_wait_ms}")
    print("  t (s) | records in the topic | hop p50 / p99 / max ms | broker cores")
    while True:
        now = time.time()
        if now - start >= args.seconds:
            break
        due = int((now - start) * args.rate)
        while sent < due:
            try:
                producer.produce(topic, value=value, partition=sent % args.partitions)
                sent += 1
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
        if now >= next_row:
            cpu = broker_cpu_seconds(broker_pid)
            with lock:
                window = sorted(window_latencies)
                window_latencies.clear()
            cores = f"{(cpu - row_start_cpu) / args.window:.2f}" if cpu is not None else "-"
            print(f"  {now - start:5.0f} | {sent:20d} | "
                  f"{quantile(window, 0.5):6.1f} / {quantile(window, 0.99):6.1f} / {window[-1] if window else float('nan'):6.1f} | {cores}",
                  flush=True)
            next_row += args.window
            row_start_cpu = cpu
        time.sleep(0.001)
    producer.flush(30)
    time.sleep(2)
    done.set()
    reader.join()
    consumer.close()
    admin.delete_topics([topic])


if __name__ == "__main__":
    main()
