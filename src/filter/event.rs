//! What the timer filter judges and says: an event (a key hash at a time),
//! the verdict on it, and the filter's counts of them.

use super::hash::KeyHash;

/// The verdict on one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// First occurrence in the window: deliver it (its timers were set).
    Distinct,
    /// Seen in the window: drop it. `equal_timers` is the largest number of
    /// the key's k cells holding the same time.
    Duplicate { equal_timers: u8 },
}

impl Verdict {
    pub fn is_distinct(self) -> bool {
        matches!(self, Verdict::Distinct)
    }
}

/// An event as the filter sees it: its key hash and its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub hash: KeyHash,
    pub time_ms: u64,
}

/// Counters of one slice's filter. They are part of its state (and snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterCounters {
    pub events: u64,
    pub distinct: u64,
    pub duplicates: u64,
    /// Events whose time was behind the slice clock (handled at the clock).
    pub late_events: u64,
    pub generations_created: u64,
    pub generations_dropped: u64,
    /// Inserts into a full newest generation because the cap was reached.
    pub saturated_inserts: u64,
    /// Most generations alive at once.
    pub generations_max: u32,
    /// `equal_timer_counts[x]`: duplicates whose largest equal-timer group was x.
    pub equal_timer_counts: Vec<u64>,
}

impl FilterCounters {
    /// Adds `other`'s counts (for a union of filters); `generations_max`
    /// is left to the caller, which knows the union's generations.
    pub fn add(&mut self, other: &FilterCounters) {
        self.events += other.events;
        self.distinct += other.distinct;
        self.duplicates += other.duplicates;
        self.late_events += other.late_events;
        self.generations_created += other.generations_created;
        self.generations_dropped += other.generations_dropped;
        self.saturated_inserts += other.saturated_inserts;
        if self.equal_timer_counts.len() < other.equal_timer_counts.len() {
            self.equal_timer_counts.resize(other.equal_timer_counts.len(), 0);
        }
        for (sum, n) in self.equal_timer_counts.iter_mut().zip(&other.equal_timer_counts) {
            *sum += n;
        }
    }
}

/// How many events ahead `SlidingFilter::observe_batch` prefetches: far
/// enough for a DRAM miss (~100 ns) to complete while the events in between
/// are judged, near enough that the lines are still cached when used. Since
/// the batch run judges an event in ~16 ns in cache, 8 ahead was too near:
/// at 1 GiB (8-bit, standard layout) 16 ran 12–14% faster than 8 in
/// same-run A/B (25.2 → 28.6M/s); 24 was no faster.
pub const PREFETCH_DISTANCE: usize = 16;
