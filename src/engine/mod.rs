//! Records in, verdicts out: pure and deterministic, no Kafka.
//!
//! - [`record`]: key and time extraction, with typed reasons for unreadable records.
//! - [`rfc3339`]: event times written as RFC 3339 text.
//! - [`formats`]: Avro and Protobuf records in the Confluent wire format, read by field path.
//! - [`time`](mod@time): event times as numbers in a unit (`json:/ts:s`) or RFC 3339 text.
//! - [`pointer`](mod@pointer): the values at JSON pointers, read in one pass without building the document.
//! - [`order`]: event-time order within a lateness (the watermark), late
//!   records and time jumps.
//! - [`dedup`]: batched processing of records, in event-time order, over a sliced filter.
//! - [`slice`](mod@slice): one slice's complete state (filter, log position, re-send
//!   marks) and its snapshot codec — what the daemon's slice workers run.
//! - [`merge`]: the states of several slices merged into fewer
//!   (`dedupd checkpoint merge`).
//!
//! The features' stages live in their folders (`src/features/`): a slice
//! runs them through the hooks of [`slice::stage::Stage`], as the list the
//! features hand it at start-up ([`slice::stages::StageSetups`]). No file
//! here imports a feature.

pub mod dedup;
pub mod formats;
pub mod merge;
pub mod order;
pub mod pointer;
pub mod record;
pub mod rfc3339;
pub mod slice;
pub mod time;

pub use dedup::{Deduplicator, Judged, Outcome};
pub use order::{OrderMarks, OrderSettings, Released, ReorderBuffer, Waiting, shrink_target};
pub use record::{Extracted, Extractor, FieldSource, InvalidReason, InvalidRecord, KeySpec, RecordView, TimeSpec};
pub use slice::{
    InputProgress, Judgment, Progress, RELEASE_TEXT_BYTES, Reading, ReleasePos, STAMP_BYTES, SliceCounters, SliceImage,
    SliceRecord, SliceState, SliceVerdict, SourceRef,
};
pub use time::TimeUnit;
