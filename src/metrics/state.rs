//! The metrics of the slices' state: their filters, snapshots and
//! restores, and the process's memory they live in.

use prometheus::{GaugeVec, Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::HEAP_KINDS;
use super::build::{Builder, fine_buckets, seconds_buckets};

/// The slices' filters: density, generations, size, estimated FPR, growth.
pub struct FilterMetrics {
    pub filter_density: GaugeVec,
    pub filter_generations: IntGaugeVec,
    pub filter_memory_bytes: IntGaugeVec,
    /// The most bytes the slice's filter held since this process took it.
    pub filter_memory_bytes_peak: IntGaugeVec,
    pub filter_estimated_fpr: GaugeVec,
    pub generations_created: IntCounterVec,
    pub generations_dropped: IntCounterVec,
    pub saturated_inserts: IntCounterVec,
}

impl FilterMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        FilterMetrics {
            filter_density: b.gauge(
                "dedupd_filter_density",
                "Live-cell density of the slice's newest generation.",
                &["slice"],
            ),
            filter_generations: b.int_gauge(
                "dedupd_filter_generations",
                "Generations alive in the slice's filter.",
                &["slice"],
            ),
            filter_memory_bytes: b.int_gauge("dedupd_filter_memory_bytes", "Bytes of the slice's filter.", &["slice"]),
            filter_memory_bytes_peak: b.int_gauge(
                "dedupd_filter_memory_bytes_peak",
                "The most bytes the slice's filter held since this process took the slice.",
                &["slice"],
            ),
            filter_estimated_fpr: b.gauge(
                "dedupd_filter_estimated_fpr",
                "False-positive rate the live densities predict, combined over generations.",
                &["slice"],
            ),
            generations_created: b.counter(
                "dedupd_filter_generations_created_total",
                "Generations started.",
                &["slice"],
            ),
            generations_dropped: b.counter(
                "dedupd_filter_generations_dropped_total",
                "Generations dropped when expired.",
                &["slice"],
            ),
            saturated_inserts: b.counter(
                "dedupd_filter_saturated_inserts_total",
                "Inserts into a full newest generation at the generation cap.",
                &["slice"],
            ),
        }
    }
}

/// The slices' snapshots as they are written.
pub struct CheckpointMetrics {
    pub checkpoints: IntCounterVec,
    pub checkpoint_failures: IntCounterVec,
    /// Snapshots dropped unwritten because their slice was released first.
    pub checkpoint_dropped: IntCounterVec,
    pub checkpoint_duration: Histogram,
    pub checkpoint_stall: Histogram,
    pub checkpoint_bytes: IntGaugeVec,
    pub checkpoint_age: GaugeVec,
}

impl CheckpointMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        CheckpointMetrics {
            checkpoints: b.counter("dedupd_checkpoints_total", "Slice snapshots written.", &["slice"]),
            checkpoint_failures: b.counter(
                "dedupd_checkpoint_failures_total",
                "Slice snapshot writes that failed.",
                &["slice"],
            ),
            checkpoint_dropped: b.counter(
                "dedupd_checkpoint_dropped_total",
                "Slice snapshots not written (or written without their manifest) because the slice was revoked or \
                 its assignment lost after they were taken.",
                &["slice"],
            ),
            checkpoint_duration: b.histogram(
                "dedupd_checkpoint_duration_seconds",
                "Time to flush outputs, encode and write one snapshot.",
                seconds_buckets(),
            ),
            checkpoint_stall: b.histogram(
                "dedupd_checkpoint_stall_seconds",
                "Longest single pause of the slice worker for one snapshot (copied in chunks while the worker goes on).",
                fine_buckets(),
            ),
            checkpoint_bytes: b.int_gauge("dedupd_checkpoint_bytes", "Size of the slice's last snapshot.", &["slice"]),
            checkpoint_age: b.gauge(
                "dedupd_checkpoint_age_seconds",
                "Seconds since the slice's last snapshot.",
                &["slice"],
            ),
        }
    }
}

/// Restoring a slice: where the state came from, refused snapshots, replays,
/// and the availability policy meanwhile.
pub struct RestoreMetrics {
    pub restores: IntCounterVec,
    /// Snapshots restore refused, by `kafka::checkpoint::Rejection`.
    pub checkpoint_rejected: IntCounterVec,
    /// Policy bounds restore read from an output's last record and ignored
    /// (not written by dedupd: `kafka::restore`).
    pub restore_bounds_ignored: IntCounter,
    pub restore_duration: Histogram,
    pub replayed: IntCounterVec,
    /// Records of a slice being restored decided by `availability.policy`.
    pub policy_decisions: IntCounterVec,
}

impl RestoreMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        let m = RestoreMetrics {
            restores: b.counter("dedupd_restores_total", "Slice restores by source of the state.", &["source"]),
            checkpoint_rejected: b.counter(
                "dedupd_checkpoint_rejected_total",
                "Snapshots a restore refused, by what was wrong with them.",
                &["reason"],
            ),
            restore_bounds_ignored: b.register(
                IntCounter::new(
                    "dedupd_restore_bounds_ignored_total",
                    "Availability-policy headers a restore found on an output's last record that dedupd did not \
                     write (beyond the slice log's end, or malformed), ignored.",
                )
                .expect("valid metric"),
            ),
            restore_duration: b.histogram(
                "dedupd_restore_duration_seconds",
                "Time to restore one slice.",
                seconds_buckets(),
            ),
            replayed: b.counter(
                "dedupd_replayed_records_total",
                "Records replayed silently after a restore.",
                &["slice"],
            ),
            policy_decisions: b.counter(
                "dedupd_policy_decisions_total",
                "Records decided by availability.policy (deliver or drop) while their slice was being restored, \
                 replays included.",
                &["slice", "policy"],
            ),
        };
        // Every bounded label value exists from the start (as for dead letters).
        for source in ["snapshot", "empty", "corrupt"] {
            m.restores.with_label_values(&[source]);
        }
        for reason in crate::kafka::checkpoint::Rejection::ALL {
            m.checkpoint_rejected.with_label_values(&[reason.as_str()]);
        }
        m
    }
}

/// The process's memory: the budget and its parts, the filters' cap, the heap
/// and the resident set.
pub struct MemoryMetrics {
    /// The cap on all slices' filters (`filter.max_memory`); 0: none.
    pub memory_cap: IntGauge,
    /// The memory budget's parts (`memory.limit` divided at start-up).
    pub memory_budget: IntGaugeVec,
    /// All slices' filters at their largest under the cap.
    pub filter_worst_case: IntGauge,
    /// The allocator's own account of the heap (`HEAP_KINDS`), read when scraped.
    pub heap_bytes: IntGaugeVec,
    /// The limit the memory budget divides (0: none), set at start-up.
    pub memory_limit: IntGauge,
    /// The process's resident set, read when scraped.
    pub resident_memory: IntGauge,
}

impl MemoryMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        let m = MemoryMetrics {
            memory_cap: b.register(
                IntGauge::new(
                    "dedupd_memory_cap_bytes",
                    "The cap on all slices' filters together (filter.max_memory, or half the memory limit); \
                     0: no cap.",
                )
                .expect("valid metric"),
            ),
            memory_budget: b.int_gauge(
                "dedupd_memory_budget_bytes",
                "Bytes of the memory budget's part (memory.limit, or the container's limit, divided at start-up; \
                 without a limit each buffer's own bound).",
                &["part"],
            ),
            filter_worst_case: b.register(
                IntGauge::new(
                    "dedupd_filter_worst_case_bytes",
                    "All slices' filters at their largest: every slice at the generation count the cap allows.",
                )
                .expect("valid metric"),
            ),
            heap_bytes: b.int_gauge(
                "dedupd_heap_bytes",
                "The allocator's heap: bytes allocated (live) and resident (its pages in memory).",
                &["kind"],
            ),
            memory_limit: b.register(
                IntGauge::new(
                    "dedupd_memory_limit_bytes",
                    "The memory limit the budget divides (memory.limit, else the container's); 0: none.",
                )
                .expect("valid metric"),
            ),
            resident_memory: b.register(
                IntGauge::new(
                    "dedupd_resident_memory_bytes",
                    "The process's resident memory (VmRSS), read when scraped.",
                )
                .expect("valid metric"),
            ),
        };
        m.memory_limit.set(0);
        m.resident_memory.set(0);
        for kind in HEAP_KINDS {
            m.heap_bytes.with_label_values(&[kind]);
        }
        m
    }
}
