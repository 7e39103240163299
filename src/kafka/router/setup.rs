//! What the router is started with.

use std::sync::Arc;

use crate::config::Resolved;
use crate::engine::Extractor;
use crate::features::shared::handoff::Handoff;
use crate::kafka::producer::OutputProducer;
use crate::metrics::Metrics;

/// What the router needs.
pub struct RouterSetup {
    pub cfg: Resolved,
    /// What the router reads: the dedup key, or the count key it routes by.
    pub extractor: Extractor,
    /// `extractor` reads the dedup key (not a count key), so its reading
    /// is the slices' own and travels in the frame ([`crate::engine::Reading`]).
    pub hands_on_reading: bool,
    /// `extractor`'s key is (or has a part) read from a header: only then
    /// does the router ask for a record's headers (librdkafka parses them
    /// on each ask). Decided once, at start-up.
    pub key_reads_headers: bool,
    pub slices: u32,
    /// `<app.id>.slices`.
    pub slice_topic: String,
    pub seed: u64,
    /// Counts the slice topic and the dead-letter topic, partitions `0..slices`.
    pub producer: OutputProducer,
    pub metrics: Arc<Metrics>,
    /// Shared mode: the pages of the records it names, for the slice of
    /// this process (`features/shared/handoff.rs`).
    pub handoff: Option<Arc<Handoff>>,
}

/// An input partition: topic and partition.
pub(super) type PartitionId = (String, i32);
