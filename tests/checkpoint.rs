//! The checkpoint store on the real broker: restore reads only the newest
//! snapshot from the tail of its partition (the broker does not compact, so
//! the partition keeps every snapshot ever written), and falls back to the
//! whole partition, with the same verdicts as before, when the tail is not
//! what a complete write leaves.

mod support;

use dedupd::config::{Resolved, Settings};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use dedupd::kafka::checkpoint::{
    CheckpointStore, Fence, MANIFEST_VERSION, Manifest, ReadError, ReadStats, Rejection, WriteOutcome,
};
use dedupd::testkit::workload::Rng;
use support::*;
use twox_hash::XxHash3_64;

/// Small chunks, so a snapshot of a few tens of KiB has tens of chunks, like
/// a real 123 MiB slice has hundreds of 512 KiB ones.
const CHUNK: usize = 1024;
/// 40 chunks.
const SNAPSHOT: usize = 40 * CHUNK;
const PARAMS: &str = "test-params";

fn settings(topic: &str) -> Resolved {
    Settings::load_from(
        None,
        [
            ("DEDUPD__APP__ID".to_string(), unique("ckpt-app")),
            ("DEDUPD__KAFKA__BROKERS".to_string(), broker()),
            ("DEDUPD__CHECKPOINT__TOPIC".to_string(), topic.to_string()),
            ("DEDUPD__CHECKPOINT__CHUNK_BYTES".to_string(), CHUNK.to_string()),
        ],
    )
    .expect("settings")
}

/// A checkpoint topic with `partitions` slices and a store on it.
fn store(prefix: &str, partitions: i32) -> (String, CheckpointStore) {
    let topic = unique(prefix);
    create_topic(&topic, partitions);
    let store = CheckpointStore::new(&settings(&topic)).expect("checkpoint store");
    (topic, store)
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Writes `n` snapshots of `slice` in a chain, as the daemon does; returns
/// the last manifest and each snapshot's bytes.
fn write_chain(store: &CheckpointStore, slice: u32, n: u64, seed: u64) -> (Manifest, Vec<Vec<u8>>) {
    let mut previous: Option<Manifest> = None;
    let mut written = Vec::new();
    for k in 0..n {
        let b = bytes(seed + k, SNAPSHOT);
        previous = Some(store.write(slice, 1000 * (k + 1), &b, PARAMS, previous.as_ref()).expect("write"));
        written.push(b);
    }
    (previous.unwrap(), written)
}

/// What `read_latest` answers.
type Latest = Result<Option<(Manifest, Vec<u8>)>, ReadError>;

fn read(store: &CheckpointStore, slice: u32) -> (Latest, ReadStats) {
    let mut stats = ReadStats::default();
    let got = store.read_latest_counted(slice, &mut stats);
    eprintln!("slice {slice}: {stats:?}");
    (got, stats)
}

/// A record for `slice`'s partition.
fn record(slice: u32, key: &str, value: Option<&[u8]>) -> Rec {
    Rec {
        partition: slice as i32,
        offset: -1,
        key: Some(key.as_bytes().to_vec()),
        value: value.map(<[u8]>::to_vec),
        timestamp: None,
        headers: Vec::new(),
    }
}

/// The chunk records of a snapshot written by hand.
fn chunk_records(slice: u32, seq: u64, b: &[u8]) -> Vec<Rec> {
    b.chunks(CHUNK).enumerate().map(|(i, c)| record(slice, &format!("{slice}/{seq}/{i}"), Some(c))).collect()
}

fn manifest_record(slice: u32, m: &Manifest) -> Rec {
    record(slice, &format!("{slice}/manifest"), Some(&serde_json::to_vec(m).unwrap()))
}

/// A manifest as written before `first_chunk_offset` existed (format 1:
/// chunk keys `<slice>/<seq>/<i>`).
fn old_manifest(slice: u32, seq: u64, b: &[u8]) -> Manifest {
    Manifest {
        format: 1,
        slice,
        seq,
        offset: 77_000,
        chunks: b.chunks(CHUNK).count() as u32,
        bytes: b.len() as u64,
        checksum: XxHash3_64::oneshot(b),
        written_at_ms: 1,
        params: PARAMS.into(),
        first_chunk_offset: None,
        app: None,
        flush_log_offset: None,
        attempt: None,
    }
}

/// The most a tail read of one snapshot may cost: its chunks, its manifest
/// and the tombstones after it (keys and small values). Reading one older
/// snapshot as well would add another `SNAPSHOT`.
fn one_snapshot_bound(extra: usize) -> u64 {
    (SNAPSHOT + extra + 8 * 1024) as u64
}

#[test]
fn restore_reads_only_the_newest_snapshot() {
    let (topic, store) = store("ckpt-tail", 3);
    let slice = 2;
    let (last, written) = write_chain(&store, slice, 6, 100);
    assert_eq!(last.seq, 5);
    let (got, stats) = read(&store, slice);
    let (manifest, b) = got.expect("read").expect("a snapshot");
    assert_eq!(manifest, last);
    assert!(b == written[5], "restore returned other bytes than the newest snapshot's");
    assert_eq!(stats.full_scan, None, "the tail read should have sufficed");
    // The partition holds six snapshots (240 KiB); one is read.
    assert!(
        stats.bytes <= one_snapshot_bound(0),
        "read {} bytes for a {SNAPSHOT}-byte snapshot: older snapshots were read",
        stats.bytes
    );
    assert!(stats.records <= 40 + 1 + 40 + 2, "read {} records", stats.records);

    // The manifest's first chunk offset is where the broker put chunk 0.
    let all = read_all(&topic, std::time::Duration::from_secs(2));
    let key0 = manifest.chunk_key(0);
    assert!(key0.starts_with("2/5.") && key0.ends_with("/0"), "{key0}");
    let chunk0 = all[&(slice as i32)].iter().rfind(|r| r.key.as_deref() == Some(key0.as_bytes())).unwrap();
    assert_eq!(manifest.first_chunk_offset, Some(chunk0.offset as u64));

    // A slice without snapshots, next to one with them.
    let (got, stats) = read(&store, 0);
    assert!(got.expect("read").is_none());
    assert_eq!(stats.records, 0);

    // The next snapshot is found too (the tail now ends with other tombstones).
    let b = bytes(999, SNAPSHOT / 2 + 100);
    let newer = store.write(slice, 99_000, &b, PARAMS, Some(&last)).unwrap();
    let (got, stats) = read(&store, slice);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!((manifest, got_bytes == b), (newer, true));
    assert_eq!(stats.full_scan, None);
    assert!(stats.bytes <= one_snapshot_bound(0), "{stats:?}");
}

#[test]
fn restore_after_an_interrupted_write_uses_the_previous_manifest() {
    let (topic, store) = store("ckpt-interrupted", 2);
    let slice = 1;
    let (last, written) = write_chain(&store, slice, 3, 200);
    // A crash after half the chunks of the next snapshot: no manifest for them.
    let orphans = bytes(7, SNAPSHOT / 2);
    produce(&topic, &chunk_records(slice, last.seq + 1, &orphans));
    let (got, stats) = read(&store, slice);
    let (manifest, b) = got.unwrap().unwrap();
    assert_eq!(manifest, last);
    assert!(b == written[2]);
    assert_eq!(stats.full_scan, None);
    assert!(stats.bytes <= one_snapshot_bound(orphans.len()), "{stats:?}");

    // The restarted slice writes that sequence number again, under keys of
    // its own attempt: the orphans are not part of it.
    let b = bytes(8, SNAPSHOT);
    let newer = store.write(slice, 5000, &b, PARAMS, Some(&last)).unwrap();
    assert_eq!(newer.seq, last.seq + 1);
    let (got, stats) = read(&store, slice);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!(manifest, newer);
    assert!(got_bytes == b);
    assert_eq!(stats.full_scan, None);
    assert!(stats.bytes <= one_snapshot_bound(0), "{stats:?}");
}

#[test]
fn old_manifests_without_the_first_chunk_offset_are_read() {
    let (topic, store) = store("ckpt-old", 3);

    // Slice 1: an old-format snapshot after new ones. Its chunks lie right before it.
    let (last, _) = write_chain(&store, 1, 3, 300);
    let b = bytes(301, SNAPSHOT - 10);
    let old = old_manifest(1, last.seq + 1, &b);
    let json = String::from_utf8(serde_json::to_vec(&old).unwrap()).unwrap();
    assert!(!json.contains("first_chunk_offset"), "{json}");
    let mut records = chunk_records(1, old.seq, &b);
    records.push(manifest_record(1, &old));
    produce(&topic, &records);
    let (got, stats) = read(&store, 1);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!(manifest, old);
    assert!(got_bytes == b);
    assert_eq!(stats.full_scan, None);
    assert!(stats.bytes <= one_snapshot_bound(0), "{stats:?}");

    // Slice 2: an old-format snapshot with another record between its chunks
    // and its manifest. The tail read cannot place the chunks; the whole
    // partition still gives the right snapshot.
    let (last, _) = write_chain(&store, 2, 2, 400);
    let b = bytes(401, SNAPSHOT);
    let old = old_manifest(2, last.seq + 1, &b);
    let mut records = chunk_records(2, old.seq, &b);
    records.push(record(2, "2/0/0", None));
    records.push(manifest_record(2, &old));
    produce(&topic, &records);
    let (got, stats) = read(&store, 2);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!(manifest, old);
    assert!(got_bytes == b);
    assert!(stats.full_scan.is_some(), "{stats:?}");
}

#[test]
fn a_corrupt_newest_snapshot_is_reported_as_before() {
    let (topic, store) = store("ckpt-corrupt", 4);
    let corrupt = |got: Latest, want: Rejection| match got {
        Err(ReadError::Corrupt(kind, why)) => {
            assert_eq!(kind, want, "{why}");
            why
        }
        Err(e) => panic!("expected a corrupt checkpoint, got {e}"),
        Ok(found) => panic!("expected a corrupt checkpoint, got {:?}", found.map(|(m, _)| m)),
    };

    // Slice 1: the newest snapshot's checksum does not match its chunks.
    let (last, _) = write_chain(&store, 1, 2, 500);
    let b = bytes(501, SNAPSHOT);
    let mut bad = old_manifest(1, last.seq + 1, &b);
    bad.checksum ^= 1;
    let mut records = chunk_records(1, bad.seq, &b);
    records.push(manifest_record(1, &bad));
    produce(&topic, &records);
    let (got, stats) = read(&store, 1);
    assert_eq!(
        corrupt(got, Rejection::Checksum),
        format!(
            "slice 1: snapshot 2 has {SNAPSHOT} bytes with checksum {:#x}, the manifest says {SNAPSHOT} bytes, {:#x}",
            bad.checksum ^ 1,
            bad.checksum
        )
    );
    assert!(stats.full_scan.is_some());

    // Slice 2: a chunk of the newest snapshot is missing (in a new-format manifest).
    let (last, _) = write_chain(&store, 2, 2, 600);
    let b = bytes(601, SNAPSHOT);
    let mut records = chunk_records(2, last.seq + 1, &b);
    records.remove(3);
    let missing = Manifest { first_chunk_offset: last.first_chunk_offset, ..old_manifest(2, last.seq + 1, &b) };
    records.push(manifest_record(2, &missing));
    produce(&topic, &records);
    let (got, _) = read(&store, 2);
    assert_eq!(corrupt(got, Rejection::MissingChunk), "slice 2: chunk 3 of snapshot 2 is missing");

    // Slice 3: the newest manifest is not JSON.
    write_chain(&store, 3, 2, 700);
    produce(&topic, &[record(3, "3/manifest", Some(b"{not json"))]);
    let (got, _) = read(&store, 3);
    let why = corrupt(got, Rejection::Manifest);
    assert!(why.starts_with("slice 3: unreadable manifest: "), "{why}");
}

/// A producer that the broker fails for good (an idempotent producer's
/// refused sequence is fatal to it) fails one snapshot write; the next one
/// goes through a new producer, and restore reads it.
#[test]
fn a_write_after_a_fatal_producer_error_goes_through_a_new_producer() {
    let (_topic, store) = store("ckpt-fatal", 1);
    let slice = 0;
    let (last, _) = write_chain(&store, slice, 1, 300);
    store.fail_producer_for_test();
    let lost = bytes(9, SNAPSHOT);
    let failed = store.write(slice, 7000, &lost, PARAMS, Some(&last));
    assert!(failed.is_err(), "a write on a producer with a fatal error: {failed:?}");
    let b = bytes(10, SNAPSHOT);
    let newer = store.write(slice, 8000, &b, PARAMS, Some(&last)).expect("the next write, on a new producer");
    assert_eq!(newer.seq, last.seq + 1);
    let (got, _) = read(&store, slice);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!(manifest, newer);
    assert!(got_bytes == b);
}

/// Writes a snapshot with `first`, running `second` between its chunks and
/// its manifest (from the fence `first` checks there): an old and a new
/// owner of a slice writing at once.
fn interleaved(
    first: &CheckpointStore,
    write: (u32, u64, &[u8], &Manifest),
    second: impl Fn() -> Manifest,
) -> (Manifest, Manifest) {
    let (slice, offset, b, previous) = write;
    let checks = AtomicU32::new(0);
    let inner = Mutex::new(None);
    let still_owned = || {
        if checks.fetch_add(1, Ordering::SeqCst) == 1 {
            *inner.lock().unwrap() = Some(second());
        }
        true
    };
    let fence = Fence { still_owned: &still_owned, deadline: Instant::now() + Duration::from_secs(60) };
    let outer = match first.write_fenced(slice, (offset, None), b, PARAMS, Some(previous), &fence).expect("write") {
        WriteOutcome::Written(m) => m,
        dropped => panic!("{dropped:?}"),
    };
    let inner = inner.into_inner().unwrap().expect("the second write ran before the first one's manifest");
    (outer, inner)
}

/// An old owner of a slice (one that has not yet learnt it lost it) and its
/// new owner write snapshots of it at once, both after the snapshot the new
/// owner restored, so with the same sequence number: whichever manifest is
/// newest names its own chunks and restores, and no chunk key is shared.
/// (Were the chunk keys `<slice>/<seq>/<i>` alone, the second write would
/// overwrite the first one's chunks, and the first one's manifest, written
/// last, would not match them: restore refuses it and the slice cold-starts.)
#[test]
fn two_owners_writing_a_slice_at_once_never_share_chunk_keys() {
    let topic = unique("ckpt-owners");
    create_topic(&topic, 2);
    let cfg = settings(&topic);
    let (old_owner, new_owner) = (CheckpointStore::new(&cfg).unwrap(), CheckpointStore::new(&cfg).unwrap());
    let slice = 1;
    let (restored, _) = write_chain(&old_owner, slice, 2, 800);

    // The old owner's chunks, the new owner's whole write, the old owner's manifest.
    let (old_b, new_b) = (bytes(801, SNAPSHOT), bytes(802, SNAPSHOT - CHUNK / 2));
    let (old, new) = interleaved(&old_owner, (slice, 4000, &old_b, &restored), || {
        new_owner.write(slice, 3000, &new_b, PARAMS, Some(&restored)).expect("the new owner's write")
    });
    let (got, stats) = read(&old_owner, slice);
    let (manifest, got_bytes) = got.expect("the newest manifest restores").expect("a snapshot");
    assert_eq!(manifest, old);
    assert!(got_bytes == old_b, "the newest manifest's bytes are not its own chunks'");
    assert_eq!(stats.full_scan, None);
    assert_eq!(old.seq, new.seq, "both follow the snapshot restored");
    assert_ne!(old.attempt, new.attempt);
    let keys = |m: &Manifest| (0..m.chunks).map(|i| m.chunk_key(i)).collect::<std::collections::BTreeSet<_>>();
    assert!(keys(&old).is_disjoint(&keys(&new)), "{:?} / {:?}", keys(&old), keys(&new));

    // The other way round: the new owner's chunks, the old owner's whole
    // write, the new owner's manifest; both after the snapshot in force.
    let (old_b, new_b) = (bytes(803, SNAPSHOT + 7), bytes(804, SNAPSHOT));
    let (new, old) = interleaved(&new_owner, (slice, 6000, &new_b, &manifest), || {
        old_owner.write(slice, 5000, &old_b, PARAMS, Some(&manifest)).expect("the old owner's write")
    });
    assert!(keys(&old).is_disjoint(&keys(&new)));
    let (got, stats) = read(&new_owner, slice);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!(manifest, new);
    assert!(got_bytes == new_b);
    assert_eq!(stats.full_scan, None);

    // The owner that goes on snapshots after it as usual.
    let b = bytes(805, SNAPSHOT);
    let next = new_owner.write(slice, 7000, &b, PARAMS, Some(&manifest)).unwrap();
    let (got, _) = read(&new_owner, slice);
    assert_eq!(got.unwrap().map(|(m, got_bytes)| (m, got_bytes == b)), Some((next, true)));
}

/// A write whose slice is released while its chunks are written writes no
/// manifest and tombstones only its own chunks: the previous snapshot stays
/// in force, whole. One released before it starts writes nothing.
#[test]
fn a_write_fenced_off_leaves_the_previous_snapshot_in_force() {
    let (topic, store) = store("ckpt-fenced", 1);
    let slice = 0;
    let (last, written) = write_chain(&store, slice, 2, 900);
    let checks = AtomicU32::new(0);
    let released_after_the_chunks = || checks.fetch_add(1, Ordering::SeqCst) == 0;
    let fence = Fence { still_owned: &released_after_the_chunks, deadline: Instant::now() + Duration::from_secs(60) };
    let outcome = store.write_fenced(slice, (9000, None), &bytes(901, SNAPSHOT), PARAMS, Some(&last), &fence).unwrap();
    assert!(matches!(outcome, WriteOutcome::Dropped("its manifest")), "{outcome:?}");
    let (got, stats) = read(&store, slice);
    let (manifest, b) = got.unwrap().unwrap();
    assert_eq!(manifest, last);
    assert!(b == written[1]);
    assert_eq!(stats.full_scan, None);
    let records = &read_all(&topic, Duration::from_secs(2))[&0];
    let tombstoned = (0..last.chunks)
        .map(|i| last.chunk_key(i))
        .filter(|k| records.iter().any(|r| r.key.as_deref() == Some(k.as_bytes()) && r.value.is_none()));
    assert_eq!(tombstoned.count(), 0, "chunks of the snapshot in force were tombstoned");
    // The dropped write's own chunks, which no manifest will name, are tombstoned.
    let dropped: Vec<&Rec> = records
        .iter()
        .filter(|r| r.value.is_some() && r.key.as_deref().is_some_and(|k| k.starts_with(b"0/2.")))
        .collect();
    assert_eq!(dropped.len(), last.chunks as usize);
    for chunk in dropped {
        assert!(
            records.iter().any(|r| r.key == chunk.key && r.value.is_none() && r.offset > chunk.offset),
            "no tombstone for the dropped chunk {:?}",
            String::from_utf8_lossy(chunk.key.as_deref().unwrap())
        );
    }

    let before = records.len();
    let fence = Fence { still_owned: &|| false, deadline: Instant::now() + Duration::from_secs(60) };
    let outcome = store.write_fenced(slice, (9500, None), &bytes(902, SNAPSHOT), PARAMS, Some(&last), &fence).unwrap();
    assert!(matches!(outcome, WriteOutcome::Dropped("its chunks")), "{outcome:?}");
    assert_eq!(read_all(&topic, Duration::from_secs(2))[&0].len(), before, "a released slice's write wrote records");
}

/// A snapshot written before chunk keys carried an attempt (format 1) still
/// restores; the next snapshot is written in the current format and
/// tombstones the old one's chunks under their old keys.
#[test]
fn a_format_1_snapshot_restores_and_is_followed_by_the_current_format() {
    let (topic, store) = store("ckpt-format1", 2);
    let slice = 1;
    let b = bytes(950, SNAPSHOT + 100);
    let old = Manifest { app: None, ..old_manifest(slice, 4, &b) };
    let mut records = chunk_records(slice, old.seq, &b);
    assert_eq!(records[0].key.as_deref(), Some(b"1/4/0".as_slice()));
    records.push(manifest_record(slice, &old));
    produce(&topic, &records);
    let (got, stats) = read(&store, slice);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!(manifest, old);
    assert!(got_bytes == b);
    assert_eq!(stats.full_scan, None);

    let b = bytes(951, SNAPSHOT);
    let newer = store.write(slice, 80_000, &b, PARAMS, Some(&old)).unwrap();
    assert_eq!((newer.format, newer.seq), (MANIFEST_VERSION, 5));
    assert!(newer.attempt.is_some());
    let (got, stats) = read(&store, slice);
    let (manifest, got_bytes) = got.unwrap().unwrap();
    assert_eq!(manifest, newer);
    assert!(got_bytes == b);
    assert_eq!(stats.full_scan, None);
    // Tombstones are queued, not waited for: the next write's flush sends them.
    store.write(slice, 90_000, &bytes(952, CHUNK), PARAMS, Some(&newer)).unwrap();
    let all = read_all(&topic, Duration::from_secs(2));
    for i in 0..old.chunks {
        let key = format!("1/4/{i}");
        assert!(
            all[&1].iter().any(|r| r.key.as_deref() == Some(key.as_bytes()) && r.value.is_none()),
            "no tombstone for {key}"
        );
    }
}
