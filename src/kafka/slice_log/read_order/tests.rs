//! The read order's encoding, builder and positions.

use super::*;

fn reading(offset: i64) -> Reading {
    Reading {
        seed: 99,
        hash: KeyHash { h1: offset as u64 * 3, h2: u64::MAX - offset as u64 },
        time_ms: 1000 + offset as u64,
    }
}

fn sample() -> ReadOrder {
    let mut b = ReadOrderBuilder::at(1000);
    for (t, p, o) in [("clicks", 0, 5), ("clicks", 0, 6), ("clicks", 2, 40), ("views", 0, 7), ("clicks", 0, 8)] {
        b.push(t, p, o, Some(reading(o)));
    }
    b.take()
}

#[test]
fn positions_follow_the_slice_log_and_index_its_records() {
    assert_eq!(position(0, 0), 0);
    assert_eq!(position(3, 5), 3 * MAX_RECORDS + 5);
    assert_eq!(log_offset(position(3, MAX_RECORDS - 1)), 3);
    // The last record of one read-order record comes before the first of the next.
    assert!(position(3, MAX_RECORDS - 1) < position(4, 0));
    let mut order = sample();
    order.first_position = position(7, 0);
    let positions: Vec<u64> = order.records().map(|(p, ..)| p).collect();
    assert_eq!(positions, (0..5).map(|i| position(7, i)).collect::<Vec<_>>());
    assert_eq!(order.locate(position(7, 2)), Some(("clicks", 2, 40)));
}

#[test]
fn the_builder_makes_runs_of_consecutive_offsets() {
    let order = sample();
    let runs: Vec<(&str, i32, i64, u32)> =
        order.runs.iter().map(|r| (&*r.topic, r.partition, r.first, r.count)).collect();
    // Offset 8 does not follow 6 (7 was not handed over): a new run.
    assert_eq!(runs, [("clicks", 0, 5, 2), ("clicks", 2, 40, 1), ("views", 0, 7, 1), ("clicks", 0, 8, 1)]);
    assert_eq!((order.first_position, order.len(), order.end_position()), (1000, 5, 1005));
    let records: Vec<_> = order.records().collect();
    assert_eq!(records[0], (1000, "clicks", 0, 5));
    assert_eq!(records[3], (1003, "views", 0, 7));
    assert_eq!(records[4], (1004, "clicks", 0, 8));
    for (position, topic, partition, offset) in records {
        assert_eq!(order.locate(position), Some((topic, partition, offset)));
    }
    assert_eq!(order.locate(999), None);
    assert_eq!(order.locate(1005), None);
}

#[test]
fn take_continues_from_the_end() {
    let mut b = ReadOrderBuilder::at(0);
    b.push("a", 0, 0, Some(reading(0)));
    let first = b.take();
    assert_eq!(b.push("a", 0, 1, Some(reading(1))), 1);
    let second = b.take();
    assert_eq!(check_follows(Some(first.end_position()), &second), Ok(()));
    assert_eq!(check_follows(Some(5), &second), Err(ReadOrderError::Gap { expected: 5, got: 1 }));
    assert_eq!(check_follows(None, &second), Ok(()));
    // Each record carries its own records' readings.
    assert_eq!(first.readings.map(|r| r.of.len()), Some(1));
    assert_eq!(second.readings.and_then(|r| r.get(0)), Some(reading(1)));
}

#[test]
fn the_cut_is_the_next_offset_per_partition() {
    let order = sample();
    let mut cut = BTreeMap::new();
    order.advance_cut(&mut cut, 1001);
    assert_eq!(cut, BTreeMap::from([(("clicks".to_string(), 0), 6)]));
    order.advance_cut(&mut cut, 1005);
    assert_eq!(
        cut,
        BTreeMap::from([
            (("clicks".to_string(), 0), 9),
            (("clicks".to_string(), 2), 41),
            (("views".to_string(), 0), 8)
        ])
    );
}

#[test]
fn encoding_round_trips_and_damage_is_refused() {
    let order = sample();
    let bytes = order.encode();
    assert_eq!(ReadOrder::decode(&bytes), Ok(order.clone()));
    // Two topics in the table, four runs of 18 bytes, the seed and five readings of 24.
    assert_eq!(bytes.len(), 8 + 2 + 8 + 2 + (2 + 6) + (2 + 5) + 4 + 4 * 18 + 1 + 8 + 5 * 24 + 8);
    let readings = order.readings.clone().expect("the builder keeps readings");
    let named: Vec<_> = order.records().map(|(.., offset)| offset).collect();
    for (index, offset) in named.into_iter().enumerate() {
        assert_eq!(readings.get(index as u64), Some(reading(offset)));
    }
    assert_eq!(readings.get(5), None);
    // A record without readings encodes the flag alone.
    let bare = ReadOrder { readings: None, ..order.clone() };
    assert_eq!(ReadOrder::decode(&bare.encode()), Ok(bare));

    let mut flipped = bytes.clone();
    flipped[20] ^= 1;
    assert!(matches!(ReadOrder::decode(&flipped), Err(ReadOrderError::ChecksumMismatch { .. })));
    let mut magic = bytes.clone();
    magic[0] = b'x';
    assert!(matches!(ReadOrder::decode(&magic), Err(ReadOrderError::BadMagic { .. })));
    let mut version = bytes.clone();
    version[8] = 9;
    assert_eq!(ReadOrder::decode(&version), Err(ReadOrderError::UnsupportedVersion { expected: 2, got: 9 }));
    assert!(matches!(ReadOrder::decode(&bytes[..10]), Err(ReadOrderError::Truncated { .. })));
    // A record cut short and re-sealed: the checksum holds, the fields do not.
    for cut in [5, 24, 5 * 24 + 8] {
        let resealed = seal(bytes[..bytes.len() - 8 - cut].to_vec());
        assert!(matches!(ReadOrder::decode(&resealed), Err(ReadOrderError::Malformed(_))), "{cut}");
    }
    // A readings flag other than 0 or 1.
    let mut flag = bytes[..bytes.len() - 8].to_vec();
    let at = flag.len() - 8 - 5 * 24 - 1;
    flag[at] = 2;
    let refused = ReadOrder::decode(&seal(flag));
    assert!(matches!(&refused, Err(ReadOrderError::Malformed(why)) if why.contains("readings flag 2")), "{refused:?}");
}

/// Read orders written by an older build (version 1: runs only, no
/// readings) stay readable: a slice log written before an upgrade is
/// judged on from where it was.
#[test]
fn a_version_1_record_reads_as_it_was_written() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/read-order-v1.bin");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
    assert_eq!(ReadOrder::decode(&bytes), Ok(ReadOrder { readings: None, ..sample() }));
}

#[test]
fn impossible_fields_are_refused_after_the_checksum() {
    let mut w = Vec::new();
    w.extend_from_slice(&MAGIC);
    w.extend_from_slice(&OLDEST_VERSION.to_le_bytes());
    put_u64(&mut w, 0);
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.push(b't');
    let body = w.clone();
    // A run of zero records, a run naming a missing topic, and a run count that cannot fit.
    for (index, count, runs) in [(0u16, 0u32, 1u32), (3, 1, 1), (0, 1, u32::MAX)] {
        let mut w = body.clone();
        put_u32(&mut w, runs);
        w.extend_from_slice(&index.to_le_bytes());
        put_u32(&mut w, 0);
        put_u64(&mut w, 0);
        put_u32(&mut w, count);
        assert!(matches!(ReadOrder::decode(&seal(w)), Err(ReadOrderError::Malformed(_))), "{index} {count} {runs}");
    }
}

/// A read-order record naming a topic longer than Kafka allows (a
/// forged one: routers name input topics) is refused with the reason,
/// not a panic; the longest name Kafka allows is read.
#[test]
fn a_topic_name_longer_than_kafka_allows_is_refused() {
    for (len, ok) in [(249, true), (250, false), (300, false), (65_535, false)] {
        let mut w = Vec::new();
        w.extend_from_slice(&MAGIC);
        w.extend_from_slice(&OLDEST_VERSION.to_le_bytes());
        put_u64(&mut w, 0);
        w.extend_from_slice(&1u16.to_le_bytes());
        w.extend_from_slice(&(len as u16).to_le_bytes());
        w.extend_from_slice("t".repeat(len).as_bytes());
        put_u32(&mut w, 1);
        w.extend_from_slice(&0u16.to_le_bytes());
        put_u32(&mut w, 0);
        put_u64(&mut w, 0);
        put_u32(&mut w, 1);
        match ReadOrder::decode(&seal(w)) {
            Ok(order) => assert!(ok && order.runs[0].topic.len() == len, "{len}"),
            Err(ReadOrderError::Malformed(why)) => {
                assert!(!ok, "{len}: {why}");
                assert!(why.contains(&format!("a topic name of {len} bytes, longer than Kafka allows (249)")), "{why}");
            }
            Err(e) => panic!("{len}: {e}"),
        }
    }
}
