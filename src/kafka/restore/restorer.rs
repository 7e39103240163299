//! The restore of one slice: snapshot, held records, flush log, replay bounds.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message, OwnedMessage};

use super::flush_log::{FlushLog, FlushLogSpan, PolicyRange, read_flushes};
use super::tail::{Written, read_tail};
use crate::config::CorruptPolicy;
use crate::engine::slice as slice_codec;
use crate::engine::slice::stages::StageSetups;
use crate::engine::{Extractor, OrderSettings, RecordView, ReleasePos, SliceState};
use crate::filter::FilterChoice;
use crate::kafka::checkpoint::{
    CheckpointStore, Manifest, ReadError, ReadFrom, ReadStats, Rejection, read_partition, read_partition_range,
};
use crate::kafka::clients::Reader;
use crate::kafka::held_record::HeldRecord;
use crate::kafka::replay::{Destination, ReplayBounds, Sent};
use crate::kafka::slice_log::Holds;
use crate::kafka::slice_log::batch::Batch;
use crate::kafka::slice_log::read_order::{self, ReadOrder};
use crate::kafka::{Context, KafkaLayerError, headers};

const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A slice restored from a snapshot, with the held records read back.
type Restored = (SliceState, BTreeMap<u64, HeldRecord>);

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
    pub held: BTreeMap<u64, HeldRecord>,
    /// Idle flushes logged and not in the snapshot: the slice offsets they
    /// came after, oldest first.
    pub flushes: VecDeque<crate::kafka::restore::LoggedFlush>,
    /// Policy ranges logged that reach the first offset to consume or beyond.
    pub ranges: Vec<PolicyRange>,
    /// The part of the flush log read.
    pub flush_log: FlushLogSpan,
}

/// Everything restore needs.
pub struct Restorer<'a> {
    pub store: &'a CheckpointStore,
    pub reader: &'a Reader,
    pub filter: &'a FilterChoice,
    pub order: OrderSettings,
    pub extractor: &'a Extractor,
    /// How the input's payloads are read when not JSON.
    pub decoder: Option<&'a dyn crate::engine::record::PayloadDecoder>,
    pub slice_topic: &'a str,
    /// What the slice log holds ([`crate::kafka::slice_log::parts`]), and
    /// so the form of its positions (`log_form.rs`).
    pub log: Holds,
    /// The log of idle flushes, partition = slice.
    pub flush_topic: &'a str,
    /// The topics the slices write (partition = slice), each with its
    /// replay bound ([`ReplayBounds`]); those not set are left out.
    pub destinations: Vec<(Destination, &'a str)>,
    pub on_corrupt: CorruptPolicy,
    /// `dedupd_checkpoint_rejected_total`, by [`Rejection`].
    pub rejected: &'a prometheus::IntCounterVec,
    /// `app.id`: the bounds are read from this application's records only
    /// ([`read_tail`]).
    pub app: &'a str,
    /// The header (name, value) every output record carries when the
    /// output topic is written by others too (a dense tree's leaf: its
    /// `app.id`, in the parent's topic): the bounds count only records
    /// that carry it (see [`read_tail`]); `None` otherwise.
    pub output_mark: Option<(&'a str, &'a str)>,
    /// The stages restored with the slice.
    pub stages: &'a StageSetups,
    /// `dedupd_restore_bounds_ignored_total` (`Restorer::checked`).
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
/// stages' (a snapshot taken with other ones is refused).
pub fn fingerprint(filter: &FilterChoice, stages: &StageSetups) -> String {
    filter.fingerprint() + &stages.fingerprint()
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
        let manifest = self.store.latest_manifest(slice)?;
        // The ranges that reach X or beyond lie at or after the offset the manifest names.
        let from = manifest.as_ref().and_then(|m| m.flush_log_offset);
        let log = read_flushes(self.reader, self.flush_topic, slice as i32, from)?;
        Ok((bounds, manifest.map(|m| m.offset), log.ranges))
    }

    /// How far each topic the slice writes holds its records: the highest
    /// positions in the tail of its partition ([`read_tail`]), each checked
    /// against the slice log (`Restorer::checked`).
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
            let mark = self.output_mark.filter(|_| dest == Destination::Output);
            let mut sent = Sent::default();
            let tail = read_tail(self.reader, topic, slice as i32, self.app, mark, dest.shared_with_router())?;
            for mut record in tail {
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
            return Err(KafkaLayerError::ForeignRecord(format!(
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
        let offset = self.log.log_position(pos.after);
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

    /// Decodes a slice snapshot with the configured filter, order and stages.
    fn decode(&self, bytes: &[u8], slice: u32) -> Result<SliceState, crate::filter::SnapshotError> {
        slice_codec::decode_full(bytes, slice, self.filter, self.order, self.stages)
    }

    fn fingerprint(&self) -> String {
        fingerprint(self.filter, self.stages)
    }

    pub fn restore(&self, slice: u32) -> Result<ResumePoint, KafkaLayerError> {
        let (state, manifest, from) = self.latest_snapshot(slice)?;
        let mut end = LogEnd::default();
        let bounds = self.read_bounds(slice, &mut end)?;
        let (state, held) = match state {
            Some(s) => s,
            None => (self.fresh(slice, &from, &bounds, &mut end)?, BTreeMap::new()),
        };
        let start = state.next_offset;
        // From the offset the snapshot names: what it needs lies there or
        // after. A slice rebuilt from its log (no snapshot, or one refused)
        // needs every flush logged since its first record: from the start.
        let flush_from = match from {
            RestoredFrom::Snapshot { .. } => manifest.as_ref().and_then(|m| m.flush_log_offset),
            _ => None,
        };
        let FlushLog { mut flushes, mut ranges, span } =
            read_flushes(self.reader, self.flush_topic, slice as i32, flush_from)?;
        // Flushes the snapshot has applied, or that came after a record
        // before its last one, are in it already.
        flushes.retain(|f| f.after >= state.flushes_next && f.after + 1 >= start);
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
        Ok(ResumePoint { state, manifest, start, bounds, from, held, flushes, ranges, flush_log: span })
    }

    /// The slice's latest snapshot, decoded and with its held records read
    /// back, or why there is none to use (logged, counted, and an error
    /// under `checkpoint.on_corrupt = fail`).
    fn latest_snapshot(
        &self,
        slice: u32,
    ) -> Result<(Option<Restored>, Option<Manifest>, RestoredFrom), KafkaLayerError> {
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
                Ok(mut state) => match self.carry_over(&mut state).map(|()| self.refill(&mut state))? {
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
        Ok((state, manifest, from))
    }

    /// A slice with no snapshot to restore: empty, from the start of its
    /// retained log, or from its end when it never ran and `input.start`
    /// says latest.
    fn fresh(
        &self,
        slice: u32,
        from: &RestoredFrom,
        bounds: &ReplayBounds,
        end: &mut LogEnd,
    ) -> Result<SliceState, KafkaLayerError> {
        let (low, _) = self
            .reader
            .fetch_watermarks(self.slice_topic, slice as i32, IO_TIMEOUT)
            .context(|| format!("watermarks of {}/{slice}", self.slice_topic))?;
        let mut first = low.max(0) as u64;
        // A slice that ran before (a rejected snapshot, or outputs
        // written before its first snapshot) is rebuilt from the
        // start whatever input.start says: starting at the end
        // would skip records it has not judged yet.
        if self.start_at_end && *from == RestoredFrom::Empty && *bounds == ReplayBounds::default() {
            first = first.max(self.exact_end(slice, end)?);
        }
        let start = self.log.slice_position(first);
        let mut fresh = SliceState::new(slice, self.filter.clone(), start, self.order);
        fresh.set_stages(self.stages);
        fresh.log_form = self.log_form();
        Ok(fresh)
    }

    /// Re-reads from the slice log (shared mode: from the input, where the
    /// read order says) the records the snapshot says were waiting, and
    /// puts them back into `state`.
    fn refill(&self, state: &mut SliceState) -> Result<BTreeMap<u64, HeldRecord>, RefillError> {
        let mut held = BTreeMap::new();
        let wanted: BTreeSet<u64> = state.unfilled.iter().map(|&(o, _)| o).collect();
        let (Some(&first), stop) = (wanted.first(), state.next_offset) else {
            return Ok(held);
        };
        let found = match self.log {
            Holds::ReadOrders => self.reread_named(state.slice, &wanted, first, stop).map(|found| self.own(found)),
            Holds::Batches => self.reread_batched(state.slice, &wanted, first, stop),
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
                .map(|()| self.own(found))
            }
        }
        .map_err(RefillError::Kafka)?;
        let mut entries = Vec::new();
        // In slice-offset order: a count key is put back in arrival order.
        for (offset, record) in found {
            let out = record.view();
            let header_list = out.headers.pairs();
            let view = RecordView {
                key: out.key,
                payload: out.payload.unwrap_or_default(),
                headers: &header_list,
                timestamp_ms: out.timestamp_ms,
                decoder: self.decoder,
            };
            if let Some((time_ms, hash)) = state.held_entry(&view, self.extractor)
                && state.refill_stages(offset, &view)
            {
                entries.push((offset, time_ms, hash));
                drop(header_list);
                held.insert(offset, record);
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
    /// The records read back, held as the slice holds them.
    fn own(&self, found: BTreeMap<u64, OwnedMessage>) -> BTreeMap<u64, HeldRecord> {
        found.into_iter().map(|(offset, m)| (offset, HeldRecord::restored(self.log, &m))).collect()
    }

    /// Batch form: the records at the virtual positions `wanted` (all in
    /// `first..stop`), from the batches that hold them. A batch that cannot
    /// be read was refused whole when it was taken: none of its records waits.
    fn reread_batched(
        &self,
        slice: u32,
        wanted: &BTreeSet<u64>,
        first: u64,
        stop: u64,
    ) -> Result<BTreeMap<u64, HeldRecord>, KafkaLayerError> {
        let mut found = BTreeMap::new();
        let (from, to) = (read_order::log_offset(first), read_order::log_offset(stop.saturating_sub(1)) + 1);
        read_partition_range(self.reader, self.slice_topic, slice as i32, from as i64, to as i64, |o, _, value, m| {
            let is_batch = m.headers().is_some_and(|h| h.iter().any(|h| h.key == headers::BATCH));
            let Some(Ok(batch)) = is_batch.then(|| Batch::decode(value.unwrap_or_default())) else {
                return;
            };
            for (i, entry) in batch.entries.iter().enumerate() {
                let position = read_order::position(o as u64, i as u64);
                if wanted.contains(&position) {
                    found.insert(position, HeldRecord::of_batch_entry(entry));
                }
            }
        })?;
        Ok(found)
    }

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
