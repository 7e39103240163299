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
