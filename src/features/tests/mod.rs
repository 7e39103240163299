//! The stages in a slice: their snapshots (every version a deployment may
//! hold, golden files) and what a restored slice judges.

use crate::engine::Extractor;
use crate::engine::order::OrderSettings;
use crate::filter::{FilterChoice, FilterSpec};

mod golden;
mod provenance;

fn extractor() -> Extractor {
    Extractor { key: "record-key".parse().unwrap(), time: "record-timestamp".parse().unwrap(), max_record_bytes: 100 }
}

fn params() -> FilterChoice {
    FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap().into()
}

fn order(lateness_ms: u64) -> OrderSettings {
    OrderSettings { lateness_ms, max_clock_jump_ms: 100_000, jump_confirmations: 3 }
}
