//! How the core plugs limits in (`features/feature.rs`).

use std::sync::Arc;

use super::stage::{CountingSetup, SliceCounting};
use crate::config::error::invalid;
use crate::config::{ConfigError, Resolved, Settings, Tier};
use crate::engine::slice::stage::StageSetup;
use crate::features::feature::{CoreSettings, Feature, PublishedCounts, SlicePublish};
use crate::features::lookups::KeyLookup;

/// The feature as the core plugs it in.
pub struct LimitsFeature;

impl Feature for LimitsFeature {
    fn name(&self) -> &'static str {
        "limits"
    }

    /// `[limit]` and `[flag]`: the counting stage, on when either asks for
    /// it, and its rules across the availability policy and the level.
    fn check(&self, s: &Settings, core: &CoreSettings) -> Result<Option<Arc<dyn StageSetup>>, ConfigError> {
        let counting = s.limit.validate(&s.flag, &s.filter, s.input.max_record_bytes)?;
        core.availability.check_counting(counting.is_some())?;
        check_with_tier(s, counting.as_ref(), core.tier)?;
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

/// The rules across `[limit]`, `[flag]` and `[tier]`, once the level is
/// known: counting by the dedup key, and no counting on a sparse leaf.
fn check_with_tier(s: &Settings, counting: Option<&CountingSetup>, tier: Tier) -> Result<(), ConfigError> {
    if let Some(c) = counting
        && c.count_key.is_none()
    {
        // Counting by the dedup key replaces the timer filter.
        if c.spec.max_per_window.is_none() {
            return Err(invalid(
                "flag.threshold",
                s.flag.threshold,
                "with limit.count_key = \"\" (count by the dedup key) and no limit.max_per_window, every record \
                 would be delivered (the counting stage replaces the timer filter): set limit.count_key to \
                 count by another key, or limit.max_per_window",
            ));
        }
        if tier == Tier::SparseRoot {
            return Err(invalid(
                "limit.count_key",
                "\"\"",
                "a sparse root counting by the dedup key would publish a verdict for each of the first N \
                 copies, and the leaves would drop the later ones the root lets through: count by another key",
            ));
        }
    }
    if counting.is_some() && tier == Tier::SparseLeaf {
        // A sparse leaf runs no slices: its limits and flags would never apply.
        return Err(invalid(
            "tier.role",
            &s.tier.role,
            "a sparse leaf cannot run [limit] or [flag] (set them on the root)",
        ));
    }
    Ok(())
}
