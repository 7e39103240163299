//! The filter kinds a slice judges with, as one closed family chosen at
//! start-up ([`FilterChoice`]): the sliding-window timer filter
//! (`filter.kind = "timer"`), the cuckoo table filter (`cuckoo`) and the
//! decaying kinds (`rsbf`, `stable`). A
//! closed enum, not a trait object: the record path matches on it, with no
//! dynamic call.
//!
//! The family owns its snapshot copy: while one is in progress
//! ([`SliceFilter::begin_copy`]), every change goes through it, so a caller
//! observes and deletes the same way whether a snapshot is being copied or
//! not. A new kind is one more arm here, in its own module beside these.

use std::ops::Range;

use super::cuckoo::{self, CuckooFilter, CuckooParams};
use super::decaying::{self, DecayingFilter, DecayingSpec};
use super::envelope::{SnapshotError, TIMER_MAGIC};
use super::hash::KeyHash;
use super::timer::copy::{CHUNK_BYTES, FilterCopy};
use super::timer::params::FilterParams;
use super::timer::sliding::{DeleteRefusal, SlidingFilter, Verdict};
use super::timer::snapshot::{self as timer_snapshot, Skeleton};

/// The kind the slices judge with, chosen at start-up, and its settings.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterChoice {
    /// The sliding-window timer filter.
    Timer(FilterParams),
    /// A decaying kind, one filter per slice (its memory is per slice). The
    /// timer parameters beside it are the settings' idle timer filter (the
    /// daemon makes it the smallest there is): its lateness decides which
    /// records a snapshot holds, as for timers.
    Decaying(FilterParams, DecayingSpec),
    /// The cuckoo table filter, one per slice. The timer parameters beside
    /// it are the settings' idle timer filter, as for a decaying kind.
    Cuckoo(FilterParams, CuckooParams),
}

/// A timer filter's parameters choose the timer filter.
impl From<FilterParams> for FilterChoice {
    fn from(params: FilterParams) -> Self {
        FilterChoice::Timer(params)
    }
}

impl FilterChoice {
    /// The timer parameters (of the idle timer filter for a decaying kind).
    pub fn params(&self) -> &FilterParams {
        match self {
            FilterChoice::Timer(params) | FilterChoice::Decaying(params, _) | FilterChoice::Cuckoo(params, _) => params,
        }
    }

    /// The decaying kind's settings, if this is one.
    pub fn decaying(&self) -> Option<&DecayingSpec> {
        match self {
            FilterChoice::Timer(_) | FilterChoice::Cuckoo(..) => None,
            FilterChoice::Decaying(_, spec) => Some(spec),
        }
    }

    /// The kind's name, as in `filter.kind`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            FilterChoice::Timer(_) => "timer",
            FilterChoice::Decaying(_, spec) => spec.kind.as_str(),
            FilterChoice::Cuckoo(..) => "cuckoo",
        }
    }

    /// The filter of the chosen kind in a snapshot's `bytes`, checked
    /// against the settings (a snapshot of another kind is refused, naming
    /// `kind` and both kinds).
    pub fn decode(&self, bytes: &[u8]) -> Result<SliceFilter, SnapshotError> {
        let written = snapshot_kind(bytes);
        if let Some(written) = written
            && written != self.kind_name()
        {
            return Err(SnapshotError::ParameterMismatch {
                parameter: "kind",
                snapshot: written.to_string(),
                configured: self.kind_name().to_string(),
            });
        }
        let kind = match self {
            FilterChoice::Timer(params) => FilterKind::Timer(timer_snapshot::decode(bytes, params)?),
            FilterChoice::Decaying(_, spec) => {
                let configured =
                    spec.build().map_err(|e| SnapshotError::Malformed(format!("count filter settings: {e}")))?;
                FilterKind::Decaying(decaying::decode(bytes, &configured)?)
            }
            FilterChoice::Cuckoo(_, params) => FilterKind::Cuckoo(cuckoo::snapshot::decode(bytes, params)?),
        };
        Ok(kind.into())
    }

    /// The parameters a snapshot's filter depends on, as text: equal
    /// fingerprints mean a snapshot can be restored.
    pub fn fingerprint(&self) -> String {
        match self {
            FilterChoice::Timer(params) => params.fingerprint(),
            FilterChoice::Decaying(params, spec) => {
                // A decaying kind's state is its own filter's (the idle timer
                // filter's is empty by construction), validated at start-up.
                // The lateness decides which records a snapshot holds, as for timers.
                let own = spec.fingerprint().unwrap_or_else(|e| format!("kind={},{e}", spec.kind.as_str()));
                match params.lateness_ms {
                    None => own,
                    Some(l) => format!("{own},lateness_ms={l}"),
                }
            }
            FilterChoice::Cuckoo(_, params) => params.fingerprint(),
        }
    }
}

/// The kind a snapshot's filter part was written by, from its magic (read
/// before its checksum: for naming it when it is refused).
fn snapshot_kind(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&TIMER_MAGIC) {
        return Some("timer");
    }
    if bytes.starts_with(&cuckoo::snapshot::MAGIC) {
        return Some("cuckoo");
    }
    decaying::kind_of(bytes).map(|k| k.as_str())
}

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
    /// An empty filter of the kind chosen (a decaying kind's settings
    /// validated at start-up).
    pub fn new(choice: FilterChoice) -> Self {
        let kind = match choice {
            FilterChoice::Timer(params) => FilterKind::Timer(SlidingFilter::new(params)),
            FilterChoice::Decaying(_, spec) => {
                FilterKind::Decaying(spec.build().expect("count filter settings validated at start-up"))
            }
            FilterChoice::Cuckoo(_, params) => FilterKind::Cuckoo(CuckooFilter::new(params)),
        };
        kind.into()
    }

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

/// What a filter reports of itself, of whichever kind (for the metrics and
/// the status).
pub struct FilterFigures {
    /// Generations created, dropped, saturated inserts (timer filter); tables
    /// created, dropped, forced evictions (cuckoo); 0 otherwise.
    pub counters: [u64; 3],
    pub density: f64,
    pub estimated_fpr: f64,
    pub memory_bytes: usize,
    pub generations: usize,
    pub clock_ms: Option<u64>,
}

impl SliceFilter {
    pub fn figures(&self) -> FilterFigures {
        match &self.kind {
            FilterKind::Timer(f) => {
                let c = f.counters();
                FilterFigures {
                    counters: [c.generations_created, c.generations_dropped, c.saturated_inserts],
                    density: f.generations().last().map_or(0.0, |g| g.density()),
                    estimated_fpr: f.estimated_fpr(),
                    memory_bytes: f.memory_bytes(),
                    generations: f.generations().len(),
                    clock_ms: f.clock_ms(),
                }
            }
            // The fraction of ones (rsbf) or of non-zero cells (stable)
            // stands for the density, the design FPR for the estimate.
            FilterKind::Decaying(c) => {
                let st = c.stats();
                FilterFigures {
                    counters: [0; 3],
                    density: st.ones_fraction,
                    estimated_fpr: st.design_fpr,
                    memory_bytes: st.memory_bytes as usize,
                    generations: 0,
                    clock_ms: None,
                }
            }
            // The newest table's load stands for the density.
            FilterKind::Cuckoo(f) => {
                let c = f.counters();
                FilterFigures {
                    counters: [c.tables_created, c.tables_dropped, c.forced_evictions],
                    density: f.load(),
                    estimated_fpr: f.estimated_fpr(),
                    memory_bytes: f.memory_bytes(),
                    generations: f.tables().len(),
                    clock_ms: f.clock_ms(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{DecayingKind, FilterSpec};

    /// A decaying kind's fingerprint is its own filter's and the lateness,
    /// as written in the manifests of running deployments: a change here
    /// refuses their snapshots.
    #[test]
    fn decaying_fingerprints_are_the_ones_manifests_hold() {
        let idle = FilterSpec { window_ms: 1000, expected_keys: 8, lateness_ms: Some(2_000), ..FilterSpec::default() };
        let params = idle.resolve().unwrap();
        let rsbf = "kind=rsbf,seed=0x6465647570640001,rng_seed=0x5eed0fded,arrays=6,array_bits=1398080,\
                    p_star=0.03,lateness_ms=2000";
        let stable = "kind=stable,seed=0x6465647570640001,rng_seed=0x5eed0fded,cell_bits=2,cells=4194304,\
                      hashes=4,decrements=29.610367503652288,lateness_ms=2000";
        for (kind, want) in [(DecayingKind::Rsbf, rsbf), (DecayingKind::Stable, stable)] {
            let choice = FilterChoice::Decaying(params.clone(), DecayingSpec::new(kind, 8 << 20, 0.01));
            assert_eq!(choice.fingerprint(), want);
        }
        let timer = FilterChoice::from(params.clone());
        assert_eq!(timer.fingerprint(), params.fingerprint());
        assert_eq!(timer.decaying(), None);
    }

    /// The cuckoo arm: judged, deleted, copied whole while it goes on (the
    /// copy holds the filter as it was when it began), restored by the
    /// choice, and another kind's snapshot refused by name.
    #[test]
    fn a_cuckoo_table_is_one_arm_of_the_family() {
        use crate::filter::cuckoo::CuckooSpec;
        let spec = FilterSpec { window_ms: 1000, expected_keys: 8, ..FilterSpec::default() };
        let params = spec.resolve().unwrap();
        let table = CuckooSpec { window_ms: 1000, expected_keys: 1000, ..CuckooSpec::default() }.resolve().unwrap();
        let choice = FilterChoice::Cuckoo(params.clone(), table);
        let mut f = SliceFilter::new(choice.clone());
        let seed = f.hash_seed();
        let key = |i: u32| KeyHash::of(seed, &i.to_le_bytes());
        for i in 0..100 {
            assert!(f.observe(&key(i), 10).is_distinct());
        }
        assert!(!f.observe(&key(3), 20).is_distinct());
        assert_eq!(f.delete(&key(3)), Ok(()));
        let before = f.clone();
        let prepared = f.prepare_copy();
        f.begin_copy(prepared, b"head", Vec::new(), 2);
        assert!(f.observe(&key(3), 30).is_distinct(), "deleted");
        let (buffer, at) = f.finish_copy().unwrap();
        assert_eq!(&buffer[..4], b"head");
        let restored = choice.decode(&buffer[at]).unwrap();
        assert_eq!(restored, before);
        assert_eq!(f.figures().generations, 1);

        let timer = SliceFilter::new(FilterChoice::Timer(params));
        let (bytes, at) = timer.encode(timer.prepare_copy(), &[], 0);
        let refused = choice.decode(&bytes[at]).unwrap_err();
        assert!(matches!(refused, SnapshotError::ParameterMismatch { parameter: "kind", .. }), "{refused:?}");
    }
}
