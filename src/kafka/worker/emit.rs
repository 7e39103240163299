//! What a judgment sends: its outputs (output, duplicates, dead-letter and
//! late topics), its flag, a sparse tree's verdict — each record only to a
//! topic that does not hold it yet, in a replay ([`ReplayBounds`]).

use rdkafka::message::{BorrowedMessage, Message};

use super::owned::OwnedSlice;
use super::setup::WorkerSetup;
use crate::engine::slice::Unframed;
use crate::engine::{InvalidRecord, Judgment, ReleasePos, STAMP_BYTES, SliceVerdict, SourceRef, format_into};
use crate::kafka::producer::produce_with;
use crate::kafka::replay::{Destination, ReplayBounds};
use crate::kafka::slice_log::parts;
use crate::kafka::{KafkaLayerError, headers};

/// Emits the judgments of one release (an arrival, or a flush) whose
/// first position is `first`: outputs go to partition `slice` of the
/// output topics, with the record's slice offset and release position;
/// in a replay, a record goes only to the topics that do not hold it yet.
/// `arriving` is the record whose arrival released them, if any.
pub(super) fn emit(
    deps: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &[Judgment],
    first: ReleasePos,
    arriving: Option<(u64, &BorrowedMessage<'_>, &Unframed<'_>)>,
) -> Result<(), KafkaLayerError> {
    let slice = owned.state.slice;
    for (rank, j) in judged.iter().enumerate() {
        let pos = ReleasePos { rank: rank as u32, ..first };
        if let SliceVerdict::Duplicate { equal_timers } = j.verdict {
            deps.metrics.equal_timers.observe(f64::from(equal_timers));
        }
        owned.last_judged = Some(pos);
        // Past every topic's bound, nothing is asked per topic (the usual case).
        let replay = (!owned.replay.passed(pos)).then_some(&owned.replay);
        let flag = j.count.filter(|m| m.flagged && !replay.is_some_and(|r| r.holds(Destination::Flags, pos)));
        if j.count.is_some_and(|m| m.limited) {
            deps.metrics.limited.with_label_values(&[&slice.to_string()]).inc();
        }
        let held;
        let (msg, framed) = match arriving.filter(|(offset, ..)| *offset == j.offset) {
            Some((_, msg, framed)) => (msg as &dyn MessageRef, Some(framed)),
            None => {
                held = owned.held.remove(&j.offset).ok_or_else(|| {
                    KafkaLayerError::Topology(format!("slice {slice}: the record at offset {} was not held", j.offset))
                })?;
                (&held as &dyn MessageRef, None)
            }
        };
        msg.emit(deps, slice, j, pos, replay, framed)?;
        if let Some(mark) = flag {
            msg.flag(deps, slice, j, pos, mark.estimate, framed)?;
            deps.metrics.flagged.with_label_values(&[&slice.to_string()]).inc();
        }
        if replay.and_then(ReplayBounds::highest).is_some_and(|y| pos <= y) {
            deps.metrics.replayed.with_label_values(&[&slice.to_string()]).inc();
        }
    }
    Ok(())
}

/// A consumed record, borrowed or owned (held for the watermark), that a
/// judgment's outputs copy; `framed` is its [`parts`] when already read
/// (the arriving record's, by [`super::records::handle`]), else they are read here.
trait MessageRef {
    fn emit(
        &self,
        deps: &WorkerSetup,
        slice: u32,
        j: &Judgment,
        pos: ReleasePos,
        replay: Option<&ReplayBounds>,
        framed: Option<&Unframed<'_>>,
    ) -> Result<(), KafkaLayerError>;
    fn flag(
        &self,
        deps: &WorkerSetup,
        slice: u32,
        j: &Judgment,
        pos: ReleasePos,
        count: u64,
        framed: Option<&Unframed<'_>>,
    ) -> Result<(), KafkaLayerError>;
}

impl<M: Message> MessageRef for M {
    fn emit(
        &self,
        deps: &WorkerSetup,
        slice: u32,
        j: &Judgment,
        pos: ReleasePos,
        replay: Option<&ReplayBounds>,
        framed: Option<&Unframed<'_>>,
    ) -> Result<(), KafkaLayerError> {
        let framed = framed.copied().unwrap_or_else(|| parts(deps.cfg.slicing, self));
        emit_one(deps, slice, j, pos, self, &framed, replay)
    }

    fn flag(
        &self,
        deps: &WorkerSetup,
        slice: u32,
        j: &Judgment,
        pos: ReleasePos,
        count: u64,
        framed: Option<&Unframed<'_>>,
    ) -> Result<(), KafkaLayerError> {
        let framed = framed.copied().unwrap_or_else(|| parts(deps.cfg.slicing, self));
        emit_flag(deps, slice, j, pos, self, framed.payload, count)
    }
}

/// Copies a flagged record to `flag.topic`, partition = slice, with its
/// slice offset and release position (as on the outputs: restore reads the
/// flag topic's last one, so a replay writes no flag twice) and the
/// estimated count.
fn emit_flag<M: Message>(
    deps: &WorkerSetup,
    slice: u32,
    j: &Judgment,
    pos: ReleasePos,
    msg: &M,
    payload: Option<&[u8]>,
    count: u64,
) -> Result<(), KafkaLayerError> {
    let mut offset_buf = [0u8; 20];
    let offset_text = format_into(&mut offset_buf, format_args!("{}", j.offset));
    let mut release_buf = [0u8; 48];
    let release_text = format_into(&mut release_buf, format_args!("{pos}"));
    let mut count_buf = [0u8; 20];
    let count_text = format_into(&mut count_buf, format_args!("{count}"));
    let extra = [(headers::SLICE_OFFSET, offset_text), (headers::RELEASE, release_text), (headers::COUNT, count_text)];
    send(deps, &deps.cfg.settings.flag.topic, slice, msg, payload, &extra)
}

/// Sends what one judgment of `msg` (its [`parts`]: `framed`) produces,
/// to each topic that does not hold it yet (`replay`: the slice's bounds,
/// `None` once past them all).
pub(super) fn emit_one<M: Message>(
    deps: &WorkerSetup,
    slice: u32,
    j: &Judgment,
    pos: ReleasePos,
    msg: &M,
    framed: &Unframed<'_>,
    replay: Option<&ReplayBounds>,
) -> Result<(), KafkaLayerError> {
    let payload = framed.payload;
    if let Some(late) = j.late_by_ms {
        deps.metrics.lateness.observe(late as f64 / 1000.0);
    }
    // On a replay too: verdicts are at least once, learning one twice changes nothing.
    if let Some(v) = &deps.verdicts
        && j.verdict == SliceVerdict::Distinct
    {
        v.publish(&deps.producer, &deps.extractor, &deps.metrics, slice, msg, payload)?;
    }
    let written = |dest| replay.is_some_and(|r| r.holds(dest, pos));
    let out = &deps.cfg.settings.output;
    let mut offset_buf = [0u8; 20];
    let offset_text = format_into(&mut offset_buf, format_args!("{}", j.offset));
    let mut release_buf = [0u8; 48];
    let release_text = format_into(&mut release_buf, format_args!("{pos}"));
    let ids = [(headers::SLICE_OFFSET, offset_text), (headers::RELEASE, release_text)];
    if let Some(late) = j.late_by_ms
        && !out.late_topic.is_empty()
        && !written(Destination::Late)
    {
        let late_text = late.to_string();
        send(deps, &out.late_topic, slice, msg, payload, &[ids[0], ids[1], (headers::LATE_BY, late_text.as_bytes())])?;
    }
    match &j.verdict {
        SliceVerdict::Distinct if written(Destination::Output) => Ok(()),
        SliceVerdict::Duplicate { .. } | SliceVerdict::Resend if written(Destination::Duplicates) => Ok(()),
        SliceVerdict::Invalid(_) if written(Destination::DeadLetters) => Ok(()),
        // A dense leaf's output is its parent's input: named as this leaf's.
        SliceVerdict::Distinct if deps.cfg.tier == crate::config::Tier::DenseLeaf => {
            let leaf = (crate::kafka::tier::LEAF, deps.cfg.settings.app.id.as_bytes());
            send(deps, &out.topic, slice, msg, payload, &[ids[0], ids[1], leaf])
        }
        SliceVerdict::Distinct => send(deps, &out.topic, slice, msg, payload, &ids),
        SliceVerdict::Duplicate { equal_timers } if !out.duplicates_topic.is_empty() => {
            let rule = match j.count {
                Some(m) if m.limited => format!("limit;count={}", m.estimate),
                _ => format!("filter;equal_timers={equal_timers}"),
            };
            let mut extra = vec![ids[0], ids[1], (headers::RULE, rule.as_bytes())];
            if let Some(first) = &j.first_source {
                extra.push((headers::FIRST_SOURCE, first.as_bytes()));
            }
            send(deps, &out.duplicates_topic, slice, msg, payload, &extra)
        }
        SliceVerdict::Resend if !out.duplicates_topic.is_empty() => {
            send(deps, &out.duplicates_topic, slice, msg, payload, &[ids[0], ids[1], (headers::RULE, b"resend")])
        }
        SliceVerdict::Duplicate { .. } | SliceVerdict::Resend => Ok(()),
        SliceVerdict::Invalid(why) => dead_letter(deps, slice, why, msg, framed, &ids),
    }
}

/// Sends `msg`, which cannot be judged (`why`), to the dead-letter topic
/// with its reason, where it was read, and `ids` (its slice offset and
/// release position; a policy decision's headers too).
pub(super) fn dead_letter<M: Message>(
    deps: &WorkerSetup,
    slice: u32,
    why: &InvalidRecord,
    msg: &M,
    framed: &Unframed<'_>,
    ids: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    deps.metrics.dead_letters.with_label_values(&[why.reason.as_str()]).inc();
    let mut extra = ids.to_vec();
    extra.push((headers::REASON, why.reason.as_str().as_bytes()));
    extra.push((headers::DETAIL, why.detail.as_bytes()));
    // The input record's position: in repartition mode the router's
    // stamp; else this record's own (the slice log is the input).
    let mut stamp_buf = [0u8; STAMP_BYTES];
    let source =
        framed.source.unwrap_or(SourceRef { topic: msg.topic(), partition: msg.partition(), offset: msg.offset() });
    // No stamp for a topic name longer than Kafka allows (never panics).
    if let Some(stamp) = SourceRef::stamp(&mut stamp_buf, source.topic, source.partition, source.offset) {
        extra.push((headers::SOURCE, stamp));
    }
    send(deps, &deps.cfg.settings.output.dead_letter_topic, slice, msg, framed.payload, &extra)
}

/// Sends a copy of the input record `msg` holds (key, timestamp, headers;
/// its input payload `payload`, from [`parts`]) to `topic` partition `slice`
/// with `extra` headers, waiting while the queue is full.
pub(super) fn send<M: Message>(
    deps: &WorkerSetup,
    topic: &str,
    slice: u32,
    msg: &M,
    payload: Option<&[u8]>,
    extra: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    produce_with(&deps.producer, topic, slice as i32, msg, payload, extra, &[])
}
