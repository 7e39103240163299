//! The daemon's log on the real broker (issue 19): quiet at INFO when idle,
//! even with librdkafka statistics switched on; a periodic summary that
//! counts what happened and says nothing when nothing did; and JSON lines
//! for log shippers.

mod support;

use std::time::{Duration, Instant};

use support::*;

/// The summary lines of a text log (target `dedupd::summary`).
fn summary_lines(log: &str) -> Vec<String> {
    log.lines().filter(|l| l.contains(" dedupd::summary] ")).map(str::to_string).collect()
}

/// The number before `what` in a summary line ("120 records in" → 120).
fn count(line: &str, what: &str) -> u64 {
    let at = line.find(what).unwrap_or_else(|| panic!("no `{what}` in {line}"));
    line[..at].trim_end().rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{line}"))
}

/// 100 distinct clicks, each sent twice, and one record that is not JSON.
fn produce_clicks(input: &str) {
    let mut records: Vec<Rec> = (0..200u64)
        .map(|i| {
            let id = format!("log-{}", i % 100);
            click(i, &id, BASE_TS + i as i64 * 10, (i % 2) as i32)
        })
        .collect();
    records.push(Rec::new(0, "bad", "{not json", BASE_TS + 2_000));
    produce(input, &records);
}

/// A ready daemon in repartition mode on a new 2-partition input topic,
/// with `settings` on top of the test app's: (its input topic, it).
fn ready_daemon(name: &str, settings: &[(&str, &str)]) -> (String, Daemon) {
    let input = unique(name);
    create_topic(&input, 2);
    let mut env = app_env(&unique(name), &input, "repartition", 2);
    env.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut d = Daemon::start(name, &env);
    d.wait_ready(Duration::from_secs(60));
    (input, d)
}

#[test]
fn an_idle_daemon_is_quiet_and_the_summary_counts_what_happened() {
    let (input, mut d) = ready_daemon(
        "logs-idle",
        &[
            // The default level, with librdkafka's own lines: nothing filtered away.
            ("RUST_LOG", "info"),
            // Statistics every 500 ms: rdkafka's default context would log each one at INFO.
            ("DEDUPD__KAFKA__STATISTICS_INTERVAL_MS", "500"),
            ("DEDUPD__LOG__SUMMARY_INTERVAL", "2s"),
        ],
    );
    std::thread::sleep(Duration::from_secs(2));

    // Idle: 16 s, 32 statistics periods, 8 summary periods.
    let before = d.log_text().lines().count();
    std::thread::sleep(Duration::from_secs(16));
    let log = d.log_text();
    let idle: Vec<&str> = log.lines().skip(before).collect();
    eprintln!("{} lines at start-up, {} while idle for 16 s:\n{}", before, idle.len(), idle.join("\n"));
    assert!(idle.len() <= 2, "an idle daemon logged {} lines in 16 s:\n{}", idle.len(), idle.join("\n"));
    for needle in ["stats", "msg_cnt", "rxmsgs", "hi_offset"] {
        assert!(!log.contains(needle), "statistics in the log ({needle}):\n{log}");
    }
    assert!(summary_lines(&log).is_empty(), "an idle daemon writes no summary:\n{log}");
    // The lag gauge still reads the statistics.
    let metrics = http_get(d.admin_port, "/metrics").unwrap().1;
    assert!(metrics.contains("dedupd_consumer_lag{slice=\"0\"} 0"), "{metrics}");

    // Work: the summaries add up to what happened.
    produce_clicks(&input);
    let started = Instant::now();
    let totals = |log: &str| {
        let lines = summary_lines(log);
        let sum = |what: &str| lines.iter().map(|l| count(l, what)).sum::<u64>();
        (sum(" records in"), sum(" distinct"), sum(" duplicates"), sum(" dead letters"))
    };
    while totals(&d.log_text()) != (201, 100, 100, 1) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "summaries {:?}, want (201, 100, 100, 1):\n{}",
            totals(&d.log_text()),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = d.log_text();
    let lines = summary_lines(&log);
    assert!(lines.iter().any(|l| l.contains("(bad_json 1)")), "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("] last 2 s: ")), "{lines:?}");

    // Idle again: no more summaries.
    std::thread::sleep(Duration::from_secs(3));
    let settled = summary_lines(&d.log_text()).len();
    std::thread::sleep(Duration::from_secs(6));
    let after = summary_lines(&d.log_text());
    assert_eq!(after.len(), settled, "summaries while idle: {:?}", &after[settled..]);

    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    d.assert_clean_log();
    // Text stays env_logger's `[TIME LEVEL TARGET] message`.
    for line in d.log_text().lines() {
        let level = line.strip_prefix('[').and_then(|rest| rest.split_whitespace().nth(1));
        assert!(level.is_some_and(|l| ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&l)), "{line}");
    }
}

#[test]
fn json_logs_are_one_object_per_line() {
    let (input, mut d) = ready_daemon(
        "logs-json",
        &[
            // Everything, rdkafka's own lines included: each must be JSON.
            ("RUST_LOG", "debug"),
            ("DEDUPD__LOG__FORMAT", "json"),
            ("DEDUPD__LOG__SUMMARY_INTERVAL", "1s"),
        ],
    );
    produce_clicks(&input);
    wait_for("every record judged", Duration::from_secs(30), || slice_total(&[&d], &["distinct", "duplicates"]) >= 200);
    std::thread::sleep(Duration::from_secs(2));
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());

    let log = d.log_text();
    let mut targets = std::collections::BTreeSet::new();
    let mut summaries = Vec::new();
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        for field in ["timestamp", "level", "target", "message"] {
            assert!(v[field].is_string(), "no string `{field}`: {line}");
        }
        let ts = v["timestamp"].as_str().unwrap();
        assert!(ts.len() == 24 && ts.as_bytes()[10] == b'T' && ts.ends_with('Z'), "RFC 3339 UTC with ms: {ts}");
        assert!(["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&v["level"].as_str().unwrap()), "{line}");
        assert!(!["ERROR", "WARN"].contains(&v["level"].as_str().unwrap()), "a clean run: {line}");
        let target = v["target"].as_str().unwrap().to_string();
        if target == "dedupd::summary" {
            summaries.push(v.clone());
        }
        targets.insert(target);
    }
    eprintln!("{} JSON lines from {} targets: {targets:?}", log.lines().count(), targets.len());
    assert!(log.lines().count() > 20, "RUST_LOG=debug should log plenty:\n{log}");
    assert!(targets.iter().any(|t| t.starts_with("rdkafka")), "rdkafka's lines go through the same formatter");
    assert!(log.contains("\"message\":\"stopped cleanly\""));
    let fields = |name: &str| summaries.iter().map(|s| s["fields"][name].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (fields("records_in"), fields("distinct"), fields("duplicates"), fields("dead_letters")),
        (201, 100, 100, 1),
        "{summaries:?}"
    );
}
