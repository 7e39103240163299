//! Records in, verdicts out: pure and deterministic, no Kafka.
//!
//! - [`record`]: key and time extraction, with typed reasons for unreadable records.
//! - [`dedup`]: batched processing of records over a sliced filter.

pub mod dedup;
pub mod record;

pub use dedup::{Deduplicator, Outcome};
pub use record::{Extracted, Extractor, InvalidReason, InvalidRecord, KeySpec, RecordView, TimeSpec};
