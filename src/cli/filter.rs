//! `dedupd filter`: the engine over newline-delimited records on stdin.
//!
//! Distinct records go to stdout byte for byte, in input order. Duplicates
//! can go to a file; records that cannot be read are never dropped silently:
//! they are counted by reason and written to `--invalid FILE` (raw) or
//! reported on stderr with their line number. Stats go to `--stats-json`.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;

use crate::engine::formats::{self, Decoder, Format, Registry, Schemas};
use crate::engine::record::PayloadDecoder;
use crate::engine::{
    Deduplicator, Extractor, InvalidReason, Judged, KeySpec, OrderSettings, Outcome, RecordView, TimeSpec,
};
use crate::features::limits::counting::{CountingSpec, CountingStage};
use crate::filter::cuckoo::{CuckooFilter, CuckooSpec};
use crate::filter::decaying::{self, DEFAULT_RNG_SEED};
use crate::filter::spectral::{CounterKind, DEFAULT_SUBWINDOWS, Estimator, SpectralParams};
use crate::filter::{DecayingFilter, DecayingKind, DecayingSpec, FilterSpec, Growth, Layout, ParamError, SlicedFilter};
use crate::units::{parse_bytes, parse_duration_ms};

/// How long a line waits for a schema registry that does not answer before
/// the run stops (unjudged, exit status 1): a fault outside the record is
/// not bad data, and a one-shot run has no later to wait for.
pub const PIPE_REGISTRY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Records per batch: large enough to amortise per-batch work, small enough
/// to keep output flowing.
const BATCH: usize = 4096;

/// What `dedupd filter` does with the records it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FilterKind {
    /// Deduplicate with the sliding timer Bloom filter.
    Timer,
    /// Read records exactly as `timer` does (keys and times extracted,
    /// unreadable records reported) but filter nothing: every readable record
    /// is written. The difference in speed is what dedup costs.
    Passthrough,
    /// The reservoir-sampling Bloom filter: fixed memory (`--memory`), no
    /// window; remembers a sample of the whole stream.
    Rsbf,
    /// The Stable Bloom Filter: fixed memory (`--memory`), no window;
    /// forgets at random at a rate set by `--fpr`.
    Stable,
    /// Deduplicate within --window with the cuckoo table filter: one
    /// 16-bit (fingerprint, stamp) slot per key (see docs/cuckoo.md).
    Cuckoo,
}

impl FilterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FilterKind::Timer => "timer",
            FilterKind::Cuckoo => "cuckoo",
            FilterKind::Passthrough => "passthrough",
            FilterKind::Rsbf => "rsbf",
            FilterKind::Stable => "stable",
        }
    }

    /// The decaying kind, for `rsbf` and `stable`.
    pub fn decaying_kind(self) -> Option<DecayingKind> {
        match self {
            FilterKind::Rsbf => Some(DecayingKind::Rsbf),
            FilterKind::Stable => Some(DecayingKind::Stable),
            FilterKind::Timer | FilterKind::Cuckoo | FilterKind::Passthrough => None,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct FilterArgs {
    /// `timer` (deduplicate within --window), `cuckoo` (the same with the
    /// cuckoo table filter: --window, --fpr, --expected, --headroom,
    /// --slices, --lateness and --max-generations apply), `passthrough` (read and write
    /// every readable record, no filter: to measure what dedup costs), or the
    /// decaying `rsbf` and `stable` (no window: fixed --memory for the
    /// whole stream, records judged in arrival order; --window, --expected,
    /// --growth, --slices and the timer flags do not apply).
    #[arg(long, value_enum, default_value_t = FilterKind::Timer)]
    pub kind: FilterKind,
    /// Where the dedup key comes from: `line` (the whole line) or
    /// `json:/pointer` (a field of a JSON line), or several joined by `+`
    /// (`json:/user+json:/ad`: a composite key).
    #[arg(long, default_value = "line")]
    pub key: KeySpec,
    /// Where the event time comes from: `arrival` (the clock when read) or
    /// `json:/pointer` (epoch milliseconds or an RFC 3339 time in the record;
    /// numbers in another unit: `json:/pointer:s`, `:us` or `:µs`, `:ns`).
    #[arg(long, default_value = "arrival")]
    pub time: TimeSpec,
    /// How records are written: `json` (each line a record), or `avro` /
    /// `protobuf` in the Confluent wire format, each line one record in
    /// base64 (binary records may hold newlines); their schemas from
    /// --schemas, their fields named by --key and --time as `json:/a/b`.
    #[arg(long, default_value = "json")]
    pub format: Format,
    /// With --format avro or protobuf: the directory of the schemas by id
    /// (`<id>.avsc`, `<id>.proto`, or `<id>.json` as a schema registry
    /// answers `GET /schemas/ids/<id>`).
    #[arg(long)]
    pub schemas: Option<PathBuf>,
    /// With --format avro or protobuf: a schema registry
    /// (`http://HOST:PORT[/PATH]`) whose `GET /schemas/ids/<id>` gives the
    /// schemas --schemas does not have, fetched at first sight and kept; a
    /// 404 is retried after 30 s, a registry that does not answer is waited
    /// for up to 30 s, then the run stops (exit 1). The password of
    /// --schema-registry-user is read from DEDUPD_SCHEMA_REGISTRY_PASSWORD.
    #[arg(long)]
    pub schema_registry: Option<String>,
    /// The basic-authentication user of --schema-registry. A bearer token
    /// instead is read from DEDUPD_SCHEMA_REGISTRY_TOKEN.
    #[arg(long)]
    pub schema_registry_user: Option<String>,
    /// PEM certificates of the CAs that sign an https registry's
    /// certificate (default: the public ones).
    #[arg(long)]
    pub schema_registry_ca_file: Option<PathBuf>,
    /// Mutual TLS with the registry: the client's PEM certificate (chain).
    #[arg(long)]
    pub schema_registry_cert_file: Option<PathBuf>,
    /// Mutual TLS with the registry: the client's PEM private key.
    #[arg(long)]
    pub schema_registry_key_file: Option<PathBuf>,
    /// Sliding window: a key is a duplicate while its delivered copy is
    /// younger than this (e.g. 500ms, 60s, 10m, 2h).
    #[arg(long, default_value = "10m", value_parser = parse_duration_ms)]
    pub window: u64,
    /// Target false-positive rate (distinct records wrongly dropped). For
    /// rsbf it sets k (the paper uses 0.1), for stable its stable point.
    #[arg(long, default_value_t = 0.01)]
    pub fpr: f64,
    /// rsbf and stable: the filter's memory (e.g. 512KiB, 8MiB, 1GiB).
    #[arg(long, default_value = "8MiB", value_parser = parse_bytes)]
    pub memory: u64,
    /// rsbf and stable: seed of the random resets and decrements (same seed,
    /// same input: same output).
    #[arg(long, default_value_t = DEFAULT_RNG_SEED)]
    pub seed: u64,
    /// rsbf: bit arrays k; stable: hashes K. Default: chosen from --fpr.
    #[arg(long)]
    pub hashes: Option<u32>,
    /// rsbf and stable: start from the filter state in this file (written by
    /// --save-state with the same settings).
    #[arg(long)]
    pub load_state: Option<PathBuf>,
    /// rsbf and stable: write the filter state to this file at the end of the
    /// input, to go on later with --load-state.
    #[arg(long)]
    pub save_state: Option<PathBuf>,
    /// Distinct keys expected per window, all slices together (sizes the filter;
    /// growth covers underestimates); `none`: the cuckoo kind sizes itself
    /// from what it sees (the timer kind needs a number).
    #[arg(long, default_value = "1000000")]
    pub expected: Expected,
    /// Extra capacity of the first generation, as a fraction of --expected, so
    /// that normal fluctuations of the load do not start a second generation.
    #[arg(long, default_value_t = 0.2)]
    pub headroom: f64,
    /// Equal-timers threshold k': a duplicate also needs k' of its cells to hold
    /// the same time. 0 turns it off.
    #[arg(long, default_value_t = 0)]
    pub equal_timers: u32,
    /// When a slice adds a generation: density, cardinality or none.
    #[arg(long, default_value = "density")]
    pub growth: Growth,
    /// Number of slices S (keys are spread by hash).
    #[arg(long, default_value_t = 1)]
    pub slices: u32,
    /// Bits per timer cell (4 to 32): narrower cells use less memory and a
    /// coarser tick.
    #[arg(long, default_value_t = 8)]
    pub timer_bits: u8,
    /// Timer resolution (e.g. 100ms); default: the finest the timer width allows.
    #[arg(long, value_parser = parse_duration_ms)]
    pub tick: Option<u64>,
    /// Where a key's cells are: `standard` (anywhere in the filter) or
    /// `blocked` (all in one block of 256 cells, 2 cache lines of 4-bit
    /// cells: fewer cache misses per key on large filters, for about 1.4x the
    /// false-positive rate at equal memory).
    #[arg(long, default_value = "standard")]
    pub layout: Layout,
    /// Most generations a slice may hold; at the cap the newest keeps
    /// filling and its false-positive rate rises above the target.
    #[arg(long, default_value_t = 12)]
    pub max_generations: u32,
    /// Counting cells beside the timers (one byte per cell), as the daemon's
    /// `filter.deletable` (here for measuring what they cost).
    #[arg(long)]
    pub deletable: bool,
    /// Timer generations sized from the live keys, as the daemon's
    /// `filter.sized_growth`.
    #[arg(long)]
    pub sized_growth: bool,
    /// How far behind the largest event time seen a record may arrive and
    /// still be judged in event-time order: records wait until the watermark
    /// (largest time - lateness) passes them. Later records are judged at
    /// their own time and counted as late. Ignored (0) with `--time arrival`.
    #[arg(long, default_value = "2s", value_parser = parse_duration_ms)]
    pub lateness: u64,
    /// A record more than this far ahead of the largest time seen is held as
    /// a suspect and dead-lettered (`time_jump`) unless --jump-confirmations
    /// records in a row confirm the jump. Default: the window.
    #[arg(long, value_parser = parse_duration_ms)]
    pub max_clock_jump: Option<u64>,
    /// Records in a row, each more than --max-clock-jump ahead, that confirm a
    /// jump of the stream's time (it resumed after a gap).
    #[arg(long, default_value_t = 16)]
    pub jump_confirmations: u32,
    /// Records longer than this many bytes are invalid (`too_large`).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_record_bytes: usize,
    /// Write duplicate records to this file.
    #[arg(long)]
    pub duplicates: Option<PathBuf>,
    /// Write unreadable records (raw) to this file instead of reporting each on stderr.
    #[arg(long)]
    pub invalid: Option<PathBuf>,
    /// Write run statistics as JSON to this file.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Counting stage (timer kind): let at most N records of a count key
    /// through per --window; the (N+1)-th and later copies in the window are
    /// duplicates. Counts are Spectral Bloom Filter estimates, never below
    /// the true count (see docs/spectral.md).
    #[arg(long)]
    pub max_per_window: Option<u64>,
    /// Counting stage: what records are counted by, `line` or
    /// `json:/pointer`. Default: the dedup key (--key), and the counting
    /// stage then replaces the dedup filter; with another key, records are
    /// deduplicated by --key first and the survivors counted.
    #[arg(long)]
    pub count_key: Option<KeySpec>,
    /// Counting stage: flag the record at which a count key's estimated count
    /// in the window reaches T; the key is flagged again only a window later.
    #[arg(long)]
    pub flag_threshold: Option<u64>,
    /// Write each flagged record (raw, one per line) to this file.
    #[arg(long)]
    pub flags: Option<PathBuf>,
    /// Counting stage estimator: `mi` (minimal increase, the most accurate),
    /// `ms` (minimum selection) or `rm` (recurring minimum; see
    /// docs/spectral.md for its one caveat).
    #[arg(long, default_value = "mi")]
    pub estimator: Estimator,
    /// Counting stage: sub-windows per window (8 to 64). A window's counts
    /// cover between W and W + W/subwindows of history: more sub-windows,
    /// less overcount, more memory and work per record.
    #[arg(long, default_value_t = DEFAULT_SUBWINDOWS)]
    pub subwindows: u32,
    /// Counting stage: bits per counter (4, 8, 16 or 32); --max-per-window
    /// and --flag-threshold must fit.
    #[arg(long, default_value_t = 8)]
    pub counter_bits: u8,
    /// Counting stage: counter store, `fixed` (every counter --counter-bits
    /// wide) or `compact` (variable-length counters, as long as each value
    /// needs; saturating at the same maximum). The estimates are the same;
    /// see docs/spectral.md for memory and speed.
    #[arg(long, default_value = "fixed")]
    pub counters: CounterKind,
    /// Counting stage: hashes k per key.
    #[arg(long, default_value_t = 5)]
    pub count_hashes: u32,
    /// Counting stage: distinct count keys expected per window (default:
    /// --expected). Each sub-window starts with counters for 2·E/subwindows
    /// keys at load γ = nk/m = 0.7 and grows by filters of twice the
    /// counters when it receives more (see docs/spectral.md).
    #[arg(long)]
    pub count_expected: Option<u64>,
}

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
        if self.kind != FilterKind::Timer {
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

/// The counting stage's part of the stats JSON.
#[derive(Debug, Serialize)]
pub struct CountingStatsJson {
    pub estimator: &'static str,
    pub max_per_window: Option<u64>,
    pub flag_threshold: Option<u64>,
    /// Whether the stage counts by the dedup key (and replaces the dedup filter).
    pub counts_dedup_key: bool,
    /// Records counted, limited (dropped as over the limit) and flagged.
    pub counted: u64,
    pub limited: u64,
    pub flagged: u64,
    pub subwindows: u32,
    pub subwindow_ms: u64,
    /// Counters of each sub-window's first filter (a sub-window that
    /// receives more grows by filters of twice as many).
    pub counters_per_subwindow: u64,
    /// Filters in the ring at the end (`subwindows + 1` if none grew).
    pub filters: usize,
    /// The probability that a key with no record in the window is
    /// estimated at 1 or more at the end: at a limit of 1, the share of new
    /// keys blocked (the overcount the limit pays).
    pub false_positive: f64,
    pub hashes: u32,
    pub counter_bits: u8,
    /// `fixed` or `compact`.
    pub counters: &'static str,
    /// Bytes held by the counters now (compact counters grow with the counts).
    pub memory_bytes: u64,
}

impl CountingStatsJson {
    fn of(stage: &CountingStage, counts_dedup_key: bool) -> Self {
        let (spec, c, s) = (stage.spec(), stage.counts(), stage.stats());
        CountingStatsJson {
            estimator: spec.params.estimator.as_str(),
            max_per_window: spec.max_per_window,
            flag_threshold: spec.flag_threshold,
            counts_dedup_key,
            counted: s.counted,
            limited: s.limited,
            flagged: s.flagged,
            subwindows: c.subwindows(),
            subwindow_ms: c.sub_ms(),
            counters_per_subwindow: spec.params.counters,
            filters: c.filters(),
            false_positive: c.false_positive(),
            hashes: spec.params.hashes,
            counter_bits: spec.params.counter_bits,
            counters: spec.params.store.as_str(),
            memory_bytes: c.memory_bytes(),
        }
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
    /// The cuckoo table filters of `--kind cuckoo`, one per slice, validated.
    pub fn cuckoo_filters(&self) -> anyhow::Result<Vec<CuckooFilter>> {
        let timer = self.filter_spec();
        let spec = CuckooSpec {
            window_ms: timer.window_ms,
            fpr: timer.fpr,
            expected_keys: self.expected.0,
            headroom: timer.headroom,
            slices: timer.slices,
            lateness_ms: timer.lateness_ms,
            seed: timer.seed,
            max_tables: timer.max_generations,
        };
        let params = spec.resolve().map_err(flag_error)?;
        Ok((0..self.slices).map(|_| CuckooFilter::new(params.clone())).collect())
    }

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

    /// The ordering settings, validated.
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
                    .waiting(crate::schema_registry::Waiting::Until(PIPE_REGISTRY_WAIT));
                Some(std::sync::Arc::new(Registry::new(Box::new(http), std::time::Duration::from_secs(30))))
            }
        };
        formats::limit_avro_allocations(self.max_record_bytes);
        Ok(Some(Decoder { format: self.format, schemas, registry }))
    }

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
fn flag_error(e: ParamError) -> anyhow::Error {
    anyhow::anyhow!("invalid --{} {}: {}", e.setting.replace('_', "-"), e.value, e.rule)
}

/// The stats JSON.
#[derive(Debug, Serialize)]
pub struct FilterStats {
    pub kind: &'static str,
    pub records: u64,
    pub distinct: u64,
    pub duplicates: u64,
    pub invalid: u64,
    pub invalid_by_reason: BTreeMap<&'static str, u64>,
    /// Records that arrived more than the lateness behind the largest time
    /// seen (judged at their own time), and the most any missed the watermark by.
    pub late_records: u64,
    pub max_late_ms: u64,
    pub lateness_ms: u64,
    pub memory_bytes: u64,
    /// The most bytes the filter held at the end of any batch.
    pub memory_bytes_peak: u64,
    pub generations_max: u32,
    pub generations_live: u64,
    pub generations_created: u64,
    pub generations_dropped: u64,
    pub saturated_inserts: u64,
    pub estimated_fpr: f64,
    /// Duplicates by their largest group of equal timers (index = group size).
    pub equal_timer_counts: Vec<u64>,
    pub slices: u32,
    pub cells_per_slice: u64,
    pub hashes: u32,
    pub timer_bits: u8,
    pub layout: &'static str,
    pub tick_ms: u64,
    pub window_ms: u64,
    pub elapsed_seconds: f64,
    pub records_per_second: f64,
    /// rsbf: the fraction of ones over all arrays; stable: of non-zero cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ones_fraction: Option<f64>,
    /// Where that fraction settles: rsbf 0.5, stable its stable point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_ones_fraction: Option<f64>,
    /// rsbf and stable: the PRNG seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The counting stage (--max-per-window, --flag-threshold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counting: Option<CountingStatsJson>,
}

/// The records of base64 lines (`buf`'s lines ending at `ends`); a line
/// that is not base64 is kept as it is (and read as not in the wire format).
fn decode_lines(buf: &[u8], ends: &[usize], decoded: &mut Vec<Vec<u8>>) {
    decoded.clear();
    let mut start = 0;
    for &end in ends {
        let line = strip_line_ending(&buf[start..end]);
        let text = std::str::from_utf8(line).ok().map(str::trim);
        decoded.push(text.and_then(formats::schemas::base64_decode).unwrap_or_else(|| line.to_vec()));
        start = end;
    }
}

pub fn run(args: FilterArgs) -> anyhow::Result<()> {
    if args.max_record_bytes == 0 {
        anyhow::bail!("invalid --max-record-bytes 0: must be at least 1");
    }
    let extractor =
        Extractor { key: args.key.clone(), time: args.time.clone(), max_record_bytes: args.max_record_bytes };
    let order = args.order_settings()?;
    let decoder = args.decoder()?;
    let mut dedup = match args.kind.decaying_kind() {
        Some(kind) => Deduplicator::decaying(args.decaying_filter(kind)?, extractor),
        None => {
            if args.load_state.is_some() || args.save_state.is_some() {
                anyhow::bail!("--load-state and --save-state are for --kind rsbf or stable");
            }
            if args.kind == FilterKind::Cuckoo {
                Deduplicator::cuckoo(args.cuckoo_filters()?, extractor, order)
            } else {
                let filter = SlicedFilter::new(&args.filter_spec()).map_err(flag_error)?;
                Deduplicator::new(filter, extractor, order).with_passthrough(args.kind == FilterKind::Passthrough)
            }
        }
    };
    if let Some(stage) = args.counting_stage()? {
        dedup = dedup.with_counting(stage, args.count_key.clone());
    }
    // Avro or Protobuf: each line one base64 record, read through the decoder.
    let decoder: Option<&dyn PayloadDecoder> = decoder.as_ref().map(|d| d as &dyn PayloadDecoder);

    let create = |p: &PathBuf, what: &str| -> anyhow::Result<BufWriter<File>> {
        let f = File::create(p).with_context(|| format!("cannot create the {what} file {}", p.display()))?;
        Ok(BufWriter::with_capacity(1 << 16, f))
    };
    let mut duplicates = args.duplicates.as_ref().map(|p| create(p, "duplicates")).transpose()?;
    let mut invalid_out = args.invalid.as_ref().map(|p| create(p, "invalid")).transpose()?;
    let mut flags_out = args.flags.as_ref().map(|p| create(p, "flags")).transpose()?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let stdin = io::stdin();
    let mut input = BufReader::with_capacity(1 << 20, stdin.lock());
    let mut stderr = io::stderr().lock();

    let started = Instant::now();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut ends: Vec<usize> = Vec::with_capacity(BATCH);
    let mut decoded: Vec<Vec<u8>> = Vec::new();
    let mut judged = Vec::with_capacity(BATCH);
    let mut held = HeldLines::default();
    let mut memory_bytes_peak = dedup.memory_bytes();
    let mut tally =
        Tally { invalid_by_reason: InvalidReason::ALL.iter().map(|r| (r.as_str(), 0)).collect(), ..Tally::default() };
    let mut sinks = Sinks {
        out: &mut out,
        duplicates: duplicates.as_mut(),
        invalid: invalid_out.as_mut(),
        flags: flags_out.as_mut(),
        stderr: &mut stderr,
    };

    let result: io::Result<()> = (|| {
        loop {
            // Read up to BATCH lines into one buffer.
            buf.clear();
            ends.clear();
            while ends.len() < BATCH {
                let n = input.read_until(b'\n', &mut buf)?;
                if n == 0 {
                    break;
                }
                ends.push(buf.len());
            }
            judged.clear();
            if ends.is_empty() {
                dedup.finish(&mut judged);
                held.settle(&judged, &mut tally, &mut sinks)?;
                return Ok(());
            }
            let arrival = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
            let mut views = Vec::with_capacity(ends.len());
            let mut start = 0;
            if decoder.is_some() {
                decode_lines(&buf, &ends, &mut decoded);
                views.extend(decoded.iter().map(|payload| RecordView { payload, decoder, ..RecordView::default() }));
            } else {
                for &end in &ends {
                    views.push(RecordView { payload: strip_line_ending(&buf[start..end]), ..RecordView::default() });
                    start = end;
                }
            }
            dedup.push_batch(&views, arrival, &mut judged);
            memory_bytes_peak = memory_bytes_peak.max(dedup.memory_bytes());
            held.push(&buf, &ends);
            held.settle(&judged, &mut tally, &mut sinks)?;
        }
    })();
    match result {
        // A closed stdout (e.g. `| head`) ends the run quietly, like other filters.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        other => other.context("reading stdin or writing the output")?,
    }
    for w in [duplicates.as_mut(), invalid_out.as_mut(), flags_out.as_mut()].into_iter().flatten() {
        w.flush().context("writing the duplicates, invalid or flags file")?;
    }
    match out.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        other => other.context("writing stdout")?,
    }
    if let (Some(path), Some(filter)) = (&args.save_state, dedup.decaying_filter()) {
        std::fs::write(path, decaying::encode(filter))
            .with_context(|| format!("cannot write the --save-state file {}", path.display()))?;
    }
    let Tally { records, distinct, duplicates: duplicate, late_records, max_late_ms, invalid_by_reason } = tally;

    let elapsed = started.elapsed().as_secs_f64();
    let invalid: u64 = invalid_by_reason.values().sum();
    if invalid > 0 && args.invalid.is_some() {
        let reasons: Vec<String> =
            invalid_by_reason.iter().filter(|(_, n)| **n > 0).map(|(r, n)| format!("{r} {n}")).collect();
        eprintln!("dedupd: {invalid} invalid records written to the invalid file ({})", reasons.join(", "));
    }
    if let Some(path) = &args.stats_json {
        let f = dedup.filter();
        let s = f.stats();
        let p = f.params();
        let mut stats = FilterStats {
            kind: args.kind.as_str(),
            records,
            distinct,
            duplicates: duplicate,
            invalid,
            invalid_by_reason,
            late_records,
            max_late_ms,
            lateness_ms: order.lateness_ms,
            memory_bytes: s.memory_bytes,
            memory_bytes_peak,
            generations_max: s.generations_max,
            generations_live: s.generations_live,
            generations_created: s.generations_created,
            generations_dropped: s.generations_dropped,
            saturated_inserts: s.saturated_inserts,
            estimated_fpr: s.estimated_fpr,
            equal_timer_counts: s.equal_timer_counts,
            slices: args.slices,
            cells_per_slice: p.cells,
            hashes: p.hashes,
            timer_bits: p.timer_bits,
            layout: p.layout.as_str(),
            tick_ms: p.tick_ms,
            window_ms: p.window_ms,
            elapsed_seconds: elapsed,
            records_per_second: if elapsed > 0.0 { records as f64 / elapsed } else { 0.0 },
            ones_fraction: None,
            expected_ones_fraction: None,
            seed: None,
            counting: dedup.counting_stage().map(|s| CountingStatsJson::of(s, args.count_key.is_none())),
        };
        if let [first, ..] = dedup.cuckoo_filters() {
            // The timer fields describe the idle timer filter: replace them
            // with the tables' (a "generation" is a table; cells are slots).
            let all = dedup.cuckoo_filters();
            let p = first.params();
            let counters = all.iter().map(|f| f.counters());
            stats = FilterStats {
                memory_bytes: dedup.memory_bytes(),
                estimated_fpr: all.iter().map(|f| f.estimated_fpr()).sum::<f64>() / all.len() as f64,
                generations_max: 0,
                generations_live: all.iter().map(|f| f.tables().len() as u64).sum(),
                generations_created: counters.clone().map(|c| c.tables_created).sum(),
                generations_dropped: counters.clone().map(|c| c.tables_dropped).sum(),
                saturated_inserts: counters.map(|c| c.forced_evictions).sum(),
                cells_per_slice: p.buckets * 4,
                hashes: 2,
                timer_bits: p.clock_bits as u8,
                tick_ms: p.tick_ms,
                window_ms: p.window_ms,
                equal_timer_counts: Vec::new(),
                ..stats
            };
        }
        if let Some(filter) = dedup.decaying_filter() {
            // The timer fields describe the idle timer filter: replace or clear them.
            let c = filter.stats();
            stats = FilterStats {
                memory_bytes: c.memory_bytes,
                estimated_fpr: c.design_fpr,
                hashes: c.hashes,
                ones_fraction: Some(c.ones_fraction),
                expected_ones_fraction: Some(c.expected_ones_fraction),
                seed: Some(args.seed),
                generations_max: 0,
                generations_live: 0,
                generations_created: 0,
                generations_dropped: 0,
                cells_per_slice: 0,
                timer_bits: 0,
                tick_ms: 0,
                window_ms: 0,
                equal_timer_counts: Vec::new(),
                ..stats
            };
        }
        let json = serde_json::to_vec_pretty(&stats).expect("stats serialise");
        std::fs::write(path, json).with_context(|| format!("cannot write the stats file {}", path.display()))?;
    }
    Ok(())
}

/// Where judged lines go.
struct Sinks<'a, O: Write, E: Write> {
    out: &'a mut O,
    duplicates: Option<&'a mut BufWriter<File>>,
    invalid: Option<&'a mut BufWriter<File>>,
    flags: Option<&'a mut BufWriter<File>>,
    stderr: &'a mut E,
}

/// Counts of the run.
#[derive(Default)]
struct Tally {
    records: u64,
    distinct: u64,
    duplicates: u64,
    late_records: u64,
    max_late_ms: u64,
    invalid_by_reason: BTreeMap<&'static str, u64>,
}

/// Lines read and not yet written, in input order, with their outcome once
/// judged: judgments come in event-time order, lines go out in input order
/// (a line waits for every line before it to be judged).
#[derive(Default)]
struct HeldLines {
    /// The held lines' bytes, back to back; `text[start..]` is live.
    text: Vec<u8>,
    start: usize,
    /// End of each held line in `text`, and its outcome (and whether it
    /// was flagged) once judged.
    lines: VecDeque<(usize, Option<(Outcome, bool)>)>,
    /// Position of the first held line.
    first: u64,
}

impl HeldLines {
    /// Holds the lines of `buf` ending at `ends`.
    fn push(&mut self, buf: &[u8], ends: &[usize]) {
        if self.start > 0 && self.start >= self.text.len() / 2 {
            self.text.drain(..self.start);
            for (end, _) in self.lines.iter_mut() {
                *end -= self.start;
            }
            self.start = 0;
        }
        let base = self.text.len();
        self.text.extend_from_slice(&buf[..ends.last().copied().unwrap_or(0)]);
        self.lines.extend(ends.iter().map(|&e| (base + e, None)));
    }

    /// Records the judgments, then writes every line whose turn has come.
    fn settle<O: Write, E: Write>(
        &mut self,
        judged: &[Judged],
        tally: &mut Tally,
        sinks: &mut Sinks<'_, O, E>,
    ) -> io::Result<()> {
        for j in judged {
            let flagged = j.count.is_some_and(|c| c.flagged);
            self.lines[(j.position - self.first) as usize].1 = Some((j.outcome.clone(), flagged));
            if let Some(late) = j.late_by_ms {
                tally.late_records += 1;
                tally.max_late_ms = tally.max_late_ms.max(late);
            }
        }
        while let Some((end, Some(_))) = self.lines.front() {
            let end = *end;
            let (_, outcome) = self.lines.pop_front().expect("a front line");
            let line = &self.text[self.start..end];
            self.start = end;
            let line_no = self.first + 1;
            self.first += 1;
            tally.records += 1;
            let (outcome, flagged) = outcome.expect("judged");
            if let (true, Some(f)) = (flagged, sinks.flags.as_mut()) {
                f.write_all(line)?;
                if !line.ends_with(b"\n") {
                    f.write_all(b"\n")?;
                }
            }
            match outcome {
                Outcome::Distinct => {
                    tally.distinct += 1;
                    sinks.out.write_all(line)?
                }
                Outcome::Duplicate { .. } => {
                    tally.duplicates += 1;
                    if let Some(d) = sinks.duplicates.as_mut() {
                        d.write_all(line)?;
                    }
                }
                Outcome::Invalid(why) => {
                    *tally.invalid_by_reason.entry(why.reason.as_str()).or_default() += 1;
                    match sinks.invalid.as_mut() {
                        Some(f) => f.write_all(line)?,
                        None => writeln!(sinks.stderr, "dedupd: invalid record at line {line_no}: {why}")?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// The record without its `\n` or `\r\n`.
fn strip_line_ending(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `--expected`: a count of distinct keys per window, or `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected(pub Option<u64>);

impl std::str::FromStr for Expected {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Expected(None)),
            n => n.parse().map(|n| Expected(Some(n))).map_err(|_| format!("{n:?}: a count of keys, or none")),
        }
    }
}
