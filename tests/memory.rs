//! Memory bounded in bytes, on the real broker: a flood of distinct keys far
//! beyond `filter.expected_keys` against a small `filter.max_memory` keeps
//! the filters within the cap (they saturate, counted, instead of growing),
//! the daemon running and delivering; held records beyond
//! `slicing.max_held_bytes` are flushed (logged, counted) and none is lost;
//! a configuration whose filters cannot fit the cap is refused at start-up,
//! naming the setting, its value and the rule.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

/// The sum over series of a metric in `/metrics` text (`name` followed by
/// labels or a space).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Per-series values of a metric, by their label text.
fn series(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once("} ")?;
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn metrics(daemon: &Daemon) -> String {
    let (code, body) = http_get(daemon.admin_port, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    body
}

/// Distinct keys, every one new: `count` clicks from `first` on, 1 ms apart.
fn distinct_clicks(first: u64, count: u64, partitions: u32) -> Vec<Rec> {
    (first..first + count)
        .map(|seq| {
            let id = format!("flood-{seq}");
            click(seq, &id, BASE_TS + seq as i64, partition_of(&id, partitions))
        })
        .collect()
}

/// 60 000 distinct keys in one window against `expected_keys` 1 000 and a
/// cap of 400 KiB: the filters would grow to 12 generations of 16× the
/// first size (2 × 1.1 MiB); under the cap they hold at most 2 and
/// saturate. Their memory stays within the cap at every scrape, the
/// saturated inserts are counted, and the daemon keeps judging and
/// delivering every record it reads.
#[test]
fn a_flood_of_distinct_keys_saturates_the_filters_within_the_cap() {
    const CAP: u64 = 400 << 10;
    let app = unique("memflood");
    let input = unique("clicks-memflood");
    create_topic(&input, 2);
    let mut env = app_env(&app, &input, "repartition", 2);
    env.extend(
        [
            ("DEDUPD__FILTER__EXPECTED_KEYS", "1000".to_string()),
            ("DEDUPD__FILTER__MAX_MEMORY", "400KiB".to_string()),
            ("DEDUPD__INPUT__MAX_RECORD_BYTES", "1024".to_string()),
            ("DEDUPD__SLICING__MAX_BUFFERED_BYTES", "4KiB".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let mut daemon = Daemon::start("memflood", &env);
    daemon.wait_ready(Duration::from_secs(90));
    let log = daemon.log_text();
    let line = log.lines().find(|l| l.contains("filter memory: worst case")).expect("the plan is logged").to_string();
    assert!(line.contains("cap 409600 bytes (400.0 KiB, filter.max_memory)"), "{line}");
    assert!(line.contains("filter.max_generations lowered from 12 to 2 to fit the cap"), "{line}");

    let total = 60_000u64;
    let mut within_cap = Vec::new();
    for batch in 0..20 {
        produce(&input, &distinct_clicks(batch * 3_000, 3_000, 2));
        let m = metrics(&daemon);
        within_cap.push(metric(&m, "dedupd_filter_memory_bytes"));
    }
    wait_processed(&[&daemon], total, Duration::from_secs(480));
    let m = metrics(&daemon);
    within_cap.push(metric(&m, "dedupd_filter_memory_bytes"));

    assert_eq!(metric(&m, "dedupd_memory_cap_bytes"), CAP as f64, "the cap is exported");
    let worst = metric(&m, "dedupd_filter_worst_case_bytes");
    assert!(worst > 0.0 && worst <= CAP as f64, "worst case {worst}");
    for bytes in &within_cap {
        assert!(*bytes > 0.0 && *bytes <= CAP as f64, "filter memory {bytes} above the cap {CAP}: {within_cap:?}");
    }
    for (slice, generations) in series(&m, "dedupd_filter_generations") {
        assert!(generations <= 2.0, "slice {slice}: {generations} generations");
    }
    let saturated = metric(&m, "dedupd_filter_saturated_inserts_total");
    assert!(saturated > 1_000.0, "the flood is counted as saturated inserts: {saturated}");
    // The router paused partitions by bytes (4 KiB of buffered records).
    assert!(metric(&m, "dedupd_router_byte_pauses_total") >= 1.0, "router byte pauses:\n{m}");

    // Still running, and still delivering: a saturated filter's
    // false-positive rate is high (the price of the cap, at 60× the keys
    // it was sized for), but it has delivered more keys than it was sized
    // for, and every distinct verdict reaches the output.
    assert!(daemon.child.try_wait().unwrap().is_none(), "the daemon died:\n{}", daemon.log_text());
    let out: usize = read_all(&format!("{app}.out"), Duration::from_secs(3)).values().map(Vec::len).sum();
    let distinct = slice_total(&[&daemon], &["distinct"]);
    assert_eq!(out as u64, distinct, "every distinct verdict is delivered");
    assert!(distinct > 2_000, "{distinct} of {total} delivered");
    // A later record is judged and delivered as before.
    produce(&input, &distinct_clicks(total, 100, 2));
    wait_processed(&[&daemon], total + 100, Duration::from_secs(60));
    let rss = std::fs::read_to_string(format!("/proc/{}/status", daemon.child.id())).unwrap_or_default();
    eprintln!("{}", rss.lines().find(|l| l.starts_with("VmRSS")).unwrap_or("VmRSS unknown"));
    let status = daemon.terminate(Duration::from_secs(40));
    assert!(status.success(), "{status}\n{}", daemon.log_text());
}

/// Records held for the watermark beyond `slicing.max_held_bytes` (2 KiB,
/// some 30 records) are released by a flush logged to the flush topic, as
/// an idle flush: counted, and no record is lost or delivered twice.
#[test]
fn held_records_beyond_their_byte_budget_are_flushed_and_counted() {
    let app = unique("memheld");
    let input = unique("clicks-memheld");
    create_topic(&input, 2);
    let mut env = app_env(&app, &input, "input-partitions", 2);
    env.extend(
        [
            ("DEDUPD__INPUT__MAX_RECORD_BYTES", "1024".to_string()),
            ("DEDUPD__SLICING__MAX_HELD_BYTES", "2KiB".to_string()),
            ("DEDUPD__INPUT__LATENESS", "30s".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let mut daemon = Daemon::start("memheld", &env);
    daemon.wait_ready(Duration::from_secs(90));
    // 1 ms apart and 30 s of lateness: every record waits for the watermark.
    let total = 2_000u64;
    produce(&input, &distinct_clicks(0, total, 2));
    wait_processed(&[&daemon], total, Duration::from_secs(120));
    let m = metrics(&daemon);
    let flushes = metric(&m, "dedupd_held_bytes_flushes_total");
    assert!(flushes >= 10.0, "held-bytes flushes: {flushes}");
    assert!(metric(&m, "dedupd_idle_flushes_total") >= flushes, "they are logged flushes");
    for (slice, bytes) in series(&m, "dedupd_held_bytes") {
        assert!(bytes <= 2048.0 + 1024.0, "slice {slice} holds {bytes} bytes");
    }
    let out = read_all(&format!("{app}.out"), Duration::from_secs(3));
    let mut ids: Vec<Vec<u8>> = out.values().flatten().map(|r| r.key.clone().unwrap_or_default()).collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!((n, ids.len()), (total as usize, total as usize), "each record delivered once");
    let status = daemon.terminate(Duration::from_secs(40));
    assert!(status.success(), "{status}\n{}", daemon.log_text());
}

/// Filters that cannot fit the cap even before they grow: `dedupd run`
/// and `dedupd check-config` refuse, naming the setting, its value and the
/// rule (and what to change).
#[test]
fn filters_that_cannot_fit_the_cap_are_refused_at_start_up() {
    let app = unique("memrefuse");
    let mut env = app_env(&app, "clicks-memrefuse", "repartition", 2);
    env.extend(
        [("DEDUPD__FILTER__EXPECTED_KEYS", "1000000".to_string()), ("DEDUPD__FILTER__MAX_MEMORY", "1MiB".to_string())]
            .map(|(k, v)| (k.to_string(), v)),
    );
    let mut daemon = Daemon::start("memrefuse", &env);
    let status = daemon.wait_exit(Duration::from_secs(30), "dedupd did not refuse the settings");
    assert!(!status.success());
    let log = daemon.log_text();
    assert!(
        log.contains(
            "invalid setting filter.max_memory = 1048576B: the filters of 2 slices need 11504640B (11.0 MiB) before \
             they grow, more than the cap; raise filter.max_memory (and the memory limit) to at least 11504640B"
        ),
        "{log}"
    );

    // check-config: the same refusal, and with a cap that fits, the worst case and the cap.
    let check = |cap: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dedupd"))
            .args(["check-config", "--print-resolved", "config/dedupd.toml"])
            .current_dir(root())
            .env_remove("DEDUPD_CONFIG")
            .env("DEDUPD__FILTER__MAX_MEMORY", cap)
            .output()
            .unwrap()
    };
    let refused = check("1MiB");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid setting filter.max_memory = 1048576B"));
    let fits = check("512MiB");
    let text = String::from_utf8_lossy(&fits.stdout);
    assert!(fits.status.success(), "{text}");
    assert!(
        text.contains(
            "# filter memory: worst case 368084992 bytes (351.0 MiB) with 8 slices of at most 2 generations; cap \
             536870912 bytes (512.0 MiB, filter.max_memory)"
        ),
        "{text}"
    );
    assert!(text.contains("max_memory = 536870912\n"), "{text}");

    // A memory limit the parts cannot fit is refused, naming what they need.
    let small = std::process::Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(["check-config", "config/dedupd.toml"])
        .current_dir(root())
        .env_remove("DEDUPD_CONFIG")
        .env("DEDUPD__MEMORY__LIMIT", "96MiB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&small.stderr);
    assert!(!small.status.success(), "{stderr}");
    assert!(
        stderr
            .contains("invalid setting memory.limit = 100663296B (96.0 MiB, memory.limit): the process needs at least"),
        "{stderr}"
    );
}

/// The resident memory of process `pid` (VmRSS in /proc), in bytes.
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kb.and_then(|v| v.parse::<u64>().ok()).map_or(0, |kb| kb * 1024)
}

/// One memory budget bounds the whole process: `memory.limit = 256MiB`,
/// repartition mode, records of 64 KiB, and an output topic that accepts no
/// write for 60 s (a proxy holds its Produce requests) while 3 000 records
/// (about 190 MiB) arrive. The output producer's queue fills, the slices
/// wait on it, their prefetch and held records stop at their parts, and the
/// rest stays in the slice log on the broker: the process's resident memory
/// stays under the limit at every sample. Once the output takes writes
/// again, every record is delivered, once.
#[test]
fn the_memory_budget_holds_while_the_output_accepts_no_writes() {
    const LIMIT: u64 = 256 << 20;
    const RECORDS: u64 = 3_000;
    let dir = std::env::temp_dir().join(unique("dedupd-budget"));
    std::fs::create_dir_all(&dir).unwrap();
    let app = unique("budget");
    let proxy = ProduceProxy::new(&dir, &format!("{app}.out"), false);
    let input = unique("clicks-budget");
    create_topic_on(&proxy.client, &input, 4);
    let mut env = app_env(&app, &input, "repartition", 4);
    env.extend(
        [("DEDUPD__KAFKA__BROKERS", proxy.brokers()), ("DEDUPD__MEMORY__LIMIT", "256MiB".to_string())]
            .map(|(k, v)| (k.to_string(), v)),
    );
    let mut daemon = Daemon::start("budget", &env);
    daemon.wait_ready(Duration::from_secs(90));
    let log = daemon.log_text();
    assert!(log.contains("memory budget: 268435456B (256.0 MiB, memory.limit): runtime 64.0 MiB, "), "{log}");
    let m = metrics(&daemon);
    let parts = series(&m, "dedupd_memory_budget_bytes");
    assert!(parts.len() >= 7 && parts.values().sum::<f64>() <= LIMIT as f64, "{parts:?}");

    let pad = "x".repeat(64 << 10);
    let record = |seq: u64| {
        let (id, ts) = (format!("big-{seq}"), BASE_TS + seq as i64 * 10);
        let value = format!("{{\"id\":\"{id}\",\"ts\":{ts},\"seq\":{seq},\"pad\":\"{pad}\"}}");
        Rec::new(partition_of(&id, 4), &id, &value, ts)
    };
    let pid = daemon.child.id();
    let mut samples = Vec::new();
    proxy.hold();
    let held_since = std::time::Instant::now();
    for batch in 0..RECORDS / 50 {
        produce_on(&proxy.client, &input, &(batch * 50..(batch + 1) * 50).map(record).collect::<Vec<_>>());
        // 50 records a second: 60 s of input while the output is held.
        while std::time::Instant::now() < held_since + Duration::from_secs(batch + 1) {
            samples.push(resident_bytes(pid));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    while held_since.elapsed() < Duration::from_secs(60) {
        samples.push(resident_bytes(pid));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(daemon.child.try_wait().unwrap().is_none(), "the daemon died:\n{}", daemon.log_text());
    let before_release = metric(&metrics(&daemon), "dedupd_records_total");
    proxy.release();
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let seqs = loop {
        samples.push(resident_bytes(pid));
        let seqs = output_seqs(&proxy.client, &app);
        if seqs.len() as u64 >= RECORDS || std::time::Instant::now() > deadline {
            break seqs;
        }
    };
    let peak = samples.iter().copied().max().unwrap_or(0);
    eprintln!("peak resident {} MiB over {} samples; {before_release} judged while held", peak >> 20, samples.len());
    assert!(samples.iter().all(|&b| b > 0), "VmRSS read at every sample");
    assert!(peak < LIMIT, "resident {peak} bytes, above memory.limit {LIMIT}: {samples:?}");
    assert_eq!(seqs, (0..RECORDS).collect::<Vec<_>>(), "every record delivered once after the output took writes");
    let status = daemon.terminate(Duration::from_secs(40));
    assert!(status.success(), "{status}\n{}", daemon.log_text());
}
