//! The settings of the features that run a stage in every slice: the
//! counting stage (`[limit]`, `[flag]`) and provenance. Each feature hands
//! the slices its [`StageSetup`](crate::engine::slice::stage::StageSetup)
//! ([`Feature::stage`](super::feature::Feature::stage)), in the order of the
//! list of features.
//!
//! Section tags in use (fixed for good: snapshots name sections by them):
//! 1 provenance, 2 the counting stage, 3 the slice's own progress.

use super::limits::stage::CountingSetup;
use super::provenance::stage::ProvenanceSetup;

/// Which stages the slices run and their settings (from the settings,
/// once at start-up; `None`: off).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StagesSetup {
    /// `[limit]`, `[flag]`.
    pub counting: Option<CountingSetup>,
    /// `[provenance]`.
    pub provenance: Option<ProvenanceSetup>,
}
