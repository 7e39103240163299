//! The core sections — `[app]`, `[input]`, `[slicing]`, `[output]`,
//! `[checkpoint]`, `[topics]`, `[shutdown]`, `[log]` — and the values they
//! resolve to. Their rules are in `validate.rs`.

use serde::Deserialize;

use super::values::{duration_ms, optional_bytes, optional_duration_ms};

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AppSettings {
    /// Consumer group of the slice workers, and prefix of the internal topics.
    pub id: String,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct InputSettings {
    /// Topics to deduplicate.
    pub topics: Vec<String>,
    /// Where reading starts for an input partition this application has no
    /// position in yet (no committed offset, no snapshot): `earliest` (the
    /// oldest retained record: nothing is skipped on a first deployment) or
    /// `latest` (only records written after the daemon starts). A position
    /// once kept is resumed whatever this says. librdkafka's
    /// `auto.offset.reset` in `[kafka]` must not contradict it.
    pub start: String,
    /// The dedup key: `record-key`, `json:/pointer`, `header:NAME` or `payload`.
    pub key: String,
    /// The event time: `record-timestamp` or `json:/pointer` (epoch ms, or
    /// another unit named at the end: `json:/ts:s`, `:us`, `:ns`; or RFC 3339 text).
    pub time: String,
    /// Records (key + payload) larger than this go to the dead-letter topic (`too_large`).
    pub max_record_bytes: usize,
    /// How far behind the largest event time a slice has seen a record may
    /// arrive and still be judged in event-time order: records wait until
    /// the watermark (largest time − lateness) passes them.
    #[serde(deserialize_with = "duration_ms")]
    pub lateness: u64,
    /// A record more than this far ahead of the largest time its slice has
    /// seen is held as a suspect; empty: the filter window.
    #[serde(deserialize_with = "optional_duration_ms")]
    pub max_clock_jump: Option<u64>,
    /// Suspects in a row that confirm a jump of the stream's time; a suspect
    /// not confirmed goes to the dead-letter topic (`time_jump`).
    pub jump_confirmations: u32,
    /// How payloads are written: `json`, or `avro` / `protobuf` / `json_schema` in the
    /// Confluent wire format (their fields named by `key` and `time` as
    /// `json:/a/b`).
    pub format: String,
    /// `avro` / `protobuf`: a directory of schema files by id (`<id>.avsc`,
    /// `<id>.proto`, `<id>.json`), read at start-up; empty: none.
    pub schemas: String,
    /// `avro` / `protobuf`: a schema registry (`http[s]://HOST[:PORT][/PATH]`)
    /// the ids `schemas` lacks are fetched from at first sight; empty: none.
    pub schema_registry: String,
    /// The basic-authentication user of `schema_registry`; empty: none.
    pub schema_registry_user: String,
    /// Its password (best from the environment,
    /// `DEDUPD__INPUT__SCHEMA_REGISTRY_PASSWORD`, out of a secret store).
    pub schema_registry_password: super::secret::Secret,
    /// Bearer authentication with `schema_registry` instead of a user: the
    /// token (from the environment, `DEDUPD__INPUT__SCHEMA_REGISTRY_TOKEN`).
    pub schema_registry_token: super::secret::Secret,
    /// PEM certificates of the CAs that sign an https registry's
    /// certificate, instead of the public ones; empty: the public ones.
    pub schema_registry_ca_file: String,
    /// Mutual TLS: the client's PEM certificate (chain) and private key;
    /// both or neither.
    pub schema_registry_cert_file: String,
    pub schema_registry_key_file: String,
}

/// `input.start`: where reading starts in an input partition the
/// application has no position in yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputStart {
    /// The oldest retained record.
    Earliest,
    /// The end: only records written from now on.
    Latest,
}

impl InputStart {
    /// The value of librdkafka's `auto.offset.reset` that means the same.
    pub fn as_str(self) -> &'static str {
        match self {
            InputStart::Earliest => "earliest",
            InputStart::Latest => "latest",
        }
    }

    /// What a librdkafka `auto.offset.reset` value means (its aliases
    /// included); `None` for `error`, which starts nowhere.
    pub(super) fn of_offset_reset(value: &str) -> Option<Self> {
        match value {
            "earliest" | "smallest" | "beginning" => Some(InputStart::Earliest),
            "latest" | "largest" | "end" => Some(InputStart::Latest),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlicingMode {
    /// Input records are re-keyed into `<app.id>.slices` by the router.
    Repartition,
    /// One input topic already partitioned by the dedup key: slice = input partition.
    InputPartitions,
    /// One slice judges every input partition with no copy of the records:
    /// the router writes only the order it read them in (read-order
    /// records, [`crate::kafka::slice_log::read_order`]) into `<app.id>.slices`, and
    /// the slice re-reads the records it names from the input
    /// (docs/shared-mode.md).
    Shared,
}

/// `slicing.log_format`: how the router's copies of input records are
/// written to the slice log in repartition mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceLogFormat {
    /// One slice-log record per input record.
    Records,
    /// One slice-log record per router turn and slice, holding its records
    /// ([`crate::kafka::slice_log::batch`]).
    Batches,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlicingSettings {
    /// `repartition`, `input-partitions` or `shared` (docs/shared-mode.md).
    pub mode: String,
    /// Repartition mode: `records` (one slice-log record per input record),
    /// `batches` (one per router turn and slice) or empty (`batches` where
    /// it can run, `records` elsewhere).
    pub log_format: String,
    /// The router's tolerance for timestamp disorder across input partitions
    /// (a duration; `0ms` is strict order).
    pub order_tolerance: String,
    /// Repartition mode: records a slice may hold back while an input
    /// partition nobody routes (its router died, the group has not handed
    /// it over yet) keeps its watermark; beyond this the slice releases as
    /// if the partition were not there, and counts it
    /// (`dedupd_hold_overflows_total`). 1 to 100 000 000.
    pub max_held: u64,
    /// Bytes of records (keys, values and headers) a slice may hold for the
    /// watermark: beyond them it flushes what it can release (logged, as an
    /// idle flush), e.g. `32MiB`. Empty: its part of `memory.limit`
    /// (32MiB without a limit).
    #[serde(deserialize_with = "optional_bytes")]
    pub max_held_bytes: Option<u64>,
    /// Bytes of records the router may buffer, all its input partitions
    /// together: a partition whose share is full is paused, e.g. `64MiB`.
    /// Empty: its part of `memory.limit` (64MiB without a limit).
    #[serde(deserialize_with = "optional_bytes")]
    pub max_buffered_bytes: Option<u64>,
}

/// The process's memory budget (docs/capacity.md).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySettings {
    /// Memory the whole process may take, e.g. `1GiB`, divided at start-up
    /// among the filters, held records, router, client queues and prefetch.
    /// Empty: the container's limit (cgroup v2 or v1); no limit without one.
    #[serde(deserialize_with = "optional_bytes")]
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSettings {
    /// Distinct records, partition = slice.
    pub topic: String,
    /// Duplicates, partition = slice; empty drops them (they are counted).
    pub duplicates_topic: String,
    /// Records that cannot be read, with the reason in headers.
    pub dead_letter_topic: String,
    /// A copy of every record judged after arriving behind the watermark,
    /// with header `dedupd.late_by_ms`; empty: not copied (still counted).
    pub late_topic: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptPolicy {
    /// Log, count, and rebuild the slice from its retained log.
    ColdStart,
    /// Stop the daemon.
    Fail,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSettings {
    /// Compacted topic holding slice snapshots, partition = slice.
    pub topic: String,
    /// Snapshot each slice at least this often …
    #[serde(deserialize_with = "duration_ms")]
    pub interval: u64,
    /// … or after this many records, whichever comes first (0: time only).
    pub interval_records: u64,
    /// Snapshot chunk size in bytes (under the broker's message size limit).
    pub chunk_bytes: usize,
    /// What a corrupt or incompatible snapshot does: `cold-start` or `fail`.
    pub on_corrupt: String,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// Create the topics dedupd owns when they are missing, with
    /// `max.message.bytes` = the producers' `message.max.bytes`.
    pub auto_create: bool,
    /// Replication factor of created topics; -1: the broker's default
    /// (`default.replication.factor`).
    pub replication_factor: i32,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownSettings {
    /// Longest time a graceful shutdown may take before the daemon exits anyway.
    #[serde(deserialize_with = "duration_ms")]
    pub timeout: u64,
}

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// env_logger's `[TIME LEVEL TARGET] message` lines (what people, tests and scripts read).
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, `fields` (for log shippers).
    Json,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// `text` or `json`; the level filter is `RUST_LOG` (default `info`).
    pub format: String,
    /// How often one INFO line sums up what happened since the last one
    /// (records in, verdicts, dead letters, lag); nothing is logged for an
    /// interval in which nothing happened. `0s`: never.
    #[serde(deserialize_with = "duration_ms")]
    pub summary_interval: u64,
}
