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
//!   log, and the wait for the outcome the slice posts.
//! - Where the core calls it: `kafka/worker/mod.rs` builds the endpoint's
//!   delete function; `kafka/worker/records.rs` applies a delete record and
//!   posts its outcome; `admin/` serves the endpoint.

pub mod feature;
pub mod requests;
pub mod settings;
