//! `DELETE /v1/keys/{key}`: forgetting a key through the slice log.
//!
//! A delete changes the filter, so it must happen at a definite place in
//! the slice's order (docs/design.md, invariant 1): the endpoint writes a control
//! record (header [`headers::DELETE`], record key = the dedup key) into
//! partition `H_S(key)` of the slice log, and the slice applies it when it
//! reaches it, like any record. A restart that replays the log from an
//! older snapshot applies it again at the same place, so every verdict
//! after a crash is the one the uninterrupted run gave; a snapshot taken
//! after it holds its effect. (A delete applied straight to the filter
//! would be lost, or applied at another place, by a replay.) The endpoint
//! then waits for the outcome the slice posts on [`DeleteBoard`].
//!
//! Requests run concurrently: the producer is a [`ThreadedProducer`] (its
//! own thread serves delivery reports), and each request waits on its own
//! channel for its own record's report, holding no lock — a slow broker
//! delays each request by its own wait, not by the waits queued before it.
//!
//! A record the broker has not confirmed within `BROKER_WAIT` is still in
//! the producer's queue and may be written later (librdkafka retries it
//! until `message.timeout.ms`), and then applied: such a request is answered
//! 202 Accepted with `"written": "unknown"`, never 503 "not written". 503
//! means the record was refused or its delivery failed: it will not apply.

use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, SyncSender, sync_channel};
use std::time::Duration;

use axum::http::StatusCode;
use rdkafka::ClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use serde_json::json;

use super::board::DeleteBoard;
use crate::admin::status::KeyActionFn;
use crate::config::SlicingMode;
use crate::features::feature::WorkerView;
use crate::filter::{DeleteRefusal, KeyHash};
use crate::kafka::{Context, KafkaLayerError, clients, headers};

/// How long a request waits for the broker, then for the slice: below the
/// admin endpoint's request timeout (10 s), so the answer says what happened.
const BROKER_WAIT: Duration = Duration::from_secs(4);
const SLICE_WAIT: Duration = Duration::from_secs(4);

/// Hands each delivery report to the request waiting for it.
struct Delivered;

impl ClientContext for Delivered {}

impl ProducerContext for Delivered {
    type DeliveryOpaque = Box<SyncSender<Result<i64, String>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, to: Self::DeliveryOpaque) {
        use rdkafka::message::Message;
        let _ = to.send(result.as_ref().map(|m| m.offset()).map_err(|(e, _)| e.to_string()));
    }
}

/// The `DELETE /v1/keys/{key}` answer ([`crate::admin::Status::key_actions`]),
/// waiting on `board` for the outcome the slice posts.
pub fn delete_fn(worker: &WorkerView<'_>, board: Arc<DeleteBoard>) -> Result<KeyActionFn, KafkaLayerError> {
    let WorkerView { cfg, seed, deletable, slice_topic, .. } = *worker;
    let owns = worker.owns.clone();
    let id = &cfg.settings.app.id;
    let producer: ThreadedProducer<Delivered> = clients::producer(cfg, &format!("{id}-deletes"))
        .create_with_context(Delivered)
        .context(|| "creating the delete producer".into())?;
    let (slices, mode, topic) = (cfg.settings.filter.slices, cfg.slicing, slice_topic.to_string());
    Ok(Arc::new(move |key: &[u8]| {
        let refuse = |code: StatusCode, reason: &str| (code, json!({ "deleted": false, "reason": reason }));
        if !deletable {
            return refuse(StatusCode::CONFLICT, &DeleteRefusal::NotDeletable.to_string());
        }
        if mode == SlicingMode::InputPartitions {
            return refuse(
                StatusCode::CONFLICT,
                "deletes need slicing.mode = \"repartition\" or \"shared\": with input-partitions the slice log is the input \
                 topic, which dedupd does not write to",
            );
        }
        let slice = KeyHash::of(seed, key).slice(slices);
        let offset = match send(&producer, &topic, slice, key, BROKER_WAIT) {
            Sent::Written(offset) => offset,
            Sent::Failed(why) => {
                return refuse(StatusCode::SERVICE_UNAVAILABLE, &format!("not written to {topic}: {why}"));
            }
            Sent::Unconfirmed => return unconfirmed(key, slice, &topic),
        };
        let waited = owns(slice).then(|| board.wait(slice, offset, SLICE_WAIT)).flatten();
        answer(key, slice, offset, waited)
    }))
}

/// What became of a control record within the wait.
#[derive(Debug, PartialEq)]
enum Sent {
    /// The broker has it, at this offset of the slice's partition.
    Written(u64),
    /// Refused or failed: it will not be written.
    Failed(String),
    /// No delivery report yet: still queued, it may be written later.
    Unconfirmed,
}

/// Writes the control record and waits at most `wait` for its own delivery
/// report (no lock held: concurrent requests wait side by side).
fn send(producer: &ThreadedProducer<Delivered>, topic: &str, slice: u32, key: &[u8], wait: Duration) -> Sent {
    let (tx, rx) = sync_channel(1);
    let marker = OwnedHeaders::new().insert(Header { key: headers::DELETE, value: Some(&[][..]) });
    let record = BaseRecord::with_opaque_to(topic, Box::new(tx))
        .partition(slice as i32)
        .key(key)
        .payload(&[][..])
        .headers(marker);
    if let Err((e, _)) = producer.send(record) {
        return Sent::Failed(e.to_string());
    }
    match rx.recv_timeout(wait) {
        Ok(Ok(offset)) if offset >= 0 => Sent::Written(offset as u64),
        // Written, but where is unknown: the outcome cannot be awaited.
        Ok(Ok(_)) => Sent::Unconfirmed,
        Ok(Err(e)) => Sent::Failed(e),
        Err(RecvTimeoutError::Timeout) => Sent::Unconfirmed,
        Err(RecvTimeoutError::Disconnected) => Sent::Failed("the producer dropped the record".into()),
    }
}

/// 202 for a record the broker has not confirmed in time (module docs).
fn unconfirmed(key: &[u8], slice: u32, topic: &str) -> (StatusCode, serde_json::Value) {
    (
        StatusCode::ACCEPTED,
        json!({
            "deleted": null,
            "written": "unknown",
            "key": String::from_utf8_lossy(key),
            "slice": slice,
            "reason": format!(
                "the broker has not confirmed the delete request to {topic} within {}s; it stays queued in the \
                 producer and may still be written and applied",
                BROKER_WAIT.as_secs()
            ),
        }),
    )
}

/// The HTTP answer for the outcome the slice posted (`None`: not known here).
fn answer(
    key: &[u8],
    slice: u32,
    offset: u64,
    outcome: Option<Result<(), DeleteRefusal>>,
) -> (StatusCode, serde_json::Value) {
    let key = String::from_utf8_lossy(key);
    match outcome {
        Some(Ok(())) => (StatusCode::OK, json!({ "deleted": true, "key": key, "slice": slice })),
        Some(Err(why)) => {
            let code = match why {
                DeleteRefusal::Absent => StatusCode::NOT_FOUND,
                DeleteRefusal::Ambiguous | DeleteRefusal::NotDeletable => StatusCode::CONFLICT,
            };
            (code, json!({ "deleted": false, "key": key, "slice": slice, "reason": why.to_string() }))
        }
        // Written to the log: the slice's owner applies it when it gets
        // there, whoever that is; only the outcome is unknown here.
        None => (
            StatusCode::ACCEPTED,
            json!({
                "deleted": null,
                "key": key,
                "slice": slice,
                "offset": offset,
                "reason": "queued in the slice log: another member owns the slice, or it is busy; the delete \
                           applies when the slice reaches it",
            }),
        ),
    }
}

/// Applies `outcome` bookkeeping on the worker side: posts it for a waiting
/// request and logs it.
pub fn posted(board: &DeleteBoard, slice: u32, offset: u64, outcome: Result<(), DeleteRefusal>) {
    match &outcome {
        Ok(()) => log::info!("slice {slice}: deleted a key (request at slice offset {offset})"),
        Err(why) => log::info!("slice {slice}: delete request at slice offset {offset} refused: {why}"),
    }
    board.post(slice, offset, outcome);
}
