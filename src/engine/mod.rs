//! Records in, verdicts out: pure and deterministic, no Kafka.
//!
//! - [`record`]: key and time extraction, with typed reasons for unreadable records.
//! - [`dedup`]: batched processing of records over a sliced filter.
//! - [`slice`]: one slice's complete state (filter, log position, re-send
//!   marks) and its snapshot codec — what the daemon's slice workers run.

pub mod dedup;
pub mod record;
pub mod slice;

pub use dedup::{Deduplicator, Outcome};
pub use record::{Extracted, Extractor, InvalidReason, InvalidRecord, KeySpec, RecordView, TimeSpec};
pub use slice::{
    STAMP_BYTES, SliceCopy, SliceCounters, SliceImage, SliceRecord, SliceState, SliceVerdict, SourceRef, format_into,
};
