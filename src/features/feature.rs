//! What a feature plugs into the core, as one trait: every hook has a
//! default that adds nothing, so a feature implements the ones it has. The
//! list of features is `features/mod.rs`'s [`FEATURES`](super::FEATURES);
//! the slices, the worker, the emitter and the admin server go through it
//! and name no feature.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::lookups::KeyLookup;
use super::shared::handoff::Handoff;
use crate::admin::status::{KeyActionFn, Status};
use crate::config::{AvailabilityPolicy, ConfigError, Resolved, Settings, SlicingMode, Tier};
use crate::engine::slice::stage::StageSetup;
use crate::engine::{Extractor, RecordView, SliceState};
use crate::filter::DeleteRefusal;
use crate::kafka::KafkaLayerError;
use crate::kafka::producer::OutputProducer;
use crate::kafka::restore::Decision;
use crate::kafka::slice_log::read_order::NamedRecords;
use crate::metrics::Metrics;

/// A feature (its folder in `src/features/`).
pub trait Feature: Sync {
    /// Its folder's name.
    fn name(&self) -> &'static str;

    /// Checks its settings once the core's are (at load; an error names the
    /// setting, the value and the rule), and gives its stage in every slice,
    /// on or off as the settings say, if it has one: the slices run the
    /// stages in the order of the list of features.
    fn check(&self, _s: &Settings, _core: &CoreSettings) -> Result<Option<Arc<dyn StageSetup>>, ConfigError> {
        Ok(None)
    }

    /// Its key endpoint, `/v1/<name>`.
    fn key_lookup(&self) -> Option<&'static KeyLookup> {
        None
    }

    /// What its settings decide for the records of a slice being restored
    /// (in policy ranges, instead of judging them), if anything.
    fn while_restoring(&self, _cfg: &Resolved) -> Option<Decision> {
        None
    }

    /// A header its settings put on every output record.
    fn output_header(&self, _cfg: &Resolved) -> Option<(&'static str, String)> {
        None
    }

    /// Publishes its figures of one slice (`label`) to the metrics, whether
    /// it is on or not (every documented metric is exported). Its counters
    /// go as increments over what `published` holds under their names.
    fn publish(&self, _cfg: &Resolved, _slice: &SlicePublish<'_>, _published: &mut PublishedCounts) {}

    /// A slice was restored: its counters as restored count as published
    /// (a restart does not count them again).
    fn restored(&self, _state: &SliceState, _published: &mut PublishedCounts) {}

    /// Its routes on the admin endpoint, behind the key guard (their state:
    /// the status the slice workers share with the endpoint).
    fn admin_routes(&self) -> Option<axum::Router<Arc<Status>>> {
        None
    }

    /// Its key action (answering a route of [`Self::admin_routes`]), made
    /// by a slice worker once it runs.
    fn key_action(&self, _worker: &WorkerView<'_>) -> Result<Option<KeyAction>, KafkaLayerError> {
        Ok(None)
    }

    /// The reader of the input records its slice log's read orders name
    /// (a slice worker makes one; `missing` counts records found gone;
    /// `handoff` brings those the router of the process hands over).
    fn named_records(
        &self,
        _cfg: &Resolved,
        _missing: &prometheus::IntCounter,
        _handoff: Option<&Arc<Handoff>>,
    ) -> Result<Option<Box<dyn NamedRecords>>, KafkaLayerError> {
        Ok(None)
    }

    /// Its part in the outputs of every distinct judgment, if its settings
    /// ask for one (`seed`: the filter's hash seed).
    fn on_distinct(&self, _cfg: &Resolved, _seed: u64) -> Result<Option<Box<dyn OnDistinct>>, KafkaLayerError> {
        Ok(None)
    }
}

/// What the core's sections resolve to that a feature's settings are
/// checked against.
pub struct CoreSettings {
    /// `slicing.mode`.
    pub slicing: SlicingMode,
    /// `filter.kind = "passthrough"`: no key is judged.
    pub passthrough: bool,
    /// This instance's level (`[tier]`).
    pub tier: Tier,
    /// What the records of a slice being restored get (`[availability]`).
    pub availability: AvailabilityPolicy,
}

/// What a feature's key action is made from: the worker's settings and
/// slice log, and whether it owns a slice now.
pub struct WorkerView<'a> {
    pub cfg: &'a Resolved,
    /// The filter's hash seed (a key's slice).
    pub seed: u64,
    /// Whether the filter can delete keys.
    pub deletable: bool,
    pub slice_topic: &'a str,
    /// Whether this worker owns `slice` now.
    pub owns: Arc<dyn Fn(u32) -> bool + Send + Sync>,
}

/// A feature's action on a key through the slice log: the admin route's
/// answer, and what the slice worker calls once it has applied a request
/// of the slice log (`slice`, slice-log offset, outcome).
pub struct KeyAction {
    pub answer: KeyActionFn,
    pub applied: AppliedFn,
}

/// Called by the slice worker with a request it applied.
pub type AppliedFn = Arc<dyn Fn(u32, u64, Result<(), DeleteRefusal>) + Send + Sync>;

/// One slice's figures as a feature publishes them.
pub struct SlicePublish<'a> {
    pub metrics: &'a Metrics,
    /// The slice's label.
    pub label: &'a str,
    pub state: &'a SliceState,
}

/// The features' counters of one slice already published, by metric name.
pub type PublishedCounts = BTreeMap<&'static str, u64>;

/// A feature's part in the outputs of every distinct judgment (a sparse
/// tree's root publishes a verdict: docs/tiers.md). Called on a replay too,
/// so it must be idempotent.
pub trait OnDistinct: Send + Sync {
    /// `record` (judged distinct by `slice`), as the slice read it.
    fn distinct(
        &self,
        producer: &OutputProducer,
        extractor: &Extractor,
        metrics: &Metrics,
        slice: u32,
        record: &RecordView<'_>,
    ) -> Result<(), KafkaLayerError>;
}
