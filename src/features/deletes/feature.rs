//! How the core plugs deletes in (`features/feature.rs`).

use crate::features::feature::Feature;

/// The feature as the core plugs it in.
pub struct DeletesFeature;

impl Feature for DeletesFeature {
    fn name(&self) -> &'static str {
        "deletes"
    }
}
