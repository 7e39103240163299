//! One slice's worker state: its filter, its position in the slice log, the
//! re-send marks of the router and the records waiting for the watermark —
//! everything its verdicts depend on, so that a restored slice judges the
//! rest of its log exactly as an uninterrupted one (design invariants 1, 5
//! and 7). Pure: no Kafka, no clock.
//!
//! Records are judged in event-time order within the lateness (see
//! [`super::order`]): one record of the log may release several judgments,
//! or none. Every judgment has a [`ReleasePos`]: the arrival (or idle flush)
//! that released it and its rank in that release. Release positions grow in
//! the order judgments are made, and follow from the log alone, so the last
//! output written says exactly how far a restored slice must replay silently.
//!
//! The waiting records themselves are not in the snapshot — only their
//! offsets: a restored slice re-reads them from its log
//! ([`SliceState::refill`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::counting::{self as counting_codec, CountMark};
use super::limits::{CountingSetup, SliceCounting};
use super::order::{OrderMarks, OrderSettings, Released, ReorderBuffer, Waiting};
use super::provenance::{ProvenanceSetup, SliceProvenance};
use super::record::{Extractor, InvalidRecord, RecordView};
use crate::filter::copy::CHUNK_BYTES;
use crate::filter::count::{self as count_codec, CountFilter};
use crate::filter::snapshot::{self as filter_snapshot, Skeleton, put_u32, put_u64};
use crate::filter::{DeleteRefusal, FilterCopy, FilterParams, KeyHash, SlidingFilter, SnapshotError, Verdict};

/// Where the router read a slice record: its input topic, partition and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRef<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

impl<'a> SourceRef<'a> {
    /// Parses the router's `topic/partition/offset` stamp (topic names cannot
    /// contain `/`). A topic name longer than Kafka allows
    /// ([`MAX_TOPIC_BYTES`]) is no stamp the router wrote (a forged or
    /// damaged frame): refused, so every source parsed here can be stamped
    /// again ([`SourceRef::stamp`]).
    pub fn parse(stamp: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(stamp).ok()?;
        let mut parts = text.rsplitn(3, '/');
        let offset = parts.next()?.parse().ok()?;
        let partition = parts.next()?.parse().ok()?;
        let topic = parts.next()?;
        (!topic.is_empty() && topic.len() <= MAX_TOPIC_BYTES).then_some(SourceRef { topic, partition, offset })
    }

    /// Writes the stamp `topic/partition/offset` into `buf` (no allocation
    /// and no `core::fmt` per record) and returns it; `None`, and nothing
    /// written, when `topic` is longer than Kafka allows
    /// ([`MAX_TOPIC_BYTES`]): such a name can only come from a forged or
    /// damaged record, and never makes this panic.
    pub fn stamp<'b>(buf: &'b mut [u8; STAMP_BYTES], topic: &str, partition: i32, offset: i64) -> Option<&'b [u8]> {
        if topic.len() > MAX_TOPIC_BYTES {
            return None;
        }
        let (mut p, mut o) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut len = 0;
        for part in [topic.as_bytes(), b"/", p.format(partition).as_bytes(), b"/", o.format(offset).as_bytes()] {
            // Always room (see `STAMP_BYTES`); checked all the same.
            buf.get_mut(len..len + part.len())?.copy_from_slice(part);
            len += part.len();
        }
        Some(&buf[..len])
    }
}

/// The longest topic name Kafka allows, in bytes.
pub const MAX_TOPIC_BYTES: usize = 249;

/// The first bytes of a slice-log record's value as the router writes it:
/// the stamp travels in front of the payload, not in a header. A header
/// costs librdkafka an allocated list and an entry per record on both sides
/// of the hop (writing it, parsing it, copying it on, freeing it): about a
/// tenth of repartition mode's CPU. The value's tail is the input payload,
/// byte for byte; the input's own headers stay headers.
///
/// Written by earlier releases (and read still): the stamp alone. Since
/// [`FRAME_MAGIC_READ`], the router's [`Reading`] follows the stamp.
pub const FRAME_MAGIC: [u8; 4] = *b"\0dS1";
/// [`FRAME_MAGIC`] of an input record whose value was null (a tombstone):
/// nothing follows the stamp, and the copies dedupd writes have a null
/// value again (an empty value would lose the delete for compacted topics).
pub const FRAME_MAGIC_NULL: [u8; 4] = *b"\0dS0";
/// A frame with the router's [`Reading`] (32 bytes) between the stamp and
/// the payload: the slice judges by it instead of reading the key and time
/// from the payload a second time (the hop's JSON parse and key hash, paid
/// once per record as in input-partitions mode).
pub const FRAME_MAGIC_READ: [u8; 4] = *b"\0dS3";
/// [`FRAME_MAGIC_READ`] of a null value.
pub const FRAME_MAGIC_READ_NULL: [u8; 4] = *b"\0dS2";

/// What the router read of an input record when it routed it: the key's
/// hash, with the seed it hashed with, and the event time. The same
/// extractor and the same bytes give the same reading in the slice, so a
/// slice may take it instead of reading the record again — when its own
/// hash seed is `seed` (a count kind hashes with its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub seed: u64,
    pub hash: KeyHash,
    pub time_ms: u64,
}

impl Reading {
    const BYTES: usize = 32;

    fn put(&self, buf: &mut Vec<u8>) {
        for word in [self.seed, self.hash.h1, self.hash.h2, self.time_ms] {
            buf.extend_from_slice(&word.to_be_bytes());
        }
    }

    fn get(bytes: &[u8; Self::BYTES]) -> Self {
        let word = |i: usize| u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Reading { seed: word(0), hash: KeyHash { h1: word(1), h2: word(2) }, time_ms: word(3) }
    }
}

/// Writes a slice-log value: the magic ([`FRAME_MAGIC_READ`] with a
/// `reading`, else [`FRAME_MAGIC`]; their `_NULL` forms for a null
/// payload), the stamp's length (u16, big endian), the stamp
/// `topic/partition/offset`, the reading if any, then `payload`. Reuses `buf`.
///
/// `None` (and `buf` left empty) when `topic` is longer than Kafka allows
/// ([`SourceRef::stamp`]).
#[must_use]
pub fn frame_into(
    buf: &mut Vec<u8>,
    topic: &str,
    partition: i32,
    offset: i64,
    reading: Option<&Reading>,
    payload: Option<&[u8]>,
) -> Option<()> {
    let mut stamp = [0u8; STAMP_BYTES];
    buf.clear();
    let stamp = SourceRef::stamp(&mut stamp, topic, partition, offset)?;
    buf.extend_from_slice(match (reading.is_some(), payload.is_some()) {
        (true, true) => &FRAME_MAGIC_READ,
        (true, false) => &FRAME_MAGIC_READ_NULL,
        (false, true) => &FRAME_MAGIC,
        (false, false) => &FRAME_MAGIC_NULL,
    });
    buf.extend_from_slice(&(stamp.len() as u16).to_be_bytes());
    buf.extend_from_slice(stamp);
    if let Some(r) = reading {
        r.put(buf);
    }
    buf.extend_from_slice(payload.unwrap_or_default());
    Some(())
}

/// A repartition-mode slice-log record's parts (see [`unframe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unframed<'a> {
    /// The input position (`None`: a control record, or a broken frame).
    pub source: Option<SourceRef<'a>>,
    /// The input record's payload.
    pub payload: Option<&'a [u8]>,
    /// The router's reading, if the frame carries one.
    pub reading: Option<Reading>,
}

/// A repartition-mode slice-log record's input position, the router's
/// reading and the input payload. Records written by an earlier release
/// carry the stamp as a `dedupd.source` header (`source_header`) and the
/// payload as is; the router removes that header from input records, so a
/// header on a framed record cannot be forged. A record with neither (a
/// control record) has no source.
pub fn unframe<'a>(source_header: Option<&'a [u8]>, value: &'a [u8]) -> Unframed<'a> {
    let whole = Unframed { source: None, payload: Some(value), reading: None };
    if let Some(stamp) = source_header {
        return Unframed { source: SourceRef::parse(stamp), ..whole };
    }
    let Some((magic, rest)) = value.split_first_chunk::<4>() else {
        return whole;
    };
    let (read, null) = match *magic {
        FRAME_MAGIC => (false, false),
        FRAME_MAGIC_NULL => (false, true),
        FRAME_MAGIC_READ => (true, false),
        FRAME_MAGIC_READ_NULL => (true, true),
        _ => return whole,
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return whole;
    };
    let len = u16::from_be_bytes(*len) as usize;
    let (Some(source), Some(rest)) = (rest.get(..len).and_then(SourceRef::parse), rest.get(len..)) else {
        return whole;
    };
    let (reading, rest) = match read {
        false => (None, rest),
        true => match rest.split_first_chunk::<{ Reading::BYTES }>() {
            Some((bytes, rest)) => (Some(Reading::get(bytes)), rest),
            None => return whole,
        },
    };
    match (null, rest) {
        (true, []) => Unframed { source: Some(source), payload: None, reading },
        (false, payload) => Unframed { source: Some(source), payload: Some(payload), reading },
        (true, _) => whole,
    }
}

/// Room for any stamp: a topic name of at most [`MAX_TOPIC_BYTES`], two
/// `/`, an `i32` and an `i64` in decimal.
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

/// A router's announcement, in a *progress record* of the slice log, of
/// how far it has routed one input partition it owns: the largest event
/// time routed from it, and whether the partition is idle (at its end with
/// nothing new for a while: then it holds nobody back). The slices keep
/// these per input partition and hold their watermark at the slowest
/// partition that is not idle (see [`SliceState::announce`]).
///
/// A router also lists the input partitions it does not route (or has
/// nothing to say of yet) with `owned` false: a slice that has not heard
/// of such a partition then holds at its start (time 0) until its router
/// announces it — otherwise a router that starts late, or takes a
/// partition over, would find its records behind a watermark the others
/// moved on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub time_ms: u64,
    pub idle: bool,
    /// `false`: only says that the partition exists (`time_ms` and `idle` unused).
    pub owned: bool,
}

impl<'a> Progress<'a> {
    /// The payload of a progress record: one `topic/partition/time/state`
    /// line per input partition (`state`: `0` routed, `1` idle, `u` not
    /// routed by this router).
    pub fn encode(entries: &[Progress<'_>]) -> Vec<u8> {
        let mut text = String::new();
        for e in entries {
            let state = match (e.owned, e.idle) {
                (false, _) => "u",
                (true, false) => "0",
                (true, true) => "1",
            };
            text.push_str(&format!("{}/{}/{}/{state}\n", e.topic, e.partition, e.time_ms));
        }
        text.into_bytes()
    }

    /// Parses a progress record's payload; `None` if any line is not one.
    pub fn parse_all(payload: &'a [u8]) -> Option<Vec<Progress<'a>>> {
        let text = std::str::from_utf8(payload).ok()?;
        text.lines()
            .map(|line| {
                let mut parts = line.rsplitn(4, '/');
                let (owned, idle) = match parts.next()? {
                    "0" => (true, false),
                    "1" => (true, true),
                    "u" => (false, false),
                    _ => return None,
                };
                let time_ms = parts.next()?.parse().ok()?;
                let partition = parts.next()?.parse().ok()?;
                let topic = parts.next().filter(|t| !t.is_empty())?;
                Some(Progress { topic, partition, time_ms, idle, owned })
            })
            .collect()
    }
}

/// What a slice knows of one input partition's progress (repartition mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputProgress {
    /// The largest event time a router announced having routed from it.
    pub time_ms: u64,
    /// Announced idle, and no record of it has come since.
    pub idle: bool,
}

/// A record of the slice log.
#[derive(Clone, Copy, Debug)]
pub struct SliceRecord<'a> {
    /// Offset in the slice log.
    pub offset: u64,
    pub record: RecordView<'a>,
    /// The router's stamp (repartition mode only).
    pub source: Option<SourceRef<'a>>,
    /// The router's reading of the record (repartition mode, this
    /// release's routers): judged by it when its seed is the slice's.
    pub reading: Option<Reading>,
}

/// Where a judgment comes in the order a slice makes them: released by the
/// arrival of the record at offset `after` (or, with `flush`, by an idle
/// flush right after it), as the `rank`-th judgment of that release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReleasePos {
    pub after: u64,
    pub flush: bool,
    pub rank: u32,
}

impl ReleasePos {
    /// Every judgment released by the arrival of `offset` or before it.
    pub fn through_arrival(offset: u64) -> Self {
        ReleasePos { after: offset, flush: false, rank: u32::MAX }
    }

    /// Parses the header form, `after/rank` or `after/flush/rank`.
    pub fn parse(text: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(text).ok()?;
        let mut parts = text.split('/');
        let after = parts.next()?.parse().ok()?;
        let (flush, rank) = match (parts.next()?, parts.next()) {
            ("flush", Some(rank)) => (true, rank),
            (rank, None) => (false, rank),
            _ => return None,
        };
        let rank = rank.parse().ok()?;
        parts.next().is_none().then_some(ReleasePos { after, flush, rank })
    }
}

impl fmt::Display for ReleasePos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.flush {
            write!(f, "{}/flush/{}", self.after, self.rank)
        } else {
            write!(f, "{}/{}", self.after, self.rank)
        }
    }
}

/// One judgment of a slice, in the order they are made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgment {
    /// The slice offset of the record judged.
    pub offset: u64,
    pub verdict: SliceVerdict,
    /// For a record that arrived more than the lateness behind the largest
    /// time seen: by how much it missed the watermark, in ms.
    pub late_by_ms: Option<u64>,
    /// With provenance on: the one source that may have delivered the key
    /// before this record (then it did: the index has no false negatives).
    pub first_source: Option<Arc<str>>,
    /// With a counting stage (`[limit]`, `[flag]`): what it decided, if the
    /// record was counted. A limited record's verdict is a duplicate.
    pub count: Option<CountMark>,
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
    /// Unreadable records and rejected time jumps.
    pub invalid: u64,
    /// Records judged after arriving behind the watermark.
    pub late: u64,
}

impl SliceCounters {
    /// Adds `other`'s counts (slices merged into one).
    pub fn add(&mut self, other: &SliceCounters) {
        self.distinct += other.distinct;
        self.duplicates += other.duplicates;
        self.resends += other.resends;
        self.invalid += other.invalid;
        self.late += other.late;
    }
}

/// The state of one slice.
#[derive(Clone, Debug)]
pub struct SliceState {
    pub slice: u32,
    pub filter: SlidingFilter,
    /// A count-based kind (`filter.kind = "rsbf" | "stable"`): it judges
    /// every released record instead of `filter`, which then stays empty.
    /// Records are still released in event-time order (the same order
    /// buffer), so its verdicts follow from the log alone as the timer
    /// filter's do; there are no timers, so nothing expires and late
    /// records are judged like any other, in their release order.
    pub count: Option<CountFilter>,
    /// The next slice offset to process: the state reflects every record below it.
    pub next_offset: u64,
    /// Highest input offset seen per input (topic, partition).
    pub resend_marks: BTreeMap<(String, i32), i64>,
    pub counters: SliceCounters,
    /// Pass-through: every readable record is distinct and the filter is not
    /// touched (a setting, not state: not in the snapshot). For measuring
    /// what deduplication costs.
    pub passthrough: bool,
    /// Records waiting for the watermark (or held as time-jump suspects):
    /// their key hashes, times and offsets.
    pub order: ReorderBuffer<KeyHash>,
    /// Held records a restored slice has not re-read from its log yet:
    /// offset and whether it is a suspect (see [`Self::refill`]).
    pub unfilled: Vec<(u64, bool)>,
    /// Idle flushes logged after a slice offset below this one have been
    /// applied (a slice flushes at most once after a record).
    pub flushes_next: u64,
    /// Which sources delivered which keys (`[provenance]`; `None`: off).
    pub provenance: Option<SliceProvenance>,
    /// The counting stage (`[limit]`, `[flag]`; `None`: off).
    pub counting: Option<SliceCounting>,
    /// Per input (topic, partition) announced by a router's progress
    /// record: how far it has been routed (repartition mode; empty
    /// otherwise). The watermark is held at the slowest one not idle.
    pub progress: BTreeMap<(String, i32), InputProgress>,
}

/// Equal when everything the snapshot holds is (the order settings and
/// pass-through are settings, the rest is state).
impl PartialEq for SliceState {
    fn eq(&self, other: &Self) -> bool {
        let held = |s: &SliceState| {
            let mut h: Vec<(u64, u64, bool)> = s.order.held().map(|(w, sus)| (w.position, w.time_ms, sus)).collect();
            h.sort_unstable();
            h
        };
        (self.slice, &self.filter, &self.count, self.next_offset, &self.resend_marks, &self.counters)
            == (other.slice, &other.filter, &other.count, other.next_offset, &other.resend_marks, &other.counters)
            && (self.order.marks(), &self.unfilled, self.flushes_next)
                == (other.order.marks(), &other.unfilled, other.flushes_next)
            && held(self) == held(other)
            && self.provenance == other.provenance
            && self.counting.as_ref().map(|c| counting_codec::encode(&c.stage))
                == other.counting.as_ref().map(|c| counting_codec::encode(&c.stage))
            && (&self.progress, self.order.overflows()) == (&other.progress, other.order.overflows())
    }
}

impl SliceState {
    /// A fresh slice that starts at `offset`.
    pub fn new(slice: u32, params: FilterParams, offset: u64, order: OrderSettings) -> Self {
        SliceState {
            slice,
            count: params.count.as_ref().map(|c| c.build().expect("count filter settings validated at start-up")),
            filter: SlidingFilter::new(params),
            next_offset: offset,
            resend_marks: BTreeMap::new(),
            counters: SliceCounters::default(),
            passthrough: false,
            order: ReorderBuffer::new(order),
            unfilled: Vec::new(),
            flushes_next: 0,
            provenance: None,
            progress: BTreeMap::new(),
            counting: None,
        }
    }

    /// Turns the counting stage on with `setup` (kept if restored with it;
    /// `dedup` is the dedup key's extractor), or off.
    pub fn set_counting(&mut self, setup: Option<&CountingSetup>, dedup: &Extractor) {
        match setup {
            None => self.counting = None,
            Some(setup) if self.counting.is_none() => self.counting = Some(setup.start(dedup)),
            Some(_) => {}
        }
    }

    /// Turns provenance on with `setup` (kept if restored with it), or off.
    pub fn set_provenance(&mut self, setup: Option<&ProvenanceSetup>) {
        match setup {
            None => self.provenance = None,
            Some(setup) if self.provenance.is_none() => self.provenance = Some(SliceProvenance::new(setup)),
            Some(_) => {}
        }
    }

    /// Takes in the next record of the slice log and appends to `out` the
    /// judgments it releases, in order (their release positions are
    /// `(rec.offset, rank in out)`).
    pub fn process(&mut self, rec: &SliceRecord<'_>, extractor: &Extractor, out: &mut Vec<Judgment>) {
        self.take(rec, extractor, out, |filter, hash, time_ms| filter.observe(hash, time_ms))
    }

    /// [`Self::process`] while `copy` (begun on this state) is in progress:
    /// the same judgments and state, and the copy stays the state as it was
    /// when the copy began.
    pub fn process_copying(
        &mut self,
        rec: &SliceRecord<'_>,
        extractor: &Extractor,
        copy: &mut SliceCopy,
        out: &mut Vec<Judgment>,
    ) {
        self.take(rec, extractor, out, |filter, hash, time_ms| copy.observe(filter, hash, time_ms))
    }

    /// An idle flush after the last record taken in: judges every record
    /// waiting for the watermark (release positions `(next_offset - 1,
    /// flush, rank)`).
    pub fn flush(&mut self, out: &mut Vec<Judgment>) {
        self.flushes_next = self.next_offset;
        self.release(out, |order, emit| order.flush(emit), |filter, hash, time_ms| filter.observe(hash, time_ms))
    }

    /// [`Self::flush`] while `copy` is in progress.
    pub fn flush_copying(&mut self, copy: &mut SliceCopy, out: &mut Vec<Judgment>) {
        self.flushes_next = self.next_offset;
        self.release(out, |order, emit| order.flush(emit), |filter, hash, time_ms| copy.observe(filter, hash, time_ms))
    }

    /// Takes in the progress record at `offset` (see [`Progress`]) and
    /// appends to `out` the judgments it releases (release positions
    /// `(offset, rank)`). It judges nothing itself.
    pub fn announce(&mut self, offset: u64, entries: &[Progress<'_>], out: &mut Vec<Judgment>) {
        self.announce_with(offset, entries, out, |filter, hash, time_ms| filter.observe(hash, time_ms))
    }

    /// [`Self::announce`] while `copy` is in progress.
    pub fn announce_copying(
        &mut self,
        offset: u64,
        entries: &[Progress<'_>],
        copy: &mut SliceCopy,
        out: &mut Vec<Judgment>,
    ) {
        self.announce_with(offset, entries, out, |filter, hash, time_ms| copy.observe(filter, hash, time_ms))
    }

    fn announce_with(
        &mut self,
        offset: u64,
        entries: &[Progress<'_>],
        out: &mut Vec<Judgment>,
        observe: impl FnMut(&mut SlidingFilter, &KeyHash, u64) -> Verdict,
    ) {
        self.next_offset = offset + 1;
        // Every router names every partition of the input topics it reads:
        // a topic no longer named (taken out of `input.topics`) would hold
        // the watermark where it stopped, for good.
        if !entries.is_empty() {
            self.progress.retain(|(topic, _), _| entries.iter().any(|e| e.topic == topic));
        }
        for e in entries {
            let known = self.progress.entry((e.topic.to_string(), e.partition)).or_default();
            if !e.owned {
                continue; // known now (from time 0, not idle) if it was not
            }
            // The largest time wins: an old owner's last announcement may
            // come after the new owner's first.
            known.time_ms = known.time_ms.max(e.time_ms);
            known.idle = e.idle;
        }
        let hold = self.hold();
        self.release(out, |order, emit| order.set_hold(hold, emit), observe)
    }

    /// A record of a known input partition is progress too (it need not
    /// wait for the next announcement), up to the largest time seen (an
    /// outlier is not progress), and a partition announced idle delivers
    /// again: it holds the others back again. The new hold applies to the
    /// record's own push.
    fn progress_from_record(&mut self, src: SourceRef<'_>, time_ms: u64) {
        let Some((_, p)) = self.progress.iter_mut().find(|((t, p), _)| *p == src.partition && t == src.topic) else {
            return;
        };
        let upto = self.order.marks().max_seen_ms.map_or(0, |m| m.min(time_ms));
        if p.idle || upto > p.time_ms {
            p.idle = false;
            p.time_ms = p.time_ms.max(upto);
            let hold = self.hold();
            self.order.hold_at(hold);
        }
    }

    /// The slowest input partition that is not idle: the watermark stays
    /// the lateness behind it (`None`: nothing holds).
    pub fn hold(&self) -> Option<u64> {
        self.progress.values().filter(|p| !p.idle).map(|p| p.time_ms).min()
    }

    fn take(
        &mut self,
        rec: &SliceRecord<'_>,
        extractor: &Extractor,
        out: &mut Vec<Judgment>,
        observe: impl FnMut(&mut SlidingFilter, &KeyHash, u64) -> Verdict,
    ) {
        let offset = rec.offset;
        self.next_offset = offset + 1;
        let now = |verdict| Judgment { offset, verdict, late_by_ms: None, first_source: None, count: None };
        if let Some(src) = rec.source {
            // A handful of input partitions: a scan finds the mark without
            // allocating a key per record.
            let mark = self.resend_marks.iter_mut().find(|((t, p), _)| *p == src.partition && t == src.topic);
            match mark {
                Some((_, mark)) if *mark >= src.offset => {
                    self.counters.resends += 1;
                    out.push(now(SliceVerdict::Resend));
                    return;
                }
                Some((_, mark)) => *mark = src.offset,
                None => {
                    self.resend_marks.insert((src.topic.to_string(), src.partition), src.offset);
                }
            }
        }
        let seed = self.hash_seed();
        // The router read this record with the same extractor; its reading
        // is what reading it again here would give.
        let (hash, time_ms) = match rec.reading {
            Some(r) if r.seed == seed => (r.hash, r.time_ms),
            _ => match extractor.extract(&rec.record, 0) {
                Ok(x) => (KeyHash::of(seed, &x.key), x.time_ms),
                Err(e) => {
                    self.counters.invalid += 1;
                    out.push(now(SliceVerdict::Invalid(e)));
                    return;
                }
            },
        };
        if self.passthrough {
            self.counters.distinct += 1;
            out.push(now(SliceVerdict::Distinct));
            return;
        }
        if let Some(src) = rec.source {
            self.progress_from_record(src, time_ms);
        }
        if let Some(c) = &mut self.counting
            && let Err(why) = c.arrived(offset, &rec.record, seed)
        {
            self.counters.invalid += 1;
            out.push(now(SliceVerdict::Invalid(why)));
            return;
        }
        if let Some(p) = &mut self.provenance {
            let topic = rec.source.map_or(p.setup.input_topic.as_str(), |s| s.topic);
            let source = p.setup.source.of(&rec.record, topic);
            p.arrived(offset, source);
        }
        self.release(out, |order, emit| order.push(time_ms, offset, hash, emit), observe)
    }

    /// Applies a delete request that is the slice log's record at `offset`
    /// (a control record `DELETE /v1/keys/{key}` wrote there): the key is forgotten at this
    /// point of the log, so a replay after a restart forgets it at the same
    /// point and every later verdict is the same. It judges nothing and
    /// releases nothing; records waiting for the watermark are not in the
    /// filter yet and are not touched.
    pub fn delete(&mut self, offset: u64, key: &[u8]) -> Result<(), DeleteRefusal> {
        self.next_offset = offset + 1;
        let hash = KeyHash::of(self.filter.params().seed, key);
        self.filter.delete(&hash)
    }

    /// [`Self::delete`] while `copy` is in progress.
    pub fn delete_copying(&mut self, offset: u64, key: &[u8], copy: &mut SliceCopy) -> Result<(), DeleteRefusal> {
        self.next_offset = offset + 1;
        let hash = KeyHash::of(self.filter.params().seed, key);
        match &mut copy.filter {
            Copied::Cells(cells) => self.filter.delete_copying(&hash, cells),
            // A count kind's copy is already whole, and its timer filter idle.
            Copied::Whole(_) => self.filter.delete(&hash),
        }
    }

    /// Applies a decision of `availability.policy` (logged in the flush log)
    /// to the slice log's record `rec`, instead of judging it: `deliver`
    /// observes its key at its time (inserted unless already in the window:
    /// the record was delivered) and counts it distinct; `drop` changes
    /// nothing but the counters. Neither goes through the order buffer: a
    /// policy record was released at once. The resend mark of its input
    /// partition moves as for any record. Returns `false`, and changes
    /// nothing, for a record whose key or time cannot be read:
    /// that one is judged as usual. `copy`: a snapshot copy in progress.
    pub fn decide(
        &mut self,
        rec: &SliceRecord<'_>,
        extractor: &Extractor,
        deliver: bool,
        copy: Option<&mut SliceCopy>,
    ) -> bool {
        let Ok(x) = extractor.extract(&rec.record, 0) else {
            return false;
        };
        self.next_offset = rec.offset + 1;
        if let Some(src) = rec.source {
            let mark = self.resend_marks.entry((src.topic.to_string(), src.partition)).or_insert(src.offset);
            *mark = (*mark).max(src.offset);
        }
        if !deliver {
            self.counters.duplicates += 1;
            return true;
        }
        self.counters.distinct += 1;
        if self.passthrough {
            return true;
        }
        let hash = KeyHash::of(self.hash_seed(), &x.key);
        match (self.count.as_mut(), copy) {
            (Some(c), _) => {
                c.observe(&hash);
            }
            (None, Some(copy)) => {
                copy.observe(&mut self.filter, &hash, x.time_ms);
            }
            (None, None) => {
                self.filter.observe(&hash, x.time_ms);
            }
        }
        true
    }

    /// Runs `step` on the order buffer and judges what it releases.
    fn release(
        &mut self,
        out: &mut Vec<Judgment>,
        step: impl FnOnce(&mut ReorderBuffer<KeyHash>, &mut dyn FnMut(Released<KeyHash>)),
        mut observe: impl FnMut(&mut SlidingFilter, &KeyHash, u64) -> Verdict,
    ) {
        let SliceState { order, filter, count, counters, provenance, counting, .. } = self;
        let max_clock_jump_ms = order.settings().max_clock_jump_ms;
        let mut judge = |r: Released<KeyHash>| match r {
            Released::Judge { time_ms, position, item, late_by_ms } => {
                counters.late += u64::from(late_by_ms.is_some());
                let mut verdict = match (count.as_mut(), counting.as_ref()) {
                    // The count kinds report no equal-timer groups.
                    (Some(c), _) => match c.observe(&item) {
                        true => Verdict::Duplicate { equal_timers: 0 },
                        false => Verdict::Distinct,
                    },
                    // The counting stage judges instead of the timer filter.
                    (None, Some(c)) if c.replaces_filter() => Verdict::Distinct,
                    (None, _) => observe(filter, &item, time_ms),
                };
                let mark = counting
                    .as_mut()
                    .and_then(|c| c.judge(position, &item, time_ms, matches!(verdict, Verdict::Distinct)));
                if mark.is_some_and(|m| m.limited) {
                    verdict = Verdict::Duplicate { equal_timers: 0 };
                }
                let verdict = match verdict {
                    Verdict::Distinct => {
                        counters.distinct += 1;
                        SliceVerdict::Distinct
                    }
                    Verdict::Duplicate { equal_timers } => {
                        counters.duplicates += 1;
                        SliceVerdict::Duplicate { equal_timers }
                    }
                };
                let duplicate = matches!(verdict, SliceVerdict::Duplicate { .. });
                let first_source = provenance.as_mut().and_then(|p| p.judged(position, &item, time_ms, duplicate));
                out.push(Judgment { offset: position, verdict, late_by_ms, first_source, count: mark });
            }
            Released::Reject { time_ms, position, ahead_ms, .. } => {
                counters.invalid += 1;
                if let Some(p) = provenance.as_mut() {
                    p.refused(position);
                }
                if let Some(c) = counting.as_mut() {
                    c.refused(position);
                }
                let why = InvalidRecord::time_jump(time_ms, ahead_ms, max_clock_jump_ms);
                let verdict = SliceVerdict::Invalid(why);
                out.push(Judgment { offset: position, verdict, late_by_ms: None, first_source: None, count: None });
            }
        };
        step(order, &mut judge);
    }

    /// What a held record re-read from the log contributes to the buffer:
    /// its time and key hash (`None` if it cannot be read, which a record
    /// that was held could).
    pub fn held_entry(&self, record: &RecordView<'_>, extractor: &Extractor) -> Option<(u64, KeyHash)> {
        let x = extractor.extract(record, 0).ok()?;
        Some((x.time_ms, KeyHash::of(self.hash_seed(), &x.key)))
    }

    /// Puts back the count key of a held record re-read from the log (a
    /// restored slice, with a separate count key). `false` if it cannot be
    /// read, which a record that was held could.
    pub fn refill_count_key(&mut self, offset: u64, record: &RecordView<'_>) -> bool {
        let seed = self.hash_seed();
        match &mut self.counting {
            Some(c) => c.arrived(offset, record, seed).is_ok(),
            None => true,
        }
    }

    /// The seed keys are hashed with: the judging filter's.
    fn hash_seed(&self) -> u64 {
        self.count.as_ref().map_or(self.filter.params().seed, CountFilter::hash_seed)
    }

    /// Puts back the held records of a restored slice, re-read from the
    /// log: `(offset, time, hash)` for every offset of [`Self::unfilled`].
    /// Fails, naming the first, if any is missing.
    pub fn refill(&mut self, records: Vec<(u64, u64, KeyHash)>) -> Result<(), u64> {
        let found: BTreeMap<u64, (u64, KeyHash)> = records.into_iter().map(|(o, t, h)| (o, (t, h))).collect();
        let (mut waiting, mut suspects) = (Vec::new(), Vec::new());
        for &(offset, suspect) in &self.unfilled {
            let &(time_ms, item) = found.get(&offset).ok_or(offset)?;
            let w = Waiting { time_ms, position: offset, item };
            if suspect { suspects.push(w) } else { waiting.push(w) }
        }
        self.order.put_back(waiting, suspects);
        self.unfilled.clear();
        Ok(())
    }

    /// The offsets of the held records, oldest first, with whether each is
    /// a suspect (what the snapshot stores of the buffer).
    pub fn held_offsets(&self) -> Vec<(u64, bool)> {
        let mut held: Vec<(u64, bool)> = self.order.held().map(|(w, suspect)| (w.position, suspect)).collect();
        held.extend_from_slice(&self.unfilled);
        held.sort_unstable();
        held
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
    filter: Copied,
}

/// How a snapshot's filter part is copied.
#[derive(Debug)]
enum Copied {
    /// The timer filter's cells, chunk by chunk while the slice goes on.
    Cells(FilterCopy),
    /// A count-based filter, encoded whole when the copy began: the slice
    /// stops for one copy of its share of `filter.memory` (a pause over
    /// 100 ms is logged as a warning, and measured in
    /// `dedupd_checkpoint_stall_seconds`). Copy-on-write would save less
    /// than for timers: every record after the warm-up writes random words
    /// all over the arrays (the resets and decrements).
    Whole(SliceImage),
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
        if let Some(count) = &self.count {
            let image = image(self, &count_codec::encode(count), buffer);
            return SliceCopy { offset: self.next_offset, filter: Copied::Whole(image) };
        }
        let head = head(self, Skeleton::of(&self.filter).len());
        if buffer.len() < head.len() {
            buffer.resize(head.len(), 0);
        }
        buffer[..head.len()].copy_from_slice(&head);
        // 8 bytes after the filter's encoding: the slice envelope's checksum.
        let filter = FilterCopy::begin(&self.filter, buffer, head.len(), 8, CHUNK_BYTES);
        SliceCopy { offset: self.next_offset, filter: Copied::Cells(filter) }
    }
}

impl SliceCopy {
    /// Judges an event of the timer filter while this copy is in progress
    /// (a count-based filter, copied whole, never comes here).
    fn observe(&mut self, filter: &mut SlidingFilter, hash: &KeyHash, time_ms: u64) -> Verdict {
        match &mut self.filter {
            Copied::Cells(c) => filter.observe_copying(hash, time_ms, c),
            Copied::Whole(_) => filter.observe(hash, time_ms),
        }
    }

    /// The slice offset the snapshot was taken at (it reflects every record below).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of filter cells still to copy.
    pub fn bytes_left(&self) -> usize {
        match &self.filter {
            Copied::Cells(c) => c.bytes_left(),
            Copied::Whole(_) => 0,
        }
    }

    /// Copies up to `budget_bytes` more (at least one chunk) from `source`,
    /// the state the copy was begun on; returns whether it is complete.
    pub fn advance(&mut self, source: &SliceState, budget_bytes: usize) -> bool {
        match &mut self.filter {
            Copied::Cells(c) => c.advance(&source.filter, budget_bytes),
            Copied::Whole(_) => true,
        }
    }

    /// Copies whatever is left from `source` (the state the copy was begun
    /// on): the snapshot of that state as it was when the copy began.
    pub fn finish(self, source: &SliceState) -> SliceImage {
        match self.filter {
            Copied::Cells(c) => {
                let (buffer, filter) = c.finish(&source.filter);
                SliceImage { buffer, filter }
            }
            Copied::Whole(image) => image,
        }
    }
}

/// The first bytes of a slice snapshot.
pub const MAGIC: [u8; 8] = *b"DEDUPDSL";
/// The slice snapshot format version (2: event-time order — lateness
/// counter, order marks, flush log position and held offsets; 3: the
/// provenance section; 4: the counting stage's section after it; 5: the
/// input partitions' progress after that, for the hold of repartition
/// mode). A slice is written in the oldest version that holds what it has —
/// without progress as version 4, without counting either as version 3,
/// and without provenance either as version 2, byte for byte — so a release
/// before any of them can restore it; all four are read.
pub const VERSION: u16 = 5;
/// The version of a slice with a counting stage and no progress.
const VERSION_COUNTING: u16 = 4;
/// The version of a slice with provenance and neither counting nor progress.
const VERSION_PROVENANCE: u16 = 3;

/// Encodes a slice: header, position, marks, counters, then the filter's own
/// snapshot, all under one XXH3-64 checksum.
pub fn encode(state: &SliceState) -> Vec<u8> {
    if let Some(count) = &state.count {
        let mut image = image(state, &count_codec::encode(count), Vec::new());
        image.seal();
        return image.into_buffer();
    }
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

/// The slice snapshot, but for its checksum, with `filter` (a count
/// filter's encoding) as its filter part, in `buffer`'s memory.
fn image(state: &SliceState, filter: &[u8], mut buffer: Vec<u8>) -> SliceImage {
    let head = head(state, filter.len());
    let range = head.len()..head.len() + filter.len();
    buffer.clear();
    buffer.reserve(range.end + 8);
    buffer.extend_from_slice(&head);
    buffer.extend_from_slice(filter);
    buffer.extend_from_slice(&[0; 8]);
    SliceImage { buffer, filter: range }
}

/// The slice envelope up to its filter, whose encoding is `filter_len` bytes.
fn head(state: &SliceState, filter_len: usize) -> Vec<u8> {
    // Without provenance the envelope is version 2's, byte for byte, so a
    // release before provenance can still restore it (a rollback).
    let version = match (state.progress.is_empty(), &state.counting, &state.provenance) {
        (false, _, _) => VERSION,
        (true, Some(_), _) => VERSION_COUNTING,
        (true, None, Some(_)) => VERSION_PROVENANCE,
        (true, None, None) => 2,
    };
    let mut w = filter_snapshot::begin(MAGIC, version, 128);
    put_u32(&mut w, state.slice);
    put_u64(&mut w, state.next_offset);
    let c = &state.counters;
    for v in [c.distinct, c.duplicates, c.resends, c.invalid, c.late] {
        put_u64(&mut w, v);
    }
    let marks = state.order.marks();
    for mark in [marks.max_seen_ms, marks.watermark_ms] {
        // u64::MAX stands for none: no event time is that large.
        put_u64(&mut w, mark.unwrap_or(u64::MAX));
    }
    put_u64(&mut w, state.flushes_next);
    let held = state.held_offsets();
    put_u64(&mut w, held.len() as u64);
    for (offset, suspect) in held {
        put_u64(&mut w, offset);
        w.push(u8::from(suspect));
    }
    put_u32(&mut w, state.resend_marks.len() as u32);
    for ((topic, partition), offset) in &state.resend_marks {
        w.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        w.extend_from_slice(topic.as_bytes());
        put_u32(&mut w, *partition as u32);
        put_u64(&mut w, *offset as u64);
    }
    match &state.provenance {
        None if version == 2 => {}
        // Version 3 and later without provenance: its flag says so.
        None => w.push(0),
        Some(p) => {
            w.push(1);
            let at = w.len();
            put_u64(&mut w, 0);
            p.encode(&mut w);
            let len = (w.len() - at - 8) as u64;
            w[at..at + 8].copy_from_slice(&len.to_le_bytes());
        }
    }
    if version >= VERSION_COUNTING {
        // A flag byte, then (1) the section's length and the stage's own
        // envelope (`DEDUPDSB`).
        match &state.counting {
            None => w.push(0),
            Some(c) => {
                let section = counting_codec::encode(&c.stage);
                w.push(1);
                put_u64(&mut w, section.len() as u64);
                w.extend_from_slice(&section);
            }
        }
    }
    if version >= VERSION {
        put_u64(&mut w, state.order.overflows());
        put_u32(&mut w, state.progress.len() as u32);
        for ((topic, partition), p) in &state.progress {
            w.extend_from_slice(&(topic.len() as u16).to_le_bytes());
            w.extend_from_slice(topic.as_bytes());
            put_u32(&mut w, *partition as u32);
            put_u64(&mut w, p.time_ms);
            w.push(u8::from(p.idle));
        }
    }
    put_u64(&mut w, filter_len as u64);
    w
}

/// Restores slice `slice` from `bytes`, checked against the configured
/// filter. The held records are listed in [`SliceState::unfilled`]: the
/// caller re-reads them from the log and calls [`SliceState::refill`].
pub fn decode(
    bytes: &[u8],
    slice: u32,
    params: &FilterParams,
    order: OrderSettings,
) -> Result<SliceState, SnapshotError> {
    decode_with(bytes, slice, params, order, None)
}

/// [`decode`] with provenance configured as `provenance`: a snapshot taken
/// without it (or before version 3) restores with an empty provenance
/// state; one taken with it while it is now off drops that state.
pub fn decode_with(
    bytes: &[u8],
    slice: u32,
    params: &FilterParams,
    order: OrderSettings,
    provenance: Option<&ProvenanceSetup>,
) -> Result<SliceState, SnapshotError> {
    decode_full(bytes, slice, params, order, provenance, None)
}

/// [`decode_with`] with the counting stage configured as `counting` (its
/// setup and the dedup key's extractor). A snapshot with the stage is
/// refused by a slice configured without it, and the other way round
/// (naming `counting`); one with other stage parameters is refused naming
/// the parameter.
pub fn decode_full(
    bytes: &[u8],
    slice: u32,
    params: &FilterParams,
    order: OrderSettings,
    provenance: Option<&ProvenanceSetup>,
    counting: Option<(&CountingSetup, &Extractor)>,
) -> Result<SliceState, SnapshotError> {
    let (mut r, version) = filter_snapshot::open_any(bytes, MAGIC, 2..=VERSION)?;
    let has_provenance = version >= VERSION_PROVENANCE;
    let got_slice = r.u32()?;
    if got_slice != slice {
        return Err(SnapshotError::ParameterMismatch {
            parameter: "slice",
            snapshot: got_slice.to_string(),
            configured: slice.to_string(),
        });
    }
    let next_offset = r.u64()?;
    let counters = SliceCounters {
        distinct: r.u64()?,
        duplicates: r.u64()?,
        resends: r.u64()?,
        invalid: r.u64()?,
        late: r.u64()?,
    };
    let mut mark = || r.u64().map(|v| (v != u64::MAX).then_some(v));
    let marks = OrderMarks { max_seen_ms: mark()?, watermark_ms: mark()? };
    let flushes_next = r.u64()?;
    let held = r.u64()?;
    if held > bytes.len() as u64 / 9 {
        return Err(SnapshotError::Malformed(format!("slice snapshot: {held} held records cannot fit")));
    }
    let mut unfilled = Vec::with_capacity(held as usize);
    for _ in 0..held {
        let offset = r.u64()?;
        let suspect = match r.take(1)?[0] {
            0 => false,
            1 => true,
            other => return Err(SnapshotError::Malformed(format!("slice snapshot: held flag {other}"))),
        };
        unfilled.push((offset, suspect));
    }
    let mut resend_marks = BTreeMap::new();
    for _ in 0..r.u32()? {
        let len = usize::from(r.u16()?);
        let topic = String::from_utf8(r.take(len)?.to_vec())
            .map_err(|_| SnapshotError::Malformed("slice snapshot: a topic name is not UTF-8".into()))?;
        let partition = r.u32()? as i32;
        let offset = r.u64()? as i64;
        resend_marks.insert((topic, partition), offset);
    }
    let mut restored_provenance = None;
    if has_provenance {
        match r.u8()? {
            0 => {}
            1 => {
                let len = r.u64()? as usize;
                let section = r.take(len)?;
                if let Some(setup) = provenance {
                    let mut sub = filter_snapshot::Reader::over(section);
                    match SliceProvenance::decode(&mut sub, setup) {
                        Ok(p) => {
                            sub.finish()?;
                            restored_provenance = Some(p);
                        }
                        // Provenance resized: it starts over, empty; the
                        // slice's dedup state is still good, so it is kept.
                        Err(SnapshotError::ParameterMismatch { parameter, snapshot, configured }) => log::warn!(
                            "slice {slice}: the snapshot's provenance has {parameter} = {snapshot}, now {configured}: \
                             provenance starts empty"
                        ),
                        Err(e) => return Err(e),
                    }
                }
            }
            other => return Err(SnapshotError::Malformed(format!("slice snapshot: provenance flag {other}"))),
        }
    }
    let mut restored_counting = None;
    if version >= VERSION_COUNTING {
        match r.u8()? {
            0 => {}
            1 => {
                let len = r.u64()? as usize;
                let section = r.take(len)?;
                let Some((setup, dedup)) = counting else {
                    return Err(counting_mismatch("on", "off"));
                };
                restored_counting = Some(setup.restore(section, dedup)?);
            }
            other => return Err(SnapshotError::Malformed(format!("slice snapshot: counting flag {other}"))),
        }
    }
    if restored_counting.is_none() && counting.is_some() {
        return Err(counting_mismatch("off", "on"));
    }
    let mut progress = BTreeMap::new();
    let mut overflows = 0;
    if version >= VERSION {
        overflows = r.u64()?;
        for _ in 0..r.u32()? {
            let len = usize::from(r.u16()?);
            let topic = String::from_utf8(r.take(len)?.to_vec())
                .map_err(|_| SnapshotError::Malformed("slice snapshot: a topic name is not UTF-8".into()))?;
            let partition = r.u32()? as i32;
            let time_ms = r.u64()?;
            let idle = match r.u8()? {
                0 => false,
                1 => true,
                other => return Err(SnapshotError::Malformed(format!("slice snapshot: idle flag {other}"))),
            };
            progress.insert((topic, partition), InputProgress { time_ms, idle });
        }
    }
    let len = r.u64()? as usize;
    let filter_bytes = r.take(len)?;
    r.finish()?;
    let (filter, count) = match &params.count {
        Some(spec) => {
            let configured =
                spec.build().map_err(|e| SnapshotError::Malformed(format!("count filter settings: {e}")))?;
            (SlidingFilter::new(params.clone()), Some(count_codec::decode(filter_bytes, &configured)?))
        }
        None => match count_codec::kind_of(filter_bytes) {
            Some(kind) => {
                return Err(SnapshotError::ParameterMismatch {
                    parameter: "kind",
                    snapshot: kind.as_str().to_string(),
                    configured: "timer".to_string(),
                });
            }
            None => (filter_snapshot::decode(filter_bytes, params)?, None),
        },
    };
    let mut state = SliceState {
        slice,
        filter,
        count,
        next_offset,
        resend_marks,
        counters,
        passthrough: false,
        order: ReorderBuffer::restore(order, marks, Vec::new(), Vec::new()),
        unfilled,
        flushes_next,
        provenance: restored_provenance,
        counting: restored_counting,
        progress,
    };
    let hold = state.hold();
    state.order.hold_at(hold);
    state.order.set_overflows(overflows);
    state.set_provenance(provenance);
    Ok(state)
}

/// A snapshot taken with the counting stage `snapshot` ("on"/"off") read by
/// a slice configured with it `configured`: counts cannot be made up or
/// dropped silently (the manifest fingerprint refuses it first).
fn counting_mismatch(snapshot: &str, configured: &str) -> SnapshotError {
    SnapshotError::ParameterMismatch {
        parameter: "counting",
        snapshot: snapshot.to_string(),
        configured: configured.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

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
            reading: None,
        }
    }

    fn params() -> FilterParams {
        FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap()
    }

    fn order(lateness_ms: u64) -> OrderSettings {
        OrderSettings { lateness_ms, max_clock_jump_ms: 100_000, jump_confirmations: 3 }
    }

    /// No lateness, and a slice's first record is its own reference (one
    /// confirmation): every record is judged as it arrives.
    fn immediate() -> OrderSettings {
        OrderSettings { jump_confirmations: 1, ..order(0) }
    }

    fn fresh(slice: u32, params: FilterParams) -> SliceState {
        SliceState::new(slice, params, 0, immediate())
    }

    /// Takes in one record with no lateness: exactly one judgment, its own.
    fn one(s: &mut SliceState, r: &SliceRecord<'_>, ex: &Extractor) -> SliceVerdict {
        let mut out = Vec::new();
        s.process(r, ex, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].offset, r.offset);
        out.pop().unwrap().verdict
    }

    /// `(source, payload)` of an unframed value that carries no reading.
    fn bare<'a>(u: Unframed<'a>) -> (Option<SourceRef<'a>>, Option<&'a [u8]>) {
        assert_eq!(u.reading, None, "{u:?}");
        (u.source, u.payload)
    }

    #[test]
    fn a_framed_value_gives_back_its_stamp_and_payload() {
        let mut buf = Vec::new();
        frame_into(&mut buf, "clicks", 2, 41, None, Some(br#"{"id":"a"}"#)).unwrap();
        let want = SourceRef { topic: "clicks", partition: 2, offset: 41 };
        assert_eq!(bare(unframe(None, &buf)), (Some(want), Some(&br#"{"id":"a"}"#[..])));
        // A null value (a tombstone) stays null, an empty one empty.
        let mut null = Vec::new();
        frame_into(&mut null, "clicks", 2, 41, None, None).unwrap();
        assert_eq!(bare(unframe(None, &null)), (Some(want), None));
        frame_into(&mut null, "clicks", 2, 41, None, Some(b"")).unwrap();
        assert_eq!(bare(unframe(None, &null)), (Some(want), Some(&b""[..])));
        // A payload that itself starts like a frame is framed again, and
        // unframed once.
        let inner = buf.clone();
        frame_into(&mut buf, "t", 0, 1, None, Some(&inner)).unwrap();
        assert_eq!(unframe(None, &buf).payload, Some(&inner[..]));
        // An earlier release's record: the header's stamp, the value as is.
        assert_eq!(bare(unframe(Some(b"clicks/2/41"), b"\0dS1xx")), (Some(want), Some(&b"\0dS1xx"[..])));
        // Control records and broken frames have no source and keep their value.
        for v in
            [&b""[..], b"{}", b"\0dS1", b"\0dS1\0", b"\0dS1\0\x09clicks/2", b"\0dS1\0\x03a/b", b"\0dS3\0\x03a/1/2\0"]
        {
            assert_eq!(bare(unframe(None, v)), (None, Some(v)), "{v:?}");
        }
    }

    #[test]
    fn a_frame_carries_the_routers_reading_before_the_payload() {
        let reading = Reading { seed: 7, hash: KeyHash { h1: u64::MAX, h2: 3 }, time_ms: 1_700_000_000_123 };
        let want = SourceRef { topic: "clicks", partition: 2, offset: 41 };
        let mut buf = Vec::new();
        for payload in [Some(&br#"{"id":"a"}"#[..]), Some(b""), None] {
            frame_into(&mut buf, "clicks", 2, 41, Some(&reading), payload).unwrap();
            assert_eq!(unframe(None, &buf), Unframed { source: Some(want), payload, reading: Some(reading) });
            // Cut anywhere inside the reading: not a frame.
            let cut = 4 + 2 + "clicks/2/41".len() + 31;
            assert_eq!(bare(unframe(None, &buf[..cut])), (None, Some(&buf[..cut])));
        }
    }

    /// The router's reading stands for the slice's own: the same verdicts
    /// whether a record carries it or is read again; a reading taken with
    /// another seed (a count kind's) is not used.
    #[test]
    fn a_routers_reading_gives_the_verdicts_of_reading_the_record_again() {
        let ex = extractor();
        let p = params();
        let keys: Vec<Vec<u8>> = (0..300u32).map(|i| format!("k{}", i % 97).into_bytes()).collect();
        let run = |with: Option<u64>| {
            let mut s = fresh(0, p.clone());
            let mut verdicts = Vec::new();
            for (i, key) in keys.iter().enumerate() {
                let ts = 10 * i as i64;
                let mut r = rec(i as u64, key, ts, None);
                r.reading = with.map(|seed| Reading { seed, hash: KeyHash::of(seed, key), time_ms: ts as u64 });
                verdicts.push(one(&mut s, &r, &ex));
            }
            verdicts
        };
        let again = run(None);
        assert!(again.iter().any(|v| matches!(v, SliceVerdict::Duplicate { .. })));
        assert_eq!(run(Some(p.seed)), again);
        // A reading whose seed is not the slice's is ignored (read again).
        assert_eq!(run(Some(p.seed ^ 1)), again);
        // And it is what the slice judges by: a wrong hash under the slice's
        // seed changes the verdicts (so the test above can fail).
        let mut s = fresh(0, p.clone());
        let mut r = rec(0, b"a", 5, None);
        one(&mut s, &r, &ex);
        r.offset = 1;
        r.reading = Some(Reading { seed: p.seed, hash: KeyHash::of(p.seed, b"b"), time_ms: 6 });
        assert_eq!(one(&mut s, &r, &ex), SliceVerdict::Distinct);
    }

    #[test]
    fn resends_are_caught_by_input_offset() {
        let mut s = fresh(3, params());
        let ex = extractor();
        let src = |o| Some(SourceRef { topic: "in", partition: 1, offset: o });
        assert_eq!(one(&mut s, &rec(0, b"a", 10, src(5)), &ex), SliceVerdict::Distinct);
        assert_eq!(one(&mut s, &rec(1, b"b", 11, src(6)), &ex), SliceVerdict::Distinct);
        // The router restarted and re-sent input offset 6, then went on.
        assert_eq!(one(&mut s, &rec(2, b"b", 11, src(6)), &ex), SliceVerdict::Resend);
        assert_eq!(one(&mut s, &rec(3, b"c", 12, src(7)), &ex), SliceVerdict::Distinct);
        assert!(matches!(one(&mut s, &rec(4, b"a", 13, src(8)), &ex), SliceVerdict::Duplicate { .. }));
        let other = Some(SourceRef { topic: "in", partition: 2, offset: 0 });
        assert_eq!(one(&mut s, &rec(5, b"d", 14, other), &ex), SliceVerdict::Distinct);
        assert_eq!(s.next_offset, 6);
        assert_eq!(s.counters, SliceCounters { distinct: 4, duplicates: 1, resends: 1, invalid: 0, late: 0 });
    }

    /// Without provenance the envelope is version 2 (a rollback to the
    /// release before provenance still restores it); with it, version 3.
    #[test]
    fn the_envelope_is_version_2_without_provenance() {
        let mut s = fresh(0, params());
        one(&mut s, &rec(0, b"a", 10, None), &extractor());
        let bytes = encode(&s);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 2);
        assert_eq!(decode(&bytes, 0, &params(), immediate()).unwrap(), s);
    }

    #[test]
    fn snapshot_round_trip_and_refusals() {
        let mut s = fresh(3, params());
        let ex = extractor();
        for i in 0..500u64 {
            let key = (i % 37).to_le_bytes();
            let source = Some(SourceRef { topic: "t", partition: (i % 3) as i32, offset: i as i64 });
            one(&mut s, &rec(i, &key, i as i64 * 3, source), &ex);
        }
        let bytes = encode(&s);
        assert_eq!(decode(&bytes, 3, &params(), immediate()).unwrap(), s);
        assert!(matches!(
            decode(&bytes, 4, &params(), immediate()),
            Err(SnapshotError::ParameterMismatch { parameter: "slice", .. })
        ));
        let mut bad = bytes.clone();
        bad[20] ^= 0xFF;
        assert!(matches!(decode(&bad, 3, &params(), immediate()), Err(SnapshotError::ChecksumMismatch { .. })));
        let other = FilterSpec { window_ms: 2000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap();
        assert!(matches!(decode(&bytes, 3, &other, immediate()), Err(SnapshotError::ParameterMismatch { .. })));
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
                let mut out = Vec::new();
                match copy.as_deref_mut() {
                    Some(c) => s.process_copying(&r, &ex, c, &mut out),
                    None => s.process(&r, &ex, &mut out),
                }
                verdicts.extend(out);
            }
            verdicts
        };
        let mut s = fresh(3, big);
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
        assert_eq!(decode(&expected, 3, s.filter.params(), immediate()).unwrap().next_offset, 20_000);
    }

    #[test]
    fn passthrough_judges_nothing() {
        let mut s = fresh(0, params());
        s.passthrough = true;
        let ex = extractor();
        assert_eq!(one(&mut s, &rec(0, b"a", 10, None), &ex), SliceVerdict::Distinct);
        assert_eq!(one(&mut s, &rec(1, b"a", 11, None), &ex), SliceVerdict::Distinct);
        assert_eq!(s.filter.counters().events, 0);
        assert_eq!(s.counters.distinct, 2);
    }

    /// Records wait for the watermark and are judged in time order; a
    /// snapshot keeps the waiting records' offsets, and a restored slice
    /// that re-reads them continues exactly as the uninterrupted one.
    #[test]
    fn event_time_order_survives_a_snapshot() {
        let ex = extractor();
        let mut rng = crate::testkit::workload::Rng::new(5);
        let keys: Vec<[u8; 8]> = (0..3_000u64).map(|i| (i % 700).to_le_bytes()).collect();
        let times: Vec<i64> = (0..3_000i64).map(|i| 10_000 + i * 2 + rng.below(300) as i64).collect();
        let feed = |s: &mut SliceState, range: std::ops::Range<usize>| {
            let mut out = Vec::new();
            for i in range {
                s.process(&rec(i as u64, &keys[i], times[i], None), &ex, &mut out);
            }
            out
        };
        let mut whole = SliceState::new(1, params(), 0, order(300));
        let expected = feed(&mut whole, 0..3_000);
        // Released in time order (ties by offset), never the arrival order.
        let released: Vec<(i64, u64)> = expected.iter().map(|j| (times[j.offset as usize], j.offset)).collect();
        assert!(released.windows(2).all(|w| w[0] <= w[1]));
        assert!(expected.len() < 3_000 && whole.order.waiting_len() > 0);
        assert!(expected.iter().all(|j| j.late_by_ms.is_none()));

        let mut first = SliceState::new(1, params(), 0, order(300));
        let mut got = feed(&mut first, 0..1_700);
        let bytes = encode(&first);
        let mut restored = decode(&bytes, 1, &params(), order(300)).unwrap();
        assert!(!restored.unfilled.is_empty());
        assert!(restored.refill(Vec::new()).is_err(), "a held record that cannot be re-read is an error");
        refill_from(&mut restored, &keys, &times, &ex);
        assert_eq!(restored, first);
        got.extend(feed(&mut restored, 1_700..3_000));
        assert_eq!(got, expected);
        assert_eq!(restored, whole);

        // An idle flush judges what is waiting.
        let mut out = Vec::new();
        whole.flush(&mut out);
        assert_eq!(whole.order.waiting_len(), 0);
        assert_eq!(expected.len() + out.len(), 3_000);
    }

    /// Puts back the held records of a restored slice, re-read from the
    /// "log" (record `o` has key `keys[o]` and time `times[o]`).
    fn refill_from(s: &mut SliceState, keys: &[[u8; 8]], times: &[i64], ex: &Extractor) {
        let reread = s
            .unfilled
            .iter()
            .map(|&(o, _)| {
                let r = rec(o, &keys[o as usize], times[o as usize], None);
                let (t, h) = s.held_entry(&r.record, ex).unwrap();
                (o, t, h)
            })
            .collect();
        s.refill(reread).unwrap();
    }

    fn count_params(kind: crate::filter::CountKind) -> FilterParams {
        let count = crate::filter::CountSpec::new(kind, 3 * 4096, 0.1);
        FilterSpec { window_ms: 1000, expected_keys: 1, count: Some(count), ..FilterSpec::default() }.resolve().unwrap()
    }

    /// A count-based slice: records still wait for the watermark; a
    /// snapshot copied while the slice goes on, restored and refilled,
    /// continues exactly as the uninterrupted slice (the PRNG state is in
    /// it); and a snapshot of one kind is refused by a slice of another.
    #[test]
    fn count_kinds_survive_a_snapshot_and_refuse_other_kinds() {
        use crate::filter::CountKind;
        let ex = extractor();
        let mut rng = crate::filter::random::Rng::new(3);
        let keys: Vec<[u8; 8]> = (0..8_000u64).map(|_| rng.below(2_500).to_le_bytes()).collect();
        let times: Vec<i64> = (0..8_000i64).map(|i| 10_000 + i * 2 + rng.below(100) as i64).collect();
        let feed = |s: &mut SliceState, range: std::ops::Range<usize>, mut copy: Option<&mut SliceCopy>| {
            let mut out = Vec::new();
            for i in range {
                let r = rec(i as u64, &keys[i], times[i], None);
                match copy.as_deref_mut() {
                    Some(c) => s.process_copying(&r, &ex, c, &mut out),
                    None => s.process(&r, &ex, &mut out),
                }
            }
            out
        };
        for kind in [CountKind::Rsbf, CountKind::Stable] {
            let configured = count_params(kind);
            let mut whole = SliceState::new(1, configured.clone(), 0, order(100));
            let expected = feed(&mut whole, 0..8_000, None);
            let duplicates = expected.iter().filter(|j| matches!(j.verdict, SliceVerdict::Duplicate { .. })).count();
            assert!(duplicates > 1_000 && duplicates < 7_000, "{kind:?}: {duplicates} duplicates");
            assert_eq!(whole.filter.counters().events, 0, "the idle timer filter judged");

            let mut first = SliceState::new(1, configured.clone(), 0, order(100));
            let mut got = feed(&mut first, 0..3_000, None);
            let at_copy = first.clone();
            let mut copy = first.begin_copy(vec![9; 5]);
            assert_eq!(copy.bytes_left(), 0);
            assert!(copy.advance(&first, 1));
            feed(&mut first, 3_000..3_500, Some(&mut copy));
            let bytes = copy.finish(&first).seal().to_vec();
            assert!(bytes == encode(&at_copy), "{kind:?}: the copy is not the state when it began");

            let mut restored = decode(&bytes, 1, &configured, order(100)).unwrap();
            refill_from(&mut restored, &keys, &times, &ex);
            assert_eq!(restored, at_copy);
            got.extend(feed(&mut restored, 3_000..8_000, None));
            assert_eq!(got, expected, "{kind:?}: verdicts differ after the restore");
            assert_eq!(restored, whole);

            let other = match kind {
                CountKind::Rsbf => CountKind::Stable,
                CountKind::Stable => CountKind::Rsbf,
            };
            let e = decode(&bytes, 1, &count_params(other), order(100)).unwrap_err();
            assert!(e.to_string().contains(&format!("kind = {}", kind.as_str())), "{e}");
            let e = decode(&bytes, 1, &params(), order(100)).unwrap_err();
            assert!(
                e.to_string().contains(&format!("kind = {} but this filter has kind = timer", kind.as_str())),
                "{e}"
            );
            let timer = encode(&fresh(1, params()));
            let e = decode(&timer, 1, &count_params(kind), order(100)).unwrap_err();
            assert!(e.to_string().contains("kind = timer"), "{e}");
            assert_ne!(configured.fingerprint(), count_params(other).fingerprint());
        }
    }

    /// With provenance on, records held for the watermark keep their source
    /// across a snapshot: the restored slice's provenance and judgments
    /// (first sources included) are the uninterrupted one's; every source
    /// of a key is listed; a snapshot read without provenance drops it.
    #[test]
    fn provenance_survives_a_snapshot_with_held_records() {
        use crate::engine::provenance::{ProvenanceSetup, SourceSpec};
        use crate::filter::provenance::{IndexChoice, ProvenanceSpec};
        let setup = ProvenanceSetup {
            source: SourceSpec::Header("src".into()),
            spec: ProvenanceSpec {
                bits: 4_096,
                hashes: 5,
                generation_ms: 1_000,
                keep_ms: 1_300,
                max_sources: 100,
                index: IndexChoice::Tree,
                tree_order: 2,
            },
            input_topic: "in".into(),
        };
        let ex = extractor();
        let mut rng = crate::testkit::workload::Rng::new(8);
        let keys: Vec<[u8; 8]> = (0..2_000u64).map(|_| rng.below(300).to_le_bytes()).collect();
        let sources: Vec<String> = (0..2_000).map(|_| format!("s{}", rng.below(12))).collect();
        let times: Vec<i64> = (0..2_000i64).map(|i| 10_000 + i / 4 + rng.below(200) as i64).collect();
        let feed = |s: &mut SliceState, range: std::ops::Range<usize>| {
            let mut out = Vec::new();
            for i in range {
                let headers = [("src", sources[i].as_bytes())];
                let record = RecordView {
                    key: Some(&keys[i]),
                    headers: &headers,
                    timestamp_ms: Some(times[i]),
                    ..Default::default()
                };
                s.process(&SliceRecord { offset: i as u64, record, source: None, reading: None }, &ex, &mut out);
            }
            out
        };
        let fresh = || {
            let mut s = SliceState::new(2, params(), 0, order(300));
            s.set_provenance(Some(&setup));
            s
        };
        let mut whole = fresh();
        let expected = feed(&mut whole, 0..2_000);
        let mut first = fresh();
        let mut got = feed(&mut first, 0..1_100);
        assert!(!first.provenance.as_ref().unwrap().pending.is_empty(), "some records are held with their source");
        let bytes = encode(&first);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), VERSION_PROVENANCE, "with provenance: version 3");
        let mut restored = decode_with(&bytes, 2, &params(), order(300), Some(&setup)).unwrap();
        let reread = restored
            .unfilled
            .clone()
            .iter()
            .map(|&(o, _)| {
                let r = RecordView {
                    key: Some(&keys[o as usize]),
                    timestamp_ms: Some(times[o as usize]),
                    ..Default::default()
                };
                let (t, h) = restored.held_entry(&r, &ex).unwrap();
                (o, t, h)
            })
            .collect();
        restored.refill(reread).unwrap();
        assert_eq!(restored, first);
        got.extend(feed(&mut restored, 1_100..2_000));
        assert_eq!(got, expected);
        assert_eq!(restored, whole);
        // The first sources named are right: the first copy in time order
        // (ties by offset) of each key judged a duplicate.
        let mut by_time: Vec<usize> = (0..2_000).collect();
        by_time.sort_by_key(|&i| (times[i], i));
        let mut first_of = BTreeMap::new();
        for &i in &by_time {
            first_of.entry(keys[i]).or_insert(&sources[i]);
        }
        let named: Vec<&Judgment> = expected.iter().filter(|j| j.first_source.is_some()).collect();
        assert!(named.len() > 100, "{} first sources named", named.len());
        for j in named {
            assert_eq!(j.first_source.as_deref(), Some(first_of[&keys[j.offset as usize]].as_str()), "{j:?}");
        }
        // Every source of a key judged in the kept generations is listed.
        let p = &whole.provenance.as_ref().unwrap().sources;
        let judged: BTreeSet<u64> = expected.iter().map(|j| j.offset).collect();
        for i in (0..2_000).filter(|&i| judged.contains(&(i as u64)) && times[i] >= 11_000) {
            let listed = p.query(&KeyHash::of(params().seed, &keys[i])).sources;
            assert!(listed.iter().any(|s| **s == *sources[i]), "record {i}: {} not in {listed:?}", sources[i]);
        }
        // Provenance turned off: the section is skipped; resized: it starts
        // empty and the rest of the slice is restored.
        assert!(decode(&bytes, 2, &params(), order(300)).unwrap().provenance.is_none());
        let resized = ProvenanceSetup { spec: ProvenanceSpec { bits: 2_048, ..setup.spec.clone() }, ..setup.clone() };
        let back = decode_with(&bytes, 2, &params(), order(300), Some(&resized)).unwrap();
        assert_eq!(back.provenance.unwrap().sources.live_sources(), 0);
        assert_eq!(back.filter, first.filter);
    }

    #[test]
    fn release_positions_order_and_parse() {
        let a = ReleasePos { after: 7, flush: false, rank: 3 };
        let f = ReleasePos { after: 7, flush: true, rank: 0 };
        assert!(a < f && f < ReleasePos { after: 8, flush: false, rank: 0 });
        assert!(a < ReleasePos::through_arrival(7) && ReleasePos::through_arrival(7) < f);
        for p in [a, f] {
            assert_eq!(ReleasePos::parse(p.to_string().as_bytes()), Some(p));
        }
        assert_eq!(a.to_string(), "7/3");
        assert_eq!(f.to_string(), "7/flush/0");
        for bad in ["", "7", "7/x", "7/flush", "7/late/1", "7/1/2"] {
            assert_eq!(ReleasePos::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn source_stamps() {
        let mut buf = [0u8; STAMP_BYTES];
        let stamp = SourceRef::stamp(&mut buf, "clicks.v2", 7, 12345).unwrap();
        assert_eq!(SourceRef::parse(stamp), Some(SourceRef { topic: "clicks.v2", partition: 7, offset: 12345 }));
        // The longest stamp fits.
        let topic = "t".repeat(249);
        let stamp = SourceRef::stamp(&mut buf, &topic, i32::MIN, i64::MIN).unwrap().to_vec();
        assert_eq!(stamp, format!("{topic}/{}/{}", i32::MIN, i64::MIN).as_bytes());
        assert_eq!(SourceRef::parse(&stamp).map(|s| s.topic), Some(&topic[..]));
        let mut digits = [0u8; 20];
        assert_eq!(format_into(&mut digits, format_args!("{}", u64::MAX)), u64::MAX.to_string().as_bytes());
        assert_eq!(SourceRef::parse(b"nope"), None);
        assert_eq!(SourceRef::parse(b"/1/2"), None);
    }

    /// A topic name longer than Kafka allows (only a forged or damaged record
    /// carries one) is refused, never a panic: no stamp is written, none is
    /// parsed, and a frame naming one is no frame.
    #[test]
    fn a_topic_name_longer_than_kafka_allows_is_refused_not_a_panic() {
        let mut buf = [0u8; STAMP_BYTES];
        for len in [250, 300, 320, 1000, 65_535] {
            let topic = "t".repeat(len);
            assert_eq!(SourceRef::stamp(&mut buf, &topic, i32::MAX, i64::MAX), None, "{len}");
            assert_eq!(SourceRef::stamp(&mut buf, &topic, 0, 0), None, "{len}");
            let stamp = format!("{topic}/1/2");
            assert_eq!(SourceRef::parse(stamp.as_bytes()), None, "{len}");
            // A forged slice-log frame with that stamp, as only a writer
            // other than the router could put into the slice log.
            let mut forged = FRAME_MAGIC.to_vec();
            forged.extend_from_slice(&(stamp.len() as u16).to_be_bytes());
            forged.extend_from_slice(stamp.as_bytes());
            forged.extend_from_slice(b"not json");
            assert_eq!(bare(unframe(None, &forged)), (None, Some(&forged[..])), "{len}");
            // The same stamp in an earlier release's header.
            assert_eq!(unframe(Some(stamp.as_bytes()), b"{}").source, None, "{len}");
            let mut frame = vec![1, 2, 3];
            assert_eq!(frame_into(&mut frame, &topic, 0, 0, None, Some(b"{}")), None, "{len}");
            assert!(frame.is_empty());
        }
    }

    /// A slice log of two input partitions (`in/0`, `in/1`): records
    /// (index into `times`/`keys`) and routers' progress records.
    #[derive(Clone)]
    enum Entry {
        Rec(usize),
        Announce(Vec<(i32, u64, bool)>),
    }

    /// Feeds `log[range]` (slice offset = index in `log`); returns every
    /// judgment as (record index, verdict, late).
    fn feed_log(
        s: &mut SliceState,
        log: &[Entry],
        range: std::ops::Range<usize>,
        keys: &[[u8; 8]],
        times: &[i64],
    ) -> Vec<(usize, SliceVerdict, bool)> {
        let ex = extractor();
        let mut out = Vec::new();
        for o in range {
            match &log[o] {
                Entry::Rec(i) => {
                    let src = SourceRef { topic: "in", partition: (*i % 2) as i32, offset: *i as i64 };
                    s.process(&rec(o as u64, &keys[*i], times[*i], Some(src)), &ex, &mut out);
                }
                Entry::Announce(a) => {
                    let entries: Vec<Progress<'_>> = a
                        .iter()
                        .map(|&(partition, time_ms, idle)| Progress {
                            topic: "in",
                            partition,
                            time_ms,
                            idle,
                            owned: true,
                        })
                        .collect();
                    let bytes = Progress::encode(&entries);
                    s.announce(o as u64, &Progress::parse_all(&bytes).unwrap(), &mut out);
                }
            }
        }
        let index = |o: u64| match log[o as usize] {
            Entry::Rec(i) => i,
            Entry::Announce(_) => panic!("a progress record was judged"),
        };
        out.into_iter().map(|j| (index(j.offset), j.verdict, j.late_by_ms.is_some())).collect()
    }

    /// Records of partition 1 (odd indices) stop at `from` while its router
    /// is gone; partition 0 goes on for `gap` records; then partition 1's
    /// records resume. Routers announce every 20 records, the dead one not
    /// at all. Returns the log and the log without any announcement.
    fn storm_log(times: &[i64], from: usize, gap: usize) -> (Vec<Entry>, Vec<Entry>) {
        let n = times.len();
        let mut order: Vec<usize> = (0..from).collect();
        order.extend((from..from + gap).filter(|i| i % 2 == 0));
        order.extend((from..from + gap).filter(|i| i % 2 == 1));
        order.extend(from + gap..n);
        let mut log = Vec::new();
        let mut max = [0u64; 2];
        for (k, &i) in order.iter().enumerate() {
            log.push(Entry::Rec(i));
            max[i % 2] = max[i % 2].max(times[i] as u64);
            let dead = k >= from && k < from + gap / 2;
            if k % 20 == 19 {
                let mut a = vec![(0, max[0], false)];
                if !dead {
                    a.push((1, max[1], false));
                }
                log.push(Entry::Announce(a));
            }
        }
        let plain = log.iter().filter(|e| matches!(e, Entry::Rec(_))).cloned().collect();
        (log, plain)
    }

    /// The failure of issue 19's rebalance storm, in one slice: an input
    /// partition's router dies, the other goes on far beyond the lateness,
    /// then the partition resumes. Without progress records its records are
    /// late and verdicts differ from the in-order run; with them the slice
    /// holds and every verdict is the in-order one. A snapshot taken in the
    /// middle of the hold (version 5) restores it exactly.
    #[test]
    fn an_unrouted_partition_holds_the_watermark() {
        let n = 2_000;
        let mut rng = crate::testkit::workload::Rng::new(19);
        let keys: Vec<[u8; 8]> = (0..n).map(|_| rng.below(150).to_le_bytes()).collect();
        let times: Vec<i64> = (0..n as i64).map(|i| 10_000 + i * 5).collect();
        let in_order: Vec<Entry> = (0..n).map(Entry::Rec).collect();
        let verdicts = |j: Vec<(usize, SliceVerdict, bool)>| -> BTreeMap<usize, (SliceVerdict, bool)> {
            j.into_iter().map(|(i, v, late)| (i, (v, late))).collect()
        };
        let finish = |s: &mut SliceState, out: &mut Vec<(usize, SliceVerdict, bool)>, log: &[Entry]| {
            let mut rest = Vec::new();
            // The end of the input: nothing holds any more.
            s.order.hold_at(None);
            s.flush(&mut rest);
            out.extend(rest.into_iter().map(|j| match log[j.offset as usize] {
                Entry::Rec(i) => (i, j.verdict, j.late_by_ms.is_some()),
                Entry::Announce(_) => unreachable!(),
            }));
        };
        let mut reference = SliceState::new(0, params(), 0, order(300));
        let mut want = feed_log(&mut reference, &in_order, 0..n, &keys, &times);
        finish(&mut reference, &mut want, &in_order);
        let want = verdicts(want);
        assert_eq!(want.len(), n);
        assert!(want.values().all(|(_, late)| !late));

        // 600 records of partition 0 = 3 s ahead of partition 1, lateness 300 ms.
        let (log, plain) = storm_log(&times, 600, 1_200);
        let mut without = SliceState::new(0, params(), 0, order(300));
        let mut got = feed_log(&mut without, &plain, 0..plain.len(), &keys, &times);
        finish(&mut without, &mut got, &plain);
        let late = got.iter().filter(|(_, _, late)| *late).count();
        assert!(late > 500, "{late} late without the hold");
        assert_ne!(verdicts(got), want, "the storm changes verdicts without the hold");

        let mut whole = SliceState::new(0, params(), 0, order(300));
        let mut got = feed_log(&mut whole, &log, 0..log.len(), &keys, &times);
        let (uninterrupted, at_end) = (got.clone(), whole.clone());
        finish(&mut whole, &mut got, &log);
        assert_eq!(verdicts(got), want, "with the hold, every verdict is the in-order one");
        assert_eq!(whole.order.overflows(), 0);

        // A snapshot in the hold: partition 1 silent, partition 0 far ahead.
        let mid = log.iter().position(|e| matches!(e, Entry::Rec(i) if *i == 1_400)).unwrap();
        let mut first = SliceState::new(0, params(), 0, order(300));
        let mut got = feed_log(&mut first, &log, 0..mid, &keys, &times);
        assert!(first.order.waiting_len() > 300, "{} waiting", first.order.waiting_len());
        let bytes = encode(&first);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), VERSION, "progress: version 5");
        let mut restored = decode(&bytes, 0, &params(), order(300)).unwrap();
        let reread = restored
            .unfilled
            .clone()
            .iter()
            .map(|&(o, _)| {
                let Entry::Rec(i) = log[o as usize] else { panic!("a progress record was held") };
                let r = rec(o, &keys[i], times[i], None);
                let (t, h) = restored.held_entry(&r.record, &extractor()).unwrap();
                (o, t, h)
            })
            .collect();
        restored.refill(reread).unwrap();
        assert_eq!(restored, first);
        assert_eq!(restored.hold(), first.hold());
        got.extend(feed_log(&mut restored, &log, mid..log.len(), &keys, &times));
        assert_eq!(got, uninterrupted, "the restored slice releases as the uninterrupted one");
        assert_eq!(restored, at_end);
    }

    /// An idle partition holds nobody back; a record of it clears the mark.
    /// The bound releases past the hold and is counted.
    #[test]
    fn idle_partitions_and_the_bound() {
        let keys: Vec<[u8; 8]> = (0..400u64).map(|i| i.to_le_bytes()).collect();
        let times: Vec<i64> = (0..400i64).map(|i| 10_000 + i * 10).collect();
        // A partition only said to exist holds at its start: nothing goes.
        let mut s = SliceState::new(0, params(), 0, order(100));
        let exists = Progress { topic: "in", partition: 1, time_ms: 0, idle: false, owned: false };
        let mut out = Vec::new();
        s.announce(0, &[exists], &mut out);
        assert_eq!(s.hold(), Some(0));
        let first = vec![Entry::Announce(vec![]), Entry::Rec(0), Entry::Rec(2), Entry::Rec(4), Entry::Rec(6)];
        assert!(feed_log(&mut s, &first, 1..5, &keys, &times).is_empty());
        // Once announced, "exists" changes nothing.
        s.announce(5, &[Progress { owned: true, time_ms: 10_050, ..exists }], &mut out);
        assert_eq!(s.hold(), Some(10_050));
        s.announce(6, &[exists], &mut out);
        assert_eq!(s.hold(), Some(10_050));
        assert_eq!(out.len(), 0, "the watermark is 9 950: nothing yet");
        // A topic no router names any more (taken out of input.topics) is
        // forgotten, or it would hold the watermark where it stopped.
        let mut gone = SliceState::new(0, params(), 0, order(100));
        let old = Progress { topic: "old", partition: 0, time_ms: 0, idle: false, owned: false };
        gone.announce(0, &[old, Progress { owned: true, time_ms: 5_000, ..exists }], &mut out);
        assert_eq!(gone.hold(), Some(0));
        gone.announce(1, &[Progress { owned: true, time_ms: 5_000, ..exists }], &mut out);
        assert_eq!(gone.hold(), Some(5_000));

        // Partition 1 announced idle at 10 000: only partition 0 (even
        // indices, announced at 12 000) holds.
        let mut log = vec![Entry::Announce(vec![(0, 12_000, false), (1, 10_000, true)])];
        log.extend((0..200).filter(|i| i % 2 == 0).map(Entry::Rec));
        let mut s = SliceState::new(0, params(), 0, order(100));
        let out = feed_log(&mut s, &log, 0..log.len(), &keys, &times);
        assert_eq!(out.len(), 95, "released up to 11 980 - 100");
        assert_eq!(s.hold(), Some(12_000));
        // A record of partition 1 (at 12 010) clears its idle mark, and is
        // its progress up to the largest time seen (11 980): partition 1
        // holds again, so the records of partition 0 that follow wait.
        log.push(Entry::Rec(201));
        assert!(feed_log(&mut s, &log, log.len() - 1..log.len(), &keys, &times).is_empty());
        assert_eq!(s.hold(), Some(11_980));
        assert!(!s.progress[&("in".to_string(), 1)].idle);
        let before = s.order.waiting_len();
        log.extend((202..260).filter(|i| i % 2 == 0).map(Entry::Rec));
        assert!(feed_log(&mut s, &log, log.len() - 29..log.len(), &keys, &times).is_empty());
        assert_eq!(s.order.waiting_len(), before + 29);
        assert_eq!(s.order.waiting_len(), 35);
        // Bounded: at most 30 held, the next record releases past the hold.
        s.order.set_max_held(30);
        log.push(Entry::Rec(260));
        let out = feed_log(&mut s, &log, log.len() - 1..log.len(), &keys, &times);
        assert!(!out.is_empty());
        assert_eq!(s.order.overflows(), 1);
        // The count is in the snapshot.
        let back = decode(&encode(&s), 0, &params(), order(100)).unwrap();
        assert_eq!(back.order.overflows(), 1);
        assert_eq!(back.progress, s.progress);
    }

    #[test]
    fn progress_payloads() {
        let entries = [
            Progress { topic: "clicks.v2", partition: 3, time_ms: 1_700_000_000_000, idle: false, owned: true },
            Progress { topic: "a/b", partition: 0, time_ms: 0, idle: true, owned: true },
            Progress { topic: "c", partition: 9, time_ms: 0, idle: false, owned: false },
        ];
        let bytes = Progress::encode(&entries);
        assert_eq!(Progress::parse_all(&bytes).unwrap(), entries);
        assert_eq!(Progress::parse_all(b"").unwrap(), []);
        for bad in [&b"t/1/2"[..], b"t/1/2/3", b"t/1/2/U", b"/1/2/0", b"t/x/2/0", b"t/1/-2/0", b"\xff/1/2/0"] {
            assert_eq!(Progress::parse_all(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
