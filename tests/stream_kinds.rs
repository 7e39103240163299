//! `dedupd run` with the decaying kinds (`filter.kind = "rsbf" | "stable"`)
//! on the real broker, with input-partitions slicing (the slice log is the
//! input partition, the same for every run; with repartition each run's
//! router interleaves the input partitions as they arrive, so the order
//! records reach a slice, which a decaying filter's verdicts depend on,
//! may differ between two separate runs): a run SIGKILLed mid-stream and restarted writes exactly
//! the output of an uninterrupted run with the same seed (the PRNG state is in
//! the snapshots), another seed gives other verdicts, a clean run logs no WARN
//! or ERROR, and a checkpoint taken with other count parameters is refused by
//! `checkpoint.on_corrupt = fail` naming them.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::*;

/// Key, value, timestamp, slice offset and release position of every output
/// record, per partition: what must be identical between runs.
type Output = BTreeMap<i32, Vec<(Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>, Vec<u8>, Vec<u8>)>>;

fn output(topic: &str) -> Output {
    read_all(topic, Duration::from_secs(3))
        .into_iter()
        .map(|(p, recs)| {
            let sig = |r: &Rec| {
                let header = |name| r.header(name).map(<[u8]>::to_vec).unwrap_or_default();
                (r.key.clone(), r.value.clone(), r.timestamp, header("dedupd.slice.offset"), header("dedupd.release"))
            };
            (p, recs.iter().map(sig).collect())
        })
        .collect()
}

/// Settings of a decaying-kind app, with a memory small enough that each
/// slice's filter forgets keys of the 3000-key stream by random resets (RSBF,
/// past its warm-up of s records) or decrements (SBF) within a few thousand records.
fn kind_env(app: &str, input: &str, mode: &str, slices: u32, kind: &str, seed: u64) -> Vec<(String, String)> {
    // RSBF: 128 B a slice, k = 3 arrays of s = 320 bits. SBF: 1 KiB a slice, 4096 cells.
    let memory = if kind == "rsbf" { "256B" } else { "2KiB" };
    let mut env = app_env(app, input, mode, slices);
    env.extend(
        [
            ("DEDUPD__FILTER__KIND", kind.to_string()),
            ("DEDUPD__FILTER__MEMORY", memory.to_string()),
            ("DEDUPD__FILTER__FPR", "0.1".to_string()),
            ("DEDUPD__FILTER__SEED", seed.to_string()),
            // An idle flush (a slice that receives nothing for the lateness)
            // judges its waiting records early; it is logged, so a restarted
            // run replays it, but two separate runs flush wherever the
            // producer happened to pause. A decaying filter's verdicts
            // depend on the order it judges in, so the runs compared here
            // must not flush mid-stream: 10 s covers the producer's pauses on
            // a loaded machine (2 s did not: the reference flushed three
            // times mid-stream, the crashed run did not, and they differed).
            ("DEDUPD__INPUT__LATENESS", "10s".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    env
}

fn crash_equivalence(kind: &str, mode: &str) {
    let slices = 2;
    let input = unique(&format!("clicks-{kind}"));
    create_topic(&input, slices as i32);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let producer = keyed_stream(input.clone(), slices, stop.clone(), produced.clone(), 11);

    // Reference: never interrupted. Other seed: never interrupted either.
    let reference_app = unique(&format!("{kind}-ref"));
    let mut reference = Daemon::start("kind-reference", &kind_env(&reference_app, &input, mode, slices, kind, 5));
    let other_app = unique(&format!("{kind}-seed"));
    let mut other = Daemon::start("kind-other-seed", &kind_env(&other_app, &input, mode, slices, kind, 6));

    // Crashing: the same seed as the reference, SIGKILLed at random moments.
    let crash_app = unique(&format!("{kind}-crash"));
    let crash_env = kind_env(&crash_app, &input, mode, slices, kind, 5);
    let (mut crashing, mut crash_logs) =
        kill_storm(&format!("{kind}-crashing"), &crash_env, 3, Duration::from_secs(1), &produced);
    std::thread::sleep(Duration::from_secs(3));
    wait_produced(&produced, 3000);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(Ordering::Relaxed);

    for d in [&reference, &other, &crashing] {
        wait_processed(&[d], total, Duration::from_secs(120));
    }
    // Let the last outputs land.
    std::thread::sleep(Duration::from_secs(1));

    let expected = output(&format!("{reference_app}.out"));
    let distinct: usize = expected.values().map(Vec::len).sum();
    // More distinct records than keys: the filters forgot keys (past their
    // warm-up, the random draws decided verdicts), and they are not passthrough.
    let keys: HashSet<&Vec<u8>> = expected.values().flatten().filter_map(|r| r.0.as_ref()).collect();
    assert!(
        distinct > keys.len() && (distinct as u64) < total,
        "{kind}: {distinct} distinct of {total} records, {} keys",
        keys.len()
    );
    let crashed = output(&format!("{crash_app}.out"));
    for (p, want) in &expected {
        let got = &crashed[p];
        assert_eq!(got.len(), want.len(), "{kind}: partition {p}: records after 3 SIGKILLs vs uninterrupted");
        assert!(got == want, "{kind}: partition {p}: the crashed run's output differs from the uninterrupted run's");
    }
    crash_logs.push_str(&crashing.log_text());
    assert!(crash_logs.contains("restored from Snapshot"), "{kind}: restarts should restore from snapshots");
    let seeded = output(&format!("{other_app}.out"));
    assert!(seeded != expected, "{kind}: another seed should give other verdicts");

    for d in [&mut reference, &mut other, &mut crashing] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    reference.assert_clean_log();
    other.assert_clean_log();

    // The crash app's checkpoints were taken with seed 5: seed 6 must not
    // restore them, and with on_corrupt = fail the daemon says why and stops.
    let mut reseeded = kind_env(&crash_app, &input, mode, slices, kind, 6);
    reseeded.push(("DEDUPD__CHECKPOINT__ON_CORRUPT".into(), "fail".into()));
    let mut strict = Daemon::start("kind-reseeded", &reseeded);
    let status = strict.wait_exit(Duration::from_secs(60), "a checkpoint of another seed should stop the daemon");
    assert!(!status.success());
    let log = strict.log_text();
    assert!(
        log.contains("cannot be used") && log.contains(&format!("kind={kind},")) && log.contains("rng_seed=0x5,"),
        "{log}"
    );
    let out_after: usize = output(&format!("{crash_app}.out")).values().map(Vec::len).sum();
    assert_eq!(out_after, distinct, "{kind}: the refused restart wrote output");
}

#[test]
fn rsbf_crash_equivalence_and_seeds() {
    crash_equivalence("rsbf", "input-partitions");
}

#[test]
fn stable_crash_equivalence_and_seeds() {
    crash_equivalence("stable", "input-partitions");
}
