//! How the core plugs tiers in (`features/feature.rs`).

use super::settings::Tier;
use crate::config::Resolved;
use crate::features::feature::{Feature, OnDistinct};
use crate::kafka::KafkaLayerError;

/// The feature as the core plugs it in.
pub struct TiersFeature;

impl Feature for TiersFeature {
    fn name(&self) -> &'static str {
        "tiers"
    }

    /// A dense leaf's outputs carry its `app.id` to its parent.
    fn output_header(&self, cfg: &Resolved) -> Option<(&'static str, String)> {
        (cfg.tier == Tier::DenseLeaf).then(|| (super::io::LEAF, cfg.settings.app.id.clone()))
    }

    /// A sparse root publishes a verdict for every record it delivers.
    fn on_distinct(&self, cfg: &Resolved, seed: u64) -> Result<Option<Box<dyn OnDistinct>>, KafkaLayerError> {
        if cfg.tier != Tier::SparseRoot {
            return Ok(None);
        }
        Ok(Some(Box::new(super::io::RootVerdicts::new(cfg, seed)?)))
    }
}
