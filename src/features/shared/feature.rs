//! How the core plugs shared in (`features/feature.rs`).

use super::reader::InputReader;
use crate::config::{Resolved, SlicingMode};
use crate::features::feature::Feature;
use crate::kafka::KafkaLayerError;
use crate::kafka::slice_log::read_order::NamedRecords;

/// The feature as the core plugs it in.
pub struct SharedFeature;

impl Feature for SharedFeature {
    fn name(&self) -> &'static str {
        "shared"
    }

    fn named_records(
        &self,
        cfg: &Resolved,
        missing: &prometheus::IntCounter,
    ) -> Result<Option<Box<dyn NamedRecords>>, KafkaLayerError> {
        if cfg.slicing != SlicingMode::Shared {
            return Ok(None);
        }
        Ok(Some(Box::new(InputReader::new(cfg, missing.clone())?)))
    }
}
