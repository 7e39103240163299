//! `slicing.mode = "shared"` end to end on the real broker
//! (docs/shared-mode.md): one slice judges every input partition from the
//! routers' read-order records, reading the records from the input itself
//! or taking them from the router of its own process.
//! Its output is the repartition mode's up to the filters' false
//! positives, and SIGKILLs change none of it.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

/// Per output partition, the records (key, value, timestamp), sorted: what
/// must not change between runs whose slice logs interleave differently.
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

fn env_for(app: &str, input: &str, mode: &str, slices: u32) -> Vec<(String, String)> {
    let mut env = app_env(app, input, mode, slices);
    // As in the repartition storm (tests/faults.rs): an idle flush of a
    // loaded machine's stalled stream would make records late, in each run
    // at other moments; 10 s of silence does not happen mid-stream.
    env.push(("DEDUPD__INPUT__LATENESS".into(), "10s".into()));
    env.push(("DEDUPD__OUTPUT__LATE_TOPIC".into(), format!("{app}.late")));
    env
}

#[test]
fn shared_mode_judges_as_repartition_does_and_survives_kills() {
    let partitions = 4;
    let input = unique("clicks-shared");
    create_topic(&input, partitions as i32);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let produced = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    // No record later than the lateness: the verdicts then do not depend on
    // how the routers interleave the partitions (design invariant 7).
    let producer = keyed_stream_with(input.clone(), partitions, stop.clone(), produced.clone(), 41, false);

    let repartition_app = unique("rep");
    let mut repartition = Daemon::start("repartition", &env_for(&repartition_app, &input, "repartition", 4));
    let shared_app = unique("shared");
    let mut shared = Daemon::start("shared", &env_for(&shared_app, &input, "shared", 1));
    let crash_app = unique("shared-crash");
    let crash_env = env_for(&crash_app, &input, "shared", 1);
    let (mut crashing, mut crash_logs) =
        kill_storm("shared-crashing", &crash_env, 4, Duration::from_millis(500), &produced);

    wait_produced(&produced, 4000);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(std::sync::atomic::Ordering::Relaxed);
    // Until each has judged every record, for as long as it makes
    // progress: a loaded machine's restart replays slowly, and a stuck one
    // prints what its slices hold and its log's end.
    for d in [&repartition, &shared, &crashing] {
        wait_judged(&[d], &["distinct", "duplicates", "invalid"], total, Duration::from_secs(60));
    }
    std::thread::sleep(Duration::from_secs(1));

    // The slice took records from its own process's router rather than
    // reading them again (features/shared/handoff.rs); the killed run's
    // equal output below holds whichever way each record came.
    // A router that restarts (a produce error) names records again: the
    // slice takes those as re-sent copies, handed over a second time.
    let handed = shared.metric("dedupd_input_handed_records_total");
    let resends = slice_total(&[&shared], &["resends"]);
    assert!(handed > 0 && handed <= total + resends, "{handed} records handed over of {total} (+{resends} re-sent)");
    let uninterrupted = content(&format!("{shared_app}.out"));
    assert_eq!(uninterrupted.keys().copied().collect::<Vec<_>>(), vec![0], "one slice: output partition 0");
    let want = &uninterrupted[&0];
    assert!(want.len() > 1000 && (want.len() as u64) < total, "{} distinct of {total}", want.len());
    // Exactly once across the kills: the same records, none twice (sorted,
    // so a repeat is a difference too).
    let crashed = content(&format!("{crash_app}.out"));
    let got = crashed.get(&0).cloned().unwrap_or_default();
    let missing = want.iter().filter(|r| got.binary_search(r).is_err()).count();
    let extra = got.iter().filter(|r| want.binary_search(r).is_err()).count();
    assert!(
        got == *want,
        "the killed shared run's output differs from the uninterrupted one's ({} vs {} records, {missing} missing, \
         {extra} extra)",
        got.len(),
        want.len()
    );
    crash_logs.push_str(&crashing.log_text());
    assert!(crash_logs.contains("restored from Snapshot"), "restarts should restore from snapshots:\n{crash_logs}");

    // Repartition mode's four filters and shared mode's one make different
    // false positives; apart from those, the same records are delivered.
    let mut repartitioned: Vec<_> = content(&format!("{repartition_app}.out")).into_values().flatten().collect();
    repartitioned.sort();
    let only_shared = want.iter().filter(|r| repartitioned.binary_search(r).is_err()).count();
    let only_repartition = repartitioned.iter().filter(|r| want.binary_search(r).is_err()).count();
    eprintln!(
        "{total} records: shared {} delivered, repartition {}; {only_shared} only in shared, {only_repartition} only \
         in repartition",
        want.len(),
        repartitioned.len()
    );
    let bound = want.len() / 100 + 5;
    assert!(
        only_shared + only_repartition <= bound,
        "shared and repartition outputs differ by {only_shared} + {only_repartition} records, more than the filters' \
         false positives explain ({bound})"
    );
    for run in [&shared_app, &crash_app] {
        let late: usize = read_all(&format!("{run}.late"), Duration::from_secs(1)).values().map(Vec::len).sum();
        assert_eq!(late, 0, "{run}: no record is later than the lateness");
    }
    for d in [&mut repartition, &mut shared, &mut crashing] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    shared.assert_clean_log();
}
