//! What the slice worker is started with: the resolved settings, the
//! clients and the metrics, read-only once the worker runs.

use std::sync::Arc;

use crate::admin::Status;
use crate::config::{Resolved, SlicingMode};
use crate::engine::{Extractor, read_order};
use crate::filter::FilterParams;
use crate::kafka::checkpoint::CheckpointStore;
use crate::kafka::clients;
use crate::kafka::producer::OutputProducer;
use crate::metrics::Metrics;

/// What the slice worker is started with: the resolved settings, the
/// clients and the metrics (built by `dedupd run`, read-only afterwards).
pub struct WorkerSetup {
    pub cfg: Resolved,
    pub params: FilterParams,
    pub extractor: Extractor,
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
    /// A sparse tree's root publishes a verdict for every delivery (docs/tiers.md).
    pub verdicts: Option<crate::kafka::tier::RootVerdicts>,
    /// How large a record each topic a slice writes takes (read at start-up).
    pub limits: crate::kafka::limits::RecordLimits,
}

impl WorkerSetup {
    /// The slice offset — in shared mode the virtual position
    /// ([`read_order::position`]) — of the slice-log record at `log_offset`
    /// that is not a read-order record.
    pub(super) fn slice_position(&self, log_offset: u64) -> u64 {
        match self.cfg.slicing {
            SlicingMode::Shared => read_order::position(log_offset, 0),
            _ => log_offset,
        }
    }

    /// Where in the slice log a slice at slice offset `offset` goes on from
    /// (the inverse of [`Self::slice_position`]; in shared mode the read-order record
    /// that names `offset`, whose records before it are passed over).
    pub(super) fn log_position(&self, offset: u64) -> u64 {
        match self.cfg.slicing {
            SlicingMode::Shared => read_order::log_offset(offset),
            _ => offset,
        }
    }
}
