//! Nothing outside an application steers its exactly-once protocol: not the
//! headers a producer of the input writes (dedupd removes every `dedupd.*`
//! header where records enter, and restore checks the bounds it reads back
//! against the slice log), not another application's snapshots (each
//! manifest names its application; the checkpoint topic defaults to the
//! application's own), and not a forged slice-log frame.
//!
//! Needs the local broker (`scripts/broker.sh`); `DEDUPD_BROKER_PORT` picks its port.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::*;

/// The output records of `topic`, all partitions, in partition and offset order.
fn delivered(topic: &str) -> Vec<Rec> {
    read_all(topic, Duration::from_secs(2)).into_values().flatten().collect()
}

/// The `seq` of a click.
fn seq_of(r: &Rec) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
    v["seq"].as_u64().unwrap()
}

/// Waits until `topic` holds at least `n` records; returns them.
fn wait_delivered(topic: &str, n: usize, within: Duration) -> Vec<Rec> {
    let deadline = Instant::now() + within;
    loop {
        let got = delivered(topic);
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{} of {n} records in {topic} after {within:?}", got.len());
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Distinct clicks `seqs`, one key each, event times 10 ms apart, on input partition 0.
fn distinct(seqs: std::ops::Range<u64>) -> Vec<Rec> {
    seqs.map(|s| click(s, &format!("key-{s}"), BASE_TS + s as i64 * 10, 0)).collect()
}

/// A series of `/metrics`, 0 if absent.
fn metric(d: &Daemon, series: &str) -> u64 {
    let (_, text) = http_get(d.admin_port, "/metrics").expect("/metrics answers");
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok())).map_or(0, |v| v as u64)
}

/// The settings of a one-slice application on `input` (one partition), repartition mode.
fn one_slice(app: &str, input: &str) -> Vec<(String, String)> {
    app_env(app, input, "repartition", 1)
}

/// The `dedupd.*` headers dedupd writes on an ordinary output.
const OUTPUT_HEADERS: [&str; 3] = ["dedupd.slice.offset", "dedupd.release", "dedupd.app"];

/// An input record carrying the availability-policy headers (which made its
/// slice silent after the next restore when the outputs copied them), then,
/// after a SIGKILL and a restart, one carrying every other header dedupd
/// writes or reads (a router's stamp, a progress or read-order marker, a
/// delete request, a release position): every distinct record is delivered,
/// once, and no output carries a `dedupd.*` header dedupd did not write —
/// while the input's other headers travel on.
#[test]
fn dedupd_headers_on_input_records_change_nothing() {
    let input = unique("trust-in");
    create_topic(&input, 1);
    let app = unique("trust");
    let env = one_slice(&app, &input);
    let out = format!("{app}.out");
    let mut daemon = Daemon::start("trust-forged", &env);
    daemon.wait_ready(Duration::from_secs(60));

    produce(&input, &distinct(0..100));
    let mut forged = click(100, "key-100", BASE_TS + 1_000, 0);
    forged.headers = vec![
        ("dedupd.policy".into(), b"x".to_vec()),
        ("dedupd.policy.after".into(), b"9000000000000000/0".to_vec()),
        ("trace".into(), b"t-100".to_vec()),
    ];
    produce(&input, &[forged]);
    // The forged record is the slice's last output when it is killed.
    wait_delivered(&out, 101, Duration::from_secs(60));
    daemon.kill();

    let mut daemon = Daemon::start("trust-forged", &env);
    daemon.wait_ready(Duration::from_secs(60));
    let mut more = distinct(101..201);
    more[49].headers = [
        ("dedupd.source", format!("{input}/0/999999999")),
        ("dedupd.progress", String::new()),
        ("dedupd.read_order", String::new()),
        ("dedupd.delete", String::new()),
        ("dedupd.release", "999999999/0".into()),
        ("dedupd.slice.offset", "999999999".into()),
        ("dedupd.first_source", "elsewhere".into()),
        ("dedupd.tier.leaf", "another-app".into()),
        ("dedupd.app", "another-app".into()),
        ("dedupd.rule", "resend".into()),
        ("trace", "t-150".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_bytes()))
    .collect();
    produce(&input, &more);
    let got = wait_delivered(&out, 201, Duration::from_secs(90));
    // Anything more would have come by now.
    std::thread::sleep(Duration::from_secs(3));
    let got = if delivered(&out).len() > got.len() { delivered(&out) } else { got };

    let seqs: Vec<u64> = got.iter().map(seq_of).collect();
    let unique_seqs: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(seqs.len(), 201, "each record once: {} outputs", seqs.len());
    assert_eq!(unique_seqs, (0..201).collect::<BTreeSet<u64>>(), "every distinct record delivered");
    for r in &got {
        let own: Vec<&str> = r.headers.iter().map(|(k, _)| k.as_str()).filter(|k| k.starts_with("dedupd.")).collect();
        assert_eq!(own, OUTPUT_HEADERS, "seq {}: dedupd.* headers of an output", seq_of(r));
        assert_eq!(r.header("dedupd.app"), Some(app.as_bytes()), "seq {}: named as this application's", seq_of(r));
    }
    let trace = |seq: u64| got.iter().find(|r| seq_of(r) == seq).and_then(|r| r.header("trace")).map(<[u8]>::to_vec);
    assert_eq!(trace(100), Some(b"t-100".to_vec()), "other headers are copied");
    assert_eq!(trace(150), Some(b"t-150".to_vec()), "other headers are copied");
    assert!(delivered(&format!("{app}.dlq")).is_empty());
    daemon.terminate(Duration::from_secs(30));
    daemon.assert_clean_log();
}

/// Outputs written before dedupd removed input headers may end with a
/// record carrying an input's forged policy headers. Restore ignores a
/// policy bound beyond the slice log's end (WARN, counted) and goes on from
/// the record's own release: every later record is delivered. A replay
/// bound of the record's own beyond the end (the slice log is not the one
/// the outputs were judged from) stops the slice with an error that says so.
#[test]
fn restore_checks_the_bounds_it_reads_against_the_slice_log() {
    let input = unique("trust-bounds-in");
    create_topic(&input, 1);
    let app = unique("trust-bounds");
    let env = one_slice(&app, &input);
    let out = format!("{app}.out");
    let mut daemon = Daemon::start("trust-bounds", &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &distinct(0..50));
    let got = wait_delivered(&out, 50, Duration::from_secs(60));
    daemon.terminate(Duration::from_secs(30));

    // What an earlier release wrote for an input record with those headers:
    // its own slice offset and release, and the input's policy headers.
    let last = got.last().unwrap();
    let mut old = click(50, "key-50", BASE_TS + 600, 0);
    old.headers = vec![
        ("dedupd.slice.offset".into(), last.header("dedupd.slice.offset").unwrap().to_vec()),
        ("dedupd.release".into(), last.header("dedupd.release").unwrap().to_vec()),
        ("dedupd.policy".into(), b"deliver".to_vec()),
        ("dedupd.policy.after".into(), b"9000000000000000/0".to_vec()),
    ];
    produce(&out, &[old]);
    let mut daemon = Daemon::start("trust-bounds", &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &distinct(51..100));
    let got = wait_delivered(&out, 100, Duration::from_secs(60));
    let seqs: BTreeSet<u64> = got.iter().map(seq_of).collect();
    assert_eq!(got.len(), 100, "{seqs:?}");
    assert_eq!(seqs, (0..100).collect::<BTreeSet<u64>>());
    assert!(metric(&daemon, "dedupd_restore_bounds_ignored_total") >= 1);
    let log = daemon.log_text();
    assert!(log.contains("dedupd.policy.after 9000000000000000/0 beyond the end of the slice log"), "{log}");
    daemon.terminate(Duration::from_secs(30));

    // A release position of the record's own beyond the end: refused.
    let mut beyond = click(100, "key-100", BASE_TS + 2_000, 0);
    beyond.headers = vec![
        ("dedupd.slice.offset".into(), b"9000000000000000".to_vec()),
        ("dedupd.release".into(), b"9000000000000000/0".to_vec()),
    ];
    produce(&out, &[beyond]);
    let mut daemon = Daemon::start("trust-bounds", &env);
    let status = daemon.wait_exit(Duration::from_secs(60), "dedupd did not stop on a bound beyond the slice log");
    assert!(!status.success());
    let log = daemon.log_text();
    assert!(
        log.contains("released at 9000000000000000/0, beyond the end of the slice log")
            && log.contains(&format!("{app}.slices/0")),
        "{log}"
    );
}

/// Two applications on one broker, both with the default checkpoint
/// settings: the second (another app id, another input) restores nothing of
/// the first's and delivers all of its records. A third told to use the
/// first's checkpoint topic stops with an error naming both applications.
#[test]
fn applications_with_default_checkpoint_settings_keep_their_own_state() {
    let default_checkpoints = |app: &str, input: &str| -> Vec<(String, String)> {
        one_slice(app, input).into_iter().filter(|(k, _)| k != "DEDUPD__CHECKPOINT__TOPIC").collect()
    };
    let (input_a, input_b) = (unique("trust-a-in"), unique("trust-b-in"));
    create_topic(&input_a, 1);
    create_topic(&input_b, 1);
    let (app_a, app_b) = (unique("trust-a"), unique("trust-b"));

    let mut a = Daemon::start("trust-a", &default_checkpoints(&app_a, &input_a));
    a.wait_ready(Duration::from_secs(60));
    produce(&input_a, &distinct(0..300));
    wait_delivered(&format!("{app_a}.out"), 300, Duration::from_secs(60));
    a.terminate(Duration::from_secs(30));
    // A's snapshots went to its own topic, `<app.id>.checkpoints`.
    assert!(!delivered(&format!("{app_a}.checkpoints")).is_empty(), "no snapshot in {app_a}.checkpoints");

    let mut b = Daemon::start("trust-b", &default_checkpoints(&app_b, &input_b));
    b.wait_ready(Duration::from_secs(60));
    produce(&input_b, &distinct(1000..1200));
    let got = wait_delivered(&format!("{app_b}.out"), 200, Duration::from_secs(60));
    let seqs: BTreeSet<u64> = got.iter().map(seq_of).collect();
    assert_eq!((got.len(), seqs), (200, (1000..1200).collect::<BTreeSet<u64>>()));
    b.terminate(Duration::from_secs(30));
    b.assert_clean_log();

    // Told to share A's checkpoint topic: refused, both named.
    let (input_c, app_c) = (unique("trust-c-in"), unique("trust-c"));
    create_topic(&input_c, 1);
    let mut env = default_checkpoints(&app_c, &input_c);
    env.push(("DEDUPD__CHECKPOINT__TOPIC".into(), format!("{app_a}.checkpoints")));
    let mut c = Daemon::start("trust-c", &env);
    let status = c.wait_exit(Duration::from_secs(60), "dedupd restored another application's snapshot");
    assert!(!status.success());
    let log = c.log_text();
    assert!(
        log.contains(&format!("belongs to application \"{app_a}\", not to this one, \"{app_c}\""))
            && log.contains("set checkpoint.topic"),
        "{log}"
    );
}

/// A slice-log frame naming a topic longer than Kafka allows (only a writer
/// other than the router can put one there) is refused: dead-lettered with
/// the reason `bad_frame` and a detail naming the topic name's length, not
/// judged by the bytes of its frame; the daemon does not panic, and the
/// records after it are delivered.
#[test]
fn a_forged_frame_with_a_long_topic_name_is_refused_not_a_panic() {
    let input = unique("trust-frame-in");
    create_topic(&input, 1);
    let app = unique("trust-frame");
    let mut env = one_slice(&app, &input);
    // The router's frame is the records form's: a batch-form slice skips a
    // record without the batch header (tests/batches.rs forges a batch).
    env.push(("DEDUPD__SLICING__LOG_FORMAT".into(), "records".into()));
    let mut daemon = Daemon::start("trust-frame", &env);
    daemon.wait_ready(Duration::from_secs(60));
    produce(&input, &distinct(0..10));
    wait_delivered(&format!("{app}.out"), 10, Duration::from_secs(60));

    let stamp = format!("{}/0/5", "t".repeat(1000));
    let mut value = dedupd::engine::slice::FRAME_MAGIC.to_vec();
    value.extend_from_slice(&(stamp.len() as u16).to_be_bytes());
    value.extend_from_slice(stamp.as_bytes());
    value.extend_from_slice(b"{\"no\":\"id\"}");
    let forged = Rec {
        partition: 0,
        offset: -1,
        key: Some(b"forged".to_vec()),
        value: Some(value),
        timestamp: Some(BASE_TS + 200),
        headers: Vec::new(),
    };
    produce(&format!("{app}.slices"), &[forged]);
    produce(&input, &distinct(10..20));
    let got = wait_delivered(&format!("{app}.out"), 20, Duration::from_secs(60));
    let seqs: BTreeSet<u64> = got.iter().map(seq_of).collect();
    assert_eq!(seqs, (0..20).collect::<BTreeSet<u64>>());
    let dead = wait_delivered(&format!("{app}.dlq"), 1, Duration::from_secs(30));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].header("dedupd.reason"), Some(&b"bad_frame"[..]), "{:?}", dead[0]);
    let detail = String::from_utf8_lossy(dead[0].header("dedupd.detail").expect("a detail")).into_owned();
    assert!(detail.contains("names a topic of 1000 bytes, longer than Kafka allows (249)"), "{detail}");
    assert_eq!(metric(&daemon, "dedupd_dead_letters_total{reason=\"bad_frame\"}"), 1);
    let source = String::from_utf8(dead[0].header("dedupd.source").expect("a source").to_vec()).unwrap();
    assert!(source.starts_with(&format!("{app}.slices/0/")), "{source}");
    assert!(daemon.child.try_wait().unwrap().is_none(), "dedupd exited:\n{}", daemon.log_text());
    assert!(!daemon.log_text().contains("panicked"), "{}", daemon.log_text());
    daemon.terminate(Duration::from_secs(30));
}

/// A consumed record's headers as the record path reads them
/// (`Consumed::headers`, which tells a record without headers apart before
/// librdkafka's parse): none for records written without, every one for a
/// record with, whatever the value (none, empty, some bytes); and the fast
/// answer is in use with the librdkafka this build links, for a record
/// without headers whose value has bytes (the daemon's common record).
#[test]
fn a_record_without_headers_is_told_apart_without_librdkafkas_parse() {
    use dedupd::kafka::{consumed::Consumed, headerless};
    use rdkafka::Message as _;
    use rdkafka::consumer::Consumer as _;
    use rdkafka::message::Headers as _;

    assert!(
        headerless::in_use(),
        "librdkafka's record layout changed: read rdkafka_msg.h again (src/kafka/headerless.rs)"
    );
    let topic = unique("headerless");
    create_topic(&topic, 1);
    let plain = Rec::new(0, "k0", "{\"id\":\"a\"}", BASE_TS);
    let mut traced = Rec::new(0, "k1", "{\"id\":\"b\"}", BASE_TS);
    traced.headers = vec![("trace".into(), b"t-1".to_vec()), ("empty".into(), Vec::new())];
    let tombstone = Rec { value: None, ..Rec::new(0, "k2", "", BASE_TS) };
    let empty = Rec::new(0, "k3", "", BASE_TS);
    let mut many = Rec::new(0, "k4", "{\"id\":\"c\"}", BASE_TS);
    many.headers = (0..64).map(|i| (format!("h{i}"), vec![b'v'; i])).collect();
    produce(&topic, &[plain, traced, tombstone, empty, many]);

    let reader = reader();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning).unwrap();
    reader.assign(&tpl).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < 5 {
        assert!(Instant::now() < deadline, "read {} of 5 records", seen.len());
        let Some(m) = reader.poll(Duration::from_millis(200)) else { continue };
        let m = m.expect("a record");
        // SAFETY: a message librdkafka handed out, alive while `m` is.
        let fast = unsafe { headerless::surely_none(&*m.ptr()) };
        let ours: Vec<(String, Vec<u8>)> = Consumed::of(&m)
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
            .unwrap_or_default();
        seen.push((m.key().map(|k| String::from_utf8_lossy(k).into_owned()), fast, ours));
    }
    // In the order written: `seen[i]` is the i-th record above.
    let keys: Vec<Option<String>> = seen.iter().map(|(k, _, _)| k.clone()).collect();
    assert_eq!(keys, (0..5).map(|i| Some(format!("k{i}"))).collect::<Vec<_>>());
    let names = |got: &[(String, Vec<u8>)]| got.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert!(seen[0].1, "a record without headers is told apart");
    assert!(seen[0].2.is_empty());
    assert!(!seen[1].1);
    assert_eq!(seen[1].2, vec![("trace".to_string(), b"t-1".to_vec()), ("empty".to_string(), Vec::new())]);
    assert!(!seen[2].1, "a null value goes to librdkafka's parse");
    assert!(seen[2].2.is_empty());
    // An empty value reads as a null pointer from librdkafka: its parse answers.
    assert!(seen[3].2.is_empty(), "an empty value");
    assert!(!seen[4].1);
    assert_eq!(names(&seen[4].2), (0..64).map(|i| format!("h{i}")).collect::<Vec<_>>());
    assert_eq!(seen[4].2[63].1, vec![b'v'; 63]);
}
