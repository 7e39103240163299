#!/usr/bin/env python3
"""How fast the local broker serves a fetch from one partition of N records written in batches
of at most B records (docs/dev/broker.md, "Fetch over many small batches").

  python3 scripts/broker_fetch_probe.py --broker 127.0.0.1:19490 --records 3000000 --batch 40

Creates a one-partition topic, writes N small JSON records with `batch.num.messages` = B
(`linger.ms` 1), then for each start offset (--starts, default: 0 and N - 100 000) reads up to
50 000 records from there for at most --seconds (15) and prints the records read and the rate.
Needs Python's confluent-kafka (scripts/broker.sh install)."""
import argparse
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--batch", type=int, default=40)
    ap.add_argument("--starts", help="comma-separated start offsets")
    ap.add_argument("--seconds", type=float, default=15)
    args = ap.parse_args()
    topic = f"fetch-probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.broker})
    for f in admin.create_topics([NewTopic(topic, 1)]).values():
        f.result()
    p = Producer({"bootstrap.servers": args.broker, "batch.num.messages": args.batch, "linger.ms": 1,
                  "queue.buffering.max.messages": 1_000_000})
    value = b'{"id":"k123456","ts":1700000000000,"seq":1}'
    t = time.time()
    for i in range(args.records):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(300)
    print(f"{topic}: {args.records} records in batches of at most {args.batch}, written in {time.time() - t:.1f} s")
    starts = [int(s) for s in args.starts.split(",")] if args.starts else [0, max(0, args.records - 100_000)]
    for start in starts:
        c = Consumer({"bootstrap.servers": args.broker, "group.id": "fetch-probe", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 20})
        c.assign([TopicPartition(topic, 0, start)])
        n, t, first = 0, time.time(), None
        while n < 50_000 and time.time() - t < args.seconds:
            msgs = c.consume(10_000, 1.0)
            if msgs and first is None:
                first = time.time() - t
            n += sum(1 for m in msgs if not m.error())
        elapsed = time.time() - t
        first_text = f"{first:.2f} s" if first is not None else "never"
        print(f"start {start}: {n} records in {elapsed:.1f} s ({n / elapsed:.0f}/s), first after {first_text}")
        c.close()


if __name__ == "__main__":
    main()
