//! `dedupd-lab cuckoo`: the cuckoo table filter beside the timer filter at
//! the same target, on a real-text stream, against the exact answer.
//!
//! Two real-text streams (`--stream`):
//!
//! - `bigrams`: the word bigrams of the Brown Corpus in corpus order
//!   (lower-cased, punctuation trimmed), `--rate` events per second of event
//!   time: text repeats its bigrams as a feed repeats its keys, unevenly and
//!   at every distance.
//! - `sentences`: the arrival process of `tests/filter_cli.rs`'s text
//!   stream (1 000 events per second, 41.5% new keys, copies 100 ms to 90 s
//!   after their original), each new key the next Brown Corpus sentence,
//!   for `--seconds`: its keys per window rise through the first window and
//!   a half and settle lower, so the peak is about 1.5× the average.
//!
//! Each filter runs in the same pass: the timer filter (estimate = the
//! average keys per window), and the cuckoo table with the estimate at the
//! peak, at the average, at a tenth of the average, and with none.
//!
//! Memory: "bits per peak window key" is the peak resident bytes × 8 over
//! the most keys the exact answer held in one window; "bits/key at peak"
//! is resident bytes × 8 over the keys in the window at the sample with the
//! most resident bytes (samples every 1 000 events after the first window).
//! The timer filter's "steady" bytes are the median of those samples.

use anyhow::Context as _;

use dedupd::filter::cuckoo::{CuckooFilter, CuckooSpec};
use dedupd::filter::hash::DEFAULT_SEED;
use dedupd::filter::{FilterSpec, KeyHash, SlidingFilter};
use dedupd::testkit::oracle::{Confusion, ExactWindow};
use dedupd::testkit::text::TextCorpus;
use dedupd::testkit::workload::{KeyDist, RateProfile, Stream};

/// Flags of `dedupd-lab cuckoo`.
#[derive(Debug, clap::Args)]
pub struct CuckooArgs {
    /// `bigrams` or `sentences` (see the module's documentation).
    #[arg(long, default_value = "bigrams")]
    pub stream: String,
    /// Sliding window in ms.
    #[arg(long, default_value_t = 60_000)]
    pub window_ms: u64,
    /// Events per second of event time (bigrams).
    #[arg(long, default_value_t = 2_000)]
    pub rate: u64,
    /// Bigrams in bursts: `BURST_RATE:QUIET_S:BURST_S`, the stream runs
    /// QUIET_S seconds at `--rate`, then BURST_S at BURST_RATE, and again.
    #[arg(long)]
    pub bursts: Option<String>,
    /// Seconds of event time (sentences).
    #[arg(long, default_value_t = 130)]
    pub seconds: u64,
    /// Target FPR of both kinds.
    #[arg(long, default_value_t = 0.01)]
    pub fpr: f64,
    /// Also write the stream as JSON lines `{"k": key, "t": ms}` here (for
    /// `dedupd filter`).
    #[arg(long)]
    pub write_jsonl: Option<std::path::PathBuf>,
}

/// One filter under test.
enum Under {
    Timer(Box<SlidingFilter>),
    Cuckoo(Box<CuckooFilter>),
}

impl Under {
    fn observe(&mut self, h: &KeyHash, t: u64) -> bool {
        match self {
            Under::Timer(f) => !f.observe(h, t).is_distinct(),
            Under::Cuckoo(f) => f.observe(h, t),
        }
    }

    fn memory_bytes(&self) -> usize {
        match self {
            Under::Timer(f) => f.memory_bytes(),
            Under::Cuckoo(f) => f.memory_bytes(),
        }
    }

    fn created(&self) -> u64 {
        match self {
            Under::Timer(f) => f.counters().generations_created,
            Under::Cuckoo(f) => f.counters().tables_created,
        }
    }
}

struct Run {
    name: String,
    filter: Under,
    confusion: Confusion,
    peak_bytes: usize,
    bits_at_peak: f64,
    samples: Vec<usize>,
}

/// The times of events at `rate` per second, with bursts as `--bursts` says.
fn times(n: usize, rate: u64, bursts: Option<&str>) -> anyhow::Result<Vec<u64>> {
    let Some(b) = bursts else {
        return Ok((0..n as u64).map(|i| i * 1_000 / rate).collect());
    };
    let f: Vec<u64> = b.split(':').map(str::parse).collect::<Result<_, _>>().context("--bursts")?;
    let &[burst, quiet_s, burst_s] = f.as_slice() else { anyhow::bail!("--bursts BURST_RATE:QUIET_S:BURST_S") };
    let (mut out, mut second) = (Vec::with_capacity(n), 0u64);
    while out.len() < n {
        let r = if second % (quiet_s + burst_s) < quiet_s { rate } else { burst };
        out.extend((0..r).map(|j| second * 1_000 + j * 1_000 / r).take(n - out.len()));
        second += 1;
    }
    Ok(out)
}

/// The Brown Corpus's word bigrams in corpus order, at the times given.
fn bigrams(rate: u64, bursts: Option<&str>) -> anyhow::Result<Vec<(String, u64)>> {
    let corpus = TextCorpus::load().map_err(anyhow::Error::msg)?;
    let mut words = Vec::new();
    for i in 1..=corpus.len() as u64 {
        for w in corpus.key(i).split_whitespace() {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
            if !w.is_empty() {
                words.push(w);
            }
        }
    }
    let pairs: Vec<String> = words.windows(2).map(|p| format!("{} {}", p[0], p[1])).collect();
    let times = times(pairs.len(), rate, bursts)?;
    Ok(pairs.into_iter().zip(times).collect())
}

/// `tests/filter_cli.rs`'s text stream: Brown Corpus sentences as keys.
fn sentences(seconds: u64) -> anyhow::Result<Vec<(String, u64)>> {
    let corpus = TextCorpus::load().map_err(anyhow::Error::msg)?;
    let dist = KeyDist::Recurring { p_new: 0.415, min_gap_ms: 100, max_gap_ms: 90_000 };
    let stream = Stream::new(2027, dist, RateProfile::steady(1000, 1000), seconds);
    let ids: Vec<(u64, u64)> = stream.collect();
    let keys = ids.iter().map(|&(id, _)| id).max().unwrap_or(0);
    anyhow::ensure!(keys <= corpus.len() as u64, "{keys} keys, more than the corpus's {} sentences", corpus.len());
    Ok(ids.into_iter().map(|(id, t)| (corpus.key(id), t)).collect())
}

/// The average and the most keys the exact answer holds in a window (the
/// average over one sample per second of event time after the first window).
fn window_keys(events: &[(String, u64)], window_ms: u64) -> (u64, u64) {
    let mut exact = ExactWindow::new(window_ms);
    let (mut most, mut sum, mut n, mut next) = (0, 0, 0, window_ms);
    for (k, t) in events {
        exact.observe(k, *t);
        most = most.max(exact.keys_in_window() as u64);
        if *t >= next {
            next = t - t % 1_000 + 1_000;
            sum += exact.keys_in_window() as u64;
            n += 1;
        }
    }
    (sum / n.max(1), most)
}

pub fn run(args: &CuckooArgs) -> anyhow::Result<()> {
    let events = match args.stream.as_str() {
        "bigrams" => bigrams(args.rate, args.bursts.as_deref()),
        "sentences" => sentences(args.seconds),
        other => anyhow::bail!("--stream {other}: bigrams or sentences"),
    }
    .context("the real-text stream")?;
    if let Some(path) = &args.write_jsonl {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for (k, t) in &events {
            let k: String =
                k.chars().flat_map(|c| ['\\', c].into_iter().skip(usize::from(c != '"' && c != '\\'))).collect();
            anyhow::ensure!(!k.chars().any(char::is_control), "a control character in {k:?}");
            writeln!(out, "{{\"k\": \"{k}\", \"t\": {t}}}")?;
        }
    }
    let hashes: Vec<KeyHash> = events.iter().map(|(k, _)| KeyHash::of(DEFAULT_SEED, k.as_bytes())).collect();
    let (average, most) = window_keys(&events, args.window_ms);

    let timer = |sized_growth| {
        let spec = FilterSpec {
            window_ms: args.window_ms,
            fpr: args.fpr,
            expected_keys: average,
            sized_growth,
            ..FilterSpec::default()
        };
        spec.resolve().map(|p| Under::Timer(Box::new(SlidingFilter::new(p))))
    };
    let cuckoo = |expected_keys: Option<u64>| {
        let spec = CuckooSpec { window_ms: args.window_ms, fpr: args.fpr, expected_keys, ..CuckooSpec::default() };
        spec.resolve().map(|p| Under::Cuckoo(Box::new(CuckooFilter::new(p))))
    };
    let filters = vec![
        ("timer, expected = average".to_string(), timer(false)?),
        ("timer, expected = average, sized growth".to_string(), timer(true)?),
        (format!("cuckoo, expected = peak ({most})"), cuckoo(Some(most))?),
        (format!("cuckoo, expected = average ({average})"), cuckoo(Some(average))?),
        (format!("cuckoo, expected = average / 10 ({})", average / 10), cuckoo(Some(average / 10))?),
        ("cuckoo, no estimate".to_string(), cuckoo(None)?),
    ];
    let mut runs: Vec<Run> = filters
        .into_iter()
        .map(|(name, filter)| Run {
            name,
            filter,
            confusion: Confusion::default(),
            peak_bytes: 0,
            bits_at_peak: 0.0,
            samples: Vec::new(),
        })
        .collect();

    let mut exact = ExactWindow::new(args.window_ms);
    for (i, ((k, t), h)) in events.iter().zip(&hashes).enumerate() {
        let truth = exact.observe(k, *t);
        let sample = i % 1_000 == 0 && *t >= args.window_ms;
        for r in &mut runs {
            let said = r.filter.observe(h, *t);
            r.confusion.record(said, truth);
            let bytes = r.filter.memory_bytes();
            if bytes >= r.peak_bytes {
                r.peak_bytes = bytes;
                r.bits_at_peak = bytes as f64 * 8.0 / exact.keys_in_window().max(1) as f64;
            }
            if sample {
                r.samples.push(bytes);
            }
        }
    }

    println!(
        "stream: {} {} events, window {} ms, target FPR {}, keys per window: average {average}, peak {most} ({:.2}x)",
        events.len(),
        args.stream,
        args.window_ms,
        args.fpr,
        most as f64 / average.max(1) as f64
    );
    println!(
        "| filter | FPR | FNR | peak bytes | bits per peak window key | bits/key at peak | created | steady bytes \
         (median) | peak / steady |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &mut runs {
        r.samples.sort_unstable();
        let steady = r.samples.get(r.samples.len() / 2).copied().unwrap_or(0);
        println!(
            "| {} | {:.5} | {:.5} | {} | {:.1} | {:.1} | {} | {} | {:.2} |",
            r.name,
            r.confusion.fpr(),
            r.confusion.fnr(),
            r.peak_bytes,
            r.peak_bytes as f64 * 8.0 / most as f64,
            r.bits_at_peak,
            r.filter.created(),
            steady,
            r.peak_bytes as f64 / steady.max(1) as f64
        );
    }
    Ok(())
}
