//! How the core plugs limits in (`features/feature.rs`).

use std::sync::Arc;

use crate::engine::slice::stage::StageSetup;
use crate::features::feature::Feature;
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
}
