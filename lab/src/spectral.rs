//! `dedupd-lab spectral`: the Spectral Bloom Filter's accuracy.
//!
//! 1. The paper's Table 1 setting (Cohen and Matias, §3.2): k = 5, n = 1000
//!    distinct keys, Zipf skew 0.5, RM's secondary SBF of m/2 counters, γ =
//!    nk/m from 0.1 to 2. For each γ, averaged over seeds: the measured error
//!    rates (a key's estimate ≠ its count) of MS, RM and MI against the
//!    formulas — `E_b = (1-e^(-γ))^k` for MS, and for RM
//!    `E_RM = P(R)·P(E|R) + (1-P(R))·E_bs` with the measured share of keys
//!    with a recurring minimum P(R), the errors among them P(E|R), and the
//!    secondary's Bloom error `E_bs` at `γ_s = n(1-P(R))k/m_s`; RM's errors
//!    broken down by cause, and `E_RM` with late detection counted
//!    ([`rm_rescue_keys_first`]), which the paper's formula leaves out
//!    (docs/spectral.md, "Why measured E_RM is not the paper's E_RM").
//! 2. Windowed counts against exact sliding-window counts on a Zipf stream
//!    with times: the additive error (estimate − exact) of each record's key
//!    over the window, by estimator and sub-window count.
//!
//! 3. With `--compact`, instead: compact (variable-length) counters against
//!    fixed-width ones on Zipf streams — bytes held, and the time per insert
//!    and per query (see [`compact_rows`]).
//!
//! Prints the tables as CSV.

use std::collections::{HashMap, VecDeque};

use dedupd::filter::KeyHash;
use dedupd::filter::hash::DEFAULT_SEED;
use dedupd::filter::spectral::{CounterKind, Estimator, Spectral, SpectralParams, WindowedCounts, bloom_error};
use dedupd::testkit::workload::{Rng, Zipf};

/// Flags of `dedupd-lab spectral`.
#[derive(Debug, clap::Args)]
pub struct SpectralArgs {
    /// Distinct keys n.
    #[arg(long, default_value_t = 1000)]
    pub distinct: u64,
    /// Stream length as a multiple of n (every key is inserted once, then
    /// the rest are Zipf draws).
    #[arg(long, default_value_t = 10)]
    pub draws_per_key: u64,
    /// Zipf skew.
    #[arg(long, default_value_t = 0.5)]
    pub skew: f64,
    /// Hashes k.
    #[arg(long, default_value_t = 5)]
    pub hashes: u32,
    /// Loads γ = nk/m.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1,1.25,1.5,1.75,2")]
    pub gammas: Vec<f64>,
    /// Order of the Table 1 stream (the same multiset either way).
    #[arg(long, value_enum, default_value_t = StreamOrder::KeysFirst)]
    pub order: StreamOrder,
    /// Runs per γ (seeds 1..=runs), averaged.
    #[arg(long, default_value_t = 20)]
    pub runs: u64,
    /// Also measure windowed counts against exact counts.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub windowed: bool,
    /// Instead of the accuracy tables: memory and speed of compact counters
    /// against fixed-width ones (run a release build for the timings).
    #[arg(long)]
    pub compact: bool,
    /// --compact: distinct keys n (m = nk/0.7 counters).
    #[arg(long, default_value_t = 100_000)]
    pub compact_distinct: u64,
    /// --compact: inserts per run.
    #[arg(long, default_value_t = 2_000_000)]
    pub compact_inserts: u64,
    /// --compact: timed rounds (fixed and compact alternate in each).
    #[arg(long, default_value_t = 5)]
    pub compact_rounds: u32,
}

/// The order in which the Table 1 stream's multiset is inserted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamOrder {
    /// Every key once (in key order), then the Zipf draws: a key's first
    /// copy falls while the filter is still filling, every later one after
    /// all n keys are in.
    #[default]
    KeysFirst,
    /// The same multiset in a random order: a key's copies, first and
    /// later, fall anywhere among the other keys' arrivals.
    Shuffled,
}

/// One γ of Table 1, averaged over runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableRow {
    pub gamma: f64,
    pub counters: u64,
    pub e_b_formula: f64,
    pub e_ms: f64,
    pub p_recurring: f64,
    pub p_error_given_recurring: f64,
    pub gamma_s: f64,
    pub e_bs: f64,
    pub e_rm_formula: f64,
    /// `E_RM` with late detection counted (keys-first order only, NaN
    /// otherwise): see [`rm_rescue_keys_first`].
    pub e_rm_late_formula: f64,
    pub e_rm: f64,
    pub e_mi: f64,
    /// Keys RM reported below their count (its B_f caveat).
    pub rm_under: f64,
    /// RM's errors by where the estimate came from: a recurring primary
    /// minimum, a single minimum of a key never moved to the secondary, or
    /// the secondary (a moved key), as shares of all keys.
    pub rm_err_recurring: f64,
    pub rm_err_unmoved: f64,
    pub rm_err_moved: f64,
    /// The moved keys' errors (`rm_err_moved`) split by why the secondary
    /// was wrong, as shares of all keys: the key moved itself late (its
    /// primary minimum was already above its count when the minimum became
    /// single: the secondary starts from an overestimate) — and of those,
    /// moved at the key's very first insert; the key moved itself exactly
    /// but other moved keys share all its secondary counters (the
    /// secondary's own Bloom error); the key never moved itself and its
    /// B_f bits were set by other keys (a B_f false positive).
    pub rm_err_late: f64,
    pub rm_err_late_first_insert: f64,
    pub rm_err_secondary_collision: f64,
    pub rm_err_flags_false_positive: f64,
    /// RM's error rate if a key marked in B_f were always looked up in the
    /// secondary, recurring minimum or not (a reading of the paper's
    /// refinement; `Spectral::query` asks the secondary on a single
    /// minimum only).
    pub e_rm_flag_lookup: f64,
    /// Error rates per query rather than per key — each key weighted by its
    /// count, as if every record of the stream were looked up: MS, MI, RM.
    pub e_per_query: [f64; 3],
    /// Mean (estimate − count) over all keys: MS, MI, RM.
    pub mean_excess: [f64; 3],
}

/// The share of Minimum Selection's errors that Recurring Minimum can
/// correct on the keys-first stream, at load γ with k hashes.
///
/// A key is an MS error when all k of its counters are shared with other
/// keys. RM corrects it only if it moves to the secondary while its primary
/// minimum is still exact: with this stream all keys arrive in the first
/// pass, so that can only happen at the key's own first insert, and only if
/// exactly one of its counters is still empty then (the minimum, 1, is
/// single). Every later single minimum is over the count already (late
/// detection): the key enters the secondary with that overestimate. A key
/// arriving at fraction t of the first pass finds a counter that ends up
/// shared already taken with probability `a = (1-e^(-γt))/(1-e^(-γ))` (other
/// keys per counter are Poisson(γ)); so the share is the mean over t of
/// `k(1-a)a^(k-1)`.
pub fn rm_rescue_keys_first(gamma: f64, k: u32) -> f64 {
    const STEPS: u32 = 1000;
    let k_f = f64::from(k);
    let sum: f64 = (0..STEPS)
        .map(|i| {
            let t = (f64::from(i) + 0.5) / f64::from(STEPS);
            let a = (1.0 - (-gamma * t).exp()) / (1.0 - (-gamma).exp());
            k_f * (1.0 - a) * a.powi(k as i32 - 1)
        })
        .sum();
    sum / f64::from(STEPS)
}

fn key(i: u64) -> KeyHash {
    KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
}

/// Measures one γ over `runs` seeds.
pub fn table_row(
    distinct: u64,
    draws_per_key: u64,
    skew: f64,
    k: u32,
    gamma: f64,
    runs: u64,
    order: StreamOrder,
) -> TableRow {
    let m = ((distinct * u64::from(k)) as f64 / gamma).round() as u64;
    let zipf = Zipf::new(distinct as usize, skew);
    let mut row = TableRow { gamma, counters: m, e_b_formula: bloom_error(gamma, k), ..TableRow::default() };
    let (mut recurring, mut errors_recurring) = (0u64, 0u64);
    let mut errors = [0u64; 3];
    let mut under_rm = 0u64;
    let mut rm_err = [0u64; 3];
    // Late, of those at the first insert, secondary collision, B_f false positive.
    let mut rm_moved_err = [0u64; 4];
    let mut rm_flag_lookup_errors = 0u64;
    let mut excess = [0u64; 3];
    let mut errors_weighted = [0u64; 3];
    for seed in 1..=runs {
        let mut filters: Vec<Spectral> = Estimator::ALL
            .iter()
            .map(|&estimator| {
                Spectral::new(&SpectralParams {
                    estimator,
                    counters: m,
                    hashes: k,
                    counter_bits: 32,
                    store: CounterKind::Fixed,
                })
            })
            .collect();
        let mut exact = vec![0u32; distinct as usize];
        let mut rng = Rng::new(seed);
        // Keys are salted by the seed so every run hashes other keys.
        let salt = seed << 40;
        let mut draws: Vec<u64> = (0..distinct)
            .chain((0..distinct * draws_per_key.saturating_sub(1)).map(|_| zipf.sample(&mut rng)))
            .collect();
        if order == StreamOrder::Shuffled {
            for i in (1..draws.len()).rev() {
                draws.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        // Per key, for RM: (count, whether the primary minimum was exact)
        // at the insert that moved it to the secondary, if it moved itself.
        let mut moved: Vec<Option<(u32, bool)>> = vec![None; distinct as usize];
        for x in draws {
            let f_x = &mut exact[x as usize];
            *f_x += 1;
            let h = key(salt | x);
            let flagged_before = filters[2].is_moved(&h);
            filters.iter_mut().for_each(|f| f.insert(&h, 1));
            // Only this key's insert ran since `flagged_before`: if its
            // flags are set now, this insert moved it.
            if !flagged_before && filters[2].is_moved(&h) {
                moved[x as usize] = Some((*f_x, filters[2].primary().query(&h) == *f_x));
            }
        }
        for (x, &f_x) in exact.iter().enumerate() {
            let h = key(salt | x as u64);
            for (i, filter) in filters.iter().enumerate() {
                errors[i] += u64::from(filter.query(&h) != f_x);
                errors_weighted[i] += if filter.query(&h) != f_x { u64::from(f_x) } else { 0 };
                excess[i] += u64::from(filter.query(&h).saturating_sub(f_x));
            }
            under_rm += u64::from(filters[2].query(&h) < f_x);
            if filters[2].query(&h) != f_x {
                let source = match (filters[2].primary().is_recurring(&h), filters[2].is_moved(&h)) {
                    (true, _) => 0,
                    (false, false) => 1,
                    (false, true) => 2,
                };
                rm_err[source] += 1;
                if source == 2 {
                    match moved[x] {
                        Some((at, false)) => {
                            rm_moved_err[0] += 1;
                            rm_moved_err[1] += u64::from(at == 1);
                        }
                        Some((_, true)) => rm_moved_err[2] += 1,
                        None => rm_moved_err[3] += 1,
                    }
                }
            }
            let flag_lookup = match filters[2].secondary_estimate(&h) {
                Some(v) if v > 0 && filters[2].is_moved(&h) => v.min(filters[2].primary().query(&h)),
                _ => filters[2].primary().query(&h),
            };
            rm_flag_lookup_errors += u64::from(flag_lookup != f_x);
            if filters[0].primary().is_recurring(&h) {
                recurring += 1;
                errors_recurring += u64::from(filters[0].query(&h) != f_x);
            }
        }
    }
    let total = (distinct * runs) as f64;
    row.e_ms = errors[0] as f64 / total;
    row.e_mi = errors[1] as f64 / total;
    row.e_rm = errors[2] as f64 / total;
    row.rm_under = under_rm as f64 / total;
    [row.rm_err_recurring, row.rm_err_unmoved, row.rm_err_moved] = rm_err.map(|e| e as f64 / total);
    row.mean_excess = excess.map(|e| e as f64 / total);
    [row.rm_err_late, row.rm_err_late_first_insert, row.rm_err_secondary_collision, row.rm_err_flags_false_positive] =
        rm_moved_err.map(|e| e as f64 / total);
    row.e_rm_flag_lookup = rm_flag_lookup_errors as f64 / total;
    let inserts = (distinct * draws_per_key.max(1) * runs) as f64;
    row.e_per_query = errors_weighted.map(|e| e as f64 / inserts);
    row.p_recurring = recurring as f64 / total;
    row.p_error_given_recurring = if recurring > 0 { errors_recurring as f64 / recurring as f64 } else { 0.0 };
    let m_s = (m / 2).max(2) as f64;
    row.gamma_s = distinct as f64 * (1.0 - row.p_recurring) * f64::from(k) / m_s;
    row.e_bs = bloom_error(row.gamma_s, k);
    row.e_rm_formula = row.p_recurring * row.p_error_given_recurring + (1.0 - row.p_recurring) * row.e_bs;
    // MS's errors among single-minimum keys, less those RM corrects; the
    // recurring-minimum part is the paper's (RM's primary is MS's SBF).
    let recurring_part = row.p_recurring * row.p_error_given_recurring;
    row.e_rm_late_formula = match order {
        StreamOrder::KeysFirst => recurring_part + (row.e_ms - recurring_part) * (1.0 - rm_rescue_keys_first(gamma, k)),
        StreamOrder::Shuffled => f64::NAN,
    };
    row
}

/// The additive error of windowed counts against exact ones.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowedRow {
    pub estimator: Estimator,
    pub subwindows: u32,
    pub records: u64,
    /// Mean and largest (estimate − exact) over every record's key.
    pub mean_error: f64,
    pub max_error: u64,
    /// Mean exact count, for scale.
    pub mean_exact: f64,
    /// Records whose estimate was below the exact count.
    pub under: u64,
}

/// A Zipf(skew) stream over `universe` keys, one record per ms on average
/// (random gaps of 0 to 2 ms), window `window_ms`, filters at load γ = 0.7
/// for the distinct keys of one sub-window.
pub fn windowed_row(estimator: Estimator, subwindows: u32, records: u64, universe: u64, window_ms: u64) -> WindowedRow {
    let zipf = Zipf::new(universe as usize, 1.0);
    let mut rng = Rng::new(7);
    // Distinct keys per sub-window, measured on the stream itself (a sizing
    // run), so every sub-window filter is at γ ≈ 0.7.
    let sub_ms = window_ms.div_ceil(u64::from(subwindows));
    let per_sub = {
        let mut r = Rng::new(7);
        let mut seen = std::collections::HashSet::new();
        let mut t = 0;
        while t < sub_ms {
            t += r.below(3);
            seen.insert(zipf.sample(&mut r));
        }
        seen.len() as u64
    };
    let params = SpectralParams {
        estimator,
        counters: dedupd::filter::spectral::counters_for(per_sub, 5, 0.7),
        hashes: 5,
        counter_bits: 16,
        store: CounterKind::Fixed,
    };
    let mut w = WindowedCounts::new(params, window_ms, subwindows).expect("valid settings");
    let mut live: VecDeque<(u64, u64)> = VecDeque::new();
    let mut exact: HashMap<u64, u64> = HashMap::new();
    let (mut t, mut sum_err, mut max_err, mut sum_exact, mut under) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for _ in 0..records {
        t += rng.below(3);
        let x = zipf.sample(&mut rng);
        while live.front().is_some_and(|&(s, _)| s + window_ms <= t) {
            let (_, old) = live.pop_front().expect("a front");
            *exact.get_mut(&old).expect("counted") -= 1;
        }
        live.push_back((t, x));
        let n = exact.entry(x).or_default();
        *n += 1;
        let (_, est) = w.observe(&key(x), t);
        under += u64::from(est < *n);
        let err = est.saturating_sub(*n);
        sum_err += err;
        max_err = max_err.max(err);
        sum_exact += *n;
    }
    WindowedRow {
        estimator,
        subwindows,
        records,
        mean_error: sum_err as f64 / records as f64,
        max_error: max_err,
        mean_exact: sum_exact as f64 / records as f64,
        under,
    }
}

/// One Zipf skew of the compact-counter comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactRow {
    pub skew: f64,
    pub counters: u64,
    pub inserts: u64,
    /// The largest counter, and the bits of the paper's N: Σ ceil(log2(C+1))
    /// over all counters (each counter's value in binary, nothing else).
    pub max_counter: u32,
    pub paper_n_bits: u64,
    /// Bytes held by compact counters (32-bit range) and what they hold:
    /// bits of codes, of slack and holes, of index.
    pub compact_bytes: u64,
    pub code_bits: u64,
    pub slack_bits: u64,
    pub index_bits: u64,
    /// Fixed-width counters of 4, 8, 16 and 32 bits: bytes, and counters
    /// saturated (their estimates then differ from unbounded counts).
    pub fixed: [(u8, u64, u64); 4],
    /// Median ns per insert and per query (MS), fixed 32-bit and compact,
    /// over the rounds.
    pub insert_ns: (f64, f64),
    pub query_ns: (f64, f64),
}

/// Compact counters against fixed-width ones: an MS filter of
/// m = n·k/0.7 counters (k = 5) takes `inserts` Zipf(skew) draws over n
/// keys, then is queried for all n keys. Each round times the fixed 32-bit
/// filter and the compact one back to back (alternating which goes first),
/// so both see the same machine load; the medians over rounds are reported.
pub fn compact_rows(distinct: u64, inserts: u64, rounds: u32, skews: &[f64]) -> Vec<CompactRow> {
    use dedupd::filter::spectral::{Store, counters_for};
    use std::time::Instant;
    let m = counters_for(distinct, 5, 0.7);
    let params =
        |counter_bits, store| SpectralParams { estimator: Estimator::Ms, counters: m, hashes: 5, counter_bits, store };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    skews
        .iter()
        .map(|&skew| {
            let zipf = Zipf::new(distinct as usize, skew);
            let mut rng = Rng::new(11);
            let stream: Vec<KeyHash> = (0..inserts).map(|_| key(zipf.sample(&mut rng))).collect();
            let queries: Vec<KeyHash> = (0..distinct).map(key).collect();
            let fill = |store, bits| {
                let mut f = Spectral::new(&params(bits, store));
                let t = Instant::now();
                for h in &stream {
                    f.insert(h, 1);
                }
                let insert = t.elapsed().as_nanos() as f64 / inserts as f64;
                let t = Instant::now();
                let sum: u64 = queries.iter().map(|h| u64::from(f.query(h))).sum();
                let query = t.elapsed().as_nanos() as f64 / distinct as f64;
                std::hint::black_box(sum);
                (f, insert, query)
            };
            let (mut ins, mut qry) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
            let mut kept = None;
            for round in 0..rounds.max(1) {
                let order = if round % 2 == 0 {
                    [CounterKind::Fixed, CounterKind::Compact]
                } else {
                    [CounterKind::Compact, CounterKind::Fixed]
                };
                for kind in order {
                    let (f, i, q) = fill(kind, 32);
                    let (iv, qv) = match kind {
                        CounterKind::Fixed => (&mut ins.0, &mut qry.0),
                        CounterKind::Compact => (&mut ins.1, &mut qry.1),
                    };
                    iv.push(i);
                    qv.push(q);
                    if kind == CounterKind::Compact {
                        kept = Some(f);
                    }
                }
            }
            let compact = kept.expect("at least one round");
            let Store::Compact(c) = compact.primary().counters() else { unreachable!("a compact filter") };
            let values: Vec<u32> = c.values().collect();
            let (code_bits, slack_bits, index_bits) = c.breakdown();
            let fixed = [4u8, 8, 16, 32].map(|bits| {
                let f = Store::Fixed(dedupd::filter::spectral::Counters::new(m as usize, bits));
                let max = f.max();
                (bits, f.memory_bytes(), values.iter().filter(|&&v| v >= max).count() as u64)
            });
            CompactRow {
                skew,
                counters: m,
                inserts,
                max_counter: values.iter().copied().max().unwrap_or(0),
                paper_n_bits: values.iter().map(|&v| u64::from(32 - v.leading_zeros())).sum(),
                compact_bytes: c.memory_bytes(),
                code_bits,
                slack_bits,
                index_bits,
                fixed,
                insert_ns: (median(ins.0), median(ins.1)),
                query_ns: (median(qry.0), median(qry.1)),
            }
        })
        .collect()
}

fn run_compact(args: &SpectralArgs) {
    println!(
        "skew,m,inserts,max_counter,paper_N_bits_per_counter,compact_bytes,compact_bits_per_counter,code_bits,slack_hole_bits,index_bits,fixed4_bytes,fixed4_saturated,fixed8_bytes,fixed8_saturated,fixed16_bytes,fixed16_saturated,fixed32_bytes,insert_ns_fixed32,insert_ns_compact,insert_ratio,query_ns_fixed32,query_ns_compact,query_ratio"
    );
    for r in compact_rows(args.compact_distinct, args.compact_inserts, args.compact_rounds, &[0.5, 1.0, 1.5]) {
        let per = |bits: u64| bits as f64 / r.counters as f64;
        let f = r.fixed;
        println!(
            "{},{},{},{},{:.2},{},{:.2},{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{:.2},{:.1},{:.1},{:.2}",
            r.skew,
            r.counters,
            r.inserts,
            r.max_counter,
            per(r.paper_n_bits),
            r.compact_bytes,
            per(r.compact_bytes * 8),
            r.code_bits,
            r.slack_bits,
            r.index_bits,
            f[0].1,
            f[0].2,
            f[1].1,
            f[1].2,
            f[2].1,
            f[2].2,
            f[3].1,
            r.insert_ns.0,
            r.insert_ns.1,
            r.insert_ns.1 / r.insert_ns.0,
            r.query_ns.0,
            r.query_ns.1,
            r.query_ns.1 / r.query_ns.0,
        );
    }
}

pub fn run(args: &SpectralArgs) -> anyhow::Result<()> {
    if args.compact {
        run_compact(args);
        return Ok(());
    }
    println!(
        "gamma,m,E_b_formula,E_MS,P_R,P_E_given_R,gamma_s,E_bs,E_RM_formula,E_RM_late_formula,E_RM,E_MI,MS_over_RM,MS_over_MI,RM_under,RM_err_recurring,RM_err_unmoved,RM_err_moved,RM_err_late,RM_err_late_first_insert,RM_err_secondary_collision,RM_err_flags_fp,E_RM_flag_lookup,E_MS_per_query,E_MI_per_query,E_RM_per_query,excess_MS,excess_MI,excess_RM"
    );
    for &gamma in &args.gammas {
        let r = table_row(args.distinct, args.draws_per_key, args.skew, args.hashes, gamma, args.runs, args.order);
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.1}", a / b) } else { "inf".into() };
        println!(
            "{},{},{:.5},{:.5},{:.3},{:.5},{:.3},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.4},{:.4},{:.4}",
            r.gamma,
            r.counters,
            r.e_b_formula,
            r.e_ms,
            r.p_recurring,
            r.p_error_given_recurring,
            r.gamma_s,
            r.e_bs,
            r.e_rm_formula,
            r.e_rm_late_formula,
            r.e_rm,
            r.e_mi,
            ratio(r.e_ms, r.e_rm),
            ratio(r.e_ms, r.e_mi),
            r.rm_under,
            r.rm_err_recurring,
            r.rm_err_unmoved,
            r.rm_err_moved,
            r.rm_err_late,
            r.rm_err_late_first_insert,
            r.rm_err_secondary_collision,
            r.rm_err_flags_false_positive,
            r.e_rm_flag_lookup,
            r.e_per_query[0],
            r.e_per_query[1],
            r.e_per_query[2],
            r.mean_excess[0],
            r.mean_excess[1],
            r.mean_excess[2],
        );
    }
    if args.windowed {
        println!();
        println!("estimator,subwindows,records,mean_exact,mean_additive_error,max_additive_error,undercounts");
        for estimator in Estimator::ALL {
            for subwindows in [8, 16, 64] {
                let r = windowed_row(estimator, subwindows, 300_000, 100_000, 10_000);
                println!(
                    "{},{},{},{:.2},{:.4},{},{}",
                    estimator, r.subwindows, r.records, r.mean_exact, r.mean_error, r.max_error, r.under
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails unless `measured` is within 20% of `formula`.
    fn assert_within_20_percent(gamma: f64, what: &str, measured: f64, formula: f64) {
        let rel = (measured - formula).abs() / formula;
        assert!(rel < 0.2, "γ = {gamma}: measured {measured} vs {what} {formula} ({:.0}% off)", rel * 100.0);
    }

    /// Minimum Selection's measured error rate is within 20% of the formula
    /// `E_b = (1-e^(-γ))^k` at the paper's k = 5 (n = 1000, several seeds;
    /// γ where errors are frequent enough to measure in a unit test).
    #[test]
    fn minimum_selection_error_matches_the_formula() {
        for gamma in [0.7, 1.0, 1.5, 2.0] {
            let r = table_row(1000, 2, 0.5, 5, gamma, 12, StreamOrder::KeysFirst);
            assert_within_20_percent(gamma, "E_b formula", r.e_ms, r.e_b_formula);
            assert!(r.e_mi <= r.e_ms && r.e_rm <= r.e_ms, "{r:?}");
        }
    }

    /// Recurring Minimum's measured error rate is within 20% of the formula
    /// that counts late detection ([`rm_rescue_keys_first`]), and more than
    /// twice the paper's `E_RM`, which assumes every single-minimum key is
    /// served exactly by the secondary (docs/spectral.md: why).
    #[test]
    fn recurring_minimum_error_matches_the_late_detection_formula() {
        for gamma in [0.7, 1.0] {
            let r = table_row(1000, 10, 0.5, 5, gamma, 12, StreamOrder::KeysFirst);
            assert_within_20_percent(gamma, "late-detection formula", r.e_rm, r.e_rm_late_formula);
            // The 20% band alone would pass "RM corrects nothing" (E_RM = E_MS
            // is 18% off at γ = 0.7): also hold what RM gains over MS.
            assert_within_20_percent(gamma, "late-detection gain", r.e_ms - r.e_rm, r.e_ms - r.e_rm_late_formula);
            assert!(r.e_rm > 2.0 * r.e_rm_formula, "γ = {gamma}: {r:?}");
            // The gap is late moves, not the secondary's or B_f's own errors.
            assert!(r.rm_err_late > 0.9 * r.rm_err_moved, "γ = {gamma}: {r:?}");
        }
    }

    /// As γ → 0, a key's counters fill in uniform time (a = t), so the
    /// rescue share is the integral of k(1-t)t^(k-1): 1/(k+1) exactly.
    #[test]
    fn rescue_share_matches_its_small_load_limit() {
        for k in [2, 5, 8] {
            let p = rm_rescue_keys_first(1e-6, k);
            let want = 1.0 / f64::from(k + 1);
            assert!((p - want).abs() < 1e-3, "k = {k}: {p} vs {want}");
        }
    }
}
