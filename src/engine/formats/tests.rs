//! Records written by confluent-kafka's Python serializers (AvroSerializer,
//! ProtobufSerializer, schema ids from its `mock://` registry), saved in
//! tests/formats/ by scripts/format_fixtures.py.

use std::path::PathBuf;

use super::*;
use crate::engine::{KeySpec, TimeSpec};

struct Fixture {
    format: Format,
    schema_id: u32,
    bytes: Vec<u8>,
    fields: serde_json::Value,
}

fn dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/formats").join(sub)
}

fn fixtures() -> Vec<Fixture> {
    let text = std::fs::read_to_string(dir("records.jsonl")).unwrap();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let hex = v["hex"].as_str().unwrap();
            let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            Fixture {
                format: v["format"].as_str().unwrap().parse().unwrap(),
                schema_id: u32::try_from(v["schema_id"].as_u64().unwrap()).unwrap(),
                bytes,
                fields: v["fields"].clone(),
            }
        })
        .collect()
}

fn extractor(key: &str, time: &str) -> Extractor {
    Extractor { key: key.parse::<KeySpec>().unwrap(), time: time.parse::<TimeSpec>().unwrap(), max_record_bytes: 1000 }
}

fn run(schemas: &Schemas, f: &Fixture, ex: &Extractor) -> Result<(Vec<u8>, u64), (InvalidReason, String)> {
    let decoder = Decoder { format: f.format, schemas: schemas.clone(), registry: None };
    let record = RecordView { payload: &f.bytes, decoder: Some(&decoder), ..RecordView::default() };
    ex.extract(&record, 0).map(|e| (e.key.into_owned(), e.time_ms)).map_err(|e| (e.reason, e.detail))
}

/// The same keys and times from local schema files (`.avsc`, `.proto` text)
/// and from the registry's answers (the Protobuf one a base64 descriptor).
#[test]
fn the_python_serializers_records_read_by_nested_fields() {
    let all = fixtures();
    assert_eq!(all.iter().filter(|f| f.format == Format::Avro).count(), 6);
    assert_eq!(all.iter().filter(|f| f.format == Format::Protobuf).count(), 6);
    for source in ["schemas", "registry"] {
        let schemas = Schemas::from_dir(&dir(source)).unwrap();
        assert_eq!(schemas.len(), 2, "{source}");
        for f in &all {
            let want_key = format!("{}\x1f{}", f.fields["user"]["id"].as_str().unwrap(), f.fields["ad"]["id"]);
            let ts = f.fields["ts"].as_u64().unwrap();
            let got = run(&schemas, f, &extractor("json:/user/id+json:/ad/id", "json:/at"));
            assert_eq!(got, Ok((want_key.clone().into_bytes(), ts)), "{source} {:?} {}", f.format, f.fields);
            // Microseconds in an int64/long field, with the unit.
            let got = run(&schemas, f, &extractor("json:/user/id+json:/ad/id", "json:/ts_us:us"));
            assert_eq!(got, Ok((want_key.into_bytes(), ts)), "{source} {:?}", f.format);
            // A whole nested record as the key: its compact JSON.
            let (key, _) = run(&schemas, f, &extractor("json:/ad", "json:/at")).unwrap();
            assert_eq!(String::from_utf8(key).unwrap(), format!(r#"{{"id":{}}}"#, f.fields["ad"]["id"]));
            // An optional field that is not set is missing, as in JSON.
            let country = run(&schemas, f, &extractor("json:/user/country", "json:/at"));
            match f.fields["user"]["country"].as_str() {
                Some(c) => assert_eq!(country.unwrap().0, c.as_bytes()),
                None => assert_eq!(country.unwrap_err().0, InvalidReason::MissingKey),
            }
            let missing = run(&schemas, f, &extractor("json:/user/nope", "json:/at")).unwrap_err();
            assert_eq!(missing.0, InvalidReason::MissingKey);
            if f.format == Format::Avro {
                // timestamp-millis: a number of milliseconds.
                assert_eq!(run(&schemas, f, &extractor("json:/user/id", "json:/ts")).unwrap().1, ts);
            }
        }
    }
}

#[test]
fn unreadable_records_say_why() {
    let schemas = Schemas::from_dir(&dir("schemas")).unwrap();
    let all = fixtures();
    let avro = all.iter().find(|f| f.format == Format::Avro).unwrap();
    let proto = all.iter().find(|f| f.format == Format::Protobuf).unwrap();
    let ex = extractor("json:/user/id", "json:/at");
    let with = |f: &Fixture, bytes: Vec<u8>| Fixture { bytes, fields: f.fields.clone(), ..*f };

    // An unknown schema id.
    let mut unknown = avro.bytes.clone();
    unknown[1..5].copy_from_slice(&77u32.to_be_bytes());
    let (reason, detail) = run(&schemas, &with(avro, unknown), &ex).unwrap_err();
    assert_eq!(
        (reason, detail.as_str()),
        (InvalidReason::BadSchema, "schema id 77: unknown (not among the schemas read)")
    );
    // Not the wire format (a JSON record on an Avro input), and too short.
    let (reason, detail) = run(&schemas, &with(avro, br#"{"user":1}"#.to_vec()), &ex).unwrap_err();
    assert_eq!(reason, InvalidReason::BadSchema);
    assert!(detail.contains("starts with 0x7b"), "{detail}");
    assert_eq!(run(&schemas, &with(avro, vec![0, 0]), &ex).unwrap_err().0, InvalidReason::BadSchema);
    // A body cut short, or with bytes left over.
    for cut in [6, avro.bytes.len() - 1] {
        let (reason, detail) = run(&schemas, &with(avro, avro.bytes[..cut].to_vec()), &ex).unwrap_err();
        assert_eq!(reason, InvalidReason::BadAvro, "{cut}: {detail}");
        assert!(detail.starts_with(&format!("schema id {}: ", avro.schema_id)), "{detail}");
    }
    let mut longer = avro.bytes.clone();
    longer.push(0);
    assert!(run(&schemas, &with(avro, longer), &ex).unwrap_err().1.contains("1 bytes left"));
    // An Avro record read with the Protobuf schema's id: the format does not match.
    let mut crossed = avro.bytes.clone();
    crossed[1..5].copy_from_slice(&proto.schema_id.to_be_bytes());
    let (reason, detail) = run(&schemas, &with(avro, crossed), &ex).unwrap_err();
    assert_eq!(reason, InvalidReason::BadSchema);
    assert!(detail.contains("is a Protobuf schema, the input format is avro"), "{detail}");
    // Protobuf: a message index the schema does not have, a cut message.
    let mut index = proto.bytes[..5].to_vec();
    index.extend_from_slice(&[2, 10]);
    index.extend_from_slice(&proto.bytes[7..]);
    let (reason, detail) = run(&schemas, &with(proto, index), &ex).unwrap_err();
    assert_eq!(reason, InvalidReason::BadProtobuf);
    assert!(detail.contains("no such message"), "{detail}");
    let cut = proto.bytes[..proto.bytes.len() - 3].to_vec();
    assert_eq!(run(&schemas, &with(proto, cut), &ex).unwrap_err().0, InvalidReason::BadProtobuf);
    // Garbage never panics.
    for f in [avro, proto] {
        for len in 0..f.bytes.len() {
            let mut bytes = f.bytes.clone();
            bytes[len] ^= 0xa5;
            let _ = run(&schemas, &with(f, bytes), &ex);
            let _ = run(&schemas, &with(f, f.bytes[..len].to_vec()), &ex);
        }
    }
    // A count of 2^40 items (or a string of 2^40 bytes) in a few bytes: refused, not reserved.
    limit_avro_allocations(1 << 20);
    let mut hostile = Schemas::default();
    let schema = r#"{"type":"record","name":"H","fields":[{"name":"a","type":{"type":"array","items":"long"}},
        {"name":"s","type":"string"}]}"#;
    hostile.insert(5, Schema::avro(schema).unwrap());
    let zigzag_2_40 = [0x80, 0x80, 0x80, 0x80, 0x80, 0x40];
    for body in [&zigzag_2_40[..], &[0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40][..]] {
        let bytes = [&[0, 0, 0, 0, 5][..], body].concat();
        let fixture = Fixture { format: Format::Avro, schema_id: 5, bytes, fields: serde_json::Value::Null };
        let (reason, detail) = run(&hostile, &fixture, &extractor("json:/s", "json:/a/0")).unwrap_err();
        assert_eq!(reason, InvalidReason::BadAvro, "{detail}");
    }
    // Keys and times that need no field do not decode the record.
    let by_key = extractor("record-key", "record-timestamp");
    let decoder = Decoder { format: Format::Avro, schemas, registry: None };
    let record = RecordView {
        key: Some(b"k"),
        payload: b"not avro",
        timestamp_ms: Some(5),
        decoder: Some(&decoder),
        ..RecordView::default()
    };
    assert_eq!(by_key.extract(&record, 0).unwrap().time_ms, 5);
}

#[test]
fn formats_parse() {
    assert_eq!("avro".parse(), Ok(Format::Avro));
    assert_eq!("protobuf".parse(), Ok(Format::Protobuf));
    assert_eq!("json".parse(), Ok(Format::Json));
    assert_eq!("json_schema".parse(), Ok(Format::JsonSchema));
    assert!("xml".parse::<Format>().unwrap_err().contains("expected json, avro, protobuf or json_schema"));
}

/// `json_schema`: JSON in the wire format, fields by pointer as in JSON;
/// not in the wire format is `bad_schema`, a body that is not JSON `bad_json`.
#[test]
fn json_schema_records_are_read_as_json() {
    let decoder = Decoder { format: Format::JsonSchema, schemas: Schemas::default(), registry: None };
    let ex = extractor("json:/user/id+json:/ad/id", "json:/at");
    let read = |payload: &[u8]| {
        let record = RecordView { payload, decoder: Some(&decoder), ..RecordView::default() };
        ex.extract(&record, 0).map(|e| (e.key.into_owned(), e.time_ms)).map_err(|e| (e.reason, e.detail))
    };
    let body = br#"{"user":{"id":"u1"},"ad":{"id":7},"at":"2026-01-02T03:04:05Z"}"#;
    let record = [&[0, 0, 0, 0, 3][..], body].concat();
    assert_eq!(read(&record), Ok((b"u1\x1f7".to_vec(), 1_767_323_045_000)));
    assert_eq!(read(body).unwrap_err().0, InvalidReason::BadSchema, "no wire-format header");
    assert_eq!(read(&[0, 0, 0, 0, 3, b'{']).unwrap_err().0, InvalidReason::BadJson);
}
