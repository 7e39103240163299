//! Hostile input (issue 19, "Bad input"): a deterministic corpus of records
//! that cannot be read — invalid and deeply nested JSON, empty payloads,
//! invalid UTF-8, missing, null and empty keys, missing and wrongly typed
//! times, times before 1970 and beyond u64, records over the size limit,
//! times far in the future — interleaved with valid records (some with
//! huge keys, some far in the past), through `dedupd filter` and
//! `dedupd run`. Each unreadable record reaches the dead-letter path with
//! its reason, byte for byte; the counts per reason are the ones planted;
//! the valid records get the verdicts they get alone.
//!
//! `cargo test --test hostile -- --nocapture` prints the table that
//! docs/reliability.md ("Hostile input") quotes.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use dedupd::testkit::oracle::ExactWindow;
use dedupd::testkit::workload::Rng;
use support::*;

/// Records larger than this are `too_large` (under the test broker's and
/// the test producer's 1 MB message limit, above the deeply nested ones).
const MAX_RECORD_BYTES: usize = 600_000;
/// The filter window (the default `max_clock_jump`).
const WINDOW_MS: u64 = 60_000;
const YEAR_3000_MS: u64 = 32_503_680_000_000;

/// What a record of the corpus should come to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Plan {
    /// Readable: judged like any record (`late`: more than the lateness
    /// behind the largest time seen, judged at its own time).
    Valid { seq: u64, id: String, ts: u64, late: bool },
    /// Unreadable (or a time jump): the dead-letter path with this reason.
    Invalid(&'static str),
}

#[derive(Clone, Debug)]
struct Item {
    payload: Vec<u8>,
    /// What it is, for the table ("deep array 100000", ...).
    kind: String,
    plan: Plan,
}

/// A valid JSON record.
fn valid(seq: u64, id: &str, ts: u64, late: bool) -> Item {
    let payload = serde_json::json!({"id": id, "ts": ts, "seq": seq}).to_string().into_bytes();
    let kind = if late {
        "far past (valid, late)"
    } else if id.len() > 1000 {
        "huge key (valid)"
    } else {
        "valid"
    };
    Item { payload, kind: kind.into(), plan: Plan::Valid { seq, id: id.to_string(), ts, late } }
}

/// The hostile records to plant near event time `ts` (the `n`-th round).
fn hostile(n: u64, ts: u64) -> Vec<(String, Vec<u8>, &'static str)> {
    let t = ts.to_string();
    let mut out: Vec<(String, Vec<u8>, &'static str)> = Vec::new();
    let mut add = |kind: &str, payload: Vec<u8>, reason: &'static str| out.push((kind.to_string(), payload, reason));
    let text = |s: String| s.into_bytes();
    // Not JSON.
    add("not json", text("{not json".into()), "bad_json");
    add("truncated", text(format!(r#"{{"id":"t{n}","ts":{t}"#)), "bad_json");
    add("trailing garbage", text(format!(r#"{{"id":"g{n}","ts":{t}}} x"#)), "bad_json");
    add("NaN literal", text(format!(r#"{{"id":"nan{n}","ts":NaN}}"#)), "bad_json");
    add("lone surrogate escape", text(format!(r#"{{"id":"\ud800{n}","ts":{t}}}"#)), "bad_json");
    add(
        "byte order mark",
        [&b"\xEF\xBB\xBF"[..], format!(r#"{{"id":"bom{n}","ts":{t}}}"#).as_bytes()].concat(),
        "bad_json",
    );
    add("empty payload", Vec::new(), "bad_json");
    add("blanks only", text("   \t ".into()), "bad_json");
    add(
        "invalid UTF-8 in a string",
        [&br#"{"id":"bad-"#[..], b"\xff\xfe", format!(r#"{n}","ts":{t}}}"#).as_bytes()].concat(),
        "bad_json",
    );
    add(
        "overlong UTF-8",
        [&br#"{"id":""#[..], b"\xc0\xaf", format!(r#"{n}","ts":{t}}}"#).as_bytes()].concat(),
        "bad_json",
    );
    add("deep array 100000", text("[".repeat(100_000)), "bad_json");
    add("deep object 100000", text(r#"{"a":"#.repeat(100_000)), "bad_json");
    add("deep closed array 100000", text(format!("{}{}", "[".repeat(100_000), "]".repeat(100_000))), "bad_json");
    // No key.
    add("no key field", text(format!(r#"{{"ts":{t}}}"#)), "missing_key");
    add("null key", text(format!(r#"{{"id":null,"ts":{t}}}"#)), "missing_key");
    add("key field in other case", text(format!(r#"{{"ID":"c{n}","ts":{t}}}"#)), "missing_key");
    add("JSON number", text("42".into()), "missing_key");
    add("JSON array", text(format!("[\"a{n}\",{t}]")), "missing_key");
    add("JSON string", text(format!("\"s{n}\"")), "missing_key");
    add("empty key", text(format!(r#"{{"id":"","ts":{t}}}"#)), "empty_key");
    // No time, or not a time.
    add("no time field", text(format!(r#"{{"id":"nt{n}"}}"#)), "missing_time");
    add("null time", text(format!(r#"{{"id":"nt{n}","ts":null}}"#)), "missing_time");
    add("time as a word", text(format!(r#"{{"id":"w{n}","ts":"soon"}}"#)), "bad_time");
    add("time as a boolean", text(format!(r#"{{"id":"b{n}","ts":true}}"#)), "bad_time");
    add("time as an array", text(format!(r#"{{"id":"a{n}","ts":[{t}]}}"#)), "bad_time");
    add("time as an object", text(format!(r#"{{"id":"o{n}","ts":{{"ms":{t}}}}}"#)), "bad_time");
    add("empty time string", text(format!(r#"{{"id":"e{n}","ts":""}}"#)), "bad_time");
    add("before 1970", text(format!(r#"{{"id":"neg{n}","ts":-5}}"#)), "bad_time");
    add("before 1970, as text", text(format!(r#"{{"id":"negs{n}","ts":"-86400000"}}"#)), "bad_time");
    add("-1e300", text(format!(r#"{{"id":"negbig{n}","ts":-1e300}}"#)), "bad_time");
    add("1e300", text(format!(r#"{{"id":"big{n}","ts":1e300}}"#)), "bad_time");
    add("u64::MAX + 1", text(format!(r#"{{"id":"over{n}","ts":18446744073709551616}}"#)), "bad_time");
    add("u64 overflow as text", text(format!(r#"{{"id":"overs{n}","ts":"99999999999999999999999"}}"#)), "bad_time");
    add("300 KB array as time", text(format!(r#"{{"id":"arr{n}","ts":[{}0]}}"#, "0,".repeat(150_000))), "bad_time");
    // Too large (key, or garbage).
    add("700 KB key", text(format!(r#"{{"id":"{}{n}","ts":{t}}}"#, "k".repeat(700_000))), "too_large");
    add("650 KB of garbage", vec![b'#'; 650_000], "too_large");
    // Far in the future: more than max_clock_jump ahead, never confirmed.
    add("year 3000", text(format!(r#"{{"id":"y3k{n}","ts":{YEAR_3000_MS}}}"#)), "time_jump");
    add("year 3000, as text", text(format!(r#"{{"id":"y3ks{n}","ts":"{YEAR_3000_MS}"}}"#)), "time_jump");
    add("i64::MAX", text(format!(r#"{{"id":"imax{n}","ts":{}}}"#, i64::MAX)), "time_jump");
    add("u64::MAX", text(format!(r#"{{"id":"umax{n}","ts":{}}}"#, u64::MAX)), "time_jump");
    add("a day ahead", text(format!(r#"{{"id":"day{n}","ts":{}}}"#, ts + 86_400_000)), "time_jump");
    add("two windows ahead", text(format!(r#"{{"id":"ahead{n}","ts":{}}}"#, ts + 2 * WINDOW_MS)), "time_jump");
    out
}

/// The corpus: 3600 valid records over ~72 s of event time (1500 keys,
/// jittered by up to 0.5 s, within the lateness), two rounds of every
/// hostile record spread between them (never two in a row, none in the
/// last 400 records, so that every slice sees readable records after each
/// time jump), plus valid records with 200 KB keys (twice each) and valid
/// records from before the window (1970, an hour ago), which are late.
fn corpus() -> Vec<Item> {
    let mut rng = Rng::new(19);
    let n_valid = 3_600u64;
    let base = BASE_TS as u64;
    let time_of = |i: u64| base + i * 20;
    let mut rounds: Vec<(String, Vec<u8>, &'static str)> = Vec::new();
    for n in 0..2 {
        rounds.extend(hostile(n, 0));
    }
    let gap = (n_valid - 500) / rounds.len() as u64;
    let mut out = Vec::new();
    let mut seq = 0u64;
    let mut planted = 0usize;
    let huge = |n: u64| format!("H{n}-{}", "h".repeat(200_000));
    for i in 0..n_valid {
        let ts = time_of(i) + rng.below(500);
        out.push(valid(seq, &format!("v{}", rng.below(1_500)), ts, false));
        seq += 1;
        if i >= 100 && planted < rounds.len() && (i - 100) % gap == 0 {
            // The hostile record, with times near the stream's.
            let n = planted as u64 / (rounds.len() as u64 / 2);
            let (kind, _, reason) = &rounds[planted];
            let again = hostile(n, time_of(i));
            let (_, payload, _) = again.iter().find(|(k, _, _)| k == kind).expect("same kinds").clone();
            out.push(Item { payload, kind: kind.clone(), plan: Plan::Invalid(reason) });
            planted += 1;
        }
        match i {
            500 | 1700 => {
                // A huge key, and its copy 300 ms later (a duplicate).
                out.push(valid(seq, &huge(i), time_of(i), false));
                out.push(valid(seq + 1, &huge(i), time_of(i) + 300, false));
                seq += 2;
            }
            900 => {
                for (j, ts) in [0, 1, 86_400_000, base - 3_600_000].into_iter().enumerate() {
                    out.push(valid(seq, &format!("past{j}"), ts, true));
                    seq += 1;
                }
            }
            _ => {}
        }
    }
    assert_eq!(planted, rounds.len(), "every hostile record is planted");
    for item in &out {
        assert!(!item.payload.contains(&b'\n'), "{}: a record is one line", item.kind);
        assert!(item.payload.last() != Some(&b'\r'), "{}: pipe mode would strip it", item.kind);
    }
    out
}

/// Planted records per reason.
fn planted(corpus: &[Item]) -> BTreeMap<&'static str, u64> {
    let mut by: BTreeMap<&'static str, u64> = BTreeMap::new();
    for item in corpus {
        if let Plan::Invalid(reason) = item.plan {
            *by.entry(reason).or_default() += 1;
        }
    }
    by
}

fn is_valid(item: &Item) -> bool {
    matches!(item.plan, Plan::Valid { .. })
}

/// The exact answer over event-time order for the valid records: the
/// seqs a perfect filter delivers.
fn exact_delivered(corpus: &[Item]) -> HashSet<u64> {
    let mut valid: Vec<(u64, u64, &str)> = corpus
        .iter()
        .filter_map(|i| match &i.plan {
            Plan::Valid { seq, id, ts, .. } => Some((*ts, *seq, id.as_str())),
            Plan::Invalid(_) => None,
        })
        .collect();
    valid.sort();
    let mut oracle = ExactWindow::new(WINDOW_MS);
    valid.into_iter().filter(|(ts, _, id)| !oracle.observe(id, *ts)).map(|(_, seq, _)| seq).collect()
}

fn lines(items: &[&Item]) -> Vec<u8> {
    let mut out = Vec::new();
    for i in items {
        out.extend_from_slice(&i.payload);
        out.push(b'\n');
    }
    out
}

struct FilterRun {
    stdout: Vec<u8>,
    stderr: String,
    stats: serde_json::Value,
    invalid: Option<Vec<u8>>,
}

fn run_filter(name: &str, input: Vec<u8>, invalid_file: bool) -> FilterRun {
    let dir = std::env::temp_dir().join(unique(&format!("dedupd-hostile-{name}")));
    std::fs::create_dir_all(&dir).unwrap();
    let (stats, invalid) = (dir.join("stats.json"), dir.join("invalid"));
    let max = MAX_RECORD_BYTES.to_string();
    let mut args = vec![
        "filter",
        "--key",
        "json:/id",
        "--time",
        "json:/ts",
        "--window",
        "60s",
        "--expected",
        "20000",
        "--slices",
        "4",
        "--max-record-bytes",
        &max,
        "--stats-json",
        stats.to_str().unwrap(),
    ];
    if invalid_file {
        args.extend(["--invalid", invalid.to_str().unwrap()]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dedupd filter");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "dedupd filter failed: {stderr}");
    let run = FilterRun {
        stdout: out.stdout,
        stats: serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap(),
        invalid: invalid_file.then(|| std::fs::read(&invalid).unwrap()),
        stderr,
    };
    std::fs::remove_dir_all(&dir).ok();
    run
}

/// The seqs of the JSON lines of `stdout`.
fn seqs_of(stdout: &[u8]) -> HashSet<u64> {
    stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<serde_json::Value>(l).unwrap()["seq"].as_u64().unwrap())
        .collect()
}

fn print_table(corpus: &[Item]) {
    let mut kinds: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for item in corpus.iter().filter(|i| i.kind != "valid") {
        let reason = match &item.plan {
            Plan::Invalid(r) => r,
            Plan::Valid { late: true, .. } => "(late)",
            Plan::Valid { .. } => "(valid)",
        };
        *kinds.entry((reason, item.kind.as_str())).or_default() += 1;
    }
    eprintln!("| reason | record | planted |\n|---|---|---|");
    for ((reason, kind), n) in &kinds {
        eprintln!("| {reason} | {kind} | {n} |");
    }
}

#[test]
fn hostile_input_through_the_pipe() {
    let corpus = corpus();
    let want = planted(&corpus);
    print_table(&corpus);
    let all: Vec<&Item> = corpus.iter().collect();
    let valid_only: Vec<&Item> = corpus.iter().filter(|i| is_valid(i)).collect();
    let invalid: Vec<&Item> = corpus.iter().filter(|i| !is_valid(i)).collect();
    let late = corpus.iter().filter(|i| matches!(i.plan, Plan::Valid { late: true, .. })).count() as u64;

    let run = run_filter("all", lines(&all), true);
    // Counts per reason are the planted ones, and nothing else is invalid.
    let got: BTreeMap<&str, u64> = run.stats["invalid_by_reason"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, n)| n.as_u64() != Some(0))
        .map(|(r, n)| (want.keys().find(|k| *k == r).copied().unwrap_or("unplanted reason"), n.as_u64().unwrap()))
        .collect();
    eprintln!("pipe: {} records, planted {want:?}, dead-lettered {got:?}", corpus.len());
    assert_eq!(got, want);
    assert_eq!(run.stats["records"], corpus.len() as u64);
    assert_eq!(run.stats["late_records"], late, "the records from before the window are late, not invalid");
    // Nothing lost: every unreadable record, byte for byte, in input order.
    assert!(run.invalid.as_deref() == Some(&lines(&invalid)[..]), "the invalid file differs from the planted records");
    assert!(
        run.stderr.contains(&format!("{} invalid records written to the invalid file", invalid.len())),
        "{}",
        run.stderr
    );

    // The valid records get the verdicts they get alone, and those of the exact answer.
    let alone = run_filter("valid-only", lines(&valid_only), true);
    assert!(run.stdout == alone.stdout, "hostile records changed the verdicts of the valid ones");
    assert_eq!(alone.invalid.as_deref(), Some(&b""[..]));
    let delivered = seqs_of(&run.stdout);
    let exact = exact_delivered(&corpus);
    let dropped: Vec<&u64> = exact.difference(&delivered).collect();
    let extra: Vec<&u64> = delivered.difference(&exact).collect();
    eprintln!(
        "pipe: {} delivered, exact answer {}: dropped {dropped:?}, extra {extra:?}",
        delivered.len(),
        exact.len()
    );
    // The filter's own error (timer ticks at the window's edge), the same alone.
    assert!(
        dropped.len() + extra.len() <= valid_only.len() / 100,
        "further from the exact answer than the filter's target"
    );
    let distinct = delivered.len() as u64;
    assert_eq!(run.stats["distinct"], distinct);
    assert_eq!(run.stats["duplicates"], valid_only.len() as u64 - distinct);

    // Without --invalid each one is reported on stderr with its line number, briefly.
    let reported = run_filter("stderr", lines(&all), false);
    let reports: Vec<&str> =
        reported.stderr.lines().filter(|l| l.starts_with("dedupd: invalid record at line ")).collect();
    assert_eq!(reports.len(), invalid.len(), "{}", reported.stderr);
    // Each at its own line: the line numbers of the planted records, in input order.
    let numbers: Vec<usize> = reports
        .iter()
        .map(|l| l["dedupd: invalid record at line ".len()..].split(':').next().unwrap().parse().unwrap())
        .collect();
    let planted_at: Vec<usize> = corpus.iter().enumerate().filter(|(_, i)| !is_valid(i)).map(|(n, _)| n + 1).collect();
    assert_eq!(numbers, planted_at, "the reports name other lines than the invalid records'");
    let longest = reports.iter().map(|l| l.len()).max().unwrap();
    assert!(longest < 400, "a report quotes a whole hostile value ({longest} bytes)");
    assert!(reported.stdout == run.stdout);
}

/// Produces `items` to `topic`, record `i` to partition `partition(i, item)`.
fn produce_items(topic: &str, items: &[&Item], partition: impl Fn(usize, &Item) -> i32) {
    let records: Vec<Rec> = items
        .iter()
        .enumerate()
        .map(|(i, item)| Rec {
            partition: partition(i, item),
            offset: -1,
            key: None,
            value: Some(item.payload.clone()),
            timestamp: Some(BASE_TS),
            headers: Vec::new(),
        })
        .collect();
    produce(topic, &records);
}

fn hostile_env(app: &str, input: &str, mode: &str, slices: u32) -> Vec<(String, String)> {
    let mut env = app_env(app, input, mode, slices);
    env.push(("DEDUPD__INPUT__MAX_RECORD_BYTES".into(), MAX_RECORD_BYTES.to_string()));
    env
}

/// Every dead letter of `app` as (reason, payload), sorted, once `want` have arrived.
fn dead_letters(app: &str, want: usize, input: &str) -> Vec<(String, Vec<u8>)> {
    let topic = format!("{app}.dlq");
    let mut all = Vec::new();
    wait_for(&format!("{want} dead letters in {topic}"), Duration::from_secs(120), || {
        all = read_all(&topic, Duration::from_millis(1500)).into_values().flatten().collect::<Vec<Rec>>();
        all.len() >= want
    });
    std::thread::sleep(Duration::from_secs(1));
    let all: Vec<Rec> = read_all(&topic, Duration::from_secs(2)).into_values().flatten().collect();
    for r in &all {
        let source = String::from_utf8(r.header("dedupd.source").expect("source header").to_vec()).unwrap();
        assert!(source.starts_with(&format!("{input}/")), "{source}");
        let detail = r.header("dedupd.detail").expect("detail header");
        assert!(!detail.is_empty() && detail.len() < 300, "a detail of {} bytes", detail.len());
    }
    let mut out: Vec<(String, Vec<u8>)> = all
        .iter()
        .map(|r| {
            let reason = String::from_utf8_lossy(r.header("dedupd.reason").expect("reason header")).into_owned();
            (reason, r.value.clone().unwrap_or_default())
        })
        .collect();
    out.sort();
    out
}

fn delivered_seqs(app: &str) -> HashSet<u64> {
    read_all(&format!("{app}.out"), Duration::from_secs(3))
        .into_values()
        .flatten()
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(r.value.as_deref().unwrap()).unwrap()["seq"].as_u64().unwrap()
        })
        .collect()
}

#[test]
fn hostile_input_through_the_daemon() {
    let corpus = corpus();
    let want = planted(&corpus);
    let all: Vec<&Item> = corpus.iter().collect();
    let valid_only: Vec<&Item> = corpus.iter().filter(|i| is_valid(i)).collect();
    let mut planted_letters: Vec<(String, Vec<u8>)> = corpus
        .iter()
        .filter_map(|i| match i.plan {
            Plan::Invalid(reason) => Some((reason.to_string(), i.payload.clone())),
            Plan::Valid { .. } => None,
        })
        .collect();
    planted_letters.sort();
    let time_jumps = want["time_jump"];
    let late = corpus.iter().filter(|i| matches!(i.plan, Plan::Valid { late: true, .. })).count() as u64;

    // Three daemons side by side: the corpus in repartition mode (the router
    // dead-letters what it cannot read, the slices the time jumps), the
    // corpus in input-partitions mode (the slices do both), and the valid
    // records alone.
    let runs =
        [("rep", "repartition", 3, true), ("inp", "input-partitions", 4, true), ("alone", "repartition", 3, false)];
    let mut daemons = Vec::new();
    for (name, mode, partitions, hostile) in runs {
        let input = unique(&format!("hostile-{name}"));
        create_topic(&input, partitions);
        let items = if hostile { &all } else { &valid_only };
        produce_items(&input, items, |i, item| match (&item.plan, mode) {
            (Plan::Valid { id, .. }, "input-partitions") => partition_of(id, partitions as u32),
            _ => (i % partitions as usize) as i32,
        });
        let app = unique(&format!("hostile-{name}"));
        let d = Daemon::start(&format!("hostile-{name}"), &hostile_env(&app, &input, mode, 4));
        daemons.push((name, app, input, hostile, d));
    }
    let mut results = BTreeMap::new();
    for (name, app, input, hostile, d) in &mut daemons {
        d.wait_ready(Duration::from_secs(90));
        let judged = valid_only.len() as u64 + if *hostile { time_jumps } else { 0 };
        wait_for(&format!("{name}: {judged} records judged by the slices"), Duration::from_secs(180), || {
            slice_total(&[&*d], &["distinct", "duplicates", "resends"]) + slice_total(&[&*d], &["invalid"]) >= judged
                || slice_total(&[&*d], &["distinct", "duplicates", "invalid"]) >= judged
        });
        let letters = dead_letters(app, if *hostile { planted_letters.len() } else { 0 }, input);
        let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
        for (reason, _) in &letters {
            *by_reason.entry(reason.clone()).or_default() += 1;
        }
        eprintln!("daemon {name}: dead letters by reason {by_reason:?}");
        if *hostile {
            let want: BTreeMap<String, u64> = want.iter().map(|(r, n)| (r.to_string(), *n)).collect();
            assert_eq!(by_reason, want, "{name}: dead letters by reason");
            assert!(letters == planted_letters, "{name}: the dead letters are not the planted records, byte for byte");
        } else {
            assert!(letters.is_empty(), "{name}: {letters:?}");
        }
        assert_eq!(slice_total(&[&*d], &["late"]), late, "{name}: the records from before the window are late");
        results.insert(name.to_string(), delivered_seqs(app));
    }
    for (name, _, _, _, d) in &mut daemons {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{name}: {}", d.log_text());
        d.assert_clean_log();
    }

    // The valid records' verdicts: those they get alone, near the exact answer.
    let exact = exact_delivered(&corpus);
    for (name, delivered) in &results {
        let dropped = exact.difference(delivered).count();
        let extra = delivered.difference(&exact).count();
        eprintln!(
            "daemon {name}: {} delivered, exact answer {}: {dropped} dropped, {extra} extra",
            delivered.len(),
            exact.len()
        );
        assert!(
            dropped + extra <= valid_only.len() / 100,
            "{name}: further from the exact answer than the filter's target"
        );
    }
    assert!(results["rep"] == results["alone"], "hostile records changed the verdicts of the valid ones");
}

/// The Kafka record's own key and timestamp as the dedup key and the time
/// (`key = "record-key"`, `time = "record-timestamp"`): absent, empty and
/// huge keys, timestamps years ahead of the stream and before 1970.
///
/// A record timestamp more than an hour ahead of the broker's clock (the
/// year 3000, `i64::MAX`) cannot be tried here: the test broker refuses
/// the whole batch with `INVALID_TIMESTAMP`, as Kafka 4.0 does by default
/// (`log.message.timestamp.after.max.ms` = 1 h). The largest it takes, the
/// wall clock + 50 min, is three years ahead of this stream (2023): as
/// absurd to the slices' clock. Far-future payload times (the year 3000,
/// `i64::MAX`, `u64::MAX`) are in [`hostile_input_through_the_daemon`]'s corpus.
#[test]
fn kafka_keys_and_timestamps() {
    let base = BASE_TS;
    let ahead =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 + 50 * 60 * 1000;
    let mut records: Vec<(Rec, Option<&'static str>)> = Vec::new();
    let mut hostile_at = BTreeMap::new();
    let kinds: [(&str, Option<&str>); 7] = [
        ("no key", Some("missing_key")),
        ("empty key", Some("empty_key")),
        ("700 KB key", Some("too_large")),
        ("an hour ahead of the broker", Some("time_jump")),
        ("a minute less", Some("time_jump")),
        ("before 1970", Some("bad_time")),
        ("1970 (valid, late)", None),
    ];
    for (n, kind) in kinds.iter().cycle().take(2 * kinds.len()).enumerate() {
        hostile_at.insert(100 + n as u64 * 70, *kind);
    }
    let mut valid: Vec<(u64, String, u64)> = Vec::new();
    for i in 0..1_200u64 {
        let ts = base + i as i64 * 50;
        let key = format!("k{}", (i * 7919) % 500);
        records.push((Rec::new((i % 2) as i32, &key, &format!("{{\"seq\":{i}}}"), ts), None));
        valid.push((i, key, ts as u64));
        if let Some((kind, reason)) = hostile_at.get(&i) {
            let seq = 10_000 + i;
            let mut r = Rec::new((i % 2) as i32, &format!("h{i}"), &format!("{{\"seq\":{seq}}}"), ts);
            match *kind {
                "no key" => r.key = None,
                "empty key" => r.key = Some(Vec::new()),
                "700 KB key" => r.key = Some(vec![b'k'; 700_000]),
                "an hour ahead of the broker" => r.timestamp = Some(ahead),
                "a minute less" => r.timestamp = Some(ahead - 60_000),
                "before 1970" => r.timestamp = Some(-5),
                _ => {
                    r.timestamp = Some(1);
                    valid.push((seq, format!("h{i}"), 1));
                }
            }
            records.push((r, *reason));
        }
    }
    let input = unique("hostile-kafka");
    // Room for batches of 700 KB keys (over the broker's default limit).
    create_topic_with(&input, 2, &[("max.message.bytes", "5000000")]);
    produce(&input, &records.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>());
    let app = unique("hostile-kafka");
    let mut env = hostile_env(&app, &input, "repartition", 4);
    env.retain(|(k, _)| k != "DEDUPD__INPUT__KEY" && k != "DEDUPD__INPUT__TIME");
    env.push(("DEDUPD__INPUT__KEY".into(), "record-key".into()));
    env.push(("DEDUPD__INPUT__TIME".into(), "record-timestamp".into()));
    let mut d = Daemon::start("hostile-kafka", &env);
    d.wait_ready(Duration::from_secs(60));

    // The broker keeps each key and timestamp as sent (an empty key stays
    // empty, not absent; a negative timestamp stays negative).
    let stored: Vec<Rec> = read_all(&input, Duration::from_secs(2)).into_values().flatten().collect();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for (r, reason) in &records {
        if let Some(reason) = reason {
            let back = stored.iter().find(|s| s.value == r.value).expect("stored");
            assert!(back.key == r.key && back.timestamp == r.timestamp, "the broker changed {:?}", r.value);
            *want.entry(reason.to_string()).or_default() += 1;
        }
    }
    let planted: usize = want.values().sum::<u64>() as usize;
    let letters = dead_letters(&app, planted, &input);
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for (reason, _) in &letters {
        *got.entry(reason.clone()).or_default() += 1;
    }
    eprintln!("kafka keys and timestamps: planted {want:?}, dead-lettered {got:?}");
    assert_eq!(got, want);
    let mut sent: Vec<(String, Vec<u8>)> =
        records.iter().filter_map(|(r, reason)| reason.map(|x| (x.to_string(), r.value.clone().unwrap()))).collect();
    sent.sort();
    assert!(letters == sent, "the dead letters are not the planted records");

    wait_for("every valid record judged", Duration::from_secs(60), || {
        slice_total(&[&d], &["distinct", "duplicates"]) >= valid.len() as u64
    });
    assert_eq!(slice_total(&[&d], &["late"]), 2, "the records stamped in 1970 are late");
    let delivered = delivered_seqs(&app);
    valid.sort_by_key(|(seq, _, ts)| (*ts, *seq));
    let mut oracle = ExactWindow::new(WINDOW_MS);
    let exact: HashSet<u64> = valid.iter().filter(|(_, k, ts)| !oracle.observe(k, *ts)).map(|(s, _, _)| *s).collect();
    let errors = exact.symmetric_difference(&delivered).count();
    eprintln!(
        "kafka keys and timestamps: {} delivered, exact answer {}, {errors} differ",
        delivered.len(),
        exact.len()
    );
    assert!(errors <= valid.len() / 100, "{errors} verdicts differ from the exact answer");
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    d.assert_clean_log();
}

/// Issue 19: one record stamped in the year 3000 in a real-text stream
/// (Brown Corpus sentences as keys, ~27k per 60 s window, arrival jittered
/// by up to 1 s) changes no verdict of the others, in the daemon
/// (repartition mode) as in the pipe, and is dead-lettered as `time_jump`.
/// Its key recurs later in the stream: admitted, it would also have
/// dropped those copies.
#[test]
fn a_year_3000_record_changes_no_verdict_of_a_real_text_stream() {
    use dedupd::testkit::oracle::Confusion;
    use dedupd::testkit::text::TextCorpus;
    use dedupd::testkit::workload::{KeyDist, RateProfile, Stream};

    let corpus = TextCorpus::load().unwrap_or_else(|e| panic!("{e}"));
    let dist = KeyDist::Recurring { p_new: 0.415, min_gap_ms: 100, max_gap_ms: 90_000 };
    let events: Vec<(u64, String, u64)> = Stream::new(2028, dist, RateProfile::steady(1000, 1000), 70)
        .enumerate()
        .map(|(seq, (id, t))| (seq as u64, corpus.key(id), BASE_TS as u64 + t))
        .collect();
    // Arrival order: each event up to 1 s late (within the 2 s lateness).
    let mut rng = Rng::new(5);
    let mut arrivals: Vec<(u64, &(u64, String, u64))> = events.iter().map(|e| (e.2 + rng.below(1_000), e)).collect();
    arrivals.sort_by_key(|(at, e)| (*at, e.0));
    let line = |seq: u64, id: &str, ts: u64| serde_json::json!({"id": id, "ts": ts, "seq": seq}).to_string();
    let clean: Vec<String> = arrivals.iter().map(|(_, (seq, id, ts))| line(*seq, id, *ts)).collect();
    // The offender, with the key of an event that comes back later: the
    // very first record of the stream, or one 10 s into it.
    let placements = [("y3k-first", 0), ("y3k-10s", clean.len() / 7)];
    let mut offenders = Vec::new();
    let mut streams = Vec::new();
    for (name, at) in placements {
        let (_, (_, key, _)) =
            arrivals[at..].iter().find(|(_, (_, k, _))| events.iter().filter(|e| &e.1 == k).count() > 1).unwrap();
        let offender = line(u64::MAX, key, YEAR_3000_MS);
        let mut with = clean.clone();
        with.insert(at, offender.clone());
        offenders.push(offender);
        streams.push((name, with));
    }

    // The event-time truth for the clean events.
    let mut by_time: Vec<&(u64, String, u64)> = events.iter().collect();
    by_time.sort_by_key(|(seq, _, ts)| (*ts, *seq));
    let confusion = |delivered: &HashSet<u64>| {
        let mut oracle = ExactWindow::new(WINDOW_MS);
        let mut c = Confusion::default();
        for (seq, id, ts) in &by_time {
            c.record(!delivered.contains(seq), oracle.observe(id, *ts));
        }
        c
    };

    // The pipe: the same output but for the offender, which is reported.
    let to_input = |lines: &[String]| lines.iter().flat_map(|l| [l.as_bytes(), b"\n"].concat()).collect::<Vec<u8>>();
    let pipe_clean = run_filter("y3k-clean", to_input(&clean), true);
    for ((name, with), offender) in streams.iter().zip(&offenders) {
        let pipe_with = run_filter(name, to_input(with), true);
        assert!(pipe_with.stdout == pipe_clean.stdout, "pipe, {name}: the year-3000 record changed verdicts");
        assert_eq!(pipe_with.invalid.as_deref(), Some(format!("{offender}\n").as_bytes()), "{name}");
        assert_eq!(pipe_with.stats["invalid_by_reason"]["time_jump"], 1, "{name}");
        assert_eq!(pipe_with.stats["late_records"], 0, "{name}");
    }
    let c = confusion(&seqs_of(&pipe_clean.stdout));
    eprintln!(
        "pipe: {} events, FPR {:.5}, FNR {:.5} with and without the year-3000 record",
        events.len(),
        c.fpr(),
        c.fnr()
    );

    // The daemon, with and without it, side by side.
    let mut runs = Vec::new();
    let mut all_runs: Vec<(&str, &Vec<String>, Option<&String>)> =
        streams.iter().zip(&offenders).map(|((name, with), o)| (*name, with, Some(o))).collect();
    all_runs.push(("y3k-clean", &clean, None));
    for (name, lines, _) in &all_runs {
        let name = *name;
        let input = unique(name);
        create_topic(&input, 3);
        let records: Vec<Rec> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| Rec { key: None, ..Rec::new((i % 3) as i32, "", l, BASE_TS) })
            .collect();
        produce(&input, &records);
        let app = unique(name);
        let mut env = app_env(&app, &input, "repartition", 4);
        env.retain(|(k, _)| k != "DEDUPD__FILTER__EXPECTED_KEYS");
        env.push(("DEDUPD__FILTER__EXPECTED_KEYS".into(), "30000".into()));
        runs.push((name, app, input, Daemon::start(name, &env)));
    }
    let offender_of = |name: &str| all_runs.iter().find(|r| r.0 == name).and_then(|r| r.2);
    let mut delivered = Vec::new();
    for (name, app, input, d) in &mut runs {
        d.wait_ready(Duration::from_secs(90));
        let offender = offender_of(name);
        let total = events.len() as u64 + u64::from(offender.is_some());
        wait_for(&format!("{name}: every record judged"), Duration::from_secs(300), || {
            slice_total(&[&*d], &["distinct", "duplicates", "invalid"]) >= total
        });
        let late = slice_total(&[&*d], &["late"]);
        let letters = dead_letters(app, usize::from(offender.is_some()), input);
        if let Some(offender) = offender {
            assert_eq!(letters, vec![("time_jump".to_string(), offender.clone().into_bytes())], "{name}");
        } else {
            assert!(letters.is_empty(), "{letters:?}");
        }
        let seqs = delivered_seqs(app);
        let c = confusion(&seqs);
        eprintln!("daemon {name}: {} events, {late} late, FPR {:.5}, FNR {:.5}, {c:?}", events.len(), c.fpr(), c.fnr());
        assert_eq!(late, 0, "{name}: no record is later than the lateness");
        assert!(c.fpr() <= 0.01 && c.fnr() <= 0.005, "{name}: FPR {} FNR {} ({c:?})", c.fpr(), c.fnr());
        delivered.push(seqs);
    }
    for (i, name) in ["y3k-first", "y3k-10s"].iter().enumerate() {
        assert!(delivered[i] == delivered[2], "daemon, {name}: the year-3000 record changed verdicts");
    }
    for (name, _, _, d) in &mut runs {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{name}: {}", d.log_text());
        d.assert_clean_log();
    }
}
