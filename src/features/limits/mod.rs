//! Frequency limits and flags: at most N records of a count key per window,
//! and a copy of the record at which a key's count reaches a threshold to
//! the flags topic (docs/spectral.md).
//!
//! - Settings: `[limit]`, `[flag]`, in [`settings`] ([`LimitSettings`],
//!   [`FlagSettings`], their defaults and validation); the rules across
//!   them, the level (`[tier]`) and the availability policy are in
//!   [`feature`]'s check, which the core hands both.
//! - Stage (engine layer, deterministic): the limit and flag policies over
//!   windowed Spectral Bloom Filter counts are `filter/counting.rs` (pure,
//!   shared with pipe mode); [`stage`] is the stage as
//!   a slice runs it (count keys, the hashes waiting for the watermark, its
//!   part of the snapshot).
//! - Outputs (Kafka layer): none of its own; `kafka/worker/emit.rs` writes
//!   the flags topic from the judgments' notes. [`lookup`] answers
//!   `/v1/count` (listed in `features/lookups.rs`).
//! - Where the core calls it: [`feature`] checks the settings and hands the
//!   slices the stage's setup (`SliceCounting` is a
//!   [`Stage`](crate::engine::slice::stage::Stage), its snapshot section
//!   tagged in [`stage`]), and `engine/dedup.rs` (pipe mode, `dedupd filter`).
//!
//! Not here: `kafka/size_limits.rs` is the record-size limit of the topics a
//! slice writes, another thing.

pub mod feature;
pub mod lookup;
pub mod settings;
pub mod stage;

#[cfg(test)]
mod skewed;

pub use settings::{FlagSettings, LimitSettings};
