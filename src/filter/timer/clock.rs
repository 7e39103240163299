//! The slice clock as the cells see it: the current tick, the value a cell
//! set now stores, and which stored values are alive.

use crate::filter::timer::params::FilterParams;

/// The slice clock as the cells see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Now {
    /// Absolute tick (`clock_ms / tick_ms`).
    pub tick: u64,
    /// `tick mod R + 1`: what a cell set now stores.
    pub value: u32,
    pub window: u32,
    /// W + Lt: cells are kept this many ticks (swept after), W without lateness.
    pub retain: u32,
    pub period: u32,
    /// The alive values as up to two intervals `[lo, lo + len]` of `1..=R`
    /// (derived from the fields above; see [`Now::is_alive`]).
    alive: [(u32, u32); 2],
}

impl Now {
    pub(crate) fn at(tick: u64, params: &FilterParams) -> Self {
        let (window, period) = (params.window_ticks, params.period);
        let value = (tick % u64::from(period)) as u32 + 1;
        // A cell is alive iff its age `(value - v) mod R` is at most W: the
        // values `value - W ..= value`, wrapping below 1 to the top of 1..=R.
        let alive = if value > window {
            [(value - window, window), EMPTY_INTERVAL]
        } else {
            [(1, value - 1), (value + period - window, window - value)]
        };
        let retain = window + params.lateness_ticks;
        Now { tick, value, window, retain, period, alive }
    }

    /// What a cell set at `tick` stores.
    #[inline]
    pub(crate) fn value_at(&self, tick: u64) -> u32 {
        (tick % u64::from(self.period)) as u32 + 1
    }

    /// The age in ticks of a set cell holding `value` (in `0..R`).
    #[inline(always)]
    pub(crate) fn age(&self, value: u32) -> u32 {
        let wrap = if value > self.value { self.period } else { 0 };
        (self.value + wrap).wrapping_sub(value)
    }

    /// Whether a cell holding `value` is alive: set, and at most W ticks old.
    /// Two unsigned range checks and no branch (at the design density this
    /// is a coin toss per cell); 0 (empty) is in neither interval.
    #[inline(always)]
    pub(crate) fn is_alive(&self, value: u32) -> bool {
        let [(lo1, len1), (lo2, len2)] = self.alive;
        (value.wrapping_sub(lo1) <= len1) | (value.wrapping_sub(lo2) <= len2)
    }

    /// Whether a cell holding `value` has expired (is set and older than the
    /// window, plus the lateness it is kept for): what the sweep clears.
    #[inline(always)]
    pub(crate) fn is_dead(&self, value: u32) -> bool {
        (value != 0) & (self.age(value) > self.retain)
    }

    /// Whether a cell holding `value` is set and at most `limit` ticks old:
    /// what an event judged `limit - W` ticks behind the clock counts as
    /// set (see `SlidingFilter::observe_late`).
    #[inline]
    pub(crate) fn is_within(&self, value: u32, limit: u32) -> bool {
        value != 0 && self.age(value) <= limit
    }
}

/// Which cell values are alive at the current tick: entry `v` is 1 for the
/// W + 1 values of the last W + 1 ticks and 0 for every other value of
/// `0..=R` (0 is empty). [`Now::is_alive`] as one load from a table of R + 1
/// bytes that stays in L1, for the hot loops (instead of two range checks
/// per cell); a tick changes two entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AliveTable(Box<[u8]>);

impl AliveTable {
    pub(crate) fn at(now: &Now) -> Self {
        let mut table = AliveTable(vec![0; now.period as usize + 1].into_boxed_slice());
        table.reset(now);
        table
    }

    /// Rebuilds the table for `now` in place (after a jump of the clock).
    pub(crate) fn reset(&mut self, now: &Now) {
        for (v, entry) in (0u32..).zip(self.0.iter_mut()) {
            *entry = u8::from(now.is_alive(v));
        }
    }

    /// Moves the table from the tick before `now` to `now`: the value of
    /// W + 1 ticks ago dies, now's value comes alive.
    pub(crate) fn step(&mut self, now: &Now) {
        let died = now.value_at(now.tick + u64::from(now.period) - u64::from(now.window) - 1);
        self.0[died as usize] = 0;
        self.0[now.value as usize] = 1;
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.0.len()
    }

    /// 1 if a cell holding `value` is alive, else 0.
    ///
    /// # Safety
    /// `value` must be at most R (what cells hold: a snapshot's cells are
    /// checked on decode).
    #[inline(always)]
    pub(crate) unsafe fn get_unchecked(&self, value: u32) -> u32 {
        debug_assert!((value as usize) < self.0.len());
        // SAFETY: the caller's contract; the table has R + 1 entries.
        u32::from(unsafe { *self.0.get_unchecked(value as usize) })
    }
}

/// An interval no value is in: `v - u32::MAX = v + 1 > 0` for every cell
/// value `v < u32::MAX` (values are at most R < 2^32 - 1).
const EMPTY_INTERVAL: (u32, u32) = (u32::MAX, 0);
