//! A record larger than a topic dedupd writes takes (`max.message.bytes`,
//! read at start-up) goes to the dead letters as `too_large_for_topic`, and
//! the daemon goes on: the broker would refuse it, and the gapless producer
//! would stop the daemon at the same record on every restart.
//!
//! Needs the local broker (`scripts/broker.sh`); `DEDUPD_BROKER_PORT` picks its port.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::*;

/// Every record of `topic`, all partitions.
fn all(topic: &str) -> Vec<Rec> {
    read_all(topic, Duration::from_secs(2)).into_values().flatten().collect()
}

/// Waits until `topic` holds at least `n` records; returns them.
fn wait_records(topic: &str, n: usize, within: Duration) -> Vec<Rec> {
    let deadline = Instant::now() + within;
    loop {
        let got = all(topic);
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{} of {n} records in {topic} after {within:?}", got.len());
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The `seq` of a click.
fn seq_of(r: &Rec) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
    v["seq"].as_u64().unwrap()
}

/// A distinct click, its value padded to `pad` bytes more.
fn padded(seq: u64, pad: usize) -> Rec {
    let ts = BASE_TS + seq as i64 * 10;
    let value = format!("{{\"id\":\"key-{seq}\",\"ts\":{ts},\"seq\":{seq},\"pad\":\"{}\"}}", "p".repeat(pad));
    let mut r = Rec::new(0, &format!("key-{seq}"), &value, ts);
    r.headers = vec![("trace".into(), format!("t-{seq}").into_bytes())];
    r
}

fn header_text(r: &Rec, name: &str) -> String {
    String::from_utf8_lossy(r.header(name).unwrap_or_else(|| panic!("no {name} header"))).into_owned()
}

/// An output topic made beforehand with `max.message.bytes` 4096 and a
/// dead-letter topic with 8192; among 200 small distinct records, one of
/// ~6 000 bytes and one of ~10 000. The first is dead-lettered whole as
/// `too_large_for_topic`, the second without its value (it exceeds the dead
/// letters' limit too); every other record is delivered once, the daemon
/// serves `/healthz` throughout, and after a SIGKILL and a restart that
/// replays everything from the start (no snapshot was taken), nothing is
/// written twice: the replay decides as the first run did.
#[test]
fn a_record_larger_than_the_output_topic_takes_is_dead_lettered_and_the_daemon_goes_on() {
    let input = unique("size-in");
    create_topic(&input, 1);
    let app = unique("size");
    let (out, dlq) = (format!("{app}.out"), format!("{app}.dlq"));
    create_topic_with(&out, 1, &[("max.message.bytes", "4096")]);
    create_topic_with(&dlq, 1, &[("max.message.bytes", "8192")]);
    let mut env = app_env(&app, &input, "repartition", 1);
    // No snapshot before the kill: the restart judges every record again.
    env.push(("DEDUPD__CHECKPOINT__INTERVAL".into(), "1h".into()));
    env.push(("DEDUPD__CHECKPOINT__INTERVAL_RECORDS".into(), "1000000".into()));
    let mut daemon = Daemon::start("size", &env);
    daemon.wait_ready(Duration::from_secs(60));

    // Small records in one burst too: the producer's batches must fit 4096 bytes.
    let mut records: Vec<Rec> = (0..100).map(|s| padded(s, 100)).collect();
    records.push(padded(100, 6_000));
    records.extend((101..150).map(|s| padded(s, 100)));
    records.push(padded(150, 10_000));
    records.extend((151..202).map(|s| padded(s, 100)));
    produce(&input, &records);

    let got = wait_records(&out, 200, Duration::from_secs(90));
    let dead = wait_records(&dlq, 2, Duration::from_secs(30));
    assert!(daemon.child.try_wait().unwrap().is_none(), "the daemon stopped:\n{}", daemon.log_text());
    assert_eq!(http_get(daemon.admin_port, "/healthz").map(|(c, _)| c), Some(200));
    let want: BTreeSet<u64> = (0..202).filter(|s| *s != 100 && *s != 150).collect();
    let seqs: Vec<u64> = got.iter().map(seq_of).collect();
    assert_eq!(seqs.len(), 200, "each other record once");
    assert_eq!(seqs.iter().copied().collect::<BTreeSet<u64>>(), want);
    assert_eq!(dead.len(), 2, "{:?}", dead.iter().map(|r| r.header("dedupd.reason")).collect::<Vec<_>>());

    let whole = &dead[0];
    assert_eq!(header_text(whole, "dedupd.reason"), "too_large_for_topic");
    let detail = header_text(whole, "dedupd.detail");
    assert!(detail.contains(&format!("output topic {out} takes at most 4096")), "{detail}");
    assert_eq!(whole.value, records[100].value, "the record is dead-lettered whole");
    assert_eq!(whole.key, records[100].key);
    assert_eq!(header_text(whole, "trace"), "t-100");
    assert_eq!(header_text(whole, "dedupd.source"), format!("{input}/0/100"));
    assert!(whole.header("dedupd.value_dropped").is_none());

    let bare = &dead[1];
    assert_eq!(header_text(bare, "dedupd.reason"), "too_large_for_topic");
    assert_eq!(bare.value, None, "too large for the dead letters too: its value is left out");
    assert_eq!(bare.key.as_deref(), Some(&b"key-150"[..]), "the key is kept");
    assert_eq!(header_text(bare, "trace"), "t-150", "its headers are kept");
    assert_eq!(header_text(bare, "dedupd.source"), format!("{input}/0/150"));
    let note = header_text(bare, "dedupd.value_dropped");
    assert!(note.starts_with("value left out: ") && note.contains(&format!("{dlq} takes at most 8192")), "{note}");
    assert_eq!(daemon.metric("dedupd_dead_letters_total{reason=\"too_large_for_topic\"}"), 2);
    let log = daemon.log_text();
    let limits = log.lines().find(|l| l.contains("record-size limits: ")).expect("the limits are logged");
    assert!(limits.contains(&format!("output {out} 4096 bytes (its max.message.bytes 4096)")), "{limits}");
    assert!(limits.contains(&format!("dead letters {dlq} 8192 bytes")), "{limits}");

    // The replay judges all 202 again against the same limits.
    daemon.kill();
    let mut daemon = Daemon::start("size", &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &[padded(202, 100), padded(203, 5_000)]);
    wait_records(&out, 201, Duration::from_secs(90));
    wait_records(&dlq, 3, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    let (got, dead) = (all(&out), all(&dlq));
    let seqs: Vec<u64> = got.iter().map(seq_of).collect();
    assert_eq!(seqs.len(), 201, "nothing delivered twice after the replay");
    assert_eq!(seqs.iter().copied().collect::<BTreeSet<u64>>(), want.into_iter().chain([202]).collect());
    let dead_keys: Vec<Vec<u8>> = dead.iter().map(|r| r.key.clone().unwrap_or_default()).collect();
    assert_eq!(dead_keys, [&b"key-100"[..], b"key-150", b"key-203"], "nothing dead-lettered twice");
    assert!(daemon.child.try_wait().unwrap().is_none(), "the daemon stopped:\n{}", daemon.log_text());
    assert_eq!(http_get(daemon.admin_port, "/healthz").map(|(c, _)| c), Some(200));
    daemon.terminate(Duration::from_secs(30));
}

/// Sets `max.message.bytes` of `topic` (IncrementalAlterConfigs, through
/// Python's confluent-kafka: rdkafka has only AlterConfigs, which Nisshi
/// does not serve).
fn lower_limit(topic: &str, bytes: u32) {
    let script = format!(
        "from confluent_kafka.admin import AdminClient, ConfigResource, ConfigEntry, AlterConfigOpType as Op\n\
         a = AdminClient({{'bootstrap.servers': '{}'}})\n\
         e = ConfigEntry('max.message.bytes', '{bytes}', incremental_operation=Op.SET)\n\
         r = ConfigResource(ConfigResource.Type.TOPIC, '{topic}', incremental_configs=[e])\n\
         [f.result(timeout=10) for f in a.incremental_alter_configs([r]).values()]\n",
        broker()
    );
    let out = std::process::Command::new("python3").args(["-c", &script]).output().expect("python3");
    assert!(out.status.success(), "altering {topic}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The output topic's limit lowered to 4096 after start-up (the daemon took
/// the broker's default): the broker refuses a larger record the record path
/// let through, and the daemon stops with an error naming the topic and the
/// limit it read; restarted, it reads the new limit and dead-letters that
/// record, and delivers every other record once.
#[test]
fn a_limit_lowered_after_start_up_stops_the_daemon_with_a_clear_error_then_a_restart_dead_letters() {
    let input = unique("size-low-in");
    create_topic(&input, 1);
    let app = unique("size-low");
    let (out, dlq) = (format!("{app}.out"), format!("{app}.dlq"));
    create_topic(&out, 1);
    let env = app_env(&app, &input, "repartition", 1);
    let mut daemon = Daemon::start("size-low", &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &(0..20).map(|s| padded(s, 100)).collect::<Vec<_>>());
    wait_records(&out, 20, Duration::from_secs(60));

    lower_limit(&out, 4096);
    produce(&input, &[padded(20, 6_000)]);
    let status = daemon.wait_exit(Duration::from_secs(60), "the daemon goes on writing what the broker refuses");
    assert!(!status.success());
    let log = daemon.log_text();
    let line =
        log.lines().find(|l| l.contains(&format!("delivery to {out}/0 failed"))).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("its limit read at start-up was 1048588 bytes"), "{line}");
    // The refused record's size, read from its delivery report: its 6000-byte value and a little.
    let about: u64 = line.split("a record of about ").nth(1).and_then(|r| r.split(' ').next()?.parse().ok()).unwrap();
    assert!((6_000..7_000).contains(&about), "{line}");
    assert!(line.contains("max.message.bytes"), "{line}");

    let mut daemon = Daemon::start("size-low", &env);
    daemon.wait_ready(Duration::from_secs(60));
    assert!(daemon.log_text().contains(&format!("output {out} 4096 bytes")), "{}", daemon.log_text());
    produce(&input, &(21..40).map(|s| padded(s, 100)).collect::<Vec<_>>());
    wait_records(&out, 39, Duration::from_secs(90));
    let dead = wait_records(&dlq, 1, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    let seqs: Vec<u64> = all(&out).iter().map(seq_of).collect();
    assert_eq!(seqs.len(), 39, "each other record once");
    assert_eq!(seqs.iter().copied().collect::<BTreeSet<u64>>(), (0..40).filter(|s| *s != 20).collect());
    assert_eq!(all(&dlq).len(), 1);
    assert_eq!(header_text(&dead[0], "dedupd.reason"), "too_large_for_topic");
    assert_eq!(dead[0].key.as_deref(), Some(&b"key-20"[..]));
    assert_eq!(http_get(daemon.admin_port, "/healthz").map(|(c, _)| c), Some(200));
    daemon.terminate(Duration::from_secs(30));
}
