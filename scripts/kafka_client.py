#!/usr/bin/env python3
"""Small Kafka CLI (confluent-kafka) for dedupd's integration tests and demos.

  produce      --broker H:P --topic T [--partition-by-key | --partition N] < records.jsonl
  consume      --broker H:P --topic T [--from-beginning] [--until-idle S] [--partition N] [--max N]
  create-topic --broker H:P --topic T --partitions N [--config k=v ...] [--if-not-exists]
  watermarks   --broker H:P --topic T

Record lines (produce input, consume output), one JSON object per line:
  {"key": str|null, "value": str|null, "headers": {name: str|null}, "timestamp": ms,
   "partition": int}
  Binary data: "key_b64" / "value_b64" instead of "key" / "value", and "headers_b64"
  {name: base64} for header values that are not UTF-8. consume adds "offset"; a null value is a
  tombstone. A repeated header name keeps only its last value in the JSON object.

produce: in input order, idempotent producer, flushes and prints the number of records. The
partition is the record's "partition", else --partition N, else the key's hash: librdkafka's
default (consistent_random: CRC32 of the key, null keys spread at random), or with
--partition-by-key the Java client's murmur2 (null keys all in one partition). Missing topics are
an error here (they are never auto-created).

consume: assigns the partitions (no consumer group, nothing committed), reads from the start
(--from-beginning) or from the current end, stops after --until-idle seconds without a new record
(or at --max records) and prints the records sorted by (partition, offset).

Tansu quirk handled here (docs/dev/broker.md): its ListOffsets "latest" is the base offset of the
partition's last batch + 1, not the end. The end is found by fetching up to end-of-partition;
`watermarks` prints that end as "high" (and what ListOffsets said as "listed_high" if different).

Extra librdkafka settings: --config k=v (produce, consume), e.g. message.max.bytes=10000000.
Exit status: 0 ok, 1 Kafka error, 2 bad input or usage.
"""

import argparse
import base64
import json
import sys
import time
import uuid

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic


class Fail(Exception):
    """A Kafka-side failure: message to stderr, exit 1."""


class Bad(Exception):
    """Bad input or arguments: message to stderr, exit 2."""


def kv_pairs(items):
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise Bad(f"--config expects k=v, got {item!r}")
        out[k] = v
    return out


def base_conf(args):
    return {"bootstrap.servers": args.broker, "log_level": 2, **kv_pairs(getattr(args, "config", None))}


def partitions_of(client, topic):
    md = client.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        raise Fail(f"topic {topic!r} not found on {md.orig_broker_name}: {t.error if t else 'missing'}")
    return sorted(t.partitions)


def text_or_b64(obj, name, data):
    """Put bytes under `name` if UTF-8, else base64 under `name_b64`."""
    if data is None:
        obj[name] = None
        return
    try:
        obj[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        obj[name + "_b64"] = base64.b64encode(data).decode("ascii")


def field_bytes(rec, name, lineno):
    if name + "_b64" in rec:
        try:
            return base64.b64decode(rec[name + "_b64"], validate=True)
        except (ValueError, TypeError) as e:
            raise ValueError(f"line {lineno}: {name}_b64 is not base64: {e}") from None
    v = rec.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"line {lineno}: {name} must be a string or null, got {type(v).__name__}")
    return v.encode("utf-8")


def parse_record(line, lineno):
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"line {lineno}: not JSON: {e}") from None
    if not isinstance(rec, dict):
        raise ValueError(f"line {lineno}: expected a JSON object")
    headers = []
    for name, v in (rec.get("headers") or {}).items():
        if v is not None and not isinstance(v, str):
            raise ValueError(f"line {lineno}: header {name!r} must be a string or null")
        headers.append((name, None if v is None else v.encode("utf-8")))
    for name, v in (rec.get("headers_b64") or {}).items():
        try:
            headers.append((name, base64.b64decode(v, validate=True)))
        except (ValueError, TypeError) as e:
            raise ValueError(f"line {lineno}: headers_b64 {name!r} is not base64: {e}") from None
    ts, part = rec.get("timestamp"), rec.get("partition")
    for label, v in (("timestamp", ts), ("partition", part)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ValueError(f"line {lineno}: {label} must be a non-negative integer")
    return field_bytes(rec, "key", lineno), field_bytes(rec, "value", lineno), headers, ts, part


def cmd_produce(args):
    conf = {
        **base_conf(args),
        "enable.idempotence": True,
        "allow.auto.create.topics": False,
        "linger.ms": 5,
    }
    if args.partition_by_key:
        conf["partitioner"] = "murmur2"
    producer = Producer(conf)
    parts = partitions_of(producer, args.topic)
    if args.partition is not None and args.partition not in parts:
        raise Bad(f"--partition {args.partition}: {args.topic} has partitions {parts}")
    errors, count = [], 0

    def on_delivery(err, msg):
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    for lineno, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            key, value, headers, ts, part = parse_record(line, lineno)
        except ValueError as e:
            raise Bad(str(e)) from None
        if part is None:
            part = args.partition
        if part is not None and part not in parts:
            raise Bad(f"line {lineno}: partition {part} not in {parts}")
        kw = {"key": key, "value": value, "headers": headers, "on_delivery": on_delivery}
        if ts is not None:
            kw["timestamp"] = ts
        if part is not None:
            kw["partition"] = part
        while True:
            try:
                producer.produce(args.topic, **kw)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
            except KafkaException as e:
                raise Fail(f"line {lineno}: {e.args[0]}") from None
        producer.poll(0)
        count += 1
    left = producer.flush(60)
    if left:
        raise Fail(f"{left} records still undelivered after 60 s")
    if errors:
        raise Fail(f"{len(errors)} records failed, first: {errors[0]}")
    print(count)


def exact_ends(consumer, topic, parts, timeout=10.0):
    """{partition: end offset}, found by fetching to end-of-partition (see module doc)."""
    listed = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in parts}
    consumer.assign([TopicPartition(topic, p, max(listed[p], 0)) for p in parts])
    ends, deadline = {}, time.monotonic() + timeout
    while len(ends) < len(parts):
        if time.monotonic() > deadline:
            raise Fail(f"no end-of-partition for {sorted(set(parts) - set(ends))} within {timeout}s")
        for m in consumer.consume(10000, 0.2):
            err = m.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                ends.setdefault(m.partition(), m.offset())
            elif err is not None:
                raise Fail(str(err))
    consumer.unassign()
    return ends, listed


def new_consumer(args):
    return Consumer({
        **base_conf(args),
        "group.id": f"kafka-client-{uuid.uuid4().hex[:8]}",  # required; never joined or committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 50,  # Tansu holds an empty fetch for the full wait
    })


def cmd_consume(args):
    consumer = new_consumer(args)
    try:
        parts = partitions_of(consumer, args.topic)
        if args.partition is not None:
            if args.partition not in parts:
                raise Bad(f"--partition {args.partition}: {args.topic} has partitions {parts}")
            parts = [args.partition]
        if args.from_beginning:
            start = {p: OFFSET_BEGINNING for p in parts}
        else:
            start, _ = exact_ends(consumer, args.topic, parts)
        consumer.assign([TopicPartition(args.topic, p, start[p]) for p in parts])
        records, last = [], time.monotonic()
        while time.monotonic() - last < args.until_idle and (args.max is None or len(records) < args.max):
            for m in consumer.consume(1000, 0.1):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise Fail(str(err))
                records.append(m)
                last = time.monotonic()
        if args.max is not None:
            records = records[: args.max]
    finally:
        consumer.close()
    records.sort(key=lambda m: (m.partition(), m.offset()))
    out = sys.stdout
    for m in records:
        obj = {"partition": m.partition(), "offset": m.offset()}
        text_or_b64(obj, "key", m.key())
        text_or_b64(obj, "value", m.value())
        headers, headers_b64 = {}, {}
        for name, v in m.headers() or []:
            try:
                headers[name] = None if v is None else v.decode("utf-8")
            except UnicodeDecodeError:
                headers_b64[name] = base64.b64encode(v).decode("ascii")
        obj["headers"] = headers
        if headers_b64:
            obj["headers_b64"] = headers_b64
        obj["timestamp"] = m.timestamp()[1]
        out.write(json.dumps(obj, ensure_ascii=False) + "\n")
    out.flush()


def cmd_create_topic(args):
    admin = AdminClient({"bootstrap.servers": args.broker, "log_level": 2})
    topic = NewTopic(args.topic, num_partitions=args.partitions, replication_factor=1,
                     config=kv_pairs(args.config))
    try:
        admin.create_topics([topic], operation_timeout=10)[args.topic].result(timeout=15)
        print(f"created {args.topic} ({args.partitions} partitions)")
    except KafkaException as e:
        err = e.args[0]
        if args.if_not_exists and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            n = len(partitions_of(admin, args.topic))
            print(f"exists {args.topic} ({n} partitions)")
            return
        raise Fail(f"create {args.topic}: {err.str()}") from None


def cmd_watermarks(args):
    consumer = new_consumer(args)
    try:
        parts = partitions_of(consumer, args.topic)
        ends, listed = exact_ends(consumer, args.topic, parts)
        for p in parts:
            low, _ = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10)
            obj = {"partition": p, "low": low, "high": ends[p]}
            if listed[p] != ends[p]:
                obj["listed_high"] = listed[p]
            print(json.dumps(obj))
    finally:
        consumer.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, config=True):
        p.add_argument("--broker", required=True, help="HOST:PORT")
        p.add_argument("--topic", required=True)
        if config:
            p.add_argument("--config", action="append", metavar="K=V", help="librdkafka setting (repeatable)")
        return p

    p = common(sub.add_parser("produce", help="produce JSON lines from stdin"))
    g = p.add_mutually_exclusive_group()
    g.add_argument("--partition-by-key", action="store_true", help="murmur2 of the key (Java-compatible)")
    g.add_argument("--partition", type=int, help="every record (without its own 'partition') to N")
    p.set_defaults(func=cmd_produce)

    p = common(sub.add_parser("consume", help="print records as JSON lines"))
    p.add_argument("--from-beginning", action="store_true", help="default: only records produced from now on")
    p.add_argument("--until-idle", type=float, default=2.0, metavar="SECONDS", help="default 2")
    p.add_argument("--partition", type=int)
    p.add_argument("--max", type=int, help="stop after this many records")
    p.set_defaults(func=cmd_consume)

    p = common(sub.add_parser("create-topic", help="create a topic"), config=False)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--config", action="append", metavar="K=V", help="topic config (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="an existing topic is not an error")
    p.set_defaults(func=cmd_create_topic)

    p = common(sub.add_parser("watermarks", help="low/high offsets per partition"), config=False)
    p.set_defaults(func=cmd_watermarks)

    args = ap.parse_args(argv)
    try:
        args.func(args)
    except Fail as e:
        print(f"kafka_client: error: {e}", file=sys.stderr)
        return 1
    except KafkaException as e:
        print(f"kafka_client: error: {e.args[0]}", file=sys.stderr)
        return 1
    except Bad as e:
        print(f"kafka_client: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
