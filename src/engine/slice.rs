//! One slice's worker state: its filter, its position in the slice log and
//! the re-send marks of the router — everything its verdicts depend on, so
//! that a restored slice judges the rest of its log exactly as an
//! uninterrupted one (design invariants 1 and 5). Pure: no Kafka, no clock.

use std::collections::BTreeMap;

use super::record::{Extractor, InvalidRecord, RecordView};
use crate::filter::copy::CHUNK_BYTES;
use crate::filter::snapshot::{self as filter_snapshot, Skeleton, put_u32, put_u64};
use crate::filter::{FilterCopy, FilterParams, KeyHash, SlidingFilter, SnapshotError, Verdict};

/// Where the router read a slice record: its input topic, partition and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRef<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

impl<'a> SourceRef<'a> {
    /// Parses the router's `topic/partition/offset` stamp (topic names cannot
    /// contain `/`).
    pub fn parse(stamp: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(stamp).ok()?;
        let mut parts = text.rsplitn(3, '/');
        let offset = parts.next()?.parse().ok()?;
        let partition = parts.next()?.parse().ok()?;
        let topic = parts.next()?;
        (!topic.is_empty()).then_some(SourceRef { topic, partition, offset })
    }

    /// Writes the stamp `topic/partition/offset` into `buf` (no allocation
    /// per record; a topic name is at most 249 bytes, so the stamp always fits).
    pub fn stamp<'b>(buf: &'b mut [u8; STAMP_BYTES], topic: &str, partition: i32, offset: i64) -> &'b [u8] {
        format_into(buf, format_args!("{topic}/{partition}/{offset}"))
    }
}

/// Room for any stamp: a topic name of at most 249 bytes, two `/`, an `i32`
/// and an `i64` in decimal.
pub const STAMP_BYTES: usize = 320;

/// Formats `args` into `buf` and returns the bytes written, without
/// allocating: for the header values written per record.
///
/// # Panics
/// If the text does not fit in `buf` (callers size it for their format).
pub fn format_into<'b>(buf: &'b mut [u8], args: std::fmt::Arguments<'_>) -> &'b [u8] {
    use std::io::Write;
    let mut w = std::io::Cursor::new(&mut buf[..]);
    w.write_fmt(args).expect("the buffer is sized for the text");
    let n = w.position() as usize;
    &buf[..n]
}

/// A record of the slice log.
#[derive(Clone, Copy, Debug)]
pub struct SliceRecord<'a> {
    /// Offset in the slice log.
    pub offset: u64,
    pub record: RecordView<'a>,
    /// The router's stamp (repartition mode only).
    pub source: Option<SourceRef<'a>>,
}

/// What became of a slice record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SliceVerdict {
    Distinct,
    Duplicate {
        equal_timers: u8,
    },
    /// A record the router sent again after a restart: caught exactly by its
    /// input offset, not by the filter.
    Resend,
    Invalid(InvalidRecord),
}

/// Verdict counts of one slice (part of its state and snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceCounters {
    pub distinct: u64,
    pub duplicates: u64,
    pub resends: u64,
    pub invalid: u64,
}

/// The state of one slice.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceState {
    pub slice: u32,
    pub filter: SlidingFilter,
    /// The next slice offset to process: the state reflects every record below it.
    pub next_offset: u64,
    /// Highest input offset seen per input (topic, partition).
    pub resend_marks: BTreeMap<(String, i32), i64>,
    pub counters: SliceCounters,
    /// Pass-through: every readable record is distinct and the filter is not
    /// touched (a setting, not state: not in the snapshot). For measuring
    /// what deduplication costs.
    pub passthrough: bool,
}

impl SliceState {
    /// A fresh slice that starts at `offset`.
    pub fn new(slice: u32, params: FilterParams, offset: u64) -> Self {
        SliceState {
            slice,
            filter: SlidingFilter::new(params),
            next_offset: offset,
            resend_marks: BTreeMap::new(),
            counters: SliceCounters::default(),
            passthrough: false,
        }
    }

    /// Judges the next record of the slice log.
    pub fn process(&mut self, rec: &SliceRecord<'_>, extractor: &Extractor) -> SliceVerdict {
        self.judge(rec, extractor, |filter, hash, time_ms| filter.observe(hash, time_ms))
    }

    /// [`Self::process`] while `copy` (begun on this state) is in progress:
    /// the same verdict and state, and the copy stays the state as it was
    /// when the copy began.
    pub fn process_copying(
        &mut self,
        rec: &SliceRecord<'_>,
        extractor: &Extractor,
        copy: &mut SliceCopy,
    ) -> SliceVerdict {
        self.judge(rec, extractor, |filter, hash, time_ms| filter.observe_copying(hash, time_ms, &mut copy.filter))
    }

    fn judge(
        &mut self,
        rec: &SliceRecord<'_>,
        extractor: &Extractor,
        observe: impl FnOnce(&mut SlidingFilter, &KeyHash, u64) -> Verdict,
    ) -> SliceVerdict {
        self.next_offset = rec.offset + 1;
        if let Some(src) = rec.source {
            // A handful of input partitions: a scan finds the mark without
            // allocating a key per record.
            let mark = self.resend_marks.iter_mut().find(|((t, p), _)| *p == src.partition && t == src.topic);
            match mark {
                Some((_, mark)) if *mark >= src.offset => {
                    self.counters.resends += 1;
                    return SliceVerdict::Resend;
                }
                Some((_, mark)) => *mark = src.offset,
                None => {
                    self.resend_marks.insert((src.topic.to_string(), src.partition), src.offset);
                }
            }
        }
        let extracted = match extractor.extract(&rec.record, 0) {
            Ok(x) => x,
            Err(e) => {
                self.counters.invalid += 1;
                return SliceVerdict::Invalid(e);
            }
        };
        if self.passthrough {
            self.counters.distinct += 1;
            return SliceVerdict::Distinct;
        }
        let hash = KeyHash::of(self.filter.params().seed, &extracted.key);
        match observe(&mut self.filter, &hash, extracted.time_ms) {
            Verdict::Distinct => {
                self.counters.distinct += 1;
                SliceVerdict::Distinct
            }
            Verdict::Duplicate { equal_timers } => {
                self.counters.duplicates += 1;
                SliceVerdict::Duplicate { equal_timers }
            }
        }
    }
}

/// A slice's snapshot as the slice was at [`SliceState::begin_copy`],
/// copied while the slice goes on: everything but the filter's cells is
/// laid out when it begins, the cells are copied in chunks, copy-on-write
/// (see [`crate::filter::copy`]), straight into the snapshot's bytes. A
/// checkpoint takes one instead of stopping the slice for a full copy.
/// While it is in progress, every record of the slice must go through
/// [`SliceState::process_copying`] with it.
#[derive(Debug)]
pub struct SliceCopy {
    offset: u64,
    filter: FilterCopy,
}

/// A slice snapshot copied in full but for its checksums, which take a
/// pass over every byte: [`SliceImage::seal`] computes them on whichever
/// thread writes the snapshot out.
#[derive(Debug)]
pub struct SliceImage {
    /// The snapshot in its first `filter.end + 8` bytes (the buffer may be longer).
    buffer: Vec<u8>,
    /// Where the filter's own envelope lies.
    filter: std::ops::Range<usize>,
}

impl SliceImage {
    /// Computes the checksums; returns the snapshot's bytes, exactly what
    /// [`encode`] gives for the state.
    pub fn seal(&mut self) -> &[u8] {
        let end = self.filter.end + 8;
        filter_snapshot::seal_in_place(&mut self.buffer[self.filter.clone()]);
        filter_snapshot::seal_in_place(&mut self.buffer[..end]);
        &self.buffer[..end]
    }

    /// The buffer, for the next snapshot.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buffer
    }
}

impl SliceState {
    /// Starts a snapshot of this state in `buffer`'s memory (see
    /// [`SliceCopy`]; a checkpoint keeps one buffer for its snapshots).
    pub fn begin_copy(&self, mut buffer: Vec<u8>) -> SliceCopy {
        let head = head(self, Skeleton::of(&self.filter).len());
        if buffer.len() < head.len() {
            buffer.resize(head.len(), 0);
        }
        buffer[..head.len()].copy_from_slice(&head);
        // 8 bytes after the filter's encoding: the slice envelope's checksum.
        let filter = FilterCopy::begin(&self.filter, buffer, head.len(), 8, CHUNK_BYTES);
        SliceCopy { offset: self.next_offset, filter }
    }
}

impl SliceCopy {
    /// The slice offset the snapshot was taken at (it reflects every record below).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of filter cells still to copy.
    pub fn bytes_left(&self) -> usize {
        self.filter.bytes_left()
    }

    /// Copies up to `budget_bytes` more (at least one chunk) from `source`,
    /// the state the copy was begun on; returns whether it is complete.
    pub fn advance(&mut self, source: &SliceState, budget_bytes: usize) -> bool {
        self.filter.advance(&source.filter, budget_bytes)
    }

    /// Copies whatever is left from `source` (the state the copy was begun
    /// on): the snapshot of that state as it was when the copy began.
    pub fn finish(self, source: &SliceState) -> SliceImage {
        let (buffer, filter) = self.filter.finish(&source.filter);
        SliceImage { buffer, filter }
    }
}

/// The first bytes of a slice snapshot.
pub const MAGIC: [u8; 8] = *b"DEDUPDSL";
/// The slice snapshot format version.
pub const VERSION: u16 = 1;

/// Encodes a slice: header, position, marks, counters, then the filter's own
/// snapshot, all under one XXH3-64 checksum.
pub fn encode(state: &SliceState) -> Vec<u8> {
    let skeleton = Skeleton::of(&state.filter);
    let head = head(state, skeleton.len());
    let filter = head.len()..head.len() + skeleton.len();
    let mut buffer = vec![0; filter.end + 8];
    buffer[..head.len()].copy_from_slice(&head);
    skeleton.write(&state.filter, &mut buffer[filter.clone()]);
    let mut image = SliceImage { buffer, filter };
    image.seal();
    image.into_buffer()
}

/// The slice envelope up to its filter, whose encoding is `filter_len` bytes.
fn head(state: &SliceState, filter_len: usize) -> Vec<u8> {
    let mut w = filter_snapshot::begin(MAGIC, VERSION, 128);
    put_u32(&mut w, state.slice);
    put_u64(&mut w, state.next_offset);
    let c = &state.counters;
    for v in [c.distinct, c.duplicates, c.resends, c.invalid] {
        put_u64(&mut w, v);
    }
    put_u32(&mut w, state.resend_marks.len() as u32);
    for ((topic, partition), offset) in &state.resend_marks {
        w.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        w.extend_from_slice(topic.as_bytes());
        put_u32(&mut w, *partition as u32);
        put_u64(&mut w, *offset as u64);
    }
    put_u64(&mut w, filter_len as u64);
    w
}

/// Restores slice `slice` from `bytes`, checked against the configured filter.
pub fn decode(bytes: &[u8], slice: u32, params: &FilterParams) -> Result<SliceState, SnapshotError> {
    let mut r = filter_snapshot::open(bytes, MAGIC, VERSION)?;
    let got_slice = r.u32()?;
    if got_slice != slice {
        return Err(SnapshotError::ParameterMismatch {
            parameter: "slice",
            snapshot: got_slice.to_string(),
            configured: slice.to_string(),
        });
    }
    let next_offset = r.u64()?;
    let counters = SliceCounters { distinct: r.u64()?, duplicates: r.u64()?, resends: r.u64()?, invalid: r.u64()? };
    let mut resend_marks = BTreeMap::new();
    for _ in 0..r.u32()? {
        let len = usize::from(r.u16()?);
        let topic = String::from_utf8(r.take(len)?.to_vec())
            .map_err(|_| SnapshotError::Malformed("slice snapshot: a topic name is not UTF-8".into()))?;
        let partition = r.u32()? as i32;
        let offset = r.u64()? as i64;
        resend_marks.insert((topic, partition), offset);
    }
    let len = r.u64()? as usize;
    let filter = filter_snapshot::decode(r.take(len)?, params)?;
    r.finish()?;
    Ok(SliceState { slice, filter, next_offset, resend_marks, counters, passthrough: false })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterSpec;

    fn extractor() -> Extractor {
        Extractor {
            key: "record-key".parse().unwrap(),
            time: "record-timestamp".parse().unwrap(),
            max_record_bytes: 100,
        }
    }

    fn rec<'a>(offset: u64, key: &'a [u8], ts: i64, source: Option<SourceRef<'a>>) -> SliceRecord<'a> {
        SliceRecord {
            offset,
            record: RecordView { key: Some(key), payload: b"p", timestamp_ms: Some(ts), ..Default::default() },
            source,
        }
    }

    fn params() -> FilterParams {
        FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap()
    }

    #[test]
    fn resends_are_caught_by_input_offset() {
        let mut s = SliceState::new(3, params(), 0);
        let ex = extractor();
        let src = |o| Some(SourceRef { topic: "in", partition: 1, offset: o });
        assert_eq!(s.process(&rec(0, b"a", 10, src(5)), &ex), SliceVerdict::Distinct);
        assert_eq!(s.process(&rec(1, b"b", 11, src(6)), &ex), SliceVerdict::Distinct);
        // The router restarted and re-sent input offset 6, then went on.
        assert_eq!(s.process(&rec(2, b"b", 11, src(6)), &ex), SliceVerdict::Resend);
        assert_eq!(s.process(&rec(3, b"c", 12, src(7)), &ex), SliceVerdict::Distinct);
        assert!(matches!(s.process(&rec(4, b"a", 13, src(8)), &ex), SliceVerdict::Duplicate { .. }));
        let other = Some(SourceRef { topic: "in", partition: 2, offset: 0 });
        assert_eq!(s.process(&rec(5, b"d", 14, other), &ex), SliceVerdict::Distinct);
        assert_eq!(s.next_offset, 6);
        assert_eq!(s.counters, SliceCounters { distinct: 4, duplicates: 1, resends: 1, invalid: 0 });
    }

    #[test]
    fn snapshot_round_trip_and_refusals() {
        let mut s = SliceState::new(3, params(), 0);
        let ex = extractor();
        for i in 0..500u64 {
            let key = (i % 37).to_le_bytes();
            s.process(
                &rec(
                    i,
                    &key,
                    i as i64 * 3,
                    Some(SourceRef { topic: "t", partition: (i % 3) as i32, offset: i as i64 }),
                ),
                &ex,
            );
        }
        let bytes = encode(&s);
        assert_eq!(decode(&bytes, 3, &params()).unwrap(), s);
        assert!(matches!(
            decode(&bytes, 4, &params()),
            Err(SnapshotError::ParameterMismatch { parameter: "slice", .. })
        ));
        let mut bad = bytes.clone();
        bad[20] ^= 0xFF;
        assert!(matches!(decode(&bad, 3, &params()), Err(SnapshotError::ChecksumMismatch { .. })));
        let other = FilterSpec { window_ms: 2000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap();
        assert!(matches!(decode(&bytes, 3, &other), Err(SnapshotError::ParameterMismatch { .. })));
    }

    /// A copy taken while the slice goes on is the slice as it was when the
    /// copy began — filter, offset, re-send marks (a new input partition
    /// appears during the copy) and counters — and the slice itself judges
    /// exactly as one that was never copied.
    #[test]
    fn a_copy_is_the_state_when_it_began() {
        let big = FilterSpec { window_ms: 60_000, expected_keys: 200_000, ..FilterSpec::default() }.resolve().unwrap();
        let ex = extractor();
        let feed = |s: &mut SliceState, range: std::ops::Range<u64>, copy: Option<&mut SliceCopy>| {
            let mut copy = copy;
            let mut verdicts = Vec::new();
            for i in range {
                let key = (i % 5_000).to_le_bytes();
                let source = Some(SourceRef { topic: "t", partition: (i / 1_000) as i32, offset: i as i64 });
                let r = rec(i, &key, i as i64 * 2, source);
                verdicts.push(match copy.as_deref_mut() {
                    Some(c) => s.process_copying(&r, &ex, c),
                    None => s.process(&r, &ex),
                });
            }
            verdicts
        };
        let mut s = SliceState::new(3, big, 0);
        feed(&mut s, 0..20_000, None);
        let (expected, mut uncopied) = (encode(&s), s.clone());
        let mut copy = s.begin_copy(Vec::new());
        assert_eq!(copy.offset(), 20_000);
        assert!(copy.bytes_left() > 0);
        let with_copy = feed(&mut s, 20_000..25_000, Some(&mut copy));
        assert_eq!(with_copy, feed(&mut uncopied, 20_000..25_000, None));
        assert_eq!(s, uncopied);
        assert!(copy.finish(&s).seal() == expected, "the snapshot differs from the state when it began");
        // Into a reused, longer buffer (a larger snapshot before): the same bytes.
        let mut longer = encode(&s);
        longer.extend_from_slice(&[7; 100]);
        let mut again = uncopied.begin_copy(longer);
        again.advance(&uncopied, usize::MAX);
        assert!(again.finish(&uncopied).seal() == encode(&uncopied));
        assert_eq!(decode(&expected, 3, s.filter.params()).unwrap().next_offset, 20_000);
    }

    #[test]
    fn passthrough_judges_nothing() {
        let mut s = SliceState::new(0, params(), 0);
        s.passthrough = true;
        let ex = extractor();
        assert_eq!(s.process(&rec(0, b"a", 10, None), &ex), SliceVerdict::Distinct);
        assert_eq!(s.process(&rec(1, b"a", 11, None), &ex), SliceVerdict::Distinct);
        assert_eq!(s.filter.counters().events, 0);
        assert_eq!(s.counters.distinct, 2);
    }

    #[test]
    fn source_stamps() {
        let mut buf = [0u8; STAMP_BYTES];
        let stamp = SourceRef::stamp(&mut buf, "clicks.v2", 7, 12345);
        assert_eq!(SourceRef::parse(stamp), Some(SourceRef { topic: "clicks.v2", partition: 7, offset: 12345 }));
        // The longest stamp fits.
        let topic = "t".repeat(249);
        let stamp = SourceRef::stamp(&mut buf, &topic, i32::MIN, i64::MIN).to_vec();
        assert_eq!(stamp, format!("{topic}/{}/{}", i32::MIN, i64::MIN).as_bytes());
        let mut digits = [0u8; 20];
        assert_eq!(format_into(&mut digits, format_args!("{}", u64::MAX)), u64::MAX.to_string().as_bytes());
        assert_eq!(SourceRef::parse(b"nope"), None);
        assert_eq!(SourceRef::parse(b"/1/2"), None);
    }
}
