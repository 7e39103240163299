//! How the core plugs provenance in (`features/feature.rs`).

use std::sync::Arc;

use crate::engine::slice::stage::StageSetup;
use crate::features::feature::Feature;
use crate::features::lookups::KeyLookup;
use crate::features::stages::StagesSetup;

/// The feature as the core plugs it in.
pub struct ProvenanceFeature;

impl Feature for ProvenanceFeature {
    fn name(&self) -> &'static str {
        "provenance"
    }

    fn stage(&self, stages: &StagesSetup) -> Option<Arc<dyn StageSetup>> {
        Some(Arc::new(stages.provenance.clone()))
    }

    fn key_lookup(&self) -> Option<&'static KeyLookup> {
        Some(&super::lookup::PROVENANCE)
    }
}
