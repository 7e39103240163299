//! Availability policies: what the records of a slice being restored get —
//! wait (exact), deliver at once or drop at once, each decision logged
//! before its outputs so that restarts replay it (docs/availability.md).
//!
//! - Settings: `[availability]`, in [`settings`] ([`AvailabilitySettings`],
//!   [`AvailabilityPolicy`] and their validation).
//! - Stage: none; the policy decides instead of the filter, outside the
//!   slice's state.
//! - How the core plugs it in ([`feature`]): the policy becomes the
//!   decision the core's policy ranges make (`deliver`, `drop`; `wait`
//!   makes none). The ranges are the exactly-once protocol's, not this
//!   feature's: `kafka/worker/policy.rs` decides a restoring slice's
//!   records and logs each range in the flush log first, and
//!   `kafka/restore/` reads them back, whatever asked for them.

pub mod feature;
pub mod settings;

pub use settings::{AvailabilityPolicy, AvailabilitySettings};
