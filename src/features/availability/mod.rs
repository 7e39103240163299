//! Availability policies: what the records of a slice being restored get —
//! wait (exact), deliver at once or drop at once, each decision logged
//! before its outputs so that restarts replay it (docs/availability.md).
//!
//! - Settings: `[availability]`, in [`settings`] ([`AvailabilitySettings`],
//!   [`AvailabilityPolicy`] and their validation).
//! - Stage: none; the policy decides instead of the filter, outside the
//!   slice's state.
//! - Kafka part: not here. `kafka/worker/policy.rs` decides a restoring
//!   slice's records and logs the decisions in the flush log; it works
//!   with the worker's own modules (`emit`, `owned`, `setup`, `writer`),
//!   which stay private to the worker, so it stays there.
//!   `kafka/restore/flush_log.rs` reads the decisions back at restore.
//! - Where the core calls it: `kafka/worker/records.rs` and
//!   `kafka/worker/restores.rs` (records of a slice being restored).

pub mod feature;
pub mod settings;

pub use settings::{AvailabilityPolicy, AvailabilitySettings};
