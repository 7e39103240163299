//! What the slice worker is started with: the resolved settings, the
//! clients and the metrics, read-only once the worker runs.

use std::sync::Arc;
use std::time::Duration;

use crate::admin::Status;
use crate::config::Resolved;
use crate::engine::Extractor;
use crate::engine::slice::stages::StageSetups;
use crate::features::feature::{AppliedFn, OnDistinct};
use crate::features::shared::handoff::Handoff;
use crate::filter::FilterChoice;
use crate::kafka::checkpoint::CheckpointStore;
use crate::kafka::clients;
use crate::kafka::producer::OutputProducer;
use crate::kafka::restore::Decision;
use crate::kafka::slice_log::Holds;
use crate::metrics::Metrics;

/// What the slice worker is started with: the resolved settings, the
/// clients and the metrics (built by `dedupd run`, read-only afterwards).
pub struct WorkerSetup {
    pub cfg: Resolved,
    pub filter: FilterChoice,
    pub extractor: Extractor,
    /// The stages the slices run (every feature's, on or off).
    pub stages: StageSetups,
    /// Whether the router routes records by their dedup key (else by a
    /// count key): then, in repartition mode, a dedup key's slice is known.
    pub routes_by_dedup_key: bool,
    pub slice_topic: String,
    /// The idle flush log, partition = slice.
    pub flush_topic: String,
    pub producer: OutputProducer,
    pub store: CheckpointStore,
    pub reader: clients::Reader,
    pub metrics: Arc<Metrics>,
    pub status: Arc<Status>,
    /// Counts input records when the slice log is the input (input-partitions mode).
    pub input_counter: Option<prometheus::IntCounter>,
    /// The features' part in the outputs of every distinct judgment.
    pub on_distinct: Option<Box<dyn OnDistinct>>,
    /// Where the slice posts the outcome of a request of the slice log it
    /// applied (a feature's key action, set once the worker runs).
    pub requests_applied: std::sync::OnceLock<AppliedFn>,
    /// How large a record each topic a slice writes takes (read at start-up).
    pub record_limits: crate::kafka::size_limits::RecordLimits,
    /// What the per-record path needs of the settings, chosen once.
    pub path: RecordPath,
    /// Shared mode: the pages of input records the router of this process
    /// hands over (`features/shared/handoff.rs`).
    pub handoff: Option<Arc<Handoff>>,
}

/// What the per-record path (`records.rs`, `emit.rs`, `policy.rs`) needs
/// of the settings, resolved once at start-up: those files read no setting.
pub struct RecordPath {
    /// How a slice-log record holds its input record.
    pub log_format: Holds,
    /// The topics a slice writes (empty: not written).
    pub output: String,
    pub duplicates: String,
    pub dead_letters: String,
    pub late: String,
    pub flags: String,
    /// `app.id`, which every record a slice writes names ([`crate::kafka::headers::APP`]).
    pub app: String,
    /// A header every output record carries (a dense leaf's `app.id`, to
    /// its parent: docs/tiers.md).
    pub output_header: Option<(&'static str, String)>,
    /// What a slice's records get while it is restored: decided so, in
    /// policy ranges, or `None` (they wait for the restore).
    pub while_restoring: Option<Decision>,
    /// How long a slice holding records for the watermark hears nothing
    /// before its idle flush: the lateness, at least 100 ms.
    pub idle_after: Duration,
    /// `slicing.max_held_bytes` or its part of the memory budget: past it a
    /// slice flushes what it holds.
    pub max_held_bytes: u64,
}

impl RecordPath {
    pub fn of(
        cfg: &Resolved,
        output_header: Option<(&'static str, String)>,
        while_restoring: Option<Decision>,
    ) -> Self {
        let out = &cfg.settings.output;
        RecordPath {
            log_format: Holds::of(cfg.slicing, cfg.slice_log_format),
            output: out.topic.clone(),
            duplicates: out.duplicates_topic.clone(),
            dead_letters: out.dead_letter_topic.clone(),
            late: out.late_topic.clone(),
            flags: cfg.settings.flag.topic.clone(),
            app: cfg.settings.app.id.clone(),
            output_header,
            while_restoring,
            idle_after: Duration::from_millis(cfg.order.lateness_ms.max(100)),
            max_held_bytes: cfg.budget.held_per_slice,
        }
    }
}

impl WorkerSetup {
    /// The slice offset of the slice-log record at `log_offset` that is not
    /// a read-order record ([`Holds::slice_position`]).
    pub(super) fn slice_position(&self, log_offset: u64) -> u64 {
        self.path.log_format.slice_position(log_offset)
    }

    /// Where in the slice log a slice at slice offset `offset` goes on from
    /// ([`Holds::log_position`]).
    pub(super) fn log_position(&self, offset: u64) -> u64 {
        self.path.log_format.log_position(offset)
    }

    /// The slice-log offset after the records a slice at slice offset
    /// `offset` has taken in ([`Holds::log_end`]).
    pub(super) fn log_end(&self, offset: u64) -> u64 {
        self.path.log_format.log_end(offset)
    }
}
