//! Horizontal slicing (one-is-enough §3, Def. 1): S independent slice
//! filters; a key goes to slice `H_S(key)` and only that slice sees it.

use super::sizing;
use super::sliding::{Event, PREFETCH_DISTANCE, SlidingFilter, Verdict};
use crate::filter::hash::KeyHash;
use crate::filter::timer::params::{FilterParams, FilterSpec, ParamError};

/// S slice filters behind one hash-based router (no Kafka: the pipe mode
/// and the accuracy harness run all slices in one thread).
#[derive(Clone, Debug, PartialEq)]
pub struct SlicedFilter {
    slices: Vec<SlidingFilter>,
}

/// Totals over all slices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlicedStats {
    pub events: u64,
    pub distinct: u64,
    pub duplicates: u64,
    pub late_events: u64,
    pub generations_created: u64,
    pub generations_dropped: u64,
    pub saturated_inserts: u64,
    /// Most generations any slice held at once.
    pub generations_max: u32,
    /// Generations alive now, all slices.
    pub generations_live: u64,
    pub memory_bytes: u64,
    /// Cells alive now, all slices.
    pub live_cells: u64,
    /// The FPR the densities predict, averaged over slices (each key meets one).
    pub estimated_fpr: f64,
    pub equal_timer_counts: Vec<u64>,
}

impl SlicedFilter {
    pub fn new(spec: &FilterSpec) -> Result<Self, ParamError> {
        let params = spec.resolve()?;
        Ok(Self::from_params(params, spec.slices))
    }

    pub fn from_params(params: FilterParams, slices: u32) -> Self {
        SlicedFilter { slices: (0..slices).map(|_| SlidingFilter::new(params.clone())).collect() }
    }

    /// See [`SlidingFilter::count_equal_timers`].
    pub fn count_equal_timers(mut self, on: bool) -> Self {
        self.slices.iter_mut().for_each(|f| f.count_equal_timers(on));
        self
    }

    pub fn params(&self) -> &FilterParams {
        self.slices[0].params()
    }

    pub fn slices(&self) -> &[SlidingFilter] {
        &self.slices
    }

    /// Test-then-insert for one event in its slice.
    #[inline]
    pub fn observe(&mut self, hash: &KeyHash, time_ms: u64) -> Verdict {
        let s = hash.slice(self.slices.len() as u32) as usize;
        self.slices[s].observe(hash, time_ms)
    }

    /// Test-then-insert for a batch; verdicts appended to `out` in input
    /// order, exactly those of [`Self::observe`] on each event in turn. Like
    /// [`SlidingFilter::observe_batch`], the cells of the event
    /// [`PREFETCH_DISTANCE`] places later (in its own slice) are prefetched
    /// while one is judged, unless every slice is small enough to stay cached.
    pub fn observe_batch(&mut self, events: &[Event], out: &mut Vec<Verdict>) {
        out.reserve(events.len());
        // One slice (pipe mode's default): its own batch path, whose usual
        // case runs in a loop compiled for the cell width and layout.
        if let [only] = self.slices.as_mut_slice() {
            only.observe_batch(events, out);
            return;
        }
        if !self.slices.iter().any(SlidingFilter::worth_prefetching) {
            out.extend(events.iter().map(|e| self.observe(&e.hash, e.time_ms)));
            return;
        }
        let slices = self.slices.len() as u32;
        for e in events.iter().take(PREFETCH_DISTANCE) {
            self.slices[e.hash.slice(slices) as usize].prefetch(&e.hash);
        }
        for (i, e) in events.iter().enumerate() {
            if let Some(ahead) = events.get(i + PREFETCH_DISTANCE) {
                self.slices[ahead.hash.slice(slices) as usize].prefetch(&ahead.hash);
            }
            out.push(self.observe(&e.hash, e.time_ms));
        }
    }

    pub fn stats(&self) -> SlicedStats {
        let k = self.params().hashes as usize;
        let mut s = SlicedStats { equal_timer_counts: vec![0; k + 1], ..SlicedStats::default() };
        for f in &self.slices {
            let c = f.counters();
            s.events += c.events;
            s.distinct += c.distinct;
            s.duplicates += c.duplicates;
            s.late_events += c.late_events;
            s.generations_created += c.generations_created;
            s.generations_dropped += c.generations_dropped;
            s.saturated_inserts += c.saturated_inserts;
            s.generations_max = s.generations_max.max(c.generations_max);
            s.generations_live += f.generations().len() as u64;
            s.memory_bytes += f.memory_bytes() as u64;
            s.live_cells += f.generations().iter().map(|g| g.live_cells()).sum::<u64>();
            for (total, n) in s.equal_timer_counts.iter_mut().zip(&c.equal_timer_counts) {
                *total += n;
            }
        }
        s.estimated_fpr = self.estimated_fpr();
        s
    }

    /// The FPR the densities predict right now (see [`SlicedStats::estimated_fpr`]).
    pub fn estimated_fpr(&self) -> f64 {
        let per_slice = self.slices.iter().map(SlidingFilter::estimated_fpr);
        per_slice.sum::<f64>() / self.slices.len() as f64
    }

    /// Eq. 4's prediction for `n` distinct keys spread over these slices.
    pub fn theoretical_fpr(&self, n: u64) -> f64 {
        let p = self.params();
        let m = (p.cells * self.slices.len() as u64) as f64;
        sizing::horizontal_fpr(m, f64::from(p.hashes), n as f64, self.slices.len() as f64)
    }
}
