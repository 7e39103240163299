//! Daemon settings: defaults < the settings file < environment
//! (`DEDUPD__SECTION__KEY`), then validated at start-up. Every error names the
//! setting, the value and the rule. The file is the one `--config` or
//! `DEDUPD_CONFIG` names, else the first of [`SEARCH_PATH`] that exists, else
//! none ([`SettingsFile::locate`]).
//!
//! The file documents every setting (`config/dedupd.toml`); the structs here
//! are the single source of their names, defaults and rules.
//!
//! - `mod.rs`: [`Settings`], one field per section; the layers
//!   ([`Settings::load`]); what valid settings resolve to ([`Resolved`]).
//! - `validate.rs`: [`Settings::validate`] — the core sections' rules, each
//!   feature's check in turn (the list of features), the rules across sections.
//! - `sections.rs`: the core sections (`[app]`, `[input]`, `[slicing]`,
//!   `[output]`, `[checkpoint]`, `[topics]`, `[shutdown]`, `[log]`).
//! - `roles.rs`: one topic, one role (the rule across the topic settings).
//! - `filter.rs`: `[filter]`. `kafka.rs`: `[kafka]`. `admin.rs`: `[admin]`
//!   and the bearer token. `secret.rs`: secrets and their redaction.
//! - `file.rs`: which settings file is read. `defaults.rs`: the built-in
//!   defaults of the core sections (a feature's section has its own, in its
//!   folder: `#[serde(default)]`).
//! - `error.rs`, `values.rs`: what every section's file may import —
//!   [`ConfigError`] and the rules several sections share; [`Scalar`] and
//!   the serde helpers of durations and byte sizes.
//!
//! A feature's own section (`[limit]`, `[flag]`, `[provenance]`,
//! `[availability]`, `[tier]`) lives in its folder, `crate::features`, with
//! its defaults and validation, and is re-exported here. Those files import only
//! `error.rs`, `values.rs` and the sections they check against, never this
//! file: that is what keeps the modules free of import circles.

mod admin;
mod defaults;
pub(crate) mod error;
mod file;
pub(crate) mod filter;
mod formats;
mod kafka;
mod memory;
mod roles;
mod secret;
pub(crate) mod sections;
mod validate;
pub(crate) mod values;

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

use crate::engine::{KeySpec, OrderSettings, TimeSpec};
use crate::filter::FilterSpec;
use admin::admin_token_env;
use defaults::defaults;

pub use admin::{ADMIN_TOKEN_ENV, AdminSettings, KeyEndpoints};
pub use error::ConfigError;
pub use file::{CONFIG_ENV, ChosenBy, SEARCH_PATH, SettingsFile};
pub use filter::FilterSettings;
pub use kafka::{ClientValue, KafkaSettings};
pub use secret::{REDACTED, Secret, is_secret_setting};
pub use sections::{
    AppSettings, CheckpointSettings, CorruptPolicy, InputSettings, InputStart, LogFormat, LogSettings, MemorySettings,
    OutputSettings, ShutdownSettings, SliceLogFormat, SlicingMode, SlicingSettings, TopicSettings,
};
pub use values::Scalar;

pub use crate::features::availability::{AvailabilityPolicy, AvailabilitySettings};
pub use crate::features::limits::{FlagSettings, LimitSettings};
pub use crate::features::provenance::ProvenanceSettings;
pub use crate::features::tiers::{Tier, TierSettings};

/// The default checkpoint topic is `<app.id>` and this.
const CHECKPOINT_SUFFIX: &str = ".checkpoints";
/// The default output topic (`output.topic` empty) is `<app.id>` and this.
const OUTPUT_SUFFIX: &str = ".distinct";
/// The default dead-letter topic (`output.dead_letter_topic` empty) is `<app.id>` and this.
const DEAD_LETTER_SUFFIX: &str = ".dead-letter";

/// The longest `app.id`, in bytes: `<app.id>.flushes`, which every mode
/// writes, is a Kafka topic name (at most 249 bytes).
pub const MAX_APP_ID_BYTES: usize = 249 - ".flushes".len();

/// All settings, one struct per section.
///
/// These structs derive `Serialize`: `dedupd check-config
/// --print-resolved` prints them (secrets as [`REDACTED`]), and the test
/// `config/dedupd.toml documents every setting` enumerates the settings
/// they accept from the serialised defaults, so a new field fails it until
/// `config/dedupd.toml` documents it. Serialise every field (no
/// `skip_serializing*`), and give a new field's type a
/// `#[derive(serde::Serialize)]` too.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub app: AppSettings,
    pub kafka: KafkaSettings,
    pub input: InputSettings,
    pub filter: FilterSettings,
    pub slicing: SlicingSettings,
    pub memory: MemorySettings,
    pub output: OutputSettings,
    pub checkpoint: CheckpointSettings,
    #[serde(default)]
    pub availability: AvailabilitySettings,
    pub admin: AdminSettings,
    pub topics: TopicSettings,
    pub shutdown: ShutdownSettings,
    pub log: LogSettings,
    #[serde(default)]
    pub provenance: ProvenanceSettings,
    #[serde(default)]
    pub tier: TierSettings,
    #[serde(default)]
    pub limit: LimitSettings,
    #[serde(default)]
    pub flag: FlagSettings,
}

/// Everything derived from valid settings, typed.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub settings: Settings,
    /// `input.start`.
    pub input_start: InputStart,
    pub key: KeySpec,
    pub time: TimeSpec,
    /// `input.format` avro or protobuf: how the payloads' fields are read
    /// (with the schemas of `input.schemas` / `input.schema_registry`).
    pub decoder: Option<std::sync::Arc<crate::engine::formats::Decoder>>,
    /// The timer filter's settings (for a kind that judges instead, its
    /// idle timer filter's).
    pub filter: FilterSpec,
    /// `filter.kind` and its settings ([`Resolved::filter_choice`]).
    pub kind: crate::filter::KindSpec,
    pub slicing: SlicingMode,
    /// `slicing.log_format` (repartition mode only).
    pub slice_log_format: SliceLogFormat,
    pub on_corrupt: CorruptPolicy,
    /// `availability.policy`.
    pub availability: AvailabilityPolicy,
    pub admin_listen: SocketAddr,
    /// `admin.health_listen`, if set.
    pub health_listen: Option<SocketAddr>,
    /// `admin.key_endpoints` with its token.
    pub key_endpoints: KeyEndpoints,
    /// `filter.kind = "passthrough"`: no deduplication (to measure its cost).
    pub passthrough: bool,
    /// `slicing.order_tolerance` in ms.
    pub order_tolerance_ms: u64,
    /// Event-time order in the slices (`input.lateness` and the time-jump rule).
    pub order: OrderSettings,
    /// `log.format`.
    pub log_format: LogFormat,
    /// The stages the slices run: every feature's, on or off, in the
    /// order of the list of features.
    pub stages: crate::engine::slice::stages::StageSetups,
    /// `[tier]`: this instance's level in a multi-level deployment.
    pub tier: Tier,
    /// The filters' worst case against `filter.max_memory` and the
    /// container's limit; `filter.max_generations` is its count.
    pub memory: crate::memory::MemoryPlan,
    /// `memory.limit` divided among the buffers (docs/capacity.md).
    pub budget: crate::memory::Budget,
}

impl Resolved {
    /// The topic the slice workers consume.
    pub fn slice_topic(&self) -> String {
        match self.slicing {
            SlicingMode::Repartition | SlicingMode::Shared => format!("{}.slices", self.settings.app.id),
            SlicingMode::InputPartitions => self.settings.input.topics[0].clone(),
        }
    }

    /// The log of idle flushes, partition = slice: a slice whose input goes
    /// quiet judges its waiting records after writing a flush record here,
    /// so a replay flushes at the same place (see `kafka::worker`).
    pub fn flush_topic(&self) -> String {
        format!("{}.flushes", self.settings.app.id)
    }

    /// A sparse leaf's cache: the filter the root runs (window, tick, k,
    /// equal timers, seed), as one filter for all keys, keeping cells for
    /// `tier.verdict_delay` behind its clock so that late verdicts are set
    /// at their own time.
    pub fn leaf_cache(&self) -> Result<crate::filter::FilterParams, crate::filter::ParamError> {
        crate::features::tiers::settings::leaf_cache(&self.filter, self.settings.tier.verdict_delay)
    }

    /// The kind the slices judge with and its settings (validated at load).
    pub fn filter_choice(&self) -> Result<crate::filter::FilterChoice, crate::filter::ParamError> {
        self.kind.choose(self.filter.resolve()?)
    }
}

impl Settings {
    /// `checkpoint.topic` when it is empty: `<app.id>.checkpoints`. Snapshots
    /// belong to one application (their manifests name it, and restore
    /// refuses another's), so the default never shares a topic between two.
    pub fn default_checkpoint_topic(&self) -> String {
        format!("{}{CHECKPOINT_SUFFIX}", self.app.id)
    }

    /// `output.topic` when it is empty: `<app.id>.distinct`. Every output
    /// record names its application and restore reads only its own, but
    /// by default two applications never share an output topic either.
    pub fn default_output_topic(&self) -> String {
        format!("{}{OUTPUT_SUFFIX}", self.app.id)
    }

    /// `output.dead_letter_topic` when it is empty: `<app.id>.dead-letter`.
    pub fn default_dead_letter_topic(&self) -> String {
        format!("{}{DEAD_LETTER_SUFFIX}", self.app.id)
    }

    /// The topic settings an empty value derives from `app.id`: (setting,
    /// suffix, value).
    fn derived_topics(&mut self) -> [(&'static str, &'static str, &mut String); 3] {
        [
            ("output.topic", OUTPUT_SUFFIX, &mut self.output.topic),
            ("output.dead_letter_topic", DEAD_LETTER_SUFFIX, &mut self.output.dead_letter_topic),
            ("checkpoint.topic", CHECKPOINT_SUFFIX, &mut self.checkpoint.topic),
        ]
    }

    /// Loads defaults < `file` (if given) < the environment, then validates.
    pub fn load(file: Option<&Path>) -> Result<Resolved, ConfigError> {
        Self::load_from(file, std::env::vars())
    }

    /// [`Settings::load`] with the environment given explicitly (for tests).
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Resolved, ConfigError> {
        let mut builder = defaults();
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::Load(format!("the settings file {} does not exist", path.display())));
            }
            builder = builder.add_source(config::File::from(path).format(config::FileFormat::Toml));
        }
        Self::load_layers(builder, env)
    }

    /// [`Settings::load_from`] with the settings file's text instead of its
    /// path: the same layers and rules, without touching the file system
    /// (the config fuzz target feeds it arbitrary text).
    pub fn load_from_str(toml: &str, env: impl IntoIterator<Item = (String, String)>) -> Result<Resolved, ConfigError> {
        Self::load_layers(defaults().add_source(config::File::from_str(toml, config::FileFormat::Toml)), env)
    }

    /// Adds the environment over `builder` (defaults and file), then
    /// deserialises and validates.
    fn load_layers(
        mut builder: config::ConfigBuilder<config::builder::DefaultState>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Resolved, ConfigError> {
        let mut env: Vec<(String, String)> = env.into_iter().collect();
        admin_token_env(&mut env)?;
        // librdkafka settings and the admin settings (secrets among them) stay
        // text: a password or token "007" must not become 7.
        let (text_env, env): (config::Map<String, String>, config::Map<String, String>) = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("DEDUPD__"))
            .partition(|(k, _)| k.starts_with("DEDUPD__KAFKA__") || k.starts_with("DEDUPD__ADMIN__"));
        let environment = |vars: config::Map<String, String>, parse: bool| {
            config::Environment::with_prefix("DEDUPD")
                .prefix_separator("__")
                .separator("__")
                .list_separator(",")
                .with_list_parse_key("input.topics")
                .try_parsing(parse)
                .source(Some(vars))
        };
        builder = builder.add_source(environment(env, true)).add_source(environment(text_env, false));
        let raw = builder.build().map_err(|e| ConfigError::Load(e.to_string()))?;
        let settings: Settings = raw.try_deserialize().map_err(|e| ConfigError::Load(e.to_string()))?;
        settings.validate()
    }
}

#[cfg(test)]
mod tests;
