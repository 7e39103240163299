//! Multi-level (Bloom tree) deployments: regional leaf instances in front of
//! one root instance, sparse (leaves only test, and learn the root's
//! verdicts) or dense (docs/tiers.md).
//!
//! - Settings: `[tier]`, in [`settings`] ([`TierSettings`], [`Tier`], their
//!   validation and a sparse leaf's cache parameters).
//! - Stage (engine layer, deterministic): [`verdicts`] — the root's verdict
//!   records and a sparse leaf's cache.
//! - Kafka part: [`io`] — the sparse leaf's loop (test, forward, learn) and
//!   the root's verdict publisher; the [`io::LEAF`] header.
//! - Where the core calls it: `cli/run.rs` (a sparse leaf runs [`io`]
//!   instead of the slice workers; a root's workers get a publisher),
//!   `kafka/worker/emit.rs` (a root's verdicts, a leaf's header),
//!   `kafka/restore/tail.rs`; `config/validate.rs` gives a leaf's output
//!   the parent topic.

pub mod feature;
pub mod io;
pub mod settings;
pub mod verdicts;

pub use settings::{Tier, TierSettings};
