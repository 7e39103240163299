//! What a stage is: the deterministic part of a feature that a slice runs
//! beside its filter, record by record, in the slice's order. A stage reads
//! a record when it arrives (before it waits for the watermark) and learns
//! its verdict when it is judged (in event-time order), so its state
//! follows from the slice log alone, as the filter's does (docs/design.md,
//! determinism).
//!
//! Every hook has a no-op default: a stage implements the ones it needs.
//! The stages a slice runs are one closed list, chosen at start-up
//! (`crate::features::stages`): the slice calls the list, never a feature
//! by name, and a stage that is off costs the record path nothing.

use std::sync::Arc;

use crate::engine::record::{InvalidRecord, RecordView};
use crate::features::limits::counting::CountMark;
use crate::filter::{KeyHash, Verdict};

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
/// them as headers and to the stages' own topics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageNotes {
    /// The counting stage's decision (`[limit]`, `[flag]`), if it counted
    /// the record. A limited record's verdict is a duplicate.
    pub count: Option<CountMark>,
    /// Provenance: the one source that may have delivered the key before
    /// this record (then it did: the index has no false negatives).
    pub first_source: Option<Arc<str>>,
}

impl StageNotes {
    /// Whether a frequency limit turned the record into a duplicate.
    pub fn limited(&self) -> bool {
        self.count.is_some_and(|m| m.limited)
    }

    /// The estimate of a record the counting stage flagged.
    pub fn flagged(&self) -> Option<u64> {
        self.count.filter(|m| m.flagged).map(|m| m.estimate)
    }
}

/// A stage of a slice. The slice calls the hooks in the order of its log:
/// `arrived` for every readable record, then `judged` or `refused` for the
/// same record when it leaves the order buffer.
pub trait Stage {
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

    /// The stage's section of the slice snapshot.
    fn encode(&self, w: &mut Vec<u8>);
}
