//! A feature's key endpoint (`/v1/<name>`): it answers for a key from the
//! owned slices' states. The worker serves the features' endpoints, the
//! admin server routes them, and neither names a feature.

use crate::engine::SliceState;
use crate::engine::slice::stages::StageSetups;
use crate::filter::KeyHash;

/// A feature's key endpoint, `/v1/<name>`.
pub struct KeyLookup {
    pub name: &'static str,
    /// What the endpoint answers (404) while the feature is off.
    pub off: &'static str,
    /// Whether the feature is on.
    pub on: fn(&StageSetups) -> bool,
    /// Whether the key asked is the one the router routes by whatever the
    /// settings (then, in repartition mode, only its slice is asked); else
    /// it is the dedup key, routed by only when there is no count key.
    pub routed_always: bool,
    /// The answer for `key` (its hash `hash`) from the slices asked, each
    /// with its number; `home` is the slice the key is routed to, if known.
    pub answer: fn(key: &[u8], hash: &KeyHash, home: Option<u32>, slices: Asked<'_>) -> serde_json::Value,
}

/// The owned slices a lookup asks, each with its number.
pub type Asked<'a> = &'a mut dyn Iterator<Item = (u32, &'a SliceState)>;
