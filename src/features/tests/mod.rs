//! The stages in a slice: their snapshots (every version a deployment may
//! hold, golden files) and what a restored slice judges.

use std::sync::Arc;

use crate::engine::Extractor;
use crate::engine::order::OrderSettings;
use crate::engine::slice::stages::StageSetups;
use crate::features::limits::stage::CountingSetup;
use crate::features::provenance::stage::ProvenanceSetup;
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

/// The stages of the slices with these settings, each on or off, in the
/// order of the list of features (as the settings' check gives them).
pub(super) fn stage_setups(counting: Option<CountingSetup>, provenance: Option<ProvenanceSetup>) -> StageSetups {
    StageSetups::new(vec![Arc::new(counting), Arc::new(provenance)])
}
