//! How the core plugs availability in (`features/feature.rs`).

use super::settings::AvailabilityPolicy;
use crate::config::Resolved;
use crate::features::feature::Feature;
use crate::kafka::restore::Decision;

/// The feature as the core plugs it in.
pub struct AvailabilityFeature;

impl Feature for AvailabilityFeature {
    fn name(&self) -> &'static str {
        "availability"
    }

    /// `deliver` and `drop` decide the records of a slice being restored
    /// in policy ranges; `wait` decides none (they wait for the restore).
    fn while_restoring(&self, cfg: &Resolved) -> Option<Decision> {
        match cfg.availability {
            AvailabilityPolicy::Wait => None,
            AvailabilityPolicy::Deliver => Some(Decision::Deliver),
            AvailabilityPolicy::Drop => Some(Decision::Drop),
        }
    }
}
