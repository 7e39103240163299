//! How the core plugs shared in (`features/feature.rs`).

use std::sync::Arc;

use super::handoff::Handoff;
use super::reader::InputReader;
use crate::config::{ConfigError, Resolved, Settings, SlicingMode};
use crate::engine::slice::stage::StageSetup;
use crate::features::feature::{CoreSettings, Feature};
use crate::kafka::KafkaLayerError;
use crate::kafka::slice_log::read_order::NamedRecords;

/// The feature as the core plugs it in.
pub struct SharedFeature;

impl Feature for SharedFeature {
    fn name(&self) -> &'static str {
        "shared"
    }

    /// What shared mode asks of `filter.slices`.
    fn check(&self, s: &Settings, core: &CoreSettings) -> Result<Option<Arc<dyn StageSetup>>, ConfigError> {
        super::settings::validate(core.slicing, &s.filter)?;
        Ok(None)
    }

    fn named_records(
        &self,
        cfg: &Resolved,
        missing: &prometheus::IntCounter,
        handoff: Option<&Arc<Handoff>>,
    ) -> Result<Option<Box<dyn NamedRecords>>, KafkaLayerError> {
        if cfg.slicing != SlicingMode::Shared {
            return Ok(None);
        }
        Ok(Some(Box::new(InputReader::new(cfg, missing.clone(), handoff.cloned())?)))
    }
}
