//! `/v1/provenance`: which sources may have delivered a key.

use super::stage::SliceProvenance;
use crate::features::lookups::{Asked, KeyLookup};
use crate::filter::KeyHash;

pub const PROVENANCE: KeyLookup = KeyLookup {
    name: "provenance",
    off: "provenance is off: set provenance.source to turn it on\n",
    on: |stages| super::stage::provenance(stages).is_some(),
    routed_always: false,
    answer,
};

/// Every source that may have delivered the key inside what the slices
/// asked keep (no false negatives), and the estimated probability that a
/// source which did not is listed (the largest over the slices).
fn answer(key: &[u8], hash: &KeyHash, home: Option<u32>, slices: Asked<'_>) -> serde_json::Value {
    let mut sources = std::collections::BTreeSet::new();
    let (mut owned, mut estimated_fpr) = (false, 0.0f64);
    for (_, state) in slices {
        if let Some(p) = state.stages.get::<SliceProvenance>() {
            owned = true;
            let answer = p.sources.query(hash);
            sources.extend(answer.sources.iter().map(|s| s.to_string()));
            estimated_fpr = estimated_fpr.max(answer.estimated_fpr);
        }
    }
    serde_json::json!({
        "key": String::from_utf8_lossy(key),
        "sources": sources,
        "estimated_fpr": estimated_fpr,
        "slice": home,
        "owned": owned,
    })
}
