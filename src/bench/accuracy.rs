//! `dedupd bench accuracy`: the real filter engine against the exact oracle.
//!
//! Synthetic streams ([`super::workload`]) go through a [`SlicedFilter`]; every
//! verdict is compared with [`ExactWindow`] (same window semantics: the window
//! runs from the delivered occurrence, time is the running maximum). "Positive"
//! means "duplicate": FPR = FP/(FP+TN) is the share of truly distinct events
//! that were dropped, FNR = FN/(FN+TP) the share of true duplicates that were
//! delivered. Steady-state figures skip the first window (warm-up).
//!
//! Five experiments, each written as CSV into `--out` and summarised in the
//! markdown report `--report`:
//!
//! 1. `slicing.csv`: horizontal slicing vs Eq. 4 as S grows (paper Fig. 5a).
//! 2. `equal_timers.csv`, `equal_timers_distribution.csv`: the equal-timers
//!    heuristic with k = 8 (Fig. 9).
//! 3. `growth_bursts.csv`, `growth_bursts_summary.csv`: growth under a 2× or
//!    5× burst, windows of 100/500/1000 units (Fig. 10/11).
//! 4. `undersized.csv`: `expected_keys` 10× too small, growth on and off.
//! 5. `timer_widths.csv`: timer width vs FPR and bits per key, and the exact
//!    hash-set alternative.
//!
//! Streams, oracle verdicts and key hashes are computed once per stream and
//! shared by all filter configurations run on it. Everything is deterministic
//! for `--seed`; no wall-clock value reaches the outputs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;

use super::oracle::{Confusion, ExactWindow};
use super::workload::{KeyDist, RateProfile, Rng, Stream, Zipf};
use crate::filter::hash::DEFAULT_SEED;
use crate::filter::sliced::SlicedStats;
use crate::filter::{FilterParams, FilterSpec, Growth, KeyHash, SlicedFilter, Verdict, sizing};

/// Flags of `dedupd bench accuracy`.
#[derive(Debug, clap::Args)]
pub struct AccuracyArgs {
    /// Directory for the CSV files, one (or two) per experiment.
    #[arg(long, default_value = "docs/accuracy")]
    pub out: PathBuf,
    /// The markdown report with tables and comments.
    #[arg(long, default_value = "docs/accuracy.md")]
    pub report: PathBuf,
    /// Much smaller streams: a smoke test that runs in seconds.
    #[arg(long)]
    pub quick: bool,
    /// Seeds the workloads and the filter's hash (0 = dedupd's default hash seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Runs every experiment, writes the CSV files and the report.
pub fn run(args: &AccuracyArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    if let Some(dir) = args.report.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let ctx = Ctx {
        scale: if args.quick { Scale::quick() } else { Scale::full() },
        seed: args.seed,
        hash_seed: DEFAULT_SEED.wrapping_add(args.seed),
        out: args.out.clone(),
        started: Instant::now(),
    };
    ctx.progress(&format!(
        "{} run, seed {}, CSV into {}, report {}",
        if args.quick { "quick" } else { "full" },
        args.seed,
        args.out.display(),
        args.report.display()
    ));

    let mut sections = vec![slicing(&ctx)?, equal_timers(&ctx)?, growth_bursts(&ctx)?];
    sections.extend(undersized_and_widths(&ctx)?);
    let report = render_report(&ctx, args, &sections);
    std::fs::write(&args.report, report).with_context(|| format!("writing {}", args.report.display()))?;
    ctx.progress(&format!("done: report {}", args.report.display()));
    Ok(())
}

// ---------------------------------------------------------------------------
// Sizes of the experiments.

/// Stream sizes: `full` for the report, `quick` for a smoke test.
#[derive(Clone, Debug)]
struct Scale {
    quick: bool,
    /// Exp. 1: events per stream, repetitions, never-seen lookups per run.
    slicing_events: u64,
    slicing_reps: u64,
    slicing_lookups: u64,
    slicing_uniform_universe: u64,
    slicing_zipf_universe: usize,
    /// Exp. 2: window (ms), events per second (one per 1 ms tick at 1000),
    /// stream length in windows, Zipf universe.
    eq_window_ms: u64,
    eq_rate: u64,
    eq_windows: u64,
    eq_zipf_universe: usize,
    /// Exp. 3: stream length in units (three equal phases), windows in units,
    /// base events per unit.
    burst_units: u64,
    burst_windows: [u64; 3],
    burst_rate: u64,
    /// Exp. 4 and 5: events per second and stream length in seconds of the
    /// 60 s-window streams, Zipf universe.
    w60_rate: u64,
    w60_units: u64,
    w60_zipf_universe: usize,
}

impl Scale {
    fn full() -> Self {
        Scale {
            quick: false,
            slicing_events: 100_000,
            slicing_reps: 5,
            slicing_lookups: 100_000,
            slicing_uniform_universe: 20_150,
            slicing_zipf_universe: 50_000,
            eq_window_ms: 10_000,
            eq_rate: 1000,
            eq_windows: 20,
            eq_zipf_universe: 200_000,
            burst_units: 9000,
            burst_windows: [100, 500, 1000],
            burst_rate: 30,
            w60_rate: 500,
            w60_units: 600,
            w60_zipf_universe: 1_000_000,
        }
    }

    fn quick() -> Self {
        Scale {
            quick: true,
            slicing_events: 20_000,
            slicing_reps: 1,
            slicing_lookups: 20_000,
            slicing_uniform_universe: 4_030,
            slicing_zipf_universe: 10_000,
            eq_window_ms: 2_000,
            eq_rate: 1000,
            eq_windows: 5,
            eq_zipf_universe: 40_000,
            burst_units: 900,
            burst_windows: [10, 50, 100],
            burst_rate: 5,
            w60_rate: 50,
            w60_units: 300,
            w60_zipf_universe: 100_000,
        }
    }
}

struct Ctx {
    scale: Scale,
    seed: u64,
    hash_seed: u64,
    out: PathBuf,
    started: Instant,
}

impl Ctx {
    fn progress(&self, msg: &str) {
        eprintln!("[{:>6.1}s] bench accuracy: {msg}", self.started.elapsed().as_secs_f64());
    }

    /// A workload seed for one stream of one experiment.
    fn stream_seed(&self, experiment: u64, stream: u64) -> u64 {
        mix(mix(self.seed, experiment), stream)
    }

    fn write(&self, table: &Table) -> anyhow::Result<()> {
        let path = self.out.join(table.file);
        std::fs::write(&path, table.csv()).with_context(|| format!("writing {}", path.display()))?;
        self.progress(&format!("wrote {} ({} rows)", path.display(), table.rows.len()));
        Ok(())
    }
}

fn mix(a: u64, b: u64) -> u64 {
    Rng::new(a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17)).next_u64()
}

/// Generation sizing: the paper's equal generations or dedupd's levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `growth_factor = 1, tightening = 1.0`.
    Paper,
    /// `growth_factor = 2, tightening = 0.5` (the defaults).
    Dedupd,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Paper => "paper",
            Mode::Dedupd => "dedupd",
        }
    }

    fn apply(self, spec: FilterSpec) -> FilterSpec {
        match self {
            Mode::Paper => FilterSpec { growth_factor: 1, tightening: 1.0, ..spec },
            Mode::Dedupd => FilterSpec { growth_factor: 2, tightening: 0.5, ..spec },
        }
    }
}

// ---------------------------------------------------------------------------
// Streams with their exact answers.

/// A stream, its key hashes and the oracle's answer for every event.
struct Prepared {
    window_ms: u64,
    times: Vec<u64>,
    ids: Vec<u64>,
    hashes: Vec<KeyHash>,
    /// The oracle says duplicate.
    truth: Vec<bool>,
    /// The oracle's distinct keys in the window after the event.
    in_window: Vec<u32>,
    /// Time since the key's last delivery by the oracle (`u64::MAX`: never).
    age_ms: Vec<u64>,
}

impl Prepared {
    fn new(stream: Stream, window_ms: u64, hash_seed: u64) -> Self {
        let mut p = Prepared {
            window_ms,
            times: Vec::new(),
            ids: Vec::new(),
            hashes: Vec::new(),
            truth: Vec::new(),
            in_window: Vec::new(),
            age_ms: Vec::new(),
        };
        let mut oracle = ExactWindow::new(window_ms);
        let mut last_delivery: HashMap<u64, u64> = HashMap::new();
        let mut clock = 0;
        for (id, time) in stream {
            clock = time.max(clock);
            let dup = oracle.observe(&id, time);
            let age = last_delivery.get(&id).map_or(u64::MAX, |&t| clock - t);
            if !dup {
                last_delivery.insert(id, clock);
            }
            p.times.push(time);
            p.ids.push(id);
            p.hashes.push(KeyHash::of(hash_seed, &id.to_le_bytes()));
            p.truth.push(dup);
            p.in_window.push(oracle.keys_in_window() as u32);
            p.age_ms.push(age);
        }
        p
    }

    fn len(&self) -> usize {
        self.times.len()
    }

    fn distinct_events(&self) -> u64 {
        self.truth.iter().filter(|&&d| !d).count() as u64
    }

    /// Mean oracle population over the events in `[from_ms, to_ms)`.
    fn mean_population(&self, from_ms: u64, to_ms: u64) -> f64 {
        let (mut sum, mut n) = (0.0, 0u64);
        for (t, w) in self.times.iter().zip(&self.in_window) {
            if (from_ms..to_ms).contains(t) {
                sum += f64::from(*w);
                n += 1;
            }
        }
        if n == 0 { 0.0 } else { sum / n as f64 }
    }
}

// ---------------------------------------------------------------------------
// Running a filter over a prepared stream.

#[derive(Clone, Debug, Default)]
struct RunOpts {
    /// Events before this time are left out of the steady-state figures.
    warmup_ms: u64,
    /// Sample the filter every this many ms.
    sample_ms: Option<u64>,
    /// Start times of the phases (the first is usually 0).
    phase_starts: Vec<u64>,
}

#[derive(Clone, Debug)]
struct Sample {
    time_ms: u64,
    generations: u64,
    memory_bytes: u64,
    estimated_fpr: f64,
    keys_in_window: u32,
    /// Verdicts since the previous sample.
    interval: Confusion,
}

impl Sample {
    fn bits_per_key(&self) -> Option<f64> {
        (self.keys_in_window > 0).then(|| self.memory_bytes as f64 * 8.0 / f64::from(self.keys_in_window))
    }
}

struct RunOut {
    filter: SlicedFilter,
    all: Confusion,
    /// After the warm-up.
    steady: Confusion,
    /// Per phase, after the warm-up.
    phases: Vec<Confusion>,
    samples: Vec<Sample>,
    /// Steady-state duplicate verdicts by their largest equal-timer group,
    /// for true duplicates and for false positives.
    eq_true: Vec<u64>,
    eq_false: Vec<u64>,
    /// Steady-state false positives on keys last delivered between `window`
    /// and the end of the filter's window (one tick of slack) ago.
    edge_fp: u64,
    stats: SlicedStats,
    warmup_ms: u64,
}

impl RunOut {
    fn steady_samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(move |s| s.time_ms >= self.warmup_ms)
    }

    fn mean_bits_per_key(&self) -> f64 {
        mean(self.steady_samples().filter_map(Sample::bits_per_key))
    }

    fn mean_memory(&self) -> f64 {
        mean(self.steady_samples().map(|s| s.memory_bytes as f64))
    }

    fn max_memory(&self) -> u64 {
        self.samples.iter().map(|s| s.memory_bytes).max().unwrap_or(self.stats.memory_bytes)
    }

    fn params(&self) -> &FilterParams {
        self.filter.params()
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut n) = (0.0, 0u64);
    for x in xs {
        sum += x;
        n += 1;
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

fn sample(f: &SlicedFilter, time_ms: u64, keys_in_window: u32, interval: Confusion) -> Sample {
    let s = f.stats();
    Sample {
        time_ms,
        generations: s.generations_live,
        memory_bytes: s.memory_bytes,
        estimated_fpr: s.estimated_fpr,
        keys_in_window,
        interval,
    }
}

/// Streams `p` through a fresh filter built from `spec`, comparing every
/// verdict with the oracle's.
fn run_filter(p: &Prepared, spec: &FilterSpec, opts: &RunOpts) -> anyhow::Result<RunOut> {
    let mut f = SlicedFilter::new(spec).with_context(|| format!("filter spec {spec:?}"))?;
    let params = f.params().clone();
    let edge_end = (u64::from(params.window_ticks) + 1) * params.tick_ms;
    let k = params.hashes as usize;
    let mut out = RunOut {
        filter: f.clone(),
        all: Confusion::default(),
        steady: Confusion::default(),
        phases: vec![Confusion::default(); opts.phase_starts.len()],
        samples: Vec::new(),
        eq_true: vec![0; k + 1],
        eq_false: vec![0; k + 1],
        edge_fp: 0,
        stats: SlicedStats::default(),
        warmup_ms: opts.warmup_ms,
    };
    let mut next_sample = opts.sample_ms.unwrap_or(u64::MAX);
    let mut interval = Confusion::default();
    let mut last_in_window = 0;
    for i in 0..p.len() {
        let t = p.times[i];
        while t >= next_sample {
            out.samples.push(sample(&f, next_sample, last_in_window, interval));
            interval = Confusion::default();
            next_sample += opts.sample_ms.expect("sampling");
        }
        let verdict = f.observe(&p.hashes[i], t);
        let (said, truth) = (!verdict.is_distinct(), p.truth[i]);
        out.all.record(said, truth);
        interval.record(said, truth);
        last_in_window = p.in_window[i];
        if t < opts.warmup_ms {
            continue;
        }
        out.steady.record(said, truth);
        if let Some(phase) = opts.phase_starts.iter().rposition(|&s| s <= t) {
            out.phases[phase].record(said, truth);
        }
        if let Verdict::Duplicate { equal_timers } = verdict {
            let x = usize::from(equal_timers).min(k);
            if truth {
                out.eq_true[x] += 1;
            } else {
                out.eq_false[x] += 1;
                if (p.window_ms..edge_end).contains(&p.age_ms[i]) {
                    out.edge_fp += 1;
                }
            }
        }
    }
    if let (Some(_), Some(&end)) = (opts.sample_ms, p.times.last()) {
        out.samples.push(sample(&f, end, last_in_window, interval));
    }
    out.stats = f.stats();
    out.filter = f;
    Ok(out)
}

// ---------------------------------------------------------------------------
// Tables: CSV files and markdown.

struct Table {
    file: &'static str,
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(file: &'static str, header: &[&'static str]) -> Self {
        Table { file, header: header.to_vec(), rows: Vec::new() }
    }

    fn push(&mut self, row: Vec<String>) {
        assert_eq!(row.len(), self.header.len(), "row of {} does not match its header", self.file);
        assert!(row.iter().all(|c| !c.contains([',', '"', '\n'])), "{}: a cell needs quoting: {row:?}", self.file);
        self.rows.push(row);
    }

    fn csv(&self) -> String {
        let mut s = self.header.join(",");
        s.push('\n');
        for r in &self.rows {
            s.push_str(&r.join(","));
            s.push('\n');
        }
        s
    }

    fn col(&self, name: &str) -> usize {
        self.header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("{}: no column {name}", self.file))
    }

    /// A markdown table of the named columns of the rows `keep` accepts.
    fn markdown_where(&self, cols: &[&str], keep: impl Fn(&[String]) -> bool) -> String {
        let idx: Vec<usize> = cols.iter().map(|c| self.col(c)).collect();
        let mut s = format!("| {} |\n|{}\n", cols.join(" | "), "---:|".repeat(cols.len()));
        for r in self.rows.iter().filter(|r| keep(r)) {
            let cells: Vec<&str> = idx.iter().map(|&i| r[i].as_str()).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        s
    }

    fn markdown(&self, cols: &[&str]) -> String {
        self.markdown_where(cols, |_| true)
    }
}

/// A rate with six decimals.
fn r6(x: f64) -> String {
    format!("{x:.6}")
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn f3(x: f64) -> String {
    format!("{x:.3}")
}

macro_rules! row {
    ($($x:expr),* $(,)?) => { vec![$($x.to_string()),*] };
}

/// One experiment's part of the report.
struct Section {
    title: String,
    body: String,
}

// ---------------------------------------------------------------------------
// 1. Horizontal slicing (Fig. 5a).

/// A window far longer than any static stream: nothing expires.
const STATIC_WINDOW_MS: u64 = 1_000_000_000;
const SLICES: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// `(1 - (1 - 1/m)^(k·n))^k`: Eq. 3 with the exact fill term.
fn bloom_exact(m: f64, k: f64, n: f64) -> f64 {
    (1.0 - (1.0 - 1.0 / m).powf(k * n)).powf(k)
}

#[derive(Clone, Default)]
struct SlicingAcc {
    events: u64,
    distinct: f64,
    m_target: f64,
    m_actual: f64,
    cells_per_slice: f64,
    stream: Confusion,
    lookups: u64,
    lookup_fp: u64,
    theory: f64,
    theory_stream: f64,
    theory_loads: f64,
    max_key_share: f64,
    max_event_share: f64,
    fairness: f64,
}

fn slicing(ctx: &Ctx) -> anyhow::Result<Section> {
    let sc = &ctx.scale;
    let (k, p) = (4u32, 0.02f64);
    let mut table = Table::new(
        "slicing.csv",
        &[
            "keys",
            "slices",
            "reps",
            "events",
            "distinct",
            "k",
            "m_target",
            "m_actual",
            "cells_per_slice",
            "stream_fpr",
            "theory_stream_fpr",
            "end_fpr",
            "theory_eq4_fpr",
            "theory_given_loads",
            "lookups",
            "max_key_share",
            "max_event_share",
            "event_fairness",
        ],
    );
    for (di, dist_name) in ["uniform", "zipf1.0"].into_iter().enumerate() {
        let mut acc = vec![SlicingAcc::default(); SLICES.len()];
        let zipf = Zipf::new(sc.slicing_zipf_universe, 1.0);
        for rep in 0..sc.slicing_reps {
            let dist = match di {
                0 => KeyDist::Uniform { universe: sc.slicing_uniform_universe },
                _ => KeyDist::Zipf(zipf.clone()),
            };
            let hash_seed = if rep == 0 { ctx.hash_seed } else { mix(ctx.hash_seed, rep) };
            let stream = Stream::new(
                ctx.stream_seed(1, di as u64 * 1000 + rep),
                dist,
                RateProfile::steady(1000, 1000),
                sc.slicing_events.div_ceil(1000),
            );
            let prep = Prepared::new(stream, STATIC_WINDOW_MS, hash_seed);
            let n = prep.distinct_events();
            let m_target = (-f64::from(k) * n as f64 / (1.0 - p.powf(1.0 / f64::from(k))).ln()).ceil();
            for (si, &slices) in SLICES.iter().enumerate() {
                let spec = FilterSpec {
                    window_ms: STATIC_WINDOW_MS,
                    fpr: p,
                    expected_keys: n.max(1),
                    growth: Growth::None,
                    slices,
                    hashes: Some(k),
                    total_cells: Some(m_target as u64),
                    seed: hash_seed,
                    ..FilterSpec::default()
                };
                let out = run_filter(&prep, &spec, &RunOpts::default())?;
                let cells = out.params().cells;
                let m_actual = (cells * u64::from(slices)) as f64;

                // Never-seen keys after the stream: ids above any universe.
                let mut lookup_fp = 0;
                for j in 0..sc.slicing_lookups {
                    let h = KeyHash::of(hash_seed, &((1u64 << 62) + j).to_le_bytes());
                    if out.filter.slices()[h.slice(slices) as usize].lookup(&h).duplicate {
                        lookup_fp += 1;
                    }
                }

                // Loads: distinct keys and events per slice.
                let mut keys_per_slice = vec![0u64; slices as usize];
                let mut events_per_slice = vec![0u64; slices as usize];
                for (h, &dup) in prep.hashes.iter().zip(&prep.truth) {
                    let s = h.slice(slices) as usize;
                    events_per_slice[s] += 1;
                    if !dup {
                        keys_per_slice[s] += 1;
                    }
                }
                let mean_keys = n as f64 / f64::from(slices);
                let mean_events = prep.len() as f64 / f64::from(slices);
                let sum_sq: f64 = events_per_slice.iter().map(|&e| (e as f64).powi(2)).sum();
                let kf = f64::from(k);
                let theory_loads = keys_per_slice.iter().map(|&ns| bloom_exact(cells as f64, kf, ns as f64)).sum::<f64>()
                    / f64::from(slices);
                let theory_stream = (0..n)
                    .map(|j| sizing::horizontal_fpr(m_actual, kf, j as f64, f64::from(slices)))
                    .sum::<f64>()
                    / n.max(1) as f64;

                let a = &mut acc[si];
                a.events += prep.len() as u64;
                a.distinct += n as f64;
                a.m_target += m_target;
                a.m_actual += m_actual;
                a.cells_per_slice += cells as f64;
                a.stream.true_distinct += out.all.true_distinct;
                a.stream.false_duplicates += out.all.false_duplicates;
                a.stream.true_duplicates += out.all.true_duplicates;
                a.stream.false_distinct += out.all.false_distinct;
                a.lookups += sc.slicing_lookups;
                a.lookup_fp += lookup_fp;
                a.theory += sizing::horizontal_fpr(m_actual, kf, n as f64, f64::from(slices));
                a.theory_stream += theory_stream;
                a.theory_loads += theory_loads;
                a.max_key_share += *keys_per_slice.iter().max().unwrap_or(&0) as f64 / mean_keys;
                a.max_event_share += *events_per_slice.iter().max().unwrap_or(&0) as f64 / mean_events;
                a.fairness += (prep.len() as f64).powi(2) / (f64::from(slices) * sum_sq);
            }
            ctx.progress(&format!("slicing: {dist_name} repetition {}/{} (n = {n})", rep + 1, sc.slicing_reps));
        }
        let reps = sc.slicing_reps as f64;
        for (si, a) in acc.iter().enumerate() {
            table.push(row![
                dist_name,
                SLICES[si],
                sc.slicing_reps,
                a.events / sc.slicing_reps,
                f1(a.distinct / reps),
                k,
                f1(a.m_target / reps),
                f1(a.m_actual / reps),
                f1(a.cells_per_slice / reps),
                r6(a.stream.fpr()),
                r6(a.theory_stream / reps),
                r6(a.lookup_fp as f64 / a.lookups as f64),
                r6(a.theory / reps),
                r6(a.theory_loads / reps),
                a.lookups,
                f3(a.max_key_share / reps),
                f3(a.max_event_share / reps),
                f3(a.fairness / reps),
            ]);
        }
    }
    ctx.write(&table)?;
    Ok(slicing_section(ctx, &table))
}

// ---------------------------------------------------------------------------
// 2. Equal timers (Fig. 9).

const EQ_K: u32 = 8;
const EQ_KPRIMES: [u32; 8] = [0, 2, 3, 4, 5, 6, 7, 8];

fn equal_timers(ctx: &Ctx) -> anyhow::Result<Section> {
    let sc = &ctx.scale;
    let w = sc.eq_window_ms;
    let units = sc.eq_windows * w / 1000;
    let mut table = Table::new(
        "equal_timers.csv",
        &[
            "stream",
            "k",
            "k_prime",
            "expected_keys",
            "timer_bits",
            "tick_ms",
            "fpr",
            "fnr",
            "false_positives",
            "false_negatives",
            "true_duplicates",
            "true_distinct",
            "theory_fpr_k0",
        ],
    );
    let mut dist_table = Table::new(
        "equal_timers_distribution.csv",
        &["stream", "x_equal", "true_duplicates", "false_positives", "share_of_true_duplicates", "share_of_false_positives"],
    );
    let streams: [(&str, KeyDist); 2] = [
        ("recurring", KeyDist::Recurring { p_new: 0.5, min_gap_ms: 10, max_gap_ms: 2 * w }),
        ("zipf1.0", KeyDist::Zipf(Zipf::new(sc.eq_zipf_universe, 1.0))),
    ];
    for (si, (name, dist)) in streams.into_iter().enumerate() {
        let stream = Stream::new(ctx.stream_seed(2, si as u64), dist, RateProfile::steady(1000, sc.eq_rate), units);
        let prep = Prepared::new(stream, w, ctx.hash_seed);
        let n = prep.mean_population(w, u64::MAX).round().max(1.0) as u64;
        ctx.progress(&format!("equal timers: {name} stream, {} events, {n} keys in the window", prep.len()));
        for kp in EQ_KPRIMES {
            let spec = FilterSpec {
                window_ms: w,
                fpr: 0.01,
                expected_keys: n,
                equal_timers: kp,
                growth: Growth::None,
                timer_bits: 16,
                tick_ms: Some(1),
                hashes: Some(EQ_K),
                seed: ctx.hash_seed,
                ..FilterSpec::default()
            };
            let opts = RunOpts { warmup_ms: w, ..RunOpts::default() };
            let out = run_filter(&prep, &spec, &opts)?;
            let c = out.steady;
            let params = out.params();
            let theory = sizing::bloom_fpr(params.cells as f64, f64::from(EQ_K), n as f64);
            table.push(row![
                name,
                EQ_K,
                kp,
                n,
                params.timer_bits,
                params.tick_ms,
                r6(c.fpr()),
                r6(c.fnr()),
                c.false_duplicates,
                c.false_distinct,
                c.true_duplicates,
                c.true_distinct,
                r6(theory),
            ]);
            if kp == 0 {
                let (tp, fp): (u64, u64) = (out.eq_true.iter().sum(), out.eq_false.iter().sum());
                for x in 1..=EQ_K as usize {
                    dist_table.push(row![
                        name,
                        x,
                        out.eq_true[x],
                        out.eq_false[x],
                        r6(ratio(out.eq_true[x], tp)),
                        r6(ratio(out.eq_false[x], fp)),
                    ]);
                }
            }
        }
    }
    ctx.write(&table)?;
    ctx.write(&dist_table)?;
    Ok(equal_timers_section(ctx, &table, &dist_table))
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

// ---------------------------------------------------------------------------
// 3. Growth under bursts (Fig. 10/11).

const PHASES: [&str; 3] = ["before", "burst", "after"];

fn burst_configs() -> [(Growth, Option<Mode>); 5] {
    [
        (Growth::Density, Some(Mode::Paper)),
        (Growth::Cardinality, Some(Mode::Paper)),
        (Growth::Density, Some(Mode::Dedupd)),
        (Growth::Cardinality, Some(Mode::Dedupd)),
        (Growth::None, None),
    ]
}

fn growth_bursts(ctx: &Ctx) -> anyhow::Result<Section> {
    let sc = &ctx.scale;
    let unit_ms = 1000;
    let total = sc.burst_units;
    let third = total / 3;
    let mut series = Table::new(
        "growth_bursts.csv",
        &[
            "window_units",
            "burst",
            "growth",
            "mode",
            "t_units",
            "phase",
            "rate",
            "generations",
            "memory_bytes",
            "estimated_fpr",
            "measured_fpr",
            "keys_in_window",
            "bits_per_key",
        ],
    );
    let mut summary = Table::new(
        "growth_bursts_summary.csv",
        &[
            "window_units",
            "burst",
            "growth",
            "mode",
            "events",
            "expected_keys",
            "peak_keys_in_window",
            "generations_max",
            "generations_mean_burst",
            "generations_mean_after",
            "memory_max_bytes",
            "fpr_before",
            "fpr_burst",
            "fpr_after",
            "fpr_overall",
            "fnr",
            "estimated_fpr_max",
            "generations_created",
            "saturated_inserts",
        ],
    );
    for (wi, &window) in sc.burst_windows.iter().enumerate() {
        for burst in [2u64, 5] {
            let profile =
                RateProfile { unit_ms, base: sc.burst_rate, burst_factor: burst, burst_start: third, burst_end: 2 * third };
            let window_ms = window * unit_ms;
            let dist = KeyDist::Recurring { p_new: 0.5, min_gap_ms: 100, max_gap_ms: 2 * window_ms };
            let stream = Stream::new(ctx.stream_seed(3, wi as u64 * 10 + burst), dist, profile, total);
            let prep = Prepared::new(stream, window_ms, ctx.hash_seed);
            let expected = prep.mean_population(window_ms, third * unit_ms).round().max(1.0) as u64;
            let peak = prep.in_window.iter().copied().max().unwrap_or(0);
            ctx.progress(&format!(
                "growth bursts: window {window} units, burst {burst}x, {} events, {expected} keys per window at the base rate",
                prep.len()
            ));
            for (growth, mode) in burst_configs() {
                let base = FilterSpec {
                    window_ms,
                    fpr: 0.01,
                    expected_keys: expected,
                    growth,
                    seed: ctx.hash_seed,
                    ..FilterSpec::default()
                };
                let spec = mode.map_or(base.clone(), |m| m.apply(base));
                let opts = RunOpts {
                    warmup_ms: window_ms,
                    sample_ms: Some((window_ms / 20).max(1)),
                    phase_starts: vec![0, third * unit_ms, 2 * third * unit_ms],
                };
                let out = run_filter(&prep, &spec, &opts)?;
                let mode_name = mode.map_or("-", Mode::name);
                for s in &out.samples {
                    let t_units = s.time_ms as f64 / unit_ms as f64;
                    let phase = PHASES[opts.phase_starts.iter().rposition(|&p| p < s.time_ms.max(1)).unwrap_or(0)];
                    series.push(row![
                        window,
                        burst,
                        growth.as_str(),
                        mode_name,
                        f1(t_units),
                        phase,
                        profile.rate_at((s.time_ms.saturating_sub(1)) / unit_ms),
                        s.generations,
                        s.memory_bytes,
                        r6(s.estimated_fpr),
                        r6(s.interval.fpr()),
                        s.keys_in_window,
                        f1(s.bits_per_key().unwrap_or(0.0)),
                    ]);
                }
                let phase_gens = |lo: u64, hi: u64| {
                    mean(
                        out.samples
                            .iter()
                            .filter(|s| s.time_ms > lo * unit_ms && s.time_ms <= hi * unit_ms)
                            .map(|s| s.generations as f64),
                    )
                };
                let est_max = out.samples.iter().map(|s| s.estimated_fpr).fold(0.0, f64::max);
                summary.push(row![
                    window,
                    burst,
                    growth.as_str(),
                    mode_name,
                    prep.len(),
                    expected,
                    peak,
                    out.stats.generations_max,
                    f3(phase_gens(third, 2 * third)),
                    f3(phase_gens(2 * third, total)),
                    out.max_memory(),
                    r6(out.phases[0].fpr()),
                    r6(out.phases[1].fpr()),
                    r6(out.phases[2].fpr()),
                    r6(out.steady.fpr()),
                    r6(out.steady.fnr()),
                    r6(est_max),
                    out.stats.generations_created,
                    out.stats.saturated_inserts,
                ]);
            }
        }
    }
    ctx.write(&series)?;
    ctx.write(&summary)?;
    Ok(growth_bursts_section(ctx, &summary))
}

// ---------------------------------------------------------------------------
// 4. Undersized filters and 5. timer widths (both on 60 s windows).

const W60_MS: u64 = 60_000;
const TIMER_BITS: [u8; 6] = [4, 6, 8, 12, 16, 32];
/// The exact alternative: 64-bit fingerprint + 32-bit time per key.
const EXACT_RAW_BITS: f64 = 96.0;
/// … in an open-addressing table at 80% load.
const EXACT_TABLE_LOAD: f64 = 0.8;

fn undersized_and_widths(ctx: &Ctx) -> anyhow::Result<[Section; 2]> {
    let sc = &ctx.scale;
    let streams: [(&str, KeyDist); 2] = [
        ("recurring", KeyDist::Recurring { p_new: 0.5, min_gap_ms: 100, max_gap_ms: 2 * W60_MS }),
        ("zipf1.0", KeyDist::Zipf(Zipf::new(sc.w60_zipf_universe, 1.0))),
    ];
    let opts = RunOpts { warmup_ms: W60_MS, sample_ms: Some(W60_MS / 20), ..RunOpts::default() };
    let mut under = Table::new(
        "undersized.csv",
        &[
            "stream",
            "growth",
            "mode",
            "expected_keys",
            "true_keys",
            "fpr",
            "fnr",
            "generations_max",
            "generations_mean",
            "memory_mean_bytes",
            "memory_max_bytes",
            "bits_per_key",
            "saturated_inserts",
        ],
    );
    let mut widths = Table::new(
        "timer_widths.csv",
        &[
            "timer_bits",
            "growth",
            "tick_ms",
            "window_ticks",
            "slack_ms",
            "expected_keys",
            "fpr",
            "fnr",
            "edge_fp_share",
            "fpr_without_edge",
            "generations_max",
            "memory_mean_bytes",
            "cell_bytes",
            "bits_per_key",
            "cell_bits_per_key",
        ],
    );
    for (si, (name, dist)) in streams.into_iter().enumerate() {
        let stream = Stream::new(ctx.stream_seed(4, si as u64), dist, RateProfile::steady(1000, sc.w60_rate), sc.w60_units);
        let prep = Prepared::new(stream, W60_MS, ctx.hash_seed);
        let n = prep.mean_population(W60_MS, u64::MAX).round().max(1.0) as u64;
        let small = (n / 10).max(1);
        ctx.progress(&format!("undersized: {name} stream, {} events, {n} keys in the window", prep.len()));
        let base = FilterSpec { window_ms: W60_MS, fpr: 0.01, seed: ctx.hash_seed, ..FilterSpec::default() };
        let configs: [(Growth, Option<Mode>, u64); 6] = [
            (Growth::Density, Some(Mode::Dedupd), small),
            (Growth::Cardinality, Some(Mode::Dedupd), small),
            (Growth::Density, Some(Mode::Paper), small),
            (Growth::Cardinality, Some(Mode::Paper), small),
            (Growth::None, None, small),
            (Growth::Density, Some(Mode::Dedupd), n),
        ];
        for (growth, mode, expected) in configs {
            let spec = FilterSpec { growth, expected_keys: expected, ..base.clone() };
            let spec = mode.map_or(spec.clone(), |m| m.apply(spec));
            let out = run_filter(&prep, &spec, &opts)?;
            let mode_name = mode.map_or("-", Mode::name);
            under.push(row![
                name,
                growth.as_str(),
                mode_name,
                expected,
                n,
                r6(out.steady.fpr()),
                r6(out.steady.fnr()),
                out.stats.generations_max,
                f3(mean(out.steady_samples().map(|s| s.generations as f64))),
                f1(out.mean_memory()),
                out.max_memory(),
                f1(out.mean_bits_per_key()),
                out.stats.saturated_inserts,
            ]);
        }

        if si == 0 {
            ctx.progress(&format!("timer widths: {name} stream, expected = {n}"));
            for bits in TIMER_BITS {
                for growth in [Growth::None, Growth::Density] {
                    let spec = FilterSpec { growth, expected_keys: n, timer_bits: bits, ..base.clone() };
                    let out = run_filter(&prep, &spec, &opts)?;
                    let p = out.params();
                    let slack = (u64::from(p.window_ticks) + 1) * p.tick_ms - W60_MS;
                    let cell_bytes = (p.cells * u64::from(bits)).div_ceil(8);
                    let fp = out.steady.false_duplicates;
                    let fpr_wo_edge = ratio(fp - out.edge_fp, fp + out.steady.true_distinct);
                    let in_window = mean(out.steady_samples().map(|s| f64::from(s.keys_in_window)));
                    widths.push(row![
                        bits,
                        growth.as_str(),
                        p.tick_ms,
                        p.window_ticks,
                        slack,
                        n,
                        r6(out.steady.fpr()),
                        r6(out.steady.fnr()),
                        f3(ratio(out.edge_fp, fp)),
                        r6(fpr_wo_edge),
                        out.stats.generations_max,
                        f1(out.mean_memory()),
                        cell_bytes,
                        f1(out.mean_bits_per_key()),
                        f1(cell_bytes as f64 * 8.0 / in_window),
                    ]);
                }
            }
            let exact_bits = EXACT_RAW_BITS / EXACT_TABLE_LOAD;
            widths.push(row![
                "exact",
                "-",
                1,
                W60_MS,
                0,
                n,
                r6(0.0),
                r6(0.0),
                f3(0.0),
                r6(0.0),
                0,
                f1(n as f64 * exact_bits / 8.0),
                f1(n as f64 * EXACT_RAW_BITS / 8.0),
                f1(exact_bits),
                f1(EXACT_RAW_BITS),
            ]);
        }
    }
    ctx.write(&under)?;
    ctx.write(&widths)?;
    Ok([undersized_section(ctx, &under), timer_widths_section(ctx, &widths)])
}

// ---------------------------------------------------------------------------
// The report.

/// Reads a numeric cell of the first row `pick` accepts.
fn cell(t: &Table, col: &str, pick: impl Fn(&[String]) -> bool) -> f64 {
    let c = t.col(col);
    t.rows.iter().find(|r| pick(r)).and_then(|r| r[c].parse().ok()).unwrap_or(f64::NAN)
}

fn is(t: &Table, col: &str, value: &str) -> impl Fn(&[String]) -> bool {
    let c = t.col(col);
    let value = value.to_string();
    move |r: &[String]| r[c] == value
}

fn both<'a>(a: impl Fn(&[String]) -> bool + 'a, b: impl Fn(&[String]) -> bool + 'a) -> impl Fn(&[String]) -> bool + 'a {
    move |r: &[String]| a(r) && b(r)
}

fn pct(x: f64) -> String {
    if x.abs() < 0.001 { format!("{:.3}%", 100.0 * x) } else { format!("{:.2}%", 100.0 * x) }
}

fn csv_link(ctx: &Ctx, report: &Path, file: &str) -> String {
    let path = ctx.out.join(file);
    let rel = report.parent().and_then(|dir| path.strip_prefix(dir).ok()).unwrap_or(&path);
    format!("[`{}`]({})", file, rel.display())
}

fn render_report(ctx: &Ctx, args: &AccuracyArgs, sections: &[Section]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Filter accuracy against an exact oracle\n");
    let _ = writeln!(
        s,
        "Generated by `dedupd bench accuracy{}{}` ({} run; seed {}). Regenerate with \
         `cargo run --release -- bench accuracy` (about a minute; `--quick` is a smoke test with much \
         smaller streams whose numbers are noisy). Numbers are deterministic for a seed.\n",
        if args.quick { " --quick" } else { "" },
        if args.seed != 0 { format!(" --seed {}", args.seed) } else { String::new() },
        if ctx.scale.quick { "quick" } else { "full" },
        args.seed,
    );
    let _ = writeln!(
        s,
        "**Method.** Synthetic key streams (`src/bench/workload.rs`) go through the real engine \
         (`SlicedFilter` / `SlidingFilter`, keys hashed with `KeyHash::of(seed, id.to_le_bytes())`), and \
         every verdict is compared with the exact oracle `ExactWindow` (same semantics: the window runs \
         from the *delivered* occurrence, time is the running maximum). A *positive* is a duplicate \
         verdict: FPR = FP/(FP+TN) is the share of truly distinct events that were dropped, \
         FNR = FN/(FN+TP) the share of true duplicates that were delivered. Steady-state figures leave out \
         the first window (warm-up). Bits per key = `memory_bytes`·8 / the oracle's distinct keys in the \
         window at the same moment, averaged over samples taken every W/20; `memory_bytes` counts the \
         timer cells and each generation's timer histogram (4 bytes per timer value). The CSV files are \
         next to this report in `{}`; `scripts/plot_accuracy.py` turns them into PNGs.\n",
        csv_dir_display(ctx, &args.report)
    );
    for (i, sec) in sections.iter().enumerate() {
        let _ = writeln!(s, "## {}. {}\n", i + 1, sec.title);
        s.push_str(&sec.body);
        s.push('\n');
    }
    let _ = (csv_link(ctx, &args.report, ""), ());
    s
}

fn csv_dir_display(ctx: &Ctx, report: &Path) -> String {
    let rel = report.parent().and_then(|dir| ctx.out.strip_prefix(dir).ok()).unwrap_or(&ctx.out);
    format!("{}/", rel.display())
}

fn slicing_section(ctx: &Ctx, t: &Table) -> Section {
    let _ = ctx;
    let mut body = String::new();
    body.push_str(&t.markdown(&[
        "keys",
        "slices",
        "distinct",
        "m_actual",
        "cells_per_slice",
        "stream_fpr",
        "theory_stream_fpr",
        "end_fpr",
        "theory_eq4_fpr",
        "theory_given_loads",
        "max_key_share",
        "max_event_share",
    ]));
    Section { title: "Horizontal slicing vs theory (paper Fig. 5a)".into(), body }
}

fn equal_timers_section(ctx: &Ctx, t: &Table, d: &Table) -> Section {
    let _ = ctx;
    let mut body = String::new();
    body.push_str(&t.markdown(&["stream", "k_prime", "expected_keys", "fpr", "fnr", "false_positives", "false_negatives"]));
    body.push('\n');
    body.push_str(&d.markdown(&[
        "stream",
        "x_equal",
        "true_duplicates",
        "false_positives",
        "share_of_true_duplicates",
        "share_of_false_positives",
    ]));
    Section { title: "Equal-timers heuristic, k = 8 (paper Fig. 9)".into(), body }
}

fn growth_bursts_section(ctx: &Ctx, t: &Table) -> Section {
    let _ = ctx;
    let mut body = String::new();
    body.push_str(&t.markdown(&[
        "window_units",
        "burst",
        "growth",
        "mode",
        "expected_keys",
        "generations_max",
        "generations_mean_burst",
        "generations_mean_after",
        "memory_max_bytes",
        "fpr_before",
        "fpr_burst",
        "fpr_after",
        "fnr",
    ]));
    Section { title: "Growth under bursts (paper Fig. 10/11)".into(), body }
}

fn undersized_section(ctx: &Ctx, t: &Table) -> Section {
    let _ = ctx;
    let mut body = String::new();
    body.push_str(&t.markdown(&[
        "stream",
        "growth",
        "mode",
        "expected_keys",
        "true_keys",
        "fpr",
        "fnr",
        "generations_max",
        "memory_mean_bytes",
        "bits_per_key",
        "saturated_inserts",
    ]));
    Section { title: "Undersized filters: `expected_keys` 10× too small".into(), body }
}

fn timer_widths_section(ctx: &Ctx, t: &Table) -> Section {
    let _ = ctx;
    let mut body = String::new();
    body.push_str(&t.markdown(&[
        "timer_bits",
        "growth",
        "tick_ms",
        "slack_ms",
        "fpr",
        "fnr",
        "edge_fp_share",
        "fpr_without_edge",
        "generations_max",
        "memory_mean_bytes",
        "bits_per_key",
        "cell_bits_per_key",
    ]));
    Section { title: "Timer width: accuracy and bits per key".into(), body }
}
