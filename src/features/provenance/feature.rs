//! How the core plugs provenance in (`features/feature.rs`).

use std::sync::Arc;

use super::stage::SliceProvenance;
use crate::config::{ConfigError, Resolved, Settings};
use crate::engine::SliceState;
use crate::engine::slice::stage::StageSetup;
use crate::features::feature::{CoreSettings, Feature, PublishedCounts, SlicePublish};
use crate::features::lookups::KeyLookup;

/// `dedupd_provenance_dropped_total`'s name in [`PublishedCounts`].
const DROPPED: &str = "provenance_dropped";

/// The feature as the core plugs it in.
pub struct ProvenanceFeature;

impl Feature for ProvenanceFeature {
    fn name(&self) -> &'static str {
        "provenance"
    }

    /// `[provenance]`: its stage, on when a source is set.
    fn check(&self, s: &Settings, core: &CoreSettings) -> Result<Option<Arc<dyn StageSetup>>, ConfigError> {
        let provenance = s.provenance.validate(&s.filter, &s.input, core.passthrough)?;
        Ok(Some(Arc::new(provenance)))
    }

    fn key_lookup(&self) -> Option<&'static KeyLookup> {
        Some(&super::lookup::PROVENANCE)
    }

    fn publish(&self, _cfg: &Resolved, slice: &SlicePublish<'_>, published: &mut PublishedCounts) {
        let SlicePublish { metrics, label, state } = *slice;
        let provenance = state.stages.get::<SliceProvenance>();
        if let Some(p) = provenance {
            let dropped = p.sources.dropped();
            let before = published.insert(DROPPED, dropped).unwrap_or(0);
            if dropped > before {
                metrics.features.provenance_dropped.with_label_values(&[label]).inc_by(dropped - before);
            }
        }
        let live_sources = provenance.map_or(0, |p| p.sources.live_sources());
        metrics.features.provenance_sources.with_label_values(&[label]).set(live_sources as i64);
    }

    fn restored(&self, state: &SliceState, published: &mut PublishedCounts) {
        if let Some(p) = state.stages.get::<SliceProvenance>() {
            published.insert(DROPPED, p.sources.dropped());
        }
    }
}
