//! Every output topic has its own replay bound (design invariant 5).
//!
//! The idempotent producer keeps order within a partition only: when a
//! process dies, partition s of the duplicates or dead-letter topic can hold
//! records released after the last one partition s of the output holds. A
//! restart that took one bound for all of them (the highest release position
//! among their last records) would treat the distinct records in between as
//! sent, and they would never reach the output.
//!
//! One local broker answers one connection in order, so this does not happen
//! by itself: the test broker is reached through
//! `scripts/produce_block_proxy.py --lag`, which sets aside the Produce
//! requests for the output topic while the connection's other requests
//! (duplicates, dead letters, fetches) go through and are answered.
//!
//! Needs the local broker's binary (`scripts/broker.sh install`) and python3.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

const SLICES: u32 = 2;

/// The records before the daemons start, while the output lags, and after the restart.
const BEFORE: std::ops::Range<u64> = 0..300;
const LAGGING: std::ops::Range<u64> = 300..360;
const AFTER: std::ops::Range<u64> = 360..480;

/// Input record `seq`: in threes per partition (the partitions take turns),
/// a distinct click `d{n}`, a copy of it 10 ms later (a duplicate), then an
/// unreadable record (a dead letter, `bad_json`). Event times grow with
/// `seq`, so with no lateness every record is judged as it arrives and the
/// release positions do not depend on when records arrive (no idle flush).
fn record(seq: u64) -> Rec {
    let n = seq / 3;
    let partition = (n % u64::from(SLICES)) as i32;
    let ts = BASE_TS + seq as i64 * 10;
    match seq % 3 {
        0 | 1 => click(seq, &format!("d{n}"), ts, partition),
        _ => Rec::new(partition, &format!("x{n}"), &format!("{{not json {seq}"), ts),
    }
}

fn records(seqs: std::ops::Range<u64>) -> Vec<Rec> {
    seqs.map(record).collect()
}

/// How many records of `seqs` go to partition `p` of the output (distinct),
/// the duplicates and the dead-letter topic: the same number of each.
fn per_topic(seqs: std::ops::Range<u64>, p: i32) -> usize {
    seqs.filter(|s| s % 3 == 0 && record(*s).partition == p).count()
}

/// What the comparison looks at: key, payload, timestamp, slice offset and release position.
type Signature = (Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>, Option<Vec<u8>>, Option<Vec<u8>>);

fn signature(r: &Rec) -> Signature {
    let header = |name| r.header(name).map(<[u8]>::to_vec);
    (r.key.clone(), r.value.clone(), r.timestamp, header("dedupd.slice.offset"), header("dedupd.release"))
}

/// `dedupd.release` (`after/rank`, or `after/flush/rank`) as (after, flush, rank).
fn release(r: &Rec) -> (u64, bool, u32) {
    let text = String::from_utf8(r.header("dedupd.release").expect("dedupd.release").to_vec()).unwrap();
    let parts: Vec<&str> = text.split('/').collect();
    (parts[0].parse().unwrap(), parts.len() == 3, parts[parts.len() - 1].parse().unwrap())
}

/// The highest release position in a partition.
fn highest(recs: &[Rec]) -> Option<(u64, bool, u32)> {
    recs.iter().map(release).max()
}

fn describe(r: &Rec) -> String {
    format!(
        "{} (key {}, slice offset {}, release {})",
        r.value_str(),
        String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()),
        String::from_utf8_lossy(r.header("dedupd.slice.offset").unwrap_or_default()),
        String::from_utf8_lossy(r.header("dedupd.release").unwrap_or_default()),
    )
}

/// How partition `p` of `what` differs from the uninterrupted run's, record
/// for record: the records missing, the extra ones, and any difference of order.
fn differences(what: &str, p: i32, want: &[Rec], got: &[Rec]) -> Vec<String> {
    let w: Vec<Signature> = want.iter().map(signature).collect();
    let g: Vec<Signature> = got.iter().map(signature).collect();
    if w == g {
        return Vec::new();
    }
    let mut out = vec![format!(
        "{what} partition {p}: {} records after the SIGKILL, {} in the uninterrupted run",
        got.len(),
        want.len()
    )];
    let missing: Vec<String> = want.iter().filter(|r| !g.contains(&signature(r))).map(describe).collect();
    let extra: Vec<String> = got
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            let s = signature(r);
            // Extra: absent from the reference, or there fewer times than here (so far).
            g[..*i].iter().filter(|x| **x == s).count() >= w.iter().filter(|x| **x == s).count()
        })
        .map(|(_, r)| describe(r))
        .collect();
    if !missing.is_empty() {
        out.push(format!("  missing ({}): {}", missing.len(), missing.join("; ")));
    }
    if !extra.is_empty() {
        out.push(format!("  extra ({}): {}", extra.len(), extra.join("; ")));
    }
    if missing.is_empty() && extra.is_empty() {
        let at = w.iter().zip(&g).position(|(a, b)| a != b).unwrap_or(0);
        out.push(format!("  the same records in another order, from position {at}"));
    }
    out
}

/// The output topic's writes lag behind the duplicates and dead-letter
/// topics' (their Produce requests held by the proxy while the others are
/// answered); the daemon is SIGKILLed while partition s of the duplicates
/// and dead-letter topics hold records released after the last one of
/// partition s of the output. After a restart the output, duplicates and
/// dead-letter topics each hold, partition for partition, exactly the
/// records of an uninterrupted run of the same input (another application
/// id): none missing, none twice.
#[test]
fn each_output_topic_resumes_from_its_own_replay_bound() {
    let dir = std::env::temp_dir().join(unique("dedupd-replay"));
    std::fs::create_dir_all(&dir).unwrap();
    let crash_app = unique("replay-crash");
    let reference_app = unique("replay-ref");
    let lag = ProduceProxy::new(&dir, &format!("{crash_app}.out"), true);

    let input = unique("replay-in");
    create_topic_on(&lag.client, &input, SLICES as i32);
    produce_on(&lag.client, &input, &records(BEFORE));
    let env = |app: &str| {
        let mut env = app_env(app, &input, "input-partitions", SLICES);
        env.extend(
            [
                ("DEDUPD__KAFKA__BROKERS", lag.client.get("bootstrap.servers").unwrap().to_string()),
                ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", format!("{app}.dups")),
                // Judged as they arrive: no record waits for the watermark, so
                // no idle flush (timed by the wall clock) moves a release position.
                ("DEDUPD__INPUT__LATENESS", "0s".into()),
                // The producer batches for 50 ms: one Produce request per
                // partition and topic carries a release's outputs.
                ("DEDUPD__KAFKA__LINGER_MS", "50".into()),
            ]
            .map(|(k, v)| (k.to_string(), v)),
        );
        env
    };
    let mut reference = Daemon::start("replay-reference", &env(&reference_app));
    let mut crashing = Daemon::start("replay-crashing", &env(&crash_app));
    for d in [&reference, &crashing] {
        wait_processed(&[d], BEFORE.end, Duration::from_secs(60));
    }
    // A snapshot after the first records: the restart replays from it.
    wait_for("a snapshot of every slice after the first records", Duration::from_secs(30), || {
        matches!(crashing.slices(), Some(serde_json::Value::Array(s))
        if s.len() == SLICES as usize && s.iter().all(|s| {
            let end = 3 * per_topic(BEFORE, s["slice"].as_i64().unwrap() as i32) as u64;
            s["last_checkpoint_offset"].as_u64() == Some(end)
        }))
    });

    let (out, dups, dlq) = (format!("{crash_app}.out"), format!("{crash_app}.dups"), format!("{crash_app}.dlq"));
    lag.hold();
    produce_on(&lag.client, &input, &records(LAGGING));
    // The duplicates and dead letters of the lagging records are acknowledged;
    // their outputs are not.
    let upto =
        |seqs: std::ops::Range<u64>| -> Vec<usize> { (0..SLICES as i32).map(|p| per_topic(0..seqs.end, p)).collect() };
    let len = |m: &BTreeMap<i32, Vec<Rec>>| -> Vec<usize> { m.values().map(Vec::len).collect() };
    let quiet = Duration::from_secs(2);
    // (Within librdkafka's request.timeout.ms, 30 s: the held requests are not sent again.)
    let (mut held_dups, mut held_dlq) = (BTreeMap::new(), BTreeMap::new());
    wait_for("the lagging records' duplicates and dead letters to be acknowledged", Duration::from_secs(20), || {
        (held_dups, held_dlq) = (lag.read(&dups, quiet), lag.read(&dlq, quiet));
        len(&held_dups) == upto(LAGGING) && len(&held_dlq) == upto(LAGGING)
    });
    let held_out = lag.read(&out, quiet);
    assert_eq!(len(&held_out), upto(BEFORE), "the proxy should hold back the output of the lagging records");
    for p in 0..SLICES as i32 {
        let o = highest(&held_out[&p]);
        for (what, topic) in [("duplicates", &held_dups), ("dead letters", &held_dlq)] {
            assert!(
                highest(&topic[&p]) > o,
                "partition {p}: the {what} should hold records released after the output's last ({o:?})"
            );
        }
    }
    crashing.kill();
    // The held Produce requests die with the killed daemon's connection: never written.
    wait_for("the proxy to drop the held requests", Duration::from_secs(10), || lag.log().contains("dropped "));
    lag.release();

    let mut restarted = Daemon::start("replay-crashing", &env(&crash_app));
    restarted.wait_ready(Duration::from_secs(60));
    produce_on(&lag.client, &input, &records(AFTER));
    for d in [&reference, &restarted] {
        wait_processed(&[d], AFTER.end, Duration::from_secs(60));
    }
    std::thread::sleep(Duration::from_secs(1));

    let mut report = Vec::new();
    for suffix in ["out", "dups", "dlq"] {
        let want = lag.read(&format!("{reference_app}.{suffix}"), quiet);
        let got = lag.read(&format!("{crash_app}.{suffix}"), quiet);
        // The uninterrupted run's: one record per triple of the input, in each partition.
        assert_eq!(len(&want), upto(AFTER), "{suffix}: the uninterrupted run's records per partition");
        for p in 0..SLICES as i32 {
            report.extend(differences(suffix, p, &want[&p], &got[&p]));
        }
    }
    assert!(report.is_empty(), "after the SIGKILL and a restart:\n{}", report.join("\n"));
    for d in [&mut reference, &mut restarted] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    reference.assert_clean_log();
}
