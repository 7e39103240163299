//! `input.start` on the real broker: where a new application starts
//! reading its input. `latest` judges only what is written after the
//! daemon starts, `earliest` (the default) the retained history too, in
//! each slicing mode; a restart resumes from the positions kept (the
//! router's committed offsets, the slices' snapshots) whatever
//! `input.start` says.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;

const PARTITIONS: u32 = 2;

/// `count` clicks with ids `{prefix}-0…`, each its own key, partitioned by
/// key, event times from `ts` on.
fn clicks(prefix: &str, count: u64, ts: i64) -> Vec<Rec> {
    (0..count)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            click(i, &id, ts + i as i64 * 10, partition_of(&id, PARTITIONS))
        })
        .collect()
}

fn ids(records: &[Rec]) -> BTreeSet<String> {
    records.iter().map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap()).collect()
}

/// The keys of the records in `topic`, all partitions.
fn delivered(topic: &str) -> BTreeSet<String> {
    ids(&read_all(topic, Duration::from_secs(2)).into_values().flatten().collect::<Vec<_>>())
}

/// Waits until `topic` holds every key of `want`, then until nothing more
/// arrives, and returns what it holds.
fn wait_delivered(topic: &str, want: &BTreeSet<String>, daemon: &mut Daemon) -> BTreeSet<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let got = delivered(topic);
        if got.is_superset(want) {
            // The idle flush has released everything the daemon read: what
            // comes later than this would be a record it should not judge.
            std::thread::sleep(Duration::from_secs(4));
            return delivered(topic);
        }
        if let Some(status) = daemon.child.try_wait().unwrap() {
            panic!("dedupd exited ({status}):\n{}", daemon.log_text());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{topic}: {} of {} keys delivered after 90 s:\n{}",
            got.intersection(want).count(),
            want.len(),
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn env(app: &str, input: &str, mode: &str, start: Option<&str>) -> Vec<(String, String)> {
    // Shared mode judges every input partition in one slice.
    let slices = if mode == "shared" { 1 } else { PARTITIONS };
    let mut env = app_env(app, input, mode, slices);
    if let Some(start) = start {
        env.push(("DEDUPD__INPUT__START".into(), start.into()));
    }
    env
}

/// Starts `dedupd run` and waits until it reads: its slices are restored and
/// (repartition mode) its router has its partitions. A second more lets the
/// consumers look up where they start before the test writes again.
fn started(name: &str, env: &[(String, String)], router: Option<&str>) -> Daemon {
    let mut d = Daemon::start(name, env);
    if let Some(group) = router {
        d.wait_joined("router", group, Duration::from_secs(60));
    }
    d.wait_ready(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    d
}

/// Records written before a `latest` application first starts are not
/// judged; those written after are, and so are those written while it was
/// stopped (its positions are kept). An `earliest` application (no
/// `input.start` set: the default) started at the same moment judges all.
fn latest_skips_the_history(mode: &str) {
    let input = unique(&format!("clicks-start-{mode}"));
    create_topic(&input, PARTITIONS as i32);
    let old = clicks("old", 200, BASE_TS);
    produce(&input, &old);

    let latest_app = unique("latest");
    let latest_env = env(&latest_app, &input, mode, Some("latest"));
    let earliest_app = unique("earliest");
    let router = |app: &str| (mode != "input-partitions").then(|| format!("{app}.router"));
    let mut latest = started("latest", &latest_env, router(&latest_app).as_deref());
    let mut earliest = started("earliest", &env(&earliest_app, &input, mode, None), router(&earliest_app).as_deref());

    let new = clicks("new", 200, BASE_TS + 10_000);
    produce(&input, &new);
    let got = wait_delivered(&format!("{latest_app}.out"), &ids(&new), &mut latest);
    assert_eq!(got, ids(&new), "input.start = latest: only the records written after the start");
    let all: BTreeSet<String> = ids(&old).union(&ids(&new)).cloned().collect();
    let got = wait_delivered(&format!("{earliest_app}.out"), &all, &mut earliest);
    assert_eq!(got, all, "input.start = earliest: every retained record");

    // Stopped and started again: the kept positions win over input.start.
    assert!(latest.terminate(Duration::from_secs(30)).success(), "{}", latest.log_text());
    let during = clicks("during", 200, BASE_TS + 20_000);
    produce(&input, &during);
    let mut again = started("latest-again", &latest_env, router(&latest_app).as_deref());
    let want: BTreeSet<String> = ids(&new).union(&ids(&during)).cloned().collect();
    let got = wait_delivered(&format!("{latest_app}.out"), &want, &mut again);
    assert_eq!(got, want, "a restart resumes where the first run stopped");

    for d in [&mut again, &mut earliest] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
        d.assert_clean_log();
    }
    latest.assert_clean_log();
}

#[test]
fn latest_skips_the_history_in_repartition_mode() {
    latest_skips_the_history("repartition");
}

#[test]
fn latest_skips_the_history_in_shared_mode() {
    latest_skips_the_history("shared");
}

#[test]
fn latest_skips_the_history_in_input_partitions_mode() {
    latest_skips_the_history("input-partitions");
}

/// A librdkafka `auto.offset.reset` that contradicts `input.start` stops
/// the daemon at start-up, naming both.
#[test]
fn a_contradicting_auto_offset_reset_stops_the_start() {
    let input = unique("clicks-start-reset");
    let mut env = env(&unique("reset"), &input, "repartition", Some("latest"));
    env.push(("DEDUPD__KAFKA__AUTO_OFFSET_RESET".into(), "earliest".into()));
    let mut d = Daemon::start("reset", &env);
    let status = d.wait_exit(Duration::from_secs(30), "dedupd should refuse the settings");
    assert!(!status.success());
    let log = d.log_text();
    assert!(
        log.contains("invalid setting kafka.auto.offset.reset = earliest: contradicts input.start = latest"),
        "{log}"
    );
}

/// Writes `committed` in one transaction that commits, then `aborted` in
/// one that aborts, with confluent-kafka's transactional producer: each
/// partition written ends with the abort's marker, behind aborted records.
fn produce_transactions(topic: &str, committed: &[Rec], aborted: &[Rec]) {
    let list = |records: &[Rec]| {
        records
            .iter()
            .map(|r| {
                format!(
                    "({}, {:?}, {:?}, {})",
                    r.partition,
                    String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()),
                    r.value_str(),
                    r.timestamp.unwrap_or(0)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let script = format!(
        "from confluent_kafka import Producer\n\
         p = Producer({{'bootstrap.servers': '{broker}', 'transactional.id': '{topic}-txn'}})\n\
         p.init_transactions(30)\n\
         for records, commit in (([{committed}], True), ([{aborted}], False)):\n\
         \x20   p.begin_transaction()\n\
         \x20   for partition, key, value, ts in records:\n\
         \x20       p.produce('{topic}', value=value, key=key, partition=partition, timestamp=ts)\n\
         \x20   p.flush(30)\n\
         \x20   (p.commit_transaction if commit else p.abort_transaction)(30)\n",
        broker = broker(),
        committed = list(committed),
        aborted = list(aborted),
    );
    let out = std::process::Command::new("python3").args(["-c", &script]).output().expect("python3");
    assert!(
        out.status.success(),
        "transactions to {topic}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An input whose partitions end with a committed transaction and then an
/// aborted one (their last offsets are an abort marker behind aborted
/// records): a `latest` application in input-partitions mode, whose restore
/// reads to the end of each partition to start there, becomes ready and
/// judges exactly the records written after it started.
///
/// Blocked: the test broker, Nisshi 0.8.1, refuses transactional producers
/// (`init_transactions` fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
/// docs/dev/broker.md, finding 11). Run it against a broker with
/// transactions: `cargo test --test input_start -- --ignored transaction_markers`.
#[test]
#[ignore = "blocked: the test broker (Nisshi 0.8.1) refuses transactional producers (docs/dev/broker.md, finding 11)"]
fn latest_reaches_the_end_of_partitions_that_end_with_transaction_markers() {
    let input = unique("clicks-start-txn");
    create_topic(&input, PARTITIONS as i32);
    produce_transactions(&input, &clicks("committed", 20, BASE_TS), &clicks("aborted", 20, BASE_TS + 1_000));
    let app = unique("latest-txn");
    let mut daemon = started("latest-txn", &env(&app, &input, "input-partitions", Some("latest")), None);
    let new = clicks("new", 50, BASE_TS + 10_000);
    produce(&input, &new);
    let got = wait_delivered(&format!("{app}.out"), &ids(&new), &mut daemon);
    assert_eq!(got, ids(&new), "input.start = latest: only the records written after the start");
    assert!(daemon.terminate(Duration::from_secs(30)).success(), "{}", daemon.log_text());
    daemon.assert_clean_log();
}
