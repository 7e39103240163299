//! Policy ranges (docs/availability.md): the records of a slice being
//! restored are decided (delivered or dropped, as the record path's
//! `while_restoring` asks) rather than judged, each range of them logged in
//! the flush log first so that every later restore applies the same
//! decisions.

use std::time::Instant;

use crate::kafka::consumed::Consumed;
use rdkafka::producer::{BaseRecord, Producer};

use super::emit::{dead_letter, send};
use super::owned::OwnedSlice;
use super::setup::WorkerSetup;
use super::writer::FLUSH_TIMEOUT;
use crate::engine::{InvalidRecord, RecordView, ReleasePos, SliceRecord};
use crate::kafka::out_record::OutRecord;
use crate::kafka::producer::wait_acked;
use crate::kafka::replay::{Destination, ReplayBounds, Sent};
use crate::kafka::restore::{Decision, PolicyRange, policy_record, range_of};
use crate::kafka::slice_log::{Kind, LogRecord};
use crate::kafka::{KafkaLayerError, headers};

/// A slice being restored whose records the settings decide meanwhile
/// (`RecordPath::while_restoring`, docs/availability.md): each is sent at once, to the output
/// (`deliver`) or to the duplicates topic (`drop`), once the range of slice
/// offsets it is in has been logged in the flush log, so that the restore
/// (and every later one) applies the same decisions.
pub(super) struct Deciding {
    /// The next slice offset expected.
    pub(super) next: u64,
    /// How far each topic holds the slice's records: read before, raised
    /// by each decision sent.
    pub(super) bounds: ReplayBounds,
    /// The policy ranges logged, by earlier owners and by this one.
    pub(super) ranges: Vec<PolicyRange>,
}

/// Slice offsets a policy range logs at once: records arriving for a slice
/// being restored are decided without a wait for the log most of the time.
const POLICY_STEP: u64 = 500;

/// Decides a record of a slice being restored as the settings ask
/// (see [`Deciding`]): logs its range first if no range logged holds it.
/// A router's progress record is skipped (inside a policy range the order
/// buffer is not moved: nothing is released there), a delete request left
/// for the restored slice (it releases nothing); a record whose key or time
/// cannot be read goes to the dead-letter topic at once.
pub(super) fn decide_early(
    setup: &WorkerSetup,
    d: &mut Deciding,
    slice: u32,
    msg: &Consumed<'_>,
    record: &LogRecord<'_>,
) -> Result<(), KafkaLayerError> {
    let offset = msg.offset() as u64;
    if offset < d.next {
        return Ok(());
    }
    d.next = offset + 1;
    if record.kind != Kind::Input {
        return Ok(());
    }
    let framed = &record.framed;
    let range = match range_of(&d.ranges, offset) {
        Some(r) => r,
        None => {
            let limit = d.ranges.iter().filter(|r| r.from > offset).map(|r| r.from - 1).min();
            let to = (offset + POLICY_STEP - 1).min(limit.unwrap_or(u64::MAX));
            let Some(policy) = setup.path.while_restoring else {
                return Ok(()); // the settings decide nothing: it waits for the restore
            };
            let range = PolicyRange { from: offset, to, policy };
            log_range(setup, slice, &range)?;
            d.ranges.push(range);
            range
        }
    };
    let pos = ReleasePos { after: offset, flush: false, rank: 0 };
    let view = RecordView {
        key: msg.key(),
        payload: framed.payload.unwrap_or_default(),
        headers: &record.headers,
        timestamp_ms: msg.timestamp().to_millis(),
        decoder: crate::engine::formats::payload_decoder(&setup.cfg.decoder),
    };
    let unreadable = setup.extractor.extract(&view, 0).err();
    let rec = OutRecord::consumed(msg, record.out_headers, framed.payload, framed.source);
    let (dest, refused) = routed(setup, range.policy, unreadable.is_some(), &rec);
    if !d.bounds.holds_decision(dest, pos) {
        let after = d.bounds.policy_after(dest, None);
        let decision =
            DecidedRecord { offset, pos, policy: range.policy, after, unreadable: unreadable.as_ref(), refused };
        send_decision(setup, slice, &rec, &decision)?;
        d.bounds.raise(dest, Sent { normal: None, policy: Some(pos) });
    }
    Ok(())
}

/// Where a decision of `policy` goes: the output (`deliver`) or the
/// duplicates topic (`drop`); an unreadable record to the dead letters.
fn destination(policy: Decision, unreadable: bool) -> Destination {
    match policy {
        _ if unreadable => Destination::DeadLetters,
        Decision::Drop => Destination::Duplicates,
        Decision::Deliver => Destination::Output,
    }
}

/// Applies a logged policy decision to the input record at `offset` of a
/// restored slice (see [`crate::engine::SliceState::decide`]): a replay of a
/// decision made while it was restored (silent: its output was sent) or, for
/// a range logged ahead, a decision made now. A record whose key or time
/// cannot be read goes to the dead-letter topic. (A router's progress record
/// in a range is skipped and a delete request applied, as [`decide_early`]
/// leaves them: the caller does that.)
pub(super) fn decide_logged(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    msg: &Consumed<'_>,
    record: &LogRecord<'_>,
    range: PolicyRange,
) -> Result<(), KafkaLayerError> {
    let slice = owned.state.slice;
    let offset = msg.offset() as u64;
    let framed = &record.framed;
    let view = RecordView {
        key: msg.key(),
        payload: framed.payload.unwrap_or_default(),
        headers: &record.headers,
        timestamp_ms: msg.timestamp().to_millis(),
        decoder: crate::engine::formats::payload_decoder(&setup.cfg.decoder),
    };
    let slice_record = SliceRecord { offset, record: view, source: framed.source, reading: None };
    let deliver = range.policy == Decision::Deliver;
    let decided = owned.state.decide(&slice_record, &setup.extractor, deliver);
    let pos = ReleasePos { after: offset, flush: false, rank: 0 };
    let unreadable = if decided {
        None
    } else {
        owned.state.next_offset = offset + 1;
        owned.state.counters.invalid += 1;
        setup.extractor.extract(&slice_record.record, 0).err()
    };
    let rec = OutRecord::consumed(msg, record.out_headers, framed.payload, framed.source);
    let (dest, refused) = routed(setup, range.policy, unreadable.is_some(), &rec);
    if owned.replay.holds_decision(dest, pos) {
        setup.metrics.restore.replayed.with_label_values(&[&slice.to_string()]).inc();
    } else {
        let after = owned.replay.policy_after(dest, owned.last_judged);
        let decision =
            DecidedRecord { offset, pos, policy: range.policy, after, unreadable: unreadable.as_ref(), refused };
        send_decision(setup, slice, &rec, &decision)?;
    }
    Ok(())
}

/// Where a decision goes ([`destination`]), unless that topic does not take
/// a record of its size: then to the dead letters, with the topic refusing
/// it (a replay, against the same limits, routes it the same way).
fn routed<'a>(
    setup: &'a WorkerSetup,
    policy: Decision,
    unreadable: bool,
    rec: &OutRecord<'_>,
) -> (Destination, Option<(Destination, &'a crate::kafka::size_limits::Limit)>) {
    let dest = destination(policy, unreadable);
    match super::emit::refusal(setup, dest, rec) {
        Some(limit) if dest != Destination::DeadLetters => (Destination::DeadLetters, Some((dest, limit))),
        _ => (dest, None),
    }
}

/// A policy range's decision about one record.
struct DecidedRecord<'a> {
    /// The record's slice offset.
    offset: u64,
    pos: ReleasePos,
    policy: Decision,
    /// What the partition it goes to holds of ordinary judgments before it
    /// (`dedupd.policy.after`; see [`ReplayBounds::policy_after`]).
    after: Option<ReleasePos>,
    /// Why the record cannot be read, if it cannot: it goes to the dead letters.
    unreadable: Option<&'a InvalidRecord>,
    /// The topic it was decided for, when that topic does not take a record
    /// of its size: it goes to the dead letters.
    refused: Option<(Destination, &'a crate::kafka::size_limits::Limit)>,
}

/// Sends a record decided by the policy: to the output (`deliver`), the
/// duplicates topic (`drop`) or, unreadable, the dead letters, with its
/// slice offset, release position, application, header `dedupd.policy` and
/// `dedupd.policy.after` (a later restore tells these records from the
/// ordinary ones by them: see [`crate::kafka::replay`]).
fn send_decision(
    setup: &WorkerSetup,
    slice: u32,
    rec: &OutRecord<'_>,
    d: &DecidedRecord<'_>,
) -> Result<(), KafkaLayerError> {
    let path = &setup.path;
    let offset_text = d.offset.to_string();
    let release_text = d.pos.to_string();
    let after_text = d.after.map(|y| y.to_string()).unwrap_or_default();
    let mut extra = vec![
        (headers::SLICE_OFFSET, offset_text.as_bytes()),
        (headers::RELEASE, release_text.as_bytes()),
        (headers::APP, path.app.as_bytes()),
        (headers::POLICY, d.policy.as_str().as_bytes()),
        (headers::POLICY_AFTER, after_text.as_bytes()),
    ];
    if let Some(why) = d.unreadable {
        return dead_letter(setup, slice, why, rec, &extra);
    }
    if let Some(refused) = d.refused {
        return super::emit::dead_letter_too_large(setup, slice, &[refused], rec, &extra);
    }
    setup.metrics.restore.policy_decisions.with_label_values(&[&slice.to_string(), d.policy.as_str()]).inc();
    match d.policy {
        Decision::Drop => {
            extra.push((headers::RULE, b"policy"));
            send(setup, &path.duplicates, slice, rec, &extra)
        }
        Decision::Deliver => send(setup, &path.output, slice, rec, &extra),
    }
}

/// Writes a policy range to the slice's flush log and waits until the
/// broker has it: no output of the range is sent before (see [`super::records::idle_flush`]).
fn log_range(setup: &WorkerSetup, slice: u32, range: &PolicyRange) -> Result<(), KafkaLayerError> {
    log::info!(
        "slice {slice}: offsets {}..={} decided as \"{}\" while it is restored (logged)",
        range.from,
        range.to,
        range.policy.as_str()
    );
    log_and_wait(setup, slice, policy_record(range).as_bytes(), &format!("policy range {}..={}", range.from, range.to))
}

/// Writes `payload` to the slice's flush log and waits until the broker has
/// it. A broker that does not answer is waited for; librdkafka bounds the
/// wait (`message.timeout.ms`): then the delivery fails and so does this.
pub(super) fn log_and_wait(setup: &WorkerSetup, slice: u32, payload: &[u8], what: &str) -> Result<(), KafkaLayerError> {
    let record: BaseRecord<'_, [u8], [u8], ()> =
        BaseRecord::with_opaque_to(&setup.flush_topic, ()).partition(slice as i32).payload(payload);
    setup.producer.send(record).map_err(|(e, _)| KafkaLayerError::Checkpoint {
        slice,
        detail: format!("writing the {what} to {}: {e}", setup.flush_topic),
    })?;
    setup.producer.context().counts().sent(&setup.flush_topic, slice as i32);
    let mark = setup.producer.context().counts().mark(Some(slice as usize));
    let started = Instant::now();
    while let Err(detail) = wait_acked(&setup.producer, &mark, FLUSH_TIMEOUT) {
        if setup.producer.context().failure().is_some() {
            return Err(KafkaLayerError::Checkpoint { slice, detail: format!("{what}: {detail}") });
        }
        log::warn!(
            "slice {slice}: the {what} is not acknowledged after {:.0} s; waiting for the broker",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
