//! Counts over a sliding window of event time: a ring of sub-windows, each
//! a short chain of spectral filters that grows with what the sub-window
//! receives (docs/spectral.md, "Windowed counts").

use super::{KeyHash, ParamError, Slots, Spectral, SpectralParams};

/// Sub-windows per window: allowed range and default.
pub const SUBWINDOWS_MIN: u32 = 8;
pub const SUBWINDOWS_MAX: u32 = 64;
pub const DEFAULT_SUBWINDOWS: u32 = 16;

/// The most filters a sub-window holds (level 0 and the grown ones); the
/// last keeps filling past its bound, as the timer filter's newest
/// generation does at `max_generations`.
pub const GROWTH_LEVELS: u32 = 6;

/// The bound the growth keeps: the probability that a key with no record
/// in the window is estimated at 1 or more, summed over every filter of the
/// ring when each is at its bound. Each of the `subwindows + 1` sub-windows
/// gets an equal share; within a sub-window, level i gets half of what
/// level i − 1 got (so the levels' shares add up to at most the
/// sub-window's).
pub const RING_FALSE_POSITIVE: f64 = 0.02;

/// One sub-window: its filters, level 0 first; records go to the last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubWindow {
    filters: Vec<Spectral>,
    /// Nonzero counters of each filter's primary SBF (kept as records come
    /// in: every estimator raises all k counters of an inserted key).
    nonzero: Vec<u64>,
}

impl SubWindow {
    fn new(level0: &SpectralParams) -> Self {
        SubWindow { filters: vec![Spectral::new(level0)], nonzero: vec![0] }
    }

    /// The filters, level 0 first.
    pub fn filters(&self) -> &[Spectral] {
        &self.filters
    }

    /// Empties the sub-window and gives back the grown filters' memory.
    fn clear(&mut self) {
        self.filters.truncate(1);
        self.filters[0].clear();
        self.nonzero.clear();
        self.nonzero.push(0);
    }
}

/// A level's filter settings and the nonzero counters at which a filter of
/// that level is full (a record that would take it past them opens the
/// next level).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Level {
    params: SpectralParams,
    full_at: u64,
}

/// Counts over a sliding window of event time: a ring of `subwindows + 1`
/// sub-windows, each covering `ceil(W / subwindows)` ms of time. A
/// sub-window is cleared whole when time leaves it, so no key is ever
/// deleted (MI works). The estimate at time t sums the live sub-windows,
/// which cover all of `(t - W, t]` plus up to one sub-window more: a window
/// holds between W and W + W/subwindows of history, so counts are only
/// ever overestimated by the granularity, never under.
///
/// A sub-window starts with one filter of `params.counters` counters
/// (level 0). When the share z of its nonzero counters passes the bound at
/// which a key it never saw would read nonzero with probability z^k above
/// the filter's share of [`RING_FALSE_POSITIVE`], a new filter of twice the
/// counters (the next level) takes the sub-window's later records. A
/// sub-window's estimate is the sum over its filters; each filter bounds
/// the key's count in it from above, so the sum bounds the sub-window's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowedCounts {
    params: SpectralParams,
    window_ms: u64,
    sub_ms: u64,
    levels: Vec<Level>,
    ring: Vec<SubWindow>,
    /// The sub-window index (time / sub_ms) of the newest live sub-window.
    newest: Option<u64>,
}

impl WindowedCounts {
    /// Validates the settings; errors name the setting, value and rule.
    pub fn new(params: SpectralParams, window_ms: u64, subwindows: u32) -> Result<Self, ParamError> {
        params.validate()?;
        if !(SUBWINDOWS_MIN..=SUBWINDOWS_MAX).contains(&subwindows) {
            return Err(ParamError::new(
                "subwindows",
                subwindows,
                format!("must be {SUBWINDOWS_MIN} to {SUBWINDOWS_MAX}"),
            ));
        }
        if window_ms < u64::from(subwindows) {
            return Err(ParamError::new(
                "window",
                format!("{window_ms}ms"),
                format!("must be at least 1ms per sub-window ({subwindows}ms)"),
            ));
        }
        let levels = levels(&params, subwindows);
        let ring = (0..=subwindows).map(|_| SubWindow::new(&params)).collect();
        Ok(WindowedCounts {
            params,
            window_ms,
            sub_ms: window_ms.div_ceil(u64::from(subwindows)),
            levels,
            ring,
            newest: None,
        })
    }

    /// Level 0's settings (every sub-window's first filter).
    pub fn params(&self) -> &SpectralParams {
        &self.params
    }

    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    pub fn subwindows(&self) -> u32 {
        self.ring.len() as u32 - 1
    }

    pub fn sub_ms(&self) -> u64 {
        self.sub_ms
    }

    /// The newest live sub-window's index (time / sub_ms).
    pub fn newest(&self) -> Option<u64> {
        self.newest
    }

    /// Bytes held by every filter's counters.
    pub fn memory_bytes(&self) -> u64 {
        self.ring.iter().flat_map(|s| &s.filters).map(Spectral::memory_bytes).sum()
    }

    /// Filters in the ring now (`subwindows + 1` before any grew).
    pub fn filters(&self) -> usize {
        self.ring.iter().map(|s| s.filters.len()).sum()
    }

    /// The probability that a key with no record in the window is
    /// estimated at 1 or more now, Σ z^k over the filters (z: a filter's
    /// share of nonzero counters). At a limit of 1 it is the share of a new
    /// key's first copies blocked; it is at most [`RING_FALSE_POSITIVE`]
    /// while no sub-window is at [`GROWTH_LEVELS`].
    pub fn false_positive(&self) -> f64 {
        let k = self.params.hashes as i32;
        self.ring
            .iter()
            .flat_map(|s| s.nonzero.iter().zip(&self.levels))
            .map(|(&nz, l)| (nz as f64 / l.params.counters as f64).powi(k))
            .sum()
    }

    /// Moves the window forward to `time_ms` (never back), clearing the
    /// sub-windows time has left.
    pub fn advance(&mut self, time_ms: u64) {
        let j = time_ms / self.sub_ms;
        let len = self.ring.len() as u64;
        match self.newest {
            Some(n) if j <= n => {}
            Some(n) => {
                for i in n + 1..=j.min(n + len) {
                    self.ring[(i % len) as usize].clear();
                }
                self.newest = Some(j);
            }
            None => self.newest = Some(j),
        }
    }

    /// The sub-window a record of `time_ms` is counted in: its own, or the
    /// oldest live one for a record older than the ring (counted later than
    /// its time, it stays counted longer: an overestimate, never an under).
    fn slot(&self, time_ms: u64) -> usize {
        let newest = self.newest.unwrap_or(0);
        let oldest = newest.saturating_sub(self.ring.len() as u64 - 1);
        ((time_ms / self.sub_ms).clamp(oldest, newest) % self.ring.len() as u64) as usize
    }

    /// The estimated count of the key in the window ending at the newest time
    /// seen (see the type's docs for what the window covers).
    pub fn estimate(&self, h: &KeyHash) -> u64 {
        let depth = self.ring.iter().map(|s| s.filters.len()).max().unwrap_or(1);
        let mut sum = 0;
        // One set of positions per level: the filters of a level have one size.
        for (i, level) in self.levels[..depth].iter().enumerate() {
            let s = Slots::of(h, level.params.counters, level.params.hashes);
            for sub in &self.ring {
                if let Some(f) = sub.filters.get(i) {
                    sum += u64::from(f.query_with(h, &s));
                }
            }
        }
        sum
    }

    /// Counts one record of the key at `time_ms` and returns the key's
    /// estimate before and after it.
    pub fn observe(&mut self, h: &KeyHash, time_ms: u64) -> (u64, u64) {
        self.advance(time_ms);
        let slot = self.slot(time_ms);
        let before = self.estimate(h);
        let sub = &mut self.ring[slot];
        let mut i = sub.filters.len() - 1;
        let slots = |l: &Level| Slots::of(h, l.params.counters, l.params.hashes);
        let mut s = slots(&self.levels[i]);
        let mut fresh = sub.filters[i].zeros_at(&s);
        // A record that would take the filter past its bound opens the next
        // level instead: no filter below the last is ever past it.
        if sub.nonzero[i] + fresh > self.levels[i].full_at
            && let Some(next) = self.levels.get(i + 1)
        {
            sub.filters.push(Spectral::new(&next.params));
            sub.nonzero.push(0);
            i += 1;
            s = slots(next);
            fresh = sub.filters[i].zeros_at(&s);
        }
        let f = &mut sub.filters[i];
        let own = u64::from(f.query_with(h, &s));
        sub.nonzero[i] += fresh;
        f.insert_with(h, &s, 1);
        (before, before - own + u64::from(f.query_with(h, &s)))
    }

    /// The ring (for snapshots), and the newest sub-window index.
    pub fn state(&self) -> (&[SubWindow], Option<u64>) {
        (&self.ring, self.newest)
    }

    /// Restores a ring taken with [`Self::state`] from one with the same
    /// settings: per sub-window, per filter (level 0 first), its counter
    /// arrays. `false` (nothing changed) if they do not fit.
    pub fn restore(&mut self, newest: Option<u64>, arrays: Vec<Vec<Vec<Vec<u64>>>>) -> bool {
        if arrays.len() != self.ring.len() {
            return false;
        }
        let mut ring = Vec::with_capacity(arrays.len());
        for sub in arrays {
            if sub.is_empty() || sub.len() > self.levels.len() {
                return false;
            }
            let mut restored = SubWindow { filters: Vec::new(), nonzero: Vec::new() };
            for (level, a) in self.levels.iter().zip(sub) {
                let mut f = Spectral::new(&level.params);
                if !f.set_arrays(a) {
                    return false;
                }
                restored.nonzero.push(f.nonzero());
                restored.filters.push(f);
            }
            ring.push(restored);
        }
        self.ring = ring;
        self.newest = newest;
        true
    }
}

/// Every level's settings and bound: level i has `counters · 2^i` counters
/// (up to [`GROWTH_LEVELS`] levels and 2^36 counters) and is full when its
/// share z of nonzero counters reaches `(p_i)^(1/k)`, p_i = the ring's
/// bound / (subwindows + 1) / 2^(i+1).
fn levels(params: &SpectralParams, subwindows: u32) -> Vec<Level> {
    let per_sub = RING_FALSE_POSITIVE / f64::from(subwindows + 1);
    let mut levels = Vec::new();
    for i in 0..GROWTH_LEVELS {
        let counters = params.counters << i;
        if i > 0 && counters > 1 << 36 {
            break;
        }
        let share = per_sub / f64::from(2u32 << i);
        let z = share.powf(1.0 / f64::from(params.hashes));
        levels.push(Level { params: SpectralParams { counters, ..*params }, full_at: (counters as f64 * z) as u64 });
    }
    if let Some(last) = levels.last_mut() {
        last.full_at = u64::MAX;
    }
    levels
}
