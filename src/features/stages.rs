//! The stages a slice runs beside its filter, as one closed list chosen at
//! start-up: the counting stage (`[limit]`, `[flag]`) and provenance. The
//! slice state calls the list ([`SliceStages`]) through the hooks of
//! [`Stage`] and never names a feature; this file is the one place that
//! lists them, so a new stage is its folder, an implementation of
//! [`Stage`], a field here and a section tag (`engine/slice/sections.rs`).
//!
//! The order of the list is the order of the hooks: the counting stage
//! before provenance, because a limit may turn a record into a duplicate
//! and provenance names a first source for duplicates only.

use super::limits::stage::{CountingSetup, SliceCounting};
use super::provenance::stage::{ProvenanceSetup, SliceProvenance};
use crate::engine::record::InvalidRecord;
use crate::engine::slice::stage::{Arrival, Judging, Stage, StageNotes};
use crate::filter::{SnapshotError, Verdict};

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
    /// What a slice snapshot's fingerprint adds: every parameter the
    /// stages' state depends on, so a snapshot taken with other ones is
    /// refused as a whole. Provenance adds nothing: resized, it starts empty.
    pub fn fingerprint(&self) -> String {
        self.counting.as_ref().map_or_else(String::new, |c| c.fingerprint())
    }
}

/// A stage's section of a slice snapshot, still encoded, by its tag.
pub struct Section<'a> {
    pub tag: SectionTag,
    pub bytes: &'a [u8],
}

/// The stages' section tags. Fixed for good: a snapshot names its sections
/// by them (version 6), and versions 3 and 4 hold these two at fixed places.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SectionTag {
    Provenance = 1,
    Counting = 2,
}

/// One slice's stages (each `None` when off).
#[derive(Clone, Debug, Default)]
pub struct SliceStages {
    pub counting: Option<SliceCounting>,
    pub provenance: Option<SliceProvenance>,
}

/// Equal when their snapshot sections are (the count-key hashes of held
/// records are re-derived on restore, not state).
impl PartialEq for SliceStages {
    fn eq(&self, other: &Self) -> bool {
        self.sections() == other.sections()
    }
}

impl SliceStages {
    /// The stages that are on, in hook order.
    fn each(&mut self) -> impl Iterator<Item = &mut dyn Stage> {
        let counting = self.counting.as_mut().map(|s| s as &mut dyn Stage);
        let provenance = self.provenance.as_mut().map(|s| s as &mut dyn Stage);
        counting.into_iter().chain(provenance)
    }

    /// The stages that are on, in hook order, to read.
    fn each_ref(&self) -> impl Iterator<Item = &dyn Stage> {
        let counting = self.counting.as_ref().map(|s| s as &dyn Stage);
        let provenance = self.provenance.as_ref().map(|s| s as &dyn Stage);
        counting.into_iter().chain(provenance)
    }

    /// Turns each stage on as `setup` says (a stage restored with the slice
    /// is kept) or off.
    pub fn set(&mut self, setup: &StagesSetup) {
        match &setup.counting {
            None => self.counting = None,
            Some(s) if self.counting.is_none() => self.counting = Some(s.start()),
            Some(_) => {}
        }
        match &setup.provenance {
            None => self.provenance = None,
            Some(s) if self.provenance.is_none() => self.provenance = Some(SliceProvenance::new(s)),
            Some(_) => {}
        }
    }

    /// See [`Stage::judges_instead`]: whether any stage does.
    pub fn judges_instead(&self) -> bool {
        self.each_ref().any(|s| s.judges_instead())
    }

    /// See [`Stage::arrived`]: the first stage that cannot read the record refuses it.
    pub fn arrived(&mut self, arrival: &Arrival<'_>) -> Result<(), InvalidRecord> {
        self.each().try_for_each(|s| s.arrived(arrival))
    }

    /// See [`Stage::judged`]: every stage in order, each seeing the verdict
    /// the ones before it left.
    pub fn judged(&mut self, record: Judging<'_>, verdict: &mut Verdict) -> StageNotes {
        let mut notes = StageNotes::default();
        self.each().for_each(|s| s.judged(record, verdict, &mut notes));
        notes
    }

    /// See [`Stage::refused`].
    pub fn refused(&mut self, position: u64) {
        self.each().for_each(|s| s.refused(position));
    }

    /// See [`Stage::refill`].
    pub fn refill(&mut self, arrival: &Arrival<'_>) -> bool {
        self.each().all(|s| s.refill(arrival))
    }

    /// The sections of the stages that are on, encoded, in tag order.
    pub fn sections(&self) -> Vec<(SectionTag, Vec<u8>)> {
        let mut sections = Vec::new();
        if let Some(p) = &self.provenance {
            sections.push((SectionTag::Provenance, encoded(p)));
        }
        if let Some(c) = &self.counting {
            sections.push((SectionTag::Counting, encoded(c)));
        }
        sections
    }

    /// The stages of a restored slice, from the snapshot's `sections`,
    /// configured as `setup` says. A counting stage on in one and off in
    /// the other is refused (counts cannot be made up or dropped silently:
    /// the manifest fingerprint refuses it first); provenance resized, or
    /// not in the snapshot, starts empty (the slice's verdicts do not
    /// depend on it).
    pub fn restore(sections: &[Section<'_>], setup: &StagesSetup, slice: u32) -> Result<SliceStages, SnapshotError> {
        let find = |tag| sections.iter().find(|s| s.tag == tag).map(|s| s.bytes);
        let mut stages = SliceStages::default();
        if let (Some(bytes), Some(setup)) = (find(SectionTag::Provenance), &setup.provenance) {
            stages.provenance = SliceProvenance::restore(bytes, setup, slice)?;
        }
        stages.counting = match (find(SectionTag::Counting), &setup.counting) {
            (Some(bytes), Some(setup)) => Some(setup.restore(bytes)?),
            (Some(_), None) => return Err(counting_mismatch("on", "off")),
            (None, Some(_)) => return Err(counting_mismatch("off", "on")),
            (None, None) => None,
        };
        stages.set(setup);
        Ok(stages)
    }
}

fn encoded(stage: &dyn Stage) -> Vec<u8> {
    let mut bytes = Vec::new();
    stage.encode(&mut bytes);
    bytes
}

/// A snapshot taken with the counting stage `snapshot` ("on"/"off") read by
/// a slice configured with it `configured`.
fn counting_mismatch(snapshot: &str, configured: &str) -> SnapshotError {
    SnapshotError::ParameterMismatch {
        parameter: "counting",
        snapshot: snapshot.to_string(),
        configured: configured.to_string(),
    }
}
