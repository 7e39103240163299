//! Where a slice resumes (design invariants 5 and 7).
//!
//! Load the newest valid snapshot (taken at slice offset X); re-read from
//! the slice log the records that were waiting for the watermark at X (the
//! snapshot lists their offsets); read the idle flushes logged since the
//! snapshot; read the tail of partition s of each topic the slice writes
//! (the highest release position there: that topic's bound Y, see
//! [`super::replay`]). Then replay from X, writing a judgment's record to a
//! topic only beyond that topic's Y, and go on. Because the engine is
//! deterministic, the replay rebuilds exactly the state an uninterrupted
//! run had, and each topic continues exactly where it stopped. Without a
//! usable snapshot the slice starts from the beginning of its retained log,
//! also silently up to each Y.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message, OwnedMessage};

use super::checkpoint::{
    CheckpointStore, Manifest, ReadError, ReadFrom, ReadStats, Rejection, read_partition, read_partition_range,
};
use super::clients::Reader;
use super::replay::{Destination, ReplayBounds, Sent};
use super::{Context, KafkaLayerError, headers};
use crate::config::{AvailabilityPolicy, CorruptPolicy, SlicingMode};
use crate::engine::limits::CountingSetup;
use crate::engine::provenance::ProvenanceSetup;
use crate::engine::read_order::{self, ReadOrder};
use crate::engine::slice as slice_codec;
use crate::engine::{Extractor, OrderSettings, RecordView, ReleasePos, SliceState};
use crate::filter::FilterParams;

const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// How a slice came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoredFrom {
    Snapshot {
        seq: u64,
        offset: u64,
    },
    /// No snapshot existed.
    Empty,
    /// The snapshot could not be used; the reason is logged and counted.
    Corrupt(Rejection, String),
}

/// A restored slice and where to consume from.
pub struct ResumePoint {
    pub state: SliceState,
    pub manifest: Option<Manifest>,
    /// The first slice offset to consume.
    pub start: u64,
    /// How far each topic the slice writes holds its records: judgments up
    /// to there are replayed without writing them there again.
    pub bounds: ReplayBounds,
    pub from: RestoredFrom,
    /// The records waiting for the watermark, re-read from the slice log, by offset.
    pub held: BTreeMap<u64, OwnedMessage>,
    /// Idle flushes logged and not in the snapshot: the slice offsets they
    /// came after, oldest first.
    pub flushes: VecDeque<u64>,
    /// Policy ranges logged that reach the first offset to consume or beyond.
    pub ranges: Vec<PolicyRange>,
}

/// How many records at the end of a partition restore reads for its
/// highest release position ([`read_tail`]): enough to reach past the
/// writes a member that woke up from a long pause delivers late (what its
/// producer held: it judges nothing after its slices were taken).
pub const TAIL_RECORDS: i64 = 1000;

/// A record a slice wrote to one of its topics, as its headers say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Its offset in the topic's partition.
    pub offset: i64,
    /// Its own release position (`dedupd.release`; `dedupd.slice.offset`
    /// from builds before event-time order). dedupd writes it on every
    /// record, replacing any header of that name the input record had.
    pub release: ReleasePos,
    /// Its availability-policy headers, if it has `dedupd.policy`.
    pub policy: Option<PolicyHeaders>,
}

/// The `dedupd.policy` and `dedupd.policy.after` headers of an output record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyHeaders {
    /// `dedupd.policy`, if `deliver` or `drop` (the only values dedupd writes).
    pub policy: Option<AvailabilityPolicy>,
    /// `dedupd.policy.after`: `None` if missing or unreadable, `Some(None)`
    /// if empty (no ordinary output before the policy decided).
    pub after: Option<Option<ReleasePos>>,
}

impl Written {
    /// What the partition holds up to this record, as the record says.
    pub fn sent(&self) -> Sent {
        match &self.policy {
            None => Sent { normal: Some(self.release), policy: None },
            Some(p) => Sent { normal: p.after.flatten(), policy: Some(self.release) },
        }
    }

    /// The record taken as an ordinary judgment's, whatever policy headers it has.
    fn ordinary(&self) -> Sent {
        Sent { normal: Some(self.release), policy: None }
    }
}

/// The records a slice wrote in the tail of `topic`/`partition`, oldest
/// first: the last [`TAIL_RECORDS`] records, or further back until one is
/// found when `shared_with_router` (the router's dead letters, which carry
/// no release position, are passed over). With `leaf` (a dense tree's leaf,
/// whose parent topic other leaves write too), the whole partition, the
/// records that name this leaf.
pub fn read_tail(
    reader: &Reader,
    topic: &str,
    partition: i32,
    leaf: Option<&str>,
    shared_with_router: bool,
) -> Result<Vec<Written>, KafkaLayerError> {
    let mut scan = TailScan { leaf, shared_with_router, found: Vec::new(), unmarked: None };
    if leaf.is_some() {
        read_partition(reader, topic, partition, ReadFrom::Start, |o, _, _, m| scan.take(o, m))?;
    } else {
        let (low, high) = reader
            .fetch_watermarks(topic, partition, IO_TIMEOUT)
            .context(|| format!("watermarks of {topic}/{partition}"))?;
        let mut start = (high - TAIL_RECORDS).max(low);
        read_partition(reader, topic, partition, ReadFrom::Offset(start), |o, _, _, m| scan.take(o, m))?;
        // Back window by window past the records no slice wrote.
        while scan.found.is_empty() && scan.unmarked.is_none() && shared_with_router && start > low {
            let stop = start;
            start = (stop - TAIL_RECORDS).max(low);
            read_partition_range(reader, topic, partition, start, stop, |o, _, _, m| scan.take(o, m))?;
        }
    }
    match scan.unmarked {
        None => Ok(scan.found),
        Some(offset) => Err(KafkaLayerError::Topology(format!(
            "the record at offset {offset} of {topic}/{partition} has no {} header: is another application \
             writing to this topic? dedupd needs its output partitions to itself",
            headers::RELEASE
        ))),
    }
}

/// What [`read_tail`] has found so far.
struct TailScan<'a> {
    leaf: Option<&'a str>,
    shared_with_router: bool,
    found: Vec<Written>,
    /// The first record without a release position, where only slices write.
    unmarked: Option<i64>,
}

impl TailScan<'_> {
    fn take(&mut self, offset: i64, m: &rdkafka::message::BorrowedMessage<'_>) {
        let header = |name: &str| m.headers().and_then(|h| h.iter().find(|h| h.key == name)).and_then(|h| h.value);
        if let Some(id) = self.leaf
            && header(super::tier::LEAF) != Some(id.as_bytes())
        {
            return;
        }
        match written(offset, &header) {
            Some(w) => self.found.push(w),
            None if self.shared_with_router => {}
            None => {
                self.unmarked.get_or_insert(offset);
            }
        }
    }
}

/// What a record's headers (`header`) say it is, if a slice wrote it.
fn written<'h>(offset: i64, header: &impl Fn(&str) -> Option<&'h [u8]>) -> Option<Written> {
    let release = header(headers::RELEASE).and_then(ReleasePos::parse);
    let slice_offset = header(headers::SLICE_OFFSET)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse::<u64>().ok())
        .map(ReleasePos::through_arrival);
    let policy = header(headers::POLICY).map(|value| PolicyHeaders {
        policy: std::str::from_utf8(value)
            .ok()
            .and_then(AvailabilityPolicy::parse)
            .filter(|p| *p != AvailabilityPolicy::Wait),
        after: header(headers::POLICY_AFTER).and_then(|v| match v {
            [] => Some(None),
            v => ReleasePos::parse(v).map(Some),
        }),
    });
    Some(Written { offset, release: release.or(slice_offset)?, policy })
}

/// A range of slice offsets whose records `availability.policy` decided
/// while the slice was being restored (logged in the flush log before any
/// of their outputs was sent; docs/availability.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyRange {
    pub from: u64,
    /// Inclusive.
    pub to: u64,
    pub policy: AvailabilityPolicy,
}

impl PolicyRange {
    pub fn contains(&self, offset: u64) -> bool {
        (self.from..=self.to).contains(&offset)
    }
}

/// The policy range of `ranges` that holds `offset`, if any.
pub fn range_of(ranges: &[PolicyRange], offset: u64) -> Option<PolicyRange> {
    ranges.iter().find(|r| r.contains(offset)).copied()
}

/// What the flush log of a slice holds.
#[derive(Debug, Default)]
pub struct FlushLog {
    /// The idle flushes: the slice offsets they came after, in the order
    /// written (increasing: a slice flushes at most once after a record).
    pub flushes: VecDeque<u64>,
    /// The policy ranges, in the order written.
    pub ranges: Vec<PolicyRange>,
}

/// The idle flushes and policy ranges logged in `topic`/`partition`.
pub fn read_flushes(reader: &Reader, topic: &str, partition: i32) -> Result<FlushLog, KafkaLayerError> {
    let mut log = FlushLog::default();
    let mut bad = None;
    read_partition(reader, topic, partition, ReadFrom::Start, |offset, _, value, _| {
        match value.and_then(parse_flush) {
            Some(Logged::Flush(after)) => log.flushes.push_back(after),
            Some(Logged::Range(range)) => log.ranges.push(range),
            None => {
                bad.get_or_insert(offset);
            }
        }
    })?;
    match bad {
        None => Ok(log),
        Some(offset) => Err(KafkaLayerError::Topology(format!(
            "{topic}/{partition} offset {offset} is not a dedupd flush record: is another application writing to \
             this topic?"
        ))),
    }
}

/// The payload of a flush record: `{"after":<slice offset>}`.
pub fn flush_record(after: u64) -> String {
    format!("{{\"after\":{after}}}")
}

/// The payload of a policy range record:
/// `{"policy":"deliver"|"drop","from":<slice offset>,"to":<slice offset>}`.
pub fn policy_record(range: &PolicyRange) -> String {
    format!("{{\"policy\":\"{}\",\"from\":{},\"to\":{}}}", range.policy.as_str(), range.from, range.to)
}

/// A record of the flush log.
enum Logged {
    Flush(u64),
    Range(PolicyRange),
}

fn parse_flush(payload: &[u8]) -> Option<Logged> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if let Some(after) = v.get("after") {
        return after.as_u64().map(Logged::Flush);
    }
    let policy = AvailabilityPolicy::parse(v.get("policy")?.as_str()?)?;
    let (from, to) = (v.get("from")?.as_u64()?, v.get("to")?.as_u64()?);
    (policy != AvailabilityPolicy::Wait && from <= to).then_some(Logged::Range(PolicyRange { from, to, policy }))
}

/// Everything restore needs.
pub struct Restorer<'a> {
    pub store: &'a CheckpointStore,
    pub reader: &'a Reader,
    pub params: &'a FilterParams,
    pub order: OrderSettings,
    pub extractor: &'a Extractor,
    pub slice_topic: &'a str,
    /// How slice-log records hold the input record ([`super::slice_log::parts`]).
    pub slicing: SlicingMode,
    /// The log of idle flushes, partition = slice.
    pub flush_topic: &'a str,
    /// The topics the slices write (partition = slice), each with its
    /// replay bound ([`ReplayBounds`]); those not set are left out.
    pub destinations: Vec<(Destination, &'a str)>,
    pub on_corrupt: CorruptPolicy,
    /// `dedupd_checkpoint_rejected_total`, by [`Rejection`].
    pub rejected: &'a prometheus::IntCounterVec,
    /// A dense tree's leaf: its `app.id`, which its outputs carry in the
    /// shared parent topic (see [`read_tail`]); `None` otherwise.
    pub leaf: Option<&'a str>,
    /// `[provenance]`, restored with the slice (`None`: off).
    pub provenance: Option<&'a ProvenanceSetup>,
    /// The counting stage, restored with the slice (`None`: off).
    pub counting: Option<&'a CountingSetup>,
    /// `dedupd_restore_bounds_ignored_total` ([`Restorer::checked`]).
    pub bounds_ignored: &'a prometheus::IntCounter,
    /// `input.start = latest` in input-partitions mode, where the slice log
    /// is the input: a slice that never ran (no snapshot, nothing in its
    /// output partitions) starts at the end of its log, not at its start.
    pub start_at_end: bool,
}

/// The end of a slice's log, read when a position needs it.
#[derive(Default)]
struct LogEnd {
    /// The listed high watermark: a lower bound of the end (Tansu lists the
    /// last batch's base offset + 1).
    listed: Option<u64>,
    /// One past the last record, read from the listed end's record on.
    exact: Option<u64>,
}

/// The fingerprint of a slice's snapshot: the filter's parameters and the
/// counting stage's (a snapshot taken with other ones is refused).
pub fn fingerprint(params: &FilterParams, counting: Option<&CountingSetup>) -> String {
    let mut f = params.fingerprint();
    if let Some(c) = counting {
        f.push_str(&c.fingerprint());
    }
    f
}

impl Restorer<'_> {
    /// What a slice not restored yet needs to decide records by
    /// `availability.policy` (cheap: the tails of the output partitions and
    /// the flush log, no snapshot): how far each topic holds the slice's
    /// records, and the policy ranges logged.
    ///
    /// Also the newest snapshot's offset X (its manifest only): records
    /// below X are in the snapshot (judged, or waiting for the watermark and
    /// judged after the restore), so the policy decides from X at the
    /// earliest. `None`: no snapshot found at the tail.
    pub fn locate(&self, slice: u32) -> Result<(ReplayBounds, Option<u64>, Vec<PolicyRange>), KafkaLayerError> {
        let bounds = self.bounds(slice)?;
        let snapshot = self.store.latest_manifest(slice)?.map(|m| m.offset);
        let log = read_flushes(self.reader, self.flush_topic, slice as i32)?;
        Ok((bounds, snapshot, log.ranges))
    }

    /// How far each topic the slice writes holds its records: the highest
    /// positions in the tail of its partition ([`read_tail`]), each checked
    /// against the slice log ([`Restorer::checked`]).
    pub fn bounds(&self, slice: u32) -> Result<ReplayBounds, KafkaLayerError> {
        self.read_bounds(slice, &mut LogEnd::default())
    }

    /// [`Restorer::bounds`], with the slice log's end read once into `end`.
    fn read_bounds(&self, slice: u32, end: &mut LogEnd) -> Result<ReplayBounds, KafkaLayerError> {
        let mut bounds = ReplayBounds::default();
        // A topic two settings name is read once.
        let mut read: Vec<(&str, Sent)> = Vec::new();
        for &(dest, topic) in &self.destinations {
            if let Some(&(_, sent)) = read.iter().find(|(t, _)| *t == topic) {
                bounds.raise(dest, sent);
                continue;
            }
            // Only the output topic is a dense leaf's parent's input, shared by leaves.
            let leaf = self.leaf.filter(|_| dest == Destination::Output);
            let mut sent = Sent::default();
            for mut record in read_tail(self.reader, topic, slice as i32, leaf, dest.shared_with_router())? {
                if dest == Destination::Flags {
                    record.policy = None; // flags never carry policy headers
                }
                sent = sent.max(self.checked(slice, topic, &record, end)?);
            }
            read.push((topic, sent));
            bounds.raise(dest, sent);
        }
        Ok(bounds)
    }

    /// What `last`, a record in the tail of `topic`/`slice`, says was sent, once
    /// its positions are checked against the slice log: every output is
    /// judged from a record of the slice log, so a position at or beyond the
    /// log's end was not written by this slice.
    ///
    /// - Its own release position beyond the end: refused with an error.
    ///   dedupd writes that header on every output (an input record's own is
    ///   replaced), so it is not forged by an input; the outputs belong to
    ///   another log (the slice topic deleted and created again, another
    ///   application writing this output topic). Obeying it would keep the
    ///   slice silent until its log reached that position (everything lost);
    ///   ignoring it would deliver again what the partition holds already.
    ///   Only an operator can tell which is right.
    /// - Its `dedupd.policy.after` beyond the end, or policy headers dedupd
    ///   does not write (another value than `deliver`/`drop`, no or an
    ///   unreadable `dedupd.policy.after`): ignored with a WARN and
    ///   `dedupd_restore_bounds_ignored_total`, and the record taken as the
    ///   ordinary output its own release says it is. Such headers come from
    ///   an input record: releases that copied input headers to the outputs
    ///   copied these too (they are removed now, [`super::producer::produce_with`]).
    ///   Refusing would stop the slice for good, since nothing but new
    ///   outputs move such a record out of the tail; obeying would keep it
    ///   silent (an input record carrying `dedupd.policy.after:
    ///   9000000000000000/0` made its slice drop everything after it).
    fn checked(&self, slice: u32, topic: &str, last: &Written, end: &mut LogEnd) -> Result<Sent, KafkaLayerError> {
        if let Some(end) = self.beyond_end(slice, last.release, end)? {
            return Err(KafkaLayerError::Topology(format!(
                "slice {slice}: the record of {topic}/{slice} (offset {}) was released at {}, beyond the end of \
                 the slice log {}/{slice} (offset {end}): these outputs were not judged from this log (was {} \
                 deleted and created again, or does another application write {topic}?); refusing to replay up to \
                 a position the log does not have",
                last.offset, last.release, self.slice_topic, self.slice_topic
            )));
        }
        let Some(policy) = &last.policy else {
            return Ok(last.sent());
        };
        let why = match (policy.policy, policy.after) {
            (None, _) => Some("a dedupd.policy value dedupd does not write".to_string()),
            (_, None) => Some("no readable dedupd.policy.after".to_string()),
            (Some(_), Some(Some(after))) => self
                .beyond_end(slice, after, end)?
                .map(|end| format!("dedupd.policy.after {after} beyond the end of the slice log (offset {end})")),
            (Some(_), Some(None)) => None,
        };
        let Some(why) = why else {
            return Ok(last.sent());
        };
        self.bounds_ignored.inc();
        log::warn!(
            "slice {slice}: the record of {topic}/{slice} (offset {}) has {why}: its availability-policy \
             headers are not dedupd's (an input record's own, copied by an earlier release); ignored, the record \
             is taken as the ordinary output released at {}",
            last.offset,
            last.release
        );
        Ok(last.ordinary())
    }

    /// The end of the slice log if `pos` lies at or beyond it, else `None`.
    fn beyond_end(&self, slice: u32, pos: ReleasePos, end: &mut LogEnd) -> Result<Option<u64>, KafkaLayerError> {
        let offset = match self.slicing {
            SlicingMode::Shared => read_order::log_offset(pos.after),
            _ => pos.after,
        };
        if offset < self.listed_end(slice, end)? {
            return Ok(None);
        }
        let exact = self.exact_end(slice, end)?;
        Ok((offset >= exact).then_some(exact))
    }

    /// The slice log's listed high watermark, read once into `end`.
    fn listed_end(&self, slice: u32, end: &mut LogEnd) -> Result<u64, KafkaLayerError> {
        if let Some(listed) = end.listed {
            return Ok(listed);
        }
        let (_, high) = self
            .reader
            .fetch_watermarks(self.slice_topic, slice as i32, IO_TIMEOUT)
            .context(|| format!("watermarks of {}/{slice}", self.slice_topic))?;
        Ok(*end.listed.insert(high.max(0) as u64))
    }

    /// One past the slice log's last record (read from the listed end on:
    /// the listed high watermark is only a lower bound on some brokers),
    /// read once into `end`.
    fn exact_end(&self, slice: u32, end: &mut LogEnd) -> Result<u64, KafkaLayerError> {
        if let Some(exact) = end.exact {
            return Ok(exact);
        }
        let mut exact = self.listed_end(slice, end)?;
        read_partition(self.reader, self.slice_topic, slice as i32, ReadFrom::Last, |o, _, _, _| {
            exact = exact.max(o as u64 + 1);
        })?;
        Ok(*end.exact.insert(exact))
    }

    /// Decodes a slice snapshot with the configured filter, order and provenance.
    fn decode(&self, bytes: &[u8], slice: u32) -> Result<SliceState, crate::filter::SnapshotError> {
        let counting = self.counting.map(|c| (c, self.extractor));
        slice_codec::decode_full(bytes, slice, self.params, self.order, self.provenance, counting)
    }

    fn fingerprint(&self) -> String {
        fingerprint(self.params, self.counting)
    }

    pub fn restore(&self, slice: u32) -> Result<ResumePoint, KafkaLayerError> {
        let mut read = ReadStats::default();
        let started = Instant::now();
        let latest = self.store.read_latest_counted(slice, &mut read);
        // Restore time is mostly this read: say how much of the topic it took.
        log::info!(
            "slice {slice}: read {} checkpoint records, {:.1} MiB in {:.0} ms{}",
            read.records,
            read.bytes as f64 / (1 << 20) as f64,
            started.elapsed().as_secs_f64() * 1000.0,
            read.full_scan.as_ref().map_or(String::new(), |why| format!(" (whole partition: {why})"))
        );
        // Another application's snapshot: never restored (neither is a
        // cold start right, which would soon replace its manifest with ours).
        if let Ok(Some((m, _))) = &latest
            && let Err(e) = self.store.check_owner(m)
        {
            self.rejected.with_label_values(&[Rejection::Application.as_str()]).inc();
            return Err(e);
        }
        let (state, manifest, from) = match latest {
            Ok(Some((m, _))) if m.params != self.fingerprint() => {
                let why = format!(
                    "the snapshot was taken with {} but the filter is configured with {}",
                    m.params,
                    self.fingerprint()
                );
                (None, Some(m), RestoredFrom::Corrupt(Rejection::Parameters, why))
            }
            Ok(Some((m, bytes))) => match self.decode(&bytes, slice) {
                Ok(mut state) => match self.refill(&mut state) {
                    Ok(held) => {
                        let from = RestoredFrom::Snapshot { seq: m.seq, offset: m.offset };
                        (Some((state, held)), Some(m), from)
                    }
                    Err(RefillError::Missing(why)) => {
                        (None, Some(m), RestoredFrom::Corrupt(Rejection::HeldRecord, why))
                    }
                    Err(RefillError::Kafka(e)) => return Err(e),
                },
                Err(e) => {
                    // Which snapshot: the chunks matched its manifest, the content is what is wrong.
                    let why = format!("snapshot {} (at slice offset {}): {e}", m.seq, m.offset);
                    (None, Some(m), RestoredFrom::Corrupt(Rejection::from(&e), why))
                }
            },
            Ok(None) => (None, None, RestoredFrom::Empty),
            Err(ReadError::Corrupt(kind, why)) => (None, None, RestoredFrom::Corrupt(kind, why)),
            Err(ReadError::Kafka(e)) => return Err(e),
        };
        if let RestoredFrom::Corrupt(kind, why) = &from {
            self.rejected.with_label_values(&[kind.as_str()]).inc();
            let then = match self.on_corrupt {
                CorruptPolicy::ColdStart => {
                    "rebuilding the slice from its retained log (checkpoint.on_corrupt = cold-start)"
                }
                CorruptPolicy::Fail => "stopping (checkpoint.on_corrupt = fail)",
            };
            log::error!("slice {slice}: the snapshot cannot be used ({}): {why}; {then}", kind.as_str());
            if self.on_corrupt == CorruptPolicy::Fail {
                return Err(KafkaLayerError::Checkpoint {
                    slice,
                    detail: format!("{why} (checkpoint.on_corrupt = fail)"),
                });
            }
        }
        let mut end = LogEnd::default();
        let bounds = self.read_bounds(slice, &mut end)?;
        let (state, held) = match state {
            Some(s) => s,
            None => {
                let (low, _) = self
                    .reader
                    .fetch_watermarks(self.slice_topic, slice as i32, IO_TIMEOUT)
                    .context(|| format!("watermarks of {}/{slice}", self.slice_topic))?;
                let mut first = low.max(0) as u64;
                // A slice that ran before (a rejected snapshot, or outputs
                // written before its first snapshot) is rebuilt from the
                // start whatever input.start says: starting at the end
                // would skip records it has not judged yet.
                if self.start_at_end && from == RestoredFrom::Empty && bounds == ReplayBounds::default() {
                    first = first.max(self.exact_end(slice, &mut end)?);
                }
                let start = match self.slicing {
                    SlicingMode::Shared => read_order::position(first, 0),
                    _ => first,
                };
                let mut fresh = SliceState::new(slice, self.params.clone(), start, self.order);
                fresh.set_provenance(self.provenance);
                fresh.set_counting(self.counting, self.extractor);
                (fresh, BTreeMap::new())
            }
        };
        let start = state.next_offset;
        // Flushes the snapshot has applied, or that came after a record
        // before its last one, are in it already.
        let FlushLog { mut flushes, mut ranges } = read_flushes(self.reader, self.flush_topic, slice as i32)?;
        flushes.retain(|&after| after >= state.flushes_next && after + 1 >= start);
        ranges.retain(|r| r.to >= start);
        log::info!(
            "slice {slice}: restored from {from:?}, consuming from offset {start}, {} records waiting for the \
             watermark, {} idle flushes and {} policy ranges to replay{}",
            held.len(),
            flushes.len(),
            ranges.len(),
            bounds
                .highest()
                .filter(|y| y.after + 1 >= start)
                .map_or(String::new(), |_| format!(", silently up to what each topic holds: {bounds}"))
        );
        Ok(ResumePoint { state, manifest, start, bounds, from, held, flushes, ranges })
    }

    /// Re-reads from the slice log (shared mode: from the input, where the
    /// read order says) the records the snapshot says were waiting, and
    /// puts them back into `state`.
    fn refill(&self, state: &mut SliceState) -> Result<BTreeMap<u64, OwnedMessage>, RefillError> {
        let mut held = BTreeMap::new();
        let wanted: BTreeSet<u64> = state.unfilled.iter().map(|&(o, _)| o).collect();
        let (Some(&first), stop) = (wanted.first(), state.next_offset) else {
            return Ok(held);
        };
        let found = match self.slicing {
            SlicingMode::Shared => self.reread_named(state.slice, &wanted, first, stop),
            _ => {
                let mut found = BTreeMap::new();
                read_partition_range(
                    self.reader,
                    self.slice_topic,
                    state.slice as i32,
                    first as i64,
                    stop as i64,
                    |o, _, _, m| {
                        if wanted.contains(&(o as u64)) {
                            found.insert(o as u64, m.detach());
                        }
                    },
                )
                .map(|()| found)
            }
        }
        .map_err(RefillError::Kafka)?;
        let mut entries = Vec::new();
        // In slice-offset order: a count key is put back in arrival order.
        for (offset, m) in found {
            let header_list: Vec<(&str, &[u8])> = m
                .headers()
                .map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect())
                .unwrap_or_default();
            let view = RecordView {
                key: m.key(),
                payload: super::slice_log::parts(self.slicing, &m).payload.unwrap_or_default(),
                headers: &header_list,
                timestamp_ms: m.timestamp().to_millis(),
            };
            if let Some((time_ms, hash)) = state.held_entry(&view, self.extractor)
                && state.refill_count_key(offset, &view)
            {
                entries.push((offset, time_ms, hash));
                drop(header_list);
                held.insert(offset, m);
            }
        }
        state.refill(entries).map_err(|offset| {
            RefillError::Missing(format!(
                "the record at offset {offset} of {}/{} was waiting for the watermark when the snapshot was \
                 taken, and it can no longer be read (retention?)",
                self.slice_topic, state.slice
            ))
        })?;
        Ok(held)
    }
}

impl Restorer<'_> {
    /// Shared mode: the input records at the virtual positions `wanted`
    /// (all in `first..stop`), found through the read-order records that
    /// name them and read from the input.
    fn reread_named(
        &self,
        slice: u32,
        wanted: &BTreeSet<u64>,
        first: u64,
        stop: u64,
    ) -> Result<BTreeMap<u64, OwnedMessage>, KafkaLayerError> {
        // Input partition → offset → the positions it was named at (a
        // router that re-read its partitions after a crash names some twice).
        let mut named: BTreeMap<(String, i32), BTreeMap<i64, Vec<u64>>> = BTreeMap::new();
        let (from, to) = (read_order::log_offset(first), read_order::log_offset(stop.saturating_sub(1)) + 1);
        read_partition_range(self.reader, self.slice_topic, slice as i32, from as i64, to as i64, |o, _, value, m| {
            let is_order = m.headers().is_some_and(|h| h.iter().any(|h| h.key == headers::READ_ORDER));
            let Some(Ok(mut order)) = is_order.then(|| ReadOrder::decode(value.unwrap_or_default())) else {
                return;
            };
            order.first_position = read_order::position(o as u64, 0);
            for (position, topic, partition, offset) in order.records() {
                if wanted.contains(&position) {
                    named.entry((topic.to_string(), partition)).or_default().entry(offset).or_default().push(position);
                }
            }
        })?;
        let mut found = BTreeMap::new();
        for ((topic, partition), offsets) in &named {
            let (Some((&low, _)), Some((&high, _))) = (offsets.first_key_value(), offsets.last_key_value()) else {
                continue;
            };
            read_partition_range(self.reader, topic, *partition, low, high + 1, |o, _, _, m| {
                for &position in offsets.get(&o).into_iter().flatten() {
                    found.insert(position, m.detach());
                }
            })?;
        }
        Ok(found)
    }
}

enum RefillError {
    /// A waiting record is gone from the log: the snapshot cannot be used.
    Missing(String),
    Kafka(KafkaLayerError),
}
