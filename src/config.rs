//! Daemon settings: defaults < the settings file < environment
//! (`DEDUPD__SECTION__KEY`), then validated at start-up. Every error names the
//! setting, the value and the rule. The file is the one `--config` or
//! `DEDUPD_CONFIG` names, else the first of [`SEARCH_PATH`] that exists, else
//! none ([`SettingsFile::locate`]).
//!
//! The file documents every setting (`config/dedupd.toml`); the structs here
//! are the single source of their names, defaults and rules.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::engine::{KeySpec, OrderSettings, TimeSpec};
use crate::filter::{DecayingKind, DecayingSpec, FilterChoice, FilterSpec, Growth};
use crate::units::{parse_bytes, parse_duration_ms};

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid setting {setting} = {value}: {rule}")]
    Invalid { setting: String, value: String, rule: String },
    #[error("cannot read the settings: {0}")]
    Load(String),
}

/// The rule for a header read from input records (`header:NAME`).
const RESERVED_HEADER_RULE: &str =
    "a header whose name does not start with \"dedupd.\" (dedupd removes those from input records)";

/// The longest topic name Kafka allows, in bytes.
const MAX_TOPIC_BYTES: usize = crate::engine::slice::MAX_TOPIC_BYTES;

/// The default checkpoint topic is `<app.id>` and this.
const CHECKPOINT_SUFFIX: &str = ".checkpoints";

fn invalid(setting: &str, value: impl fmt::Display, rule: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { setting: setting.to_string(), value: value.to_string(), rule: rule.into() }
}

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
    pub output: OutputSettings,
    pub checkpoint: CheckpointSettings,
    pub availability: AvailabilitySettings,
    pub admin: AdminSettings,
    pub topics: TopicSettings,
    pub shutdown: ShutdownSettings,
    pub log: LogSettings,
    pub provenance: ProvenanceSettings,
    pub tier: TierSettings,
    pub limit: LimitSettings,
    pub flag: FlagSettings,
}

/// Multi-level (Bloom tree) deployments, paper §6 (docs/tiers.md): regional
/// leaf instances in front of one root instance.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
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

impl TierSettings {
    /// The level, after checking what it needs. `not_timer`: `filter.kind`
    /// is not the timer filter, whose window the leaves' caches share.
    fn resolve(&self, s: &Settings, not_timer: bool) -> Result<Tier, ConfigError> {
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
                &s.filter.kind,
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
            if s.input.topics.iter().any(|t| t == name) {
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
        if tier == Tier::SparseLeaf && !(1..s.filter.window).contains(&self.verdict_delay) {
            return Err(invalid(
                "tier.verdict_delay",
                format!("{}ms", self.verdict_delay),
                format!("at least 1ms and shorter than filter.window ({} ms)", s.filter.window),
            ));
        }
        Ok(tier)
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

/// Frequency limits (issue 15; docs/spectral.md): at most N records of a
/// count key per window, counted by windowed Spectral Bloom Filters. The
/// counting stage runs when `max_per_window` or `flag.threshold` is set;
/// its settings here serve both. Names are pipe mode's flags'.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
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

/// Flags (issue 15): the record at which a count key's estimated count in
/// the window reaches `threshold` is copied to `topic`, exactly once.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FlagSettings {
    /// The count at which a key is flagged; 0: no flags. Needs `topic`.
    pub threshold: u64,
    /// Where flagged records go (partition = slice, header `dedupd.count`);
    /// empty: no flags. Needs `threshold`.
    pub topic: String,
}

impl Settings {
    /// The counting stage (`[limit]`, `[flag]`), `None` when neither asks
    /// for one; errors name the setting, the value and the rule.
    fn counting(&self) -> Result<Option<crate::engine::limits::CountingSetup>, ConfigError> {
        use crate::engine::CountingSpec;
        use crate::filter::spectral::{SpectralParams, counters_for};
        let (l, f) = (&self.limit, &self.flag);
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
        if self.filter.kind != "timer" {
            return Err(invalid(
                "filter.kind",
                &self.filter.kind,
                "limit.max_per_window and flag.threshold work with the timer kind (the counting stage counts \
                 over its window)",
            ));
        }
        if self.filter.deletable {
            return Err(invalid(
                "filter.deletable",
                true,
                "not with limit.max_per_window or flag.threshold: counts cannot be deleted (minimal increase \
                 refuses it), so a deleted key would still be limited and flagged",
            ));
        }
        let estimator = l.estimator.parse().map_err(|e| invalid("limit.estimator", &l.estimator, e))?;
        let expected = if l.count_expected == 0 { self.filter.expected_keys } else { l.count_expected };
        // Per slice: the count keys spread over the slices as dedup keys do.
        let per_slice = expected.div_ceil(u64::from(self.filter.slices.max(1)));
        let per_sub = (2 * per_slice).div_ceil(u64::from(l.subwindows.max(1)));
        let spec = CountingSpec {
            params: SpectralParams {
                estimator,
                counters: counters_for(per_sub, l.count_hashes.max(1), 0.7),
                hashes: l.count_hashes,
                counter_bits: l.counter_bits,
                store: l.counters.parse().map_err(|e| invalid("limit.counters", &l.counters, e))?,
            },
            window_ms: self.filter.window,
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
        Ok(Some(crate::engine::limits::CountingSetup { spec, count_key }))
    }
}

/// Which sources delivered each key (issue 16; docs/provenance.md).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
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
    ) -> Result<Option<crate::engine::provenance::ProvenanceSetup>, ConfigError> {
        use crate::filter::provenance::{IndexChoice, ProvenanceSpec};
        if self.source.is_empty() {
            return Ok(None);
        }
        let source = self.source.parse().map_err(|e| invalid("provenance.source", &self.source, e))?;
        if let crate::engine::provenance::SourceSpec::Header(name) = &source
            && crate::kafka::headers::is_reserved(name)
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
        Ok(Some(crate::engine::provenance::ProvenanceSetup { source, spec, input_topic: input_topic.to_string() }))
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AppSettings {
    /// Consumer group of the slice workers, and prefix of the internal topics.
    pub id: String,
}

/// A scalar librdkafka setting as written in the file or the environment.
#[derive(Debug, Clone, Deserialize, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Text(s) => f.write_str(s),
        }
    }
}

#[derive(Clone, Deserialize, serde::Serialize)]
pub struct KafkaSettings {
    /// Bootstrap brokers, `host:port[,host:port…]`.
    pub brokers: String,
    /// Any other librdkafka setting (TLS, SASL, client tuning), passed through
    /// to every client. In the environment write `_` for `.`:
    /// `DEDUPD__KAFKA__SESSION_TIMEOUT_MS=6000` sets `session.timeout.ms`.
    #[serde(flatten)]
    pub client: BTreeMap<String, ClientValue>,
}

/// A pass-through value. The settings loader reads a quoted dotted key such
/// as `"session.timeout.ms"` as nested tables, so nesting is folded back.
#[derive(Debug, Clone, Deserialize, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum ClientValue {
    Scalar(Scalar),
    Nested(BTreeMap<String, ClientValue>),
}

impl KafkaSettings {
    /// The pass-through settings with librdkafka's dotted names.
    pub fn client_settings(&self) -> Vec<(String, String)> {
        fn walk(prefix: &str, map: &BTreeMap<String, ClientValue>, out: &mut Vec<(String, String)>) {
            for (k, v) in map {
                let name =
                    if prefix.is_empty() { k.replace('_', ".") } else { format!("{prefix}.{}", k.replace('_', ".")) };
                match v {
                    ClientValue::Scalar(s) => out.push((name, s.to_string())),
                    ClientValue::Nested(inner) => walk(&name, inner, out),
                }
            }
        }
        let mut out = Vec::new();
        walk("", &self.client, &mut out);
        out
    }
}

/// Secret pass-through values (passwords, keys) are shown as [`REDACTED`].
impl fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let client: BTreeMap<String, String> = self
            .client_settings()
            .into_iter()
            .map(|(k, v)| if is_secret_setting(&k) { (k, REDACTED.to_string()) } else { (k, v) })
            .collect();
        f.debug_struct("KafkaSettings").field("brokers", &self.brokers).field("client", &client).finish()
    }
}

/// What dedupd shows in place of a secret.
pub const REDACTED: &str = "[redacted]";

/// Whether a librdkafka setting (dotted name) holds a secret: any name with
/// `password`, `secret`, `passphrase`, `token` or `private` in it, private
/// keys in PEM (`ssl.key.pem`) and `sasl.oauthbearer.config` (which may carry
/// client credentials). dedupd never logs or returns such a value. Erring on
/// the side of redaction costs nothing: these values are never needed in a log.
pub fn is_secret_setting(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "secret", "passphrase", "token", "private", "key.pem", "oauthbearer.config"]
        .iter()
        .any(|part| name.contains(part))
}

/// A setting value that never appears in logs, error messages or `Debug`
/// output (the admin bearer token): all three show [`REDACTED`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Serialised as [`REDACTED`] (empty as empty): `dedupd check-config
/// --print-resolved` prints the settings without it.
impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { REDACTED })
    }
}

/// Read through [`Scalar`], whose errors do not echo the value (serde's
/// "invalid type: integer `123`, expected a string" would).
impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Scalar::deserialize(d).map(|s| Secret(s.to_string()))
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct InputSettings {
    /// Topics to deduplicate.
    pub topics: Vec<String>,
    /// Where reading starts for an input partition this application has no
    /// position in yet (no committed offset, no snapshot): `earliest` (the
    /// oldest retained record: nothing is skipped on a first deployment) or
    /// `latest` (only records written after the daemon starts). A position
    /// once kept is resumed whatever this says. librdkafka's
    /// `auto.offset.reset` in `[kafka]` must not contradict it.
    pub start: String,
    /// The dedup key: `record-key`, `json:/pointer`, `header:NAME` or `payload`.
    pub key: String,
    /// The event time: `record-timestamp` or `json:/pointer` (epoch ms).
    pub time: String,
    /// Records (key + payload) larger than this go to the dead-letter topic (`too_large`).
    pub max_record_bytes: usize,
    /// How far behind the largest event time a slice has seen a record may
    /// arrive and still be judged in event-time order: records wait until
    /// the watermark (largest time − lateness) passes them.
    #[serde(deserialize_with = "duration_ms")]
    pub lateness: u64,
    /// A record more than this far ahead of the largest time its slice has
    /// seen is held as a suspect; empty: the filter window.
    #[serde(deserialize_with = "optional_duration_ms")]
    pub max_clock_jump: Option<u64>,
    /// Suspects in a row that confirm a jump of the stream's time; a suspect
    /// not confirmed goes to the dead-letter topic (`time_jump`).
    pub jump_confirmations: u32,
}

/// `input.start`: where reading starts in an input partition the
/// application has no position in yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputStart {
    /// The oldest retained record.
    Earliest,
    /// The end: only records written from now on.
    Latest,
}

impl InputStart {
    /// The value of librdkafka's `auto.offset.reset` that means the same.
    pub fn as_str(self) -> &'static str {
        match self {
            InputStart::Earliest => "earliest",
            InputStart::Latest => "latest",
        }
    }

    /// What a librdkafka `auto.offset.reset` value means (its aliases
    /// included); `None` for `error`, which starts nowhere.
    fn of_offset_reset(value: &str) -> Option<Self> {
        match value {
            "earliest" | "smallest" | "beginning" => Some(InputStart::Earliest),
            "latest" | "largest" | "end" => Some(InputStart::Latest),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSettings {
    /// `timer` (the sliding timer Bloom filter), `passthrough` (no dedup), or
    /// the count-based kinds with no window, `rsbf` (reservoir-sampling Bloom
    /// filter) and `stable` (Stable Bloom Filter).
    pub kind: String,
    /// Sliding window, e.g. `10m`.
    #[serde(deserialize_with = "duration_ms")]
    pub window: u64,
    /// Target false-positive rate.
    pub fpr: f64,
    /// Distinct keys per window, all slices together.
    pub expected_keys: u64,
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
    /// The cap on all slices' filters together, e.g. `512MiB`; empty: half
    /// the container's memory limit, or no cap without one
    /// ([`crate::memory`]).
    #[serde(deserialize_with = "optional_bytes")]
    pub max_memory: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlicingMode {
    /// Input records are re-keyed into `<app.id>.slices` by the router.
    Repartition,
    /// One input topic already partitioned by the dedup key: slice = input partition.
    InputPartitions,
    /// One slice judges every input partition with no copy of the records:
    /// the router writes only the order it read them in (read-order
    /// records, [`crate::engine::read_order`]) into `<app.id>.slices`, and
    /// the slice re-reads the records it names from the input
    /// (docs/shared-mode.md).
    Shared,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlicingSettings {
    /// `repartition`, `input-partitions` or `shared` (docs/shared-mode.md).
    pub mode: String,
    /// The router's tolerance for timestamp disorder across input partitions
    /// (a duration; `0ms` is strict order).
    pub order_tolerance: String,
    /// Repartition mode: records a slice may hold back while an input
    /// partition nobody routes (its router died, the group has not handed
    /// it over yet) keeps its watermark; beyond this the slice releases as
    /// if the partition were not there, and counts it
    /// (`dedupd_hold_overflows_total`). 1 to 100 000 000.
    pub max_held: u64,
    /// Bytes of records a slice may hold for the watermark: beyond them it
    /// flushes what it can release (logged, as an idle flush), e.g. `32MiB`.
    #[serde(deserialize_with = "bytes")]
    pub max_held_bytes: u64,
    /// Bytes the router may buffer per input partition before it pauses
    /// the partition, e.g. `16MiB`.
    #[serde(deserialize_with = "bytes")]
    pub max_buffered_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSettings {
    /// Distinct records, partition = slice.
    pub topic: String,
    /// Duplicates, partition = slice; empty drops them (they are counted).
    pub duplicates_topic: String,
    /// Records that cannot be read, with the reason in headers.
    pub dead_letter_topic: String,
    /// A copy of every record judged after arriving behind the watermark,
    /// with header `dedupd.late_by_ms`; empty: not copied (still counted).
    pub late_topic: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptPolicy {
    /// Log, count, and rebuild the slice from its retained log.
    ColdStart,
    /// Stop the daemon.
    Fail,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSettings {
    /// Compacted topic holding slice snapshots, partition = slice.
    pub topic: String,
    /// Snapshot each slice at least this often …
    #[serde(deserialize_with = "duration_ms")]
    pub interval: u64,
    /// … or after this many records, whichever comes first (0: time only).
    pub interval_records: u64,
    /// Snapshot chunk size in bytes (under the broker's message size limit).
    pub chunk_bytes: usize,
    /// What a corrupt or incompatible snapshot does: `cold-start` or `fail`.
    pub on_corrupt: String,
}

/// A slice that is not available yet (being restored after a rebalance),
/// paper §3.2 (docs/availability.md).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AvailabilitySettings {
    /// What the records of a slice being restored get: `wait` (held until
    /// the restore ends, exact), `deliver` (sent to the output at once as
    /// distinct: possible duplicates) or `drop` (sent to the duplicates
    /// topic at once: possible misses; needs `output.duplicates_topic`).
    /// Decisions are logged before their outputs, so restarts replay them.
    pub policy: String,
}

/// `availability.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvailabilityPolicy {
    /// Records of a slice being restored wait for it (exact).
    Wait,
    /// They are delivered at once, as distinct.
    Deliver,
    /// They go to the duplicates topic at once.
    Drop,
}

impl AvailabilityPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            AvailabilityPolicy::Wait => "wait",
            AvailabilityPolicy::Deliver => "deliver",
            AvailabilityPolicy::Drop => "drop",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "wait" => Some(AvailabilityPolicy::Wait),
            "deliver" => Some(AvailabilityPolicy::Deliver),
            "drop" => Some(AvailabilityPolicy::Drop),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    /// Address of the HTTP admin endpoint (`/metrics`, `/healthz`, `/readyz`,
    /// `/v1/slices`, and the key endpoints such as `/v1/lookup`).
    pub listen: String,
    /// Bearer token the key endpoints require; empty: none. Prefer `token_file`.
    pub token: Secret,
    /// A file holding the bearer token, read at start-up (a trailing newline
    /// is dropped); empty: none. Not together with `token`.
    pub token_file: String,
    /// The endpoints that reveal or change keys (`/v1/lookup`): `off` (404),
    /// `token` (bearer token required) or `auto` (`token` when a token is
    /// set, else `off`).
    pub key_endpoints: String,
}

/// Who may use the admin endpoints that reveal or change keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyEndpoints {
    /// They answer 404.
    Off,
    /// They answer only requests with `Authorization: Bearer <token>`.
    Token(Secret),
}

/// Bounds of a bearer token: long enough not to be guessed, and characters a
/// header carries unchanged (visible ASCII, no spaces).
const TOKEN_RULE: &str = "16 to 4096 visible ASCII characters (no spaces or control characters)";

fn valid_token(token: &str) -> bool {
    (16..=4096).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic())
}

impl AdminSettings {
    /// The bearer token (from `token` or `token_file`) and what it guards.
    fn key_endpoints(&self) -> Result<KeyEndpoints, ConfigError> {
        // Never the value itself in an error: its length is enough to spot a stray character.
        let shown = |t: &str| format!("{REDACTED} ({} bytes)", t.len());
        let token = match (self.token.is_empty(), self.token_file.is_empty()) {
            (false, false) => {
                return Err(invalid(
                    "admin.token",
                    REDACTED,
                    format!("set admin.token or admin.token_file ({}), not both", self.token_file),
                ));
            }
            (false, true) if !valid_token(self.token.expose()) => {
                return Err(invalid("admin.token", shown(self.token.expose()), TOKEN_RULE));
            }
            (false, true) => Some(self.token.clone()),
            (true, false) => {
                let file = &self.token_file;
                let text = std::fs::read_to_string(file)
                    .map_err(|e| invalid("admin.token_file", file, format!("a readable file with the token ({e})")))?;
                let token = text.trim_end_matches(['\n', '\r']);
                if !valid_token(token) {
                    return Err(invalid(
                        "admin.token_file",
                        file,
                        format!("the token in it ({}): {TOKEN_RULE}", shown(token)),
                    ));
                }
                Some(Secret::new(token))
            }
            (true, true) => None,
        };
        match (self.key_endpoints.as_str(), token) {
            ("auto" | "token", Some(token)) => Ok(KeyEndpoints::Token(token)),
            ("auto" | "off", _) => Ok(KeyEndpoints::Off),
            ("token", None) => Err(invalid(
                "admin.key_endpoints",
                "token",
                "needs a bearer token: set admin.token_file (or admin.token)",
            )),
            (other, _) => Err(invalid("admin.key_endpoints", other, "expected auto, off or token")),
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// Create the topics dedupd owns when they are missing, with
    /// `max.message.bytes` = the producers' `message.max.bytes`.
    pub auto_create: bool,
    /// Replication factor of created topics; -1: the broker's default
    /// (`default.replication.factor`).
    pub replication_factor: i32,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownSettings {
    /// Longest time a graceful shutdown may take before the daemon exits anyway.
    #[serde(deserialize_with = "duration_ms")]
    pub timeout: u64,
}

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// env_logger's `[TIME LEVEL TARGET] message` lines (what people, tests and scripts read).
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, `fields` (for log shippers).
    Json,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// `text` or `json`; the level filter is `RUST_LOG` (default `info`).
    pub format: String,
    /// How often one INFO line sums up what happened since the last one
    /// (records in, verdicts, dead letters, lag); nothing is logged for an
    /// interval in which nothing happened. `0s`: never.
    #[serde(deserialize_with = "duration_ms")]
    pub summary_interval: u64,
}

fn duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    parse_duration_ms(&text).map_err(serde::de::Error::custom)
}

fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    parse_bytes(&text).map_err(serde::de::Error::custom)
}

fn optional_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    if text.trim().is_empty() { Ok(None) } else { parse_bytes(&text).map(Some).map_err(serde::de::Error::custom) }
}

fn optional_duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = Scalar::deserialize(d)?.to_string();
    if text.trim().is_empty() { Ok(None) } else { parse_duration_ms(&text).map(Some).map_err(serde::de::Error::custom) }
}

/// The environment variable that names the settings file when `--config` does not.
pub const CONFIG_ENV: &str = "DEDUPD_CONFIG";

/// The environment variable of the admin bearer token: `admin.token` for
/// the daemon, and the token `dedupd keys` sends. The settings' own
/// variable, `DEDUPD__ADMIN__TOKEN`, is read too.
pub const ADMIN_TOKEN_ENV: &str = "DEDUPD_ADMIN_TOKEN";

/// The settings' own environment variable of `admin.token`.
const ADMIN_TOKEN_SETTING_ENV: &str = "DEDUPD__ADMIN__TOKEN";

/// Reads [`ADMIN_TOKEN_ENV`] in `env` as `admin.token`
/// ([`ADMIN_TOKEN_SETTING_ENV`]): both set to different tokens is an error
/// naming both (never the tokens); empty counts as unset.
fn admin_token_env(env: &mut Vec<(String, String)>) -> Result<(), ConfigError> {
    let value = |name: &str| env.iter().rev().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.clone());
    match (value(ADMIN_TOKEN_ENV), value(ADMIN_TOKEN_SETTING_ENV)) {
        (Some(short), Some(long)) if short != long => Err(invalid(
            "admin.token",
            REDACTED,
            format!(
                "{ADMIN_TOKEN_ENV} and {ADMIN_TOKEN_SETTING_ENV} are both set, to different tokens: set one of them \
                 ({ADMIN_TOKEN_ENV}, the variable `dedupd keys` reads too)"
            ),
        )),
        (Some(token), None) => {
            env.push((ADMIN_TOKEN_SETTING_ENV.to_string(), token));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Where `dedupd run` looks for a settings file when neither `--config` nor
/// [`CONFIG_ENV`] names one, in order: `config/dedupd.toml` under the working
/// directory (a checkout), then `/etc/dedupd/dedupd.toml` (the container image
/// and the Helm chart put it there).
pub const SEARCH_PATH: [&str; 2] = ["config/dedupd.toml", "/etc/dedupd/dedupd.toml"];

/// How the settings file was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    /// The `--config` flag.
    Flag,
    /// A command's argument (`dedupd check-config FILE`).
    Argument,
    /// The [`CONFIG_ENV`] variable.
    Env,
    /// The first of the search path that exists.
    Search,
}

impl fmt::Display for ChosenBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChosenBy::Flag => f.write_str("named by --config"),
            ChosenBy::Argument => f.write_str("named on the command line"),
            ChosenBy::Env => write!(f, "named by {CONFIG_ENV}"),
            ChosenBy::Search => f.write_str("found on the search path"),
        }
    }
}

/// The settings file `dedupd run` reads, and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingsFile {
    /// `path` exists.
    Found { path: PathBuf, by: ChosenBy },
    /// No file: built-in defaults and the environment only. `looked_in` is the
    /// search path as searched (relative entries made absolute).
    NotFound { looked_in: Vec<PathBuf> },
}

impl SettingsFile {
    /// Picks the settings file: the `--config` flag (`flag`), else the value of
    /// [`CONFIG_ENV`] (`env`; empty counts as unset), else the first of
    /// `search` (normally [`SEARCH_PATH`]) that is a file, else none. A file
    /// named by the flag or the variable must exist: its absence is an error
    /// naming it, never a silent fall-back to the defaults.
    pub fn locate(flag: Option<&Path>, env: Option<&OsStr>, search: &[PathBuf]) -> Result<Self, ConfigError> {
        let named = match (flag, env.filter(|v| !v.is_empty())) {
            (Some(path), _) => Some((path, ChosenBy::Flag)),
            (None, Some(value)) => Some((Path::new(value), ChosenBy::Env)),
            (None, None) => None,
        };
        if let Some((path, by)) = named {
            return Self::named(path, by);
        }
        match search.iter().find(|p| p.is_file()) {
            Some(path) => Ok(SettingsFile::Found { path: path.clone(), by: ChosenBy::Search }),
            None => Ok(SettingsFile::NotFound { looked_in: search.iter().map(|p| absolute(p)).collect() }),
        }
    }

    /// The file `path`, named as `by` says; an error naming it if it does not exist.
    pub fn named(path: &Path, by: ChosenBy) -> Result<Self, ConfigError> {
        if !path.exists() {
            let shown = absolute(path);
            return Err(ConfigError::Load(format!("the settings file {} ({by}) does not exist", shown.display())));
        }
        Ok(SettingsFile::Found { path: path.to_path_buf(), by })
    }

    /// [`SettingsFile::locate`] with this process's `--config`, environment and [`SEARCH_PATH`].
    pub fn locate_default(flag: Option<&Path>) -> Result<Self, ConfigError> {
        let search: Vec<PathBuf> = SEARCH_PATH.iter().map(PathBuf::from).collect();
        Self::locate(flag, std::env::var_os(CONFIG_ENV).as_deref(), &search)
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            SettingsFile::Found { path, .. } => Some(path),
            SettingsFile::NotFound { .. } => None,
        }
    }
}

/// What `dedupd run` logs at start-up.
impl fmt::Display for SettingsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsFile::Found { path, by } => {
                write!(f, "reading settings from {} ({by}) and the environment", absolute(path).display())
            }
            SettingsFile::NotFound { looked_in } => {
                let places: Vec<String> = looked_in.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "no settings file found (looked in --config, {CONFIG_ENV}, {}); using built-in defaults and the \
                     environment",
                    places.join(", ")
                )
            }
        }
    }
}

/// `path` made absolute against the working directory, for messages.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The built-in defaults: the lowest layer.
const DEFAULTS: &str = r#"
[app]
id = "dedupd"
[kafka]
brokers = "localhost:9092"
[input]
topics = ["clicks"]
start = "earliest"
key = "record-key"
time = "record-timestamp"
max_record_bytes = 1048576
lateness = "2s"
max_clock_jump = ""
jump_confirmations = 16
[filter]
kind = "timer"
window = "10m"
fpr = 0.01
expected_keys = 1000000
headroom = 0.2
equal_timers = 0
growth = "density"
slices = 8
timer_bits = 8
tick = ""
max_generations = 12
memory = "8MiB"
seed = 25481510381
deletable = false
max_memory = ""
[slicing]
mode = "repartition"
order_tolerance = "0ms"
max_held = 200000
max_held_bytes = "32MiB"
max_buffered_bytes = "16MiB"
[output]
topic = "clicks.distinct"
duplicates_topic = ""
dead_letter_topic = "clicks.dead-letter"
late_topic = ""
[checkpoint]
topic = ""
interval = "30s"
interval_records = 1000000
chunk_bytes = 524288
on_corrupt = "cold-start"
[availability]
policy = "wait"
[admin]
listen = "127.0.0.1:9464"
token = ""
token_file = ""
key_endpoints = "auto"
[topics]
auto_create = true
replication_factor = -1
[shutdown]
timeout = "30s"
[log]
format = "text"
summary_interval = "60s"
[provenance]
source = ""
max_sources = 1000
index = "auto"
expected_keys_per_source = 100000
fpr = 0.01
tree_order = 2
[tier]
role = "single"
tree = "sparse"
parent_topic = ""
verdict_topic = ""
verdict_delay = "30s"
[limit]
max_per_window = 0
count_key = ""
estimator = "mi"
subwindows = 16
counter_bits = 8
count_hashes = 5
count_expected = 0
counters = "fixed"
[flag]
threshold = 0
topic = ""
"#;

/// A sparse leaf's cache parameters: `root`'s filter as one filter for
/// all keys, with the root's tick (the leaf's verdicts then expire on the
/// same tick as the root's cells) and lateness `verdict_delay`.
fn leaf_cache(root: &FilterSpec, verdict_delay: u64) -> Result<crate::filter::FilterParams, crate::filter::ParamError> {
    let tick_ms = Some(root.resolve()?.tick_ms);
    FilterSpec { slices: 1, lateness_ms: Some(verdict_delay), tick_ms, ..root.clone() }.resolve()
}

/// The largest `slicing.max_held`: a slice holding this many records of a
/// few hundred bytes already needs tens of GB.
const MAX_HELD_LIMIT: u64 = 100_000_000;

/// The largest byte budget for held or buffered records.
const MAX_BUDGET_BYTES: u64 = 1 << 40;

/// A loader holding the built-in defaults, the lowest layer.
fn defaults() -> config::ConfigBuilder<config::builder::DefaultState> {
    config::Config::builder().add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
}

/// Everything derived from valid settings, typed.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub settings: Settings,
    /// `input.start`.
    pub input_start: InputStart,
    pub key: KeySpec,
    pub time: TimeSpec,
    /// The timer filter's settings (for a decaying kind, its idle timer filter's).
    pub filter: FilterSpec,
    /// `filter.kind = "rsbf" | "stable"`: the decaying kind that judges
    /// instead of the timer filter ([`Resolved::filter_choice`]).
    pub decaying: Option<DecayingSpec>,
    pub slicing: SlicingMode,
    pub on_corrupt: CorruptPolicy,
    /// `availability.policy`.
    pub availability: AvailabilityPolicy,
    pub admin_listen: SocketAddr,
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
    /// `[provenance]`; `None`: off.
    pub provenance: Option<crate::engine::provenance::ProvenanceSetup>,
    /// `[tier]`: this instance's level in a multi-level deployment.
    pub tier: Tier,
    /// The counting stage (`[limit]`, `[flag]`); `None`: off.
    pub counting: Option<crate::engine::limits::CountingSetup>,
    /// The filters' worst case against `filter.max_memory` and the
    /// container's limit; `filter.max_generations` is its count.
    pub memory: crate::memory::MemoryPlan,
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
        leaf_cache(&self.filter, self.settings.tier.verdict_delay)
    }

    /// The kind the slices judge with and its settings (validated at load).
    pub fn filter_choice(&self) -> Result<FilterChoice, crate::filter::ParamError> {
        let params = self.filter.resolve()?;
        Ok(match &self.decaying {
            None => FilterChoice::Timer(params),
            Some(spec) => FilterChoice::Decaying(params, spec.clone()),
        })
    }
}

impl FilterSettings {
    /// The settings of a decaying kind: one filter per slice with an
    /// equal share of `memory`, judging instead of the timer filter, whose
    /// `timer` spec (validated) is shrunk to the smallest there is: it stays
    /// empty, and its window only bounds `input.lateness` and is the default
    /// of `input.max_clock_jump`.
    fn decaying_spec(&self, kind: DecayingKind, timer: FilterSpec) -> Result<(FilterSpec, DecayingSpec), ConfigError> {
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

impl Settings {
    /// `checkpoint.topic` when it is empty: `<app.id>.checkpoints`. Snapshots
    /// belong to one application (their manifests name it, and restore
    /// refuses another's), so the default never shares a topic between two.
    pub fn default_checkpoint_topic(&self) -> String {
        format!("{}{CHECKPOINT_SUFFIX}", self.app.id)
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

    /// Checks every rule and derives the typed settings.
    pub fn validate(mut self) -> Result<Resolved, ConfigError> {
        // The checkpoint topic belongs to one application: by default its own.
        if self.checkpoint.topic.is_empty() {
            self.checkpoint.topic = self.default_checkpoint_topic();
        }
        let s = &self;
        let topic_name = |setting: &str, name: &str, optional: bool| -> Result<(), ConfigError> {
            if name.is_empty() && optional {
                return Ok(());
            }
            let legal = !name.is_empty()
                && name.len() <= 249
                && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                && name != "."
                && name != "..";
            if legal {
                Ok(())
            } else {
                Err(invalid(setting, format!("{name:?}"), "a Kafka topic name: 1 to 249 of [a-zA-Z0-9._-]"))
            }
        };
        if s.app.id.is_empty() || !s.app.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
            return Err(invalid(
                "app.id",
                format!("{:?}", s.app.id),
                "1 or more of [a-zA-Z0-9._-] (it prefixes topic names)",
            ));
        }
        if s.kafka.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "\"\"", "at least one host:port"));
        }
        if s.input.topics.is_empty() {
            return Err(invalid("input.topics", "[]", "at least one topic"));
        }
        for t in &s.input.topics {
            topic_name("input.topics", t, false)?;
        }
        let input_start = match s.input.start.as_str() {
            "earliest" => InputStart::Earliest,
            "latest" => InputStart::Latest,
            other => return Err(invalid("input.start", other, "expected earliest or latest")),
        };
        // The group consumers that read the input set auto.offset.reset
        // from input.start: a [kafka] value saying otherwise would be
        // silently overridden.
        if let Some((_, reset)) = s.kafka.client_settings().into_iter().find(|(k, _)| k == "auto.offset.reset")
            && InputStart::of_offset_reset(&reset) != Some(input_start)
        {
            return Err(invalid(
                "kafka.auto.offset.reset",
                &reset,
                format!(
                    "contradicts input.start = {} (where dedupd starts reading an input partition it has no \
                     position in): set input.start (earliest or latest) and remove kafka.auto.offset.reset",
                    input_start.as_str()
                ),
            ));
        }
        topic_name("output.topic", &s.output.topic, false)?;
        topic_name("output.duplicates_topic", &s.output.duplicates_topic, true)?;
        topic_name("output.dead_letter_topic", &s.output.dead_letter_topic, false)?;
        topic_name("output.late_topic", &s.output.late_topic, true)?;
        topic_name("flag.topic", &s.flag.topic, true)?;
        if s.checkpoint.topic == s.default_checkpoint_topic() && s.checkpoint.topic.len() > MAX_TOPIC_BYTES {
            return Err(invalid(
                "app.id",
                format!("{:?}", s.app.id),
                format!(
                    "at most {} characters while checkpoint.topic is empty (its default, \"<app.id>.checkpoints\", \
                     is a Kafka topic name of at most {MAX_TOPIC_BYTES})",
                    MAX_TOPIC_BYTES - CHECKPOINT_SUFFIX.len()
                ),
            ));
        }
        topic_name("checkpoint.topic", &s.checkpoint.topic, false)?;
        let key: KeySpec = s.input.key.parse().map_err(|e| invalid("input.key", &s.input.key, e))?;
        if let KeySpec::Header(name) = &key
            && crate::kafka::headers::is_reserved(name)
        {
            return Err(invalid("input.key", &s.input.key, RESERVED_HEADER_RULE));
        }
        let time: TimeSpec = s.input.time.parse().map_err(|e| invalid("input.time", &s.input.time, e))?;
        if time == TimeSpec::Arrival {
            return Err(invalid(
                "input.time",
                "arrival",
                "the daemon reads time from records (record-timestamp or json:/pointer) so that restarts replay identically",
            ));
        }
        if s.input.max_record_bytes == 0 {
            return Err(invalid("input.max_record_bytes", 0, "at least 1"));
        }
        let (passthrough, count_kind) = match s.filter.kind.as_str() {
            "timer" => (false, None),
            "passthrough" => (true, None),
            "rsbf" => (false, Some(DecayingKind::Rsbf)),
            "stable" => (false, Some(DecayingKind::Stable)),
            other => return Err(invalid("filter.kind", other, "expected timer, passthrough, rsbf or stable")),
        };
        let growth: Growth = s.filter.growth.parse().map_err(|e| invalid("filter.growth", &s.filter.growth, e))?;
        let slicing = match s.slicing.mode.as_str() {
            "repartition" => SlicingMode::Repartition,
            "input-partitions" => SlicingMode::InputPartitions,
            "shared" => SlicingMode::Shared,
            other => return Err(invalid("slicing.mode", other, "expected repartition, input-partitions or shared")),
        };
        // Shared mode judges every input partition in one slice: its
        // positions are those of one log, and its outputs one partition.
        if slicing == SlicingMode::Shared && s.filter.slices != 1 {
            return Err(invalid(
                "filter.slices",
                s.filter.slices,
                "exactly 1 with slicing.mode = \"shared\" (one slice judges every input partition; \
                 docs/shared-mode.md)",
            ));
        }
        // Deletes travel as control records in the slice log, which in
        // input-partitions mode is the input topic: dedupd cannot write them
        // there, and the counting cells would double the memory for nothing.
        if s.filter.deletable && slicing == SlicingMode::InputPartitions {
            return Err(invalid(
                "filter.deletable",
                true,
                "deletes need slicing.mode = \"repartition\" or \"shared\" (with input-partitions the slice log is the input topic, \
                 which dedupd does not write to)",
            ));
        }
        let order_tolerance_ms = parse_duration_ms(&s.slicing.order_tolerance).map_err(|e| {
            invalid(
                "slicing.order_tolerance",
                &s.slicing.order_tolerance,
                format!("a duration such as 1s or 0ms ({e})"),
            )
        })?;
        if s.input.lateness >= s.filter.window {
            return Err(invalid(
                "input.lateness",
                format!("{}ms", s.input.lateness),
                format!("shorter than filter.window ({} ms)", s.filter.window),
            ));
        }
        if order_tolerance_ms > s.input.lateness {
            return Err(invalid(
                "slicing.order_tolerance",
                &s.slicing.order_tolerance,
                format!(
                    "at most input.lateness ({} ms): the router may send records this much out of order, and the \
                     slices put back in order only what is within the lateness",
                    s.input.lateness
                ),
            ));
        }
        // One record always fits: a budget below it would flush at every record.
        for (setting, value) in [
            ("slicing.max_held_bytes", s.slicing.max_held_bytes),
            ("slicing.max_buffered_bytes", s.slicing.max_buffered_bytes),
        ] {
            if !(s.input.max_record_bytes as u64..=MAX_BUDGET_BYTES).contains(&value) {
                return Err(invalid(
                    setting,
                    format!("{value}B"),
                    format!(
                        "between input.max_record_bytes ({}B: one record must fit) and 1TiB",
                        s.input.max_record_bytes
                    ),
                ));
            }
        }
        if !(1..=MAX_HELD_LIMIT).contains(&s.slicing.max_held) {
            return Err(invalid(
                "slicing.max_held",
                s.slicing.max_held,
                format!("between 1 and {MAX_HELD_LIMIT} (every held record is kept in memory whole)"),
            ));
        }
        let max_clock_jump_ms = s.input.max_clock_jump.unwrap_or(s.filter.window);
        if max_clock_jump_ms == 0 {
            return Err(invalid("input.max_clock_jump", "0ms", "at least 1ms (empty: the filter window)"));
        }
        if s.input.jump_confirmations == 0 {
            return Err(invalid("input.jump_confirmations", 0, "at least 1"));
        }
        let order = OrderSettings {
            lateness_ms: s.input.lateness,
            max_clock_jump_ms,
            jump_confirmations: s.input.jump_confirmations,
        };
        if slicing == SlicingMode::InputPartitions && s.input.topics.len() != 1 {
            return Err(invalid(
                "input.topics",
                format!("{:?}", s.input.topics),
                "input-partitions slicing takes exactly one topic (its partitions are the slices)",
            ));
        }
        let filter = FilterSpec {
            window_ms: s.filter.window,
            fpr: s.filter.fpr,
            expected_keys: s.filter.expected_keys,
            headroom: s.filter.headroom,
            equal_timers: s.filter.equal_timers,
            growth,
            slices: s.filter.slices,
            timer_bits: s.filter.timer_bits,
            tick_ms: s.filter.tick,
            max_generations: s.filter.max_generations,
            lateness_ms: Some(s.input.lateness),
            deletable: s.filter.deletable,
            ..FilterSpec::default()
        };
        filter.resolve().map_err(|e| {
            let name = match e.setting {
                "expected" => "filter.expected_keys".to_string(),
                "lateness" => "input.lateness".to_string(),
                other => format!("filter.{other}"),
            };
            invalid(&name, e.value, e.rule)
        })?;
        let (filter, decaying) = match count_kind {
            None => (filter, None),
            // Deleting needs the timer filter's counting cells; a count
            // kind forgets by itself.
            Some(kind) if s.filter.deletable => {
                return Err(invalid(
                    "filter.deletable",
                    true,
                    format!("only the timer kind can delete keys, not filter.kind = {}", kind.as_str()),
                ));
            }
            Some(kind) => {
                let (filter, decaying) = s.filter.decaying_spec(kind, filter)?;
                (filter, Some(decaying))
            }
        };
        if s.checkpoint.interval == 0 {
            return Err(invalid("checkpoint.interval", "0ms", "at least 1ms"));
        }
        if !(1024..=16 << 20).contains(&s.checkpoint.chunk_bytes) {
            return Err(invalid("checkpoint.chunk_bytes", s.checkpoint.chunk_bytes, "between 1024 and 16777216"));
        }
        let on_corrupt = match s.checkpoint.on_corrupt.as_str() {
            "cold-start" => CorruptPolicy::ColdStart,
            "fail" => CorruptPolicy::Fail,
            other => return Err(invalid("checkpoint.on_corrupt", other, "expected cold-start or fail")),
        };
        let availability = AvailabilityPolicy::parse(&s.availability.policy)
            .ok_or_else(|| invalid("availability.policy", &s.availability.policy, "expected wait, deliver or drop"))?;
        // A shared slice has no other slices to go on with while it is
        // restored, and its standby takes over all of the input at once.
        if availability != AvailabilityPolicy::Wait && slicing == SlicingMode::Shared {
            return Err(invalid(
                "availability.policy",
                availability.as_str(),
                "wait with slicing.mode = \"shared\" (deliver and drop decide by slice-log offsets, which shared \
                 mode does not have per record)",
            ));
        }
        if availability == AvailabilityPolicy::Drop && s.output.duplicates_topic.is_empty() {
            return Err(invalid(
                "availability.policy",
                "drop",
                "needs a non-empty output.duplicates_topic: the records it drops go there (nothing is lost silently)",
            ));
        }
        let admin_listen: SocketAddr = s
            .admin
            .listen
            .parse()
            .map_err(|_| invalid("admin.listen", &s.admin.listen, "an address such as 127.0.0.1:9464"))?;
        let key_endpoints = s.admin.key_endpoints()?;
        if !(s.topics.replication_factor == -1 || (1..=i32::from(i16::MAX)).contains(&s.topics.replication_factor)) {
            return Err(invalid(
                "topics.replication_factor",
                s.topics.replication_factor,
                "-1 (the broker's default.replication.factor) or 1 to 32767",
            ));
        }
        let log_format = match s.log.format.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => return Err(invalid("log.format", other, "expected text or json")),
        };
        let owned = [&s.output.topic, &s.output.dead_letter_topic, &s.checkpoint.topic];
        for t in &s.input.topics {
            if owned.contains(&t) || *t == s.output.duplicates_topic || *t == s.output.late_topic || *t == s.flag.topic
            {
                return Err(invalid(
                    "input.topics",
                    t,
                    "an input topic cannot also be an output, dead-letter or checkpoint topic",
                ));
            }
        }
        let provenance =
            s.provenance.resolve(s.filter.slices, s.filter.window, s.input.lateness, &s.input.topics[0])?;
        if provenance.is_some() && passthrough {
            return Err(invalid(
                "provenance.source",
                &s.provenance.source,
                "filter.kind = \"passthrough\" judges no key, so no source is ever recorded",
            ));
        }
        let counting = s.counting()?;
        if availability != AvailabilityPolicy::Wait && counting.is_some() {
            return Err(invalid(
                "availability.policy",
                availability.as_str(),
                "deliver and drop need the counting stage off ([limit] and [flag] unset): its counts are not kept \
                 for records decided by the policy",
            ));
        }
        // Counting by the dedup key, the stage judges instead of the timer
        // filter, which stays empty: the smallest one (as for the count kinds).
        let filter = match &counting {
            Some(c) if c.count_key.is_none() => FilterSpec {
                expected_keys: u64::from(s.filter.slices),
                total_cells: None,
                growth: Growth::None,
                max_generations: 1,
                ..filter
            },
            _ => filter,
        };
        let others = [&s.output.topic, &s.output.dead_letter_topic, &s.checkpoint.topic, &s.output.duplicates_topic];
        if !s.flag.topic.is_empty() && (others.contains(&&s.flag.topic) || s.flag.topic == s.output.late_topic) {
            return Err(invalid(
                "flag.topic",
                &s.flag.topic,
                "a topic of its own: not the output, duplicates, late, dead-letter or checkpoint topic",
            ));
        }
        let tier = s.tier.resolve(s, passthrough || count_kind.is_some())?;
        if let Some(c) = &counting
            && c.count_key.is_none()
        {
            // Counting by the dedup key replaces the timer filter.
            if c.spec.max_per_window.is_none() {
                return Err(invalid(
                    "flag.threshold",
                    s.flag.threshold,
                    "with limit.count_key = \"\" (count by the dedup key) and no limit.max_per_window, every record \
                     would be delivered (the counting stage replaces the timer filter): set limit.count_key to \
                     count by another key, or limit.max_per_window",
                ));
            }
            if tier == Tier::SparseRoot {
                return Err(invalid(
                    "limit.count_key",
                    "\"\"",
                    "a sparse root counting by the dedup key would publish a verdict for each of the first N \
                     copies, and the leaves would drop the later ones the root lets through: count by another key",
                ));
            }
        }
        if counting.is_some() && tier == Tier::SparseLeaf {
            // A sparse leaf runs no slices: its limits and flags would never apply.
            return Err(invalid(
                "tier.role",
                &s.tier.role,
                "a sparse leaf cannot run [limit] or [flag] (set them on the root)",
            ));
        }
        if tier == Tier::SparseLeaf {
            leaf_cache(&filter, s.tier.verdict_delay).map_err(|e| {
                let setting =
                    if e.setting == "lateness" { "tier.verdict_delay".into() } else { format!("filter.{}", e.setting) };
                invalid(&setting, e.value, format!("{} (a sparse leaf's cache)", e.rule))
            })?;
        }
        let (filter, memory) = crate::memory::check(filter, decaying.as_ref(), s.filter.slices, s.filter.max_memory)
            .map_err(|e| invalid(e.setting, e.value, e.rule))?;
        let mut settings = self;
        if matches!(tier, Tier::SparseLeaf | Tier::DenseLeaf) {
            // A leaf's output is its parent's input.
            settings.output.topic = settings.tier.parent_topic.clone();
        }
        Ok(Resolved {
            input_start,
            tier,
            provenance,
            counting,
            key,
            time,
            filter,
            decaying,
            slicing,
            on_corrupt,
            availability,
            admin_listen,
            key_endpoints,
            passthrough,
            order_tolerance_ms,
            order,
            log_format,
            memory,
            settings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provenance_is_off_by_default_and_checked() {
        use crate::engine::provenance::SourceSpec;
        assert!(load(&[]).unwrap().provenance.is_none());
        let r = load(&[("DEDUPD__PROVENANCE__SOURCE", "json:/pub"), ("DEDUPD__FILTER__SLICES", "4")]).unwrap();
        let p = r.provenance.unwrap();
        assert_eq!(p.source, SourceSpec::Json("/pub".into()));
        // 100000 keys per source over 4 slices at 1%: 25000 keys, 9.59 bits each, k = 7.
        assert_eq!((p.spec.bits, p.spec.hashes), (239_627, 7));
        assert_eq!(p.spec.keep_ms, r.filter.window_ms + r.order.lateness_ms);
        for (key, value, message) in [
            ("DEDUPD__PROVENANCE__SOURCE", "pub", "invalid setting provenance.source = pub: unknown provenance source"),
            (
                "DEDUPD__PROVENANCE__INDEX",
                "btree",
                "invalid setting provenance.index = btree: expected auto, flat or tree",
            ),
            ("DEDUPD__PROVENANCE__MAX_SOURCES", "0", "invalid setting provenance.max_sources = 0: between 1"),
            ("DEDUPD__PROVENANCE__FPR", "0.7", "invalid setting provenance.fpr = 0.7: between 0 and 0.5"),
            ("DEDUPD__PROVENANCE__TREE_ORDER", "1", "invalid setting provenance.tree_order = 1: between 2 and 64"),
        ] {
            let e = load(&[("DEDUPD__PROVENANCE__SOURCE", "topic"), (key, value)]).unwrap_err().to_string();
            assert!(e.starts_with(message), "{e}");
        }
    }

    #[test]
    fn tiers_are_checked_at_start_up() {
        assert_eq!(load(&[]).unwrap().tier, Tier::Single);
        let leaf = [
            ("DEDUPD__TIER__ROLE", "leaf"),
            ("DEDUPD__TIER__PARENT_TOPIC", "clicks.root"),
            ("DEDUPD__TIER__VERDICT_TOPIC", "clicks.verdicts"),
        ];
        let r = load(&leaf).unwrap();
        assert_eq!(r.tier, Tier::SparseLeaf);
        // A leaf's output is its parent's input.
        assert_eq!(r.settings.output.topic, "clicks.root");
        // The cache expires on the root's tick, whatever its own lateness.
        assert_eq!(r.leaf_cache().unwrap().tick_ms, r.filter.resolve().unwrap().tick_ms);
        assert_eq!(r.leaf_cache().unwrap().lateness_ms, Some(30_000));
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut env = leaf.to_vec();
            env.extend_from_slice(extra);
            rejected(&env)
        };
        for (extra, message) in [
            (
                &[("DEDUPD__TIER__ROLE", "middle")][..],
                "invalid setting tier.role = middle: expected single, leaf or root",
            ),
            (&[("DEDUPD__TIER__TREE", "bushy")][..], "invalid setting tier.tree = bushy: expected sparse or dense"),
            (&[("DEDUPD__TIER__PARENT_TOPIC", "")][..], "invalid setting tier.parent_topic = \"\": a Kafka topic name"),
            (
                &[("DEDUPD__TIER__PARENT_TOPIC", "clicks")][..],
                "invalid setting tier.parent_topic = clicks: cannot also be",
            ),
            (
                &[("DEDUPD__TIER__VERDICT_TOPIC", "")][..],
                "invalid setting tier.verdict_topic = \"\": a Kafka topic name",
            ),
            (
                &[("DEDUPD__TIER__VERDICT_DELAY", "10m")][..],
                "invalid setting tier.verdict_delay = 600000ms: at least 1ms and shorter",
            ),
            // 4-bit timers hold the window (6 ticks of 100 s) and 2 s of lateness, not 9 minutes.
            (
                &[("DEDUPD__TIER__VERDICT_DELAY", "9m"), ("DEDUPD__FILTER__TIMER_BITS", "4")][..],
                "invalid setting tier.verdict_delay = ",
            ),
            (
                &[("DEDUPD__FILTER__KIND", "rsbf")][..],
                "invalid setting filter.kind = rsbf: tier.role = leaf needs the timer filter",
            ),
        ] {
            let e = with(extra);
            assert!(e.starts_with(message), "{extra:?}: {e}");
        }
        // A dense tree needs no verdict topic; a sparse root needs one.
        assert_eq!(
            load(&[("DEDUPD__TIER__ROLE", "root"), ("DEDUPD__TIER__TREE", "dense")]).unwrap().tier,
            Tier::DenseRoot
        );
        assert!(rejected(&[("DEDUPD__TIER__ROLE", "root")]).starts_with("invalid setting tier.verdict_topic"));
    }

    #[test]
    fn counting_is_off_by_default_and_checked() {
        assert!(load(&[]).unwrap().counting.is_none());
        let r = load(&[
            ("DEDUPD__LIMIT__MAX_PER_WINDOW", "3"),
            ("DEDUPD__LIMIT__COUNT_KEY", "json:/ip"),
            ("DEDUPD__FLAG__THRESHOLD", "10"),
            ("DEDUPD__FLAG__TOPIC", "clicks.flags"),
        ])
        .unwrap();
        let c = r.counting.unwrap();
        assert_eq!((c.spec.max_per_window, c.spec.flag_threshold), (Some(3), Some(10)));
        assert_eq!(c.count_key, Some(KeySpec::Json("/ip".into())));
        assert_eq!(c.spec.window_ms, r.filter.window_ms);
        assert_eq!(r.filter.expected_keys, r.settings.filter.expected_keys, "a separate count key keeps the filter");
        // Counting by the dedup key: the idle timer filter is the smallest.
        let r = load(&[("DEDUPD__LIMIT__MAX_PER_WINDOW", "3")]).unwrap();
        assert_eq!(r.filter.expected_keys, u64::from(r.settings.filter.slices));
        r.filter.resolve().unwrap();
        let flag = [("DEDUPD__FLAG__THRESHOLD", "5"), ("DEDUPD__FLAG__TOPIC", "f")];
        for (env, message) in [
            (&[("DEDUPD__FLAG__THRESHOLD", "5")][..], "invalid setting flag.threshold = 5: needs flag.topic"),
            (&[("DEDUPD__FLAG__TOPIC", "f")][..], "invalid setting flag.topic = f: needs flag.threshold"),
            (&[("DEDUPD__LIMIT__COUNT_KEY", "json:/ip")][..], "invalid setting limit.count_key = json:/ip: needs"),
            (
                &[("DEDUPD__LIMIT__MAX_PER_WINDOW", "1"), ("DEDUPD__LIMIT__COUNT_KEY", "ip")][..],
                "invalid setting limit.count_key = ip: unknown key source",
            ),
            (
                &[("DEDUPD__LIMIT__MAX_PER_WINDOW", "300")][..],
                "invalid setting limit.max_per_window = 300: must be at most 255, the largest count of 8-bit counters",
            ),
            (
                &[flag[0], flag[1], ("DEDUPD__LIMIT__COUNTER_BITS", "4"), ("DEDUPD__FLAG__THRESHOLD", "16")][..],
                "invalid setting flag.threshold = 16: must be at most 15",
            ),
            (&[flag[0], flag[1], ("DEDUPD__LIMIT__SUBWINDOWS", "4")][..], "invalid setting limit.subwindows = 4"),
            (&[flag[0], flag[1], ("DEDUPD__LIMIT__ESTIMATOR", "cm")][..], "invalid setting limit.estimator = cm"),
            (&[flag[0], flag[1], ("DEDUPD__LIMIT__COUNTERS", "tiny")][..], "invalid setting limit.counters = tiny"),
            (&flag[..], "invalid setting flag.threshold = 5: with limit.count_key = \"\""),
            (
                &[("DEDUPD__FILTER__DELETABLE", "true"), ("DEDUPD__SLICING__MODE", "input-partitions")][..],
                "invalid setting filter.deletable = true: deletes need slicing.mode",
            ),
            (
                &[("DEDUPD__PROVENANCE__SOURCE", "topic"), ("DEDUPD__FILTER__KIND", "passthrough")][..],
                "invalid setting provenance.source = topic: filter.kind = \"passthrough\"",
            ),
            (&[flag[0], flag[1], ("DEDUPD__FILTER__KIND", "rsbf")][..], "invalid setting filter.kind = rsbf"),
            (&[flag[0], flag[1], ("DEDUPD__FILTER__DELETABLE", "true")][..], "invalid setting filter.deletable"),
            (
                &[flag[0], ("DEDUPD__FLAG__TOPIC", "clicks.distinct")][..],
                "invalid setting flag.topic = clicks.distinct",
            ),
            (&[flag[0], ("DEDUPD__FLAG__TOPIC", "no way")][..], "invalid setting flag.topic = \"no way\""),
        ] {
            let e = rejected(env);
            assert!(e.starts_with(message), "{e}");
        }
    }

    fn load(env: &[(&str, &str)]) -> Result<Resolved, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Settings::load_from(Some(Path::new("config/dedupd.toml")), env)
    }

    fn rejected(env: &[(&str, &str)]) -> String {
        load(env).unwrap_err().to_string()
    }

    #[test]
    fn the_availability_policy_is_checked_at_start_up() {
        assert_eq!(load(&[]).unwrap().availability, AvailabilityPolicy::Wait);
        let deliver = load(&[("DEDUPD__AVAILABILITY__POLICY", "deliver")]).unwrap();
        assert_eq!(deliver.availability, AvailabilityPolicy::Deliver);
        let e = rejected(&[("DEDUPD__AVAILABILITY__POLICY", "skip")]);
        assert!(e.contains("availability.policy") && e.contains("skip") && e.contains("wait, deliver or drop"), "{e}");
        // drop needs somewhere to put what it drops.
        let e = rejected(&[("DEDUPD__AVAILABILITY__POLICY", "drop"), ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", "")]);
        assert!(e.contains("availability.policy") && e.contains("output.duplicates_topic"), "{e}");
        let dropping =
            load(&[("DEDUPD__AVAILABILITY__POLICY", "drop"), ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", "clicks.dups")])
                .unwrap();
        assert_eq!(dropping.availability, AvailabilityPolicy::Drop);
    }

    #[test]
    fn shared_mode_takes_one_slice_and_waits_for_restores() {
        let shared = [("DEDUPD__SLICING__MODE", "shared"), ("DEDUPD__FILTER__SLICES", "1")];
        let r = load(&shared).unwrap();
        assert_eq!(r.slicing, SlicingMode::Shared);
        assert_eq!(r.slice_topic(), "dedupd.slices");
        let e = rejected(&[("DEDUPD__SLICING__MODE", "shared"), ("DEDUPD__FILTER__SLICES", "8")]);
        assert!(e.contains("filter.slices = 8") && e.contains("exactly 1"), "{e}");
        let e = rejected(&[shared[0], shared[1], ("DEDUPD__AVAILABILITY__POLICY", "deliver")]);
        assert!(e.contains("availability.policy = deliver") && e.contains("wait with"), "{e}");
        let e = rejected(&[("DEDUPD__SLICING__MODE", "sharded")]);
        assert!(e.contains("repartition, input-partitions or shared"), "{e}");
    }

    #[test]
    fn the_shipped_file_is_valid_and_matches_the_design() {
        let r = load(&[]).unwrap();
        let s = &r.settings;
        assert_eq!(s.app.id, "dedupd");
        assert_eq!(s.input.topics, vec!["clicks"]);
        assert_eq!(r.key, KeySpec::Json("/click_id".into()));
        assert_eq!(s.filter.window, 600_000);
        assert_eq!(s.filter.slices, 8);
        assert_eq!(r.slicing, SlicingMode::Repartition);
        assert_eq!(r.slice_topic(), "dedupd.slices");
        assert_eq!(s.checkpoint.interval, 30_000);
    }

    /// Two applications left on the default checkpoint settings do not
    /// share a checkpoint topic.
    #[test]
    fn the_checkpoint_topic_defaults_to_the_applications_own() {
        assert_eq!(load(&[]).unwrap().settings.checkpoint.topic, "dedupd.checkpoints");
        let other = load(&[("DEDUPD__APP__ID", "fraud-b")]).unwrap();
        assert_eq!(other.settings.checkpoint.topic, "fraud-b.checkpoints");
        let explicit = load(&[("DEDUPD__APP__ID", "fraud-b"), ("DEDUPD__CHECKPOINT__TOPIC", "shared.cp")]).unwrap();
        assert_eq!(explicit.settings.checkpoint.topic, "shared.cp");
        // The default is a topic name too: an app id too long for it is refused by name.
        let e = rejected(&[("DEDUPD__APP__ID", &"a".repeat(238))]);
        assert!(e.contains("app.id") && e.contains("at most 237") && e.contains("checkpoint.topic"), "{e}");
        assert!(load(&[("DEDUPD__APP__ID", &"a".repeat(237))]).is_ok());
        assert!(load(&[("DEDUPD__APP__ID", &"a".repeat(238)), ("DEDUPD__CHECKPOINT__TOPIC", "x")]).is_ok());
    }

    /// dedupd removes `dedupd.*` headers from input records, so none can be
    /// where the key or the source is read.
    #[test]
    fn reserved_headers_are_not_read_from_input() {
        let e = rejected(&[("DEDUPD__INPUT__KEY", "header:dedupd.policy")]);
        assert!(e.contains("input.key") && e.contains("\"dedupd.\""), "{e}");
        assert_eq!(load(&[("DEDUPD__INPUT__KEY", "header:click")]).unwrap().key, KeySpec::Header("click".into()));
        let e = rejected(&[("DEDUPD__PROVENANCE__SOURCE", "header:dedupd.source")]);
        assert!(e.contains("provenance.source") && e.contains("\"dedupd.\""), "{e}");
    }

    #[test]
    fn environment_overrides_the_file() {
        let r = load(&[
            ("DEDUPD__KAFKA__BROKERS", "127.0.0.1:19092"),
            ("DEDUPD__INPUT__TOPICS", "a,b"),
            ("DEDUPD__FILTER__SLICES", "3"),
            ("DEDUPD__FILTER__WINDOW", "90s"),
            ("DEDUPD__KAFKA__SESSION_TIMEOUT_MS", "6000"),
            ("DEDUPD__KAFKA__SASL_PASSWORD", "007"),
            ("OTHER__FILTER__SLICES", "99"),
        ])
        .unwrap();
        assert_eq!(r.settings.kafka.brokers, "127.0.0.1:19092");
        assert_eq!(r.settings.input.topics, vec!["a", "b"]);
        assert_eq!(r.settings.filter.slices, 3);
        assert_eq!(r.settings.filter.window, 90_000);
        let kafka = r.settings.kafka.client_settings();
        assert!(kafka.contains(&("session.timeout.ms".into(), "6000".into())));
        assert!(kafka.contains(&("sasl.password".into(), "007".into())), "secrets stay text: {kafka:?}");
    }

    #[test]
    fn errors_name_setting_value_and_rule() {
        assert_eq!(
            rejected(&[("DEDUPD__FILTER__FPR", "1.5")]),
            "invalid setting filter.fpr = 1.5: must be greater than 0 and less than 1"
        );
        assert!(
            rejected(&[("DEDUPD__FILTER__EXPECTED_KEYS", "0")]).starts_with("invalid setting filter.expected_keys = 0")
        );
        assert!(rejected(&[("DEDUPD__SLICING__MODE", "hash")]).contains("slicing.mode = hash: expected repartition"));
        assert!(rejected(&[("DEDUPD__INPUT__KEY", "json:id")]).contains("input.key = json:id"));
        assert!(rejected(&[("DEDUPD__INPUT__TIME", "arrival")]).contains("input.time = arrival"));
        assert!(rejected(&[("DEDUPD__OUTPUT__TOPIC", "bad topic")]).contains("output.topic"));
        assert!(rejected(&[("DEDUPD__ADMIN__LISTEN", "nowhere")]).contains("admin.listen = nowhere"));
        assert!(rejected(&[("DEDUPD__FILTER__WINDOW", "soon")]).contains("soon"));
        assert!(rejected(&[("DEDUPD__CHECKPOINT__ON_CORRUPT", "ignore")]).contains("checkpoint.on_corrupt"));
        let two = rejected(&[("DEDUPD__SLICING__MODE", "input-partitions"), ("DEDUPD__INPUT__TOPICS", "a,b")]);
        assert!(two.contains("exactly one topic"), "{two}");
        assert!(rejected(&[("DEDUPD__INPUT__TOPICS", "clicks.distinct")]).contains("cannot also be"));
        assert!(
            rejected(&[("DEDUPD__SLICING__ORDER_TOLERANCE", "later")])
                .starts_with("invalid setting slicing.order_tolerance = later: a duration"),
        );
        assert!(
            rejected(&[("DEDUPD__SLICING__ORDER_TOLERANCE", "3s")])
                .starts_with("invalid setting slicing.order_tolerance = 3s: at most input.lateness (2000 ms)"),
        );
        assert_eq!(load(&[("DEDUPD__SLICING__ORDER_TOLERANCE", "1s")]).unwrap().order_tolerance_ms, 1000);
        assert!(
            rejected(&[("DEDUPD__SLICING__MAX_HELD", "0")])
                .starts_with("invalid setting slicing.max_held = 0: between 1 and 100000000"),
        );
        assert_eq!(load(&[("DEDUPD__SLICING__MAX_HELD", "5000")]).unwrap().settings.slicing.max_held, 5000);
        assert_eq!(
            rejected(&[("DEDUPD__INPUT__LATENESS", "10m")]),
            "invalid setting input.lateness = 600000ms: shorter than filter.window (600000 ms)"
        );
        assert!(rejected(&[("DEDUPD__INPUT__JUMP_CONFIRMATIONS", "0")]).contains("input.jump_confirmations = 0"));
        assert!(rejected(&[("DEDUPD__INPUT__MAX_CLOCK_JUMP", "0s")]).contains("input.max_clock_jump = 0ms"));
        let r = load(&[("DEDUPD__INPUT__LATENESS", "500ms")]).unwrap();
        assert_eq!(r.order, OrderSettings { lateness_ms: 500, max_clock_jump_ms: 600_000, jump_confirmations: 16 });
        assert_eq!(r.flush_topic(), "dedupd.flushes");
    }

    #[test]
    fn kafka_settings_pass_through_with_dotted_names() {
        let dir = std::env::temp_dir().join(format!("dedupd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("k.toml");
        std::fs::write(
            &file,
            "[kafka]\nbrokers = \"b:1\"\n\"session.timeout.ms\" = 6000\n\"security.protocol\" = \"SASL_SSL\"\n",
        )
        .unwrap();
        let r = Settings::load_from(Some(&file), Vec::new()).unwrap();
        let mut got = r.settings.kafka.client_settings();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("security.protocol".to_string(), "SASL_SSL".to_string()),
                ("session.timeout.ms".into(), "6000".into())
            ]
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_settings_file_is_searched_for_in_order() {
        let dir = std::env::temp_dir().join(format!("dedupd-locate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (flag, env, first, second) =
            (dir.join("flag.toml"), dir.join("env.toml"), dir.join("first.toml"), dir.join("second.toml"));
        let missing = dir.join("missing.toml");
        for f in [&flag, &env, &second] {
            std::fs::write(f, "[app]\nid = \"x\"\n").unwrap();
        }
        let search = vec![first.clone(), second.clone()];
        let found = |path: &Path, by: ChosenBy| SettingsFile::Found { path: path.to_path_buf(), by };
        let locate = |f: Option<&Path>, e: Option<&Path>| SettingsFile::locate(f, e.map(Path::as_os_str), &search);

        // --config first, then DEDUPD_CONFIG, then the search path in order.
        assert_eq!(locate(Some(&flag), Some(&env)).unwrap(), found(&flag, ChosenBy::Flag));
        assert_eq!(locate(None, Some(&env)).unwrap(), found(&env, ChosenBy::Env));
        assert_eq!(locate(None, None).unwrap(), found(&second, ChosenBy::Search));
        assert_eq!(locate(None, Some(Path::new(""))).unwrap(), found(&second, ChosenBy::Search), "empty = unset");
        std::fs::write(&first, "").unwrap();
        assert_eq!(locate(None, None).unwrap(), found(&first, ChosenBy::Search));
        assert!(
            locate(None, None)
                .unwrap()
                .to_string()
                .starts_with(&format!("reading settings from {} (found on the search path)", first.display()))
        );

        // A file named explicitly must exist; nothing falls back silently.
        let e = locate(Some(&missing), Some(&env)).unwrap_err().to_string();
        assert!(
            e.contains(&missing.display().to_string()) && e.contains("--config") && e.contains("does not exist"),
            "{e}"
        );
        let e = locate(None, Some(&missing)).unwrap_err().to_string();
        assert!(e.contains(&missing.display().to_string()) && e.contains("DEDUPD_CONFIG"), "{e}");

        // None anywhere: defaults and the environment, saying where it looked.
        let nowhere = vec![PathBuf::from("no/such/dedupd.toml"), missing.clone()];
        let none = SettingsFile::locate(None, None, &nowhere).unwrap();
        assert_eq!(none.path(), None);
        let line = none.to_string();
        let cwd = std::env::current_dir().unwrap();
        assert!(line.starts_with("no settings file found (looked in --config, DEDUPD_CONFIG, "), "{line}");
        assert!(line.contains(&cwd.join("no/such/dedupd.toml").display().to_string()), "{line}");
        assert!(line.contains(&missing.display().to_string()), "{line}");
        assert!(line.ends_with("using built-in defaults and the environment"), "{line}");
        let r = Settings::load_from(none.path(), vec![("DEDUPD__APP__ID".into(), "env-only".into())]).unwrap();
        assert_eq!(r.settings.app.id, "env-only");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_search_path_is_the_working_directory_then_etc() {
        assert_eq!(SEARCH_PATH, ["config/dedupd.toml", "/etc/dedupd/dedupd.toml"]);
    }

    #[test]
    fn log_settings() {
        let r = load(&[]).unwrap();
        assert_eq!((r.log_format, r.settings.log.summary_interval), (LogFormat::Text, 60_000));
        let r = load(&[("DEDUPD__LOG__FORMAT", "json"), ("DEDUPD__LOG__SUMMARY_INTERVAL", "0s")]).unwrap();
        assert_eq!((r.log_format, r.settings.log.summary_interval), (LogFormat::Json, 0));
        assert_eq!(
            rejected(&[("DEDUPD__LOG__FORMAT", "yaml")]),
            "invalid setting log.format = yaml: expected text or json"
        );
        assert!(rejected(&[("DEDUPD__LOG__SUMMARY_INTERVAL", "often")]).contains("often"));
    }

    /// Every setting the structs accept, as `section.key`: the built-in
    /// defaults alone (no file, no environment, not validated) deserialised
    /// into [`Settings`] and serialised back to JSON (the structs derive
    /// `Serialize` in test builds), every leaf of that tree. The keys are the
    /// structs' fields, whatever `DEFAULTS` lists: a field with
    /// `#[serde(default)]` that `DEFAULTS` leaves out is there too, and one
    /// without a default that `DEFAULTS` leaves out fails the load, naming it.
    /// `Option` fields serialise as `null` into JSON (TOML would drop them),
    /// so they are leaves like any other; the same goes for an optional
    /// sub-table, whose own keys are then not seen. `[kafka]`'s pass-through
    /// map is empty in the defaults, so only its own field (`brokers`) shows.
    fn accepted_settings() -> BTreeMap<String, serde_json::Value> {
        let settings: Settings = defaults()
            .build()
            .and_then(|c| c.try_deserialize())
            .unwrap_or_else(|e| panic!("the built-in defaults (DEFAULTS) do not load: {e}"));
        leaves(&serde_json::to_value(&settings).unwrap())
    }

    /// The leaves of `value` by their dotted paths (`filter.window`); tables
    /// are walked into, everything else (arrays, `null`) is a leaf.
    fn leaves(value: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
        fn walk(path: &str, value: &serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
            match value {
                serde_json::Value::Object(map) => {
                    for (key, inner) in map {
                        walk(&if path.is_empty() { key.clone() } else { format!("{path}.{key}") }, inner, out);
                    }
                }
                leaf => {
                    out.insert(path.to_string(), leaf.clone());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk("", value, &mut out);
        out
    }

    /// What config/dedupd.toml says about one setting.
    struct Entry {
        /// The line right above its `key = ...` line is a comment.
        comment_above: bool,
        /// The comment lines of its paragraph (since the previous blank line or
        /// section header) before its line.
        paragraph: Vec<String>,
    }

    /// The settings config/dedupd.toml sets, read as TOML by the settings
    /// loader (commented-out lines are examples, not entries), and what its
    /// lines say about each `section.key`.
    fn documented_settings(text: &str) -> (BTreeMap<String, serde_json::Value>, BTreeMap<String, Entry>) {
        let parsed: serde_json::Value = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .and_then(|c| c.try_deserialize())
            .unwrap_or_else(|e| panic!("config/dedupd.toml is not valid TOML: {e}"));
        let mut entries = BTreeMap::new();
        let (mut section, mut paragraph, mut comment_above) = (String::new(), Vec::new(), false);
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                (section, paragraph) = (name.to_string(), Vec::new());
            } else if line.is_empty() {
                paragraph.clear();
            } else if let Some(comment) = line.strip_prefix('#') {
                paragraph.push(comment.trim().to_string());
            } else if let Some((key, _)) = line.split_once('=') {
                entries
                    .insert(format!("{section}.{}", key.trim()), Entry { comment_above, paragraph: paragraph.clone() });
            }
            comment_above = line.starts_with('#');
        }
        (leaves(&parsed), entries)
    }

    /// config/dedupd.toml, the reference of the settings, cannot drift from
    /// the structs: it sets every setting they accept, each with a comment,
    /// and no setting they do not accept (`deny_unknown_fields` refuses
    /// those too when the file is loaded, but not in `[kafka]`, which passes
    /// any key to librdkafka: the file shows those only as comments).
    #[test]
    fn config_dedupd_toml_documents_every_setting() {
        let accepted = accepted_settings();
        // 68 settings in 16 sections today; `Option` fields (`filter.tick`) are there as `null`.
        assert!(accepted.len() > 60 && accepted.get("filter.tick") == Some(&serde_json::Value::Null), "{accepted:?}");
        let text = std::fs::read_to_string("config/dedupd.toml").unwrap();
        let (documented, entries) = documented_settings(&text);
        let undocumented: Vec<&String> = accepted.keys().filter(|k| !documented.contains_key(*k)).collect();
        assert!(
            undocumented.is_empty(),
            "settings dedupd accepts that config/dedupd.toml does not document: {undocumented:?}; add each to \
             its section there as `key = <default>` under a comment saying what it does"
        );
        let unknown: Vec<&String> = documented.keys().filter(|k| !accepted.contains_key(*k)).collect();
        assert!(
            unknown.is_empty(),
            "config/dedupd.toml sets {unknown:?}, which dedupd does not accept (librdkafka pass-through \
             settings in [kafka] go there only as commented-out examples)"
        );
        for setting in documented.keys() {
            let key = setting.rsplit('.').next().unwrap();
            let Some(entry) = entries.get(setting) else {
                panic!("config/dedupd.toml: {setting} is not written as a `{key} = ...` line under its [section]");
            };
            // A comment right above it, or one in its paragraph that names it
            // (`max_clock_jump` and `jump_confirmations` share one).
            assert!(
                entry.comment_above || entry.paragraph.iter().any(|c| c.contains(key)),
                "config/dedupd.toml: {setting} has no comment saying what it does"
            );
        }
        // And the file loads as it stands: no unknown key, no invalid value.
        load(&[]).unwrap();
    }

    /// `input.start`, and a librdkafka `auto.offset.reset` that says
    /// otherwise (in any of its spellings) refused naming both.
    #[test]
    fn input_start_is_checked_against_auto_offset_reset() {
        assert_eq!(load(&[]).unwrap().input_start, InputStart::Earliest);
        assert_eq!(load(&[("DEDUPD__INPUT__START", "latest")]).unwrap().input_start, InputStart::Latest);
        assert_eq!(
            rejected(&[("DEDUPD__INPUT__START", "newest")]),
            "invalid setting input.start = newest: expected earliest or latest"
        );
        for (start, reset) in
            [("earliest", "earliest"), ("earliest", "smallest"), ("latest", "latest"), ("latest", "end")]
        {
            let r = load(&[("DEDUPD__INPUT__START", start), ("DEDUPD__KAFKA__AUTO_OFFSET_RESET", reset)]).unwrap();
            assert_eq!(r.input_start.as_str(), start);
        }
        let rule = "(where dedupd starts reading an input partition it has no position in): set input.start \
                    (earliest or latest) and remove kafka.auto.offset.reset";
        assert_eq!(
            rejected(&[("DEDUPD__KAFKA__AUTO_OFFSET_RESET", "latest")]),
            format!("invalid setting kafka.auto.offset.reset = latest: contradicts input.start = earliest {rule}")
        );
        assert_eq!(
            rejected(&[("DEDUPD__INPUT__START", "latest"), ("DEDUPD__KAFKA__AUTO_OFFSET_RESET", "error")]),
            format!("invalid setting kafka.auto.offset.reset = error: contradicts input.start = latest {rule}")
        );
        // Written in the file as librdkafka's dotted name.
        let file = "[input]\nstart = \"latest\"\n[kafka]\n\"auto.offset.reset\" = \"smallest\"\n";
        let e = Settings::load_from_str(file, Vec::new()).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid setting kafka.auto.offset.reset = smallest: contradicts input.start = latest"),
            "{e}"
        );
    }

    #[test]
    fn the_replication_factor_is_the_brokers_unless_set() {
        assert_eq!(load(&[]).unwrap().settings.topics.replication_factor, -1);
        assert_eq!(load(&[("DEDUPD__TOPICS__REPLICATION_FACTOR", "3")]).unwrap().settings.topics.replication_factor, 3);
        for bad in ["0", "-2", "32768"] {
            assert_eq!(
                rejected(&[("DEDUPD__TOPICS__REPLICATION_FACTOR", bad)]),
                format!(
                    "invalid setting topics.replication_factor = {bad}: -1 (the broker's default.replication.factor) \
                     or 1 to 32767"
                )
            );
        }
    }

    #[test]
    fn unknown_settings_are_refused() {
        let e = rejected(&[("DEDUPD__FILTER__WINDOWS", "1m")]);
        assert!(e.contains("windows"), "{e}");
    }

    const TOKEN: &str = "0070123456789abcdef";

    #[test]
    fn key_endpoints_are_off_until_a_token_is_set() {
        assert_eq!(load(&[]).unwrap().key_endpoints, KeyEndpoints::Off);
        // Environment text stays text: a token of digits keeps its leading zeros.
        let r = load(&[("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap();
        assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
        let r = load(&[("DEDUPD__ADMIN__TOKEN", TOKEN), ("DEDUPD__ADMIN__KEY_ENDPOINTS", "token")]).unwrap();
        assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
        let r = load(&[("DEDUPD__ADMIN__TOKEN", TOKEN), ("DEDUPD__ADMIN__KEY_ENDPOINTS", "off")]).unwrap();
        assert_eq!(r.key_endpoints, KeyEndpoints::Off);
        assert_eq!(
            rejected(&[("DEDUPD__ADMIN__KEY_ENDPOINTS", "token")]),
            "invalid setting admin.key_endpoints = token: needs a bearer token: set admin.token_file (or admin.token)"
        );
        assert_eq!(
            rejected(&[("DEDUPD__ADMIN__KEY_ENDPOINTS", "open")]),
            "invalid setting admin.key_endpoints = open: expected auto, off or token"
        );
    }

    /// `DEDUPD_ADMIN_TOKEN` (what `dedupd keys` reads) is `admin.token` as
    /// much as `DEDUPD__ADMIN__TOKEN`; both set to different tokens stops
    /// the start naming both variables, never a token.
    #[test]
    fn the_admin_token_variable_is_read_too() {
        let r = load(&[("DEDUPD_ADMIN_TOKEN", TOKEN)]).unwrap();
        assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
        assert_eq!(r.settings.admin.token, Secret::new(TOKEN));
        let r = load(&[("DEDUPD_ADMIN_TOKEN", TOKEN), ("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap();
        assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
        // Empty is unset.
        let r = load(&[("DEDUPD_ADMIN_TOKEN", ""), ("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap();
        assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
        assert_eq!(load(&[("DEDUPD_ADMIN_TOKEN", "")]).unwrap().key_endpoints, KeyEndpoints::Off);
        let other = "1110123456789abcdef";
        let e = rejected(&[("DEDUPD_ADMIN_TOKEN", TOKEN), ("DEDUPD__ADMIN__TOKEN", other)]);
        assert_eq!(
            e,
            "invalid setting admin.token = [redacted]: DEDUPD_ADMIN_TOKEN and DEDUPD__ADMIN__TOKEN are both set, to \
             different tokens: set one of them (DEDUPD_ADMIN_TOKEN, the variable `dedupd keys` reads too)"
        );
        assert!(!e.contains("0123456789"), "{e}");
        // The same rules as admin.token's.
        assert!(
            rejected(&[("DEDUPD_ADMIN_TOKEN", "short")]).starts_with("invalid setting admin.token = [redacted] (5")
        );
    }

    #[test]
    fn a_bad_token_is_refused_without_showing_it() {
        for bad in ["short-0007", "has a space in it, 0007", "tab\there-0007-0007-0007"] {
            let e = rejected(&[("DEDUPD__ADMIN__TOKEN", bad)]);
            assert_eq!(
                e,
                format!(
                    "invalid setting admin.token = [redacted] ({} bytes): 16 to 4096 visible ASCII characters (no \
                     spaces or control characters)",
                    bad.len()
                )
            );
            assert!(!e.contains("0007"), "{e}");
        }
    }

    #[test]
    fn the_token_file_is_read_at_start_up() {
        let dir = std::env::temp_dir().join(format!("dedupd-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        let path = file.display().to_string();
        let with_file = |extra: &[(&str, &str)]| {
            let mut env = vec![("DEDUPD__ADMIN__TOKEN_FILE", path.as_str())];
            env.extend_from_slice(extra);
            load(&env)
        };

        // A trailing newline (as `echo` and editors write) is not part of the token.
        std::fs::write(&file, format!("{TOKEN}\r\n")).unwrap();
        assert_eq!(with_file(&[]).unwrap().key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
        std::fs::write(&file, format!("{TOKEN} \n")).unwrap();
        let e = with_file(&[]).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "invalid setting admin.token_file = {path}: the token in it ([redacted] (20 bytes)): 16 to"
            )),
            "{e}"
        );
        assert!(!e.contains(TOKEN), "{e}");

        let e = with_file(&[("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("invalid setting admin.token = [redacted]: set admin.token or admin.token_file ({path}), not both")
        );

        std::fs::remove_dir_all(&dir).ok();
        let e = with_file(&[]).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("invalid setting admin.token_file = {path}: a readable file with the token (")),
            "{e}"
        );
    }

    /// The decaying kinds: an equal share of `filter.memory` per slice, the
    /// seed, the kind and its parameters in the fingerprint; a budget too
    /// small for a slice is refused naming setting, value and rule.
    #[test]
    fn decaying_kinds_are_resolved_and_validated() {
        let r = load(&[
            ("DEDUPD__FILTER__KIND", "rsbf"),
            ("DEDUPD__FILTER__MEMORY", "2MiB"),
            ("DEDUPD__FILTER__SEED", "7"),
            ("DEDUPD__FILTER__FPR", "0.1"),
        ])
        .unwrap();
        let decaying = r.decaying.as_ref().unwrap();
        // 2 MiB over 8 slices, in bits.
        assert_eq!((decaying.kind, decaying.memory_bits, decaying.seed), (DecayingKind::Rsbf, (2 << 20) / 8 * 8, 7));
        let choice = r.filter_choice().unwrap();
        assert_eq!(choice.decaying(), Some(decaying));
        assert!(choice.fingerprint().starts_with("kind=rsbf,"), "{}", choice.fingerprint());
        // The idle timer filter is the smallest there is.
        let params = choice.params();
        assert!(params.cells <= 64 * 2, "{params:?}");
        assert_eq!(load(&[]).unwrap().settings.filter.seed, crate::filter::decaying::DEFAULT_RNG_SEED);
        let stable = load(&[("DEDUPD__FILTER__KIND", "stable"), ("DEDUPD__FILTER__FPR", "0.1")]).unwrap();
        assert!(stable.filter_choice().unwrap().fingerprint().starts_with("kind=stable,"));

        assert_eq!(
            rejected(&[("DEDUPD__FILTER__KIND", "rsbf"), ("DEDUPD__FILTER__MEMORY", "100B")]),
            "invalid setting filter.memory = 100B: each of the 8 slices gets 12B (96 bits), which must give each of \
             the k = 6 rsbf arrays at least 64 bits (with filter.fpr = 0.01)"
        );
        assert!(rejected(&[("DEDUPD__FILTER__KIND", "bloom")]).contains("filter.kind = bloom: expected timer, "));
        let e = rejected(&[("DEDUPD__FILTER__KIND", "rsbf"), ("DEDUPD__FILTER__MEMORY", "16000000000GiB")]);
        assert!(e.starts_with("invalid setting filter.memory = 17179869184000000000B: at most 1TiB per slice"), "{e}");
        let e = rejected(&[("DEDUPD__FILTER__KIND", "stable"), ("DEDUPD__FILTER__MEMORY", "lots")]);
        assert!(e.contains("filter.memory") && e.contains("`lots` is not a memory size"), "{e}");
        assert_eq!(
            rejected(&[("DEDUPD__FILTER__KIND", "stable"), ("DEDUPD__FILTER__DELETABLE", "true")]),
            "invalid setting filter.deletable = true: only the timer kind can delete keys, not filter.kind = stable"
        );
    }

    #[test]
    fn secrets_do_not_show_in_debug_output() {
        let r = load(&[
            ("DEDUPD__ADMIN__TOKEN", TOKEN),
            ("DEDUPD__KAFKA__SASL_PASSWORD", "pw-0007"),
            ("DEDUPD__KAFKA__SSL_KEY_PEM", "pem-0007"),
            ("DEDUPD__KAFKA__SASL_OAUTHBEARER_CLIENT_SECRET", "oauth-0007"),
            ("DEDUPD__KAFKA__SASL_USERNAME", "dedupd-user"),
        ])
        .unwrap();
        let shown = format!("{r:?} {r:#?} {}", Secret::new(TOKEN));
        for secret in [TOKEN, "pw-0007", "pem-0007", "oauth-0007"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("dedupd-user") && shown.contains("\"sasl.password\": \"[redacted]\""), "{shown}");
        for name in
            ["sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem", "sasl.oauthbearer.config"]
        {
            assert!(is_secret_setting(name), "{name}");
        }
        for name in ["sasl.username", "security.protocol", "ssl.ca.location", "session.timeout.ms"] {
            assert!(!is_secret_setting(name), "{name}");
        }
    }
}
