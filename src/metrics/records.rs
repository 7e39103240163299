//! The metrics of records on their way through a slice: read from the
//! input, judged, acted on by the features, held for the watermark.

use prometheus::{GaugeVec, Histogram, IntCounter, IntCounterVec, IntGaugeVec};

use super::build::{Builder, seconds_buckets};

/// The input topics: records read, what is gone, lag, and the schema registry
/// the records need.
pub struct InputMetrics {
    pub input_records: IntCounterVec,
    /// Shared mode: named input records gone from the input.
    pub input_missing: IntCounter,
    /// Shared mode: named input records the slice took from the router of
    /// its own process (`features/shared/handoff.rs`).
    pub input_handed: IntCounter,
    /// Per input partition this member reads (`kafka::statistics`).
    pub input_lag: IntGaugeVec,
    /// The same partitions' lag in seconds of record time (`kafka::lag_seconds`).
    pub input_lag_seconds: GaugeVec,
    /// Failed schema registry requests, by kind (`schema_registry::ERROR_KINDS`);
    /// copied from the client's counters when rendered.
    pub schema_registry_errors: IntCounterVec,
}

impl InputMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        let m = InputMetrics {
            input_records: b.counter("dedupd_input_records_total", "Input records read, by topic.", &["topic"]),
            input_missing: b.register(
                IntCounter::new(
                    "dedupd_input_missing_records_total",
                    "Shared mode: input records named by a read-order record that are gone from the input \
                     (retention) when the slice reads them; not judged.",
                )
                .expect("valid metric"),
            ),
            input_handed: b.register(
                IntCounter::new(
                    "dedupd_input_handed_records_total",
                    "Shared mode: input records the slice took from the router of its own process instead of \
                     reading them from the input again.",
                )
                .expect("valid metric"),
            ),
            input_lag: b.int_gauge(
                "dedupd_input_lag",
                "Records of the input partition not yet read by this member (its end minus the position).",
                &["topic", "partition"],
            ),
            input_lag_seconds: b.gauge(
                "dedupd_input_lag_seconds",
                "Timestamp of the input partition's newest record minus that of the last record this member read; 0 at its end.",
                &["topic", "partition"],
            ),
            schema_registry_errors: b.counter(
                "dedupd_schema_registry_errors_total",
                "Failed schema registry requests, by kind: faults the record waits out, and not_found.",
                &["kind"],
            ),
        };
        for kind in crate::schema_registry::ERROR_KINDS {
            m.schema_registry_errors.with_label_values(&[kind]);
        }
        m
    }
}

/// The slices' verdicts on records, dead letters, late records, and the
/// verdicts of multi-level deployments.
pub struct VerdictMetrics {
    pub records: IntCounterVec,
    pub equal_timers: Histogram,
    pub dead_letters: IntCounterVec,
    pub late_records: IntCounterVec,
    pub lateness: Histogram,
    /// Multi-level deployments (docs/tiers.md): a leaf's lookups by result.
    pub tier_lookups: IntCounterVec,
    /// Verdicts published (root) or read (leaf), by result.
    pub tier_verdicts: IntCounterVec,
}

impl VerdictMetrics {
    /// `hashes` (k) sets the equal-timers histogram's buckets 1..=k.
    pub(super) fn new(b: &Builder<'_>, hashes: u32) -> Self {
        let m = VerdictMetrics {
            records: b.counter("dedupd_records_total", "Slice verdicts by slice and result.", &["slice", "result"]),
            equal_timers: b.histogram(
                "dedupd_duplicate_equal_timers",
                "Largest number of a duplicate's k cells holding the same time.",
                (1..=hashes.max(1)).map(f64::from).collect(),
            ),
            dead_letters: b.counter(
                "dedupd_dead_letters_total",
                "Records sent to the dead-letter topic, by reason.",
                &["reason"],
            ),
            late_records: b.counter(
                "dedupd_late_records_total",
                "Records that arrived more than input.lateness behind the largest time of their slice, judged at \
                 their own time.",
                &["slice"],
            ),
            lateness: b.histogram(
                "dedupd_lateness_seconds",
                "How far behind the watermark each late record arrived.",
                seconds_buckets(),
            ),
            tier_lookups: b.counter(
                "dedupd_tier_lookups_total",
                "A leaf's lookups: resolved (dropped at the leaf) or forwarded (to the parent).",
                &["result"],
            ),
            tier_verdicts: b.counter(
                "dedupd_tier_verdicts_total",
                "Sparse-tree verdicts: published (root), applied, too_old or invalid (leaf).",
                &["result"],
            ),
        };
        // Every bounded label value exists from the start, so dashboards and
        // alerts see zeros instead of missing series.
        for reason in crate::engine::InvalidReason::ALL {
            m.dead_letters.with_label_values(&[reason.as_str()]);
        }
        m.dead_letters.with_label_values(&[crate::kafka::size_limits::REASON]);
        for result in ["resolved", "forwarded"] {
            m.tier_lookups.with_label_values(&[result]);
        }
        for result in ["published", "applied", "too_old", "invalid"] {
            m.tier_verdicts.with_label_values(&[result]);
        }
        m
    }
}

/// The features' stages: provenance, the counting stage's limit and flag.
pub struct FeatureMetrics {
    /// Records whose source was not recorded: `provenance.max_sources` others were live.
    pub provenance_dropped: IntCounterVec,
    /// Sources live in a slice's provenance index.
    pub provenance_sources: IntGaugeVec,
    /// Records the counting stage judged over `limit.max_per_window`.
    pub limited: IntCounterVec,
    /// Flag records written to `flag.topic`.
    pub flagged: IntCounterVec,
    /// The probability that the counting stage estimates a key with no
    /// record in the window at 1 or more.
    pub limit_false_positive: GaugeVec,
}

impl FeatureMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        FeatureMetrics {
            provenance_dropped: b.counter(
                "dedupd_provenance_dropped_total",
                "Records whose source was not recorded for provenance: provenance.max_sources others were live.",
                &["slice"],
            ),
            provenance_sources: b.int_gauge(
                "dedupd_provenance_sources",
                "Sources live in the slice's provenance index.",
                &["slice"],
            ),
            limited: b.counter(
                "dedupd_limited_records_total",
                "Records over limit.max_per_window in their window, judged duplicates by the counting stage.",
                &["slice"],
            ),
            flagged: b.counter(
                "dedupd_flagged_records_total",
                "Records that reached flag.threshold, copied to flag.topic.",
                &["slice"],
            ),
            limit_false_positive: b.gauge(
                "dedupd_limit_false_positive_ratio",
                "Probability that the counting stage estimates a key with no record in the window at 1 or more \
                 (at a limit of 1: the share of new keys blocked); 0 without the stage.",
                &["slice"],
            ),
        }
    }
}

/// The records a slice holds until the watermark passes them, and the flushes
/// that release them early.
pub struct HoldMetrics {
    pub waiting_records: IntGaugeVec,
    /// Bytes of the records a slice holds for the watermark.
    pub held_bytes: IntGaugeVec,
    pub idle_flushes: IntCounterVec,
    /// Flushes because a slice held more than `slicing.max_held_bytes`.
    pub held_bytes_flushes: IntCounterVec,
    pub hold_overflows: IntCounterVec,
}

impl HoldMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        HoldMetrics {
            waiting_records: b.int_gauge(
                "dedupd_waiting_records",
                "Records held until the watermark passes them (or held as time-jump suspects).",
                &["slice"],
            ),
            held_bytes: b.int_gauge(
                "dedupd_held_bytes",
                "Bytes (keys and values) of the records the slice holds for the watermark.",
                &["slice"],
            ),
            idle_flushes: b.counter(
                "dedupd_idle_flushes_total",
                "Idle flushes: the slice received nothing for input.lateness and judged the records it held.",
                &["slice"],
            ),
            held_bytes_flushes: b.counter(
                "dedupd_held_bytes_flushes_total",
                "Flushes (logged, as idle flushes) because the slice held more than slicing.max_held_bytes.",
                &["slice"],
            ),
            hold_overflows: b.counter(
                "dedupd_hold_overflows_total",
                "Releases past an input partition nobody routed, because the slice held more than slicing.max_held \
                 records.",
                &["slice"],
            ),
        }
    }
}
