//! `dedupd filter` end to end: the real binary on a headline stream, checked
//! against the exact oracle.

use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, Stdio};

use dedupd::testkit::oracle::{Confusion, ExactWindow};
use dedupd::testkit::text::TextCorpus;
use dedupd::testkit::workload::{KeyDist, RateProfile, Stream, headline};

struct Run {
    stdout: Vec<u8>,
    stderr: String,
    status: std::process::ExitStatus,
}

fn run_filter(args: &[&str], input: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .arg("filter")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dedupd");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("dedupd runs");
    // A dedupd that refuses its arguments (a bad `--load-state`) exits
    // before reading its input: the write then meets a closed pipe, which
    // is not the test's failure (its exit status and stderr are checked).
    if let Err(e) = writer.join().unwrap()
        && (e.kind() != std::io::ErrorKind::BrokenPipe || out.status.success())
    {
        panic!("writing dedupd's input: {e}");
    }
    Run { stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned(), status: out.status }
}

/// ~1000 events/s for `seconds`, ~45% of them new headlines and the rest
/// copies after 100 ms to 90 s: ~27k distinct keys per 60 s window and
/// ~55% duplicates, like a busy news feed.
fn headline_stream(seconds: u64) -> Vec<(u64, String, u64)> {
    let dist = KeyDist::Recurring { p_new: 0.415, min_gap_ms: 100, max_gap_ms: 90_000 };
    Stream::new(2026, dist, RateProfile::steady(1000, 1000), seconds)
        .enumerate()
        .map(|(seq, (id, t))| (seq as u64, headline(id), 1_700_000_000_000 + t))
        .collect()
}

/// The headline stream's arrival process with real text for keys: each new key is the next
/// sentence of the Brown Corpus (`scripts/text_corpus.sh`). At 1000 events/s, `seconds` ≤ 130
/// uses ~54k new keys, all of them real sentences.
fn text_stream(seconds: u64) -> Vec<(u64, String, u64)> {
    let corpus = TextCorpus::load().unwrap_or_else(|e| panic!("{e}"));
    let dist = KeyDist::Recurring { p_new: 0.415, min_gap_ms: 100, max_gap_ms: 90_000 };
    let events: Vec<(u64, String, u64)> = Stream::new(2027, dist, RateProfile::steady(1000, 1000), seconds)
        .enumerate()
        .map(|(seq, (id, t))| (seq as u64, corpus.key(id), 1_700_000_000_000 + t))
        .collect();
    let new_keys = events.iter().map(|e| &e.1).collect::<HashSet<_>>().len();
    assert!(new_keys <= corpus.len(), "{new_keys} keys, more than the corpus's {} sentences", corpus.len());
    events
}

fn jsonl(events: &[(u64, String, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (seq, title, ts) in events {
        writeln!(out, "{}", serde_json::json!({"seq": seq, "id": title, "ts": ts, "src": "feed"})).unwrap();
    }
    out
}

struct Measured {
    confusion: Confusion,
    dup_share: f64,
    mean_in_window: f64,
    stats: serde_json::Value,
    outputs: usize,
    stdout: Vec<u8>,
}

/// Runs the held-out-style command on the headline stream, with `--expected`
/// and `--growth` as given, and measures it against the oracle.
fn measure_headlines(events: &[(u64, String, u64)], expected: &str, growth: &str) -> Measured {
    measure_arrivals(events, expected, growth, &[])
}

/// [`measure_headlines`] for `events` in the order given (their arrival
/// order), with `extra` flags, against the exact answer over event-time
/// order: the oracle sees the events sorted by (time, sequence number).
fn measure_arrivals(events: &[(u64, String, u64)], expected: &str, growth: &str, extra: &[&str]) -> Measured {
    let input = jsonl(events);
    let tag = extra.join("").replace(['-', ' '], "");
    // Tests run in parallel threads of one process, some with the same flags: a run number
    // keeps their directories apart.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run_no = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("dedupd-filter-{}-{run_no}-{expected}-{growth}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stats_path = dir.join("stats.json");
    let mut args = vec![
        "--key",
        "json:/id",
        "--time",
        "json:/ts",
        "--window",
        "60s",
        "--fpr",
        "0.01",
        "--expected",
        expected,
        "--growth",
        growth,
        "--stats-json",
        stats_path.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let run = run_filter(&args, &input);
    assert!(run.status.success(), "{}", run.stderr);

    // Output = input lines, unchanged, in order: a subsequence.
    let input_lines: Vec<&[u8]> = input.split_inclusive(|&b| b == b'\n').collect();
    let output_lines: Vec<&[u8]> = run.stdout.split_inclusive(|&b| b == b'\n').collect();
    let mut delivered = HashSet::new();
    let mut next = 0;
    for line in &output_lines {
        while next < input_lines.len() && input_lines[next] != *line {
            next += 1;
        }
        assert!(next < input_lines.len(), "output line not in input order: {}", String::from_utf8_lossy(line));
        delivered.insert(events[next].0);
        next += 1;
    }

    let mut oracle = ExactWindow::new(60_000);
    let mut confusion = Confusion::default();
    let mut in_window = Vec::new();
    let mut by_time: Vec<&(u64, String, u64)> = events.iter().collect();
    by_time.sort_by_key(|(seq, _, ts)| (*ts, *seq));
    for (seq, title, ts) in by_time {
        let truth = oracle.observe(title, *ts);
        confusion.record(!delivered.contains(seq), truth);
        if *seq % 1000 == 0 && *ts > 1_700_000_060_000 {
            in_window.push(oracle.keys_in_window());
        }
    }
    let dup_share = (confusion.true_duplicates + confusion.false_distinct) as f64 / confusion.events() as f64;
    let mean_in_window = in_window.iter().sum::<usize>() as f64 / in_window.len() as f64;
    let stats = serde_json::from_slice(&std::fs::read(&stats_path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    eprintln!(
        "--expected {expected} --growth {growth}: {} events, {dup_share:.3} duplicates, \
         {mean_in_window:.0} keys per window, FPR {:.5}, FNR {:.5}, {confusion:?}",
        events.len(),
        confusion.fpr(),
        confusion.fnr()
    );
    Measured { confusion, dup_share, mean_in_window, stats, outputs: output_lines.len(), stdout: run.stdout }
}

/// The events in the order they arrive when each is delayed by a uniform
/// 0..`max_delay_ms` (ties by sequence number).
fn jittered(events: &[(u64, String, u64)], max_delay_ms: u64, seed: u64) -> Vec<(u64, String, u64)> {
    let mut rng = dedupd::testkit::workload::Rng::new(seed);
    let mut arrivals: Vec<(u64, (u64, String, u64))> =
        events.iter().map(|e| (e.2 + rng.below(max_delay_ms + 1), e.clone())).collect();
    arrivals.sort_by_key(|(arrival, e)| (*arrival, e.0));
    arrivals.into_iter().map(|(_, e)| e).collect()
}

/// Issue 14: arrival jittered by up to 1.5 s. With the default 2 s lateness
/// the verdicts are the event-time answer's (up to the filter's FPR); with
/// no lateness the arrival order decides and many copies win over their
/// originals. With no disorder, lateness changes no byte of the output.
#[test]
fn disorder_within_the_lateness_gives_the_event_time_answer() {
    let events = headline_stream(240);
    let shuffled = jittered(&events, 1_500, 9);
    assert!(shuffled.windows(2).filter(|w| w[1].2 < w[0].2).count() > events.len() / 4, "the jitter reorders");
    let ordered = measure_arrivals(&shuffled, "27000", "density", &["--lateness", "2s"]);
    assert!(ordered.confusion.fpr() <= 0.02, "FPR {} > 0.02 ({:?})", ordered.confusion.fpr(), ordered.confusion);
    assert!(ordered.confusion.fnr() <= 0.01, "FNR {} > 0.01 ({:?})", ordered.confusion.fnr(), ordered.confusion);
    assert_eq!(ordered.stats["late_records"], 0, "no record is more than 2 s behind");
    let arrival_order = measure_arrivals(&shuffled, "27000", "density", &["--lateness", "0s"]);
    assert!(
        arrival_order.confusion.fnr() > 5.0 * ordered.confusion.fnr().max(0.001),
        "without lateness the copies that overtake their originals should cost false negatives: {:?}",
        arrival_order.confusion
    );
    assert!(arrival_order.stats["late_records"].as_u64().unwrap() > 1000);

    // No disorder: the same bytes with and without lateness.
    let plain = measure_arrivals(&events, "27000", "density", &["--lateness", "0s"]);
    let late = measure_arrivals(&events, "27000", "density", &["--lateness", "2s"]);
    assert!(plain.stdout == late.stdout, "lateness changed the output of an ordered stream");
    assert_eq!(late.stats["late_records"], 0);
}

/// Issue 14, the real-text stream: Brown Corpus sentences as keys (~100 bytes of text each),
/// arrival jittered by up to 1.5 s; `--lateness 2s` gives the event-time answer.
#[test]
fn real_text_disorder_within_the_lateness_gives_the_event_time_answer() {
    let events = text_stream(130);
    let shuffled = jittered(&events, 1_500, 11);
    let m = measure_arrivals(&shuffled, "27000", "density", &["--lateness", "2s"]);
    assert!(m.mean_in_window > 20_000.0, "a busy window: {:.0} keys", m.mean_in_window);
    assert!(m.dup_share > 0.45, "{:.3} duplicates", m.dup_share);
    assert!(m.confusion.fpr() <= 0.02, "FPR {} > 0.02 ({:?})", m.confusion.fpr(), m.confusion);
    assert!(m.confusion.fnr() <= 0.01, "FNR {} > 0.01 ({:?})", m.confusion.fnr(), m.confusion);
    assert_eq!(m.stats["late_records"], 0, "no record is more than 2 s behind");
    let arrival_order = measure_arrivals(&shuffled, "27000", "density", &["--lateness", "0s"]);
    assert!(
        arrival_order.confusion.fnr() > 5.0 * m.confusion.fnr().max(0.001),
        "without lateness the copies that overtake their originals should cost false negatives: {:?}",
        arrival_order.confusion
    );
}

/// The cuckoo kind on the real-text stream, in the same test as the timer
/// filter: the event-time answer within the lateness, in less memory at its
/// peak; with the estimate ten times too low it grows and stays accurate.
#[test]
fn the_cuckoo_kind_on_real_text_beside_the_timer_filter() {
    let events = text_stream(130);
    let shuffled = jittered(&events, 1_500, 11);
    let timer = measure_arrivals(&shuffled, "27000", "density", &["--lateness", "2s"]);
    let cuckoo = measure_arrivals(&shuffled, "27000", "density", &["--lateness", "2s", "--kind", "cuckoo"]);
    assert!(cuckoo.confusion.fpr() <= 0.01, "FPR {} ({:?})", cuckoo.confusion.fpr(), cuckoo.confusion);
    assert!(cuckoo.confusion.fnr() <= 0.002, "FNR {} ({:?})", cuckoo.confusion.fnr(), cuckoo.confusion);
    let peak = |m: &Measured| m.stats["memory_bytes_peak"].as_u64().unwrap();
    assert!(peak(&cuckoo) * 4 < peak(&timer), "cuckoo {} B, timer {} B", peak(&cuckoo), peak(&timer));
    assert_eq!(cuckoo.stats["kind"], "cuckoo");
    assert_eq!(cuckoo.stats["saturated_inserts"], 0, "no key forgotten at the cap");

    let low = measure_arrivals(&shuffled, "2700", "density", &["--lateness", "2s", "--kind", "cuckoo"]);
    assert!(low.confusion.fpr() <= 0.015, "FPR {} ({:?})", low.confusion.fpr(), low.confusion);
    assert!(low.confusion.fnr() <= 0.002, "FNR {} ({:?})", low.confusion.fnr(), low.confusion);
    // It grew once or twice, sized from the keys seen (not a ladder of 4× tables).
    assert!((2..=3).contains(&low.stats["generations_created"].as_u64().unwrap()), "{}", low.stats);
}

#[test]
fn headline_stream_meets_the_accuracy_targets() {
    let events = headline_stream(300);
    let m = measure_headlines(&events, "27000", "density");
    assert!((0.5..0.6).contains(&m.dup_share), "the stream should have ~55% duplicates, has {}", m.dup_share);
    assert!((24_000.0..30_000.0).contains(&m.mean_in_window), "~27k keys per window, has {}", m.mean_in_window);
    assert!(m.confusion.fpr() <= 0.02, "FPR {} > 0.02 ({:?})", m.confusion.fpr(), m.confusion);
    assert!(m.confusion.fnr() <= 0.01, "FNR {} > 0.01 ({:?})", m.confusion.fnr(), m.confusion);
    for field in ["records", "distinct", "duplicates", "invalid", "memory_bytes", "generations_max", "estimated_fpr"] {
        assert!(m.stats.get(field).is_some(), "stats JSON lacks {field}");
    }
    assert_eq!(m.stats["records"], events.len() as u64);
    assert_eq!(m.stats["distinct"], m.outputs as u64);
    assert_eq!(m.stats["invalid"], 0);
}

#[test]
fn growth_covers_a_tenfold_underestimate() {
    let events = headline_stream(240);
    let grown = measure_headlines(&events, "2700", "density");
    let fixed = measure_headlines(&events, "2700", "none");
    assert!(grown.confusion.fpr() <= 0.03, "with growth: FPR {} > 0.03", grown.confusion.fpr());
    assert!(grown.stats["generations_max"].as_u64().unwrap() > 1);
    assert!(fixed.confusion.fpr() > 0.2, "a fixed filter 10x too small should degrade, FPR {}", fixed.confusion.fpr());
    assert_eq!(fixed.stats["generations_max"], 1);
}

#[test]
fn unreadable_records_are_reported_not_dropped() {
    let input = b"{\"id\":\"a\",\"ts\":1}\nnot json\n{\"ts\":2}\n{\"id\":\"\",\"ts\":3}\n{\"id\":\"a\",\"ts\":4}\r\n{\"id\":\"b\",\"ts\":\"x\"}\n{\"id\":\"c\",\"ts\":5}";
    let dir = std::env::temp_dir().join(format!("dedupd-invalid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (dups, stats) = (dir.join("dups"), dir.join("stats.json"));
    let args = ["--key", "json:/id", "--time", "json:/ts", "--window", "1m", "--expected", "100"];
    let extra = ["--duplicates", dups.to_str().unwrap(), "--stats-json", stats.to_str().unwrap()];
    let run = run_filter(&[&args[..], &extra[..]].concat(), input);
    assert!(run.status.success());
    // The last line has no newline and stays that way.
    assert_eq!(run.stdout, b"{\"id\":\"a\",\"ts\":1}\n{\"id\":\"c\",\"ts\":5}");
    assert_eq!(std::fs::read(&dups).unwrap(), b"{\"id\":\"a\",\"ts\":4}\r\n");
    for expected in ["line 2: bad_json", "line 3: missing_key", "line 4: empty_key", "line 6: bad_time"] {
        assert!(run.stderr.contains(expected), "stderr lacks `{expected}`:\n{}", run.stderr);
    }
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!((s["records"].as_u64(), s["distinct"].as_u64(), s["duplicates"].as_u64()), (Some(7), Some(2), Some(1)));
    assert_eq!(s["invalid"], 4);
    assert_eq!(s["invalid_by_reason"]["bad_json"], 1);

    // With --invalid FILE the raw lines go there.
    let invalid = dir.join("invalid");
    let run = run_filter(&[&args[..], &["--invalid", invalid.to_str().unwrap()][..]].concat(), input);
    assert!(run.status.success());
    assert_eq!(
        std::fs::read(&invalid).unwrap(),
        b"not json\n{\"ts\":2}\n{\"id\":\"\",\"ts\":3}\n{\"id\":\"b\",\"ts\":\"x\"}\n"
    );
    assert!(run.stderr.contains("4 invalid records"), "{}", run.stderr);

    // Pass-through reads them the same way and writes every readable record.
    let extra = ["--kind", "passthrough", "--stats-json", stats.to_str().unwrap()];
    let run = run_filter(&[&args[..], &extra[..]].concat(), input);
    assert!(run.status.success());
    assert_eq!(run.stdout, b"{\"id\":\"a\",\"ts\":1}\n{\"id\":\"a\",\"ts\":4}\r\n{\"id\":\"c\",\"ts\":5}");
    for expected in ["line 2: bad_json", "line 3: missing_key", "line 4: empty_key", "line 6: bad_time"] {
        assert!(run.stderr.contains(expected), "stderr lacks `{expected}`:\n{}", run.stderr);
    }
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(s["kind"], "passthrough");
    assert_eq!((s["records"].as_u64(), s["distinct"].as_u64(), s["duplicates"].as_u64()), (Some(7), Some(3), Some(0)));
    assert_eq!(s["invalid"], 4);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn line_keys_and_invalid_settings() {
    let run = run_filter(&["--window", "1h", "--expected", "10"], b"x\ny\nx\r\nz\ny\n");
    assert!(run.status.success());
    assert_eq!(run.stdout, b"x\ny\nz\n");

    for (args, needle) in [
        (&["--fpr", "0"][..], "invalid --fpr 0: must be greater than 0 and less than 1"),
        (&["--equal-timers", "9", "--expected", "100"][..], "invalid --equal-timers 9"),
        (&["--timer-bits", "40"][..], "invalid --timer-bits 40: must be between 4 and 32"),
        (&["--window", "10 minutes"][..], "unknown unit `minutes`"),
        (&["--key", "json:id"][..], "starts with `/`"),
        (&["--growth", "fast"][..], "expected density, cardinality or none"),
        (&["--kind", "exact"][..], "possible values: timer, passthrough"),
    ] {
        let run = run_filter(args, b"");
        assert!(!run.status.success(), "{args:?} should fail");
        assert!(run.stderr.contains(needle), "{args:?}: stderr lacks `{needle}`:\n{}", run.stderr);
    }
}

/// `n` lines `k<id>` with ids uniform over `universe`.
fn uniform_lines(n: usize, universe: u64, seed: u64) -> Vec<u8> {
    let mut rng = dedupd::filter::random::Rng::new(seed);
    (0..n).flat_map(|_| format!("k{}\n", rng.below(universe)).into_bytes()).collect()
}

/// The decaying kinds in pipe mode: the same seed gives the same output,
/// another seed another one, and a run cut in two with --save-state and
/// --load-state writes exactly what one uninterrupted run writes.
#[test]
fn decaying_kinds_are_deterministic_and_resume_from_saved_state() {
    let input = uniform_lines(60_000, 6_000, 3);
    let cut = input.len() / 2 + 7;
    let cut = cut + input[cut..].iter().position(|&b| b == b'\n').unwrap() + 1;
    let dir = std::env::temp_dir().join(format!("dedupd-count-kinds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for kind in ["rsbf", "stable"] {
        // 2 KiB: far fewer bits than keys, so resets and decrements matter.
        let base = ["--kind", kind, "--memory", "2KiB", "--fpr", "0.1"];
        fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
            [base, extra].concat()
        }
        let whole = run_filter(&with(&base, &["--seed", "7"]), &input);
        assert!(whole.status.success(), "{kind}: {}", whole.stderr);
        assert!(whole.stderr.is_empty(), "{kind}: {}", whole.stderr);
        let lines = whole.stdout.iter().filter(|&&b| b == b'\n').count();
        assert!((6_000..59_000).contains(&lines), "{kind}: {lines} distinct lines of 60000");
        assert_eq!(
            run_filter(&with(&base, &["--seed", "7"]), &input).stdout,
            whole.stdout,
            "{kind}: same seed differs"
        );
        assert_ne!(run_filter(&with(&base, &["--seed", "8"]), &input).stdout, whole.stdout, "{kind}: seed ignored");

        let state = dir.join(format!("{kind}.state"));
        let state = state.to_str().unwrap();
        let first = run_filter(&with(&base, &["--seed", "7", "--save-state", state]), &input[..cut]);
        assert!(first.status.success(), "{kind}: {}", first.stderr);
        let stats = dir.join(format!("{kind}.json"));
        let second = run_filter(
            &with(&base, &["--seed", "7", "--load-state", state, "--stats-json", stats.to_str().unwrap()]),
            &input[cut..],
        );
        assert!(second.status.success(), "{kind}: {}", second.stderr);
        assert_eq!([first.stdout, second.stdout].concat(), whole.stdout, "{kind}: resumed run differs");
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
        assert_eq!(s["kind"], kind);
        // Within the budget, less at most a few words of rounding.
        let memory = s["memory_bytes"].as_u64().unwrap();
        assert!((2_000..=2_048).contains(&memory), "{kind}: {memory} bytes");
        let ones = s["ones_fraction"].as_f64().unwrap();
        assert!(ones > 0.2 && ones < 0.8, "{kind}: ones fraction {ones}");

        // A state saved with other settings is refused, naming what differs.
        let other = run_filter(
            &["--kind", kind, "--memory", "4KiB", "--fpr", "0.1", "--seed", "7", "--load-state", state],
            b"x\n",
        );
        assert!(!other.status.success(), "{kind}: restored with other memory");
        assert!(other.stderr.contains("snapshot was taken with"), "{kind}: {}", other.stderr);
    }
    let wrong = run_filter(
        &[
            "--kind",
            "stable",
            "--memory",
            "2KiB",
            "--fpr",
            "0.1",
            "--seed",
            "7",
            "--load-state",
            dir.join("rsbf.state").to_str().unwrap(),
        ],
        b"x\n",
    );
    assert!(wrong.stderr.contains("kind = rsbf but this filter has kind = stable"), "{}", wrong.stderr);
    for (args, needle) in [
        (&["--kind", "rsbf", "--memory", "8"][..], "invalid --memory 8B: must give each of the k"),
        (&["--kind", "stable", "--memory", "8MB"][..], "unknown unit `MB`"),
        (&["--kind", "rsbf", "--slices", "4"][..], "invalid --slices 4: the rsbf kind runs one filter"),
        (&["--kind", "timer", "--save-state", "x"][..], "--load-state and --save-state are for --kind rsbf or stable"),
    ] {
        let run = run_filter(args, b"");
        assert!(!run.status.success(), "{args:?} should fail");
        assert!(run.stderr.contains(needle), "{args:?}: stderr lacks `{needle}`:\n{}", run.stderr);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A composite key (user and ad) with RFC 3339 times: the same user on
/// another ad, or the same ad for another user, is distinct; the same pair
/// within the window is a copy, and again after the window it is distinct.
#[test]
fn composite_keys_and_rfc3339_times() {
    let lines = [
        r#"{"user":"u1","ad":{"id":7},"at":"2024-05-01T12:00:00Z"}"#,
        r#"{"user":"u1","ad":{"id":8},"at":"2024-05-01T12:00:01Z"}"#,
        r#"{"user":"u2","ad":{"id":7},"at":"2024-05-01T12:00:02Z"}"#,
        r#"{"user":"u1","ad":{"id":7},"at":"2024-05-01T14:00:30+02:00"}"#,
        r#"{"user":"u3","ad":{"id":9},"at":"2024-05-01T12:00:50.000Z"}"#,
        r#"{"user":"u1","ad":{"id":7},"at":"2024-05-01T12:02:01.000Z"}"#,
        r#"{"user":"u1","at":"2024-05-01T12:02:01Z"}"#,
        r#"{"user":"u1","ad":{"id":7},"at":"May 1st"}"#,
    ];
    let input = lines.join("\n") + "\n";
    let args = ["--key", "json:/user+json:/ad/id", "--time", "json:/at", "--window", "2m", "--expected", "100"];
    let run = run_filter(&args, input.as_bytes());
    assert!(run.status.success(), "{}", run.stderr);
    let kept: Vec<&str> = std::str::from_utf8(&run.stdout).unwrap().lines().collect();
    assert_eq!(kept, [lines[0], lines[1], lines[2], lines[4], lines[5]], "{}", run.stderr);
    assert!(run.stderr.contains("line 7: missing_key"), "{}", run.stderr);
    assert!(run.stderr.contains("line 8: bad_time"), "{}", run.stderr);
}

/// Times in seconds (`json:/ts:s`, with fractions), nanoseconds, and a field
/// whose name ends in a unit: the same verdicts as in milliseconds; an
/// out-of-range time is `bad_time` with its reason, and a bad unit is refused.
#[test]
fn times_in_seconds_and_nanoseconds() {
    let lines = [
        r#"{"id":"a","ts":1700000000,"ns":1700000000000000000,"at:s":1700000000000}"#,
        r#"{"id":"b","ts":1700000000.5,"ns":1700000000500000000,"at:s":1700000000500}"#,
        r#"{"id":"a","ts":1700000059.999,"ns":1700000059999000000,"at:s":1700000059999}"#,
        r#"{"id":"a","ts":"1700000061","ns":"1700000061000000000","at:s":"1700000061000"}"#,
        r#"{"id":"c","ts":-1,"ns":-1,"at:s":-1}"#,
        r#"{"id":"d","ts":1e300,"ns":1e300,"at:s":1e300}"#,
    ];
    let input = lines.join("\n") + "\n";
    for time in ["json:/ts:s", "json:/ns:ns", "json:/at:s:ms"] {
        let args =
            ["--key", "json:/id", "--time", time, "--window", "1m", "--max-clock-jump", "10m", "--expected", "100"];
        let run = run_filter(&args, input.as_bytes());
        assert!(run.status.success(), "{time}: {}", run.stderr);
        let kept: Vec<&str> = std::str::from_utf8(&run.stdout).unwrap().lines().collect();
        assert_eq!(kept, [lines[0], lines[1], lines[3]], "{time}: {}", run.stderr);
        assert!(run.stderr.contains("line 5: bad_time") && run.stderr.contains("a negative time"), "{}", run.stderr);
        assert!(run.stderr.contains("line 6: bad_time") && run.stderr.contains("out of range"), "{}", run.stderr);
    }
    let run = run_filter(&["--time", "json:ts:s"], b"");
    assert!(!run.status.success());
    assert!(run.stderr.contains("starts with `/`"), "{}", run.stderr);
}

/// Standard base64 with padding (the pipe mode's lines for binary records).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// Avro and Protobuf records written by confluent-kafka's Python serializers
/// (tests/formats/, scripts/format_fixtures.py), one base64 record a line:
/// deduplicated by a composite key of nested fields with an RFC 3339 time,
/// their schemas from local files (`.avsc`, `.proto`) or registry answers;
/// a record with an unknown schema id is `bad_schema`.
#[test]
fn avro_and_protobuf_records_by_nested_fields() {
    let fixtures =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/formats/records.jsonl")).unwrap();
    let records = |format: &str| -> Vec<Vec<u8>> {
        fixtures
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["format"] == format)
            .map(|v| {
                let hex = v["hex"].as_str().unwrap();
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
            })
            .collect()
    };
    for (format, dir) in [("avro", "schemas"), ("avro", "registry"), ("protobuf", "schemas"), ("protobuf", "registry")]
    {
        let mut records = records(format);
        assert_eq!(records.len(), 6);
        // The first record again under schema id 99, which no file has.
        let mut unknown = records[0].clone();
        unknown[1..5].copy_from_slice(&99u32.to_be_bytes());
        records.push(unknown);
        let lines: Vec<String> = records.iter().map(|r| base64(r)).collect();
        let input = lines.join("\n") + "\n";
        let schemas = format!("{}/tests/formats/{dir}", env!("CARGO_MANIFEST_DIR"));
        let args = [
            ["--format", format, "--schemas", &schemas, "--key", "json:/user/id+json:/ad/id", "--time", "json:/at"],
            ["--window", "2m", "--max-clock-jump", "10m", "--expected", "100", "--lateness", "2s"],
        ]
        .concat();
        let run = run_filter(&args, input.as_bytes());
        assert!(run.status.success(), "{format} {dir}: {}", run.stderr);
        let kept: Vec<&str> = std::str::from_utf8(&run.stdout).unwrap().lines().collect();
        assert_eq!(kept, [&lines[0], &lines[1], &lines[2], &lines[4], &lines[5]], "{format} {dir}: {}", run.stderr);
        assert!(run.stderr.contains("line 7: bad_schema: schema id 99: unknown"), "{}", run.stderr);
    }
    let run = run_filter(&["--format", "avro"], b"");
    assert!(
        run.stderr.contains("invalid --format avro: needs --schemas DIR or --schema-registry URL"),
        "{}",
        run.stderr
    );
}

/// A small schema registry: serves tests/formats/registry/<id>.json at
/// `GET /schemas/ids/<id>` to the basic-auth user `dedupd:pw` (401 to others,
/// 404 for ids it has no file for), and prints each path it is asked for.
struct TestRegistry {
    child: std::process::Child,
    url: String,
    asked: std::sync::mpsc::Receiver<String>,
}

impl TestRegistry {
    fn start() -> Self {
        const SERVER: &str = r#"
import base64, http.server, os, sys
DIR = sys.argv[1]
WANT = "Basic " + base64.b64encode(b"dedupd:pw").decode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(self.path, flush=True)
        if self.headers.get("Authorization") != WANT:
            return self.answer(401, b'{"error_code":401,"message":"Unauthorized"}')
        parts = self.path.split("/")
        path = os.path.join(DIR, parts[-1] + ".json")
        if parts[:3] != ["", "schemas", "ids"] or not parts[-1].isdigit() or not os.path.exists(path):
            return self.answer(404, b'{"error_code":40403,"message":"Schema not found"}')
        self.answer(200, open(path, "rb").read())
    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/formats/registry");
        let mut child = Command::new("python3")
            .args(["-c", SERVER, dir])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 for the test registry");
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, asked) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(stdout) {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let port = asked.recv_timeout(std::time::Duration::from_secs(20)).expect("the test registry's port");
        TestRegistry { child, url: format!("http://127.0.0.1:{port}"), asked }
    }

    /// The paths asked for since the last call: `n` of them (waiting up to
    /// 10 s for each), then any more already printed.
    fn paths_asked(&self, n: usize) -> Vec<String> {
        let wait = std::time::Duration::from_secs(10);
        let mut paths: Vec<String> = (0..n).map_while(|_| self.asked.recv_timeout(wait).ok()).collect();
        paths.extend(self.asked.try_iter());
        paths
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same records with their schemas fetched over the registry's REST
/// path: each id asked for once, an unknown id (404) and wrong credentials
/// (401) are `bad_schema` with the registry's answer in the detail.
#[test]
fn schemas_from_a_registry_over_http() {
    let registry = TestRegistry::start();
    let fixtures =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/formats/records.jsonl")).unwrap();
    for (format, id) in [("avro", 1), ("protobuf", 2)] {
        let mut records: Vec<Vec<u8>> = fixtures
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["format"] == format)
            .map(|v| {
                let hex = v["hex"].as_str().unwrap();
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
            })
            .collect();
        let mut unknown = records[0].clone();
        unknown[1..5].copy_from_slice(&99u32.to_be_bytes());
        records.push(unknown.clone());
        records.push(unknown);
        let lines: Vec<String> = records.iter().map(|r| base64(r)).collect();
        let input = lines.join("\n") + "\n";
        let run_with = |user: &str, password: &str| {
            let args = [
                ["--format", format, "--schema-registry", &registry.url, "--schema-registry-user", user],
                ["--key", "json:/user/id+json:/ad/id", "--time", "json:/at", "--window", "2m"],
                ["--max-clock-jump", "10m", "--expected", "100", "--lateness", "2s"],
            ]
            .concat();
            let mut child = Command::new(env!("CARGO_BIN_EXE_dedupd"))
                .arg("filter")
                .args(&args)
                .env("DEDUPD_SCHEMA_REGISTRY_PASSWORD", password)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            (out.status.code(), String::from_utf8(out.stdout).unwrap(), stderr)
        };
        let (status, stdout, stderr) = run_with("dedupd", "pw");
        assert_eq!(status, Some(0), "{stderr}");
        let kept: Vec<&str> = stdout.lines().collect();
        assert_eq!(kept, [&lines[0], &lines[1], &lines[2], &lines[4], &lines[5]], "{format}: {stderr}");
        assert!(
            stderr.contains("line 7: bad_schema: schema id 99: the registry has no schema with this id (HTTP 404"),
            "{stderr}"
        );
        assert!(stderr.contains("line 8: bad_schema: schema id 99: the registry has no schema"), "{stderr}");
        assert!(stderr.contains("(the registry is asked again in "), "{stderr}");
        let mut asked = registry.paths_asked(2);
        asked.sort();
        assert_eq!(asked, [format!("/schemas/ids/{id}"), "/schemas/ids/99".to_string()], "once per id");
        // Refused credentials are no verdict on the record: the run stops
        // without judging it (it waits out other faults, up to 30 s).
        let (status, stdout, stderr) = run_with("dedupd", "wrong");
        assert_eq!(status, Some(1), "{stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.contains("refused the credentials (HTTP 401"), "{stderr}");
        assert!(stderr.contains("stopping without judging this record"), "{stderr}");
        assert!(!stderr.contains("bad_schema"), "{stderr}");
        assert_eq!(registry.paths_asked(1).len(), 1, "the first id asked for again by the new run, which stops there");
    }
}
