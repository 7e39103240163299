//! `[filter]`: the filter kind, its window and sizing.

use serde::Deserialize;

use super::error::{ConfigError, invalid};
use super::values::{bytes, duration_ms, optional_bytes, optional_count, optional_duration_ms};
use crate::filter::cuckoo::CuckooSpec;
use crate::filter::{DecayingKind, DecayingSpec, FilterSpec, Growth};

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSettings {
    /// `timer` (the sliding timer Bloom filter), `cuckoo` (the cuckoo table
    /// filter: the same window in 16 bits per key slot), `passthrough` (no dedup), or
    /// the count-based kinds with no window, `rsbf` (reservoir-sampling Bloom
    /// filter) and `stable` (Stable Bloom Filter).
    pub kind: String,
    /// Sliding window, e.g. `10m`.
    #[serde(deserialize_with = "duration_ms")]
    pub window: u64,
    /// Target false-positive rate.
    pub fpr: f64,
    /// Distinct keys per window, all slices together; empty: the cuckoo
    /// kind sizes itself from what it sees (the timer kind needs it).
    #[serde(deserialize_with = "optional_count")]
    pub expected_keys: Option<u64>,
    /// Extra capacity of a slice's first generation, as a fraction of expected_keys.
    pub headroom: f64,
    /// Equal-timers threshold k'; 0 turns it off.
    pub equal_timers: u32,
    /// `density`, `cardinality` or `none`.
    pub growth: String,
    /// Slices S: partitions of the slice topic, and of the output topic.
    pub slices: u32,
    /// Bits per timer cell, 4..=32.
    pub timer_bits: u8,
    /// Timer resolution; empty picks the finest the width allows.
    #[serde(deserialize_with = "optional_duration_ms")]
    pub tick: Option<u64>,
    /// Most generations per slice.
    pub max_generations: u32,
    /// rsbf and stable: memory of the filters in bytes, all slices together
    /// (each slice gets an equal share), e.g. `64MiB`.
    #[serde(deserialize_with = "bytes")]
    pub memory: u64,
    /// rsbf and stable: seed of the filters' PRNG (reservoir draws, random
    /// resets and decrements), part of every snapshot.
    pub seed: u64,
    /// Counting cells beside the timers (one byte per cell) so that
    /// `DELETE /v1/keys/{key}` can forget a key.
    pub deletable: bool,
    /// Timer generations sized from the live keys ([`FilterSpec::sized_growth`]).
    pub sized_growth: bool,
    /// The cap on all slices' filters together, e.g. `512MiB`; empty: half
    /// the container's memory limit, or no cap without one
    /// ([`crate::memory`]).
    #[serde(deserialize_with = "optional_bytes")]
    pub max_memory: Option<u64>,
}

impl FilterSettings {
    /// The settings of the cuckoo table filter: one per slice, sized from
    /// the same window, target, expected keys, headroom and slices as the
    /// timer filter (`filter.max_generations` caps its tables), judging
    /// instead of the timer filter, whose `timer` spec (validated) is shrunk
    /// to the smallest there is, as for a decaying kind.
    pub(super) fn cuckoo_spec(
        &self,
        timer: FilterSpec,
        lateness_ms: u64,
    ) -> Result<(FilterSpec, CuckooSpec), ConfigError> {
        let cuckoo = CuckooSpec {
            window_ms: self.window,
            fpr: self.fpr,
            expected_keys: self.expected_keys,
            headroom: self.headroom,
            slices: self.slices,
            lateness_ms: Some(lateness_ms),
            seed: timer.seed,
            max_tables: self.max_generations,
        };
        cuckoo.resolve().map_err(|e| {
            let name = match e.setting {
                "expected" => "filter.expected_keys".to_string(),
                other => format!("filter.{other}"),
            };
            invalid(&name, e.value, format!("{} (filter.kind = cuckoo)", e.rule))
        })?;
        let slices = u64::from(self.slices);
        let timer =
            FilterSpec { expected_keys: slices, total_cells: None, growth: Growth::None, max_generations: 1, ..timer };
        Ok((timer, cuckoo))
    }

    /// The settings of a decaying kind: one filter per slice with an
    /// equal share of `memory`, judging instead of the timer filter, whose
    /// `timer` spec (validated) is shrunk to the smallest there is: it stays
    /// empty, and its window only bounds `input.lateness` and is the default
    /// of `input.max_clock_jump`.
    pub(super) fn decaying_spec(
        &self,
        kind: DecayingKind,
        timer: FilterSpec,
    ) -> Result<(FilterSpec, DecayingSpec), ConfigError> {
        // `timer` was resolved: 1 to 65536 slices.
        let slices = u64::from(self.slices);
        let share = self.memory / slices;
        // A share is allocated at start-up: one no machine has would abort
        // the process instead of stopping it with this message.
        const MAX_SHARE: u64 = 1 << 40;
        if share > MAX_SHARE {
            return Err(invalid(
                "filter.memory",
                format!("{}B", self.memory),
                format!("at most 1TiB per slice ({slices} slices get {share}B each)"),
            ));
        }
        let decaying = DecayingSpec { seed: self.seed, ..DecayingSpec::new(kind, share.saturating_mul(8), self.fpr) };
        decaying.fingerprint().map_err(|e| match e.setting {
            "memory" => invalid(
                "filter.memory",
                format!("{}B", self.memory),
                format!(
                    "each of the {slices} slices gets {share}B ({} bits), which {} (with filter.fpr = {})",
                    share.saturating_mul(8),
                    e.rule,
                    self.fpr
                ),
            ),
            other => invalid(&format!("filter.{other}"), e.value, e.rule),
        })?;
        let timer =
            FilterSpec { expected_keys: slices, total_cells: None, growth: Growth::None, max_generations: 1, ..timer };
        Ok((timer, decaying))
    }
}
