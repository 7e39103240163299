//! The command line of `dedupd filter`: every flag.

use std::path::PathBuf;

use crate::engine::formats::Format;
use crate::engine::{KeySpec, TimeSpec};
use crate::filter::decaying::DEFAULT_RNG_SEED;
use crate::filter::spectral::{CounterKind, DEFAULT_SUBWINDOWS, Estimator};
use crate::filter::{Growth, KindName, Layout};
use crate::units::{parse_bytes, parse_duration_ms};

/// `--kind` takes the family's kinds ([`KindName`]), each listed with its help.
impl clap::ValueEnum for KindName {
    fn value_variants<'a>() -> &'a [Self] {
        &KindName::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()).help(self.pipe_help()))
    }
}

#[derive(Debug, clap::Args)]
pub struct FilterArgs {
    #[arg(long, value_enum, default_value_t = KindName::Timer, help = KindName::PIPE_FLAG_HELP)]
    pub kind: KindName,
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
    /// Distinct keys expected per window, all slices together, or `none`
    /// ([`KindName::EXPECTED_FLAG_HELP`] is the help: it names the kinds).
    #[arg(long, default_value = "1000000", help = KindName::EXPECTED_FLAG_HELP)]
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
    /// `filter.sized_growth` (`--sized-growth false`: the newest generation
    /// takes every key and a new one takes the level that holds 1.5× them).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true")]
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
