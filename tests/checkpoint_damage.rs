//! Damaged checkpoints under a real daemon on the real broker: each kind of
//! damage is refused with a log line naming it and a count in
//! `dedupd_checkpoint_rejected_total`, then `checkpoint.on_corrupt` applies —
//! `fail` stops the daemon, `cold-start` rebuilds the slice from its
//! retained log, after which the output is exactly what it would have been
//! without the damage: every key once, and the copies of keys seen before
//! the restart still dropped (the rebuilt filter is not an empty one).
//!
//! tests/checkpoint.rs covers the store's verdicts on its own; the snapshot
//! codec's refusals are unit tests (src/filter/timer/snapshot.rs, src/engine/slice.rs).

mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use dedupd::engine::slice::VERSION as SLICE_SNAPSHOT_VERSION;
use dedupd::filter::envelope::seal_in_place;
use dedupd::kafka::checkpoint::{MANIFEST_VERSION, Manifest};
use support::*;
use twox_hash::XxHash3_64;

const SLICES: u32 = 6;
/// Small chunks, so that each slice's snapshot has tens of them.
const CHUNK: usize = 1024;

/// The newest snapshot of each slice in checkpoint topic `topic`: its
/// manifest and its chunks (as the store reads them: the last value of
/// each key).
fn newest_snapshots(topic: &str) -> BTreeMap<u32, (Manifest, Vec<Vec<u8>>)> {
    let mut out = BTreeMap::new();
    for (partition, records) in read_all(topic, Duration::from_secs(2)) {
        let slice = partition as u32;
        let mut latest: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for r in records {
            latest.insert(r.key.clone().unwrap(), r.value.clone());
        }
        let Some(Some(body)) = latest.get(format!("{slice}/manifest").as_bytes()) else { continue };
        let manifest: Manifest = serde_json::from_slice(body).unwrap();
        let chunks: Vec<Vec<u8>> =
            (0..manifest.chunks).map(|i| latest[manifest.chunk_key(i).as_bytes()].clone().unwrap()).collect();
        assert_eq!(XxHash3_64::oneshot(&chunks.concat()), manifest.checksum);
        out.insert(slice, (manifest, chunks));
    }
    out
}

/// Writes, after slice `slice`'s newest snapshot `(last, _)`, another one
/// made of `chunks` (indexes are their position; `None` leaves a chunk
/// out) under a manifest that says `bytes` and `checksum`.
fn write_snapshot(topic: &str, slice: u32, last: &Manifest, chunks: &[Option<Vec<u8>>], bytes: u64, checksum: u64) {
    let seq = last.seq + 1;
    // In the format of `last`, under an attempt of its own.
    let attempt = last.attempt.map(|a| a ^ 1);
    let record = |key: String, value: Vec<u8>| Rec {
        partition: slice as i32,
        offset: -1,
        key: Some(key.into_bytes()),
        value: Some(value),
        timestamp: None,
        headers: Vec::new(),
    };
    let manifest = Manifest {
        format: MANIFEST_VERSION,
        seq,
        attempt,
        chunks: chunks.len() as u32,
        bytes,
        checksum,
        first_chunk_offset: None,
        ..last.clone()
    };
    let mut records: Vec<Rec> = chunks
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.clone().map(|c| record(manifest.chunk_key(i as u32), c)))
        .collect();
    records.push(record(format!("{slice}/manifest"), serde_json::to_vec(&manifest).unwrap()));
    produce(topic, &records);
}

/// `bytes` as chunks under a manifest that matches them.
fn write_whole(topic: &str, slice: u32, last: &Manifest, bytes: &[u8]) {
    let chunks: Vec<Option<Vec<u8>>> = bytes.chunks(CHUNK).map(|c| Some(c.to_vec())).collect();
    write_snapshot(topic, slice, last, &chunks, bytes.len() as u64, XxHash3_64::oneshot(bytes));
}

/// Recomputes a slice snapshot's checksums: its filter's (inside) and its own.
fn reseal(snapshot: &mut [u8]) {
    let filter = snapshot.windows(8).position(|w| w == b"DEDUPDSS").expect("a filter snapshot inside");
    let end = snapshot.len() - 8;
    seal_in_place(&mut snapshot[filter..end]);
    seal_in_place(snapshot);
}

/// Damages the newest snapshot of every slice, each in its own way; returns
/// for each slice the reason and a piece of the message its refusal must log.
fn damage(topic: &str) -> BTreeMap<u32, (&'static str, String)> {
    let snapshots = newest_snapshots(topic);
    assert_eq!(snapshots.len(), SLICES as usize, "a snapshot of every slice");
    let mut expect = BTreeMap::new();
    for (&slice, (m, chunks)) in &snapshots {
        assert!(chunks.len() > 4, "slice {slice}: {} chunks", chunks.len());
        let whole = chunks.concat();
        let mut parts: Vec<Option<Vec<u8>>> = chunks.iter().cloned().map(Some).collect();
        // How the daemon names a snapshot it read whole but cannot decode.
        let which = format!("snapshot {} (at slice offset {})", m.seq + 1, m.offset);
        let (reason, says) = match slice {
            // A truncated chunk (the broker kept half of it).
            0 => {
                let c = parts[2].as_mut().unwrap();
                let cut = c.len() / 2;
                c.truncate(c.len() - cut);
                write_snapshot(topic, slice, m, &parts, m.bytes, m.checksum);
                let short = m.bytes - cut as u64;
                ("checksum", format!("snapshot {} has {short} bytes with checksum ", m.seq + 1))
            }
            // A manifest naming a chunk the topic does not have.
            1 => {
                parts[3] = None;
                write_snapshot(topic, slice, m, &parts, m.bytes, m.checksum);
                ("missing_chunk", format!("chunk 3 of snapshot {} is missing", m.seq + 1))
            }
            // One flipped bit in a chunk.
            2 => {
                parts[1].as_mut().unwrap()[100] ^= 0x10;
                write_snapshot(topic, slice, m, &parts, m.bytes, m.checksum);
                ("checksum", format!("the manifest says {} bytes, {:#x}", m.bytes, m.checksum))
            }
            // A snapshot of another format version (a later dedupd's).
            3 => {
                let mut b = whole.clone();
                let later = SLICE_SNAPSHOT_VERSION + 1;
                b[8..10].copy_from_slice(&later.to_le_bytes());
                reseal(&mut b);
                write_whole(topic, slice, m, &b);
                (
                    "version",
                    format!(
                        "{which}: snapshot format version {later} is not supported (expected {SLICE_SNAPSHOT_VERSION})"
                    ),
                )
            }
            // A snapshot taken with another hash seed, under a manifest
            // claiming this filter's parameters: the snapshot's own
            // parameters are checked too.
            4 => {
                let mut b = whole.clone();
                let filter = b.windows(8).position(|w| w == b"DEDUPDSS").unwrap();
                let seed = filter + 10;
                let configured = u64::from_le_bytes(b[seed..seed + 8].try_into().unwrap());
                b[seed..seed + 8].copy_from_slice(&(configured ^ 1).to_le_bytes());
                reseal(&mut b);
                write_whole(topic, slice, m, &b);
                (
                    "parameters",
                    format!(
                        "{which}: snapshot was taken with seed = {} but this filter has seed = {configured}",
                        configured ^ 1
                    ),
                )
            }
            // A flipped bit under a manifest rewritten to match it: the
            // snapshot's own checksum catches it.
            _ => {
                let mut b = whole.clone();
                let at = b.len() / 2;
                b[at] ^= 0x01;
                write_whole(topic, slice, m, &b);
                ("checksum", format!("{which}: snapshot is corrupt: checksum expected"))
            }
        };
        expect.insert(slice, (reason, says));
    }
    expect
}

/// The keys of the output topic, asserting none appears twice.
fn output_keys(app: &str) -> HashSet<String> {
    let out = read_all(&format!("{app}.out"), Duration::from_secs(2));
    let ids: Vec<String> = out.values().flatten().map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap()).collect();
    let unique: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), unique.len(), "a key was emitted twice");
    unique
}

/// Produces `n` clicks from sequence number `from`: the first half new keys
/// named `prefix{seq}`, the second half copies of `p0`..`p399` (seen before, inside the window).
fn more_clicks(input: &str, from: u64, n: u64, prefix: &str) -> HashSet<String> {
    let mut new = HashSet::new();
    let records: Vec<Rec> = (from..from + n)
        .map(|i| {
            let id = if i < from + n / 2 { format!("{prefix}{i}") } else { format!("p{}", i % 400) };
            if id.starts_with(prefix) {
                new.insert(id.clone());
            }
            click(i, &id, BASE_TS + i as i64 * 10, partition_of(&id, SLICES))
        })
        .collect();
    produce(input, &records);
    new
}

fn metric(metrics: &str, series: &str) -> u64 {
    let line = metrics.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in\n{metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Every WARN and ERROR line is about the damaged snapshots.
fn only_snapshot_complaints(d: &Daemon) {
    let log = d.log_text();
    for line in warnings_and_errors(&log) {
        assert!(line.contains("snapshot"), "an unexpected complaint: {line}\n{log}");
    }
}

#[test]
fn damaged_checkpoints_are_refused_counted_and_the_policy_applies() {
    let input = unique("clicks-damage");
    create_topic(&input, SLICES as i32);
    let app = unique("damage");
    let mut env = app_env(&app, &input, "input-partitions", SLICES);
    env.push(("DEDUPD__CHECKPOINT__CHUNK_BYTES".into(), CHUNK.to_string()));
    let topic = format!("{app}.ckpt");

    // 600 clicks of 400 keys; a clean stop leaves a snapshot of every slice.
    let first: Vec<Rec> = (0..600u64)
        .map(|i| {
            let id = format!("p{}", i % 400);
            click(i, &id, BASE_TS + i as i64 * 10, partition_of(&id, SLICES))
        })
        .collect();
    produce(&input, &first);
    let mut d = Daemon::start("damage-first", &env);
    d.wait_ready(Duration::from_secs(60));
    wait_processed(&[&d], 600, Duration::from_secs(60));
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    d.assert_clean_log();
    let mut want: HashSet<String> = (0..400).map(|i| format!("p{i}")).collect();
    assert_eq!(output_keys(&app), want);

    let expect = damage(&topic);

    // on_corrupt = fail: the daemon stops, saying which snapshot and why.
    let mut failing = env.clone();
    failing.push(("DEDUPD__CHECKPOINT__ON_CORRUPT".into(), "fail".into()));
    let mut strict = Daemon::start("damage-fail", &failing);
    let status = strict.wait_exit(Duration::from_secs(60), "on_corrupt = fail should stop the daemon");
    assert!(!status.success());
    let log = strict.log_text();
    let refused = log.lines().find(|l| l.contains("the snapshot cannot be used (")).unwrap_or_else(|| panic!("{log}"));
    assert!(refused.ends_with("; stopping (checkpoint.on_corrupt = fail)"), "{refused}");
    assert!(log.contains("(checkpoint.on_corrupt = fail)"), "{log}");
    assert_eq!(output_keys(&app), want, "the failing daemon wrote output");

    // cold-start: each slice refuses its snapshot, says why, counts it, and
    // rebuilds from the log.
    let mut d = Daemon::start("damage-cold", &env);
    d.wait_ready(Duration::from_secs(60));
    let log = d.log_text();
    for (slice, (reason, says)) in &expect {
        let prefix = format!("slice {slice}: the snapshot cannot be used ({reason}): ");
        let line = log.lines().find(|l| l.contains(&prefix)).unwrap_or_else(|| panic!("no {prefix:?} in\n{log}"));
        assert!(line.contains(says.as_str()), "slice {slice}: {line:?} does not say {says:?}");
        assert!(line.contains(" ERROR "), "{line}");
        assert!(line.ends_with("; rebuilding the slice from its retained log (checkpoint.on_corrupt = cold-start)"));
    }
    only_snapshot_complaints(&d);
    let (_, metrics) = http_get(d.admin_port, "/metrics").unwrap();
    for (reason, n) in [("checksum", 3), ("missing_chunk", 1), ("version", 1), ("parameters", 1), ("malformed", 0)] {
        assert_eq!(
            metric(&metrics, &format!("dedupd_checkpoint_rejected_total{{reason=\"{reason}\"}}")),
            n,
            "{reason}"
        );
    }
    assert_eq!(metric(&metrics, "dedupd_restores_total{source=\"corrupt\"}"), SLICES as u64);
    assert_eq!(metric(&metrics, "dedupd_restores_total{source=\"snapshot\"}"), 0);
    // Nothing is emitted again, new keys come out, copies of the keys seen
    // before the damage are still dropped.
    want.extend(more_clicks(&input, 600, 100, "q"));
    wait_processed(&[&d], 700, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(output_keys(&app), want);
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());

    // Other filter settings (fpr, expected keys): the snapshots just written
    // are whole but do not fit; refused as `parameters`, rebuilt from the log.
    let mut changed = env.clone();
    changed.push(("DEDUPD__FILTER__FPR".into(), "0.001".into()));
    changed.push(("DEDUPD__FILTER__EXPECTED_KEYS".into(), "30000".into()));
    let mut d = Daemon::start("damage-params", &changed);
    d.wait_ready(Duration::from_secs(60));
    let log = d.log_text();
    for slice in 0..SLICES {
        let prefix = format!("slice {slice}: the snapshot cannot be used (parameters): the snapshot was taken with ");
        assert!(log.contains(&prefix), "no {prefix:?} in\n{log}");
    }
    only_snapshot_complaints(&d);
    let (_, metrics) = http_get(d.admin_port, "/metrics").unwrap();
    assert_eq!(metric(&metrics, "dedupd_checkpoint_rejected_total{reason=\"parameters\"}"), SLICES as u64);
    want.extend(more_clicks(&input, 700, 100, "r"));
    wait_processed(&[&d], 800, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(output_keys(&app), want);
    assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
}
