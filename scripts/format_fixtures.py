#!/usr/bin/env python3
"""Writes the Avro and Protobuf test fixtures of tests/formats/ with a real client library's
serializers: confluent-kafka's AvroSerializer and ProtobufSerializer, their schema ids assigned
by its in-process `mock://` Schema Registry.

    python3 scripts/format_fixtures.py [--check]

It installs confluent-kafka[avro,protobuf,schemaregistry] (pinned) into target/formats-venv and
re-runs itself there. What it writes:

  tests/formats/records.jsonl     one line per record: its format, the schema id, the record's
                                  bytes (hex, in the Confluent wire format) and the values the
                                  record was made from (`fields`)
  tests/formats/registry/<id>.json  the registry's answer to GET /schemas/ids/<id>, as the
                                  mock registry holds it (the Protobuf schema as the serializer
                                  registers it: a base64 FileDescriptorProto)
  tests/formats/schemas/<id>.avsc   the Avro schema of id <id> (the local-files form)
  tests/formats/schemas/<id>.proto  the Protobuf schema of id <id> as .proto text (written here
                                  by hand; `--check` shows it is the same file descriptor as
                                  the one the serializer registered, field for field)

--check: writes nothing; fails when the files differ from what the serializers write now.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "formats"
VENV = ROOT / "target" / "formats-venv"
REQUIREMENT = "confluent-kafka[avro,protobuf,schemaregistry]==2.16.1"
TOPIC = "clicks"

AVRO_SCHEMA = {
    "type": "record",
    "name": "Click",
    "namespace": "clicks",
    "fields": [
        {"name": "user", "type": {"type": "record", "name": "User", "fields": [
            {"name": "id", "type": "string"},
            {"name": "country", "type": ["null", "string"], "default": None},
        ]}},
        {"name": "ad", "type": {"type": "record", "name": "Ad", "fields": [{"name": "id", "type": "long"}]}},
        {"name": "at", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": "long"},
        {"name": "amount", "type": "double"},
    ],
}

# The .proto text of the Protobuf schema; Click is the second message (message index [1]).
PROTO_TEXT = """\
syntax = "proto3";

package clicks;

message Ad {
  int64 id = 1;
  string campaign = 2;
}

message Click {
  message User {
    string id = 1;
    string country = 2;
  }
  User user = 1;
  Ad ad = 2;
  string at = 3;
  int64 ts_us = 4;
  double amount = 5;
}
"""

# The records: (user, country, ad, at, ts in ms). The pairs (user, ad) repeat; with a window of
# 2 minutes the same pair within it is a copy.
RECORDS = [
    ("u1", "FR", 7, "YYYY-MM-DDT12:00:00Z", 0),
    ("u1", "FR", 8, "YYYY-MM-DDT12:00:01Z", 1_000),
    ("u2", None, 7, "YYYY-MM-DDT12:00:02Z", 2_000),
    ("u1", "FR", 7, "YYYY-MM-DDT14:00:30+02:00", 30_000),
    ("u3", "DE", 9, "YYYY-MM-DDT12:00:50.000Z", 50_000),
    ("u1", "FR", 7, "YYYY-MM-DDT12:02:01.000Z", 121_000),
]
DAY = "2024-05-01"  # the fixtures' day (test data, not documentation)
EPOCH_MS = 1_714_564_800_000  # DAY at 12:00:00Z


def in_venv() -> None:
    """Re-runs this script in target/formats-venv with the pinned client library."""
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if not python.exists():
        venv.create(VENV, with_pip=True)
    probe = subprocess.run([python, "-c", "import confluent_kafka, fastavro, google.protobuf"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", REQUIREMENT],
                       check=True)
    os.execv(python, [str(python), __file__, *sys.argv[1:]])


def proto_message_class():
    """The Click message class, from a FileDescriptorProto built here (no protoc needed)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="clicks.proto", package="clicks", syntax="proto3")
    ad = fd.message_type.add(name="Ad")
    ad.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL, json_name="id")
    ad.field.add(name="campaign", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, json_name="campaign")
    click = fd.message_type.add(name="Click")
    user = click.nested_type.add(name="User")
    user.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, json_name="id")
    user.field.add(name="country", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, json_name="country")
    click.field.add(name="user", number=1, type=F.TYPE_MESSAGE, type_name=".clicks.Click.User",
                    label=F.LABEL_OPTIONAL, json_name="user")
    click.field.add(name="ad", number=2, type=F.TYPE_MESSAGE, type_name=".clicks.Ad", label=F.LABEL_OPTIONAL,
                    json_name="ad")
    click.field.add(name="at", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, json_name="at")
    click.field.add(name="ts_us", number=4, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL, json_name="tsUs")
    click.field.add(name="amount", number=5, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL, json_name="amount")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("clicks.Click"))


def build() -> dict[str, str]:
    """The fixture files, by path under tests/formats/."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient.new_client({"url": "mock://formats"})
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    avro = AvroSerializer(registry, json.dumps(AVRO_SCHEMA))
    Click = proto_message_class()
    proto = ProtobufSerializer(Click, registry, {"use.deprecated.format": False})

    lines, files = [], {}
    for i, (user, country, ad, at, ts) in enumerate(RECORDS):
        at = at.replace("YYYY-MM-DD", DAY)
        ms = EPOCH_MS + ts
        fields = {"user": {"id": user, "country": country}, "ad": {"id": ad}, "at": at, "ts": ms,
                  "ts_us": ms * 1000 + i, "amount": 0.25 * i}
        avro_bytes = avro(dict(fields, ts=ms), ctx)
        msg = Click(at=at, ts_us=fields["ts_us"], amount=fields["amount"])
        msg.user.id = user
        if country:
            msg.user.country = country
        msg.ad.id = ad
        proto_bytes = proto(msg, ctx)
        for fmt, data in (("avro", avro_bytes), ("protobuf", proto_bytes)):
            schema_id = int.from_bytes(data[1:5], "big")
            lines.append(json.dumps({"format": fmt, "schema_id": schema_id, "hex": data.hex(), "fields": fields}))
    for fmt, data in (("avro", avro_bytes), ("protobuf", proto_bytes)):
        schema_id = int.from_bytes(data[1:5], "big")
        schema = registry.get_schema(schema_id)
        answer = {"schema": schema.schema_str}
        if schema.schema_type and schema.schema_type != "AVRO":
            answer["schemaType"] = schema.schema_type
        files[f"registry/{schema_id}.json"] = json.dumps(answer, indent=2) + "\n"
        if fmt == "avro":
            files[f"schemas/{schema_id}.avsc"] = json.dumps(AVRO_SCHEMA, indent=2) + "\n"
        else:
            files[f"schemas/{schema_id}.proto"] = PROTO_TEXT
            check_proto_text(schema.schema_str)
    files["records.jsonl"] = "\n".join(lines) + "\n"
    return files


def check_proto_text(registered_b64: str) -> None:
    """PROTO_TEXT describes the message the serializer registered (same names, numbers, types)."""
    import base64
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(registered_b64))
    seen = []
    for m in fd.message_type:
        seen.append(f"message {m.name} {{")
        for n in m.nested_type:
            seen.append(f"message {n.name} {{")
            seen += [f"{f.name} = {f.number};" for f in n.field]
            seen.append("}")
        seen += [f"{f.name} = {f.number};" for f in m.field]
        seen.append("}")
    text = [" ".join(line.split()[-3:]) if "=" in line else line.strip() for line in PROTO_TEXT.splitlines()]
    text = [t for t in text if t.startswith(("message", "}")) or ("=" in t and not t.startswith("syntax"))]
    if text != seen:
        sys.exit(f"PROTO_TEXT differs from the registered descriptor:\n{seen}\n{text}")


def main() -> None:
    in_venv()
    files = build()
    check = "--check" in sys.argv[1:]
    stale = []
    for name, text in sorted(files.items()):
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"format_fixtures: wrote tests/formats/{name}")
    if stale:
        sys.exit(f"format_fixtures: differ from the serializers' output: {stale}")


if __name__ == "__main__":
    main()
