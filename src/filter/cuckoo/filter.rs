//! One slice's cuckoo table filter: the live tables under one clock,
//! first-test-then-set, growth beside the old table, the sweep, deletes.

use super::clock::Clock;
use super::growth;
use super::params::{BUCKET_SLOTS, CuckooParams, table_fpr};
use super::table::Table;
use crate::filter::event::{Event, PREFETCH_DISTANCE};
use crate::filter::hash::KeyHash;
use crate::filter::timer::sliding::DeleteRefusal;
use crate::filter::timer::sliding::PREFETCH_MIN_BYTES;

/// How many ticks old a slot may be and still hold a copy delivered less
/// than a window before `clock_ms`: a copy stamped at tick s was delivered
/// before (s + 1)·tick, so it may be inside the window iff
/// (s + 1)·tick > clock − window, i.e. s ≥ ⌊(clock − window) / tick⌋. Measured
/// from the exact clock, not its tick, so a key is kept past its window
/// only by the rest of its own tick (half a tick on average), at most W.
///
/// Returns the limit and the first ms at which it may change (the next
/// tick, or the next tick of `clock − window`), so that it is computed
/// about twice per tick rather than per event.
fn alive_limit(p: &CuckooParams, clock_ms: u64) -> (u32, u64) {
    let tick = clock_ms / p.tick_ms;
    let next_tick_ms = (tick + 1).saturating_mul(p.tick_ms);
    match clock_ms.checked_sub(p.window_ms) {
        Some(edge) => {
            let edge_tick = edge / p.tick_ms;
            let limit = (tick - edge_tick).min(u64::from(p.window_ticks)) as u32;
            let edge_moves_ms = (edge_tick + 1).saturating_mul(p.tick_ms).saturating_add(p.window_ms);
            (limit, next_tick_ms.min(edge_moves_ms))
        }
        None => (p.window_ticks, next_tick_ms.min(p.window_ms)),
    }
}

/// What one slice's table has done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CuckooCounters {
    pub events: u64,
    pub distinct: u64,
    pub duplicates: u64,
    /// Events whose time was behind the clock.
    pub late_events: u64,
    pub tables_created: u64,
    pub tables_dropped: u64,
    /// Inserts that found no room after [`super::table::MAX_KICKS`] moves
    /// (rolled back, then stored in a new table).
    pub failed_kicks: u64,
    /// Inserts at the cap on tables that took the slot of the oldest key in
    /// their buckets: the one way a key in the window is forgotten.
    pub forced_evictions: u64,
}

/// One slice's filter.
#[derive(Clone, Debug, PartialEq)]
pub struct CuckooFilter {
    params: CuckooParams,
    /// The largest event time seen (`None` before the first event).
    clock_ms: Option<u64>,
    clock: Clock,
    /// How many ticks old an alive slot may be at the clock:
    /// `alive_limit` of `clock_ms` (derived, cached).
    alive_limit: u32,
    /// The first ms at which `alive_limit` may change.
    limit_until_ms: u64,
    /// The first ms of the next tick.
    next_tick_ms: u64,
    /// Oldest first, never empty; inserts go to the newest.
    tables: Vec<Table>,
    counters: CuckooCounters,
}

impl CuckooFilter {
    pub fn new(params: CuckooParams) -> Self {
        let first = Table::new(0, params.buckets);
        let counters = CuckooCounters { tables_created: 1, ..CuckooCounters::default() };
        CuckooFilter::from_parts(params, None, vec![first], counters)
    }

    /// Assembles a filter from its state (also the snapshot's restore).
    pub(crate) fn from_parts(
        params: CuckooParams,
        clock_ms: Option<u64>,
        tables: Vec<Table>,
        counters: CuckooCounters,
    ) -> Self {
        let tick = clock_ms.unwrap_or(0) / params.tick_ms;
        let clock = Clock::at(tick, &params);
        let next_tick_ms = (tick + 1).saturating_mul(params.tick_ms);
        let (alive_limit, limit_until_ms) = alive_limit(&params, clock_ms.unwrap_or(0));
        CuckooFilter { params, clock_ms, clock, alive_limit, limit_until_ms, next_tick_ms, tables, counters }
    }

    pub fn params(&self) -> &CuckooParams {
        &self.params
    }

    pub fn counters(&self) -> &CuckooCounters {
        &self.counters
    }

    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    pub fn clock_ms(&self) -> Option<u64> {
        self.clock_ms
    }

    /// The tables, oldest first (a union takes them).
    pub(crate) fn into_tables(self) -> Vec<Table> {
        self.tables
    }

    /// Bytes of the tables' slots (what the filter holds resident).
    pub fn memory_bytes(&self) -> usize {
        self.tables.iter().map(Table::memory_bytes).sum()
    }

    /// The FPR the tables' loads predict, summed over them; counts slots
    /// kept but no longer alive as alive, so it errs high (no scan).
    pub fn estimated_fpr(&self) -> f64 {
        let f = self.params.fingerprint_bits;
        self.tables.iter().map(|t| table_fpr(f, t.occupied() as f64 / (t.buckets() * 4) as f64)).sum()
    }

    /// Occupied slots over all slots, of the newest table.
    pub fn load(&self) -> f64 {
        let t = self.tables.last().expect("never empty");
        t.occupied() as f64 / (t.buckets() as usize * BUCKET_SLOTS) as f64
    }

    /// Test-then-insert for a batch, verdicts (true: duplicate) appended to
    /// `out` in order: exactly [`Self::observe`] on each event in turn.
    /// While one event is judged, the buckets of the event
    /// [`PREFETCH_DISTANCE`] places later are prefetched in every table, so
    /// the cache misses of a batch overlap (only prefetched, never
    /// reordered). Tables below [`PREFETCH_MIN_BYTES`] are not prefetched.
    pub fn observe_batch(&mut self, events: &[Event], out: &mut Vec<bool>) {
        let prefetch = self.worth_prefetching();
        for (i, e) in events.iter().enumerate() {
            if prefetch && let Some(ahead) = events.get(i + PREFETCH_DISTANCE) {
                self.prefetch(&ahead.hash);
            }
            out.push(self.observe(&e.hash, e.time_ms));
        }
    }

    /// Whether the tables are large enough to miss the core's own caches.
    #[inline]
    pub fn worth_prefetching(&self) -> bool {
        self.memory_bytes() >= PREFETCH_MIN_BYTES
    }

    /// Prefetches the key's buckets in every table (a hint only).
    #[inline]
    pub fn prefetch(&self, hash: &KeyHash) {
        for t in &self.tables {
            t.prefetch(hash, &self.clock);
        }
    }

    /// Test-then-insert for one event at `time_ms`; true for DUPLICATE.
    #[inline]
    pub fn observe(&mut self, hash: &KeyHash, time_ms: u64) -> bool {
        if self.params.lateness_ms.is_some() && self.clock_ms.is_some_and(|c| time_ms < c) {
            return self.observe_late(hash, time_ms);
        }
        self.advance(time_ms);
        self.counters.events += 1;
        let (clock, limit) = (self.clock, self.alive_limit);
        if self.tables.iter().rev().any(|t| t.holds_within(&t.place(hash, &clock), &clock, limit)) {
            self.counters.duplicates += 1;
            return true;
        }
        self.insert(hash, 0);
        false
    }

    /// An event behind the clock with lateness on, judged at its own time
    /// as the timer filter judges it: δ ticks behind (at most Lt), it is a
    /// duplicate iff a slot of its fingerprint is at most W + δ ticks old;
    /// a distinct one is stamped at its own tick. The clock does not move.
    #[cold]
    fn observe_late(&mut self, hash: &KeyHash, time_ms: u64) -> bool {
        let clock = self.clock;
        let delta = (clock.tick - time_ms / self.params.tick_ms).min(u64::from(self.params.lateness_ticks)) as u32;
        self.counters.events += 1;
        self.counters.late_events += 1;
        let limit = clock.window + delta;
        if self.tables.iter().rev().any(|t| t.holds_within(&t.place(hash, &clock), &clock, limit)) {
            self.counters.duplicates += 1;
            return true;
        }
        self.insert(hash, delta);
        false
    }

    /// Stores a distinct key stamped `delta` ticks behind the clock in the
    /// table [`growth::insert_order`] offers first that has room; when none
    /// has, in a new table sized by [`growth::grown_buckets`] (at the cap on
    /// tables, in place of the oldest slot of its buckets in the first).
    fn insert(&mut self, hash: &KeyHash, delta: u32) {
        self.counters.distinct += 1;
        let clock = self.clock;
        let stamp = clock.stamp_behind(delta);
        let mut order = [0u8; 64];
        let n = match self.tables.len() {
            1 => 1,
            _ => growth::insert_order(&self.tables, self.live_slots(), &mut order),
        };
        for &i in &order[..n] {
            let table = &mut self.tables[usize::from(i)];
            if table.insert(&table.place(hash, &clock), &clock, stamp, delta) {
                return;
            }
        }
        self.counters.failed_kicks += 1;
        if self.tables.len() >= self.params.max_tables as usize {
            self.counters.forced_evictions += 1;
            let first = &mut self.tables[usize::from(order[0])];
            first.force(&first.place(hash, &clock), &clock, stamp);
            return;
        }
        self.grow();
        let newest = self.tables.last_mut().expect("just pushed");
        let stored = newest.insert(&newest.place(hash, &clock), &clock, stamp, delta);
        debug_assert!(stored, "an empty table has room");
    }

    /// Adds a table sized from the kept keys (a scan of the stamps: growth
    /// is rare).
    #[cold]
    fn grow(&mut self) {
        let (mut kept, mut oldest) = (0, 0);
        for t in &self.tables {
            let (k, _, o) = t.kept_profile(&self.clock, 0);
            kept += k;
            oldest = oldest.max(o);
        }
        let total: u64 = self.tables.iter().map(|t| t.buckets() * BUCKET_SLOTS as u64).sum();
        self.push_table(growth::grown_buckets(&self.params, kept, oldest, total));
    }

    /// Forgets a key: when exactly one slot of all tables holds its
    /// fingerprint kept at the clock, that slot is emptied, so a copy sent
    /// next is distinct. Refused when none does, or several (another key
    /// with the same fingerprint and buckets may be the one that slot
    /// stands for). The clock does not move.
    pub fn delete(&mut self, hash: &KeyHash) -> Result<(), DeleteRefusal> {
        if self.clock_ms.is_none() {
            return Err(DeleteRefusal::Absent);
        }
        let clock = self.clock;
        let found: Vec<(usize, usize)> = (self.tables.iter().enumerate())
            .flat_map(|(t, table)| {
                table.kept_slots(&table.place(hash, &clock), &clock).into_iter().map(move |j| (t, j))
            })
            .collect();
        match found.as_slice() {
            [] => Err(DeleteRefusal::Absent),
            [_, _, ..] => Err(DeleteRefusal::Ambiguous),
            &[(t, j)] => {
                self.tables[t].clear_slot(j);
                Ok(())
            }
        }
    }

    /// Whether the key would be a duplicate at the clock now (no insert).
    pub fn contains(&self, hash: &KeyHash) -> bool {
        let clock = self.clock;
        let limit = self.alive_limit;
        self.clock_ms.is_some() && self.tables.iter().any(|t| t.holds_within(&t.place(hash, &clock), &clock, limit))
    }

    /// Moves the clock to `time_ms` if that is later (an event behind it is
    /// judged at the clock without lateness, and counted late).
    #[inline]
    pub fn advance(&mut self, time_ms: u64) {
        let Some(clock_ms) = self.clock_ms else {
            *self = CuckooFilter::from_parts(
                self.params.clone(),
                Some(time_ms),
                std::mem::take(&mut self.tables),
                std::mem::take(&mut self.counters),
            );
            return;
        };
        if time_ms <= clock_ms {
            if time_ms < clock_ms {
                self.counters.late_events += 1;
            }
            return;
        }
        self.clock_ms = Some(time_ms);
        if time_ms >= self.next_tick_ms {
            self.next_tick(time_ms);
        }
        if time_ms >= self.limit_until_ms {
            (self.alive_limit, self.limit_until_ms) = alive_limit(&self.params, time_ms);
        }
    }

    /// The clock enters a later tick: each table sweeps S⁻¹ of its buckets
    /// per tick passed (every bucket once every S ticks: a slot is cleared
    /// within S ticks of leaving the window and lateness, before its stamp
    /// can wrap round), or is cleared when the jump passes everything kept.
    #[inline(never)]
    fn next_tick(&mut self, time_ms: u64) {
        let p = &self.params;
        let (from, to) = (self.clock.tick, time_ms / p.tick_ms);
        self.clock = Clock::at(to, p);
        self.next_tick_ms = (to + 1).saturating_mul(p.tick_ms);
        let passed = to - from;
        for t in &mut self.tables {
            if passed > u64::from(self.clock.retain) {
                t.clear();
                continue;
            }
            // Tick by tick, each at its own clock: read at the new clock
            // alone, a slot that expired during the jump could have wrapped
            // round and look young.
            let per_tick = t.buckets().div_ceil(u64::from(p.sweep_ticks));
            for tick in from + 1..=to {
                t.sweep(per_tick, &Clock::at(tick, p));
            }
        }
        self.retire();
    }

    /// Drops the emptied tables the others can do without
    /// ([`growth::droppable`]); lets a lone oversized table hand over to a
    /// smaller one (it then drains within W + Lt + S ticks).
    fn retire(&mut self) {
        let live = self.live_slots();
        let mut drop = growth::droppable(&self.tables, live);
        if !drop.is_empty() {
            drop.sort_unstable();
            for &i in drop.iter().rev() {
                self.tables.remove(i);
            }
            self.counters.tables_dropped += drop.len() as u64;
        }
        if let [only] = self.tables.as_slice()
            && growth::oversized(only, live)
        {
            let recent = growth::recent_ticks(&self.params);
            let buckets = growth::handover_buckets(&self.params, only.kept_profile(&self.clock, recent).1);
            if buckets < only.buckets() {
                if only.occupied() == 0 {
                    self.tables.clear();
                    self.counters.tables_dropped += 1;
                }
                self.push_table(buckets);
            }
        }
    }

    fn push_table(&mut self, buckets: u64) {
        self.tables.push(Table::new(growth::level_of(&self.params, buckets), buckets));
        self.counters.tables_created += 1;
    }

    /// Slots the tables hold (occupied: errs high by the expired slots not
    /// yet swept).
    fn live_slots(&self) -> u64 {
        self.tables.iter().map(Table::occupied).sum()
    }

    #[cfg(test)]
    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }
}
