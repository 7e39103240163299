//! How the core plugs availability in (`features/feature.rs`).

use crate::features::feature::Feature;

/// The feature as the core plugs it in.
pub struct AvailabilityFeature;

impl Feature for AvailabilityFeature {
    fn name(&self) -> &'static str {
        "availability"
    }
}
