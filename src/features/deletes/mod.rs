//! Key deletes: `DELETE /v1/keys/{key}` forgets a key, through the slice log
//! so that a replay deletes at the same place (docs/deletion-merge.md).
//!
//! - Settings: `filter.deletable` (in `[filter]`, `config/filter.rs`: it
//!   adds the counting cells); the rule it has of its own is in
//!   [`settings`]. Who may call the endpoint is `[admin]`'s key endpoints
//!   (`config/admin.rs`), shared with the lookups, not deletes' own.
//! - Stage: `SliceState::delete` (`engine/slice/state.rs`), which clears
//!   the key's cells in the filter family (`filter/`).
//! - Kafka part: [`requests`] — the control record written to the slice
//!   log, and the wait for the outcome the slice posts on the [`board`].
//! - Admin route: [`endpoint`] — `DELETE /v1/keys/{key}` and its log line.
//! - How the core calls it ([`feature`]): the admin endpoint serves its
//!   route; each slice worker makes its key action (the answer, and where
//!   the slice posts the outcome of a delete record it applied).

pub mod board;
pub mod endpoint;
pub mod feature;
pub mod requests;
pub mod settings;
