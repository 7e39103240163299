//! What a judgment sends: its outputs (output, duplicates, dead-letter and
//! late topics), its flag, a sparse tree's verdict — each record only to a
//! topic that does not hold it yet, in a replay ([`ReplayBounds`]).

use super::owned::OwnedSlice;
use super::setup::WorkerSetup;
use crate::engine::{
    InvalidRecord, Judgment, RELEASE_TEXT_BYTES, RecordView, ReleasePos, STAMP_BYTES, SliceVerdict, SourceRef,
};
use crate::kafka::out_record::OutRecord;
use crate::kafka::producer::produce_out;
use crate::kafka::replay::{Destination, ReplayBounds};
use crate::kafka::size_limits::{self, Limit};
use crate::kafka::{KafkaLayerError, headers};

/// Emits the judgments of one release (an arrival, or a flush) whose
/// first position is `first`: outputs go to partition `slice` of the
/// output topics, with the record's slice offset and release position;
/// in a replay, a record goes only to the topics that do not hold it yet.
/// `arriving` is the record whose arrival released them, if any.
pub(super) fn emit(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &[Judgment],
    first: ReleasePos,
    arriving: Option<(u64, &OutRecord<'_>)>,
) -> Result<(), KafkaLayerError> {
    let slice = owned.state.slice;
    for (rank, j) in judged.iter().enumerate() {
        let pos = ReleasePos { rank: rank as u32, ..first };
        if let SliceVerdict::Duplicate { equal_timers } = j.verdict {
            setup.metrics.verdicts.equal_timers.observe(f64::from(equal_timers));
        }
        owned.last_judged = Some(pos);
        // Past every topic's bound, nothing is asked per topic (the usual case).
        let replay = (!owned.replay.passed(pos)).then_some(&owned.replay);
        let flag = j.notes.copy_count.filter(|_| !replay.is_some_and(|r| r.holds(Destination::Flags, pos)));
        if j.notes.rule.is_some() {
            setup.metrics.features.limited.with_label_values(&[&slice.to_string()]).inc();
        }
        let held;
        let rec = match arriving.filter(|(offset, _)| *offset == j.offset) {
            Some((_, rec)) => *rec,
            None => {
                held = owned.held.remove(&j.offset).ok_or_else(|| {
                    KafkaLayerError::Internal(format!("slice {slice}: the record at offset {} was not held", j.offset))
                })?;
                held.view()
            }
        };
        emit_one(setup, slice, j, pos, &rec, replay)?;
        if let Some(estimate) = flag {
            emit_flag(setup, slice, j, pos, &rec, estimate)?;
            setup.metrics.features.flagged.with_label_values(&[&slice.to_string()]).inc();
        }
        if replay.and_then(ReplayBounds::highest).is_some_and(|y| pos <= y) {
            setup.metrics.restore.replayed.with_label_values(&[&slice.to_string()]).inc();
        }
    }
    Ok(())
}

/// Copies a flagged record to `flag.topic`, partition = slice, with its
/// slice offset and release position (as on the outputs: restore reads the
/// flag topic's last one, so a replay writes no flag twice) and the
/// estimated count.
fn emit_flag(
    setup: &WorkerSetup,
    slice: u32,
    j: &Judgment,
    pos: ReleasePos,
    rec: &OutRecord<'_>,
    count: u64,
) -> Result<(), KafkaLayerError> {
    // Too large for the flag topic: the judgment's dead letter says so (emit_one).
    if setup.record_limits.refuses(Destination::Flags, copy_size(rec, j)).is_some() {
        return Ok(());
    }
    let mut offset_buf = itoa::Buffer::new();
    let offset_text = offset_buf.format(j.offset).as_bytes();
    let mut release_buf = [0u8; RELEASE_TEXT_BYTES];
    let release_text = pos.text_into(&mut release_buf);
    let mut count_buf = itoa::Buffer::new();
    let count_text = count_buf.format(count).as_bytes();
    let extra = [
        (headers::SLICE_OFFSET, offset_text),
        (headers::RELEASE, release_text),
        (headers::APP, setup.path.app.as_bytes()),
        (headers::COUNT, count_text),
    ];
    send(setup, &setup.path.flags, slice, rec, &extra)
}

/// Sends what one judgment of `rec` produces,
/// to each topic that does not hold it yet (`replay`: the slice's bounds,
/// `None` once past them all). A copy larger than its topic takes is not
/// sent; the judgment's one dead letter ([`size_limits::REASON`]) names those topics.
pub(super) fn emit_one(
    setup: &WorkerSetup,
    slice: u32,
    j: &Judgment,
    pos: ReleasePos,
    rec: &OutRecord<'_>,
    replay: Option<&ReplayBounds>,
) -> Result<(), KafkaLayerError> {
    if let Some(late) = j.late_by_ms {
        setup.metrics.verdicts.lateness.observe(late as f64 / 1000.0);
    }
    if let Some(hook) = &setup.on_distinct
        && j.verdict == SliceVerdict::Distinct
    {
        let headers = rec.headers.pairs();
        let record = RecordView {
            key: rec.key,
            payload: rec.payload.unwrap_or_default(),
            headers: &headers,
            timestamp_ms: rec.timestamp_ms,
            decoder: crate::engine::formats::payload_decoder(&setup.cfg.decoder),
        };
        hook.distinct(&setup.producer, &setup.extractor, &setup.metrics, slice, &record)?;
    }
    let written = |dest| replay.is_some_and(|r| r.holds(dest, pos));
    let mut offset_buf = itoa::Buffer::new();
    let offset_text = offset_buf.format(j.offset).as_bytes();
    let mut release_buf = [0u8; RELEASE_TEXT_BYTES];
    let release_text = pos.text_into(&mut release_buf);
    // Which judgment, and of which application (invariant 8): on every record it writes.
    let ids = [
        (headers::SLICE_OFFSET, offset_text),
        (headers::RELEASE, release_text),
        (headers::APP, setup.path.app.as_bytes()),
    ];
    let size = copy_size(rec, j);
    let main = main_destination(setup, j).filter(|d| !written(*d));
    let flagged = j.notes.copy_count.is_some() && !written(Destination::Flags);
    let late = j.late_by_ms.filter(|_| !setup.path.late.is_empty() && !written(Destination::Late));
    // The dead letters are the main destination of an unreadable record:
    // one too large for them loses its value there instead.
    let refused: Vec<(Destination, &Limit)> =
        [late.map(|_| Destination::Late), main, flagged.then_some(Destination::Flags)]
            .into_iter()
            .flatten()
            .filter(|d| *d != Destination::DeadLetters)
            .filter_map(|d| setup.record_limits.refuses(d, size).map(|l| (d, l)))
            .collect();
    let fits = |dest| !refused.iter().any(|(d, _)| *d == dest);
    if let Some(late) = late
        && fits(Destination::Late)
    {
        let late_text = late.to_string();
        send(setup, &setup.path.late, slice, rec, &[ids[0], ids[1], ids[2], (headers::LATE_BY, late_text.as_bytes())])?;
    }
    if main.is_some_and(fits) {
        send_main(setup, slice, j, rec, &ids)?;
    }
    if refused.is_empty() || written(Destination::DeadLetters) {
        return Ok(());
    }
    dead_letter_as(setup, slice, size_limits::REASON, &refusal_detail(size, &refused), rec, &ids)
}

/// A copy's size as [`size_limits::record_size`] counts it, with the headers
/// this judgment adds beyond dedupd's usual ones. The same for every topic
/// the judgment writes, and in a replay: it depends on the record alone.
fn copy_size(rec: &OutRecord<'_>, j: &Judgment) -> u64 {
    let stage_header = j.notes.duplicate_header.as_ref().map_or(0, |(_, value)| value.len()) as u64;
    out_size(rec) + stage_header
}

/// The limit of `dest` when a copy of `rec` exceeds it (a
/// policy decision's record: no headers beyond the usual ones).
pub(super) fn refusal<'a>(
    setup: &'a WorkerSetup,
    dest: Destination,
    rec: &OutRecord<'_>,
) -> Option<&'a size_limits::Limit> {
    setup.record_limits.refuses(dest, out_size(rec))
}

/// The `dedupd.detail` of a copy of `size` bytes that the topics of
/// `refused` do not take.
fn refusal_detail(size: u64, refused: &[(Destination, &Limit)]) -> String {
    let topics: Vec<String> =
        refused.iter().map(|(d, l)| format!("{} topic {} takes at most {}", d.name(), l.topic, l.bytes)).collect();
    format!("{size} bytes as the broker counts them; the {}", topics.join(", the "))
}

/// [`dead_letter`] of a record whose copies the topics of `refused` do not
/// take, as [`size_limits::REASON`].
pub(super) fn dead_letter_too_large(
    setup: &WorkerSetup,
    slice: u32,
    refused: &[(Destination, &Limit)],
    rec: &OutRecord<'_>,
    ids: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    let size = out_size(rec);
    dead_letter_as(setup, slice, size_limits::REASON, &refusal_detail(size, refused), rec, ids)
}

/// Where the judgment `j` sends its record, if anywhere: the output, the
/// duplicates (when that topic is on) or the dead letters.
fn main_destination(setup: &WorkerSetup, j: &Judgment) -> Option<Destination> {
    match j.verdict {
        SliceVerdict::Distinct => Some(Destination::Output),
        SliceVerdict::Duplicate { .. } | SliceVerdict::Resend => {
            Some(Destination::Duplicates).filter(|_| !setup.path.duplicates.is_empty())
        }
        SliceVerdict::Invalid(_) => Some(Destination::DeadLetters),
    }
}

/// Sends the judgment's record to its [`main_destination`], with `ids`
/// (its slice offset, release position and application).
fn send_main(
    setup: &WorkerSetup,
    slice: u32,
    j: &Judgment,
    rec: &OutRecord<'_>,
    ids: &[(&str, &[u8]); 3],
) -> Result<(), KafkaLayerError> {
    let path = &setup.path;
    match &j.verdict {
        SliceVerdict::Distinct => match &path.output_header {
            Some((name, value)) => {
                send(setup, &path.output, slice, rec, &[ids[0], ids[1], ids[2], (name, value.as_bytes())])
            }
            None => send(setup, &path.output, slice, rec, ids),
        },
        SliceVerdict::Duplicate { equal_timers } if !path.duplicates.is_empty() => {
            let rule = match j.notes.rule {
                Some(r) => format!("{};count={}", r.name, r.count),
                None => format!("filter;equal_timers={equal_timers}"),
            };
            let mut extra = vec![ids[0], ids[1], ids[2], (headers::RULE, rule.as_bytes())];
            if let Some((name, value)) = &j.notes.duplicate_header {
                extra.push((name, value.as_bytes()));
            }
            send(setup, &path.duplicates, slice, rec, &extra)
        }
        SliceVerdict::Resend if !path.duplicates.is_empty() => {
            send(setup, &path.duplicates, slice, rec, &[ids[0], ids[1], ids[2], (headers::RULE, b"resend")])
        }
        SliceVerdict::Duplicate { .. } | SliceVerdict::Resend => Ok(()),
        SliceVerdict::Invalid(why) => dead_letter(setup, slice, why, rec, ids),
    }
}

/// Sends `rec`, which cannot be judged (`why`), to the dead-letter topic
/// with its reason, where it was read, and `ids` (its slice offset,
/// release position and application; a policy decision's headers too).
pub(super) fn dead_letter(
    setup: &WorkerSetup,
    slice: u32,
    why: &InvalidRecord,
    rec: &OutRecord<'_>,
    ids: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    dead_letter_as(setup, slice, why.reason.as_str(), &why.detail, rec, ids)
}

/// [`dead_letter`] with a `reason` and `detail` of the Kafka layer's own.
/// A dead letter larger than its topic takes goes without its value, and if
/// still too large without its key and headers too ([`headers::VALUE_DROPPED`]
/// says so): its source stamp still finds the input record.
fn dead_letter_as(
    setup: &WorkerSetup,
    slice: u32,
    reason: &str,
    detail: &str,
    rec: &OutRecord<'_>,
    ids: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    setup.metrics.verdicts.dead_letters.with_label_values(&[reason]).inc();
    let mut extra = ids.to_vec();
    extra.push((headers::REASON, reason.as_bytes()));
    extra.push((headers::DETAIL, detail.as_bytes()));
    // The input record's position: in repartition mode the router's
    // stamp; else this record's own (the slice log is the input).
    let mut stamp_buf = [0u8; STAMP_BYTES];
    let source = rec.origin.source();
    // No stamp for a topic name longer than Kafka allows (never panics).
    if let Some(stamp) = SourceRef::stamp(&mut stamp_buf, source.topic, source.partition, source.offset) {
        extra.push((headers::SOURCE, stamp));
    }
    let topic = &setup.path.dead_letters;
    let size = out_size(rec) + detail.len() as u64;
    let Some(limit) = setup.record_limits.refuses(Destination::DeadLetters, size) else {
        return send(setup, topic, slice, rec, &extra);
    };
    let value = rec.payload.map_or(0, <[u8]>::len) as u64;
    let note = |dropped: &str| {
        format!(
            "{dropped} left out: {size} bytes, the dead-letter topic {topic} takes at most {} (value {value} bytes)",
            limit.bytes
        )
    };
    let mut note_text = note("value");
    let bare = setup.record_limits.refuses(Destination::DeadLetters, size - value + note_text.len() as u64).is_some();
    if bare {
        note_text = note("value, key and headers");
    }
    let note = note_text;
    extra.push((headers::VALUE_DROPPED, note.as_bytes()));
    if bare {
        crate::kafka::producer::produce_bare(&setup.producer, topic, slice as i32, rec.timestamp_ms, &extra)
    } else {
        send(setup, topic, slice, &OutRecord { payload: None, ..*rec }, &extra)
    }
}

/// Sends a copy of `rec` (key, timestamp, headers, input payload) to
/// `topic` partition `slice` with `extra` headers, waiting while the queue is full.
pub(super) fn send(
    setup: &WorkerSetup,
    topic: &str,
    slice: u32,
    rec: &OutRecord<'_>,
    extra: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    produce_out(&setup.producer, topic, slice as i32, rec, extra)
}

/// A copy's size as [`size_limits::record_size`] counts it, before any
/// header a judgment adds.
fn out_size(rec: &OutRecord<'_>) -> u64 {
    size_limits::record_size(rec.key, rec.payload, rec.headers.lens())
}
