//! How the core plugs limits in (`features/feature.rs`).

use std::sync::Arc;

use super::stage::SliceCounting;
use crate::config::Resolved;
use crate::engine::slice::stage::StageSetup;
use crate::features::feature::{Feature, PublishedCounts, SlicePublish};
use crate::features::lookups::KeyLookup;
use crate::features::stages::StagesSetup;

/// The feature as the core plugs it in.
pub struct LimitsFeature;

impl Feature for LimitsFeature {
    fn name(&self) -> &'static str {
        "limits"
    }

    fn stage(&self, stages: &StagesSetup) -> Option<Arc<dyn StageSetup>> {
        Some(Arc::new(stages.counting.clone()))
    }

    fn key_lookup(&self) -> Option<&'static KeyLookup> {
        Some(&super::lookup::COUNT)
    }

    fn publish(&self, _cfg: &Resolved, slice: &SlicePublish<'_>, _published: &mut PublishedCounts) {
        let false_positive = slice.state.stages.get::<SliceCounting>().map_or(0.0, |c| c.stage.false_positive());
        slice.metrics.features.limit_false_positive.with_label_values(&[slice.label]).set(false_positive);
    }
}
