//! `[tier]`: this instance's level in a multi-level deployment, the rules
//! of its settings, and a sparse leaf's cache parameters.

use serde::Deserialize;

use crate::config::error::{ConfigError, invalid};
use crate::config::filter::FilterSettings;
use crate::config::values::duration_ms;
use crate::filter::FilterSpec;

/// Multi-level (Bloom tree) deployments, paper §6 (docs/tiers.md): regional
/// leaf instances in front of one root instance.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TierSettings {
    /// `single` (a plain instance), `leaf` (forwards what it cannot resolve
    /// to `parent_topic`) or `root` (the parent; publishes its verdicts to
    /// `verdict_topic` in a sparse tree).
    pub role: String,
    /// `sparse` (leaves only test, and set their filter from the root's
    /// verdicts: the root's output is a single-level run's) or `dense`
    /// (leaves deduplicate on their own; weaker, see docs/tiers.md).
    pub tree: String,
    /// A leaf's parent: the topic it forwards records to (the root's input).
    pub parent_topic: String,
    /// Sparse tree: the root's verdicts (key hash and event time of every
    /// record it delivered), written by the root and read by every leaf.
    pub verdict_topic: String,
    /// Sparse leaf: the longest a verdict may come behind the leaf's own
    /// input in event time and still be learned (a later one is skipped: the
    /// leaf then forwards more, it never drops more). Shorter than
    /// `filter.window`.
    #[serde(deserialize_with = "duration_ms")]
    pub verdict_delay: u64,
}

/// The section's defaults, when the settings file and the environment
/// leave a setting out: a single-level instance.
impl Default for TierSettings {
    fn default() -> Self {
        TierSettings {
            role: "single".into(),
            tree: "sparse".into(),
            parent_topic: String::new(),
            verdict_topic: String::new(),
            verdict_delay: 30_000,
        }
    }
}

impl TierSettings {
    /// The level, after checking what it needs. `not_timer`: `filter.kind`
    /// is not the timer filter, whose window the leaves' caches share.
    pub(crate) fn resolve(
        &self,
        filter: &FilterSettings,
        input_topics: &[String],
        not_timer: bool,
    ) -> Result<Tier, ConfigError> {
        let sparse = match self.tree.as_str() {
            "sparse" => true,
            "dense" => false,
            other => return Err(invalid("tier.tree", other, "expected sparse or dense")),
        };
        let tier = match (self.role.as_str(), sparse) {
            ("single", _) => return Ok(Tier::Single),
            ("leaf", true) => Tier::SparseLeaf,
            ("leaf", false) => Tier::DenseLeaf,
            ("root", true) => Tier::SparseRoot,
            ("root", false) => Tier::DenseRoot,
            (other, _) => return Err(invalid("tier.role", other, "expected single, leaf or root")),
        };
        if not_timer {
            return Err(invalid(
                "filter.kind",
                &filter.kind,
                format!("tier.role = {} needs the timer filter (the tree shares its window)", self.role),
            ));
        }
        let topic = |setting: &str, name: &str| -> Result<(), ConfigError> {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
                return Err(invalid(
                    setting,
                    format!("{name:?}"),
                    format!("a Kafka topic name (required with tier.role = {}, tier.tree = {})", self.role, self.tree),
                ));
            }
            if input_topics.iter().any(|t| t == name) {
                return Err(invalid(setting, name, "cannot also be an input topic of this instance"));
            }
            Ok(())
        };
        if matches!(tier, Tier::SparseLeaf | Tier::DenseLeaf) {
            topic("tier.parent_topic", &self.parent_topic)?;
        }
        if sparse {
            topic("tier.verdict_topic", &self.verdict_topic)?;
        }
        if tier == Tier::SparseLeaf && !(1..filter.window).contains(&self.verdict_delay) {
            return Err(invalid(
                "tier.verdict_delay",
                format!("{}ms", self.verdict_delay),
                format!("at least 1ms and shorter than filter.window ({} ms)", filter.window),
            ));
        }
        Ok(tier)
    }
    /// A sparse leaf's cache (`tier`: this instance's level), built from
    /// `filter`, the resolved filter the root runs, must be a filter there is.
    pub(crate) fn check_leaf_cache(&self, tier: Tier, filter: &FilterSpec) -> Result<(), ConfigError> {
        if tier == Tier::SparseLeaf {
            leaf_cache(filter, self.verdict_delay).map_err(|e| {
                let setting =
                    if e.setting == "lateness" { "tier.verdict_delay".into() } else { format!("filter.{}", e.setting) };
                invalid(&setting, e.value, format!("{} (a sparse leaf's cache)", e.rule))
            })?;
        }
        Ok(())
    }
}

/// A deployment's level (`[tier] role`, `tree`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Single,
    SparseLeaf,
    SparseRoot,
    DenseLeaf,
    DenseRoot,
}

/// A sparse leaf's cache parameters: `root`'s filter as one filter for
/// all keys, with the root's tick (the leaf's verdicts then expire on the
/// same tick as the root's cells) and lateness `verdict_delay`.
pub(crate) fn leaf_cache(
    root: &FilterSpec,
    verdict_delay: u64,
) -> Result<crate::filter::FilterParams, crate::filter::ParamError> {
    let tick_ms = Some(root.resolve()?.tick_ms);
    FilterSpec { slices: 1, lateness_ms: Some(verdict_delay), tick_ms, ..root.clone() }.resolve()
}
