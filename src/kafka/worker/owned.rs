//! A slice this member owns: its state and the worker's bookkeeping around
//! it. A snapshot copied while the slice goes on is the state's own
//! business ([`crate::engine::SliceState::begin_copy`]): the worker changes
//! the state the same way whether one is in progress or not.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::held::HeldRecords;
use crate::engine::{Extractor, Judgment, ReleasePos, SliceCounters, SliceRecord, SliceState};
use crate::features::feature::PublishedCounts;
use crate::kafka::checkpoint::Manifest;
use crate::kafka::producer::SentMark;
use crate::kafka::replay::ReplayBounds;
use crate::kafka::restore::{FlushLogSpan, PolicyRange};

/// A slice this member owns: its state, what its replay and its policy
/// decisions have reached, the records it holds, its snapshot bookkeeping.
pub(super) struct OwnedSlice {
    pub(super) state: SliceState,
    /// A snapshot being copied while the slice goes on.
    pub(super) copying: Option<Copying>,
    /// How far each topic the slice writes holds its records (read at
    /// restore, raised by the policy ranges' decisions made
    /// meanwhile): judgments up to there are replayed without writing them
    /// there again.
    pub(super) replay: ReplayBounds,
    /// The last judgment made (its release position): with `replay`, what
    /// a policy output names in `dedupd.policy.after`.
    pub(super) last_judged: Option<ReleasePos>,
    /// The policy ranges logged that the slice has not passed yet: their
    /// records are decided by the logged policy, not judged.
    pub(super) ranges: Vec<PolicyRange>,
    /// The records waiting for the watermark, by slice offset (for output).
    pub(super) held: HeldRecords,
    /// Idle flushes logged and not applied yet (a replay): the slice
    /// offsets they came after.
    pub(super) flushes: VecDeque<crate::kafka::restore::LoggedFlush>,
    /// The part of the flush log its restore read (a snapshot names where
    /// the next restore reads from, [`FlushLogSpan::read_from`]).
    pub(super) flush_log: FlushLogSpan,
    /// When the slice last received a record (or was restored).
    pub(super) last_arrival: Instant,
    pub(super) manifest: Option<Manifest>,
    pub(super) since_checkpoint: u64,
    pub(super) last_checkpoint: Instant,
    /// A snapshot of this slice is being copied or written.
    pub(super) writing: bool,
    /// Counters already published to the metrics.
    pub(super) published: SliceCounters,
    /// Filter counters already published: generations created, dropped, saturated inserts.
    pub(super) published_filter: [u64; 3],
    /// The features' counters already published.
    pub(super) published_features: PublishedCounts,
    /// `dedupd_hold_overflows_total` already published.
    pub(super) published_overflows: u64,
}

/// A snapshot being copied while its slice goes on (see `snapshots.rs`).
pub(super) struct Copying {
    /// The slice offset it was taken at.
    pub(super) offset: u64,
    /// What had been sent to the slice's output partitions when it was taken.
    pub(super) mark: SentMark,
    pub(super) previous: Option<Manifest>,
    /// Where a restore from it reads the flush log from.
    pub(super) flush_log_offset: u64,
    /// When the snapshot was taken.
    pub(super) taken: Instant,
    /// The longest the copy has stopped the worker at once.
    pub(super) longest_pause: Duration,
    /// Records judged while it was copied.
    pub(super) records: u64,
}

impl OwnedSlice {
    /// Takes in the next input record (see [`SliceState::process`]),
    /// counted for the snapshot being copied, if any.
    pub(super) fn process(&mut self, rec: &SliceRecord<'_>, extractor: &Extractor, judged: &mut Vec<Judgment>) {
        if let Some(c) = self.copying.as_mut() {
            c.records += 1;
        }
        self.state.process(rec, extractor, judged)
    }
}
