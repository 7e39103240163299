//! The batched path: test-then-insert for a run of events while one
//! generation is the filter's only one, with the layout and cell width
//! dispatched once per run.

use super::key_cells::{all_alive, equal_timers_at, prefetch_cells, set_cells};
use super::{FullAt, Generation};
use crate::filter::event::{Event, FilterCounters, PREFETCH_DISTANCE, Verdict};
use crate::filter::hash::{KeyHash, Positions};
use crate::filter::timer::cells::{TimerCells, with_cells};
use crate::filter::timer::clock::{AliveTable, Now};
use crate::filter::timer::params::Growth;

impl Generation {
    /// Test-then-insert for `events` in turn while this generation is the
    /// filter's only one and the clock stays in the tick of `run`: exactly
    /// the verdicts, counters and state of [`crate::filter::timer::SlidingFilter::observe`]
    /// on each event, with the layout and cell width dispatched once per run
    /// instead of per event and the counts kept in registers. Ends before
    /// an event of a later tick, and after an insert that fills the
    /// generation when the filter may add another (the caller adds it).
    pub(crate) fn observe_run(&mut self, events: &[Event], run: &Run<'_>, judged: Judged<'_>) -> RunEnd {
        let (m, full_at) = (self.m, self.full_at(run.growth));
        let Generation { block, cells, hist, live, inserted, .. } = self;
        let counts = (live, inserted, full_at);
        with_cells!(cells, c => {
            if *block != 0 {
                observe_cells::<_, _, 0>(c, hist, counts, |h: &KeyHash| h.probe_blocked(m), events, run, judged)
            } else if run.k == UNROLLED_K {
                observe_cells::<_, _, UNROLLED_K>(c, hist, counts, |h: &KeyHash| h.probe(m), events, run, judged)
            } else {
                observe_cells::<_, _, 0>(c, hist, counts, |h: &KeyHash| h.probe(m), events, run, judged)
            }
        })
    }
}

/// What stays fixed through a run of events (see [`Generation::observe_run`]).
pub(crate) struct Run<'a> {
    pub now: Now,
    pub alive: &'a AliveTable,
    pub k: u32,
    pub equal_min: u32,
    /// Take a duplicate's equal-timer count (else it is reported as 0).
    pub count_equal: bool,
    pub growth: Growth,
    /// The filter has its maximum of generations: a full one takes keys on.
    pub at_cap: bool,
    /// The first ms of the next tick: an event at or after it ends the run.
    pub next_tick_ms: u64,
    /// Prefetch the cells of the event [`PREFETCH_DISTANCE`] places ahead.
    pub prefetch: bool,
    /// Events behind the clock are judged at their own time (lateness on):
    /// such an event ends the run and goes through the filter's late path.
    pub late_own_time: bool,
}

/// Where a run's verdicts and counts go.
pub(crate) struct Judged<'a> {
    pub clock_ms: &'a mut u64,
    pub counters: &'a mut FilterCounters,
    pub out: &'a mut Vec<Verdict>,
}

/// How a run ended: after `handled` events; `filled` if the last one filled
/// the generation and the filter is to add one.
pub(crate) struct RunEnd {
    pub handled: usize,
    pub filled: bool,
}

/// The k compiled as a constant into the standard layout's run: the
/// default (FPR 1% gives k = 7). Unrolled, its probe loops run ~6% faster
/// (256 KiB, 8-bit); the blocked layout's run measured ~7% slower unrolled,
/// so it keeps k at run time.
const UNROLLED_K: u32 = 7;

/// The loop of [`Generation::observe_run`] for one cell width and layout;
/// `K` is k as a compile-time constant, or 0 to read it from `run`.
#[inline(always)]
fn observe_cells<C: TimerCells, P: Positions, const K: u32>(
    cells: &mut C,
    hist: &mut [u32],
    (live, inserted, full_at): (&mut u64, &mut u64, FullAt),
    positions: impl Fn(&KeyHash) -> P,
    events: &[Event],
    run: &Run<'_>,
    judged: Judged<'_>,
) -> RunEnd {
    let Judged { clock_ms, counters, out } = judged;
    let k = if K == 0 { run.k } else { K };
    debug_assert_eq!(k, run.k);
    let (mut live_now, mut inserted_now, mut clock) = (*live, *inserted, *clock_ms);
    let (mut distinct, mut duplicates, mut late, mut saturated) = (0u64, 0u64, 0u64, 0u64);
    let mut end = RunEnd { handled: 0, filled: false };
    for (n, e) in events.iter().enumerate() {
        if e.time_ms >= run.next_tick_ms || (run.late_own_time && e.time_ms < clock) {
            break;
        }
        if run.prefetch
            && let Some(ahead) = events.get(n + PREFETCH_DISTANCE)
        {
            prefetch_cells(cells, positions(&ahead.hash), k);
        }
        end.handled = n + 1;
        // The clock never goes back: a late event is judged at the clock
        // (with lateness on, it ended the run above instead).
        late += u64::from(e.time_ms < clock);
        clock = clock.max(e.time_ms);
        let at = positions(&e.hash);
        if all_alive(cells, at, k, run.alive) {
            let equal = if run.count_equal { equal_timers_at(cells, at, k) } else { 0 };
            if equal >= run.equal_min {
                duplicates += 1;
                counters.equal_timer_counts[equal as usize] += 1;
                out.push(Verdict::Duplicate { equal_timers: equal as u8 });
                continue;
            }
        }
        distinct += 1;
        saturated += u64::from(run.at_cap && full_at.reached(live_now, inserted_now));
        live_now += u64::from(k - set_cells(cells, hist, at, k, &run.now, run.alive));
        inserted_now += 1;
        out.push(Verdict::Distinct);
        if !run.at_cap && full_at.reached(live_now, inserted_now) {
            end.filled = true;
            break;
        }
    }
    (*live, *inserted, *clock_ms) = (live_now, inserted_now, clock);
    counters.events += end.handled as u64;
    counters.distinct += distinct;
    counters.duplicates += duplicates;
    counters.late_events += late;
    counters.saturated_inserts += saturated;
    end
}
