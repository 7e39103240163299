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
//! A feature plugs in through one trait, [`feature::Feature`] (the check of
//! its settings and its stage, key endpoint, metrics, output parts), and one
//! list, [`FEATURES`]: the settings' validation, the slices, the emitter, the
//! admin server and the worker's metrics go through the list and name no
//! feature. [`lookups`] is what a key endpoint is.
//!
//! The layers within a folder (`docs/architecture.md`):
//! - `settings.rs` imports only `config`'s shared files (`config/error.rs`,
//!   `config/values.rs`, the sections it checks against), the filters and
//!   its own stage's types; it gives its section its defaults
//!   (`#[serde(default)]`), `config` re-exports it, and `Settings::validate`
//!   calls its validation through the feature's `check`.
//! - the stage imports only `filter` and `engine` (by their files, not
//!   `engine`'s re-exports): deterministic, no Kafka, no clock. The engine
//!   calls it.
//! - the Kafka part imports `kafka` (and `engine`, `config`); only `kafka`,
//!   `cli` and `admin` call it. `kafka/mod.rs` does not name it, so no
//!   circle goes through it.

pub mod availability;
pub mod deletes;
pub mod feature;
pub mod limits;
pub mod lookups;
pub mod provenance;
pub mod shared;
pub mod tiers;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::admin::status::{FeatureLookup, Status};
use crate::config::{ConfigError, Resolved, Settings};
use crate::engine::slice::stages::StageSetups;
use crate::kafka::KafkaLayerError;
use crate::kafka::restore::Decision;
use crate::kafka::slice_log::read_order::NamedRecords;
use feature::{CoreSettings, Feature, KeyAction, OnDistinct, WorkerView};
use lookups::KeyLookup;
use shared::handoff::Handoff;

/// Every feature, in the order the slices run their stages: the counting
/// stage before provenance, because a limit may turn a record into a
/// duplicate and provenance names a first source for duplicates only.
pub static FEATURES: &[&dyn Feature] = &[
    &limits::feature::LimitsFeature,
    &provenance::feature::ProvenanceFeature,
    &availability::feature::AvailabilityFeature,
    &deletes::feature::DeletesFeature,
    &tiers::feature::TiersFeature,
    &shared::feature::SharedFeature,
];

/// Checks every feature's settings, in list order (the first broken rule
/// is the error), and gives the stages the slices run: every feature's, on
/// or off, in list order.
pub fn check(s: &Settings, core: &CoreSettings) -> Result<StageSetups, ConfigError> {
    let mut stages = Vec::new();
    for feature in FEATURES {
        stages.extend(feature.check(s, core)?);
    }
    Ok(StageSetups::new(stages))
}

/// The features' key endpoints.
pub fn key_lookups() -> impl Iterator<Item = &'static KeyLookup> {
    FEATURES.iter().filter_map(|f| f.key_lookup())
}

/// Lists every feature's key endpoint in `status`, before the admin
/// endpoint starts: it routes those listed (each answers 503 until the slice
/// workers run, then 404 with [`KeyLookup::off`] if the feature is off).
pub fn list_key_lookups(status: &Status) {
    let mut endpoints = status.feature_lookups.lock().expect("status lock");
    for lookup in key_lookups() {
        endpoints.insert(lookup.name, FeatureLookup { answer: None, off: lookup.off });
    }
}

/// The header the features put on every output record, if any.
pub fn output_header(cfg: &Resolved) -> Option<(&'static str, String)> {
    FEATURES.iter().find_map(|f| f.output_header(cfg))
}

/// The features' part in the outputs of every distinct judgment, if any.
pub fn on_distinct(cfg: &Resolved, seed: u64) -> Result<Option<Box<dyn OnDistinct>>, KafkaLayerError> {
    for feature in FEATURES {
        if let Some(hook) = feature.on_distinct(cfg, seed)? {
            return Ok(Some(hook));
        }
    }
    Ok(None)
}

/// The reader of the input records the slice log's read orders name, if
/// the settings put read orders there (taking the pages `handoff` brings).
pub fn named_records(
    cfg: &Resolved,
    missing: &prometheus::IntCounter,
    handoff: Option<&Arc<Handoff>>,
) -> Result<Option<Box<dyn NamedRecords>>, KafkaLayerError> {
    for feature in FEATURES {
        if let Some(reader) = feature.named_records(cfg, missing, handoff)? {
            return Ok(Some(reader));
        }
    }
    Ok(None)
}

/// The features' routes on the admin endpoint (behind its key guard).
pub fn admin_routes<S: Clone + Send + Sync + 'static>(status: &Arc<Status>) -> axum::Router<S> {
    let routes = FEATURES.iter().filter_map(|f| f.admin_routes());
    routes.fold(axum::Router::new(), |all, routes| all.merge(routes.with_state(status.clone())))
}

/// The features' key actions of a slice worker, by feature name.
pub fn key_actions(worker: &WorkerView<'_>) -> Result<Vec<(&'static str, KeyAction)>, KafkaLayerError> {
    let mut actions = Vec::new();
    for feature in FEATURES {
        if let Some(action) = feature.key_action(worker)? {
            actions.push((feature.name(), action));
        }
    }
    Ok(actions)
}

/// What the settings decide for the records of a slice being restored, if
/// anything (`None`: they wait for the restore).
pub fn while_restoring(cfg: &Resolved) -> Option<Decision> {
    FEATURES.iter().find_map(|f| f.while_restoring(cfg))
}
