//! Prometheus metrics, one registry per process; `docs/metrics.md` lists
//! them (a test keeps the two in step). Names start with `dedupd_`; labels
//! are bounded (slice, result, reason, topic, source, kind) — never keys.
//! Hot paths count in plain integers (the slice state's counters) and the
//! workers publish deltas and gauges every few hundred milliseconds.

use prometheus::{Encoder, Histogram, IntCounter, IntGaugeVec, Registry, TextEncoder};

mod build;
mod records;
mod state;
mod transport;

use build::Builder;
pub use records::{FeatureMetrics, HoldMetrics, InputMetrics, VerdictMetrics};
pub use state::{CheckpointMetrics, FilterMetrics, MemoryMetrics, RestoreMetrics};
pub use transport::{OutputMetrics, RouterMetrics, SliceMetrics};

/// Every metric the daemon exports, in groups by concern.
pub struct Metrics {
    registry: Registry,
    pub build_info: IntGaugeVec,
    pub input: InputMetrics,
    pub verdicts: VerdictMetrics,
    pub features: FeatureMetrics,
    pub hold: HoldMetrics,
    pub filter: FilterMetrics,
    pub checkpoint: CheckpointMetrics,
    pub restore: RestoreMetrics,
    pub memory: MemoryMetrics,
    pub slices: SliceMetrics,
    pub router: RouterMetrics,
    pub output: OutputMetrics,
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

impl Metrics {
    /// All metrics; `hashes` (k) sets the equal-timers histogram's buckets 1..=k.
    pub fn new(hashes: u32) -> Self {
        let registry = Registry::new();
        let b = Builder(&registry);
        let build_info = b.int_gauge("dedupd_build_info", "1, labelled with the dedupd version.", &["version"]);
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Metrics {
            input: InputMetrics::new(&b),
            verdicts: VerdictMetrics::new(&b, hashes),
            features: FeatureMetrics::new(&b),
            hold: HoldMetrics::new(&b),
            filter: FilterMetrics::new(&b),
            checkpoint: CheckpointMetrics::new(&b),
            restore: RestoreMetrics::new(&b),
            memory: MemoryMetrics::new(&b),
            slices: SliceMetrics::new(&b),
            router: RouterMetrics::new(&b),
            output: OutputMetrics::new(&b),
            build_info,
            registry,
        }
    }

    /// Creates a slice's series when the slice is assigned.
    pub fn init_slice(&self, slice: u32) {
        let label = slice.to_string();
        for result in ["distinct", "duplicate", "invalid", "resend"] {
            self.verdicts.records.with_label_values(&[&label, result]);
        }
        for policy in ["deliver", "drop"] {
            self.restore.policy_decisions.with_label_values(&[&label, policy]);
        }
        for outcome in ["waited", "skipped"] {
            self.slices.slice_log_gaps.with_label_values(&[&label, outcome]);
        }
        for counter in [
            &self.restore.replayed,
            &self.verdicts.late_records,
            &self.hold.idle_flushes,
            &self.hold.held_bytes_flushes,
            &self.hold.hold_overflows,
            &self.checkpoint.checkpoints,
            &self.checkpoint.checkpoint_failures,
            &self.checkpoint.checkpoint_dropped,
            &self.filter.generations_created,
            &self.filter.generations_dropped,
            &self.filter.saturated_inserts,
            &self.features.provenance_dropped,
            &self.features.limited,
            &self.features.flagged,
        ] {
            counter.with_label_values(&[&label]);
        }
    }

    /// Forgets a slice's per-slice gauges (after it is released).
    pub fn forget_slice(&self, slice: u32) {
        let label = slice.to_string();
        let _ = self.filter.filter_density.remove_label_values(&[&label]);
        let _ = self.filter.filter_generations.remove_label_values(&[&label]);
        let _ = self.filter.filter_memory_bytes.remove_label_values(&[&label]);
        let _ = self.filter.filter_memory_bytes_peak.remove_label_values(&[&label]);
        let _ = self.filter.filter_estimated_fpr.remove_label_values(&[&label]);
        let _ = self.features.limit_false_positive.remove_label_values(&[&label]);
        let _ = self.features.provenance_sources.remove_label_values(&[&label]);
        let _ = self.checkpoint.checkpoint_bytes.remove_label_values(&[&label]);
        let _ = self.checkpoint.checkpoint_age.remove_label_values(&[&label]);
        let _ = self.slices.consumer_lag.remove_label_values(&[&label]);
        let _ = self.hold.waiting_records.remove_label_values(&[&label]);
        let _ = self.hold.held_bytes.remove_label_values(&[&label]);
    }

    /// The counter of input records of `topic` (cache it on hot paths).
    pub fn input_counter(&self, topic: &str) -> IntCounter {
        self.input.input_records.with_label_values(&[topic])
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        if let Some(heap) = HEAP_SOURCE.get().and_then(|source| source()) {
            for (kind, bytes) in HEAP_KINDS.iter().zip([heap.allocated, heap.resident]) {
                self.memory.heap_bytes.with_label_values(&[kind]).set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
        }
        if let Some(bytes) = resident_bytes() {
            self.memory.resident_memory.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        // The client counts in plain atomics (it has no handle on these
        // metrics); the counters catch up here.
        for (kind, n) in crate::schema_registry::ERROR_KINDS.iter().zip(crate::schema_registry::errors()) {
            let counter = self.input.schema_registry_errors.with_label_values(&[kind]);
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
            series(&self.verdicts.records)
                .iter()
                .filter(|(labels, _)| labels.iter().any(|(n, v)| n == "result" && v == result))
                .map(|(_, v)| *v as u64)
                .sum()
        };
        let dead_letters = series(&self.verdicts.dead_letters)
            .into_iter()
            .filter_map(|(labels, v)| labels.into_iter().find(|(n, _)| n == "reason").map(|(_, r)| (r, v as u64)))
            .collect();
        Totals {
            input: total(&self.input.input_records) as u64,
            distinct: by_result("distinct"),
            duplicates: by_result("duplicate"),
            invalid: by_result("invalid"),
            resends: by_result("resend"),
            late: total(&self.verdicts.late_records) as u64,
            dead_letters,
            lag: total(&self.slices.consumer_lag) as i64,
            waiting: total(&self.hold.waiting_records) as i64,
            slices_owned: self.slices.slices_owned.get(),
        }
    }
}

/// The histogram of one stage of `dedupd_stage_latency_seconds` (cache it on hot paths).
impl Metrics {
    pub fn stage(&self, stage: &str) -> Histogram {
        self.output.stage_latency.with_label_values(&[stage])
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
            assert!(metrics.memory.resident_memory.get() > 1 << 20, "{}", metrics.memory.resident_memory.get());
        }
    }
}
