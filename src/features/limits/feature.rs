//! How the core plugs limits in (`features/feature.rs`).

use std::sync::Arc;

use super::stage::SliceCounting;
use crate::config::{ConfigError, Resolved, Settings};
use crate::engine::slice::stage::StageSetup;
use crate::features::feature::{CoreSettings, Feature, PublishedCounts, SlicePublish};
use crate::features::lookups::KeyLookup;

/// The feature as the core plugs it in.
pub struct LimitsFeature;

impl Feature for LimitsFeature {
    fn name(&self) -> &'static str {
        "limits"
    }

    /// `[limit]` and `[flag]`: the counting stage, on when either asks for it.
    fn check(&self, s: &Settings, _core: &CoreSettings) -> Result<Option<Arc<dyn StageSetup>>, ConfigError> {
        let counting = s.limit.validate(&s.flag, &s.filter, s.input.max_record_bytes)?;
        Ok(Some(Arc::new(counting)))
    }

    fn key_lookup(&self) -> Option<&'static KeyLookup> {
        Some(&super::lookup::COUNT)
    }

    fn publish(&self, _cfg: &Resolved, slice: &SlicePublish<'_>, _published: &mut PublishedCounts) {
        let false_positive = slice.state.stages.get::<SliceCounting>().map_or(0.0, |c| c.stage.false_positive());
        slice.metrics.features.limit_false_positive.with_label_values(&[slice.label]).set(false_positive);
    }
}
