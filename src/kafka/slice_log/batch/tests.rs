use super::*;
use crate::kafka::out_record::PackedHeaders;

fn entry<'a>(topic: &'a str, offset: i64, key: Option<&'a [u8]>, payload: Option<&'a [u8]>) -> BatchEntry<'a> {
    BatchEntry {
        source: SourceRef { topic, partition: 2, offset },
        reading: None,
        timestamp_ms: None,
        key,
        headers: OutHeaders::None,
        payload,
    }
}

/// Every part, present and absent, in several topics: read back as written,
/// with the headers in their order and a header without a value kept one.
#[test]
fn a_batch_reads_back_as_written() {
    let given: [(&str, Option<&[u8]>); 3] = [("trace", Some(b"abc")), ("none", None), ("empty", Some(b""))];
    let (mut bytes, mut lens) = (Vec::new(), Vec::new());
    PackedHeaders::pack(given.into_iter(), &mut bytes, &mut lens);
    let reading = Reading { seed: 7, hash: KeyHash { h1: 1, h2: u64::MAX }, time_ms: 1_700_000_000_000 };
    let entries = [
        BatchEntry {
            reading: Some(reading),
            timestamp_ms: Some(-5),
            headers: OutHeaders::Packed(PackedHeaders { bytes: &bytes, lens: &lens }),
            ..entry("clicks", 41, Some(b"k1"), Some(b"{\"id\":1}"))
        },
        entry("views", 0, None, None),
        entry("clicks", i64::MAX, Some(b""), Some(b"")),
    ];
    let mut builder = BatchBuilder::new(100, 1 << 20);
    for e in &entries {
        assert!(builder.fits(e));
        builder.push(e, |_| true).expect("pushed");
    }
    assert_eq!(builder.len(), 3);
    let expected_len = builder.encoded_len();
    let value = builder.finish();
    assert_eq!(value.len(), expected_len, "encoded_len is what finish writes");
    assert!(builder.is_empty() && builder.encoded_len() < value.len(), "the builder starts again");
    let batch = Batch::decode(&value).expect("reads");
    assert_eq!(batch.entries, entries);
    assert_eq!(batch.entries[0].headers.iter().collect::<Vec<_>>(), given);
    // An empty batch is one too (a builder finished with nothing).
    assert_eq!(Batch::decode(&builder.finish()).expect("reads").entries, []);
}

/// A batch kept in memory (its parts, as shared mode's pages are) reads
/// back as the same batch encoded does, and takes what its records take.
#[test]
fn a_batch_in_parts_reads_back_as_the_same_batch_encoded() {
    let entries = [
        entry("clicks", 41, Some(b"k1"), Some(b"{\"id\":1}")),
        entry("views", 0, None, None),
        entry("clicks", 42, Some(b""), Some(b"")),
    ];
    let (mut in_parts, mut encoded) = (BatchBuilder::new(100, 1 << 20), BatchBuilder::new(100, 1 << 20));
    in_parts.reserve(4096);
    for e in &entries {
        in_parts.push(e, |_| true).expect("pushed");
        encoded.push(e, |_| true).expect("pushed");
    }
    let value = encoded.finish();
    let mut parts = in_parts.take_parts();
    assert!(in_parts.is_empty() && in_parts.take_parts() == BatchParts::default(), "the builder starts again");
    assert_eq!(Batch::of_parts(&parts).expect("reads"), Batch::decode(&value).expect("reads"));
    assert!(parts.bytes() >= 4096, "the room reserved counts: {}", parts.bytes());
    parts.fit();
    // The envelope (magic, version, count, checksum and the topic table's lengths) is all the difference.
    assert_eq!(parts.bytes(), value.len() - ENVELOPE_BYTES - 2 * 2, "the room not filled was given back");
    assert_eq!(Batch::of_parts(&parts).expect("reads"), Batch::decode(&value).expect("reads"));
    let short =
        BatchParts { body: parts.body[..parts.body.len() - 1].to_vec(), topics: parts.topics.clone(), count: 3 };
    let err = Batch::of_parts(&short).expect_err("records cut short are refused");
    assert!(err.to_string().contains("record 2") && err.to_string().contains("runs past the end"), "{err}");
}

/// Cut anywhere, a byte changed anywhere, another magic or version: a
/// clear error, never a panic nor a record taken from damaged bytes.
#[test]
fn a_truncated_or_corrupt_batch_is_refused() {
    let mut builder = BatchBuilder::new(100, 1 << 20);
    for offset in 0..4 {
        builder.push(&entry("clicks", offset, Some(b"key"), Some(b"{\"id\":1}")), |_| true).expect("pushed");
    }
    let value = builder.finish();
    for cut in 0..value.len() {
        let err = Batch::decode(&value[..cut]).expect_err("a cut batch is refused");
        assert!(
            matches!(err, BatchError::Truncated { .. } | BatchError::ChecksumMismatch { .. }),
            "cut at {cut}: {err}"
        );
    }
    for at in 10..value.len() {
        let mut damaged = value.clone();
        damaged[at] ^= 0x20;
        let err = Batch::decode(&damaged).expect_err("a changed byte is refused");
        assert!(matches!(err, BatchError::ChecksumMismatch { .. }), "byte {at}: {err}");
        assert!(err.to_string().contains("checksum"), "{err}");
    }
    let mut other = value.clone();
    other[..8].copy_from_slice(b"dedupdRO");
    assert!(matches!(Batch::decode(&other), Err(BatchError::BadMagic { .. })));
    let mut newer = value.clone();
    newer[8] = 9;
    let err = Batch::decode(&newer).expect_err("another version");
    assert!(err.to_string().contains("version 9 is not supported"), "{err}");
}

/// Sealed bytes whose body lies (as only a foreign writer can make them):
/// refused by what is wrong, before anything is allocated for a count.
#[test]
fn a_sealed_batch_with_a_lying_body_is_malformed() {
    let sealed = |body: &[u8]| {
        let mut w = begin(MAGIC, VERSION, body.len());
        w.extend_from_slice(body);
        seal(w)
    };
    let malformed = |body: &[u8]| match Batch::decode(&sealed(body)) {
        Err(BatchError::Malformed(what)) => what,
        other => panic!("expected malformed, got {other:?}"),
    };
    // No topics, a count of four billion records.
    assert!(malformed(&[0, 0, 0xff, 0xff, 0xff, 0xff]).contains("at most 65536"));
    // No topics, one record naming topic 0.
    let mut body = vec![0, 0, 1, 0, 0, 0, 0, 0];
    body.extend_from_slice(&[0; 13]);
    assert!(malformed(&body).contains("record 0: it names topic 0 of 0"), "{}", malformed(&body));
    // A topic name longer than Kafka allows.
    let mut body = vec![1, 0];
    body.extend_from_slice(&300u16.to_le_bytes());
    body.extend_from_slice(&[b't'; 300]);
    body.extend_from_slice(&0u32.to_le_bytes());
    assert!(malformed(&body).contains("longer than Kafka allows"));
    // Bytes after the last record.
    let mut builder = BatchBuilder::new(10, 1 << 20);
    builder.push(&entry("clicks", 1, None, Some(b"x")), |_| true).expect("pushed");
    let value = builder.finish();
    let mut body = value[10..value.len() - 8].to_vec();
    body.push(0);
    assert!(malformed(&body).contains("unread bytes"));
    // Unknown parts.
    let at = body.len() - 1 - (4 + 1) - 2 - 1;
    body.pop();
    body[at] |= 0x80;
    assert!(malformed(&body).contains("unknown parts"), "{}", malformed(&body));
}

/// The builder starts a new batch before one would pass its bounds, in
/// records or in bytes; a record alone always fits; a record it cannot
/// write leaves the batch as it was.
#[test]
fn a_batch_stays_within_its_bounds() {
    let payload = [b'x'; 100];
    let mut builder = BatchBuilder::new(3, 1 << 20);
    for offset in 0..3 {
        assert!(builder.fits(&entry("clicks", offset, None, Some(&payload))));
        builder.push(&entry("clicks", offset, None, Some(&payload)), |_| true).expect("pushed");
    }
    assert!(!builder.fits(&entry("clicks", 3, None, Some(&payload))), "the record bound");
    let mut builder = BatchBuilder::new(1000, 400);
    let mut pushed = 0;
    while builder.fits(&entry("clicks", pushed, None, Some(&payload))) {
        builder.push(&entry("clicks", pushed, None, Some(&payload)), |_| true).expect("pushed");
        pushed += 1;
    }
    assert_eq!(pushed, 3);
    assert!(builder.finish().len() <= 400, "the byte bound");
    let huge = [b'x'; 1000];
    assert!(builder.fits(&entry("clicks", 0, None, Some(&huge))), "alone, any record fits");
    builder.push(&entry("clicks", 0, None, Some(b"{}")), |_| true).expect("pushed");
    let before = builder.encoded_len();
    let long = "t".repeat(MAX_TOPIC_BYTES + 1);
    assert_eq!(builder.push(&entry(&long, 1, None, None), |_| true), None);
    assert_eq!(builder.push(&entry("clicks", -1, None, None), |_| true), None);
    assert_eq!((builder.len(), builder.encoded_len()), (1, before), "nothing added");
    assert_eq!(Batch::decode(&builder.finish()).expect("reads").entries.len(), 1);
}
