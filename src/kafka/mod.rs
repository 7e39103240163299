//! The Kafka side of the daemon. The engine decides; this layer moves
//! records and state and keeps invariant 5 (exactly-once output without
//! broker transactions).
//!
//! - [`clients`]: librdkafka settings shared by every client, and how
//!   their error events are logged.
//! - [`consumed`]: a consumed record as the record path reads it, taken
//!   off a queue one at a time or a batch at a time.
//! - [`headerless`]: a consumed record without headers told apart without
//!   librdkafka's header parse.
//! - [`join`]: logs a group consumer's wait for its assignment.
//! - [`statistics`]: what librdkafka's statistics say (broker contact,
//!   end offsets, the input lag).
//! - [`lag_seconds`]: the input lag in seconds of record time.
//! - [`topics`]: creates the topics dedupd owns and checks the output topic.
//! - [`headers`]: the header names dedupd writes and reads.
//! - [`size_limits`]: the record-size limit of each topic a slice writes, and a
//!   record's size as the broker counts it.
//! - [`held_record`]: an input record a slice holds for the watermark, owned.
//! - [`out_record`]: a record as a judgment's copies see it, borrowed or held.
//! - [`producer`]: delivery watching (a poll thread of its own serves the
//!   delivery reports) and copying records between topics.
//! - [`topic_handles`]: librdkafka handles of the topics a producer writes,
//!   made once, and a send through one.
//! - [`checkpoint`]: chunked slice snapshots and their manifests in the
//!   compacted checkpoint topic.
//! - [`replay`]: how far each topic a slice writes holds its records (the
//!   replay bound of each).
//! - [`restore`]: where a slice resumes: newest valid snapshot `X`, each
//!   topic's replay bound `Y`, replay from `X` writing nothing twice.
//! - [`slice_log`]: how a slice-log record holds its input record (read by
//!   the workers and by the restore's replay).
//! - [`worker`]: the slice workers: group consumer, rebalances, restores,
//!   snapshots, the per-record path and output (its own map is in
//!   `worker/mod.rs`).
//! - [`merge`]: `dedupd checkpoint merge`: the snapshots of fewer slices
//!   merged into those of a new `filter.slices`.
//! - [`router`]: repartition mode's input → `<app>.slices` stage (shared
//!   mode: it writes the order it read records in, not the records).

pub mod checkpoint;
pub mod clients;
pub mod consumed;
pub mod headerless;
pub mod headers;
pub mod held_record;
pub mod join;
pub mod lag_seconds;
pub mod merge;
pub mod out_record;
pub mod producer;
pub mod replay;
pub mod restore;
pub mod router;
pub mod size_limits;
pub mod slice_log;
pub mod statistics;
pub mod topic_handles;
pub mod topics;
pub mod worker;

/// The bytes a record held in memory counts against its part of the
/// memory budget: its key, value and headers (`headers`: names and values).
pub fn record_bytes(msg: &impl rdkafka::Message, headers: out_record::OutHeaders<'_>) -> usize {
    let headers: usize = headers.lens().map(|(name, value)| name + value).sum();
    msg.key().map_or(0, <[u8]>::len) + msg.payload().map_or(0, <[u8]>::len) + headers
}

/// Names the calling thread (as `top -H`, `perf` and `/proc/PID/task/*/comm`
/// show it; at most 15 bytes), so the CPU of each stage can be told apart.
pub fn name_thread(name: &str) {
    #[cfg(target_os = "linux")]
    if let Ok(name) = std::ffi::CString::new(name.as_bytes()[..name.len().min(15)].to_vec()) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which `name` is.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}

/// Errors of the Kafka layer.
#[derive(Debug, thiserror::Error)]
pub enum KafkaLayerError {
    #[error("kafka: {context}: {source}")]
    Client {
        context: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A topic dedupd needs is missing, or does not fit the settings
    /// (partitions, names, record-size limits).
    #[error("{0}")]
    Topics(String),
    /// A setting only the broker's answer shows to be invalid.
    #[error("{0}")]
    Settings(String),
    /// A failure the worker cannot go on from: a record the broker refused,
    /// an error in a rebalance callback; the process stops, its replacement
    /// resumes from the last snapshot.
    #[error("{0}")]
    Fatal(String),
    /// A topic dedupd writes holds a record dedupd did not write.
    #[error("{0}")]
    ForeignRecord(String),
    /// `dedupd checkpoint merge` cannot merge these snapshots.
    #[error("{0}")]
    Merge(String),
    /// The worker's own bookkeeping lacks what it should hold (a bug).
    #[error("{0}")]
    Internal(String),
    #[error("checkpoint of slice {slice}: {detail}")]
    Checkpoint { slice: u32, detail: String },
    #[error("timed out: {0}")]
    Timeout(String),
}

/// Adds context to an rdkafka result.
pub(crate) trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, KafkaLayerError>;
}

impl<T> Context<T> for Result<T, rdkafka::error::KafkaError> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, KafkaLayerError> {
        self.map_err(|source| KafkaLayerError::Client {
            context: clients::with_connection_failure(what(), &source),
            source,
        })
    }
}
