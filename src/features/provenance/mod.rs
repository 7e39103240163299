//! Provenance: which configured sources (a JSON field, a header or the
//! input topic) delivered each key within the window, for `/v1/provenance`
//! and on duplicates (docs/provenance.md).
//!
//! - Settings: `[provenance]`, in [`settings`] ([`ProvenanceSettings`], its
//!   validation and the setup the slices run with).
//! - Stage (engine layer, deterministic): [`stage`] — a record's source read
//!   on arrival and recorded when judged, per slice, over the source
//!   filters of `filter/provenance/`.
//! - Outputs (Kafka layer): none of its own; `kafka/worker/lookups.rs`
//!   answers `/v1/provenance`, `admin/` serves it.
//! - Where the core calls it: [`feature`] checks the settings and hands the
//!   slices the stage's setup (`SliceProvenance` is a
//!   [`Stage`](crate::engine::slice::stage::Stage), its snapshot section
//!   tagged in [`stage`]).

pub mod feature;
pub mod lookup;
pub mod settings;
pub mod stage;

pub use settings::ProvenanceSettings;
