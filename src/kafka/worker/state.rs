//! What the worker loop, its rebalance callbacks and the admin lookups
//! share under the worker lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::gaps::SliceLogGaps;
use super::owned::OwnedSlice;
use super::policy::Deciding;
use super::restore_thread::Restores;
use super::setup::WorkerSetup;
use super::writer::Writer;
use crate::engine::Judgment;
use crate::kafka::consumed::ForwardTarget;

/// The owned slices and the slices being restored, with the threads that
/// write their snapshots and restore them.
pub(super) struct WorkerState {
    pub(super) slices: BTreeMap<u32, OwnedSlice>,
    /// Judgments of the record being handled (reused).
    pub(super) judged: Vec<Judgment>,
    pub(super) fatal: Option<String>,
    pub(super) writer: Writer,
    /// The buffer snapshots are copied into, reused; `None` while a snapshot has it.
    pub(super) buffer: Option<Vec<u8>>,
    /// Slices assigned and being restored on the restore thread, with the
    /// number of the restore asked for: a result for another number (the
    /// slice was revoked meanwhile) is dropped.
    pub(super) restoring: BTreeMap<u32, u64>,
    /// Slices the group gave this member whose partitions are not in the
    /// consumer's assignment yet: added (`incremental_assign`) at the offset
    /// to read from once that is known, left out of the `incremental_unassign`
    /// of a revocation. (Not assigned paused at a placeholder offset and then
    /// sought and resumed: librdkafka wakes its fetcher only when a partition
    /// starts fetching, not when it is resumed, so a resumed partition waited
    /// up to a second for the fetcher's next turn — docs/availability.md.)
    pub(super) unassigned: BTreeSet<u32>,
    /// Slices being restored whose records the settings decide meanwhile.
    pub(super) deciding: BTreeMap<u32, Deciding>,
    /// Numbers restores.
    pub(super) restores_asked: u64,
    pub(super) restorer: Restores,
    /// The slice-log offset each slice reads next, and the gaps it waits on.
    pub(super) gaps: SliceLogGaps,
    /// Where the records of the partitions assigned go: the worker loop's
    /// records queue ((`super::forward_records`)); `None` while there is none.
    pub(super) records_to: Option<ForwardTarget>,
    /// Partitions revoked or sought since the loop last took records from
    /// its records queue: the records of theirs it has taken already are
    /// stale. (librdkafka drops the ones it still holds after a seek, not
    /// the ones handed over in a batch.)
    pub(super) stale: Vec<i32>,
}

impl WorkerState {
    /// Owns nothing yet; starts the checkpoint writer and the restore thread.
    pub(super) fn new(setup: &Arc<WorkerSetup>) -> Self {
        WorkerState {
            slices: BTreeMap::new(),
            judged: Vec::new(),
            fatal: None,
            writer: Writer::start(setup.clone()),
            buffer: None,
            restoring: BTreeMap::new(),
            unassigned: BTreeSet::new(),
            deciding: BTreeMap::new(),
            restores_asked: 0,
            restorer: Restores::start(setup.clone()),
            gaps: SliceLogGaps::default(),
            records_to: None,
            stale: Vec::new(),
        }
    }
}
