//! The stages a slice runs beside its filter, as one list chosen at
//! start-up ([`StageSetups`], from the list of features) and the stages of
//! one slice that are on ([`SliceStages`]). The slice calls the list
//! through the hooks of [`Stage`], in the list's order, and never names a
//! feature.

use std::sync::Arc;

use super::stage::{Arrival, Judging, SectionTag, Stage, StageNotes, StageSetup};
use crate::engine::record::InvalidRecord;
use crate::filter::{KeyHash, SnapshotError, Verdict};

/// Every feature's stage setup, on or off, in hook order.
#[derive(Clone, Debug, Default)]
pub struct StageSetups(Vec<Arc<dyn StageSetup>>);

impl StageSetups {
    pub fn new(setups: Vec<Arc<dyn StageSetup>>) -> Self {
        StageSetups(setups)
    }

    /// The setup of type `T` (for the feature that reads its settings).
    pub fn get<T: StageSetup>(&self) -> Option<&T> {
        self.0.iter().find_map(|s| s.as_any().downcast_ref::<T>())
    }

    /// Whether a stage judges instead of the timer filter.
    pub fn judges_instead(&self) -> bool {
        self.0.iter().any(|s| s.judges_instead())
    }

    /// The most bytes the stages hold in one slice.
    pub fn planned_bytes(&self) -> u64 {
        self.0.iter().map(|s| s.planned_bytes()).fold(0, u64::saturating_add)
    }

    /// What a slice snapshot's fingerprint adds: each stage's, in order.
    pub fn fingerprint(&self) -> String {
        self.0.iter().map(|s| s.fingerprint()).collect()
    }

    fn claims(&self, tag: SectionTag) -> bool {
        self.0.iter().any(|s| s.tag() == tag)
    }
}

/// A stage's section of a slice snapshot, still encoded.
pub struct Section<'a> {
    pub tag: SectionTag,
    /// Whether a reader that does not run the stage must refuse the snapshot.
    pub required: bool,
    pub bytes: &'a [u8],
}

/// One slice's stages that are on, in hook order.
#[derive(Debug, Default)]
pub struct SliceStages(Vec<Box<dyn Stage>>);

impl Clone for SliceStages {
    fn clone(&self) -> Self {
        SliceStages(self.0.iter().map(|s| s.boxed_clone()).collect())
    }
}

/// Equal when their snapshot sections are (what a stage keeps of held
/// records and re-derives on restore is not state).
impl PartialEq for SliceStages {
    fn eq(&self, other: &Self) -> bool {
        self.sections() == other.sections()
    }
}

impl SliceStages {
    /// The stage of type `T`, if it is on (for the feature that reads it).
    pub fn get<T: Stage>(&self) -> Option<&T> {
        self.0.iter().find_map(|s| s.as_any().downcast_ref::<T>())
    }

    /// Turns each stage on as `setups` say (a stage restored with the slice
    /// is kept) or off.
    pub fn set(&mut self, setups: &StageSetups) {
        let mut kept = std::mem::take(&mut self.0);
        for setup in setups.0.iter().filter(|s| s.on()) {
            let restored = kept.iter().position(|s| s.tag() == setup.tag()).map(|i| kept.swap_remove(i));
            self.0.extend(restored.or_else(|| setup.start()));
        }
    }

    /// See [`Stage::judges_instead`]: whether any stage does.
    pub fn judges_instead(&self) -> bool {
        self.0.iter().any(|s| s.judges_instead())
    }

    /// See [`Stage::lookup`]: the first stage's answer.
    pub fn lookup(&self, hash: &KeyHash) -> Option<serde_json::Value> {
        self.0.iter().find_map(|s| s.lookup(hash))
    }

    /// See [`Stage::arrived`]: the first stage that cannot read the record refuses it.
    pub fn arrived(&mut self, arrival: &Arrival<'_>) -> Result<(), InvalidRecord> {
        self.0.iter_mut().try_for_each(|s| s.arrived(arrival))
    }

    /// See [`Stage::judged`]: every stage in order, each seeing the verdict
    /// the ones before it left.
    pub fn judged(&mut self, record: Judging<'_>, verdict: &mut Verdict) -> StageNotes {
        let mut notes = StageNotes::default();
        self.0.iter_mut().for_each(|s| s.judged(record, verdict, &mut notes));
        notes
    }

    /// See [`Stage::refused`].
    pub fn refused(&mut self, position: u64) {
        self.0.iter_mut().for_each(|s| s.refused(position));
    }

    /// See [`Stage::refill`].
    pub fn refill(&mut self, arrival: &Arrival<'_>) -> bool {
        self.0.iter_mut().all(|s| s.refill(arrival))
    }

    /// The sections of the stages that are on, encoded, in tag order, each
    /// with whether it is required.
    pub fn sections(&self) -> Vec<(SectionTag, bool, Vec<u8>)> {
        let mut sections: Vec<_> = self
            .0
            .iter()
            .map(|s| {
                let mut bytes = Vec::new();
                s.encode(&mut bytes);
                (s.tag(), s.required(), bytes)
            })
            .collect();
        sections.sort_by_key(|(tag, ..)| *tag);
        sections
    }

    /// The stages of a restored slice, from the snapshot's `sections`,
    /// configured as `setups` say: each feature restores its own section
    /// (or decides what its absence means). A section no feature reads was
    /// written by a later release: refused when it is required (its state
    /// cannot be dropped silently), else left out.
    pub fn restore(sections: &[Section<'_>], setups: &StageSetups, slice: u32) -> Result<SliceStages, SnapshotError> {
        for s in sections.iter().filter(|s| !setups.claims(s.tag)) {
            if s.required {
                return Err(SnapshotError::Malformed(format!(
                    "slice snapshot: section {} is not known to this release (a later dedupd wrote it): restore \
                     it with that release, or start this slice cold",
                    s.tag.0
                )));
            }
            log::warn!("slice {slice}: snapshot section {} is not known to this release: restored without it", s.tag.0);
        }
        let mut stages = SliceStages::default();
        for setup in &setups.0 {
            let section = sections.iter().find(|s| s.tag == setup.tag()).map(|s| s.bytes);
            stages.0.extend(setup.restore(section, slice)?);
        }
        stages.set(setups);
        Ok(stages)
    }
}
