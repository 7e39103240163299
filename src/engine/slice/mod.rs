//! One slice's worker state: its filter, its position in the slice log, the
//! re-send marks of the router and the records waiting for the watermark —
//! everything its verdicts depend on, so that a restored slice judges the
//! rest of its log exactly as an uninterrupted one (docs/design.md, invariants 1, 5
//! and 7). Pure: no Kafka, no clock.
//!
//! Records are judged in event-time order within the lateness (see
//! [`super::order`]): one record of the log may release several judgments,
//! or none. Every judgment has a [`ReleasePos`]: the arrival (or idle flush)
//! that released it and its rank in that release. Release positions grow in
//! the order judgments are made, and follow from the log alone, so the last
//! output written says exactly how far a restored slice must replay silently.
//!
//! The waiting records themselves are not in the snapshot — only their
//! offsets: a restored slice re-reads them from its log
//! ([`SliceState::refill`]).
//!
//! Files of this folder, from the bottom up (a file imports only files
//! above it in this list):
//! - `frame.rs`: what the router writes around an input record (source
//!   stamp, frame, progress records).
//! - `stage.rs`: what a stage of a feature is to a slice ([`stage::Stage`]:
//!   its hooks, what it adds to a judgment) and what a feature hands the
//!   slices to start or restore it ([`stage::StageSetup`]).
//! - `stages.rs`: the list of stages a slice runs ([`stages::SliceStages`])
//!   and their setups, in the order the list of features gives.
//! - `judgment.rs`: a slice-log record and what a slice makes of it
//!   (judgments, release positions, verdict counts).
//! - `state.rs`: [`SliceState`] and how it takes in the slice log.
//! - `sections.rs`: the sections of a snapshot (the stages', the slice's
//!   progress), tagged from version 6.
//! - `codec.rs`: the slice snapshot format ([`encode`], [`decode`]), and
//!   a snapshot copied while the slice goes on ([`SliceState::begin_copy`]).

mod codec;
mod frame;
mod judgment;
mod sections;
pub mod stage;
pub mod stages;
mod state;

#[cfg(test)]
pub(crate) use codec::encode_tagged;
pub use codec::{MAGIC, SliceImage, VERSION, decode, decode_full, encode};
pub use frame::{
    FRAME_MAGIC, FRAME_MAGIC_NULL, FRAME_MAGIC_READ, FRAME_MAGIC_READ_NULL, InputProgress, MAX_TOPIC_BYTES, Progress,
    Reading, STAMP_BYTES, SourceRef, Unframed, frame_into, unframe,
};
pub use judgment::{Judgment, RELEASE_TEXT_BYTES, ReleasePos, SliceCounters, SliceRecord, SliceVerdict};
pub use stage::{StageNotes, StageRule};
pub use state::{LogForm, SliceState};

#[cfg(test)]
mod tests;
