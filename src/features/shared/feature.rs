//! How the core plugs shared in (`features/feature.rs`).

use crate::features::feature::Feature;

/// The feature as the core plugs it in.
pub struct SharedFeature;

impl Feature for SharedFeature {
    fn name(&self) -> &'static str {
        "shared"
    }
}
