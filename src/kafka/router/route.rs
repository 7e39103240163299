//! Routing: buffered records go to their slices in event-time order (or,
//! unreadable, to the dead letters); or they are named in a read-order
//! record instead of copied, when the slice log holds read orders.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use prometheus::local::LocalHistogram;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};

use super::commits::CommitBook;
use super::lanes::{Lane, Read, set_paused};
use super::setup::{PartitionId, RouterSetup};
use crate::engine::slice::frame_into;
use crate::engine::{InvalidReason, InvalidRecord, Reading, RecordView, STAMP_BYTES, SourceRef};
use crate::features::shared::handoff::{Handing, PageBuilder};
use crate::filter::KeyHash;
use crate::kafka::consumed::Consumed;
use crate::kafka::out_record::OutHeaders;
use crate::kafka::producer::{produce_control, produce_copy, produce_with};
use crate::kafka::slice_log::Holds;
use crate::kafka::slice_log::batch::{BatchBuilder, BatchEntry};
use crate::kafka::slice_log::read_order::ReadOrderBuilder;
use crate::kafka::{KafkaLayerError, headers};
use crate::metrics::observe_since;

/// Shared mode: input records one read-order record names at most (each
/// turn of the router writes one; a larger turn, several). Well below
/// [`crate::kafka::slice_log::read_order::MAX_RECORDS`], so a record stays about 100 KB
/// (24 bytes of reading per record named).
const READ_ORDER_RECORDS: u64 = 4096;
/// Batch form: input records one batch holds at most (one router turn for
/// one slice; a larger turn writes several).
const BATCH_RECORDS: u32 = 4096;
/// Batch form: bytes one batch holds at most, unless its one record is
/// larger: half of Kafka's default record limit, so a batch never needs
/// more of the slice log than a copy of its largest record would.
const BATCH_BYTES: usize = 512 * 1024;

/// Routes buffered records in timestamp order while no partition that may
/// still deliver an earlier record is empty.
pub(super) fn route_ready<C: ConsumerContext>(
    setup: &RouterSetup,
    consumer: &BaseConsumer<C>,
    book: &Mutex<CommitBook>,
    lanes: &mut BTreeMap<PartitionId, Lane<'_>>,
    now: Instant,
    wall_ms: i64,
    sent: &LocalHistogram,
) -> Result<(), KafkaLayerError> {
    let mut routed: Vec<(usize, i64)> = Vec::new();
    let tolerance = i64::try_from(setup.cfg.order_tolerance_ms).unwrap_or(i64::MAX);
    let max_bytes = super::lanes::lane_share(setup.cfg.budget.router, lanes.len());
    let mut frame = Vec::new();
    // Shared mode: the records routed are named, not copied (see `write_read_order`).
    let holds = Holds::of(setup.cfg.slicing, setup.cfg.slice_log_format);
    let mut named = (holds == Holds::ReadOrders).then(|| ReadOrderBuilder::at(0));
    let mut page = None;
    if !start_page(setup, now, &mut page) {
        return Ok(());
    }
    // Batch form: the records routed are packed per slice (see `add_to_batch`).
    let mut batches = (holds == Holds::Batches).then(BTreeMap::new);
    let result = loop {
        let next = lanes.values().enumerate().filter_map(|(i, l)| l.records.front().map(|r| (r.time(), i))).min();
        let Some((timestamp, index)) = next else {
            break Ok(());
        };
        if lanes.values().any(|l| l.holds_back(now, timestamp, tolerance)) {
            break Ok(());
        }
        let (id, lane) = lanes.iter_mut().nth(index).expect("lane exists");
        if let Some(names) = named.as_mut() {
            match make_room(setup, names, &mut page, lane.records.front().expect("non-empty lane"), now) {
                Ok(true) => {}
                Ok(false) => break Ok(()), // the slice catches up first
                Err(e) => break Err(e),
            }
        }
        let Read { msg: kept, target, order, has_headers, bytes } = lane.pop().expect("non-empty lane");
        let msg = kept.get();
        if target.is_ok() {
            lane.routed += 1;
            if order != i64::MIN {
                lane.routed_max = Some(lane.routed_max.map_or(order, |m| m.max(order)));
            }
        } else {
            lane.dead_lettered += 1;
        }
        if lane.paused && lane.may_resume(max_bytes) {
            lane.paused = set_paused(consumer, &id.0, id.1, false);
        }
        let done = match (named.as_mut(), batches.as_mut(), target) {
            (Some(names), _, Ok((_, reading))) => {
                // A page carries its records' readings: its read order need not.
                names.push(&id.0, msg.partition(), msg.offset(), page.is_none().then_some(reading));
                if let Some(page) = page.as_mut() {
                    let headers = if has_headers { OutHeaders::of(&msg) } else { OutHeaders::None };
                    page.push(&msg, &id.0, headers, bytes, reading);
                }
                Ok(())
            }
            (_, Some(batches), Ok((slice, reading))) => {
                let headers = if has_headers { OutHeaders::of(&msg) } else { OutHeaders::None };
                add_to_batch(setup, batches, (&msg, headers), &id.0, slice, reading)
            }
            (_, _, target) => route(setup, &msg, &id.0, target, &mut frame),
        };
        if let Err(e) = done {
            break Err(e);
        }
        observe_since(sent, msg.timestamp().to_millis(), wall_ms);
        match routed.last_mut() {
            Some((i, next)) if *i == index => *next = msg.offset() + 1,
            _ => routed.push((index, msg.offset() + 1)),
        }
    };
    // Written before the offsets become pending: a commit waits for its acknowledgement.
    let result = match (result, named.as_mut(), batches.as_mut()) {
        (Ok(()), Some(names), _) => write_read_order(setup, names, &mut page, now),
        (Ok(()), _, Some(batches)) => batches.iter_mut().try_for_each(|(&slice, b)| write_batch(setup, slice, b)),
        (result, ..) => result,
    };
    // With batches, a failed turn leaves records in batches not written:
    // none of its offsets becomes pending (a re-send is dropped by its stamp).
    if !routed.is_empty() && (batches.is_none() || result.is_ok()) {
        let ids: Vec<&PartitionId> = lanes.keys().collect();
        let mut s = book.lock().expect("router lock");
        for (index, next) in routed {
            s.pending.insert(ids[index].clone(), next);
        }
    }
    result
}
/// Shared mode: before the lane's next record `next` is named, writes the
/// read-order record so far (with its page) when it names as many as one
/// may or when its page has no room for `next`, and starts the next ones.
/// False when the pages handed over fill their part of the budget: the
/// router routes nothing more this turn (`next` stays in its lane).
fn make_room(
    setup: &RouterSetup,
    names: &mut ReadOrderBuilder,
    page: &mut Option<PageBuilder>,
    next: &Read<'_>,
    now: Instant,
) -> Result<bool, KafkaLayerError> {
    let page_full = next.target.is_ok() && page.as_ref().is_some_and(|p| !p.fits(next.bytes));
    if names.next_position() < READ_ORDER_RECORDS && !page_full {
        return Ok(true);
    }
    write_read_order(setup, names, page, now)?;
    Ok(start_page(setup, now, page))
}

/// Shared mode: starts `page`, the copy of the records named next for the
/// slice of this process, if it takes them (`features/shared/handoff.rs`).
/// False while the pages handed over fill their part of the budget: the
/// router routes nothing until the slice has caught up.
fn start_page(setup: &RouterSetup, now: Instant, page: &mut Option<PageBuilder>) -> bool {
    *page = None;
    match setup.handoff.as_ref().map(|h| h.handing(now)) {
        Some(Handing::Wait) => false,
        Some(Handing::Room(room)) => {
            *page = Some(PageBuilder::new(room, READ_ORDER_RECORDS as usize));
            true
        }
        Some(Handing::Off) | None => true,
    }
}

/// Shared mode: writes what `names` gathered as one read-order record to
/// the slice log (partition 0, the one slice), by the producer that writes
/// the router's progress after it, and starts a new one. The slice judges
/// the records it names, in its order, re-reading them from the input: the
/// records themselves are not copied, except into the `page` handed to the
/// slice of this process first (`features/shared/handoff.rs`), if one is made.
fn write_read_order(
    setup: &RouterSetup,
    names: &mut ReadOrderBuilder,
    page: &mut Option<PageBuilder>,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let record = std::mem::replace(names, ReadOrderBuilder::at(0)).take();
    if record.is_empty() {
        return Ok(());
    }
    let encoded = record.encode();
    if let (Some(handoff), Some(page)) = (&setup.handoff, page.as_mut())
        && let Some(batch) = page.finish(record.len())
    {
        handoff.hand_over(&encoded, batch, now);
    }
    produce_control(&setup.producer, &setup.slice_topic, 0, headers::READ_ORDER, &encoded)
}

/// Batch form: adds an input record `msg` (with its headers, asked once)
/// routed to `slice` to that slice's batch, writing the batch first when
/// the record does not fit it. A
/// record a batch cannot hold goes to the dead letters.
fn add_to_batch(
    setup: &RouterSetup,
    batches: &mut BTreeMap<u32, BatchBuilder>,
    (msg, headers): (&Consumed<'_>, OutHeaders<'_>),
    topic: &str,
    slice: u32,
    reading: Reading,
) -> Result<(), KafkaLayerError> {
    let builder = batches.entry(slice).or_insert_with(|| BatchBuilder::new(BATCH_RECORDS, BATCH_BYTES));
    let entry = BatchEntry {
        source: SourceRef { topic, partition: msg.partition(), offset: msg.offset() },
        reading: setup.hands_on_reading.then_some(reading),
        timestamp_ms: msg.timestamp().to_millis(),
        key: msg.key(),
        headers,
        payload: msg.payload(),
    };
    if !builder.fits(&entry) {
        write_batch(setup, slice, builder)?;
    }
    // The input record's own `dedupd.*` headers are not copied, as `route` leaves them out.
    if builder.push(&entry, |name| !headers::is_reserved(name)).is_some() {
        return Ok(());
    }
    let why = InvalidRecord {
        reason: InvalidReason::TooLarge,
        detail: "a slice-log batch cannot hold it (more than 65 535 headers, a header name over 64 KiB or a part \
                 over 4 GiB)"
            .into(),
    };
    route(setup, msg, topic, Err(why), &mut Vec::new())
}

/// Batch form: writes what `builder` gathered as one batch to partition
/// `slice` of the slice log, and starts a new one.
fn write_batch(setup: &RouterSetup, slice: u32, builder: &mut BatchBuilder) -> Result<(), KafkaLayerError> {
    if builder.is_empty() {
        return Ok(());
    }
    produce_control(&setup.producer, &setup.slice_topic, slice as i32, headers::BATCH, &builder.finish())
}

/// A reading's event time as the routing order takes it.
pub(super) fn event_time(r: &Reading) -> i64 {
    i64::try_from(r.time_ms).unwrap_or(i64::MAX)
}

/// Reads an input record's slice, key hash and event time (once, when it
/// arrives; the slice takes the reading from the frame).
pub(super) fn read(
    setup: &RouterSetup,
    msg: &Consumed<'_>,
    headers: OutHeaders<'_>,
) -> Result<(u32, Reading), InvalidRecord> {
    let header_list: Vec<(&str, &[u8])> = if setup.key_reads_headers { headers.pairs() } else { Vec::new() };
    let view = RecordView {
        key: msg.key(),
        payload: msg.payload().unwrap_or_default(),
        headers: &header_list,
        timestamp_ms: msg.timestamp().to_millis(),
        decoder: crate::engine::formats::payload_decoder(&setup.cfg.decoder),
    };
    let x = setup.extractor.extract(&view, 0)?;
    let hash = KeyHash::of(setup.seed, &x.key);
    Ok((hash.slice(setup.slices), Reading { seed: setup.seed, hash, time_ms: x.time_ms }))
}

/// Sends one input record of `topic` to its slice, or to the dead-letter
/// topic. `frame` is a buffer for the slice record's value (reused).
fn route(
    setup: &RouterSetup,
    msg: &Consumed<'_>,
    topic: &str,
    target: Result<(u32, Reading), InvalidRecord>,
    frame: &mut Vec<u8>,
) -> Result<(), KafkaLayerError> {
    match target {
        Ok((slice, reading)) => {
            // The stamp goes in front of the payload (see `FRAME_MAGIC`). The
            // input record's own `dedupd.*` headers are not copied
            // (`produce_with`): a slice never takes one for a stamp, a
            // progress record or a delete request, and none reaches an output.
            let reading = setup.hands_on_reading.then_some(&reading);
            frame_into(frame, topic, msg.partition(), msg.offset(), reading, msg.payload()).ok_or_else(|| {
                // Input topics are named in `input.topics`, which allows no longer name.
                KafkaLayerError::Topics(format!("input topic {topic:?} has a name longer than Kafka allows"))
            })?;
            produce_with(&setup.producer, &setup.slice_topic, slice as i32, msg, Some(frame), &[], &[])
        }
        Err(why) => {
            let mut buf = [0u8; STAMP_BYTES];
            setup.metrics.verdicts.dead_letters.with_label_values(&[why.reason.as_str()]).inc();
            let partition = msg.partition().rem_euclid(setup.slices as i32);
            // Named as this application's: restore passes over it as its own router's (invariant 8).
            let mut extra = vec![
                (headers::APP, setup.cfg.settings.app.id.as_bytes()),
                (headers::REASON, why.reason.as_str().as_bytes()),
                (headers::DETAIL, why.detail.as_bytes()),
            ];
            if let Some(stamp) = SourceRef::stamp(&mut buf, topic, msg.partition(), msg.offset()) {
                extra.push((headers::SOURCE, stamp));
            }
            produce_copy(&setup.producer, &setup.cfg.settings.output.dead_letter_topic, partition, msg, &extra)
        }
    }
}
