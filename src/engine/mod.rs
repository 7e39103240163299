//! Records in, verdicts out: pure and deterministic, no Kafka.
//!
//! - [`record`]: key and time extraction, with typed reasons for unreadable records.
//! - [`pointer`]: the values at JSON pointers, read in one pass without building the document.
//! - [`order`]: event-time order within a lateness (the watermark), late
//!   records and time jumps.
//! - [`dedup`]: batched processing of records, in event-time order, over a sliced filter.
//! - [`counting`]: the counting stage — frequency limits and flags from
//!   windowed Spectral Bloom Filter counts.
//! - [`limits`]: the counting stage run by a slice (`[limit]`, `[flag]`).
//! - [`provenance`]: which source delivered each key (`[provenance]`).
//! - [`tier`]: a sparse Bloom tree's verdict records and leaf cache (docs/tiers.md).
//! - [`read_order`]: shared mode's read-order records — which input records
//!   one slice judged in which order (docs/shared-mode.md).
//! - [`slice`]: one slice's complete state (filter, log position, re-send
//!   marks) and its snapshot codec — what the daemon's slice workers run.
//! - [`merge`]: the states of several slices merged into fewer
//!   (`dedupd checkpoint merge`).

pub mod counting;
pub mod dedup;
pub mod limits;
pub mod merge;
pub mod order;
pub mod pointer;
pub mod provenance;
pub mod read_order;
pub mod record;
pub mod slice;
pub mod tier;

pub use counting::{CountMark, CountingSpec, CountingStage, CountingStats};
pub use dedup::{Deduplicator, Judged, Outcome};
pub use order::{OrderMarks, OrderSettings, Released, ReorderBuffer, Waiting, shrink_target};
pub use record::{Extracted, Extractor, InvalidReason, InvalidRecord, KeySpec, RecordView, TimeSpec};
pub use slice::{
    InputProgress, Judgment, Progress, Reading, ReleasePos, STAMP_BYTES, SliceCounters, SliceImage, SliceRecord,
    SliceState, SliceVerdict, SourceRef, format_into,
};
