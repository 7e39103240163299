//! Output belongs to its application (docs/design.md, invariant 8).
//!
//! Two applications left on the default output settings write topics of
//! their own (`<app.id>.distinct`); every record a slice writes names its
//! application (`dedupd.app`), and restore takes its replay bounds only
//! from its own application's records, reading past other applications'
//! — so two applications may write one output topic on purpose, through
//! SIGKILLs, and neither takes the other's positions for its own.
//!
//! Needs the local broker (`scripts/broker.sh install`).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::*;

const SLICES: u32 = 2;

/// `app_env` without the topics it names: the output, dead-letter and
/// checkpoint topics are left to their defaults.
fn default_topics_env(app: &str, input: &str, mode: &str) -> Vec<(String, String)> {
    let named = ["DEDUPD__OUTPUT__TOPIC", "DEDUPD__OUTPUT__DEAD_LETTER_TOPIC", "DEDUPD__CHECKPOINT__TOPIC"];
    app_env(app, input, mode, SLICES).into_iter().filter(|(k, _)| !named.contains(&k.as_str())).collect()
}

/// Input record `seq` of application `app`: with `copies`, records come in
/// pairs (key `{app}-{seq/2}`, the second 10 ms after the first: a
/// duplicate); else every record is distinct. The partition is the key's.
fn record(app: &str, seq: u64, copies: bool) -> Rec {
    let id = format!("{app}-{}", if copies { seq / 2 } else { seq });
    click(seq, &id, BASE_TS + seq as i64 * 10, partition_of(&id, SLICES))
}

fn records(app: &str, seqs: std::ops::Range<u64>, copies: bool) -> Vec<Rec> {
    seqs.map(|s| record(app, s, copies)).collect()
}

/// How many times each key of `app` is in `topic` (records naming `app`
/// in `dedupd.app`); panics on a record that names no application.
fn delivered(topic: &str, app: &str) -> BTreeMap<String, usize> {
    let mut keys = BTreeMap::new();
    for r in read_all(topic, Duration::from_secs(3)).into_values().flatten() {
        let named = r.header("dedupd.app").unwrap_or_else(|| panic!("a record of {topic} has no dedupd.app: {r:?}"));
        if named == app.as_bytes() {
            *keys.entry(String::from_utf8(r.key.clone().unwrap()).unwrap()).or_insert(0) += 1;
        }
    }
    keys
}

/// What `delivered` should be: every key once.
fn each_once(app: &str, distinct: u64) -> BTreeMap<String, usize> {
    (0..distinct).map(|n| (format!("{app}-{n}"), 1)).collect()
}

/// How a delivery differs from every key once: missing and repeated keys.
fn differences(got: &BTreeMap<String, usize>, want: &BTreeMap<String, usize>) -> String {
    let missing: Vec<&String> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let wrong: Vec<(&String, &usize)> = got.iter().filter(|(k, n)| want.get(*k) != Some(n)).collect();
    format!(
        "{} of {} keys missing (first {:?}); wrong counts {:?}",
        missing.len(),
        want.len(),
        &missing[..missing.len().min(10)],
        &wrong[..wrong.len().min(10)]
    )
}

/// Two applications with other app ids and input topics, both on the
/// default output settings: the first writes 1 000 records, then the
/// second starts with 2 000 of its own and delivers all 2 000, each once,
/// to a topic of its own; every output record names its application.
#[test]
fn two_applications_on_default_output_settings_keep_their_outputs_apart() {
    let (first, second) = (unique("own-a"), unique("own-b"));
    let (in_a, in_b) = (unique("own-a-in"), unique("own-b-in"));
    create_topic(&in_a, SLICES as i32);
    create_topic(&in_b, SLICES as i32);
    produce(&in_a, &records(&first, 0..1000, false));
    let mut a = Daemon::start("own-a", &default_topics_env(&first, &in_a, "repartition"));
    assert_eq!(count_records(&format!("{first}.distinct"), 1000, Duration::from_secs(90)), 1000);

    produce(&in_b, &records(&second, 0..2000, false));
    let mut b = Daemon::start("own-b", &default_topics_env(&second, &in_b, "repartition"));
    wait_processed(&[&b], 2000, Duration::from_secs(90));
    assert_eq!(count_records(&format!("{second}.distinct"), 2000, Duration::from_secs(60)), 2000);
    std::thread::sleep(Duration::from_secs(1));

    let got = delivered(&format!("{second}.distinct"), &second);
    assert_eq!(got, each_once(&second, 2000), "{}", differences(&got, &each_once(&second, 2000)));
    let got = delivered(&format!("{first}.distinct"), &first);
    assert_eq!(got, each_once(&first, 1000), "{}", differences(&got, &each_once(&first, 1000)));
    for d in [&mut a, &mut b] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
        d.assert_clean_log();
    }
}

/// Two applications write one output topic on purpose, each its own
/// input (2 000 distinct keys, each twice). The first has written 1 000
/// distinct records there before the second starts; then both are killed
/// with SIGKILL five times while their input arrives. Each delivers every
/// one of its keys exactly once: a restore reads past the other's records
/// and never takes their positions for its own.
#[test]
fn two_applications_writing_one_output_topic_deliver_all_of_theirs_through_sigkills() {
    let shared = unique("own-shared");
    let apps = [unique("own-sa"), unique("own-sb")];
    let inputs = [unique("own-sa-in"), unique("own-sb-in")];
    for input in &inputs {
        create_topic(input, SLICES as i32);
    }
    let env = |i: usize| {
        let mut env = default_topics_env(&apps[i], &inputs[i], "input-partitions");
        env.push(("DEDUPD__OUTPUT__TOPIC".into(), shared.clone()));
        env
    };
    // The first application's first 1 000 distinct records are in the shared topic.
    produce(&inputs[0], &records(&apps[0], 0..2000, true));
    let mut first = Daemon::start("own-sa", &env(0));
    wait_processed(&[&first], 2000, Duration::from_secs(90));
    assert_eq!(count_records(&shared, 1000, Duration::from_secs(60)), 1000);
    first.kill();

    // The rest of both inputs arrives in batches while both are killed five times.
    let produced = Arc::new(AtomicU64::new(0));
    let feeds: Vec<_> = [(0usize, 2000..4000u64), (1, 0..4000)]
        .into_iter()
        .map(|(i, seqs)| {
            let (app, input, produced) = (apps[i].clone(), inputs[i].clone(), produced.clone());
            std::thread::spawn(move || {
                for batch in records(&app, seqs, true).chunks(100) {
                    produce(&input, batch);
                    produced.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(700));
                }
            })
        })
        .collect();
    let storms: Vec<_> = (0..2)
        .map(|i| {
            let (env, produced) = (env(i), produced.clone());
            let name = format!("own-s{}", ["a", "b"][i]);
            std::thread::spawn(move || kill_storm(&name, &env, 5, Duration::from_millis(200), &produced))
        })
        .collect();
    for feed in feeds {
        feed.join().unwrap();
    }
    let mut daemons: Vec<Daemon> = storms.into_iter().map(|s| s.join().unwrap().0).collect();
    for d in &daemons {
        wait_processed(&[d], 4000, Duration::from_secs(120));
    }
    std::thread::sleep(Duration::from_secs(1));

    let want: Vec<BTreeMap<String, usize>> = apps.iter().map(|app| each_once(app, 2000)).collect();
    let got: Vec<BTreeMap<String, usize>> = apps.iter().map(|app| delivered(&shared, app)).collect();
    for i in 0..2 {
        assert_eq!(got[i], want[i], "{}: {}", apps[i], differences(&got[i], &want[i]));
    }
    let total: usize = read_all(&shared, Duration::from_secs(2)).values().map(Vec::len).sum();
    assert_eq!(total, 4000, "the shared topic holds both applications' records and nothing else");
    for d in &mut daemons {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
}
