//! How the core plugs tiers in (`features/feature.rs`).

use super::settings::Tier;
use crate::config::Resolved;
use crate::engine::SliceState;
use crate::features::feature::{Feature, OnDistinct, PublishedCounts, SlicePublish};
use crate::kafka::KafkaLayerError;

/// `dedupd_tier_lookups_total`'s labels, also their names in [`PublishedCounts`].
const FORWARDED: &str = "forwarded";
const RESOLVED: &str = "resolved";

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

    /// A dense leaf resolves its duplicates itself and forwards its
    /// distinct records: `dedupd_tier_lookups_total` counts both.
    fn publish(&self, cfg: &Resolved, slice: &SlicePublish<'_>, published: &mut PublishedCounts) {
        if cfg.tier != Tier::DenseLeaf {
            return;
        }
        let c = &slice.state.counters;
        for (name, now) in [(FORWARDED, c.distinct), (RESOLVED, c.duplicates)] {
            let before = published.insert(name, now).unwrap_or(0);
            if now > before {
                slice.metrics.verdicts.tier_lookups.with_label_values(&[name]).inc_by(now - before);
            }
        }
    }

    fn restored(&self, state: &SliceState, published: &mut PublishedCounts) {
        published.insert(FORWARDED, state.counters.distinct);
        published.insert(RESOLVED, state.counters.duplicates);
    }

    /// A sparse root publishes a verdict for every record it delivers.
    fn on_distinct(&self, cfg: &Resolved, seed: u64) -> Result<Option<Box<dyn OnDistinct>>, KafkaLayerError> {
        if cfg.tier != Tier::SparseRoot {
            return Ok(None);
        }
        Ok(Some(Box::new(super::io::RootVerdicts::new(cfg, seed)?)))
    }
}
