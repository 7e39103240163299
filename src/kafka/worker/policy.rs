//! `availability.policy` (docs/availability.md): the records of a slice
//! being restored are decided (`deliver`, `drop`) rather than judged, each
//! range of them logged in the flush log first so that every later restore
//! applies the same decisions.

use std::time::Instant;

use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::producer::{BaseRecord, Producer};

use super::context::{OwnedSlice, WorkerSetup};
use super::emit::{emit_one, send};
use super::records::{apply_logged_flushes, is_control};
use super::snapshots::FLUSH_TIMEOUT;
use crate::config::AvailabilityPolicy;
use crate::engine::slice::Unframed;
use crate::engine::{Judgment, RecordView, ReleasePos, SliceRecord, SliceVerdict};
use crate::kafka::producer::wait_acked;
use crate::kafka::restore::{PolicyRange, policy_record, range_of};
use crate::kafka::slice_log::parts_with;
use crate::kafka::{KafkaLayerError, headers};

/// A slice being restored whose records `availability.policy` decides
/// meanwhile (docs/availability.md): each is sent at once, to the output
/// (`deliver`) or to the duplicates topic (`drop`), once the range of slice
/// offsets it is in has been logged in the flush log, so that the restore
/// (and every later one) applies the same decisions.
pub(super) struct Deciding {
    /// The next slice offset expected.
    pub(super) next: u64,
    /// The slice's last ordinary output before (its release position).
    pub(super) normal: Option<ReleasePos>,
    /// Policy outputs were sent up to this release position.
    pub(super) sent: Option<ReleasePos>,
    /// The policy ranges logged, by earlier owners and by this one.
    pub(super) ranges: Vec<PolicyRange>,
}

/// Slice offsets a policy range logs at once: records arriving for a slice
/// being restored are decided without a wait for the log most of the time.
const POLICY_STEP: u64 = 500;

/// Decides a record of a slice being restored by `availability.policy`
/// (see [`Deciding`]): logs its range first if no range logged holds it.
/// A router's progress record is skipped (inside a policy range the order
/// buffer is not moved: nothing is released there), a delete request left
/// for the restored slice (it releases nothing); a record whose key or time
/// cannot be read goes to the dead-letter topic at once.
pub(super) fn decide_early(
    deps: &WorkerSetup,
    d: &mut Deciding,
    slice: u32,
    msg: &BorrowedMessage<'_>,
) -> Result<(), KafkaLayerError> {
    let offset = msg.offset() as u64;
    if offset < d.next {
        return Ok(());
    }
    d.next = offset + 1;
    let header_list: Vec<(&str, &[u8])> =
        msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()).unwrap_or_default();
    let source_header = header_list.iter().find(|(k, _)| *k == headers::SOURCE).map(|(_, v)| *v);
    let framed = parts_with(deps.cfg.slicing, msg.payload(), source_header);
    if is_control(deps, framed.source, &header_list, headers::PROGRESS)
        || is_control(deps, framed.source, &header_list, headers::DELETE)
    {
        return Ok(());
    }
    let range = match range_of(&d.ranges, offset) {
        Some(r) => r,
        None => {
            let limit = d.ranges.iter().filter(|r| r.from > offset).map(|r| r.from - 1).min();
            let to = (offset + POLICY_STEP - 1).min(limit.unwrap_or(u64::MAX));
            let range = PolicyRange { from: offset, to, policy: deps.cfg.availability };
            log_range(deps, slice, &range)?;
            d.ranges.push(range);
            range
        }
    };
    let pos = ReleasePos { after: offset, flush: false, rank: 0 };
    let silent = d.sent.is_some_and(|y| pos <= y) || d.normal.is_some_and(|y| pos <= y);
    let record = RecordView {
        key: msg.key(),
        payload: framed.payload.unwrap_or_default(),
        headers: &header_list,
        timestamp_ms: msg.timestamp().to_millis(),
    };
    match deps.extractor.extract(&record, 0) {
        Ok(_) => {
            emit_policy(deps, slice, msg, &framed, offset, pos, range.policy, d.normal, silent)?;
            if !silent {
                d.sent = Some(pos);
            }
        }
        Err(why) => {
            let j = Judgment {
                offset,
                verdict: SliceVerdict::Invalid(why),
                late_by_ms: None,
                first_source: None,
                count: None,
            };
            emit_one(deps, slice, &j, pos, msg, &framed, silent)?;
        }
    }
    Ok(())
}

/// Applies a logged policy decision to the record at `offset` of a restored
/// slice (see [`crate::engine::SliceState::decide`]): a replay of a decision made while
/// it was restored (silent: its output was sent) or, for a range logged
/// ahead, a decision made now. A router's progress record there is skipped
/// and a delete request applied, as [`decide_early`] leaves them; a record
/// whose key or time cannot be read goes to the dead-letter topic.
#[allow(clippy::too_many_arguments)]
pub(super) fn decide_logged(
    deps: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    msg: &BorrowedMessage<'_>,
    framed: &Unframed<'_>,
    header_list: &[(&str, &[u8])],
    range: PolicyRange,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let slice = owned.state.slice;
    let offset = msg.offset() as u64;
    owned.since_checkpoint += 1;
    if is_control(deps, framed.source, header_list, headers::PROGRESS) {
        owned.state.next_offset = offset + 1;
        judged.clear();
        return apply_logged_flushes(deps, owned, judged);
    }
    owned.last_arrival = now;
    if is_control(deps, framed.source, header_list, headers::DELETE) {
        let key = msg.key().unwrap_or_default();
        let outcome = match owned.copying.as_mut() {
            Some(c) => owned.state.delete_copying(offset, key, &mut c.copy),
            None => owned.state.delete(offset, key),
        };
        crate::kafka::deletes::posted(&deps.status.deletes, slice, offset, outcome);
        judged.clear();
        return apply_logged_flushes(deps, owned, judged);
    }
    let record = RecordView {
        key: msg.key(),
        payload: framed.payload.unwrap_or_default(),
        headers: header_list,
        timestamp_ms: msg.timestamp().to_millis(),
    };
    let slice_record = SliceRecord { offset, record, source: framed.source, reading: None };
    let deliver = range.policy == AvailabilityPolicy::Deliver;
    let decided = match owned.copying.as_mut() {
        Some(c) => owned.state.decide(&slice_record, &deps.extractor, deliver, Some(&mut c.copy)),
        None => owned.state.decide(&slice_record, &deps.extractor, deliver, None),
    };
    let pos = ReleasePos { after: offset, flush: false, rank: 0 };
    let silent = owned.replay_until.is_some_and(|y| pos <= y) || owned.policy_until.is_some_and(|y| pos <= y);
    if !silent {
        owned.replay_until = None;
        owned.policy_until = None;
    }
    if decided {
        emit_policy(deps, slice, msg, framed, offset, pos, range.policy, owned.last_normal, silent)?;
    } else {
        owned.state.next_offset = offset + 1;
        owned.state.counters.invalid += 1;
        let why = match deps.extractor.extract(&slice_record.record, 0) {
            Err(why) => why,
            Ok(_) => unreachable!("decide refuses only a record it cannot read"),
        };
        let j =
            Judgment { offset, verdict: SliceVerdict::Invalid(why), late_by_ms: None, first_source: None, count: None };
        emit_one(deps, slice, &j, pos, msg, framed, silent)?;
    }
    if silent {
        deps.metrics.replayed.with_label_values(&[&slice.to_string()]).inc();
    }
    judged.clear();
    apply_logged_flushes(deps, owned, judged)
}

/// Sends a record decided by `policy`: to the output (`deliver`) or the
/// duplicates topic (`drop`), with its slice offset, release position,
/// header `dedupd.policy` and in `dedupd.policy.after` the slice's last
/// ordinary output before (`normal`) — nothing when `silent`.
#[allow(clippy::too_many_arguments)]
fn emit_policy<M: Message>(
    deps: &WorkerSetup,
    slice: u32,
    msg: &M,
    framed: &Unframed<'_>,
    offset: u64,
    pos: ReleasePos,
    policy: AvailabilityPolicy,
    normal: Option<ReleasePos>,
    silent: bool,
) -> Result<(), KafkaLayerError> {
    if silent {
        return Ok(());
    }
    deps.metrics.policy_decisions.with_label_values(&[&slice.to_string(), policy.as_str()]).inc();
    let out = &deps.cfg.settings.output;
    let offset_text = offset.to_string();
    let release_text = pos.to_string();
    let after_text = normal.map(|y| y.to_string()).unwrap_or_default();
    let mut extra = vec![
        (headers::SLICE_OFFSET, offset_text.as_bytes()),
        (headers::RELEASE, release_text.as_bytes()),
        (headers::POLICY, policy.as_str().as_bytes()),
        (headers::POLICY_AFTER, after_text.as_bytes()),
    ];
    match policy {
        AvailabilityPolicy::Drop => {
            extra.push((headers::RULE, b"policy"));
            send(deps, &out.duplicates_topic, slice, msg, framed.payload, &extra)
        }
        _ => send(deps, &out.topic, slice, msg, framed.payload, &extra),
    }
}

/// Writes a policy range to the slice's flush log and waits until the
/// broker has it: no output of the range is sent before (see [`super::records::idle_flush`]).
fn log_range(deps: &WorkerSetup, slice: u32, range: &PolicyRange) -> Result<(), KafkaLayerError> {
    log::info!(
        "slice {slice}: offsets {}..={} decided by availability.policy = {} while it is restored (logged)",
        range.from,
        range.to,
        range.policy.as_str()
    );
    log_and_wait(deps, slice, policy_record(range).as_bytes(), &format!("policy range {}..={}", range.from, range.to))
}

/// Writes `payload` to the slice's flush log and waits until the broker has
/// it. A broker that does not answer is waited for; librdkafka bounds the
/// wait (`message.timeout.ms`): then the delivery fails and so does this.
pub(super) fn log_and_wait(deps: &WorkerSetup, slice: u32, payload: &[u8], what: &str) -> Result<(), KafkaLayerError> {
    let record: BaseRecord<'_, [u8], [u8], ()> =
        BaseRecord::with_opaque_to(&deps.flush_topic, ()).partition(slice as i32).payload(payload);
    deps.producer.send(record).map_err(|(e, _)| KafkaLayerError::Checkpoint {
        slice,
        detail: format!("writing the {what} to {}: {e}", deps.flush_topic),
    })?;
    deps.producer.context().counts().sent(&deps.flush_topic, slice as i32);
    let mark = deps.producer.context().counts().mark(Some(slice as usize));
    let started = Instant::now();
    while let Err(detail) = wait_acked(&deps.producer, &mark, FLUSH_TIMEOUT) {
        if deps.producer.context().failure().is_some() {
            return Err(KafkaLayerError::Checkpoint { slice, detail: format!("{what}: {detail}") });
        }
        log::warn!(
            "slice {slice}: the {what} is not acknowledged after {:.0} s; waiting for the broker",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
