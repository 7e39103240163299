//! One folder per feature, as a feature is seen by a user: its settings
//! section and their validation, its stage (the deterministic part a slice
//! runs) and its Kafka part, side by side. Each folder's `mod.rs` opens with
//! the feature's map: what it does, its docs/ page, which file is which,
//! and where the core calls it.
//!
//! - [`limits`]: frequency limits and flags (`[limit]`, `[flag]`).
//! - [`provenance`]: which sources delivered each key (`[provenance]`).
//! - [`availability`]: what the records of a slice being restored get
//!   (`[availability]`).
//! - [`deletes`]: `DELETE /v1/keys/{key}` (`filter.deletable`).
//! - [`tiers`]: multi-level deployments (`[tier]`).
//! - [`shared`]: shared mode (`slicing.mode = "shared"`).
//!
//! [`stages`] lists the stages a slice runs (counting, provenance): the one
//! place the core's slice state reaches the features through; [`lookups`]
//! lists their key endpoints (`/v1/count`, `/v1/provenance`).
//!
//! The layers within a folder (`docs/architecture.md`):
//! - `settings.rs` imports only `config`'s shared files (`config/error.rs`,
//!   `config/values.rs`, the sections it checks against), the filters and
//!   its own stage's types; `config` re-exports the section and calls its
//!   validation from `Settings::validate`.
//! - the stage imports only `filter` and `engine` (by their files, not
//!   `engine`'s re-exports): deterministic, no Kafka, no clock. The engine
//!   calls it.
//! - the Kafka part imports `kafka` (and `engine`, `config`); only `kafka`,
//!   `cli` and `admin` call it. `kafka/mod.rs` does not name it, so no
//!   circle goes through it.

pub mod availability;
pub mod deletes;
pub mod limits;
pub mod lookups;
pub mod provenance;
pub mod shared;
pub mod stages;
pub mod tiers;

#[cfg(test)]
mod tests;
