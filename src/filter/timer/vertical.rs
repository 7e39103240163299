//! Vertical slicing of one slice's timer filter (one-is-enough §3, Def. 2):
//! S vertical slices of the cells of a [`SlidingFilter`], owned by T
//! threads, with parallel and pipelined testing — and verdicts, counters
//! and state identical to the sequential filter's.
//!
//! dedupd slices horizontally (a key's slice is `H_S(key)`, design.md);
//! this is the paper's other scheme, inside one horizontal slice: the k
//! cells of a key are spread over owners, so a hot key's load is shared by
//! up to k of them instead of falling on one.
//!
//! # Slices and owners
//!
//! Vertical slice i of a generation of m cells owns the cells
//! `[b(i), b(i+1))`, `b(i) = i·m/S` rounded down to a whole unit of
//! `PART_ALIGN` = 64 cells (`b(S) = m`), in every generation (each with
//! its own m). The paper's ranges are `[i·m/S, (i+1)·m/S)`; the rounding
//! (at most 63 cells) is what lets owners write at once: 4-bit cells are two
//! to a byte and odd widths are bit-packed in 64-bit words, and 64 cells of
//! any width are whole bytes and whole words, so no two owners ever share a
//! byte or a word. (With m/S below 64 some slices own nothing.) Thread t of
//! T owns the slices `[t·S/T, (t+1)·S/T)` — a contiguous range of cells —
//! and is the only thread that touches them in the parallel phases (the
//! caller is thread 0; the sequential steps at tick boundaries, below, run
//! between the phases): no locks on cells. T is at most S.
//!
//! In the **blocked layout** the k cells of a key lie in one block of
//! [`BLOCK_CELLS`](crate::filter::hash::BLOCK_CELLS) = 256 cells, and the slice boundaries are rounded to
//! whole blocks instead: one owner holds all k cells of a key. Vertical
//! slicing then spreads keys (blocks), not the cells of one key: each
//! lookup is one message to one owner, pipelining saves nothing, and
//! the load balance is that of horizontal slicing by block. That is fine:
//! the verdicts are the same either way.
//!
//! # Parallel testing: rounds of three phases
//!
//! [`VerticalFilter::observe_batch`] judges a batch in rounds of at most
//! `round_events` events (default [`DEFAULT_ROUND_EVENTS`]) that lie in one
//! tick of the clock:
//!
//! - **A (parallel read).** Every owner computes the positions of every event
//!   of the round in every generation and reads those of its cells, into a
//!   table of k values per event and generation: the state at the start of
//!   the round.
//! - **B (sequential combine).** One pass over the events in order decides
//!   each exactly as [`SlidingFilter::observe`] would — late events at their
//!   own time, the clock moved within the tick, the equal-timers rule, the
//!   counters — from the table of A, overridden by the cells that earlier
//!   events of the same round set (a position → value map: Zipf streams
//!   repeat keys within a round all the time). A distinct event's insert is
//!   done on the values too, with the generation's bookkeeping (alive-value
//!   histogram, live cells, inserted keys) kept exactly as the sequential
//!   insert keeps it, so growth is decided exactly as there: a generation
//!   added mid-round starts empty and is read from the map alone. The cell
//!   writes are logged in event order.
//! - **C (parallel write).** Every owner applies the logged writes to its
//!   cells, in event order. C of one round and A of the next run in the
//!   same pass of the threads (an owner writes its cells, then reads them).
//!
//! What stays **sequential**, at round boundaries: starting the clock, and
//! moving it into a later tick (stepping the generations' time, the sweep,
//! dropping empty generations — [`SlidingFilter::advance`]): a round ends
//! before the first event of a later tick, its writes are applied, the
//! clock advances, and the next round starts. A **deletable** filter (with
//! counting cells) is judged entirely by the sequential
//! [`SlidingFilter::observe_batch`]; so is every event while a
//! [`super::FilterCopy`] is in progress (use the inner filter's
//! `observe_copying`).
//!
//! # Why one event is never judged distinct twice
//!
//! The paper's concurrency section: two concurrent first-test-then-set of
//! one event could both test before either sets, and both say distinct; it
//! asks for the primitive to be atomic per slice. Here the owners never
//! decide anything: they read and write cells on behalf of the combine
//! pass, which is the only place where verdicts are made, one event at a
//! time in the batch's order. Within a round, an event's test sees every
//! cell that an earlier event of the round set (the map overrides the
//! reads of A); across rounds, the writes of a round are all applied (C)
//! before the next round's reads (A) — by the same owner, since each cell
//! has one — and the pool's hand-over between phases orders them for
//! the combine. So each test-then-set is atomic with respect to every other
//! event of the slice, without a lock: the combine's order is the lock.
//!
//! # Equality with the sequential filter
//!
//! After any sequence of batches the inner [`SlidingFilter`] is equal (`==`)
//! to one fed the same events one at a time, and every verdict and counter
//! is the same: so snapshots, restore and determinism (docs/design.md, invariant 1)
//! are untouched. The tests below check it on seeded random streams
//! (uniform and Zipf α = 1.2 keys, batch sizes from 1 up, T = 1…4, S not
//! dividing m, equal timers on and off, density / cardinality / no growth,
//! late events with lateness, clock jumps across many ticks and past the
//! window), after every batch.
//!
//! # Pipelined testing
//!
//! [`VerticalFilter::observe_pipelined`] judges events one at a time as the
//! paper's pipeline would: for each generation (newest first), the owners
//! of the key's cells are visited in turn — in the order of the key's first
//! cell on each, each testing all of the key's cells it holds — and the
//! walk stops at the first owner holding an unset cell (not alive; for a
//! late event, not set within its window). Each visit is one message,
//! counted in [`PipelineStats`]: at most min(k, S) per generation walked,
//! fewer when the key is new. (The same rule as the simulator's
//! `bench::sim::Vertical::pipelined_messages`, on the timer filter.) The
//! verdicts and state are again the sequential filter's.
//!
//! See docs/dev/vertical-slicing.md for the measured throughput.
//!
//! # Files
//!
//! This file holds the filter, its rounds and the combine; `owners` the
//! geometry of slices and threads and an owner's phases A and C; `round`
//! the combine's view of a round's cells; `pool` the threads.

use std::ops::Range;
use std::sync::atomic::AtomicU32;
use std::sync::{Mutex, PoisonError};

use super::cells::CellsPart;
use super::clock::Now;
use super::generation::{Generation, most_equal};
use super::sliding::{Event, SlidingFilter, Verdict};
use crate::filter::hash::KeyHash;
use crate::filter::timer::params::{Layout, MAX_HASHES};

mod owners;
mod pool;
mod round;
use owners::{Geometry, Owner};
use pool::Pool;
use round::{Overrides, RoundView};

/// Events per round of [`VerticalFilter::observe_batch`] at most, by
/// default: the cells a round reads (~k lines per event) should still be in
/// the owner's cache when it writes them in the next pass (2048 · 7 lines
/// of 64 bytes ≈ 0.9 MiB), and a round should be long enough to pay for
/// waking the threads.
pub const DEFAULT_ROUND_EVENTS: usize = 2048;

/// One slice's timer filter, vertically sliced between threads.
pub struct VerticalFilter {
    filter: SlidingFilter,
    slices: u32,
    pool: Pool,
    round_events: usize,
    /// Phase A's table: the value of cell j of event n in generation g at
    /// the start of the round, at `(n·G + g)·k + j`. Each entry is written
    /// by the one owner of that cell (relaxed stores; the pool's hand-over
    /// orders them before the combine's loads).
    reads: Vec<AtomicU32>,
    /// Cells set by earlier events of the current round.
    overrides: Overrides,
    /// Cell writes of the combine, in event order, for phase C.
    writes: Vec<Write>,
}

/// One cell write decided by the combine.
#[derive(Clone, Copy, Debug)]
struct Write {
    generation: u32,
    cell: usize,
    value: u32,
}

/// What pipelined testing sent, summed over the events judged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineStats {
    pub lookups: u64,
    /// Owner visits (messages), all lookups.
    pub messages: u64,
    /// Lookups of events judged distinct, and their messages.
    pub distinct_lookups: u64,
    pub distinct_messages: u64,
    /// The most messages one lookup sent.
    pub max_messages: u32,
}

impl PipelineStats {
    /// Adds `other`'s counts (of another batch).
    pub fn add(&mut self, other: &PipelineStats) {
        self.lookups += other.lookups;
        self.messages += other.messages;
        self.distinct_lookups += other.distinct_lookups;
        self.distinct_messages += other.distinct_messages;
        self.max_messages = self.max_messages.max(other.max_messages);
    }

    /// Messages per lookup (0 with no lookup).
    pub fn per_lookup(&self) -> f64 {
        if self.lookups == 0 { 0.0 } else { self.messages as f64 / self.lookups as f64 }
    }
}

impl VerticalFilter {
    /// `filter` sliced into `slices` vertical slices owned by `threads`
    /// threads (the caller's and `threads - 1` parked workers). Both are
    /// at least 1, and the threads at most the slices.
    pub fn new(filter: SlidingFilter, slices: u32, threads: usize) -> Self {
        let slices = slices.max(1);
        let threads = threads.clamp(1, slices as usize);
        VerticalFilter {
            filter,
            slices,
            pool: Pool::new(threads),
            round_events: DEFAULT_ROUND_EVENTS,
            reads: Vec::new(),
            overrides: Overrides::default(),
            writes: Vec::new(),
        }
    }

    /// Sets the most events per round (at least 1).
    pub fn with_round_events(mut self, events: usize) -> Self {
        self.round_events = events.max(1);
        self
    }

    /// The filter, as the sequential one would be after the same events.
    pub fn filter(&self) -> &SlidingFilter {
        &self.filter
    }

    pub fn into_inner(self) -> SlidingFilter {
        self.filter
    }

    pub fn slices(&self) -> u32 {
        self.slices
    }

    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The cells vertical slice `slice` owns in generation `generation`.
    pub fn slice_cells(&self, generation: usize, slice: u32) -> Range<u64> {
        let m = self.filter.generations()[generation].cells();
        let g = self.geometry();
        g.start(m, slice)..g.start(m, slice + 1)
    }

    /// The vertical slice that owns cell `cell` of generation `generation`.
    pub fn owner(&self, generation: usize, cell: u64) -> u32 {
        self.geometry().owner(self.filter.generations()[generation].cells(), cell as usize)
    }

    fn geometry(&self) -> Geometry {
        Geometry::of(&self.filter, self.slices, self.pool.threads())
    }

    /// Test-then-insert for a batch in parallel rounds (see the module
    /// documentation), verdicts appended to `out` in order: exactly those
    /// and the state of [`SlidingFilter::observe`] on each event in turn.
    pub fn observe_batch(&mut self, events: &[Event], out: &mut Vec<Verdict>) {
        if self.filter.params().deletable {
            self.filter.observe_batch(events, out);
            return;
        }
        out.reserve(events.len());
        let mut i = 0;
        while i < events.len() {
            // The clock starts, or enters a later tick: sequentially, after
            // the writes so far are in the cells (the sweep reads them).
            let first = events[i].time_ms;
            if self.filter.clock_ms().is_none() || first >= self.filter.next_tick_ms() {
                self.pass(&[]);
                self.filter.advance(first);
            }
            let next_tick_ms = self.filter.next_tick_ms();
            let rest = &events[i + 1..];
            let more = rest.iter().take(self.round_events - 1).take_while(|e| e.time_ms < next_tick_ms).count();
            let round = &events[i..i + 1 + more];
            self.pass(round);
            self.combine(round, out);
            i += round.len();
        }
        self.pass(&[]);
    }

    /// One pass of the threads: each owner applies the pending writes to
    /// its cells (phase C of the last round), then reads its cells of
    /// `events` into the table (phase A of the next).
    fn pass(&mut self, events: &[Event]) {
        if self.writes.is_empty() && events.is_empty() {
            return;
        }
        let geometry = self.geometry();
        let k = self.filter.params().hashes as usize;
        let prefetch = self.filter.worth_prefetching();
        let generations = self.filter.generations.len();
        let need = events.len() * generations * k;
        if self.reads.len() < need {
            self.reads.resize_with(need, || AtomicU32::new(0));
        }
        let shapes: Vec<u64> = self.filter.generations.iter().map(Generation::cells).collect();
        let threads = geometry.threads;
        let mut parts: Vec<Vec<CellsPart<'_>>> = (0..threads).map(|_| Vec::with_capacity(generations)).collect();
        for g in &mut self.filter.generations {
            let m = g.cells() as usize;
            let ends: Vec<usize> = (0..threads).map(|t| geometry.thread_end(m as u64, t)).collect();
            for (t, part) in g.cells.split_mut(m, &ends).into_iter().enumerate() {
                parts[t].push(part);
            }
        }
        let parts: Vec<Mutex<Vec<CellsPart<'_>>>> = parts.into_iter().map(Mutex::new).collect();
        let (writes, reads) = (&self.writes[..], &self.reads[..]);
        let owner = Owner { shapes: &shapes, blocked: geometry.blocked, k, prefetch };
        self.pool.run(&|t| {
            let mut mine = parts[t].lock().unwrap_or_else(PoisonError::into_inner);
            owner.write(&mut mine, writes);
            owner.read(&mine, events, reads);
        });
        self.writes.clear();
    }

    /// Phase B: decides the round's events in order from the table and the
    /// round's own writes, as [`SlidingFilter::observe`] would; logs the
    /// cell writes for phase C.
    fn combine(&mut self, events: &[Event], out: &mut Vec<Verdict>) {
        let VerticalFilter { filter, reads, overrides, writes, .. } = self;
        let k = filter.params().hashes as usize;
        let blocked = filter.params().layout == Layout::Blocked;
        let read = filter.generations().len();
        overrides.begin(events.len() * k);
        // Any generation may take writes (the largest with room does).
        let mut view = RoundView { reads, overrides, read, written_from: 0, k, slot: 0 };
        let mut at = [0usize; MAX_HASHES as usize];
        let mut values = [0u32; MAX_HASHES as usize];
        for (n, e) in events.iter().enumerate() {
            debug_assert!(e.time_ms < filter.next_tick_ms(), "a round lies in one tick");
            view.slot = n * read * k;
            let judging = Judging::begin(filter, e.time_ms);
            let duplicate = newest_holding(filter, k, &mut values, |g, generation, values| {
                positions(&e.hash, generation.cells(), blocked, k, &mut at);
                (0..k).all(|j| {
                    values[j] = view.value(g, j, at[j]);
                    judging.kept(values[j])
                })
            });
            if let Some(equal) = duplicate {
                out.push(filter.count_duplicate(equal));
                continue;
            }
            let g = filter.insert_target();
            out.push(filter.insert_distinct(|newest, now, _| {
                positions(&e.hash, newest.cells(), blocked, k, &mut at);
                for (j, &cell) in at[..k].iter().enumerate() {
                    let old = view.value(g, j, cell);
                    let value = match judging.late_delta {
                        None => {
                            newest.account_set(old, now);
                            now.value
                        }
                        Some(delta) => match newest.account_late_set(old, now, delta) {
                            Some(value) => value,
                            None => continue,
                        },
                    };
                    view.overrides.set(g, cell, value);
                    writes.push(Write { generation: g as u32, cell, value });
                }
                newest.account_inserted();
            }));
        }
    }

    /// Test-then-insert for events one at a time, each lookup a pipeline
    /// over the owners of the key's cells (see the module documentation);
    /// verdicts appended to `out`, exactly those and the state of
    /// [`SlidingFilter::observe`]. Returns the messages sent.
    pub fn observe_pipelined(&mut self, events: &[Event], out: &mut Vec<Verdict>) -> PipelineStats {
        let geometry = self.geometry();
        let filter = &mut self.filter;
        let k = filter.params().hashes as usize;
        let mut stats = PipelineStats::default();
        let mut at = [0usize; MAX_HASHES as usize];
        let mut values = [0u32; MAX_HASHES as usize];
        for e in events {
            let judging = Judging::begin(filter, e.time_ms);
            let mut messages = 0;
            let duplicate = newest_holding(filter, k, &mut values, |_, generation, values| {
                let m = generation.cells();
                positions(&e.hash, m, geometry.blocked, k, &mut at);
                let (holds, sent) = pipeline(
                    &at[..k],
                    |cell| geometry.owner(m, cell),
                    |j, cell| {
                        values[j] = generation.cell(cell);
                        judging.kept(values[j])
                    },
                );
                messages += sent;
                holds
            });
            stats.lookups += 1;
            stats.messages += u64::from(messages);
            stats.max_messages = stats.max_messages.max(messages);
            out.push(match duplicate {
                Some(equal) => filter.count_duplicate(equal),
                None => {
                    stats.distinct_lookups += 1;
                    stats.distinct_messages += u64::from(messages);
                    filter.insert_event(&e.hash, judging.late_delta, &mut super::generation::Untold)
                }
            });
        }
        stats
    }
}

/// One event being judged, as [`SlidingFilter::observe`] judges it.
#[derive(Clone, Copy)]
struct Judging {
    now: Now,
    /// Ticks behind the clock for an event judged at its own time
    /// (lateness on), `None` for one judged at the clock.
    late_delta: Option<u32>,
}

impl Judging {
    /// Starts judging an event at `time_ms`, as the sequential filter
    /// does: one behind the clock with lateness on is counted late and
    /// judged at its own time; any other moves the clock (within its tick,
    /// in a round); both are counted.
    fn begin(filter: &mut SlidingFilter, time_ms: u64) -> Self {
        let late_delta = filter.is_late_at_own_time(time_ms).then(|| filter.late_delta(time_ms));
        match late_delta {
            Some(_) => filter.counters.late_events += 1,
            None => filter.advance(time_ms),
        }
        filter.counters.events += 1;
        Judging { now: filter.now(), late_delta }
    }

    /// Whether a cell holding `value` counts as set for this event: alive,
    /// or for a late one, set within W + δ ticks (`Generation::late_match`).
    #[inline]
    fn kept(&self, value: u32) -> bool {
        match self.late_delta {
            None => self.now.is_alive(value),
            Some(delta) => self.now.is_within(value, self.now.window + delta),
        }
    }
}

/// The sequential test over the generations, newest first: `holds(g,
/// generation, values)` says whether all k cells of the key are set in
/// generation g, leaving their values in `values`. Returns the equal-timer
/// count of the first generation that holds the key with at least k' equal
/// timers: the event is a duplicate.
fn newest_holding(
    filter: &SlidingFilter,
    k: usize,
    values: &mut [u32; MAX_HASHES as usize],
    mut holds: impl FnMut(usize, &Generation, &mut [u32; MAX_HASHES as usize]) -> bool,
) -> Option<u32> {
    let equal_min = filter.params().equal_timers_min();
    for (g, generation) in filter.generations().iter().enumerate().rev() {
        if holds(g, generation, values) {
            let equal = most_equal(&mut values[..k]);
            if equal >= equal_min {
                return Some(equal);
            }
        }
    }
    None
}

/// Walks the owners of a key's cells `at` in the order of the key's first
/// cell on each; each visit (one message) tests all of the key's cells that
/// owner holds with `test(j, cell)`. Stops at the first owner with a cell
/// that fails. Returns whether all passed, and the messages.
fn pipeline(at: &[usize], owner: impl Fn(usize) -> u32, mut test: impl FnMut(usize, usize) -> bool) -> (bool, u32) {
    let mut owners = [0u32; MAX_HASHES as usize];
    for (o, &cell) in owners.iter_mut().zip(at) {
        *o = owner(cell);
    }
    let owners = &owners[..at.len()];
    let mut messages = 0;
    for (first, &visit) in owners.iter().enumerate() {
        if owners[..first].contains(&visit) {
            continue; // visited with its first cell
        }
        messages += 1;
        for j in first..at.len() {
            if owners[j] == visit && !test(j, at[j]) {
                return (false, messages);
            }
        }
    }
    (true, messages)
}

/// The key's k positions in a generation of `m` cells, into `out`.
#[inline]
fn positions(hash: &KeyHash, m: u64, blocked: bool, k: usize, out: &mut [usize; MAX_HASHES as usize]) {
    if blocked {
        out.iter_mut().zip(hash.probe_blocked(m).take(k)).for_each(|(o, p)| *o = p);
    } else {
        out.iter_mut().zip(hash.probe(m).take(k)).for_each(|(o, p)| *o = p);
    }
}

#[cfg(test)]
mod tests;
