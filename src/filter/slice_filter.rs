//! One slice's filter, of whichever kind was chosen ([`SliceFilter`] over
//! the kinds' filters, [`FilterKind`]): judged, deleted from, copied for a
//! snapshot while it goes on, looked up, reported. One arm per kind, each
//! handing over to the kind's folder; the kinds are chosen, sized and
//! united in [`super::family`].
//!
//! The slice filter owns its snapshot copy: while one is in progress
//! ([`SliceFilter::begin_copy`]), every change goes through it, so a caller
//! observes and deletes the same way whether a snapshot is being copied or
//! not.

use std::ops::Range;

use super::cuckoo::{self, CuckooFilter};
use super::decaying::{self, DecayingFilter};
use super::hash::KeyHash;
use super::kind_parts::{FilterFigures, PipeFigures};
use super::timer::copy::{CHUNK_BYTES, FilterCopy};
use super::timer::kind as timer_kind;
use super::timer::sliding::{DeleteRefusal, SlidingFilter, Verdict};
use super::timer::snapshot::Skeleton;

/// One slice's filter, of whichever kind was configured.
#[derive(Debug)]
pub struct SliceFilter {
    kind: FilterKind,
    /// A snapshot of the filter being copied while it goes on.
    copy: Option<Copied>,
}

/// The kinds of the family. Not boxed although the timer filter is the
/// larger: a slice has one, and a box would cost a pointer chase per record.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum FilterKind {
    /// The sliding-window timer filter: records expire after the window.
    Timer(SlidingFilter),
    /// A decaying kind: fixed memory, no window, nothing expires; late
    /// records are judged like any other, in their release order.
    Decaying(DecayingFilter),
    /// The cuckoo table filter: records expire after the window, as for
    /// timers; its slots can be deleted one by one.
    Cuckoo(CuckooFilter),
}

/// How a snapshot's filter part is copied.
#[derive(Debug)]
enum Copied {
    /// The timer filter's cells, chunk by chunk while the slice goes on.
    Cells(FilterCopy),
    /// A decaying or cuckoo filter, encoded whole when the copy began: the slice
    /// stops for one copy of its share of `filter.memory` (a pause over
    /// 100 ms is logged as a warning, and measured in
    /// `dedupd_checkpoint_stall_seconds`). Copy-on-write would save less
    /// than for timers: every record after the warm-up writes random words
    /// all over the arrays (the resets and decrements); for a cuckoo table,
    /// see [`crate::filter::cuckoo`] ("Snapshot copy").
    Whole { buffer: Vec<u8>, filter: Range<usize> },
}

/// The filter's part of a snapshot, measured before the snapshot's own
/// header is written in front of it ([`SliceFilter::prepare_copy`]).
pub enum Prepared {
    /// The timer filter's encoding, this long (its cells are copied later).
    Cells(usize),
    /// A decaying or cuckoo filter's whole encoding.
    Whole(Vec<u8>),
}

impl Prepared {
    /// How long the filter's encoding is.
    pub fn len(&self) -> usize {
        match self {
            Prepared::Cells(len) => *len,
            Prepared::Whole(bytes) => bytes.len(),
        }
    }

    /// Whether the filter's encoding is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Equal when their kinds' states are: a copy in progress is not state.
impl PartialEq for SliceFilter {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
    }
}

/// A clone has no copy in progress.
impl Clone for SliceFilter {
    fn clone(&self) -> Self {
        SliceFilter { kind: self.kind.clone(), copy: None }
    }
}

impl From<FilterKind> for SliceFilter {
    fn from(kind: FilterKind) -> Self {
        SliceFilter { kind, copy: None }
    }
}

impl SliceFilter {
    /// The kind's own filter.
    pub fn kind(&self) -> &FilterKind {
        &self.kind
    }

    /// The timer filter, if this is one.
    pub fn as_timer(&self) -> Option<&SlidingFilter> {
        match &self.kind {
            FilterKind::Timer(f) => Some(f),
            FilterKind::Decaying(_) | FilterKind::Cuckoo(_) => None,
        }
    }

    /// The cuckoo table filter, if this is one.
    pub fn as_cuckoo(&self) -> Option<&CuckooFilter> {
        match &self.kind {
            FilterKind::Cuckoo(f) => Some(f),
            FilterKind::Timer(_) | FilterKind::Decaying(_) => None,
        }
    }

    /// The decaying filter, if this is one.
    pub fn as_decaying(&self) -> Option<&DecayingFilter> {
        match &self.kind {
            FilterKind::Timer(_) | FilterKind::Cuckoo(_) => None,
            FilterKind::Decaying(c) => Some(c),
        }
    }

    /// The seed keys are hashed with.
    pub fn hash_seed(&self) -> u64 {
        match &self.kind {
            FilterKind::Timer(f) => f.params().seed,
            FilterKind::Decaying(c) => c.hash_seed(),
            FilterKind::Cuckoo(f) => f.params().seed,
        }
    }

    /// Whether the memory `observe` touches is large enough that fetching
    /// the next keys' ahead pays (the cuckoo kind's tables of 1 MiB and more).
    pub fn worth_prefetching(&self) -> bool {
        match &self.kind {
            FilterKind::Cuckoo(f) => f.worth_prefetching(),
            FilterKind::Timer(_) | FilterKind::Decaying(_) => false,
        }
    }

    /// Starts fetching the memory `observe` of `hash` will touch (the
    /// cuckoo kind: both buckets in every table; the timer judges batches
    /// its own way).
    pub fn prefetch(&self, hash: &KeyHash) {
        if let FilterKind::Cuckoo(f) = &self.kind {
            f.prefetch(hash);
        }
    }

    /// Test-then-update for a key at `time_ms` (decaying kinds have no time and
    /// report no equal-timer groups).
    #[inline]
    pub fn observe(&mut self, hash: &KeyHash, time_ms: u64) -> Verdict {
        match (&mut self.kind, &mut self.copy) {
            (FilterKind::Timer(f), Some(Copied::Cells(copy))) => f.observe_copying(hash, time_ms, copy),
            (FilterKind::Timer(f), _) => f.observe(hash, time_ms),
            (FilterKind::Decaying(c), _) => match c.observe(hash) {
                true => Verdict::Duplicate { equal_timers: 0 },
                false => Verdict::Distinct,
            },
            // A whole copy was taken when it began: nothing to tell it.
            (FilterKind::Cuckoo(f), _) => match f.observe(hash, time_ms) {
                true => Verdict::Duplicate { equal_timers: 0 },
                false => Verdict::Distinct,
            },
        }
    }

    /// Forgets a key (deletable timer filters and cuckoo tables; a decaying
    /// kind refuses, as a timer filter that is not deletable does).
    pub fn delete(&mut self, hash: &KeyHash) -> Result<(), DeleteRefusal> {
        match (&mut self.kind, &mut self.copy) {
            (FilterKind::Timer(f), Some(Copied::Cells(copy))) => f.delete_copying(hash, copy),
            (FilterKind::Timer(f), _) => f.delete(hash),
            (FilterKind::Decaying(_), _) => Err(DeleteRefusal::NotDeletable),
            (FilterKind::Cuckoo(f), _) => f.delete(hash),
        }
    }

    /// The first step of a snapshot: the filter's part measured (a decaying
    /// kind's encoded whole now), so that the caller can write its header.
    pub fn prepare_copy(&self) -> Prepared {
        match &self.kind {
            FilterKind::Timer(f) => Prepared::Cells(Skeleton::of(f).len()),
            FilterKind::Decaying(c) => Prepared::Whole(decaying::encode(c)),
            FilterKind::Cuckoo(f) => Prepared::Whole(cuckoo::snapshot::encode(f)),
        }
    }

    /// Starts a copy of the filter's encoding into `buffer`, after `head`
    /// (the caller's header, written first) and followed by `trailer` bytes
    /// for the caller. Until [`Self::finish_copy`], changes go through it.
    pub fn begin_copy(&mut self, prepared: Prepared, head: &[u8], mut buffer: Vec<u8>, trailer: usize) {
        let copy = match (&self.kind, prepared) {
            (FilterKind::Timer(f), _) => {
                if buffer.len() < head.len() {
                    buffer.resize(head.len(), 0);
                }
                buffer[..head.len()].copy_from_slice(head);
                Copied::Cells(FilterCopy::begin(f, buffer, head.len(), trailer, CHUNK_BYTES))
            }
            (FilterKind::Decaying(_) | FilterKind::Cuckoo(_), prepared) => {
                let bytes = match prepared {
                    Prepared::Whole(bytes) => bytes,
                    Prepared::Cells(_) => unreachable!("only the timer filter is prepared by cells"),
                };
                let filter = head.len()..head.len() + bytes.len();
                buffer.clear();
                buffer.reserve(filter.end + trailer);
                buffer.extend_from_slice(head);
                buffer.extend_from_slice(&bytes);
                buffer.resize(filter.end + trailer, 0);
                Copied::Whole { buffer, filter }
            }
        };
        self.copy = Some(copy);
    }

    /// Whether a copy is in progress.
    pub fn copying(&self) -> bool {
        self.copy.is_some()
    }

    /// Bytes of the copy in progress still to copy.
    pub fn copy_bytes_left(&self) -> usize {
        match &self.copy {
            Some(Copied::Cells(c)) => c.bytes_left(),
            _ => 0,
        }
    }

    /// Copies up to `budget_bytes` more (at least one chunk); returns
    /// whether the copy is complete.
    pub fn advance_copy(&mut self, budget_bytes: usize) -> bool {
        match (&self.kind, &mut self.copy) {
            (FilterKind::Timer(f), Some(Copied::Cells(c))) => c.advance(f, budget_bytes),
            _ => true,
        }
    }

    /// Copies whatever is left: the buffer, holding the filter as it was
    /// when the copy began, and where its encoding lies. `None` without a copy.
    pub fn finish_copy(&mut self) -> Option<(Vec<u8>, Range<usize>)> {
        match (&self.kind, self.copy.take()?) {
            (FilterKind::Timer(f), Copied::Cells(c)) => Some(c.finish(f)),
            (_, Copied::Whole { buffer, filter }) => Some((buffer, filter)),
            (FilterKind::Decaying(_) | FilterKind::Cuckoo(_), Copied::Cells(_)) => {
                unreachable!("only the timer filter is copied by cells")
            }
        }
    }

    /// The filter's encoding written whole after `head` into a new buffer
    /// with `trailer` bytes after it, and where it lies.
    pub fn encode(&self, prepared: Prepared, head: &[u8], trailer: usize) -> (Vec<u8>, Range<usize>) {
        let filter = head.len()..head.len() + prepared.len();
        let mut buffer = vec![0; filter.end + trailer];
        buffer[..head.len()].copy_from_slice(head);
        match (&self.kind, prepared) {
            (FilterKind::Timer(f), _) => Skeleton::of(f).write(f, &mut buffer[filter.clone()]),
            (_, Prepared::Whole(bytes)) => buffer[filter.clone()].copy_from_slice(&bytes),
            (FilterKind::Decaying(_) | FilterKind::Cuckoo(_), Prepared::Cells(_)) => {
                unreachable!("only the timer filter is prepared by cells")
            }
        }
        (buffer, filter)
    }
}

impl SliceFilter {
    /// The kind's settings name.
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            FilterKind::Timer(_) => timer_kind::NAME,
            FilterKind::Decaying(c) => c.kind().as_str(),
            FilterKind::Cuckoo(_) => cuckoo::kind::NAME,
        }
    }

    /// Whether slices of this kind unite (`dedupd checkpoint merge`).
    pub fn unites(&self) -> bool {
        !matches!(self.kind, FilterKind::Decaying(_))
    }

    /// Bytes the filter holds now.
    pub fn memory_bytes(&self) -> u64 {
        match &self.kind {
            FilterKind::Timer(f) => f.memory_bytes() as u64,
            FilterKind::Decaying(c) => c.stats().memory_bytes,
            FilterKind::Cuckoo(f) => f.memory_bytes() as u64,
        }
    }

    /// What a key lookup answers (`GET /v1/keys/{key}`): the filter's test
    /// without its update, and what the kind tells of it, as a JSON object.
    pub fn lookup(&self, hash: &KeyHash) -> serde_json::Value {
        match &self.kind {
            FilterKind::Timer(f) => timer_kind::lookup(f, hash),
            FilterKind::Decaying(c) => decaying::kind::lookup(c, hash),
            FilterKind::Cuckoo(f) => cuckoo::kind::lookup(f, hash),
        }
    }

    /// The figures of `all` (one kind's filters, one per slice) for pipe
    /// mode's stats; `None` for timer filters, whose stats are the sliced
    /// filter's.
    pub fn pipe_figures(all: &[SliceFilter]) -> Option<PipeFigures> {
        match &all.first()?.kind {
            FilterKind::Timer(_) => None,
            FilterKind::Decaying(c) => Some(decaying::kind::pipe_figures(c)),
            FilterKind::Cuckoo(_) => {
                cuckoo::kind::pipe_figures(&all.iter().filter_map(|f| f.as_cuckoo()).collect::<Vec<_>>())
            }
        }
    }
}

impl SliceFilter {
    /// What the filter reports of itself, in the terms every kind shares
    /// (for the metrics and the status).
    pub fn figures(&self) -> FilterFigures {
        match &self.kind {
            FilterKind::Timer(f) => timer_kind::figures(f),
            FilterKind::Decaying(c) => decaying::kind::figures(c),
            FilterKind::Cuckoo(f) => cuckoo::kind::figures(f),
        }
    }
}
