//! Avro and Protobuf records in the Confluent wire format, read with the
//! schemas of tests/formats/ (the Python serializers' fixtures): any bytes
//! give a key and a time or a typed reason (`bad_schema`, `bad_avro`,
//! `bad_protobuf`, a missing or bad field), never a panic or an allocation
//! beyond the record's size.
#![no_main]

use std::sync::OnceLock;

use dedupd::engine::formats::{self, Decoder, Format, Schemas};
use dedupd::engine::{Extractor, InvalidReason, RecordView};
use libfuzzer_sys::fuzz_target;

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        formats::limit_avro_allocations(1 << 16);
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/formats/schemas");
        Schemas::from_dir(std::path::Path::new(dir)).expect("the fixture schemas")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, payload)) = data.split_first() else { return };
    let format = if which & 1 == 0 { Format::Avro } else { Format::Protobuf };
    let decoder = Decoder { format, schemas: schemas().clone(), registry: None };
    let ex = Extractor {
        key: "json:/user/id+json:/ad".parse().unwrap(),
        time: "json:/at".parse().unwrap(),
        max_record_bytes: 1 << 16,
    };
    let record = RecordView { payload, decoder: Some(&decoder), ..RecordView::default() };
    if let Err(e) = ex.extract(&record, 0) {
        assert!(!e.detail.is_empty());
        if payload.len() > ex.max_record_bytes {
            assert_eq!(e.reason, InvalidReason::TooLarge);
        }
    }
});
