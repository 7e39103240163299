//! The output producer's poll thread (`PollThread`): it serves
//! librdkafka's events, a delivery-report event at a time.
//!
//! Why not rust-rdkafka's `ThreadedProducer`: its thread reads the clock
//! twice around every event (a deadline), wraps each event in an `Arc`
//! and its reports in a `Vec`, and hands the reports to the context one by
//! one, which read the clock again for each to time it and looked its
//! topic up by name. The reports of one event were acknowledged together,
//! so one clock read times them all, and a report's topic is told by its
//! librdkafka handle: the producer sends the topics it counts through
//! handles of its own ([`crate::kafka::topic_handles::TopicHandles`]), and
//! librdkafka reports a record with the handle it was sent through. A
//! profile of input-partitions mode had those reads and lookups at about a
//! third of this thread (docs/dev/profiles.md).
//!
//! rust-rdkafka's own poll still serves the producer where it polls by
//! itself (`flush`, and the purge when it is dropped), through the
//! context's `delivery`; both count and time a report the same way
//! (`DeliveryWatch::acknowledged`, `DeliveryWatch::failed`).

use std::ffi::{CStr, c_char};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use prometheus::Histogram;
use prometheus::local::LocalHistogram;
use rdkafka::ClientContext;
use rdkafka::bindings as rd;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;

use super::DeliveryWatch;
use crate::kafka::{consumed, size_limits};

/// rust-rdkafka's name for its thread (the profiles' `comm`).
const NAME: &str = "producer polling thread";
/// How long one wait for an event lasts: how soon a stop is seen.
const WAIT_MS: i32 = 100;

/// The thread serving a producer's main queue; it stops when dropped,
/// which must come before the producer's client is destroyed.
pub(super) struct PollThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PollThread {
    /// Serves `producer`'s events; `handles` are the addresses of the topic
    /// handles it sends through, in the order of the topics it counts.
    pub(super) fn start(producer: &BaseProducer<DeliveryWatch>, handles: Vec<usize>) -> std::io::Result<Self> {
        // SAFETY: the live client; the handle is released by `MainQueue`'s drop.
        let queue = unsafe { rd::rd_kafka_queue_get_main(producer.client().native_ptr()) };
        let queue = MainQueue(NonNull::new(queue).ok_or_else(|| std::io::Error::other("no main queue"))?);
        let watch = producer.context().clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name(NAME.to_string()).spawn(move || {
            // Observed without an atomic operation per record; flushed after each event.
            let latency = watch.latency.as_ref().map(Histogram::local);
            while !stopped.load(Ordering::Relaxed) {
                if let Some(event) = queue.poll(WAIT_MS) {
                    serve(event, &watch, &handles, latency.as_ref());
                    // SAFETY: an event returned to us, released once; its reports go with it.
                    unsafe { rd::rd_kafka_event_destroy(event.as_ptr()) };
                }
            }
        })?;
        Ok(PollThread { stop, thread: Some(thread) })
    }
}

impl Drop for PollThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A handle of the client's main queue.
struct MainQueue(NonNull<rd::rd_kafka_queue_t>);

// SAFETY: librdkafka's queues may be polled from any thread; this handle is
// used by one thread at a time (the poll thread, which owns it).
unsafe impl Send for MainQueue {}

impl MainQueue {
    /// The next event, waiting up to `wait_ms` for one.
    fn poll(&self, wait_ms: i32) -> Option<NonNull<rd::rd_kafka_event_t>> {
        // SAFETY: the handle lives as long as `self`.
        NonNull::new(unsafe { rd::rd_kafka_queue_poll(self.0.as_ptr(), wait_ms) })
    }
}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: taken by `rd_kafka_queue_get_main`, released once.
        unsafe { rd::rd_kafka_queue_destroy(self.0.as_ptr()) };
    }
}

/// One event of the main queue: delivery reports, a log line or an error.
/// Statistics are never asked for, and token refreshes are not taken by
/// this context (rust-rdkafka passes both over likewise).
fn serve(
    event: NonNull<rd::rd_kafka_event_t>,
    watch: &DeliveryWatch,
    handles: &[usize],
    latency: Option<&LocalHistogram>,
) {
    let ev = event.as_ptr();
    // SAFETY (every call below): `ev` is a live event of this client.
    match unsafe { rd::rd_kafka_event_type(ev) } {
        rd::RD_KAFKA_EVENT_DR => {
            let now_ms = crate::metrics::now_ms();
            while let Some(report) = NonNull::new(unsafe { rd::rd_kafka_event_message_next(ev) }.cast_mut()) {
                // SAFETY: a report of the event, alive until it is destroyed.
                reported(unsafe { report.as_ref() }, watch, handles, now_ms, latency);
            }
            if let Some(latency) = latency {
                latency.flush();
            }
        }
        rd::RD_KAFKA_EVENT_LOG => {
            let (mut fac, mut text, mut level): (*const c_char, *const c_char, i32) = (ptr::null(), ptr::null(), 0);
            if unsafe { rd::rd_kafka_event_log(ev, &mut fac, &mut text, &mut level) } == 0 {
                watch.log(log_level(level), c_text(fac).trim(), c_text(text).trim());
            }
        }
        rd::RD_KAFKA_EVENT_ERROR => {
            let error = KafkaError::Global(unsafe { rd::rd_kafka_event_error(ev) }.into());
            watch.error(error, c_text(unsafe { rd::rd_kafka_event_error_string(ev) }).trim());
        }
        _ => {}
    }
}

/// One delivery report: counted (and timed) when acknowledged, a failure otherwise.
fn reported(
    m: &rd::rd_kafka_message_t,
    watch: &DeliveryWatch,
    handles: &[usize],
    now_ms: i64,
    latency: Option<&LocalHistogram>,
) {
    let topic = || c_text(unsafe { rd::rd_kafka_topic_name(m.rkt) });
    if m.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::from(m.err));
        watch.failed(&error, &topic(), m.partition, || reported_size(m));
        return;
    }
    // By its handle; by name when it was sent to a topic without one.
    let counted = handles.iter().position(|&h| h == m.rkt as usize).or_else(|| watch.counts.topic_index(&topic()));
    // SAFETY: a live report.
    let timestamp = unsafe { consumed::timestamp_of(m) };
    watch.acknowledged(counted, m.partition, m.offset, (timestamp, now_ms), latency);
}

/// A report's record size as [`size_limits::record_size`] counts it, less
/// dedupd's own headers (as they are counted on top).
fn reported_size(m: &rd::rd_kafka_message_t) -> u64 {
    // SAFETY: a live report: its key, value and header list are its own, alive with its event.
    let (key, value, headers) =
        unsafe { (consumed::bytes(m.key, m.key_len), consumed::bytes(m.payload, m.len), consumed::headers_of(m)) };
    size_limits::record_size(key, value, size_limits::header_lens(headers)) - size_limits::OWN_HEADERS
}

/// A C string of librdkafka's, lossily (empty for a null pointer).
fn c_text<'a>(p: *const c_char) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        return "".into();
    }
    // SAFETY: librdkafka's NUL-terminated strings, alive while their event or topic is.
    unsafe { CStr::from_ptr(p) }.to_string_lossy()
}

/// librdkafka's syslog level as rust-rdkafka names it.
fn log_level(level: i32) -> RDKafkaLogLevel {
    match level {
        0 => RDKafkaLogLevel::Emerg,
        1 => RDKafkaLogLevel::Alert,
        2 => RDKafkaLogLevel::Critical,
        3 => RDKafkaLogLevel::Error,
        4 => RDKafkaLogLevel::Warning,
        5 => RDKafkaLogLevel::Notice,
        6 => RDKafkaLogLevel::Info,
        _ => RDKafkaLogLevel::Debug,
    }
}
