//! `dedupd filter` with the counting stage (--max-per-window,
//! --flag-threshold) on a real-text stream, against an exact limiter and
//! flagger: the limit is never exceeded, no key that reaches the threshold
//! goes unflagged, and few records an exact limiter would deliver are lost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::process::{Command, Stdio};

use dedupd::testkit::text::TextCorpus;
use dedupd::testkit::workload::{KeyDist, RateProfile, Stream};

const WINDOW_MS: u64 = 60_000;

/// ~1000 events/s for 120 s, keys the Brown Corpus's sentences, ~58% of the
/// events copies of a key seen 100 ms to 90 s before: keys recur 1 to many
/// times per window. (seq, key, time).
fn text_stream() -> Vec<(u64, String, u64)> {
    let corpus = TextCorpus::load().unwrap_or_else(|e| panic!("{e}"));
    let dist = KeyDist::Recurring { p_new: 0.415, min_gap_ms: 100, max_gap_ms: 90_000 };
    Stream::new(2031, dist, RateProfile::steady(1000, 1000), 120)
        .enumerate()
        .map(|(seq, (id, t))| (seq as u64, corpus.key(id), 1_700_000_000_000 + t))
        .collect()
}

/// Runs `dedupd filter` on the stream as JSON lines; the seqs written to
/// stdout and to the flags file, and the stats.
fn run(events: &[(u64, String, u64)], args: &[&str]) -> (Vec<u64>, Vec<u64>, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!("dedupd-spectral-{}-{}", std::process::id(), args.join("_").len()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    for (seq, key, ts) in events {
        writeln!(f, "{}", serde_json::json!({"seq": seq, "title": key, "ts": ts})).unwrap();
    }
    drop(f);
    let (flags, stats) = (dir.join("flags.jsonl"), dir.join("stats.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(["filter", "--key", "json:/title", "--time", "json:/ts", "--window", "60s", "--expected", "30000"])
        .args(args)
        .arg("--flags")
        .arg(&flags)
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::from(std::fs::File::open(&input).unwrap()))
        .output()
        .expect("dedupd runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let seqs = |text: &[u8]| -> Vec<u64> {
        text.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<serde_json::Value>(l).unwrap()["seq"].as_u64().unwrap())
            .collect()
    };
    let flagged = seqs(&std::fs::read(&flags).unwrap());
    let stats = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (seqs(&out.stdout), flagged, stats)
}

/// Counts of `key` in (t - W, t] before each of its records.
#[derive(Default)]
struct Exact(HashMap<String, VecDeque<u64>>);

impl Exact {
    fn before(&mut self, key: &str, t: u64) -> u64 {
        let q = self.0.entry(key.to_string()).or_default();
        while q.front().is_some_and(|&s| s + WINDOW_MS <= t) {
            q.pop_front();
        }
        let n = q.len() as u64;
        q.push_back(t);
        n
    }
}

#[test]
fn limits_hold_flags_are_complete_and_few_records_are_lost_on_real_text() {
    let events = text_stream();
    let (n, t) = (2u64, 4u64);
    for estimator in ["mi", "ms", "rm"] {
        let (delivered, flagged, stats) = run(
            &events,
            &["--max-per-window", &n.to_string(), "--flag-threshold", &t.to_string(), "--estimator", estimator],
        );
        let delivered: HashSet<u64> = delivered.into_iter().collect();
        let flagged: HashSet<u64> = flagged.into_iter().collect();

        let (mut exact, mut seen_delivered) = (Exact::default(), Exact::default());
        let mut last_flag: HashMap<&str, u64> = HashMap::new();
        let (mut exact_delivers, mut lost) = (0u64, 0u64);
        for (seq, key, ts) in &events {
            let before = exact.before(key, *ts);
            if flagged.contains(seq) {
                last_flag.insert(key, *ts);
            }
            // No false negatives: a record at which the key's exact count
            // reaches T has its key flagged within the last window.
            if before + 1 >= t {
                let at = last_flag.get(key.as_str());
                assert!(
                    at.is_some_and(|&a| a + WINDOW_MS > *ts),
                    "{estimator}: seq {seq} count {} unflagged",
                    before + 1
                );
            }
            let exact_delivers_it = before < n;
            exact_delivers += u64::from(exact_delivers_it);
            if delivered.contains(seq) {
                // Never more than N in any window.
                let d = seen_delivered.before(key, *ts);
                assert!(d < n, "{estimator}: seq {seq} is delivery {} of its key in a window, limit {n}", d + 1);
            } else if exact_delivers_it {
                lost += 1;
            }
        }
        let lost_share = lost as f64 / exact_delivers as f64;
        eprintln!("{estimator}: {lost} of {exact_delivers} exact deliveries dropped ({:.3}%)", lost_share * 100.0);
        assert!(lost_share <= 0.05, "{estimator}: {lost_share}");
        assert!(exact_delivers > 50_000 && flagged.len() > 1_000, "{exact_delivers} {}", flagged.len());
        let c = &stats["counting"];
        assert_eq!(c["counted"].as_u64(), Some(events.len() as u64), "{stats}");
        assert_eq!(c["flagged"].as_u64(), Some(flagged.len() as u64));
        assert_eq!(c["limited"].as_u64(), Some(events.len() as u64 - delivered.len() as u64));
        assert_eq!(c["estimator"], estimator);
        // The overcount a limit pays, in the stats: filters in the ring and
        // the probability that an absent key reads nonzero (under the bound
        // the sub-windows grow to keep).
        assert!(c["filters"].as_u64().unwrap() >= 17, "{c}");
        let fp = c["false_positive"].as_f64().unwrap();
        assert!(fp > 0.0 && fp <= 0.02, "{c}");
        assert_eq!(stats["distinct"].as_u64(), Some(delivered.len() as u64));
    }
}

#[test]
fn counting_by_another_key_dedups_first() {
    // Clicks: dedup by click id, limit 2 per window by ip. The replayed click
    // (id 1) is a duplicate and not counted; of ip a's clicks 0, 1, 2 and 3
    // the first two pass, ip b's click 4 passes.
    let clicks = [(0, "a"), (1, "a"), (1, "a"), (2, "a"), (3, "a"), (4, "b")];
    let events: Vec<(u64, String, u64)> =
        clicks.iter().enumerate().map(|(i, (id, ip))| (*id, ip.to_string(), 1_000 + i as u64)).collect();
    let dir = std::env::temp_dir().join(format!("dedupd-spectral-ip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut input = Vec::new();
    for (id, ip, ts) in &events {
        writeln!(input, "{}", serde_json::json!({"id": id, "ip": ip, "ts": ts})).unwrap();
    }
    let path = dir.join("in.jsonl");
    std::fs::write(&path, &input).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(["filter", "--key", "json:/id", "--count-key", "json:/ip", "--max-per-window", "2", "--time", "json:/ts"])
        .args(["--window", "1m", "--expected", "1000"])
        .stdin(Stdio::from(std::fs::File::open(&path).unwrap()))
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ids: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [0, 1, 4]);
}

/// `--counters compact` delivers and flags exactly the records the default
/// fixed-width counters do (the same estimates), and reports its store and
/// the bytes it holds.
#[test]
fn compact_counters_deliver_and_flag_what_fixed_ones_do() {
    let events = text_stream();
    let common = ["--max-per-window", "2", "--flag-threshold", "4", "--estimator", "ms", "--counter-bits", "16"];
    let fixed = run(&events, &[&common[..], &["--counters", "fixed"]].concat());
    let compact = run(&events, &[&common[..], &["--counters", "compact"]].concat());
    assert_eq!(fixed.0, compact.0, "delivered records differ");
    assert_eq!(fixed.1, compact.1, "flagged records differ");
    assert!(!fixed.0.is_empty() && !fixed.1.is_empty());
    let (f, c) = (&fixed.2["counting"], &compact.2["counting"]);
    assert_eq!((f["counters"].as_str(), c["counters"].as_str()), (Some("fixed"), Some("compact")));
    assert_eq!(f["limited"], c["limited"]);
    assert!(c["memory_bytes"].as_u64().unwrap() > 0, "{c}");
}

#[test]
fn counting_settings_are_refused_with_their_rule() {
    let cases: [(&[&str], &str); 5] = [
        (&["--max-per-window", "2", "--counters", "tiny"], "unknown counter store `tiny`: expected fixed or compact"),
        (&["--max-per-window", "300"], "invalid --max-per-window 300: must be at most 255"),
        (&["--max-per-window", "2", "--subwindows", "100"], "invalid --subwindows 100: must be 8 to 64"),
        (&["--flags", "x.txt"], "--flags needs --max-per-window or --flag-threshold"),
        (&["--flag-threshold", "3", "--kind", "rsbf"], "invalid --kind rsbf"),
    ];
    for (args, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_dedupd")).arg("filter").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
    }
}
