//! `dedupd-lab design-space`: the experiments of one-is-enough §7 that
//! the accuracy report does not cover, run on the simulator ([`super::sim`]):
//! Fig. 1 (failures, S_f), Fig. 5 (FPR, fairness and load share against
//! the number of slices; the x-of-k heuristic), Fig. 7c (pipelining),
//! Table 1 and Fig. 12 (Bloom trees). Append-only filters, as in the
//! paper's slicing experiments: nothing expires. And the §3.2 availability
//! policies for a slice that is restoring, on the exact oracle
//! (`availability.csv`).
//!
//! Three key streams of `--events` events each: synthetic uniform and
//! Zipf(1.0) with about the paper's 5,700 distinct keys, and the words of
//! the Brown Corpus (`scripts/text_corpus.sh`), sampled in corpus order — a
//! real stream with a natural Zipf-like skew, like the paper's web log. A
//! Bloom tree needs producers: a text event's producer is where in the
//! corpus it comes from (16 contiguous parts, so neighbouring leaves share
//! genres, as neighbouring client IPs share interests); a synthetic event's
//! producer is drawn at random (no locality at all).
//!
//! Writes one CSV per figure and `summary.md` (every table) into `--out`;
//! `scripts/plot_design_space.py` draws the PNGs.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Context as _;

use super::accuracy::{Table, f3, r6, row};
use super::sim::{self, BloomTree, Horizontal, TreeKind, Vertical, cells_for, fail_slices};
use super::stream_kinds::universe_for;
use dedupd::filter::KeyHash;
use dedupd::filter::hash::DEFAULT_SEED;
use dedupd::filter::timer::sizing::{bloom_fpr, horizontal_fpr};
use dedupd::testkit::text::TextCorpus;
use dedupd::testkit::workload::{Rng, Zipf};

/// Flags of `dedupd-lab design-space`.
#[derive(Debug, clap::Args)]
pub struct DesignSpaceArgs {
    /// Events per stream (the paper's data sets hold 100,000).
    #[arg(long, default_value_t = 100_000)]
    pub events: usize,
    /// Distinct keys of the synthetic streams (the paper's: about 5,700).
    #[arg(long, default_value_t = 5_700)]
    pub distinct: u64,
    /// Streams: uniform, zipf, text.
    #[arg(long, value_delimiter = ',', default_value = "uniform,zipf,text")]
    pub data: Vec<String>,
    /// Seeds the streams, the failure draws and the producers.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the CSV files and summary.md.
    #[arg(long, default_value = "docs/dev/paper-reproduction")]
    pub out: PathBuf,
}

/// One event: its hash, an identity for the truth, and where it comes from
/// (in [0, 1): the producer for the Bloom trees).
struct Ev {
    hash: KeyHash,
    id: u128,
    origin: f64,
}

struct Dataset {
    name: String,
    events: Vec<Ev>,
    distinct: u64,
}

fn ev(bytes: &[u8], origin: f64) -> Ev {
    let hash = KeyHash::of(DEFAULT_SEED, bytes);
    Ev { hash, id: u128::from(hash.h1) << 64 | u128::from(hash.h2), origin }
}

impl Dataset {
    fn new(name: &str, events: Vec<Ev>) -> Self {
        let distinct = events.iter().map(|e| e.id).collect::<HashSet<_>>().len() as u64;
        Dataset { name: name.to_owned(), events, distinct }
    }

    /// Uniform ids with a universe that gives about `distinct` keys.
    fn uniform(events: usize, distinct: u64, seed: u64) -> Self {
        let universe = universe_for(events as u64, distinct as f64 / events as f64);
        let mut rng = Rng::new(seed);
        let evs = (0..events).map(|_| ev(&rng.below(universe).to_le_bytes(), rng.next_f64())).collect();
        Dataset::new("uniform", evs)
    }

    /// Zipf(1.0) ids, the universe found by bisection so that the stream
    /// holds about `distinct` keys.
    fn zipf(events: usize, distinct: u64, seed: u64) -> Self {
        let draw = |universe: usize| {
            let z = Zipf::new(universe, 1.0);
            let mut rng = Rng::new(seed);
            (0..events).map(|_| (z.sample(&mut rng), rng.next_f64())).collect::<Vec<_>>()
        };
        let count = |ids: &[(u64, f64)]| ids.iter().map(|e| e.0).collect::<HashSet<_>>().len() as u64;
        let (mut lo, mut hi) = (distinct as usize, 64 * distinct as usize);
        while hi - lo > lo / 200 {
            let mid = (lo + hi) / 2;
            if count(&draw(mid)) < distinct { lo = mid } else { hi = mid }
        }
        let evs = draw(hi).into_iter().map(|(id, origin)| ev(&id.to_le_bytes(), origin)).collect();
        Dataset::new("zipf1.0", evs)
    }

    /// Words of the corpus (lower-cased, punctuation trimmed), each kept
    /// with probability events/total so that the sample keeps corpus order.
    fn text(events: usize, seed: u64) -> anyhow::Result<Self> {
        let corpus = TextCorpus::load().map_err(anyhow::Error::msg)?;
        let sentences: Vec<String> = (1..=corpus.len() as u64).map(|i| corpus.key(i)).collect();
        let words = |s: &str| -> Vec<String> {
            s.split_whitespace()
                .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase())
                .filter(|w| !w.is_empty())
                .collect()
        };
        let total: usize = sentences.iter().map(|s| words(s).len()).sum();
        let keep = (events as f64 / total as f64).min(1.0);
        let mut rng = Rng::new(seed);
        let mut evs = Vec::with_capacity(events);
        for (i, s) in sentences.iter().enumerate() {
            for w in words(s) {
                if rng.next_f64() < keep && evs.len() < events {
                    evs.push(ev(w.as_bytes(), i as f64 / sentences.len() as f64));
                }
            }
        }
        Ok(Dataset::new("text", evs))
    }
}

/// The paper's target false-positive rates (§7).
const RATES: [f64; 3] = [0.02, 0.05, 0.08];
const K: u32 = 4;
const SLICES: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// Failure sets drawn per point (which slices fail matters for horizontal
/// slicing under skew: a failed hot slice takes many events with it).
const DRAWS: u64 = 10;
/// Never-seen keys looked up against a full filter.
const FRESH: u64 = 20_000;

fn fresh_keys(seed: u64) -> Vec<KeyHash> {
    let mut rng = Rng::new(seed ^ 0xF4E5);
    (0..FRESH).map(|_| KeyHash::of(DEFAULT_SEED, &rng.key16())).collect()
}

/// The distinct keys of a stream, first occurrences in order.
fn stored(d: &Dataset) -> Vec<KeyHash> {
    let mut seen = HashSet::new();
    d.events.iter().filter(|e| seen.insert(e.id)).map(|e| e.hash).collect()
}

fn share(keys: &[KeyHash], pred: impl Fn(&KeyHash) -> bool) -> f64 {
    keys.iter().filter(|h| pred(h)).count() as f64 / keys.len() as f64
}

/// The mean over failure draws of `rate(failed)`.
fn over_draws(seed: u64, s: u32, f: u32, mut rate: impl FnMut(&[bool]) -> f64) -> f64 {
    let mut rng = Rng::new(seed);
    (0..DRAWS).map(|_| rate(&fail_slices(&mut rng, s, f))).sum::<f64>() / DRAWS as f64
}

pub fn run(args: &DesignSpaceArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut data = Vec::new();
    for name in &args.data {
        data.push(match name.as_str() {
            "uniform" => Dataset::uniform(args.events, args.distinct, args.seed),
            "zipf" => Dataset::zipf(args.events, args.distinct, args.seed),
            "text" => Dataset::text(args.events, args.seed)?,
            other => anyhow::bail!("--data: unknown stream {other:?}; the streams are uniform, zipf, text"),
        });
        let d = data.last().expect("just pushed");
        eprintln!("{}: {} events, {} distinct", d.name, d.events.len(), d.distinct);
    }
    let fresh = fresh_keys(args.seed);
    let tables = [
        failures(&data, &fresh, args.seed),
        sf_closed_form(),
        sf_measured(&data, &fresh, args.seed),
        slicing(&data, &fresh),
        heuristic(&data, &fresh, args.seed),
        pipelining(args),
        trees(&data),
        top_down(&data),
        availability(args.seed, AVAIL_RATE),
    ];
    let mut summary = format!(
        "# design-space tables\n\n`dedupd-lab design-space --events {} --distinct {} --seed {}`\n\n",
        args.events, args.distinct, args.seed
    );
    for d in &data {
        summary.push_str(&format!("- {}: {} events, {} distinct\n", d.name, d.events.len(), d.distinct));
    }
    for t in &tables {
        let path = args.out.join(t.file);
        std::fs::write(&path, t.csv()).with_context(|| format!("writing {}", path.display()))?;
        summary.push_str(&format!("\n## {}\n\n{}", t.file, t.markdown(&t.header.clone())));
    }
    let path = args.out.join("summary.md");
    std::fs::write(&path, summary).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

/// A filled horizontal filter of m cells over S slices.
fn fill_horizontal(d: &Dataset, m: u64, s: u32, k: u32) -> Horizontal {
    let mut h = Horizontal::new(m, s, k);
    d.events.iter().for_each(|e| {
        h.observe(&e.hash);
    });
    h
}

fn fill_vertical(d: &Dataset, m: u64, s: u32, k: u32) -> Vertical {
    let mut v = Vertical::new(m, s, k);
    d.events.iter().for_each(|e| {
        v.observe(&e.hash);
    });
    v
}

// ---------------------------------------------------------------------------
// Fig. 1: failures.

const FAIL_SLICES: u32 = 40;
const FAIL_P: f64 = 0.05;

fn failures(data: &[Dataset], fresh: &[KeyHash], seed: u64) -> Table {
    let mut t = Table::new(
        "failures.csv",
        &[
            "data",
            "slices",
            "failed",
            "failed_pct",
            "h_fpr",
            "eq5",
            "v_fpr",
            "eq6",
            "h_fnr",
            "h_fnr_theory",
            "v_fnr",
            "v_fnr_exact",
            "v_fnr_paper",
        ],
    );
    let s = FAIL_SLICES;
    for d in data {
        let m = cells_for(d.distinct, FAIL_P, K);
        let (h, v) = (fill_horizontal(d, m, s, K), fill_vertical(d, m, s, K));
        let keys = stored(d);
        let p_fp = bloom_fpr(m as f64, f64::from(K), d.distinct as f64);
        for f in (0..=s / 2).step_by(2) {
            let (ff, sf) = (f64::from(f), f64::from(s));
            let h_fpr = over_draws(seed, s, f, |x| share(fresh, |k| h.contains_with_failures(k, x, true)));
            let v_fpr = over_draws(seed, s, f, |x| share(fresh, |k| v.contains_with_failures(k, x, 0)));
            let h_fnr = over_draws(seed, s, f, |x| share(&keys, |k| !h.contains_with_failures(k, x, false)));
            let v_fnr = over_draws(seed, s, f, |x| share(&keys, |k| !v.contains_with_failures(k, x, K)));
            t.push(row![
                d.name,
                s,
                f,
                f3(100.0 * ff / sf),
                r6(h_fpr),
                r6(sim::eq5_horizontal_failed(ff, sf, p_fp)),
                r6(v_fpr),
                r6(sim::eq6_vertical_failed(ff, sf, p_fp, f64::from(K))),
                r6(h_fnr),
                r6(ff / sf),
                r6(v_fnr),
                r6(1.0 - (1.0 - ff / sf).powi(K as i32)),
                r6(sim::vertical_fnr_paper(K, ff, sf)),
            ]);
        }
    }
    t
}

fn sf_closed_form() -> Table {
    let mut t = Table::new("sf.csv", &["p_fp", "p_max", "failed", "sf_horizontal", "sf_vertical"]);
    for p_fp in [0.02, 0.05] {
        for p_max in [0.1, 0.15, 0.2] {
            for f in 1..=10 {
                let f = f64::from(f);
                t.push(row![
                    p_fp,
                    p_max,
                    f,
                    f3(sim::sf_horizontal(f, p_fp, p_max)),
                    f3(sim::sf_vertical(f, p_fp, p_max, f64::from(K)))
                ]);
            }
        }
    }
    t
}

/// Def. 3 measured: FPR with f = 4 failed slices for S = 5..=60, on filters
/// sized for P_fp = 0.05; the least S under 0.15 is the measured S_f.
fn sf_measured(data: &[Dataset], fresh: &[KeyHash], seed: u64) -> Table {
    let mut t = Table::new("sf_measured.csv", &["data", "failed", "slices", "h_fpr", "eq5", "v_fpr", "eq6"]);
    let f = 4;
    for d in data {
        let m = cells_for(d.distinct, FAIL_P, K);
        let p_fp = bloom_fpr(m as f64, f64::from(K), d.distinct as f64);
        for s in f + 1..=60 {
            let h = fill_horizontal(d, m, s, K);
            let v = fill_vertical(d, m, s, K);
            let h_fpr = over_draws(seed, s, f, |x| share(fresh, |k| h.contains_with_failures(k, x, true)));
            let v_fpr = over_draws(seed, s, f, |x| share(fresh, |k| v.contains_with_failures(k, x, 0)));
            let (ff, sf) = (f64::from(f), f64::from(s));
            t.push(row![
                d.name,
                f,
                s,
                r6(h_fpr),
                r6(sim::eq5_horizontal_failed(ff, sf, p_fp)),
                r6(v_fpr),
                r6(sim::eq6_vertical_failed(ff, sf, p_fp, f64::from(K)))
            ]);
        }
    }
    t
}

// ---------------------------------------------------------------------------
// Fig. 5a–c (and 7a, 8): FPR, fairness and load against S.

/// `(1 - (1 - 1/m)^(k·n))^k`, Eq. 1 with the exact fill term.
fn bloom_exact(m: f64, k: f64, n: f64) -> f64 {
    (1.0 - (1.0 - 1.0 / m).powf(k * n)).powf(k)
}

fn slicing(data: &[Dataset], fresh: &[KeyHash]) -> Table {
    let mut t = Table::new(
        "slicing.csv",
        &[
            "data",
            "p",
            "slices",
            "mode",
            "cells",
            "stream_fpr",
            "theory_stream_fpr",
            "end_fpr",
            "theory_end_fpr",
            "fairness",
            "max_share",
            "messages_per_event",
        ],
    );
    let k = f64::from(K);
    for d in data {
        for p in RATES {
            let m = cells_for(d.distinct, p, K);
            for s in SLICES {
                let mut h = Horizontal::new(m, s, K);
                let mut v = Vertical::new(m, s, K);
                let (mut h_loads, mut v_loads) = (vec![0u64; s as usize], vec![0u64; s as usize]);
                let mut seen = HashSet::new();
                // [horizontal, vertical]: false positives, truly new events,
                // and the theory summed over the new events.
                let (mut fp, mut new, mut theory) = ([0u64; 2], 0u64, [0f64; 2]);
                let hm = h.cells() as f64;
                for e in &d.events {
                    h_loads[h.slice_of(&e.hash)] += 1;
                    for o in v.owners(&e.hash) {
                        v_loads[o as usize] += 1;
                    }
                    let said = [h.observe(&e.hash), v.observe(&e.hash)];
                    let n = seen.len() as f64;
                    if seen.insert(e.id) {
                        new += 1;
                        theory[0] += horizontal_fpr(hm, k, n, f64::from(s));
                        theory[1] += bloom_exact(m as f64, k, n);
                        fp[0] += u64::from(said[0]);
                        fp[1] += u64::from(said[1]);
                    }
                }
                let n = d.distinct as f64;
                let ends = [
                    (share(fresh, |x| h.contains(x)), horizontal_fpr(hm, k, n, f64::from(s)), hm, &h_loads),
                    (share(fresh, |x| v.contains(x)), bloom_exact(m as f64, k, n), m as f64, &v_loads),
                ];
                for (i, (end, end_theory, cells, loads)) in ends.into_iter().enumerate() {
                    let messages = loads.iter().sum::<u64>() as f64 / d.events.len() as f64;
                    t.push(row![
                        d.name,
                        p,
                        s,
                        ["horizontal", "vertical"][i],
                        cells,
                        r6(fp[i] as f64 / new as f64),
                        r6(theory[i] / new as f64),
                        r6(end),
                        r6(end_theory),
                        f3(sim::fairness(loads)),
                        f3(sim::max_share(loads)),
                        f3(messages)
                    ]);
                }
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------
// Fig. 5d: the vertical fault-tolerance heuristic.

fn heuristic(data: &[Dataset], fresh: &[KeyHash], seed: u64) -> Table {
    let mut t = Table::new(
        "heuristic.csv",
        &["data", "p", "hashes", "slices", "failed", "x", "fpr", "theory_fpr", "paper_fpr", "fnr", "theory_fnr"],
    );
    let (k, s, f) = (8, 40, 8);
    for d in data {
        for p in RATES {
            let v = fill_vertical(d, cells_for(d.distinct, p, k), s, k);
            let keys = stored(d);
            let fill = p.powf(1.0 / f64::from(k));
            for x in 0..=k {
                let fpr = over_draws(seed, s, f, |dead| share(fresh, |h| v.contains_with_failures(h, dead, x)));
                let fnr = over_draws(seed, s, f, |dead| share(&keys, |h| !v.contains_with_failures(h, dead, x)));
                let (ff, sf) = (f64::from(f), f64::from(s));
                t.push(row![
                    d.name,
                    p,
                    k,
                    s,
                    f,
                    x,
                    r6(fpr),
                    r6(sim::heuristic_fpr(k, x, ff, sf, fill)),
                    r6(sim::heuristic_fpr_paper(x, ff, sf, fill)),
                    r6(fnr),
                    r6(sim::heuristic_fnr(k, x, ff, sf))
                ]);
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------
// Fig. 7c: messages per lookup with pipelining.

fn pipelining(args: &DesignSpaceArgs) -> Table {
    let mut t = Table::new(
        "pipelining.csv",
        &[
            "distinct_target",
            "distinct",
            "slices",
            "parallel",
            "parallel_theory",
            "pipelined",
            "pipelined_on_distinct",
            "pipelined_on_duplicates",
        ],
    );
    for target in [0.8, 0.5, 0.2] {
        let wanted = (target * args.events as f64) as u64;
        let d = Dataset::uniform(args.events, wanted, args.seed ^ target.to_bits());
        let m = cells_for(d.distinct, FAIL_P, K);
        for s in [2, 4, 8, 16, 32, 64] {
            let mut v = Vertical::new(m, s, K);
            let mut seen = HashSet::new();
            let (mut parallel, mut piped, mut piped_new, mut new) = (0u64, 0u64, 0u64, 0u64);
            for e in &d.events {
                let msgs = u64::from(v.pipelined_messages(&e.hash));
                parallel += v.owners(&e.hash).len() as u64;
                piped += msgs;
                if seen.insert(e.id) {
                    new += 1;
                    piped_new += msgs;
                }
                v.observe(&e.hash);
            }
            let n = d.events.len() as u64;
            t.push(row![
                target,
                f3(d.distinct as f64 / n as f64),
                s,
                f3(parallel as f64 / n as f64),
                f3(sim::parallel_messages(K, s)),
                f3(piped as f64 / n as f64),
                f3(piped_new as f64 / new as f64),
                f3((piped - piped_new) as f64 / (n - new).max(1) as f64)
            ]);
        }
    }
    t
}

// ---------------------------------------------------------------------------
// Table 1 and Fig. 12: Bloom trees.

/// Leaves of every tree: a 2-level tree (16 leaves under the root, Table 1)
/// and a 5-level binary tree (Fig. 12).
const TREE_SHAPES: [(usize, usize); 2] = [(1, 16), (4, 2)];
const TREE_P: f64 = 0.05;

struct TreeRun {
    tree: BloomTree,
    fp: u64,
    fn_: u64,
    /// Events resolved (judged) at each level: hits, and distinct events at the root.
    resolved: Vec<u64>,
}

fn run_tree(
    d: &Dataset,
    kind: TreeKind,
    shape: (usize, usize),
    p: f64,
    threshold: Option<usize>,
    resume: bool,
) -> TreeRun {
    let m = cells_for(d.distinct, p, K);
    let mut tree = BloomTree::new(kind, shape.0, shape.1, m, K, threshold);
    tree.resume_after_overrule = resume;
    let leaves = tree.leaves();
    let (mut seen, mut delivered) = (HashSet::new(), HashSet::new());
    let (mut fp, mut fn_) = (0, 0);
    let mut resolved = vec![0u64; shape.0 + 1];
    for e in &d.events {
        let leaf = ((e.origin * leaves as f64) as usize).min(leaves - 1);
        let before = tree.counts.hits.clone();
        let dup = tree.observe(leaf, &e.hash);
        match tree.counts.hits.iter().zip(&before).position(|(a, b)| a != b) {
            Some(level) => resolved[level] += 1,
            None => resolved[0] += 1,
        }
        let new = seen.insert(e.id);
        fp += u64::from(dup && new);
        if !dup {
            fn_ += u64::from(!delivered.insert(e.id));
        }
    }
    TreeRun { tree, fp, fn_, resolved }
}

fn trees(data: &[Dataset]) -> Table {
    let mut t = Table::new("tree.csv", &["data", "kind", "levels", "level", "hits", "accesses", "resolved"]);
    for d in data {
        for shape in TREE_SHAPES {
            for kind in [TreeKind::Dense, TreeKind::Sparse] {
                let r = run_tree(d, kind, shape, TREE_P, None, false);
                for level in 0..=shape.0 {
                    let c = &r.tree.counts;
                    t.push(row![
                        d.name,
                        kind.name(),
                        shape.0 + 1,
                        level,
                        c.hits[level],
                        c.accesses[level],
                        r.resolved[level]
                    ]);
                }
            }
        }
    }
    t
}

/// Fig. 12c: false positives of the 5-level trees with top-down testing
/// from each threshold level, as the paper does it (an overruled hit means
/// distinct) and resuming the climb; and a single filter of the same
/// configuration for Prop. 4.
fn top_down(data: &[Dataset]) -> Table {
    let mut t = Table::new(
        "topdown.csv",
        &["data", "p", "kind", "variant", "threshold", "fp", "fpr", "fn", "topdown_accesses", "single_filter_fp"],
    );
    let shape = TREE_SHAPES[1];
    for d in data {
        for p in RATES {
            let single_fp = {
                let mut v = Vertical::new(cells_for(d.distinct, p, K), 1, K);
                let mut seen = HashSet::new();
                let mut fp = 0;
                for e in &d.events {
                    let dup = v.observe(&e.hash);
                    fp += u64::from(seen.insert(e.id) && dup);
                }
                fp
            };
            for kind in [TreeKind::Dense, TreeKind::Sparse] {
                for (variant, resume) in [("paper", false), ("resume", true)] {
                    for threshold in [None, Some(1), Some(2), Some(3), Some(4)] {
                        if threshold.is_none() && resume {
                            continue;
                        }
                        let r = run_tree(d, kind, shape, p, threshold, resume);
                        t.push(row![
                            d.name,
                            p,
                            kind.name(),
                            if threshold.is_none() { "none" } else { variant },
                            threshold.map_or("none".to_owned(), |x| x.to_string()),
                            r.fp,
                            r6(r.fp as f64 / d.distinct as f64),
                            r.fn_,
                            r.tree.counts.topdown_accesses.iter().sum::<u64>(),
                            single_fp
                        ]);
                    }
                }
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------
// §3.2 availability policies for a horizontal slice that is not available
// (restoring after a rebalance), against the exact answer.

/// One slice of 8 is unavailable from `AT_MS` for each of these durations
/// (5 s: the measured restore of a 1 GiB filter, docs/dev/performance-daemon.md).
const OUTAGES_MS: [u64; 5] = [500, 1_000, 5_000, 10_000, 30_000];
const AT_MS: u64 = 120_000;
const AVAIL_WINDOW_MS: u64 = 60_000;
const AVAIL_RATE: u64 = 10_000;
const AVAIL_SLICES: u32 = 8;

/// `wait` judges the slice's records exactly, late; `deliver` passes them
/// (and remembers them as delivered); `drop` sends them to the duplicates
/// path (and remembers nothing). Each run is compared verdict by verdict
/// with the exact oracle, so the filter's own errors are not in the counts.
fn availability(seed: u64, rate: u64) -> Table {
    use dedupd::testkit::oracle::ExactWindow;
    use dedupd::testkit::workload::{KeyDist, RateProfile, Stream};
    let mut t = Table::new(
        "availability.csv",
        &[
            "stream",
            "outage_ms",
            "policy",
            "records",
            "affected",
            "affected_duplicates",
            "extra_in_outage",
            "missing_in_outage",
            "extra_after",
            "missing_after",
            "mean_added_latency_ms",
            "max_added_latency_ms",
        ],
    );
    let streams = [
        ("recurring", KeyDist::Recurring { p_new: 0.5, min_gap_ms: 10, max_gap_ms: 2 * AVAIL_WINDOW_MS }),
        ("zipf1.0", KeyDist::Zipf(Zipf::new(1_000_000, 1.0))),
    ];
    for (name, dist) in streams {
        let events: Vec<(u64, u64, bool)> = Stream::new(seed, dist, RateProfile::steady(1_000, rate), 240)
            .map(|(id, time)| (id, time, KeyHash::of(DEFAULT_SEED, &id.to_le_bytes()).slice(AVAIL_SLICES) == 0))
            .collect();
        for outage in OUTAGES_MS {
            for policy in ["wait", "deliver", "drop"] {
                let (mut exact, mut run) = (ExactWindow::new(AVAIL_WINDOW_MS), ExactWindow::new(AVAIL_WINDOW_MS));
                // [extra, missing] deliveries against the exact answer: [in the outage, after it].
                let mut errors = [[0u64; 2]; 2];
                let (mut affected, mut affected_dups, mut latency_sum, mut latency_max) = (0u64, 0u64, 0u64, 0u64);
                for &(id, time, home) in &events {
                    let truth = exact.observe(&id, time);
                    let out = home && (AT_MS..AT_MS + outage).contains(&time);
                    let said = match (out, policy) {
                        (true, "deliver") => {
                            run.force_deliver(&id, time);
                            false
                        }
                        (true, "drop") => true,
                        // `wait`: the same verdict, released when the slice is back.
                        _ => run.observe(&id, time),
                    };
                    if out {
                        affected += 1;
                        affected_dups += u64::from(truth);
                        if policy == "wait" {
                            let added = AT_MS + outage - time;
                            latency_sum += added;
                            latency_max = latency_max.max(added);
                        }
                    }
                    let phase = usize::from(!out);
                    errors[phase][0] += u64::from(!said && truth);
                    errors[phase][1] += u64::from(said && !truth);
                }
                t.push(row![
                    name,
                    outage,
                    policy,
                    events.len(),
                    affected,
                    affected_dups,
                    errors[0][0],
                    errors[0][1],
                    errors[1][0],
                    errors[1][1],
                    f3(latency_sum as f64 / affected.max(1) as f64),
                    latency_max
                ]);
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows<'a>(t: &'a Table, col: &str, value: &str) -> impl Iterator<Item = &'a Vec<String>> {
        let i = t.col(col);
        let value = value.to_owned();
        t.rows.iter().filter(move |r| r[i] == value)
    }

    fn num(t: &Table, r: &[String], col: &str) -> f64 {
        r[t.col(col)].parse().unwrap()
    }

    fn small() -> Vec<Dataset> {
        vec![Dataset::uniform(5_000, 500, 1), Dataset::zipf(5_000, 500, 1)]
    }

    #[test]
    fn streams_hold_the_distinct_keys_asked_for() {
        for d in small() {
            assert!((d.distinct as f64 - 500.0).abs() < 15.0, "{}: {}", d.name, d.distinct);
            assert_eq!(d.events.len(), 5_000);
        }
    }

    #[test]
    fn trees_match_the_single_filter_and_resuming_misses_nothing() {
        let t = top_down(&small());
        assert!(!t.rows.is_empty());
        for r in rows(&t, "variant", "none") {
            // Prop. 4 with equality: the same false positives as one filter.
            assert_eq!(num(&t, r, "fp"), num(&t, r, "single_filter_fp"), "{r:?}");
        }
        for r in rows(&t, "variant", "resume") {
            assert_eq!(num(&t, r, "fn"), 0.0, "{r:?}");
        }
        let trees = trees(&small());
        // Every event tests its leaf once (a dense test-and-set is one access).
        let leaves: Vec<_> = rows(&trees, "kind", "dense")
            .filter(|r| num(&trees, r, "level") == num(&trees, r, "levels") - 1.0)
            .collect();
        assert_eq!(leaves.len(), 4, "two streams, two tree shapes");
        for r in leaves {
            assert_eq!(num(&trees, r, "accesses"), 5_000.0, "{r:?}");
        }
    }

    #[test]
    fn availability_policies_cost_what_they_should() {
        let t = availability(3, 400);
        for r in &t.rows {
            let (affected, dups) = (num(&t, r, "affected"), num(&t, r, "affected_duplicates"));
            assert!(affected > 0.0);
            let errors =
                ["extra_in_outage", "missing_in_outage", "extra_after", "missing_after"].map(|c| num(&t, r, c));
            match r[t.col("policy")].as_str() {
                "wait" => {
                    assert_eq!(errors, [0.0; 4], "{r:?}");
                    assert!(num(&t, r, "max_added_latency_ms") <= num(&t, r, "outage_ms"));
                }
                // Every duplicate of the outage goes through, no new record is lost.
                "deliver" => assert_eq!(errors[..2], [dups, 0.0], "{r:?}"),
                // Every new record of the outage is diverted, no duplicate goes through.
                "drop" => assert_eq!(errors[..2], [0.0, affected - dups], "{r:?}"),
                other => panic!("policy {other}"),
            }
        }
    }
}
