//! Prometheus metrics. Names start with `dedupd_`; labels are bounded (slice,
//! result, reason, topic) — never keys. Hot paths count in plain integers
//! (slice counters live in the slice state); the workers publish the deltas
//! here periodically.

use prometheus::{Encoder, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    /// Verdicts by slice and result (`distinct`, `duplicate`, `invalid`, `resend`).
    pub records: IntCounterVec,
    /// Records replayed silently after a restore, by slice.
    pub replayed: IntCounterVec,
    /// Dead-lettered records by reason.
    pub dead_letters: IntCounterVec,
    /// Records the router read, by input topic.
    pub router_records: IntCounterVec,
    /// Snapshots written, by slice.
    pub checkpoints: IntCounterVec,
    /// Snapshot writes that failed, by slice.
    pub checkpoint_failures: IntCounterVec,
    /// Slice restores by where the state came from (`snapshot`, `empty`, `corrupt`).
    pub restores: IntCounterVec,
    /// Slices this process owns.
    pub slices_owned: IntGauge,
    /// Build information (value 1).
    pub build_info: IntGaugeVec,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry.register(Box::new(c.clone())).expect("unique metric");
    c
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let slices_owned = IntGauge::new("dedupd_slices_owned", "Slices this process owns.").expect("valid metric");
        registry.register(Box::new(slices_owned.clone())).expect("unique metric");
        let build_info = IntGaugeVec::new(Opts::new("dedupd_build_info", "Build information (value 1)."), &["version"])
            .expect("valid metric");
        registry.register(Box::new(build_info.clone())).expect("unique metric");
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Metrics {
            records: counter(
                &registry,
                "dedupd_records_total",
                "Slice verdicts by slice and result.",
                &["slice", "result"],
            ),
            replayed: counter(
                &registry,
                "dedupd_replayed_records_total",
                "Records replayed silently after a restore.",
                &["slice"],
            ),
            dead_letters: counter(
                &registry,
                "dedupd_dead_letters_total",
                "Records sent to the dead-letter topic, by reason.",
                &["reason"],
            ),
            router_records: counter(
                &registry,
                "dedupd_router_records_total",
                "Input records the router read, by topic.",
                &["topic"],
            ),
            checkpoints: counter(&registry, "dedupd_checkpoints_total", "Slice snapshots written.", &["slice"]),
            checkpoint_failures: counter(
                &registry,
                "dedupd_checkpoint_failures_total",
                "Slice snapshot writes that failed.",
                &["slice"],
            ),
            restores: counter(
                &registry,
                "dedupd_restores_total",
                "Slice restores by source of the state.",
                &["source"],
            ),
            slices_owned,
            build_info,
            registry,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding");
        String::from_utf8(out).expect("text exposition is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
