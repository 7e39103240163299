//! What a stage is: the deterministic part of a feature that a slice runs
//! beside its filter, record by record, in the slice's order. A stage reads
//! a record when it arrives (before it waits for the watermark) and learns
//! its verdict when it is judged (in event-time order), so its state
//! follows from the slice log alone, as the filter's does (docs/design.md,
//! determinism).
//!
//! Every hook has a no-op default: a stage implements the ones it needs.
//! A feature hands the slices a [`StageSetup`], which starts its stage or
//! restores it from its snapshot section; the slice holds the stages that
//! are on ([`super::stages::SliceStages`]) and calls them in the order of
//! the list, never a feature by name. A stage that is off costs the record
//! path nothing.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use crate::engine::record::{InvalidRecord, RecordView};
use crate::filter::{KeyHash, SnapshotError, Verdict};

/// A readable record taking its place in the slice: what a stage may read
/// of it when it arrives.
#[derive(Clone, Copy)]
pub struct Arrival<'a> {
    /// Its offset in the slice log (its position until it is judged).
    pub offset: u64,
    pub record: &'a RecordView<'a>,
    /// The input topic it was read from, when the router stamped it
    /// (`None`: the slice log is the input itself).
    pub topic: Option<&'a str>,
    /// The seed the slice hashes keys with.
    pub seed: u64,
}

/// A released record being judged: its position, key hash and time.
#[derive(Clone, Copy)]
pub struct Judging<'a> {
    pub position: u64,
    pub hash: &'a KeyHash,
    pub time_ms: u64,
}

/// What the stages add to a judgment, for the outputs: the worker writes
/// them as headers and to the stages' own topic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageNotes {
    /// A stage turned the record into a duplicate: the rule that did, for
    /// the `dedupd.rule` header of its duplicates copy.
    pub rule: Option<StageRule>,
    /// A stage copies the record to its own topic with this count (the
    /// flags topic, `dedupd.count`).
    pub copy_count: Option<u64>,
    /// A header a stage adds to the record's duplicates copy (name, value).
    pub duplicate_header: Option<(&'static str, Arc<str>)>,
}

/// Why a stage turned a record into a duplicate: `<name>;count=<count>`
/// in its `dedupd.rule` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageRule {
    pub name: &'static str,
    pub count: u64,
}

/// A stage's section tag in a slice snapshot: fixed for good, since a
/// snapshot names its sections by them. Tags in use: 1 provenance, 2 the
/// counting stage (constants in their features' `stage.rs`), 3
/// [`PROGRESS_TAG`], the slice's own; a new stage takes the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SectionTag(pub u16);

/// The tag of the slice's own progress section (not a stage's).
pub const PROGRESS_TAG: SectionTag = SectionTag(3);

/// A stage of a slice. The slice calls the hooks in the order of its log:
/// `arrived` for every readable record, then `judged` or `refused` for the
/// same record when it leaves the order buffer.
pub trait Stage: Debug + Send + Sync + Any {
    /// A readable record arrived. A stage that reads more of the record may
    /// find it unreadable: the record is then a dead letter, not judged.
    fn arrived(&mut self, _arrival: &Arrival<'_>) -> Result<(), InvalidRecord> {
        Ok(())
    }

    /// Whether this stage judges instead of the timer filter (the filter
    /// is then not consulted and stays empty).
    fn judges_instead(&self) -> bool {
        false
    }

    /// The record is judged: the stage may turn a distinct `verdict` into a
    /// duplicate, and adds its part of `notes`.
    fn judged(&mut self, _record: Judging<'_>, _verdict: &mut Verdict, _notes: &mut StageNotes) {}

    /// The record at `position` waited for the watermark and was refused
    /// (a time jump): whatever the stage kept for it goes.
    fn refused(&mut self, _position: u64) {}

    /// A record a restored slice holds, re-read from its log: the stage
    /// takes back what `arrived` kept of it that the snapshot does not hold.
    /// `false` if it cannot be read (a record that was held could).
    fn refill(&mut self, _arrival: &Arrival<'_>) -> bool {
        true
    }

    /// For a stage that judges instead of the filter: what `/v1/lookup`
    /// answers for a key's hash (the verdict its next copy would get),
    /// without counting it.
    fn lookup(&self, _hash: &KeyHash) -> Option<serde_json::Value> {
        None
    }

    /// The stage's section of the slice snapshot.
    fn encode(&self, w: &mut Vec<u8>);

    /// The tag of its section.
    fn tag(&self) -> SectionTag;

    /// Whether a reader that does not run this stage must refuse a
    /// snapshot holding its section rather than restore without it (a
    /// stage whose state the verdicts depend on).
    fn required(&self) -> bool {
        true
    }

    /// A copy (the slice state is cloned for its snapshot copy).
    fn boxed_clone(&self) -> Box<dyn Stage>;

    /// The stage as its own type, for the feature that reads it (admin
    /// lookups, metrics).
    fn as_any(&self) -> &dyn Any;
}

/// A feature's stage as configured: it starts the stage of a fresh slice or
/// restores it from the slice's snapshot. Every feature with a stage is in
/// the list, on or off, so a snapshot section is always read by its feature:
/// the feature decides what a section taken with it off (or on) restores to.
pub trait StageSetup: Debug + Send + Sync + Any {
    /// The tag of the stage's snapshot section.
    fn tag(&self) -> SectionTag;

    /// Whether the stage runs.
    fn on(&self) -> bool;

    /// Whether the stage judges every record instead of the timer filter
    /// (the settings then give the filter its smallest size).
    fn judges_instead(&self) -> bool {
        false
    }

    /// The most bytes the stage holds in one slice, for the memory budget.
    fn planned_bytes(&self) -> u64 {
        0
    }

    /// The setup as its own type, for the feature that reads it.
    fn as_any(&self) -> &dyn Any;

    /// What the slice snapshot's fingerprint adds: every parameter the
    /// stage's state depends on, so a snapshot taken with other ones is
    /// refused as a whole.
    fn fingerprint(&self) -> String {
        String::new()
    }

    /// The stage of a fresh slice (`None` when off).
    fn start(&self) -> Option<Box<dyn Stage>>;

    /// The stage of slice `slice` restored from its snapshot `section`
    /// (`None`: the snapshot has none); `Ok(None)`: the slice runs no such
    /// stage, or it starts fresh.
    fn restore(&self, section: Option<&[u8]>, slice: u32) -> Result<Option<Box<dyn Stage>>, SnapshotError>;
}
