//! `[provenance]`: its settings, their rules, and the setup the slices run
//! with.

use serde::Deserialize;

use super::stage::{ProvenanceSetup, SourceSpec};
use crate::config::error::{ConfigError, RESERVED_HEADER_RULE, invalid, is_reserved_header};
use crate::config::filter::FilterSettings;
use crate::config::sections::InputSettings;
use crate::filter::provenance::{IndexChoice, ProvenanceSpec};

/// Which sources delivered each key (docs/provenance.md).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProvenanceSettings {
    /// Where a record's source comes from: `json:/pointer`, `header:NAME` or
    /// `topic` (the input topic); empty: provenance off.
    pub source: String,
    /// Most sources live at once in one slice; records of further sources
    /// are not recorded (counted in `dedupd_provenance_dropped_total`).
    pub max_sources: usize,
    /// The index over a generation's source filters: `flat` (Flat-Bloofi),
    /// `tree` (Bloofi) or `auto` (by the number of live sources).
    pub index: String,
    /// Distinct keys one source delivers per window, all slices together:
    /// sizes each source's Bloom filter.
    pub expected_keys_per_source: u64,
    /// False-positive rate of one source's filter holding that many keys.
    pub fpr: f64,
    /// Order d of the Bloofi tree (2: the cheapest queries, per the paper).
    pub tree_order: usize,
}

/// The section's defaults, when the settings file and the environment
/// leave a setting out: provenance off.
impl Default for ProvenanceSettings {
    fn default() -> Self {
        ProvenanceSettings {
            source: String::new(),
            max_sources: 1000,
            index: "auto".into(),
            expected_keys_per_source: 100_000,
            fpr: 0.01,
            tree_order: 2,
        }
    }
}

impl ProvenanceSettings {
    /// The setup the slices run with, `None` when off. `slices` share a
    /// source's keys; a generation spans the window and is kept for window +
    /// lateness after it ends.
    pub fn resolve(
        &self,
        slices: u32,
        window_ms: u64,
        lateness_ms: u64,
        input_topic: &str,
    ) -> Result<Option<ProvenanceSetup>, ConfigError> {
        if self.source.is_empty() {
            return Ok(None);
        }
        let source = self.source.parse().map_err(|e| invalid("provenance.source", &self.source, e))?;
        if let SourceSpec::Header(name) = &source
            && is_reserved_header(name)
        {
            return Err(invalid("provenance.source", &self.source, RESERVED_HEADER_RULE));
        }
        let index = match self.index.as_str() {
            "auto" => IndexChoice::Auto,
            "flat" => IndexChoice::Flat,
            "tree" => IndexChoice::Tree,
            other => return Err(invalid("provenance.index", other, "expected auto, flat or tree")),
        };
        if !(1..=1_000_000).contains(&self.max_sources) {
            return Err(invalid("provenance.max_sources", self.max_sources, "between 1 and 1000000"));
        }
        if self.expected_keys_per_source == 0 {
            return Err(invalid("provenance.expected_keys_per_source", 0, "at least 1"));
        }
        if !(self.fpr > 0.0 && self.fpr < 0.5) {
            return Err(invalid("provenance.fpr", self.fpr, "between 0 and 0.5, exclusive"));
        }
        if !(2..=64).contains(&self.tree_order) {
            return Err(invalid("provenance.tree_order", self.tree_order, "between 2 and 64"));
        }
        // The classic sizing, per slice: m = -n·ln p / ln²2, k = (m/n)·ln 2.
        let n = self.expected_keys_per_source.div_ceil(u64::from(slices.max(1))) as f64;
        let ln2 = std::f64::consts::LN_2;
        let bits = (-n * self.fpr.ln() / (ln2 * ln2)).ceil().max(64.0);
        if bits > (1u64 << 32) as f64 {
            return Err(invalid(
                "provenance.expected_keys_per_source",
                self.expected_keys_per_source,
                "one source's filter in one slice would exceed 2^32 bits: lower it or raise provenance.fpr",
            ));
        }
        let hashes = ((bits / n) * ln2).round().clamp(1.0, 30.0) as u32;
        let spec = ProvenanceSpec {
            bits: bits as usize,
            hashes,
            generation_ms: window_ms.max(1),
            keep_ms: window_ms + lateness_ms,
            max_sources: self.max_sources,
            index,
            tree_order: self.tree_order,
        };
        Ok(Some(ProvenanceSetup { source, spec, input_topic: input_topic.to_string() }))
    }
    /// `[provenance]` as the slices run it, `None` when off: [`Self::resolve`]
    /// with `filter.slices`, `filter.window` and `input.lateness`, checked
    /// against `passthrough` (`filter.kind = "passthrough"`).
    pub(crate) fn validate(
        &self,
        filter: &FilterSettings,
        input: &InputSettings,
        passthrough: bool,
    ) -> Result<Option<ProvenanceSetup>, ConfigError> {
        let provenance = self.resolve(filter.slices, filter.window, input.lateness, &input.topics[0])?;
        if provenance.is_some() && passthrough {
            return Err(invalid(
                "provenance.source",
                &self.source,
                "filter.kind = \"passthrough\" judges no key, so no source is ever recorded",
            ));
        }
        Ok(provenance)
    }
}
