//! `availability.policy` on the real broker (docs/availability.md): a second
//! member joins a group whose filter is large (tens of millions of keys),
//! so the slices it takes over are restored slowly while their records keep
//! arriving; then it is killed (SIGKILL) and restarted, so the slices are
//! restored again, from snapshots taken before the policy decided, through
//! the decisions logged in `<app>.flushes`. Under each policy:
//!
//! - `wait`: the output equals an uninterrupted run's;
//! - `deliver`: every record of the uninterrupted output is in the output,
//!   but for the later copies of keys the policy decided (a delivery the
//!   policy forced changes what is in the window: the design's "knock-on"
//!   errors); the records beyond it carry `dedupd.policy = deliver`;
//! - `drop`: the same with the output and the policy's records on the
//!   duplicates topic together; the output carries no policy record;
//!
//! and for every policy no slice record is sent twice (across the output
//! and duplicates topics) and release positions increase per partition:
//! the kill and restart replayed the logged decisions exactly.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dedupd::engine::ReleasePos;
use support::*;

const PARTITIONS: u32 = 4;
/// 20 M keys: ~230 MB of cells over 4 slices, a restore of ~57 MB per slice.
const EXPECTED_KEYS: &str = "20000000";

fn env(app: &str, input: &str, policy: &str) -> Vec<(String, String)> {
    let mut env = app_env(app, input, "input-partitions", PARTITIONS);
    env.retain(|(k, _)| {
        !k.starts_with("DEDUPD__CHECKPOINT__INTERVAL")
            && k != "DEDUPD__FILTER__EXPECTED_KEYS"
            && k != "DEDUPD__FILTER__WINDOW"
    });
    env.extend(
        [
            ("DEDUPD__FILTER__EXPECTED_KEYS", EXPECTED_KEYS.to_string()),
            // Longer than the stream's event time: no key's window expires
            // during the test, so a verdict is "seen before or not" and no
            // boundary case (a copy a tick either side of the window, which
            // the slice clock's progress decides) tells the runs apart.
            ("DEDUPD__FILTER__WINDOW", "1h".to_string()),
            ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", format!("{app}.dups")),
            // Snapshots only on release and shutdown: a restart after the
            // kill restores from the snapshots taken before the policy
            // decided, and replays its logged decisions.
            ("DEDUPD__CHECKPOINT__INTERVAL", "10m".to_string()),
            ("DEDUPD__CHECKPOINT__INTERVAL_RECORDS", "0".to_string()),
            ("DEDUPD__AVAILABILITY__POLICY", policy.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v)),
    );
    env
}

/// A record's identity across runs: its input key and value.
type Id = (Option<Vec<u8>>, Option<Vec<u8>>);

fn id(r: &Rec) -> Id {
    (r.key.clone(), r.value.clone())
}

fn header<'a>(r: &'a Rec, name: &str) -> Option<&'a [u8]> {
    r.header(name)
}

/// Checks what must hold under every policy: per partition, release
/// positions strictly increase on each topic, and no slice offset is sent
/// twice over the output and duplicates topics.
fn assert_exactly_once(policy: &str, out: &BTreeMap<i32, Vec<Rec>>, dups: &BTreeMap<i32, Vec<Rec>>) {
    for topic in [out, dups] {
        for (p, recs) in topic {
            let releases: Vec<ReleasePos> =
                recs.iter().map(|r| ReleasePos::parse(header(r, "dedupd.release").unwrap()).unwrap()).collect();
            if let Some(w) = releases.windows(2).find(|w| w[0] >= w[1]) {
                panic!("{policy}: partition {p}: release positions do not increase: {} then {}", w[0], w[1]);
            }
        }
    }
    for p in 0..PARTITIONS as i32 {
        let mut seen = HashSet::new();
        for r in out.get(&p).into_iter().flatten().chain(dups.get(&p).into_iter().flatten()) {
            let offset = String::from_utf8(header(r, "dedupd.slice.offset").unwrap().to_vec()).unwrap();
            assert!(seen.insert(offset.clone()), "{policy}: partition {p}: slice offset {offset} sent twice");
        }
    }
}

#[test]
fn policies_on_a_slow_restore_and_a_restart() {
    let input = unique("avail-in");
    create_topic(&input, PARTITIONS as i32);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let producer = keyed_stream_with(input.clone(), PARTITIONS, stop.clone(), produced.clone(), 18, false);

    let reference_app = unique("avail-ref");
    let mut reference = Daemon::start("avail-reference", &env(&reference_app, &input, "wait"));
    let policies = ["wait", "deliver", "drop"];
    let apps: Vec<String> = policies.iter().map(|p| unique(&format!("avail-{p}"))).collect();
    // One member of each policy's group, `member` in its name; returns once all are ready.
    let start_members = |member: &str| -> Vec<Daemon> {
        let mut started: Vec<Daemon> = policies
            .iter()
            .zip(&apps)
            .map(|(p, app)| Daemon::start(&format!("avail-{p}-{member}"), &env(app, &input, p)))
            .collect();
        for d in &mut started {
            d.wait_ready(Duration::from_secs(120));
        }
        started
    };
    let mut first = start_members("a");
    reference.wait_ready(Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(4));

    // A second member: the slices it takes over are restored slowly.
    let mut second = start_members("b");
    std::thread::sleep(Duration::from_secs(3));
    // Killed, then restarted: its slices are restored twice more (by the
    // first member, then by the restarted one), through the logged ranges.
    for d in &mut second {
        d.kill();
    }
    std::thread::sleep(Duration::from_secs(8));
    let mut third = start_members("c");
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(Ordering::Relaxed);

    wait_processed(&[&reference], total, Duration::from_secs(180));
    for (a, c) in first.iter().zip(&third) {
        wait_processed(&[a, c], total, Duration::from_secs(180));
    }
    std::thread::sleep(Duration::from_secs(2));

    let expected = read_all(&format!("{reference_app}.out"), Duration::from_secs(3));
    let expected_ids: BTreeSet<Id> = expected.values().flatten().map(id).collect();
    assert!(expected_ids.len() > 1000, "{} distinct records in the reference", expected_ids.len());
    assert!(expected.values().flatten().all(|r| header(r, "dedupd.policy").is_none()));

    let mut logs = String::new();
    for (i, policy) in policies.iter().enumerate() {
        let out = read_all(&format!("{}.out", apps[i]), Duration::from_secs(3));
        let dups = read_all(&format!("{}.dups", apps[i]), Duration::from_secs(3));
        assert_exactly_once(policy, &out, &dups);
        let decided: Vec<&Rec> =
            out.values().chain(dups.values()).flatten().filter(|r| header(r, "dedupd.policy").is_some()).collect();
        let decided_keys: HashSet<Option<Vec<u8>>> = decided.iter().map(|r| r.key.clone()).collect();
        let out_ids: BTreeSet<Id> = out.values().flatten().map(id).collect();
        match *policy {
            "wait" => {
                assert!(decided.is_empty(), "wait: {} records carry dedupd.policy", decided.len());
                // The same records per partition. Not necessarily in the
                // same order: an idle flush (a slice that received nothing for
                // the lateness, e.g. a producer starved of CPU) happens when it
                // happens in each run: logged, so restarts of one run replay
                // it, but two independent runs may release at other places.
                let sets = |m: &BTreeMap<i32, Vec<Rec>>| -> BTreeMap<i32, BTreeSet<Id>> {
                    m.iter().map(|(p, rs)| (*p, rs.iter().map(id).collect())).collect()
                };
                let (got, want) = (sets(&out), sets(&expected));
                for (p, w) in &want {
                    let g = got.get(p).cloned().unwrap_or_default();
                    let (extra, missing) = (g.difference(w).count(), w.difference(&g).count());
                    assert!(
                        extra == 0 && missing == 0 && out[p].len() == expected[p].len(),
                        "wait: partition {p}: {} records, {} uninterrupted: {extra} extra, {missing} missing",
                        out[p].len(),
                        expected[p].len()
                    );
                }
            }
            "deliver" => {
                assert!(!decided.is_empty(), "deliver: no record was decided by the policy (restore too fast?)");
                assert!(decided.iter().all(|r| header(r, "dedupd.policy") == Some(b"deliver")));
                assert!(dups.values().flatten().all(|r| header(r, "dedupd.policy").is_none()));
                // Beyond the uninterrupted output: only policy records.
                let policy_ids: HashSet<Id> = decided.iter().map(|r| id(r)).collect();
                let extra: Vec<&Id> = out_ids.difference(&expected_ids).collect();
                // The policy's own records carry the header; the few others
                // beyond the uninterrupted output are later copies of keys it
                // decided (knock-on: the window of such a key differs).
                let marked = extra.iter().filter(|i| policy_ids.contains(**i)).count();
                let unexplained =
                    extra.iter().filter(|i| !policy_ids.contains(**i) && !decided_keys.contains(&i.0)).count();
                assert!(marked > 0, "deliver: none of the {} extra records carries dedupd.policy", extra.len());
                assert_eq!(
                    unexplained,
                    0,
                    "deliver: {unexplained} of {} extra records carry no dedupd.policy and are of keys the policy never \
                     decided",
                    extra.len()
                );
                let missing: Vec<&Id> = expected_ids.difference(&out_ids).collect();
                let unexplained = missing.iter().filter(|i| !decided_keys.contains(&i.0)).count();
                assert_eq!(
                    unexplained,
                    0,
                    "deliver: {unexplained} of {} missing records are of keys the policy never decided",
                    missing.len()
                );
                eprintln!(
                    "deliver: {} decided, {} extra ({marked} of them decided), {} missing (knock-on)",
                    decided.len(),
                    extra.len(),
                    missing.len()
                );
            }
            "drop" => {
                assert!(!decided.is_empty(), "drop: no record was decided by the policy (restore too fast?)");
                assert!(out.values().flatten().all(|r| header(r, "dedupd.policy").is_none()));
                assert!(decided.iter().all(|r| header(r, "dedupd.policy") == Some(b"drop")));
                assert!(decided.iter().all(|r| header(r, "dedupd.rule") == Some(b"policy")));
                let union: BTreeSet<Id> = out_ids.iter().cloned().chain(decided.iter().map(|r| id(r))).collect();
                let missing: Vec<&Id> = expected_ids.difference(&union).collect();
                let unexplained = missing.iter().filter(|i| !decided_keys.contains(&i.0)).count();
                assert_eq!(
                    unexplained,
                    0,
                    "drop: {unexplained} of {} records missing from output and policy records are of keys the policy \
                     never decided",
                    missing.len()
                );
                eprintln!("drop: {} decided, {} missing (knock-on)", decided.len(), missing.len());
            }
            _ => unreachable!(),
        }
        let metrics = |d: &Daemon| http_get(d.admin_port, "/metrics").map(|(_, body)| body).unwrap_or_default();
        if *policy != "wait" {
            let counted: f64 = [&first[i], &third[i]]
                .iter()
                .flat_map(|d| {
                    metrics(d)
                        .lines()
                        .filter(|l| l.starts_with("dedupd_policy_decisions_total{"))
                        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                        .collect::<Vec<_>>()
                })
                .sum();
            assert!(counted > 0.0, "{policy}: dedupd_policy_decisions_total is 0 on the live members");
        }
        for d in [&first[i], &second[i], &third[i]] {
            logs.push_str(&d.log_text());
        }
        if *policy != "wait" {
            let text = [&first[i], &third[i]].iter().map(|d| d.log_text()).collect::<String>();
            let replayed = text.lines().any(|l| {
                l.split(" idle flushes and ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n > 0)
            });
            assert!(replayed, "{policy}: no restore replayed a logged policy range after the kill");
        }
    }
    for d in first.iter_mut().chain(third.iter_mut()).chain(std::iter::once(&mut reference)) {
        assert!(d.terminate(Duration::from_secs(60)).success(), "{}", d.log_text());
    }
    reference.assert_clean_log();
}
