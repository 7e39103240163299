//! What the flags of `dedupd filter` make, validated: the filter of each
//! kind, the counting stage, the record decoder and the ordering settings.
//! An error names the flag, its value and the rule.

use std::path::PathBuf;

use anyhow::Context;

use super::FilterArgs;
use crate::engine::formats::{self, Decoder, Format, Registry, Schemas};
use crate::engine::{OrderSettings, TimeSpec};
use crate::filter::counting::{CountingSpec, CountingStage};
use crate::filter::decaying;
use crate::filter::spectral::SpectralParams;
use crate::filter::{DecayingFilter, DecayingKind, DecayingSpec, FilterSpec, KindName, ParamError};

impl FilterArgs {
    /// The counting stage, if --max-per-window or --flag-threshold asks for
    /// one; errors name the flag, value and rule.
    pub fn counting_stage(&self) -> anyhow::Result<Option<CountingStage>> {
        if self.max_per_window.is_none() && self.flag_threshold.is_none() {
            for (flag, given) in [("--count-key", self.count_key.is_some()), ("--flags", self.flags.is_some())] {
                if given {
                    anyhow::bail!("{flag} needs --max-per-window or --flag-threshold");
                }
            }
            return Ok(None);
        }
        if self.flags.is_some() && self.flag_threshold.is_none() {
            anyhow::bail!("--flags needs --flag-threshold");
        }
        if self.kind != KindName::Timer {
            anyhow::bail!(
                "invalid --kind {}: --max-per-window and --flag-threshold work with the timer kind",
                self.kind.as_str()
            );
        }
        let expected = self.count_expected.or(self.expected.0).unwrap_or(0);
        let spec = CountingSpec {
            params: SpectralParams {
                estimator: self.estimator,
                counters: CountingSpec::counters_for_expected(expected, self.subwindows, self.count_hashes),
                hashes: self.count_hashes,
                counter_bits: self.counter_bits,
                store: self.counters,
            },
            window_ms: self.window,
            subwindows: self.subwindows,
            max_per_window: self.max_per_window,
            flag_threshold: self.flag_threshold,
        };
        spec.build().map(Some).map_err(|e| match e.setting {
            "hashes" => anyhow::anyhow!("invalid --count-hashes {}: {}", e.value, e.rule),
            "counters" => {
                anyhow::anyhow!("invalid --count-expected {expected}: gives {} counters, {}", e.value, e.rule)
            }
            _ => flag_error(e),
        })
    }
}

impl FilterArgs {
    /// The filter settings, validated; errors name the flag, value and rule.
    pub fn filter_spec(&self) -> FilterSpec {
        FilterSpec {
            window_ms: self.window,
            fpr: self.fpr,
            // 0 for `none`: refused, naming --expected, by the timer kind.
            expected_keys: self.expected.0.unwrap_or(0),
            headroom: self.headroom,
            equal_timers: self.equal_timers,
            growth: self.growth,
            slices: self.slices,
            timer_bits: self.timer_bits,
            tick_ms: self.tick,
            max_generations: self.max_generations,
            layout: self.layout,
            lateness_ms: Some(if self.time == TimeSpec::Arrival { 0 } else { self.lateness }),
            deletable: self.deletable,
            sized_growth: self.sized_growth,
            ..FilterSpec::default()
        }
    }
}

impl FilterArgs {
    /// The decaying filter of `rsbf` and `stable`, validated, from
    /// --load-state if given.
    pub fn decaying_filter(&self, kind: DecayingKind) -> anyhow::Result<DecayingFilter> {
        if self.slices != 1 {
            anyhow::bail!(
                "invalid --slices {}: the {} kind runs one filter over the whole stream (use 1)",
                self.slices,
                kind.as_str()
            );
        }
        let spec = DecayingSpec {
            hashes: self.hashes,
            seed: self.seed,
            ..DecayingSpec::new(kind, self.memory.saturating_mul(8), self.fpr)
        };
        let filter = spec.build().map_err(|e| match e.setting {
            // The spec counts bits; the flag is in bytes.
            "memory" => anyhow::anyhow!("invalid --memory {}B: {}", self.memory, e.rule),
            _ => flag_error(e),
        })?;
        match &self.load_state {
            None => Ok(filter),
            Some(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("cannot read the --load-state file {}", path.display()))?;
                decaying::decode(&bytes, &filter)
                    .with_context(|| format!("cannot restore the filter state in {}", path.display()))
            }
        }
    }

    /// The decoder of --format avro or protobuf (`None`: JSON), with the
    /// schemas of --schemas read and parsed.
    pub fn decoder(&self) -> anyhow::Result<Option<Decoder>> {
        if self.format == Format::Json {
            if let Some(dir) = &self.schemas {
                anyhow::bail!("invalid --schemas {}: for --format avro or protobuf", dir.display());
            }
            if let Some(url) = &self.schema_registry {
                anyhow::bail!("invalid --schema-registry {url}: for --format avro or protobuf");
            }
            return Ok(None);
        }
        if self.schemas.is_none() && self.schema_registry.is_none() && self.format != Format::JsonSchema {
            anyhow::bail!("invalid --format {}: needs --schemas DIR or --schema-registry URL", self.format);
        }
        let mut schemas = Schemas::default();
        if let Some(dir) = &self.schemas {
            schemas =
                Schemas::from_dir(dir).map_err(|e| anyhow::anyhow!("invalid --schemas {}: {e}", dir.display()))?;
            if schemas.is_empty() {
                anyhow::bail!("invalid --schemas {}: no <id>.avsc, <id>.proto or <id>.json file in it", dir.display());
            }
        }
        let registry = match &self.schema_registry {
            None => None,
            Some(url) => {
                use crate::schema_registry::{Access, HttpRegistry, Setting};
                let password = std::env::var("DEDUPD_SCHEMA_REGISTRY_PASSWORD").ok();
                let token = std::env::var("DEDUPD_SCHEMA_REGISTRY_TOKEN").ok();
                let access = Access {
                    url,
                    user: self.schema_registry_user.as_deref(),
                    password: password.as_deref(),
                    token: token.as_deref(),
                    ca_file: self.schema_registry_ca_file.as_deref(),
                    cert_file: self.schema_registry_cert_file.as_deref(),
                    key_file: self.schema_registry_key_file.as_deref(),
                };
                let shown = |p: &Option<PathBuf>| p.as_ref().map_or(String::new(), |p| p.display().to_string());
                let http = HttpRegistry::new(&access)
                    .map_err(|(setting, why)| {
                        let (flag, value) = match setting {
                            Setting::Url => ("--schema-registry", url.clone()),
                            Setting::Token => ("DEDUPD_SCHEMA_REGISTRY_TOKEN", "[redacted]".to_string()),
                            Setting::CaFile => ("--schema-registry-ca-file", shown(&self.schema_registry_ca_file)),
                            Setting::CertFile => {
                                ("--schema-registry-cert-file", shown(&self.schema_registry_cert_file))
                            }
                            Setting::KeyFile => ("--schema-registry-key-file", shown(&self.schema_registry_key_file)),
                        };
                        anyhow::anyhow!("invalid {flag} {value}: {why}")
                    })?
                    .waiting(crate::schema_registry::Waiting::Until(super::PIPE_REGISTRY_WAIT));
                Some(std::sync::Arc::new(Registry::new(Box::new(http), std::time::Duration::from_secs(30))))
            }
        };
        formats::limit_avro_allocations(self.max_record_bytes);
        Ok(Some(Decoder { format: self.format, schemas, registry }))
    }

    /// The ordering settings, validated.
    pub fn order_settings(&self) -> anyhow::Result<OrderSettings> {
        let lateness_ms = if self.time == TimeSpec::Arrival { 0 } else { self.lateness };
        if lateness_ms >= self.window {
            anyhow::bail!("invalid --lateness {lateness_ms}ms: must be shorter than --window ({}ms)", self.window);
        }
        if self.jump_confirmations == 0 {
            anyhow::bail!("invalid --jump-confirmations 0: must be at least 1");
        }
        let max_clock_jump_ms = self.max_clock_jump.unwrap_or(self.window);
        if max_clock_jump_ms == 0 {
            anyhow::bail!("invalid --max-clock-jump 0ms: must be at least 1ms");
        }
        Ok(OrderSettings { lateness_ms, max_clock_jump_ms, jump_confirmations: self.jump_confirmations })
    }
}

/// Names a [`ParamError`] by its flag.
pub(super) fn flag_error(e: ParamError) -> anyhow::Error {
    anyhow::anyhow!("invalid --{} {}: {}", e.setting.replace('_', "-"), e.value, e.rule)
}
