//! The features that run a stage in every slice, as one list chosen at
//! start-up: the counting stage (`[limit]`, `[flag]`) and provenance. Each
//! is a [`StageSetup`] of its folder; this file lists them in hook order and
//! holds their section tags, so a new stage is its folder, an implementation
//! of [`StageSetup`] and [`Stage`](crate::engine::slice::stage::Stage), a
//! field here and a tag below.
//!
//! The order of the list is the order of the hooks: the counting stage
//! before provenance, because a limit may turn a record into a duplicate
//! and provenance names a first source for duplicates only.

use std::sync::Arc;

use super::limits::stage::CountingSetup;
use super::provenance::stage::ProvenanceSetup;
use crate::engine::slice::stage::{SectionTag, StageSetup};
use crate::engine::slice::stages::StageSetups;

/// Provenance's section tag. Fixed for good: snapshots name sections by
/// their tags (3 is the slice's own progress section).
pub const PROVENANCE_TAG: SectionTag = SectionTag(1);
/// The counting stage's section tag.
pub const COUNTING_TAG: SectionTag = SectionTag(2);

/// Which stages the slices run and their settings (from the settings,
/// once at start-up; `None`: off).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StagesSetup {
    /// `[limit]`, `[flag]`.
    pub counting: Option<CountingSetup>,
    /// `[provenance]`.
    pub provenance: Option<ProvenanceSetup>,
}

impl StagesSetup {
    /// The list the slices run, every feature on or off, in hook order.
    pub fn setups(&self) -> StageSetups {
        let counting: Arc<dyn StageSetup> = Arc::new(self.counting.clone());
        let provenance: Arc<dyn StageSetup> = Arc::new(self.provenance.clone());
        StageSetups::new(vec![counting, provenance])
    }
}
