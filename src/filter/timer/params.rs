//! Filter settings: what a user asks for ([`FilterSpec`]) and the resolved,
//! validated per-slice parameters the filter runs with ([`FilterParams`]).

use super::sizing;
use crate::filter::hash::{BLOCK_CELLS, DEFAULT_SEED};
pub use crate::filter::param_error::ParamError;
use crate::filter::param_error::check_window_sizing;

/// When a slice starts a new generation (one-is-enough §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// When the newest generation's live density passes `p^(1/k)`.
    Density,
    /// When the newest generation has taken `-(m/k)·ln(1-p^(1/k))` keys.
    Cardinality,
    /// Never: one fixed generation whose FPR rises with load.
    None,
}

impl Growth {
    pub fn as_str(self) -> &'static str {
        match self {
            Growth::Density => "density",
            Growth::Cardinality => "cardinality",
            Growth::None => "none",
        }
    }
}

impl std::str::FromStr for Growth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "density" => Ok(Growth::Density),
            "cardinality" => Ok(Growth::Cardinality),
            "none" => Ok(Growth::None),
            other => Err(format!("unknown growth `{other}`: expected density, cardinality or none")),
        }
    }
}

/// Where a key's k cells are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// Anywhere among the generation's m cells (double hashing over m): up
    /// to k cache misses per key, the FPR of the textbook formulas.
    #[default]
    Standard,
    /// All k in one block of 256 cells chosen by the hash (2 cache lines of
    /// 4-bit cells, 4 of 8-bit): at most that many cache misses per key
    /// instead of up to k, for a higher FPR at equal memory because blocks
    /// fill unevenly (with k = 7 at the 1% design point, 1.31× the standard
    /// layout's in theory; measured in docs/dev/performance.md).
    Blocked,
}

impl Layout {
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Standard => "standard",
            Layout::Blocked => "blocked",
        }
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "standard" => Ok(Layout::Standard),
            "blocked" => Ok(Layout::Blocked),
            other => Err(format!("unknown layout `{other}`: expected standard or blocked")),
        }
    }
}

/// What the user asks of the filter, for all slices together.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterSpec {
    /// Sliding window length in milliseconds.
    pub window_ms: u64,
    /// Target false-positive rate p.
    pub fpr: f64,
    /// Distinct keys per window, all slices together.
    pub expected_keys: u64,
    /// Extra capacity the first generation is sized for, as a fraction of
    /// `expected_keys`: normal fluctuations of the load then stay inside one
    /// generation instead of starting a second one. 0 sizes exactly.
    pub headroom: f64,
    /// Equal-timers threshold k'; 0 or 1 turns the heuristic off.
    pub equal_timers: u32,
    pub growth: Growth,
    /// Number of slices S the keys are spread over.
    pub slices: u32,
    /// Bits per timer cell, 4..=32.
    pub timer_bits: u8,
    /// Timer resolution in milliseconds; `None` picks the finest the width allows.
    pub tick_ms: Option<u64>,
    /// Upper bound on live generations per slice.
    pub max_generations: u32,
    /// Cell-count multiplier of each new generation level (1 = the paper's
    /// equal-size generations).
    pub growth_factor: u32,
    /// FPR multiplier of each new generation level (1.0 = the paper's equal
    /// thresholds); below 1 keeps the sum over generations bounded.
    pub tightening: f64,
    /// Overrides the number of hashes k derived from `fpr`.
    pub hashes: Option<u32>,
    /// Overrides the total cells m derived from `fpr` and `expected_keys`.
    pub total_cells: Option<u64>,
    pub seed: u64,
    pub layout: Layout,
    /// Event time under disorder: `Some(L)` judges an event that is behind
    /// the clock at its own time, against cells kept for the window plus
    /// L (docs/design.md, invariant 7); `None` judges it at the clock, as the paper
    /// does.
    pub lateness_ms: Option<u64>,
    /// Counting cells beside the timers (one saturating 8-bit counter per
    /// cell), so that a key can be deleted ([`crate::filter::SlidingFilter::delete`]).
    pub deletable: bool,
    /// Generations sized from the live keys (the largest with room takes a
    /// key, a new one holds 1.5× the live keys less what there is, emptied
    /// ones kept with hysteresis: `timer/growth.rs`) instead of the newest
    /// taking every key and a new one at the level that holds 1.5× them.
    /// It changes the verdicts a state continues with, so it is part of the
    /// fingerprint a snapshot is checked against. Off in `FilterSpec::default`
    /// (the golden streams' digests are of that growth); the daemon's
    /// settings and pipe mode turn it on by default.
    pub sized_growth: bool,
}

impl Default for FilterSpec {
    fn default() -> Self {
        FilterSpec {
            window_ms: 600_000,
            fpr: 0.01,
            expected_keys: 1_000_000,
            headroom: 0.2,
            equal_timers: 0,
            growth: Growth::Density,
            slices: 1,
            timer_bits: 8,
            tick_ms: None,
            max_generations: 12,
            growth_factor: 2,
            tightening: 0.5,
            hashes: None,
            total_cells: None,
            seed: DEFAULT_SEED,
            layout: Layout::Standard,
            lateness_ms: None,
            deletable: false,
            sized_growth: false,
        }
    }
}

/// Largest number of hashes a filter may use.
pub const MAX_HASHES: u32 = 32;
/// Largest window, in ticks: bounds the per-generation timer histogram.
pub const MAX_WINDOW_TICKS: u64 = 1 << 18;
/// The finest resolution chosen automatically, in ticks per window.
const AUTO_WINDOW_TICKS: u64 = 1024;
/// Smallest number of cells in one generation of one slice.
pub const MIN_CELLS: u64 = 64;
/// Largest generation level (cells grow by `growth_factor` per level).
pub const MAX_LEVEL: u8 = 4;

/// Resolved parameters of one slice's filter. Everything the filter's state
/// layout depends on is here and is written into every snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterParams {
    pub seed: u64,
    /// Cells of a level-0 generation.
    pub cells: u64,
    /// k.
    pub hashes: u32,
    pub timer_bits: u8,
    pub tick_ms: u64,
    pub window_ms: u64,
    /// W: the window in ticks, `⌈window_ms / tick_ms⌉`. A cell set at tick t
    /// is alive through tick t + W, so the window is kept for at least
    /// `window_ms` and at most one tick longer — never shorter (no false
    /// negatives from rounding).
    pub window_ticks: u32,
    /// R: cells store `tick mod R + 1`; 0 means empty.
    pub period: u32,
    /// L: every cell is swept at least once every L ticks (L = R - W - 3, so
    /// an expired cell is cleared before its stored time can wrap).
    pub sweep_ticks: u32,
    pub equal_timers: u32,
    pub growth: Growth,
    pub fpr: f64,
    pub growth_factor: u32,
    pub tightening: f64,
    pub max_generations: u32,
    pub layout: Layout,
    /// [`FilterSpec::lateness_ms`].
    pub lateness_ms: Option<u64>,
    /// Lt: `⌈lateness_ms / tick_ms⌉`, 0 without lateness. Cells are kept
    /// (not swept) for W + Lt ticks, alive for verdicts at the clock for W.
    pub lateness_ticks: u32,
    /// [`FilterSpec::deletable`]: every generation has a counter per cell.
    pub deletable: bool,
    /// [`FilterSpec::sized_growth`].
    pub sized_growth: bool,
}

impl FilterSpec {
    /// The smallest timer filter of these settings (one level-0 generation
    /// of a key per slice that never grows): it stays empty while another
    /// kind judges instead, and its window only bounds the lateness and is
    /// the default largest clock jump.
    pub fn idle(self) -> FilterSpec {
        FilterSpec {
            expected_keys: u64::from(self.slices),
            total_cells: None,
            growth: Growth::None,
            max_generations: 1,
            ..self
        }
    }

    /// Validates the spec and resolves the per-slice parameters.
    pub fn resolve(&self) -> Result<FilterParams, ParamError> {
        check_window_sizing(self.window_ms, self.fpr, self.expected_keys, self.headroom, self.slices)?;
        if !(4..=32).contains(&self.timer_bits) {
            return Err(ParamError::new("timer_bits", self.timer_bits, "must be between 4 and 32"));
        }
        if self.max_generations == 0 || self.max_generations > 64 {
            return Err(ParamError::new("max_generations", self.max_generations, "must be between 1 and 64"));
        }
        if self.growth_factor == 0 || self.growth_factor > 4 {
            return Err(ParamError::new("growth_factor", self.growth_factor, "must be between 1 and 4"));
        }
        if !(self.tightening > 0.0 && self.tightening <= 1.0) {
            return Err(ParamError::new("tightening", self.tightening, "must be greater than 0 and at most 1"));
        }

        let sized_for = (self.expected_keys as f64 * (1.0 + self.headroom)).ceil() as u64;
        let (derived_cells, derived_k) = sizing::optimal_cells_and_hashes(sized_for, self.fpr);
        let total_cells = self.total_cells.unwrap_or(derived_cells);
        let hashes = self.hashes.unwrap_or(derived_k);
        if hashes == 0 || hashes > MAX_HASHES {
            return Err(ParamError::new("hashes", hashes, format!("must be between 1 and {MAX_HASHES}")));
        }
        if self.equal_timers > hashes {
            return Err(ParamError::new(
                "equal_timers",
                self.equal_timers,
                format!("must be at most the number of hashes k = {hashes} (0 turns it off)"),
            ));
        }
        let cells = self.slice_cells(total_cells)?;
        let ticks = self.ticks()?;
        Ok(FilterParams {
            seed: self.seed,
            cells,
            hashes,
            timer_bits: self.timer_bits,
            tick_ms: ticks.tick_ms,
            window_ms: self.window_ms,
            window_ticks: ticks.window as u32,
            period: ticks.period as u32,
            sweep_ticks: ticks.sweep as u32,
            equal_timers: self.equal_timers,
            growth: self.growth,
            fpr: self.fpr,
            growth_factor: self.growth_factor,
            tightening: self.tightening,
            max_generations: self.max_generations,
            layout: self.layout,
            lateness_ms: self.lateness_ms,
            lateness_ticks: ticks.lateness as u32,
            deletable: self.deletable,
            sized_growth: self.sized_growth,
        })
    }

    /// The cells of one slice: `total_cells` shared by the slices, each
    /// rounded up to whole 64-bit words of cells (and, blocked, to whole
    /// blocks).
    fn slice_cells(&self, total_cells: u64) -> Result<u64, ParamError> {
        let round = match self.layout {
            Layout::Standard => 64,
            Layout::Blocked => BLOCK_CELLS,
        };
        // Checked: `expected_keys` may be as large as u64 allows (a setting
        // of `inf` reads as u64::MAX), and the cells it asks for overflow.
        let max_bytes: u64 = 1 << 40;
        let cells = total_cells
            .div_ceil(u64::from(self.slices))
            .max(MIN_CELLS)
            .checked_next_multiple_of(round)
            .filter(|&c| c.checked_mul(u64::from(self.timer_bits)).is_some_and(|bits| bits / 8 <= max_bytes));
        cells.ok_or_else(|| ParamError::new("expected", self.expected_keys, "needs more than 1 TiB of cells per slice"))
    }

    /// The tick, and the window, lateness, timer period and sweep in ticks
    /// of it: the window and the lateness must fit the timer period with at
    /// least one tick of sweep.
    fn ticks(&self) -> Result<Ticks, ParamError> {
        let max_value: u64 = (1u64 << self.timer_bits) - 1;
        let max_window_ticks = (max_value - 4).min(MAX_WINDOW_TICKS);
        let lateness_ms = self.lateness_ms.unwrap_or(0);
        let fits = |tick: u64| self.window_ms.div_ceil(tick) + lateness_ms.div_ceil(tick) + 4 <= max_value;
        let tick_ms = match self.tick_ms {
            Some(0) => return Err(ParamError::new("tick", "0ms", "must be at least 1ms")),
            Some(t) => t,
            None => {
                let target = ((max_value - 3) / 2).min(AUTO_WINDOW_TICKS);
                let mut tick = self.window_ms.div_ceil(target).max(1);
                // Coarser only when the lateness does not fit beside the window.
                while !fits(tick) {
                    tick += tick.div_ceil(8);
                }
                tick
            }
        };
        let window_ticks = self.window_ms.div_ceil(tick_ms);
        if window_ticks > max_window_ticks {
            return Err(ParamError::new(
                "tick",
                format!("{tick_ms}ms"),
                format!(
                    "the window is {window_ticks} ticks of {tick_ms}ms but {}-bit timers hold at most {max_window_ticks}; \
                     use a tick of at least {}ms or wider timers",
                    self.timer_bits,
                    self.window_ms.div_ceil(max_window_ticks)
                ),
            ));
        }
        let lateness_ticks = lateness_ms.div_ceil(tick_ms);
        if !fits(tick_ms) {
            return Err(ParamError::new(
                "lateness",
                format!("{lateness_ms}ms"),
                format!(
                    "the window ({window_ticks} ticks of {tick_ms}ms) and the lateness ({lateness_ticks} ticks) do not fit \
                     {}-bit timers (at most {} ticks together); use a coarser tick, wider timers or less lateness",
                    self.timer_bits,
                    max_value - 4
                ),
            ));
        }
        let period = max_value.min(4 * window_ticks + lateness_ticks + 3);
        let sweep = period - window_ticks - lateness_ticks - 3;
        Ok(Ticks { tick_ms, window: window_ticks, lateness: lateness_ticks, period, sweep })
    }
}

/// A timer filter's time in ticks ([`FilterSpec::ticks`]).
struct Ticks {
    tick_ms: u64,
    window: u64,
    lateness: u64,
    /// The timer period: the values a timer cell cycles through.
    period: u64,
    /// Ticks between two sweeps of a cell.
    sweep: u64,
}

impl FilterParams {
    /// Cells of a generation at `level`.
    pub fn level_cells(&self, level: u8) -> u64 {
        self.cells * u64::from(self.growth_factor).pow(u32::from(level))
    }

    /// Target FPR of a generation at `level`.
    pub fn level_fpr(&self, level: u8) -> f64 {
        self.fpr * self.tightening.powi(i32::from(level))
    }

    /// The parameters a snapshot's cells depend on, as text: equal
    /// fingerprints mean a snapshot can be restored.
    pub fn fingerprint(&self) -> String {
        let standard = format!(
            "seed={:#x},cells={},hashes={},timer_bits={},tick_ms={},window_ms={}",
            self.seed, self.cells, self.hashes, self.timer_bits, self.tick_ms, self.window_ms
        );
        // The standard layout's fingerprint is the one it always had.
        let layout = match self.layout {
            Layout::Standard => standard,
            Layout::Blocked => standard + ",layout=blocked256",
        };
        let lateness = match self.lateness_ms {
            None => layout,
            Some(l) => format!("{layout},lateness_ms={l}"),
        };
        // Counting cells change the state's layout (a non-deletable
        // filter's fingerprint is the one it always had).
        let counting = if self.deletable { lateness + ",deletable" } else { lateness };
        // So does the growth a state continues with (off: as it always was).
        if self.sized_growth { counting + ",growth=sized" } else { counting }
    }

    /// Bytes one slice's timer filter holds while its keys fit one
    /// generation: the cells, the first generation's timer histogram, the
    /// alive table and, deletable, a counting byte per cell (what
    /// [`crate::filter::SlidingFilter::memory_bytes`] reports for a new filter).
    /// Each further generation adds its own cells and histogram. Computed
    /// without allocating anything.
    pub fn memory_bytes(&self) -> u64 {
        let cells = usize::try_from(self.cells).ok().and_then(|m| sizing::cell_bytes(self.timer_bits, m));
        let cells = cells.map_or(u64::MAX, |b| b as u64);
        let period = u64::from(self.period) + 1;
        let counts = if self.deletable { self.cells } else { 0 };
        cells.saturating_add(period * 4 + period).saturating_add(counts)
    }

    /// The equal-timers threshold in effect (values below 2 disable it).
    pub fn equal_timers_min(&self) -> u32 {
        if self.equal_timers >= 2 { self.equal_timers } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> FilterSpec {
        FilterSpec { window_ms: 60_000, expected_keys: 27_000, headroom: 0.0, ..FilterSpec::default() }
    }

    /// The size computed from the parameters is what a new filter holds,
    /// for every cell width, with and without counting cells.
    #[test]
    fn memory_bytes_is_what_a_new_filter_holds() {
        for timer_bits in [4, 5, 8, 12, 16, 32] {
            for deletable in [false, true] {
                for expected_keys in [1, 27_000, 100_003] {
                    let p = FilterSpec { timer_bits, deletable, expected_keys, ..spec() }.resolve().unwrap();
                    let want = crate::filter::SlidingFilter::new(p.clone()).memory_bytes() as u64;
                    assert_eq!(
                        p.memory_bytes(),
                        want,
                        "{timer_bits} bits, deletable {deletable}, {expected_keys} keys"
                    );
                }
            }
        }
    }

    #[test]
    fn headroom_adds_cells_not_hashes() {
        let exact = spec().resolve().unwrap();
        let roomy = FilterSpec { headroom: 0.2, ..spec() }.resolve().unwrap();
        assert_eq!(roomy.hashes, exact.hashes);
        let ratio = roomy.cells as f64 / exact.cells as f64;
        assert!((1.19..1.21).contains(&ratio), "{ratio}");
        assert_eq!(FilterSpec { headroom: -1.0, ..spec() }.resolve().unwrap_err().setting, "headroom");
    }

    #[test]
    fn auto_tick_uses_the_width() {
        let p = spec().resolve().unwrap();
        assert_eq!((p.tick_ms, p.window_ticks, p.period, p.sweep_ticks), (477, 126, 255, 126));
        let p4 = FilterSpec { timer_bits: 4, ..spec() }.resolve().unwrap();
        assert_eq!((p4.window_ticks, p4.period, p4.sweep_ticks), (6, 15, 6));
        let p16 = FilterSpec { timer_bits: 16, ..spec() }.resolve().unwrap();
        assert_eq!((p16.tick_ms, p16.window_ticks, p16.period), (59, 1017, 4071));
        assert!(p16.window_ticks as u64 * p16.tick_ms >= 60_000);
    }

    #[test]
    fn invariants_of_the_timer_period() {
        for bits in 4..=32u8 {
            for window_ms in [1, 7, 1000, 60_000, 86_400_000] {
                let p = FilterSpec { timer_bits: bits, window_ms, ..spec() }.resolve().unwrap();
                assert!(u64::from(p.window_ticks) * p.tick_ms >= window_ms);
                assert!(p.sweep_ticks >= 1);
                assert_eq!(p.period, p.window_ticks + p.sweep_ticks + 3);
                assert!(u64::from(p.period) < (1u64 << bits));
                for lateness_ms in [0, 1, 2_000, window_ms / 2] {
                    let spec = FilterSpec { timer_bits: bits, window_ms, lateness_ms: Some(lateness_ms), ..spec() };
                    let q = spec.resolve().unwrap();
                    assert!(u64::from(q.window_ticks) * q.tick_ms >= window_ms);
                    assert!(u64::from(q.lateness_ticks) * q.tick_ms >= lateness_ms);
                    assert!(q.sweep_ticks >= 1);
                    assert_eq!(q.period, q.window_ticks + q.lateness_ticks + q.sweep_ticks + 3);
                    assert!(u64::from(q.period) < (1u64 << bits));
                    // The tick is today's whenever the lateness fits beside the window.
                    if q.window_ticks + q.lateness_ticks + 4 <= p.period.max(q.period) && q.tick_ms == p.tick_ms {
                        assert_eq!(q.window_ticks, p.window_ticks);
                    }
                }
            }
        }
    }

    #[test]
    fn lateness_keeps_the_tick_when_it_fits() {
        let p = FilterSpec { lateness_ms: Some(2_000), ..spec() }.resolve().unwrap();
        assert_eq!((p.tick_ms, p.window_ticks, p.lateness_ticks, p.period, p.sweep_ticks), (477, 126, 5, 255, 121));
        assert!(p.fingerprint().ends_with(",lateness_ms=2000"));
        let p4 = FilterSpec { timer_bits: 4, lateness_ms: Some(2_000), ..spec() }.resolve().unwrap();
        assert_eq!((p4.tick_ms, p4.window_ticks, p4.lateness_ticks, p4.sweep_ticks), (10_000, 6, 1, 5));
        // A lateness as long as the window at 4 bits: a coarser tick.
        let coarse = FilterSpec { timer_bits: 4, lateness_ms: Some(60_000), ..spec() }.resolve().unwrap();
        assert!(coarse.tick_ms > 10_000 && coarse.sweep_ticks >= 1);
        let e = FilterSpec { timer_bits: 4, tick_ms: Some(10_000), lateness_ms: Some(60_000), ..spec() }
            .resolve()
            .unwrap_err();
        assert_eq!(e.setting, "lateness");
    }

    #[test]
    fn errors_name_setting_value_and_rule() {
        let e = FilterSpec { fpr: 1.5, ..spec() }.resolve().unwrap_err();
        assert_eq!(e.to_string(), "invalid fpr = 1.5: must be greater than 0 and less than 1");
        let e = FilterSpec { timer_bits: 4, tick_ms: Some(1000), ..spec() }.resolve().unwrap_err();
        assert_eq!(e.setting, "tick");
        assert!(e.rule.contains("at least 5455ms"), "{e}");
        let e = FilterSpec { equal_timers: 9, ..spec() }.resolve().unwrap_err();
        assert_eq!(e.setting, "equal_timers");
        assert_eq!(FilterSpec { slices: 0, ..spec() }.resolve().unwrap_err().setting, "slices");
        assert_eq!(FilterSpec { timer_bits: 3, ..spec() }.resolve().unwrap_err().setting, "timer_bits");
    }

    #[test]
    fn blocked_layout_settings() {
        for bits in [4u8, 5, 8, 12, 16, 32] {
            let p = FilterSpec { layout: Layout::Blocked, timer_bits: bits, ..spec() }.resolve().unwrap();
            assert_eq!(p.cells % BLOCK_CELLS, 0);
            assert_eq!(p.layout, Layout::Blocked);
            assert!(p.fingerprint().ends_with(",layout=blocked256"));
        }
        let standard = spec().resolve().unwrap();
        assert!(!standard.fingerprint().contains("layout"));
        assert_eq!("blocked".parse::<Layout>(), Ok(Layout::Blocked));
        assert!("striped".parse::<Layout>().unwrap_err().contains("standard or blocked"));
    }
    #[test]
    fn slices_split_the_cells() {
        let one = spec().resolve().unwrap();
        let eight = FilterSpec { slices: 8, ..spec() }.resolve().unwrap();
        assert!(eight.cells * 8 >= one.cells - 64 && eight.cells * 8 <= one.cells + 8 * 64);
        assert_eq!(one.hashes, 7);
    }
}
