#!/usr/bin/env python3
"""A schema registry for the tests, and records written into it by confluent-kafka's serializers.

    python3 tests/formats/serializers.py FORMAT BOOTSTRAP TOPIC [TLS_DIR AUTH]

FORMAT is avro, protobuf or json_schema. It serves a registry in memory on a free port of
127.0.0.1 (the part of Confluent's REST API the serializers and dedupd use: POST
/subjects/S/versions registers, POST /subjects/S looks up, GET /schemas/ids/ID,
GET /subjects/S/versions/V and GET /subjects/S/versions), writes the records of RECORDS to TOPIC
with the serializer of FORMAT (AvroSerializer, ProtobufSerializer, JSONSerializer) through that
registry, prints one JSON line ({"port": ..., "records": ...}) and serves until its standard input
closes.

With TLS_DIR and AUTH it serves https with TLS_DIR's server.pem and server.key, requires a client
certificate signed by its ca.pem, and answers 401 to a request whose Authorization header is
neither AUTH (what the client under test must send) nor the serializers' own basic credentials.

- avro: the Click schema refers to the named type clicks.User registered under the subject
  `user` (a schema reference). One more record is written with a schema that refers to clicks.Ad
  under the subject `ad`, which is deleted once it is written: its reference is then missing.
- protobuf: clicks/click.proto imports ads/ad.proto; the serializer registers the imported file
  under its own subject (`ads/ad.proto`) and the Click schema with a reference to it.
- json_schema: a JSON Schema of the same record.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (user, ad, at): keyed by user and ad within 2 minutes, record 3 is a copy of record 0.
RECORDS = [
    ("u1", 7, "2024-05-01T12:00:00Z"),
    ("u1", 8, "2024-05-01T12:00:01Z"),
    ("u2", 7, "2024-05-01T12:00:02Z"),
    ("u1", 7, "2024-05-01T14:00:30+02:00"),
    ("u3", 9, "2024-05-01T12:00:50.000Z"),
    ("u1", 7, "2024-05-01T12:02:01.000Z"),
]


class Store:
    """Schemas by id and subjects' versions, as a schema registry keeps them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[dict] = []  # id - 1 -> {"schema", "schemaType", "references"}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version - 1

    @staticmethod
    def normal(body: dict) -> dict:
        return {"schema": body["schema"], "schemaType": body.get("schemaType") or "AVRO",
                "references": body.get("references") or []}

    def register(self, subject: str, body: dict) -> dict:
        schema = self.normal(body)
        with self.lock:
            if schema not in self.ids:
                self.ids.append(schema)
            sid = self.ids.index(schema) + 1
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            return self.version(subject, versions.index(sid) + 1)

    def lookup(self, subject: str, body: dict) -> dict | None:
        schema = self.normal(body)
        with self.lock:
            for v, sid in enumerate(self.subjects.get(subject, []), 1):
                if self.ids[sid - 1] == schema:
                    return self.version(subject, v)
        return None

    def version(self, subject: str, version: int) -> dict:
        sid = self.subjects[subject][version - 1]
        return dict(self.by_id(sid), subject=subject, version=version, id=sid)

    def by_id(self, sid: int) -> dict:
        schema = dict(self.ids[sid - 1])
        if schema["schemaType"] == "AVRO":
            del schema["schemaType"]
        if not schema["references"]:
            del schema["references"]
        return schema


STORE = Store()


# The Authorization headers answered (None: any), with TLS_DIR and AUTH.
ALLOWED: set[str] | None = None
# The serializers' own credentials over https (basic auth).
SERIALIZER_USER = "serializer:s3cret"


class Handler(BaseHTTPRequestHandler):
    def authorized(self) -> bool:
        if ALLOWED is None or self.headers.get("Authorization") in ALLOWED:
            return True
        self.answer(401, {"error_code": 401, "message": "Unauthorized"})
        return False

    def answer(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self, code: int, what: str) -> None:
        self.answer(404, {"error_code": code, "message": f"{what} not found"})

    def parts(self) -> list[str]:
        path = urllib.parse.urlsplit(self.path).path
        return [urllib.parse.unquote(p) for p in path.strip("/").split("/")]

    def do_POST(self) -> None:
        if not self.authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        match self.parts():
            case ["subjects", subject, "versions"]:
                self.answer(200, STORE.register(subject, body))
            case ["subjects", subject]:
                found = STORE.lookup(subject, body)
                self.answer(200, found) if found else self.not_found(40403, "Schema")
            case _:
                self.not_found(404, self.path)

    def do_GET(self) -> None:
        if not self.authorized():
            return
        match self.parts():
            case ["schemas", "ids", sid] if sid.isdigit() and 0 < int(sid) <= len(STORE.ids):
                self.answer(200, STORE.by_id(int(sid)))
            case ["schemas", "ids", _]:
                self.not_found(40403, "Schema")
            case ["subjects", subject, "versions"] if subject in STORE.subjects:
                self.answer(200, list(range(1, len(STORE.subjects[subject]) + 1)))
            case ["subjects", subject, "versions", v] if subject in STORE.subjects:
                versions = STORE.subjects[subject]
                n = len(versions) if v in ("latest", "-1") else int(v) if v.isdigit() else 0
                self.answer(200, STORE.version(subject, n)) if 0 < n <= len(versions) else self.not_found(
                    40402, "Version")
            case ["subjects", *_]:
                self.not_found(40401, "Subject")
            case _:
                self.not_found(404, self.path)

    def log_message(self, *args) -> None:
        pass


def avro_values(client, topic):
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    user = {"type": "record", "name": "User", "namespace": "clicks",
            "fields": [{"name": "id", "type": "string"}, {"name": "country", "type": ["null", "string"]}]}
    ad = {"type": "record", "name": "Ad", "namespace": "clicks", "fields": [{"name": "id", "type": "long"}]}
    client.register_schema("user", Schema(json.dumps(user), "AVRO"))
    client.register_schema("ad", Schema(json.dumps(ad), "AVRO"))
    click = {"type": "record", "name": "Click", "namespace": "clicks", "fields": [
        {"name": "user", "type": "clicks.User"},
        {"name": "ad", "type": {"type": "record", "name": "AdRef", "fields": [{"name": "id", "type": "long"}]}},
        {"name": "at", "type": "string"}]}
    refs = [SchemaReference("clicks.User", "user", 1)]
    ctx = SerializationContext(topic, MessageField.VALUE)
    serialize = AvroSerializer(client, Schema(json.dumps(click), "AVRO", refs))
    values = [serialize({"user": {"id": u, "country": None}, "ad": {"id": a}, "at": at}, ctx)
              for u, a, at in RECORDS]
    # A schema that refers to clicks.Ad, whose subject is deleted once the record is written.
    gone = {"type": "record", "name": "Gone", "namespace": "clicks",
            "fields": [{"name": "user", "type": "clicks.User"}, {"name": "ad", "type": "clicks.Ad"},
                       {"name": "at", "type": "string"}]}
    refs = [SchemaReference("clicks.User", "user", 1), SchemaReference("clicks.Ad", "ad", 1)]
    serialize = AvroSerializer(client, Schema(json.dumps(gone), "AVRO", refs),
                               conf={"auto.register.schemas": True})
    values.append(serialize({"user": {"id": "u9", "country": "FR"}, "ad": {"id": 1}, "at": RECORDS[0][2]},
                            SerializationContext(topic + "-gone", MessageField.VALUE)))
    with STORE.lock:
        del STORE.subjects["ad"]
    return values


def protobuf_values(client, topic):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    F = descriptor_pb2.FieldDescriptorProto
    ad = descriptor_pb2.FileDescriptorProto(name="ads/ad.proto", package="ads", syntax="proto3")
    ad.message_type.add(name="Ad").field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    click = descriptor_pb2.FileDescriptorProto(name="clicks/click.proto", package="clicks", syntax="proto3",
                                               dependency=["ads/ad.proto"])
    message = click.message_type.add(name="Click")
    message.nested_type.add(name="User").field.add(name="id", number=1, type=F.TYPE_STRING,
                                                   label=F.LABEL_OPTIONAL)
    message.field.add(name="user", number=1, type=F.TYPE_MESSAGE, type_name=".clicks.Click.User",
                      label=F.LABEL_OPTIONAL)
    message.field.add(name="ad", number=2, type=F.TYPE_MESSAGE, type_name=".ads.Ad", label=F.LABEL_OPTIONAL)
    message.field.add(name="at", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(ad)
    pool.Add(click)
    Click = message_factory.GetMessageClass(pool.FindMessageTypeByName("clicks.Click"))
    serialize = ProtobufSerializer(Click, client, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = []
    for u, a, at in RECORDS:
        msg = Click(at=at)
        msg.user.id = u
        msg.ad.id = a
        values.append(serialize(msg, ctx))
    return values


def json_schema_values(client, topic):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Click", "type": "object",
              "properties": {"user": {"type": "object", "properties": {"id": {"type": "string"}}},
                             "ad": {"type": "object", "properties": {"id": {"type": "integer"}}},
                             "at": {"type": "string"}},
              "required": ["user", "ad", "at"]}
    serialize = JSONSerializer(json.dumps(schema), client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [serialize({"user": {"id": u}, "ad": {"id": a}, "at": at}, ctx) for u, a, at in RECORDS]


def main() -> None:
    global ALLOWED
    fmt, bootstrap, topic = sys.argv[1:4]
    tls_dir, auth = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (None, None)
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    conf = {"url": f"http://127.0.0.1:{port}"}
    if tls_dir:
        import base64
        import os
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(tls_dir, "server.pem"), os.path.join(tls_dir, "server.key"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(os.path.join(tls_dir, "ca.pem"))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        ALLOWED = {auth, "Basic " + base64.b64encode(SERIALIZER_USER.encode()).decode()}
        conf = {"url": f"https://127.0.0.1:{port}", "basic.auth.user.info": SERIALIZER_USER,
                "ssl.ca.location": os.path.join(tls_dir, "ca.pem"),
                "ssl.certificate.location": os.path.join(tls_dir, "client.pem"),
                "ssl.key.location": os.path.join(tls_dir, "client.key")}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = SchemaRegistryClient(conf)
    values = {"avro": avro_values, "protobuf": protobuf_values, "json_schema": json_schema_values}[fmt](client, topic)
    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=f"k{i}",
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
    if producer.flush(30) or failed:
        sys.exit(f"serializers.py: not delivered: {failed}")
    print(json.dumps({"port": port, "records": len(values)}), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
