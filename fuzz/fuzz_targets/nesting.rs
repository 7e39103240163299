//! Avro and Protobuf records of recursive schemas (a linked list, a tree of
//! arrays and maps, a message holding itself, repeated and in a map): any
//! bytes, and chains of any depth the input asks for, give a key and a time
//! or a typed reason, never a stack overflow; a record nested deeper than
//! the limit is `bad_avro` / `bad_protobuf` naming its depth.
#![no_main]

use std::sync::OnceLock;

use dedupd::engine::formats::{self, Decoder, Format, Schema, Schemas, depth};
use dedupd::engine::{Extractor, InvalidReason, RecordView};
use libfuzzer_sys::fuzz_target;

const AVRO_LIST: &str = r#"{"type":"record","name":"N","fields":[{"name":"id","type":"string"},
    {"name":"ts","type":"long"},{"name":"next","type":["null","N"]}]}"#;
const AVRO_TREE: &str = r#"{"type":"record","name":"T","namespace":"x","fields":[{"name":"id","type":"string"},
    {"name":"ts","type":"long"},{"name":"kids","type":{"type":"array","items":"x.T"}},
    {"name":"named","type":{"type":"map","values":["null","T"]}}]}"#;
const PROTO: &str = r#"syntax = "proto3";
message N { string id = 1; int64 ts = 2; N next = 3; repeated N kids = 4; map<string, N> named = 5; }"#;

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        formats::limit_avro_allocations(1 << 16);
        let mut schemas = Schemas::default();
        schemas.insert(1, Schema::avro(AVRO_LIST).expect("the list schema"));
        schemas.insert(2, Schema::avro(AVRO_TREE).expect("the tree schema"));
        schemas.insert(3, Schema::protobuf(PROTO).expect("the message"));
        schemas
    })
}

/// A list `levels` deep in the wire format, for the schema `id`.
fn chain(id: u8, levels: usize) -> Vec<u8> {
    let mut body = Vec::new();
    if id == 3 {
        body = vec![0x0a, 1, b'k', 0x10, 2];
        for _ in 1..levels {
            let mut outer = vec![0x0a, 1, b'k', 0x10, 2, 0x1a];
            let mut len = body.len();
            while len >= 0x80 {
                outer.push((len as u8) | 0x80);
                len >>= 7;
            }
            outer.push(len as u8);
            outer.extend_from_slice(&body);
            body = outer;
        }
        return [&[0, 0, 0, 0, 3, 0][..], &body].concat();
    }
    // Each level: id "k", ts 1, then the list's union branch 1 or the
    // tree's one-item array block; the tree closes each level after its
    // child (the array's end, an empty map).
    let (open, innermost, close): (&[u8], &[u8], &[u8]) = if id == 1 {
        (&[2, b'k', 2, 2], &[2, b'k', 2, 0], &[])
    } else {
        (&[2, b'k', 2, 2], &[2, b'k', 2, 0, 0], &[0, 0])
    };
    body.extend_from_slice(&[0, 0, 0, 0, id]);
    for _ in 1..levels {
        body.extend_from_slice(open);
    }
    body.extend_from_slice(innermost);
    for _ in 1..levels {
        body.extend_from_slice(close);
    }
    body
}

fuzz_target!(|data: &[u8]| {
    let Some((&how, rest)) = data.split_first() else { return };
    let id = how % 3 + 1;
    let format = if id == 3 { Format::Protobuf } else { Format::Avro };
    // Half the inputs are raw bytes after the header, half a chain as deep as
    // the next two bytes say (up to 65 535 levels).
    let (payload, levels) = if how & 0x80 == 0 {
        ([&[0, 0, 0, 0, id][..], rest].concat(), None)
    } else {
        let levels = rest.iter().take(2).fold(1usize, |n, &b| n * 256 + usize::from(b)) % 65_536;
        (chain(id, levels.max(1)), Some(levels.max(1)))
    };
    let decoder = Decoder { format, schemas: schemas().clone(), registry: None };
    let ex =
        Extractor { key: "json:/id".parse().unwrap(), time: "json:/ts".parse().unwrap(), max_record_bytes: 1 << 20 };
    let record = RecordView { payload: &payload, decoder: Some(&decoder), ..RecordView::default() };
    let got = ex.extract(&record, 0);
    if let Err(e) = &got {
        assert!(!e.detail.is_empty());
    }
    if let Some(levels) = levels.filter(|&l| l > depth::MAX_DEPTH && id != 2) {
        let e = got.expect_err("deeper than the limit");
        let want = if format == Format::Avro { InvalidReason::BadAvro } else { InvalidReason::BadProtobuf };
        assert_eq!(e.reason, want);
        assert!(e.detail.contains(&format!("nested {levels} levels deep")), "{}", e.detail);
    }
});
