//! `[limit]` and `[flag]`: the counting stage's settings and their rules.

use serde::Deserialize;

use super::stage::CountingSetup;
use crate::config::error::{ConfigError, invalid};
use crate::config::filter::FilterSettings;
use crate::filter::counting::CountingSpec;
use crate::filter::spectral::SpectralParams;

/// Frequency limits (docs/spectral.md): at most N records of a
/// count key per window, counted by windowed Spectral Bloom Filters. The
/// counting stage runs when `max_per_window` or `flag.threshold` is set;
/// its settings here serve both. Names are pipe mode's flags'.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// The most records of a count key let through per `filter.window`; the
    /// (N+1)-th and later copies in the window are duplicates. 0: no limit.
    pub max_per_window: u64,
    /// What records are counted by: `record-key`, `json:/pointer`,
    /// `header:NAME` or `payload`; empty: the dedup key (`input.key`), and
    /// the counting stage then replaces the timer filter.
    pub count_key: String,
    /// `mi` (minimal increase, the most accurate), `ms` (minimum selection)
    /// or `rm` (recurring minimum; may undercount, see docs/spectral.md).
    pub estimator: String,
    /// Sub-windows per window (8 to 64): a window's counts cover between W
    /// and W + W/subwindows of history.
    pub subwindows: u32,
    /// Bits per counter (4, 8, 16 or 32); `max_per_window` and
    /// `flag.threshold` must be at most 2^bits - 1.
    pub counter_bits: u8,
    /// Hashes k per count key.
    pub count_hashes: u32,
    /// Distinct count keys expected per window, all slices together; 0:
    /// `filter.expected_keys`. Sizes each sub-window's counters.
    pub count_expected: u64,
    /// How counters are kept: `fixed` (every counter `counter_bits` wide,
    /// the fastest) or `compact` (variable-length codes: less memory on
    /// skewed keys, slower; docs/spectral.md). Same estimates, same snapshots.
    pub counters: String,
}

/// The section's defaults, when the settings file and the environment
/// leave a setting out: no limit.
impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            max_per_window: 0,
            count_key: String::new(),
            estimator: "mi".into(),
            subwindows: 16,
            counter_bits: 8,
            count_hashes: 5,
            count_expected: 0,
            counters: "fixed".into(),
        }
    }
}

/// Flags: the record at which a count key's estimated count in
/// the window reaches `threshold` is copied to `topic`, exactly once.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlagSettings {
    /// The count at which a key is flagged; 0: no flags. Needs `topic`.
    pub threshold: u64,
    /// Where flagged records go (partition = slice, header `dedupd.count`);
    /// empty: no flags. Needs `threshold`.
    pub topic: String,
}

/// The section's defaults, when the settings file and the environment
/// leave a setting out: no flags.
impl Default for FlagSettings {
    fn default() -> Self {
        FlagSettings { threshold: 0, topic: String::new() }
    }
}

impl LimitSettings {
    /// The counting stage (`[limit]`, `flag`), `None` when neither asks
    /// for one; errors name the setting, the value and the rule.
    pub(crate) fn validate(
        &self,
        flag: &FlagSettings,
        filter: &FilterSettings,
        max_record_bytes: usize,
    ) -> Result<Option<CountingSetup>, ConfigError> {
        let (l, f) = (self, flag);
        match (f.threshold, f.topic.is_empty()) {
            (0, false) => return Err(invalid("flag.topic", &f.topic, "needs flag.threshold (at least 1)")),
            (t, true) if t > 0 => return Err(invalid("flag.threshold", t, "needs flag.topic (where flags go)")),
            _ => {}
        }
        let count_key = match l.count_key.as_str() {
            "" => None,
            text => Some(text.parse().map_err(|e| invalid("limit.count_key", text, e))?),
        };
        if l.max_per_window == 0 && f.threshold == 0 {
            if count_key.is_some() {
                return Err(invalid("limit.count_key", &l.count_key, "needs limit.max_per_window or flag.threshold"));
            }
            return Ok(None);
        }
        if filter.kind != "timer" {
            return Err(invalid(
                "filter.kind",
                &filter.kind,
                "limit.max_per_window and flag.threshold work with the timer kind (the counting stage counts \
                 over its window)",
            ));
        }
        if filter.deletable {
            return Err(invalid(
                "filter.deletable",
                true,
                "not with limit.max_per_window or flag.threshold: counts cannot be deleted (minimal increase \
                 refuses it), so a deleted key would still be limited and flagged",
            ));
        }
        let estimator = l.estimator.parse().map_err(|e| invalid("limit.estimator", &l.estimator, e))?;
        let expected = match (l.count_expected, filter.expected_keys) {
            (0, Some(n)) => n,
            (0, None) => {
                return Err(invalid(
                    "limit.count_expected",
                    0,
                    "needs a count of keys per window when filter.expected_keys is empty",
                ));
            }
            (n, _) => n,
        };
        // Per slice: the count keys spread over the slices as dedup keys do.
        let per_slice = expected.div_ceil(u64::from(filter.slices.max(1)));
        let spec = CountingSpec {
            params: SpectralParams {
                estimator,
                counters: CountingSpec::counters_for_expected(per_slice, l.subwindows, l.count_hashes),
                hashes: l.count_hashes,
                counter_bits: l.counter_bits,
                store: l.counters.parse().map_err(|e| invalid("limit.counters", &l.counters, e))?,
            },
            window_ms: filter.window,
            subwindows: l.subwindows,
            max_per_window: (l.max_per_window > 0).then_some(l.max_per_window),
            flag_threshold: (f.threshold > 0).then_some(f.threshold),
        };
        spec.build().map_err(|e| match e.setting {
            "max_per_window" => invalid("limit.max_per_window", e.value, e.rule),
            "flag_threshold" => invalid("flag.threshold", e.value, e.rule),
            "hashes" => invalid("limit.count_hashes", e.value, e.rule),
            "counters" => invalid(
                "limit.count_expected",
                expected,
                format!("gives {} counters per sub-window, which {}", e.value, e.rule),
            ),
            "window" => invalid("filter.window", e.value, e.rule),
            other => invalid(&format!("limit.{other}"), e.value, e.rule),
        })?;
        Ok(Some(CountingSetup { spec, count_key, max_record_bytes }))
    }
}
