//! The stats JSON of `dedupd filter` (`--stats-json`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::FilterArgs;
use super::lines::Tally;
use crate::engine::Deduplicator;
use crate::filter::SliceFilter;
use crate::filter::counting::CountingStage;

/// The counting stage's part of the stats JSON.
#[derive(Debug, Serialize)]
pub struct CountingStatsJson {
    pub estimator: &'static str,
    pub max_per_window: Option<u64>,
    pub flag_threshold: Option<u64>,
    /// Whether the stage counts by the dedup key (and replaces the dedup filter).
    pub counts_dedup_key: bool,
    /// Records counted, limited (dropped as over the limit) and flagged.
    pub counted: u64,
    pub limited: u64,
    pub flagged: u64,
    pub subwindows: u32,
    pub subwindow_ms: u64,
    /// Counters of each sub-window's first filter (a sub-window that
    /// receives more grows by filters of twice as many).
    pub counters_per_subwindow: u64,
    /// Filters in the ring at the end (`subwindows + 1` if none grew).
    pub filters: usize,
    /// The probability that a key with no record in the window is
    /// estimated at 1 or more at the end: at a limit of 1, the share of new
    /// keys blocked (the overcount the limit pays).
    pub false_positive: f64,
    pub hashes: u32,
    pub counter_bits: u8,
    /// `fixed` or `compact`.
    pub counters: &'static str,
    /// Bytes held by the counters now (compact counters grow with the counts).
    pub memory_bytes: u64,
}

impl CountingStatsJson {
    fn of(stage: &CountingStage, counts_dedup_key: bool) -> Self {
        let (spec, c, s) = (stage.spec(), stage.counts(), stage.stats());
        CountingStatsJson {
            estimator: spec.params.estimator.as_str(),
            max_per_window: spec.max_per_window,
            flag_threshold: spec.flag_threshold,
            counts_dedup_key,
            counted: s.counted,
            limited: s.limited,
            flagged: s.flagged,
            subwindows: c.subwindows(),
            subwindow_ms: c.sub_ms(),
            counters_per_subwindow: spec.params.counters,
            filters: c.filters(),
            false_positive: c.false_positive(),
            hashes: spec.params.hashes,
            counter_bits: spec.params.counter_bits,
            counters: spec.params.store.as_str(),
            memory_bytes: c.memory_bytes(),
        }
    }
}

/// The stats JSON.
#[derive(Debug, Serialize)]
pub struct FilterStats {
    pub kind: &'static str,
    pub records: u64,
    pub distinct: u64,
    pub duplicates: u64,
    pub invalid: u64,
    pub invalid_by_reason: BTreeMap<&'static str, u64>,
    /// Records that arrived more than the lateness behind the largest time
    /// seen (judged at their own time), and the most any missed the watermark by.
    pub late_records: u64,
    pub max_late_ms: u64,
    pub lateness_ms: u64,
    pub memory_bytes: u64,
    /// The most bytes the filter held at the end of any batch.
    pub memory_bytes_peak: u64,
    pub generations_max: u32,
    pub generations_live: u64,
    pub generations_created: u64,
    pub generations_dropped: u64,
    pub saturated_inserts: u64,
    pub estimated_fpr: f64,
    /// Duplicates by their largest group of equal timers (index = group size).
    pub equal_timer_counts: Vec<u64>,
    pub slices: u32,
    pub cells_per_slice: u64,
    pub hashes: u32,
    pub timer_bits: u8,
    pub layout: &'static str,
    pub tick_ms: u64,
    pub window_ms: u64,
    pub elapsed_seconds: f64,
    pub records_per_second: f64,
    /// rsbf: the fraction of ones over all arrays; stable: of non-zero cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ones_fraction: Option<f64>,
    /// Where that fraction settles: rsbf 0.5, stable its stable point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_ones_fraction: Option<f64>,
    /// rsbf and stable: the PRNG seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The counting stage (--max-per-window, --flag-threshold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counting: Option<CountingStatsJson>,
}

impl FilterStats {
    /// The stats of a finished run: the filter's figures, the kind's own
    /// in place of the timer filter's when another kind judges instead.
    pub(super) fn of(
        args: &FilterArgs,
        dedup: &Deduplicator,
        tally: Tally,
        lateness_ms: u64,
        memory_bytes_peak: u64,
        elapsed: f64,
    ) -> FilterStats {
        let Tally { records, distinct, duplicates: duplicate, late_records, max_late_ms, invalid_by_reason } = tally;
        let invalid: u64 = invalid_by_reason.values().sum();
        let f = dedup.filter();
        let s = f.stats();
        let p = f.params();
        let stats = FilterStats {
            kind: args.kind.as_str(),
            records,
            distinct,
            duplicates: duplicate,
            invalid,
            invalid_by_reason,
            late_records,
            max_late_ms,
            lateness_ms,
            memory_bytes: s.memory_bytes,
            memory_bytes_peak,
            generations_max: s.generations_max,
            generations_live: s.generations_live,
            generations_created: s.generations_created,
            generations_dropped: s.generations_dropped,
            saturated_inserts: s.saturated_inserts,
            estimated_fpr: s.estimated_fpr,
            equal_timer_counts: s.equal_timer_counts,
            slices: args.slices,
            cells_per_slice: p.cells,
            hashes: p.hashes,
            timer_bits: p.timer_bits,
            layout: p.layout.as_str(),
            tick_ms: p.tick_ms,
            window_ms: p.window_ms,
            elapsed_seconds: elapsed,
            records_per_second: if elapsed > 0.0 { records as f64 / elapsed } else { 0.0 },
            ones_fraction: None,
            expected_ones_fraction: None,
            seed: None,
            counting: dedup.counting_stage().map(|s| CountingStatsJson::of(s, args.count_key.is_none())),
        };
        stats.with_judges(dedup)
    }

    /// The timer fields describe the idle timer filter: when another kind
    /// judges instead, they are replaced with its figures in the timer
    /// filter's terms ([`SliceFilter::pipe_figures`]), or cleared.
    fn with_judges(self, dedup: &Deduplicator) -> FilterStats {
        let Some(f) = SliceFilter::pipe_figures(dedup.judges()) else { return self };
        FilterStats {
            memory_bytes: f.memory_bytes,
            estimated_fpr: f.estimated_fpr,
            generations_max: 0,
            generations_live: f.generations_live,
            generations_created: f.generations_created,
            generations_dropped: f.generations_dropped,
            saturated_inserts: f.saturated_inserts,
            cells_per_slice: f.cells_per_slice,
            hashes: f.hashes,
            timer_bits: f.timer_bits,
            tick_ms: f.tick_ms,
            window_ms: f.window_ms,
            equal_timer_counts: Vec::new(),
            ones_fraction: f.ones_fraction,
            expected_ones_fraction: f.expected_ones_fraction,
            seed: f.seed,
            ..self
        }
    }
}
