//! `[filter]`: the filter kind, its window and sizing.

use serde::Deserialize;

use super::values::{bytes, duration_ms, optional_bytes, optional_count, optional_duration_ms};

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSettings {
    /// The kind of filter, by its name ([`crate::filter::KindName`]): the
    /// sliding timer Bloom filter `timer`, `passthrough` (no dedup), or
    /// another kind that judges instead of the timer filter.
    pub kind: String,
    /// Sliding window, e.g. `10m`.
    #[serde(deserialize_with = "duration_ms")]
    pub window: u64,
    /// Target false-positive rate.
    pub fpr: f64,
    /// Distinct keys per window, all slices together; empty: a kind that
    /// sizes itself from what it sees goes without (the timer kind needs it:
    /// `KindName::needs_estimate`).
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
    /// Timer generations sized from the live keys ([`crate::filter::FilterSpec::sized_growth`]).
    pub sized_growth: bool,
    /// The cap on all slices' filters together, e.g. `512MiB`; empty: half
    /// the container's memory limit, or no cap without one
    /// ([`crate::memory`]).
    #[serde(deserialize_with = "optional_bytes")]
    pub max_memory: Option<u64>,
}
