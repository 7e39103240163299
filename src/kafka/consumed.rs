//! A record librdkafka consumed, as the record path reads it
//! ([`Consumed`]), whichever way it was taken off a queue: one at a time by
//! rust-rdkafka's `poll` (a [`BorrowedMessage`]), or many at once from a
//! queue of our own ([`BatchQueue`]).
//!
//! Why a type of our own: rust-rdkafka builds a `BorrowedMessage` only
//! itself, one per `poll`, and each poll reads the clocks, takes the
//! queue's lock and allocates (about a tenth of a judging thread's CPU).
//! `rd_kafka_consume_batch_queue` does that once for many records, and
//! hands out librdkafka's messages themselves, which [`Consumed`] reads
//! with the methods of rust-rdkafka's `Message` (its headers through its
//! `Headers`). A record kept past the turn that took it (the router's
//! lanes) is a [`KeptRecord`], which gives librdkafka's message back when
//! it drops.

use std::ffi::{CStr, CString, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, Timestamp};
use rdkafka::types::RDKafkaErrorCode;

/// A consumed record, borrowed for `'a` from whoever owns librdkafka's
/// message (a [`BorrowedMessage`] or a [`BatchQueue`]).
#[derive(Clone, Copy)]
pub struct Consumed<'a> {
    msg: NonNull<rd::rd_kafka_message_t>,
    _owner: PhantomData<&'a rd::rd_kafka_message_t>,
}

impl<'a> Consumed<'a> {
    /// The record `msg` (rust-rdkafka's; it owns librdkafka's message).
    pub fn of(msg: &'a BorrowedMessage<'_>) -> Self {
        Consumed { msg: NonNull::new(msg.ptr()).expect("a consumed message"), _owner: PhantomData }
    }

    fn raw(&self) -> &'a rd::rd_kafka_message_t {
        // SAFETY: the owner keeps the message alive, unchanged, for 'a.
        unsafe { self.msg.as_ref() }
    }
}

/// The slice a pointer and a length name, `None` for a null pointer.
///
/// SAFETY: a non-null `ptr` points at `len` bytes that live, unchanged, for 'a.
pub(crate) unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> Option<&'a [u8]> {
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

// Its own methods give what the record outlives (`'a`), not a borrow of
// the `Consumed`: a copy of it may be dropped before what it read.
impl<'a> Consumed<'a> {
    pub fn key(&self) -> Option<&'a [u8]> {
        // SAFETY: librdkafka's key pointer and length, owned by the message.
        unsafe { bytes(self.raw().key, self.raw().key_len) }
    }

    pub fn payload(&self) -> Option<&'a [u8]> {
        // SAFETY: as for the key.
        unsafe { bytes(self.raw().payload, self.raw().len) }
    }

    pub fn topic(&self) -> &'a str {
        // SAFETY: a consumed message's topic handle lives as long as it
        // does, and its name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(rd::rd_kafka_topic_name(self.raw().rkt)) };
        // Kafka topic names are ASCII ([a-zA-Z0-9._-]); a broker that sent
        // another would fail every later ask of it the same way.
        name.to_str().unwrap_or("")
    }

    pub fn partition(&self) -> i32 {
        self.raw().partition
    }

    pub fn offset(&self) -> i64 {
        self.raw().offset
    }

    /// Whether the record is of `topic`/`partition` (the partition first:
    /// the topic's name is a lookup).
    pub fn is_of(&self, topic: &str, partition: i32) -> bool {
        self.partition() == partition && self.topic() == topic
    }

    pub fn timestamp(&self) -> Timestamp {
        // SAFETY: the message is alive for 'a.
        unsafe { timestamp_of(self.msg.as_ptr()) }
    }

    /// librdkafka parses the header bytes on every ask: ask once per record.
    /// A record without headers is told apart before that parse
    /// ([`headerless`](super::headerless)).
    pub fn headers(&self) -> Option<&'a ConsumedHeaders> {
        // SAFETY: a consumed message, alive for 'a.
        if unsafe { super::headerless::surely_none(self.raw()) } {
            return None;
        }
        // SAFETY: as above.
        unsafe { headers_of(self.msg.as_ptr()) }
    }
}

/// The timestamp of librdkafka's message `msg` (a consumed record's, or a
/// delivery report's).
///
/// SAFETY: `msg` is a live message.
pub(crate) unsafe fn timestamp_of(msg: *const rd::rd_kafka_message_t) -> Timestamp {
    let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    // SAFETY: the caller's; librdkafka only reads it.
    let ms = unsafe { rd::rd_kafka_message_timestamp(msg, &mut kind) };
    match kind {
        _ if ms == -1 => Timestamp::NotAvailable,
        rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => Timestamp::NotAvailable,
        rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => Timestamp::CreateTime(ms),
        rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => Timestamp::LogAppendTime(ms),
    }
}

/// The headers of librdkafka's message `msg` (a consumed record's, or a
/// delivery report's), through librdkafka's parse; `None` without any.
///
/// SAFETY: `msg` is a live message, which outlives 'a.
pub(crate) unsafe fn headers_of<'a>(msg: *const rd::rd_kafka_message_t) -> Option<&'a ConsumedHeaders> {
    let mut list = std::ptr::null_mut();
    // SAFETY: the caller's; the list it returns is the message's own.
    let err = unsafe { rd::rd_kafka_message_headers(msg, &mut list) };
    match RDKafkaErrorCode::from(err) {
        RDKafkaErrorCode::NoError if !list.is_null() => {
            // SAFETY: `ConsumedHeaders` is zero-sized with alignment 1,
            // so a reference to it at any non-null address is valid; its
            // address is the list's, which lives as long as the message.
            Some(unsafe { &*list.cast::<ConsumedHeaders>() })
        }
        _ => None,
    }
}

/// For what takes any record (`impl Message`: the producer's copies).
impl Message for Consumed<'_> {
    type Headers = ConsumedHeaders;

    fn key(&self) -> Option<&[u8]> {
        Consumed::key(self)
    }

    fn payload(&self) -> Option<&[u8]> {
        Consumed::payload(self)
    }

    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        // A borrowed record is never written to: no caller in dedupd asks.
        None
    }

    fn topic(&self) -> &str {
        Consumed::topic(self)
    }

    fn partition(&self) -> i32 {
        Consumed::partition(self)
    }

    fn offset(&self) -> i64 {
        Consumed::offset(self)
    }

    fn timestamp(&self) -> Timestamp {
        Consumed::timestamp(self)
    }

    fn headers(&self) -> Option<&ConsumedHeaders> {
        Consumed::headers(self)
    }
}

/// A consumed record kept past the turn that took it (the router buffers
/// its records until their time comes): librdkafka's message, given back
/// when this drops. `'c`: the consumer, which must outlive its messages.
pub struct KeptRecord<'c> {
    msg: NonNull<rd::rd_kafka_message_t>,
    /// rust-rdkafka's message, when it came from a poll (its drop gives
    /// the message back); `None`: taken off a [`BatchQueue`], ours to give back.
    polled: Option<BorrowedMessage<'c>>,
}

impl<'c> KeptRecord<'c> {
    /// A record rust-rdkafka's `poll` gave.
    pub fn polled(msg: BorrowedMessage<'c>) -> Self {
        KeptRecord { msg: NonNull::new(msg.ptr()).expect("a consumed message"), polled: Some(msg) }
    }

    /// The record, to read.
    pub fn get(&self) -> Consumed<'_> {
        Consumed { msg: self.msg, _owner: PhantomData }
    }
}

impl Drop for KeptRecord<'_> {
    fn drop(&mut self) {
        if self.polled.is_none() {
            // SAFETY: taken off a batch queue for keeps (`BatchQueue::next_kept`):
            // ours alone, given back once; its reads borrowed `self`, now gone.
            unsafe { rd::rd_kafka_message_destroy(self.msg.as_ptr()) };
        }
    }
}

/// A consumed record's (or a delivery report's) headers: a reference to
/// this zero-sized type is librdkafka's header list itself (its address),
/// as rust-rdkafka's `BorrowedHeaders` is.
pub struct ConsumedHeaders {
    _list: [u8; 0],
}

impl ConsumedHeaders {
    fn list(&self) -> *const rd::rd_kafka_headers_t {
        (self as *const Self).cast()
    }
}

impl Headers for ConsumedHeaders {
    fn count(&self) -> usize {
        // SAFETY: the list of a live message (see `Consumed::headers`).
        unsafe { rd::rd_kafka_header_cnt(self.list()) }
    }

    fn try_get(&self, idx: usize) -> Option<Header<'_, &[u8]>> {
        let (mut name, mut value, mut len) = (std::ptr::null(), std::ptr::null(), 0);
        // SAFETY: as for `count`; librdkafka points into the list's own memory.
        let err = unsafe { rd::rd_kafka_header_get_all(self.list(), idx, &mut name, &mut value, &mut len) };
        if RDKafkaErrorCode::from(err) != RDKafkaErrorCode::NoError {
            return None;
        }
        // SAFETY: a NUL-terminated name and `len` value bytes, alive with the list.
        let key = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
        Some(Header { key, value: unsafe { bytes(value, len) } })
    }
}

/// The most records one batch takes off a partition's queue.
const BATCH: usize = 1024;

/// A queue of a consumer's that holds only fetched records (librdkafka's
/// consumer queue also holds the rebalances, which its batch read would
/// serve by unassigning everything): one partition's own queue, or a queue
/// of our own that partitions are forwarded to. Taken off a batch at a
/// time, handed out a record at a time. The consumer must outlive it, and
/// still be polled for its events.
pub struct BatchQueue {
    queue: NonNull<rd::rd_kafka_queue_t>,
    /// The batch taken off the queue; those from `next` on not handed out yet.
    taken: Vec<*mut rd::rd_kafka_message_t>,
    next: usize,
    /// The record handed out last, given back to librdkafka at the next ask.
    out: Option<NonNull<rd::rd_kafka_message_t>>,
}

// SAFETY: librdkafka's queues and messages may be used from any thread;
// they are reached only through `&mut self`.
unsafe impl Send for BatchQueue {}

/// Where a partition's records can be sent ([`BatchQueue::forward`]); valid
/// while the [`BatchQueue`] it came from lives.
#[derive(Clone, Copy)]
pub struct ForwardTarget(NonNull<rd::rd_kafka_queue_t>);

// SAFETY: librdkafka's queues may be used from any thread.
unsafe impl Send for ForwardTarget {}
unsafe impl Sync for ForwardTarget {}

impl BatchQueue {
    fn over(queue: NonNull<rd::rd_kafka_queue_t>) -> Self {
        BatchQueue { queue, taken: Vec::with_capacity(BATCH), next: 0, out: None }
    }

    /// The own queue of `topic`/`partition` of the consumer `client`,
    /// no longer forwarded to the consumer's queue; `None` if librdkafka
    /// has none (an invalid name).
    pub fn of_partition<C: rdkafka::ClientContext>(
        client: &rdkafka::client::Client<C>,
        topic: &str,
        partition: i32,
    ) -> Option<Self> {
        let queue = partition_queue(client, topic, partition)?;
        // SAFETY: our own reference to the queue; forwarding to none keeps
        // its records off the consumer's queue.
        unsafe { rd::rd_kafka_queue_forward(queue.as_ptr(), std::ptr::null_mut()) };
        Some(Self::over(queue))
    }

    /// A new, empty queue of the consumer `client`'s, for the partitions
    /// forwarded to it ([`Self::forward`]).
    pub fn new<C: rdkafka::ClientContext>(client: &rdkafka::client::Client<C>) -> Self {
        // SAFETY: a live client handle; librdkafka returns a new queue (it
        // aborts rather than return none).
        let queue = unsafe { rd::rd_kafka_queue_new(client.native_ptr()) };
        Self::over(NonNull::new(queue).expect("librdkafka makes a queue"))
    }

    /// Where partitions can be forwarded to this queue.
    pub fn target(&self) -> ForwardTarget {
        ForwardTarget(self.queue)
    }

    /// Makes the records fetched for each of `partitions` (topic and
    /// partition) of `client` come to `target`'s queue instead of the
    /// consumer's. librdkafka drops a partition's forwarding when it stops
    /// fetching it (a revocation): forward it at each assignment. A record
    /// fetched before its partition was forwarded comes through the
    /// consumer's queue, as does every record of a partition librdkafka
    /// has no queue for (an invalid name: logged).
    ///
    /// # Safety
    ///
    /// The [`BatchQueue`] `target` came from still lives.
    pub unsafe fn forward<'t, C: rdkafka::ClientContext>(
        target: ForwardTarget,
        client: &rdkafka::client::Client<C>,
        partitions: impl IntoIterator<Item = (&'t str, i32)>,
    ) {
        for (topic, partition) in partitions {
            let Some(queue) = partition_queue(client, topic, partition) else {
                log::warn!("{topic}/{partition}: no partition queue to forward; read through the consumer's");
                continue;
            };
            // SAFETY: both queues live (the caller's promise for `target`); the
            // forwarding holds its own reference, so ours can go at once.
            unsafe {
                rd::rd_kafka_queue_forward(queue.as_ptr(), target.0.as_ptr());
                rd::rd_kafka_queue_destroy(queue.as_ptr());
            }
        }
    }

    /// Whether a record is ready to be handed out ([`Self::next_record`]):
    /// one already taken off the queue, else one of the batch the queue
    /// holds now, else the first to come within `wait`. The record handed
    /// out last is given back to librdkafka first.
    pub fn ready(&mut self, wait: Duration) -> bool {
        if let Some(done) = self.out.take() {
            // SAFETY: handed out before, and its borrow of `self` has ended.
            unsafe { rd::rd_kafka_message_destroy(done.as_ptr()) };
        }
        if self.next == self.taken.len() {
            self.take(0, BATCH);
            if self.taken.is_empty() && !wait.is_zero() {
                self.take(i32::try_from(wait.as_millis()).unwrap_or(i32::MAX), 1);
            }
        }
        self.next < self.taken.len()
    }

    /// The next record, if one is ready without a wait ([`Self::ready`]).
    /// Errors come as records with an error code ([`error_of`]).
    pub fn next_record(&mut self) -> Option<Consumed<'_>> {
        if !self.ready(Duration::ZERO) {
            return None;
        }
        let msg = NonNull::new(self.taken[self.next]).expect("librdkafka hands out messages");
        self.next += 1;
        self.out = Some(msg);
        Some(Consumed { msg, _owner: PhantomData })
    }

    /// The next record for keeps, if one is ready without a wait
    /// ([`Self::ready`]); `consumer`, the queue's, outlives it. Errors come
    /// as records with an error code ([`error_of`]).
    pub fn next_kept<'c, C: ConsumerContext>(&mut self, _consumer: &'c BaseConsumer<C>) -> Option<KeptRecord<'c>> {
        if !self.ready(Duration::ZERO) {
            return None;
        }
        let msg = NonNull::new(self.taken[self.next]).expect("librdkafka hands out messages");
        self.next += 1;
        Some(KeptRecord { msg, polled: None })
    }

    /// The last record of `topic`/`partition` taken off the queue and not
    /// handed out yet, if any: what the partition's resume position
    /// counts last (librdkafka moves it when a batch is taken, not when a
    /// record is handed out).
    pub fn last_left_of(&self, topic: &str, partition: i32) -> Option<Consumed<'_>> {
        self.taken[self.next..].iter().rev().find_map(|&msg| {
            let record =
                Consumed { msg: NonNull::new(msg).expect("librdkafka hands out messages"), _owner: PhantomData };
            record.is_of(topic, partition).then_some(record)
        })
    }

    /// Gives back every record taken and not handed out: after a seek they
    /// are not what the queue delivers next.
    pub fn discard(&mut self) {
        for &msg in &self.taken[self.next..] {
            // SAFETY: taken by `take`, never handed out, destroyed once.
            unsafe { rd::rd_kafka_message_destroy(msg) };
        }
        self.next = self.taken.len();
    }

    /// Gives back the records taken and not handed out that are `stale`
    /// (of a partition revoked or sought: what the queue delivers of it
    /// next starts where the seek or its next assignment puts it).
    pub fn discard_where(&mut self, stale: impl Fn(&Consumed<'_>) -> bool) {
        let mut kept = self.next;
        for i in self.next..self.taken.len() {
            let msg = self.taken[i];
            let record =
                Consumed { msg: NonNull::new(msg).expect("librdkafka hands out messages"), _owner: PhantomData };
            // SAFETY: taken by `take` and not handed out: alive and ours.
            if stale(&record) {
                // SAFETY: as above; destroyed once, and no longer listed.
                unsafe { rd::rd_kafka_message_destroy(msg) };
            } else {
                self.taken[kept] = msg;
                kept += 1;
            }
        }
        self.taken.truncate(kept);
    }

    /// Takes up to `most` records off the queue (waiting up to `timeout_ms`
    /// for them all) as the new batch; the one before is all handed out.
    fn take(&mut self, timeout_ms: i32, most: usize) {
        self.taken.clear();
        self.next = 0;
        // SAFETY: room for `most` pointers (`most` <= BATCH, the capacity);
        // librdkafka writes as many as it returns, each a message we own
        // until `rd_kafka_message_destroy`.
        let n =
            unsafe { rd::rd_kafka_consume_batch_queue(self.queue.as_ptr(), timeout_ms, self.taken.as_mut_ptr(), most) };
        // SAFETY: the first `n` were written (a negative `n` is an error: none).
        unsafe { self.taken.set_len(usize::try_from(n).unwrap_or(0).min(most)) };
    }
}

impl Drop for BatchQueue {
    fn drop(&mut self) {
        self.discard();
        if let Some(done) = self.out.take() {
            // SAFETY: handed out and no longer borrowed (we are dropped).
            unsafe { rd::rd_kafka_message_destroy(done.as_ptr()) };
        }
        // SAFETY: our own reference, given back once.
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// A reference of our own to the queue of `topic`/`partition` of the
/// consumer `client` (given back with `rd_kafka_queue_destroy`); `None` if
/// librdkafka has none (an invalid name).
fn partition_queue<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    partition: i32,
) -> Option<NonNull<rd::rd_kafka_queue_t>> {
    let name = CString::new(topic).ok()?;
    // SAFETY: a live client handle and a NUL-terminated name.
    NonNull::new(unsafe { rd::rd_kafka_queue_get_partition(client.native_ptr(), name.as_ptr(), partition) })
}

/// The offset an end-of-partition event names (the next to fetch), if
/// `msg` is one.
pub fn end_of_partition(msg: &Consumed<'_>) -> Option<i64> {
    (RDKafkaErrorCode::from(msg.raw().err) == RDKafkaErrorCode::PartitionEOF).then(|| msg.offset())
}

/// The error a consumed record carries instead of data (librdkafka hands
/// consumer errors out as records), if any.
pub fn error_of(msg: &Consumed<'_>) -> Option<rdkafka::error::KafkaError> {
    let err = msg.raw().err;
    match RDKafkaErrorCode::from(err) {
        RDKafkaErrorCode::NoError => None,
        RDKafkaErrorCode::PartitionEOF => Some(rdkafka::error::KafkaError::PartitionEOF(msg.partition())),
        code => Some(rdkafka::error::KafkaError::MessageConsumption(code)),
    }
}
