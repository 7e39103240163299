//! Prometheus metrics, one registry per process; `docs/metrics.md` lists
//! them (a test keeps the two in step). Names start with `dedupd_`; labels
//! are bounded (slice, result, reason, topic, source, kind) — never keys.
//! Hot paths count in plain integers (the slice state's counters) and the
//! workers publish deltas and gauges every few hundred milliseconds.

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    pub build_info: IntGaugeVec,
    pub input_records: IntCounterVec,
    pub records: IntCounterVec,
    pub equal_timers: Histogram,
    pub dead_letters: IntCounterVec,
    /// Multi-level deployments (docs/tiers.md): a leaf's lookups by result.
    pub tier_lookups: IntCounterVec,
    /// Verdicts published (root) or read (leaf), by result.
    pub tier_verdicts: IntCounterVec,
    pub filter_density: GaugeVec,
    pub filter_generations: IntGaugeVec,
    pub filter_memory_bytes: IntGaugeVec,
    /// The most bytes the slice's filter held since this process took it.
    pub filter_memory_bytes_peak: IntGaugeVec,
    pub filter_estimated_fpr: GaugeVec,
    pub generations_created: IntCounterVec,
    pub generations_dropped: IntCounterVec,
    pub saturated_inserts: IntCounterVec,
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
    pub checkpoints: IntCounterVec,
    pub checkpoint_failures: IntCounterVec,
    /// Snapshots dropped unwritten because their slice was released first.
    pub checkpoint_dropped: IntCounterVec,
    pub checkpoint_duration: Histogram,
    pub checkpoint_stall: Histogram,
    pub checkpoint_bytes: IntGaugeVec,
    pub checkpoint_age: GaugeVec,
    pub restores: IntCounterVec,
    /// Snapshots restore refused, by `kafka::checkpoint::Rejection`.
    pub checkpoint_rejected: IntCounterVec,
    /// Policy bounds restore read from an output's last record and ignored
    /// (not written by dedupd: `kafka::restore`).
    pub restore_bounds_ignored: IntCounter,
    pub restore_duration: Histogram,
    pub replayed: IntCounterVec,
    pub late_records: IntCounterVec,
    pub lateness: Histogram,
    pub waiting_records: IntGaugeVec,
    /// Bytes of the records a slice holds for the watermark.
    pub held_bytes: IntGaugeVec,
    pub idle_flushes: IntCounterVec,
    /// Flushes because a slice held more than `slicing.max_held_bytes`.
    pub held_bytes_flushes: IntCounterVec,
    /// Gaps in a slice's partition of the slice log, by what came of them.
    pub slice_log_gaps: IntCounterVec,
    /// The cap on all slices' filters (`filter.max_memory`); 0: none.
    pub memory_cap: IntGauge,
    /// The memory budget's parts (`memory.limit` divided at start-up).
    pub memory_budget: IntGaugeVec,
    /// All slices' filters at their largest under the cap.
    pub filter_worst_case: IntGauge,
    /// Records of a slice being restored decided by `availability.policy`.
    pub policy_decisions: IntCounterVec,
    pub hold_overflows: IntCounterVec,
    /// Shared mode: named input records gone from the input.
    pub input_missing: IntCounter,
    pub rebalances: IntCounterVec,
    /// Failed schema registry requests, by kind (`schema_registry::ERROR_KINDS`);
    /// copied from the client's counters when rendered.
    pub schema_registry_errors: IntCounterVec,
    pub slices_owned: IntGauge,
    pub broker_silence: prometheus::Gauge,
    pub consumer_lag: IntGaugeVec,
    /// Per input partition this member reads (`kafka::statistics`).
    pub input_lag: IntGaugeVec,
    /// The same partitions' lag in seconds of record time (`kafka::lag_seconds`).
    pub input_lag_seconds: GaugeVec,
    pub producer_queue: IntGauge,
    /// Input records the router holds to send them in event-time order.
    pub router_buffered: IntGauge,
    /// Bytes of the input records the router holds.
    pub router_buffered_bytes: IntGauge,
    /// Input partitions paused because their lane held `slicing.max_buffered_bytes`.
    pub router_byte_pauses: IntCounter,
    /// Router starts after its producer failed.
    pub router_restarts: IntCounter,
    /// Slice records in the router's producer queue, not yet acknowledged.
    pub router_producer_queue: IntGauge,
    /// Bytes librdkafka has fetched ahead for the slice consumer.
    pub consumer_queue_bytes: IntGauge,
    /// The allocator's own account of the heap (`HEAP_KINDS`), read when scraped.
    pub heap_bytes: IntGaugeVec,
    /// The limit the memory budget divides (0: none), set at start-up.
    pub memory_limit: IntGauge,
    /// The process's resident set, read when scraped.
    pub resident_memory: IntGauge,
    pub end_to_end_latency: Histogram,
    /// Record timestamp → each stage of the pipeline (`STAGES`).
    pub stage_latency: HistogramVec,
}

/// What the process's allocator says of its heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes in live allocations (Rust's and librdkafka's alike).
    pub allocated: u64,
    /// Bytes of the allocator's pages in memory: `allocated`, plus what it
    /// keeps (freed but not yet returned, partly used pages, its metadata).
    pub resident: u64,
}

/// The `kind` labels of `dedupd_heap_bytes`.
pub const HEAP_KINDS: [&str; 2] = ["allocated", "resident"];

/// Where [`Metrics::render`] reads [`HeapStats`]: set by the `dedupd` binary
/// (jemalloc's statistics, `src/main.rs`). The library does not choose the
/// allocator, so without it the gauges stay 0.
static HEAP_SOURCE: std::sync::OnceLock<fn() -> Option<HeapStats>> = std::sync::OnceLock::new();

/// Sets where the heap gauges come from (once per process; later calls are ignored).
pub fn set_heap_source(source: fn() -> Option<HeapStats>) {
    let _ = HEAP_SOURCE.set(source);
}

/// The process's resident memory in bytes: `VmRSS` of `/proc/self/status`
/// (what a container's memory limit mostly counts); `None` where there is none.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_rss(&status)
}

/// `VmRSS:   1234 kB` → bytes.
fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// The stages of `dedupd_stage_latency_seconds`, in pipeline order.
pub const STAGES: [&str; 4] = ["router_received", "router_sent", "router_acked", "slice_received"];

struct Builder<'a>(&'a Registry);

impl Builder<'_> {
    fn register<M: prometheus::core::Collector + Clone + 'static>(&self, m: M) -> M {
        self.0.register(Box::new(m.clone())).expect("unique metric");
        m
    }
    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    fn int_gauge(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        self.register(GaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        self.register(Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid metric"))
    }
}

/// Latency buckets from 1 ms to ~2 min.
fn seconds_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 18).expect("valid buckets")
}

/// Buckets from 0.5 ms to ~4 min, for stages and stalls measured in milliseconds.
fn fine_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0005, 2.0, 20).expect("valid buckets")
}

impl Metrics {
    /// All metrics; `hashes` (k) sets the equal-timers histogram's buckets 1..=k.
    pub fn new(hashes: u32) -> Self {
        let registry = Registry::new();
        let b = Builder(&registry);
        let build_info = b.int_gauge("dedupd_build_info", "1, labelled with the dedupd version.", &["version"]);
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let m = Metrics {
            input_records: b.counter("dedupd_input_records_total", "Input records read, by topic.", &["topic"]),
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
            saturated_inserts: b.counter(
                "dedupd_filter_saturated_inserts_total",
                "Inserts into a full newest generation at the generation cap.",
                &["slice"],
            ),
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
            held_bytes_flushes: b.counter(
                "dedupd_held_bytes_flushes_total",
                "Flushes (logged, as idle flushes) because the slice held more than slicing.max_held_bytes.",
                &["slice"],
            ),
            memory_budget: b.int_gauge(
                "dedupd_memory_budget_bytes",
                "Bytes of the memory budget's part (memory.limit, or the container's limit, divided at start-up; \
                 without a limit each buffer's own bound).",
                &["part"],
            ),
            memory_cap: b.register(
                IntGauge::new(
                    "dedupd_memory_cap_bytes",
                    "The cap on all slices' filters together (filter.max_memory, or half the memory limit); \
                     0: no cap.",
                )
                .expect("valid metric"),
            ),
            filter_worst_case: b.register(
                IntGauge::new(
                    "dedupd_filter_worst_case_bytes",
                    "All slices' filters at their largest: every slice at the generation count the cap allows.",
                )
                .expect("valid metric"),
            ),
            slice_log_gaps: b.counter(
                "dedupd_slice_log_gaps_total",
                "Records of the slice log read past offsets not read yet: waited (the slice read its partition \
                 again until they came) or skipped (still missing after 30 s).",
                &["slice", "outcome"],
            ),
            idle_flushes: b.counter(
                "dedupd_idle_flushes_total",
                "Idle flushes: the slice received nothing for input.lateness and judged the records it held.",
                &["slice"],
            ),
            policy_decisions: b.counter(
                "dedupd_policy_decisions_total",
                "Records decided by availability.policy (deliver or drop) while their slice was being restored, \
                 replays included.",
                &["slice", "policy"],
            ),
            hold_overflows: b.counter(
                "dedupd_hold_overflows_total",
                "Releases past an input partition nobody routed, because the slice held more than slicing.max_held \
                 records.",
                &["slice"],
            ),
            input_missing: b.register(
                IntCounter::new(
                    "dedupd_input_missing_records_total",
                    "Shared mode: input records named by a read-order record that are gone from the input \
                     (retention) when the slice reads them; not judged.",
                )
                .expect("valid metric"),
            ),
            rebalances: b.counter("dedupd_rebalances_total", "Group rebalance events of the slice workers.", &["kind"]),
            schema_registry_errors: b.counter(
                "dedupd_schema_registry_errors_total",
                "Failed schema registry requests, by kind: faults the record waits out, and not_found.",
                &["kind"],
            ),
            slices_owned: b
                .register(IntGauge::new("dedupd_slices_owned", "Slices this process owns.").expect("valid metric")),
            broker_silence: b.register(
                prometheus::Gauge::new(
                    "dedupd_broker_silence_seconds",
                    "Seconds since the slice consumer last received anything from a broker.",
                )
                .expect("valid metric"),
            ),
            consumer_lag: b.int_gauge("dedupd_consumer_lag", "Records of the slice log not yet processed.", &["slice"]),
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
            producer_queue: b.register(
                IntGauge::new("dedupd_producer_queue_messages", "Messages in the output producer's queue.")
                    .expect("valid metric"),
            ),
            router_buffered: b.register(
                IntGauge::new(
                    "dedupd_router_buffered_records",
                    "Input records the router holds to send them in event-time order.",
                )
                .expect("valid metric"),
            ),
            router_buffered_bytes: b.register(
                IntGauge::new(
                    "dedupd_router_buffered_bytes",
                    "Bytes (keys and values) of the input records the router holds.",
                )
                .expect("valid metric"),
            ),
            router_byte_pauses: b.register(
                IntCounter::new(
                    "dedupd_router_byte_pauses_total",
                    "Input partitions paused because the router held slicing.max_buffered_bytes of their records.",
                )
                .expect("valid metric"),
            ),
            router_restarts: b.register(
                IntCounter::new(
                    "dedupd_router_restarts_total",
                    "Times the router started again, with a new producer, after its producer failed.",
                )
                .expect("valid metric"),
            ),
            router_producer_queue: b.register(
                IntGauge::new(
                    "dedupd_router_producer_queue_messages",
                    "Slice records in the router's producer queue, not yet acknowledged.",
                )
                .expect("valid metric"),
            ),
            consumer_queue_bytes: b.register(
                IntGauge::new(
                    "dedupd_consumer_queue_bytes",
                    "Bytes librdkafka has fetched ahead for the slice consumer.",
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
                IntGauge::new("dedupd_resident_memory_bytes", "The process's resident memory (VmRSS), read when scraped.")
                    .expect("valid metric"),
            ),
            end_to_end_latency: b.histogram(
                "dedupd_end_to_end_latency_seconds",
                "Record timestamp to output acknowledged by the broker.",
                seconds_buckets(),
            ),
            stage_latency: b.register(
                HistogramVec::new(
                    HistogramOpts::new(
                        "dedupd_stage_latency_seconds",
                        "Record timestamp to each stage: router_received, router_sent, router_acked, slice_received.",
                    )
                    .buckets(fine_buckets()),
                    &["stage"],
                )
                .expect("valid metric"),
            ),
            build_info,
            registry,
        };
        m.slices_owned.set(0);
        m.producer_queue.set(0);
        m.router_buffered.set(0);
        m.router_buffered_bytes.set(0);
        m.router_producer_queue.set(0);
        m.consumer_queue_bytes.set(0);
        m.memory_limit.set(0);
        m.resident_memory.set(0);
        for kind in HEAP_KINDS {
            m.heap_bytes.with_label_values(&[kind]);
        }
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
        for source in ["snapshot", "empty", "corrupt"] {
            m.restores.with_label_values(&[source]);
        }
        for reason in crate::kafka::checkpoint::Rejection::ALL {
            m.checkpoint_rejected.with_label_values(&[reason.as_str()]);
        }
        for kind in ["assign", "revoke"] {
            m.rebalances.with_label_values(&[kind]);
        }
        for kind in crate::schema_registry::ERROR_KINDS {
            m.schema_registry_errors.with_label_values(&[kind]);
        }
        for stage in STAGES {
            m.stage_latency.with_label_values(&[stage]);
        }
        m
    }

    /// Creates a slice's series when the slice is assigned.
    pub fn init_slice(&self, slice: u32) {
        let label = slice.to_string();
        for result in ["distinct", "duplicate", "invalid", "resend"] {
            self.records.with_label_values(&[&label, result]);
        }
        for policy in ["deliver", "drop"] {
            self.policy_decisions.with_label_values(&[&label, policy]);
        }
        for outcome in ["waited", "skipped"] {
            self.slice_log_gaps.with_label_values(&[&label, outcome]);
        }
        for counter in [
            &self.replayed,
            &self.late_records,
            &self.idle_flushes,
            &self.held_bytes_flushes,
            &self.hold_overflows,
            &self.checkpoints,
            &self.checkpoint_failures,
            &self.checkpoint_dropped,
            &self.generations_created,
            &self.generations_dropped,
            &self.saturated_inserts,
            &self.provenance_dropped,
            &self.limited,
            &self.flagged,
        ] {
            counter.with_label_values(&[&label]);
        }
    }

    /// Forgets a slice's per-slice gauges (after it is released).
    pub fn forget_slice(&self, slice: u32) {
        let label = slice.to_string();
        let _ = self.filter_density.remove_label_values(&[&label]);
        let _ = self.filter_generations.remove_label_values(&[&label]);
        let _ = self.filter_memory_bytes.remove_label_values(&[&label]);
        let _ = self.filter_memory_bytes_peak.remove_label_values(&[&label]);
        let _ = self.filter_estimated_fpr.remove_label_values(&[&label]);
        let _ = self.limit_false_positive.remove_label_values(&[&label]);
        let _ = self.provenance_sources.remove_label_values(&[&label]);
        let _ = self.checkpoint_bytes.remove_label_values(&[&label]);
        let _ = self.checkpoint_age.remove_label_values(&[&label]);
        let _ = self.consumer_lag.remove_label_values(&[&label]);
        let _ = self.waiting_records.remove_label_values(&[&label]);
        let _ = self.held_bytes.remove_label_values(&[&label]);
    }

    /// The counter of input records of `topic` (cache it on hot paths).
    pub fn input_counter(&self, topic: &str) -> IntCounter {
        self.input_records.with_label_values(&[topic])
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        if let Some(heap) = HEAP_SOURCE.get().and_then(|source| source()) {
            for (kind, bytes) in HEAP_KINDS.iter().zip([heap.allocated, heap.resident]) {
                self.heap_bytes.with_label_values(&[kind]).set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
        }
        if let Some(bytes) = resident_bytes() {
            self.resident_memory.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        // The client counts in plain atomics (it has no handle on these
        // metrics); the counters catch up here.
        for (kind, n) in crate::schema_registry::ERROR_KINDS.iter().zip(crate::schema_registry::errors()) {
            let counter = self.schema_registry_errors.with_label_values(&[kind]);
            counter.inc_by(n.saturating_sub(counter.get()));
        }
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding");
        String::from_utf8(out).expect("text exposition is UTF-8")
    }
}

/// Counters summed over their labels, and gauges now: what the periodic log
/// summary reports (differences of two `Totals` for the counters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub input: u64,
    pub distinct: u64,
    pub duplicates: u64,
    pub invalid: u64,
    pub resends: u64,
    pub late: u64,
    /// By reason.
    pub dead_letters: std::collections::BTreeMap<String, u64>,
    pub lag: i64,
    pub waiting: i64,
    pub slices_owned: i64,
}

/// Each series of `metric` as (its labels, its value).
fn series<M: prometheus::core::Collector>(metric: &M) -> Vec<(Vec<(String, String)>, f64)> {
    let mut out = Vec::new();
    for family in metric.collect() {
        for m in family.get_metric() {
            let labels = m.get_label().iter().map(|l| (l.name().to_string(), l.value().to_string())).collect();
            let value = match family.get_field_type() {
                prometheus::proto::MetricType::GAUGE => m.get_gauge().get_value(),
                _ => m.get_counter().get_value(),
            };
            out.push((labels, value));
        }
    }
    out
}

/// The sum of every series of `metric`.
fn total<M: prometheus::core::Collector>(metric: &M) -> f64 {
    series(metric).iter().map(|(_, v)| v).sum()
}

impl Metrics {
    /// The totals now (reads every series of a few metrics: for a summary
    /// every minute, not for hot paths).
    pub fn totals(&self) -> Totals {
        let by_result = |result: &str| {
            series(&self.records)
                .iter()
                .filter(|(labels, _)| labels.iter().any(|(n, v)| n == "result" && v == result))
                .map(|(_, v)| *v as u64)
                .sum()
        };
        let dead_letters = series(&self.dead_letters)
            .into_iter()
            .filter_map(|(labels, v)| labels.into_iter().find(|(n, _)| n == "reason").map(|(_, r)| (r, v as u64)))
            .collect();
        Totals {
            input: total(&self.input_records) as u64,
            distinct: by_result("distinct"),
            duplicates: by_result("duplicate"),
            invalid: by_result("invalid"),
            resends: by_result("resend"),
            late: total(&self.late_records) as u64,
            dead_letters,
            lag: total(&self.consumer_lag) as i64,
            waiting: total(&self.waiting_records) as i64,
            slices_owned: self.slices_owned.get(),
        }
    }
}

/// The histogram of one stage of `dedupd_stage_latency_seconds` (cache it on hot paths).
impl Metrics {
    pub fn stage(&self, stage: &str) -> Histogram {
        self.stage_latency.with_label_values(&[stage])
    }
}

/// Milliseconds since the epoch by the wall clock (latency metrics only:
/// verdicts never read the wall clock).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Observes `now - timestamp_ms` (clamped at 0) in seconds.
pub fn observe_since(h: &impl Observer, timestamp_ms: Option<i64>, now_ms: i64) {
    if let Some(ts) = timestamp_ms {
        h.record((now_ms - ts).max(0) as f64 / 1000.0);
    }
}

/// A histogram observations go into: a shared one, or a loop's local copy
/// (`Histogram::local`), which its loop flushes once per turn — no atomic
/// operations per record.
pub trait Observer {
    fn record(&self, value: f64);
}

impl Observer for Histogram {
    fn record(&self, value: f64) {
        self.observe(value);
    }
}

impl Observer for prometheus::local::LocalHistogram {
    fn record(&self, value: f64) {
        self.observe(value);
    }
}

/// Seconds as a Prometheus histogram observation.
pub fn observe_duration(h: &Histogram, d: std::time::Duration) {
    h.observe(d.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_set_is_read_from_proc() {
        assert_eq!(vm_rss("Name:\tdedupd\nVmHWM:\t  9000 kB\nVmRSS:\t  8192 kB\nRssAnon: 1 kB\n"), Some(8 << 20));
        assert_eq!(vm_rss("Name:\tkthreadd\n"), None);
        if cfg!(target_os = "linux") {
            let metrics = Metrics::new(3);
            metrics.render();
            assert!(metrics.resident_memory.get() > 1 << 20, "{}", metrics.resident_memory.get());
        }
    }
}
