//! `slicing.log_format = "batches"` end to end on the real broker: the
//! routers write one slice-log record per turn and slice, holding its
//! records; the output equals the one-record-per-input-record form's, and
//! SIGKILLs (restores re-reading waiting records from batches) change none of it.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::*;

/// Per output partition, the records (key, value, timestamp), sorted: what
/// must not change between the forms of the slice log.
type Content = (Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>);

fn content(topic: &str) -> BTreeMap<i32, Vec<Content>> {
    read_all(topic, Duration::from_secs(3))
        .into_iter()
        .map(|(p, recs)| {
            let mut sigs: Vec<_> = recs.into_iter().map(|r| (r.key, r.value, r.timestamp)).collect();
            sigs.sort();
            (p, sigs)
        })
        .collect()
}

fn env_for(app: &str, input: &str, format: &str) -> Vec<(String, String)> {
    let mut env = app_env(app, input, "repartition", 4);
    // As in tests/shared.rs: no idle flush mid-stream on a loaded machine.
    env.push(("DEDUPD__INPUT__LATENESS".into(), "10s".into()));
    env.push(("DEDUPD__SLICING__LOG_FORMAT".into(), format.into()));
    env
}

#[test]
fn batches_give_the_output_of_records_and_survive_kills() {
    let partitions = 4;
    let input = unique("clicks-batches");
    create_topic(&input, partitions as i32);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    // No record later than the lateness: the verdicts then do not depend on
    // how the routers interleave the partitions (design invariant 7).
    let producer = keyed_stream_with(input.clone(), partitions, stop.clone(), produced.clone(), 43, false);

    let records_app = unique("records");
    let mut records = Daemon::start("records", &env_for(&records_app, &input, "records"));
    let batches_app = unique("batches");
    let mut batches = Daemon::start("batches", &env_for(&batches_app, &input, "batches"));
    let crash_app = unique("batches-crash");
    let (mut crashing, mut crash_logs) = kill_storm(
        "batches-crashing",
        &env_for(&crash_app, &input, "batches"),
        3,
        Duration::from_millis(500),
        &produced,
    );

    wait_produced(&produced, 4000);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(Ordering::Relaxed);
    for d in [&records, &batches, &crashing] {
        wait_processed(&[d], total, Duration::from_secs(120));
    }
    std::thread::sleep(Duration::from_secs(1));

    let want = content(&format!("{records_app}.out"));
    let delivered: usize = want.values().map(Vec::len).sum();
    assert!(delivered > 1000 && (delivered as u64) < total, "{delivered} distinct of {total}");
    let got = content(&format!("{batches_app}.out"));
    assert!(got == want, "the batches run's output differs from the records run's");
    let crashed = content(&format!("{crash_app}.out"));
    for (p, want) in &want {
        let got = crashed.get(p).cloned().unwrap_or_default();
        let missing = want.iter().filter(|r| got.binary_search(r).is_err()).count();
        let extra = got.iter().filter(|r| want.binary_search(r).is_err()).count();
        assert!(got == *want, "partition {p}: the killed batches run differs ({missing} missing, {extra} extra)");
    }
    // The slice log holds batches: fewer slice-log records than input records.
    let log: Vec<Rec> =
        read_all(&format!("{batches_app}.slices"), Duration::from_secs(1)).into_values().flatten().collect();
    let batch_records = log.iter().filter(|r| r.header("dedupd.batch").is_some()).count() as u64;
    assert!(batch_records > 0 && batch_records < total / 2, "{batch_records} batches for {total} input records");
    crash_logs.push_str(&crashing.log_text());
    assert!(crash_logs.contains("restored from Snapshot"), "restarts should restore from snapshots:\n{crash_logs}");
    // A batch another writer damaged: dead-lettered whole with the reason, and the slice goes on.
    let mut forged = Rec::new(0, "forged", "dedupdSB garbage", BASE_TS);
    forged.headers.push(("dedupd.batch".into(), Vec::new()));
    produce(&format!("{batches_app}.slices"), &[forged]);
    let dlq = format!("{batches_app}.dlq");
    wait_for("the damaged batch's dead letter", Duration::from_secs(60), || {
        read_all(&dlq, Duration::from_millis(300))
            .values()
            .flatten()
            .any(|r| r.header("dedupd.reason") == Some(b"bad_frame"))
    });
    let dead: Vec<Rec> = read_all(&dlq, Duration::from_secs(1)).into_values().flatten().collect();
    let bad = dead.iter().find(|r| r.header("dedupd.reason") == Some(b"bad_frame")).expect("waited for");
    let detail = String::from_utf8_lossy(bad.header("dedupd.detail").unwrap_or_default());
    assert!(detail.contains("slice-log batch"), "{detail}");
    for d in [&mut records, &mut batches, &mut crashing] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    batches.assert_clean_log();
}

/// Settings of the upgrade test's applications: an input lateness of 3 s
/// (above the records' jitter of 1.5 s, short so that the idle flush that
/// drains a slice comes soon) and the slice-log form.
fn upgrade_env(app: &str, input: &str, format: &str) -> Vec<(String, String)> {
    let mut env = app_env(app, input, "repartition", 4);
    // As in `env_for`: a lateness long enough that a loaded machine's
    // stall mid-stream is no idle flush in one run and not in the other
    // (records behind such a flush are late, and judged at their own time).
    env.push(("DEDUPD__INPUT__LATENESS".into(), "10s".into()));
    env.push(("DEDUPD__SLICING__LOG_FORMAT".into(), format.into()));
    env
}

/// Clicks `seqs` over 800 keys, 25 ms apart, each jittered by up to 1.5 s.
fn clicks(seqs: std::ops::Range<u64>, partitions: u32, rng: &mut dedupd::testkit::workload::Rng) -> Vec<Rec> {
    seqs.map(|seq| {
        let id = format!("k{}", rng.below(800));
        let ts = BASE_TS + seq as i64 * 25 + rng.below(1_500) as i64;
        click(seq, &id, ts, partition_of(&id, partitions))
    })
    .collect()
}

/// The upgrade path (docs/running.md, "Changing slicing.log_format"): an
/// application run with `records`, drained (every record judged, then a
/// graceful stop, which takes a snapshot at the end) and started again with
/// `batches`, judges the rest of its input as an uninterrupted `records`
/// run does: the same records in every output partition, part 2's copies of
/// part 1's keys among the duplicates. One stopped with a copy in its slice
/// log the slice has not taken in is refused at start-up, with an error
/// naming `slicing.log_format` and the upgrade steps.
#[test]
fn a_drained_records_log_upgrades_to_batches_and_an_undrained_one_is_refused() {
    // One input partition: two live runs compared record for record must
    // not depend on how fast their routers read the partitions of a
    // backlog (on a loaded machine one can run more than the lateness
    // ahead, and a record behind it is late: judged at its own time). The
    // four slices still split the keys.
    let partitions = 1;
    let input = unique("clicks-upgrade");
    create_topic(&input, partitions as i32);
    let mut rng = dedupd::testkit::workload::Rng::new(45);
    // Part 2 starts after part 1's latest time, within the 60 s window of most of it.
    let (part1, part2) = (clicks(0..1200, partitions, &mut rng), clicks(1300..2500, partitions, &mut rng));

    let (whole_app, upgraded_app, undrained_app) = (unique("whole"), unique("upgraded"), unique("undrained"));
    let mut whole = Daemon::start("upgrade-whole", &upgrade_env(&whole_app, &input, "records"));
    let mut upgraded = Daemon::start("upgrade-records", &upgrade_env(&upgraded_app, &input, "records"));
    let mut undrained = Daemon::start("undrained-records", &upgrade_env(&undrained_app, &input, "records"));
    produce(&input, &part1);
    for d in [&whole, &upgraded, &undrained] {
        wait_processed(&[d], part1.len() as u64, Duration::from_secs(120));
    }
    for d in [&mut upgraded, &mut undrained] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }

    // Not drained: a router's copy the slice has not taken in (one written
    // again, as a router that restarts writes it) after the last snapshot.
    let slice_log = format!("{undrained_app}.slices");
    let copy = read_all(&slice_log, Duration::from_secs(1))
        .remove(&0)
        .and_then(|recs| recs.into_iter().rev().find(|r| r.headers.iter().all(|(k, _)| !k.starts_with("dedupd."))))
        .expect("a records-form copy in slice 0's log");
    produce(&slice_log, &[copy]);
    let mut refused = Daemon::start("undrained-batches", &upgrade_env(&undrained_app, &input, "batches"));
    let status = refused.wait_exit(Duration::from_secs(60), "an undrained slice log was not refused");
    let log = refused.log_text();
    assert!(!status.success() && !log.contains("panicked"), "{log}");
    assert!(
        log.contains("slice 0: restore failed: cannot go on with slicing.log_format = \"batches\" from its snapshot")
            && log.contains("records of the records form the slice has not taken in")
            && log.contains("lag 0, waiting 0"),
        "{log}"
    );

    let mut upgraded = Daemon::start("upgrade-batches", &upgrade_env(&upgraded_app, &input, "batches"));
    upgraded.wait_ready(Duration::from_secs(60));
    produce(&input, &part2);
    let total = (part1.len() + part2.len()) as u64;
    for d in [&whole, &upgraded] {
        wait_processed(&[d], total, Duration::from_secs(120));
    }
    std::thread::sleep(Duration::from_secs(1));

    let want = content(&format!("{whole_app}.out"));
    let got = content(&format!("{upgraded_app}.out"));
    if got != want {
        let records =
            |m: &BTreeMap<i32, Vec<Content>>| m.values().flatten().cloned().collect::<std::collections::BTreeSet<_>>();
        let (got_all, want_all) = (records(&got), records(&want));
        panic!(
            "the upgraded run's output differs from the uninterrupted one's: {} records only in the upgraded run's, \
             {} only in the uninterrupted run's (of {}), e.g. {:?} / {:?}",
            got_all.difference(&want_all).count(),
            want_all.difference(&got_all).count(),
            want_all.len(),
            got_all.difference(&want_all).next(),
            want_all.difference(&got_all).next()
        );
    }
    // Part 2's keys judged against part 1's, carried over: fewer of its
    // records delivered than it has keys.
    let part2_keys: std::collections::BTreeSet<_> = part2.iter().map(|r| r.key.clone()).collect();
    let part2_out = want
        .values()
        .flatten()
        .filter(|(_, v, _)| v.as_deref().is_some_and(|v| part2.iter().any(|r| r.value.as_deref() == Some(v))))
        .count();
    assert!(
        part2_out > 0 && part2_out < part2_keys.len(),
        "{part2_out} of part 2 delivered, {} keys",
        part2_keys.len()
    );
    let log = upgraded.log_text();
    assert!(log.contains("going on in the batch form at position"), "{log}");
    let batches = read_all(&format!("{upgraded_app}.slices"), Duration::from_secs(1))
        .into_values()
        .flatten()
        .filter(|r| r.header("dedupd.batch").is_some())
        .count();
    assert!(batches > 0, "the upgraded run wrote no batch");
    for d in [&mut whole, &mut upgraded] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    upgraded.assert_clean_log();
}
