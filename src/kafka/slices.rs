//! The slice workers: one group consumer on the slice topic; each assigned
//! partition is a slice whose state this process owns until it is revoked.
//!
//! Ordering of the exactly-once protocol (design invariant 5):
//! - on assignment, a slice is restored (snapshot X, last output Y) on the
//!   restore thread while the worker goes on with its other slices; its
//!   partition joins the consumer's assignment only once restored, at X
//!   (with `availability.policy` `deliver` or `drop` it joins earlier, after
//!   its last output, and its records are decided meanwhile, each range
//!   logged first: see [`Deciding`] and docs/availability.md);
//! - records up to Y are replayed silently, later ones are emitted to
//!   partition s of the output topics with the slice offset in a header;
//! - a snapshot at offset X is written only after the producer has
//!   acknowledged every output of the slice sent so far (so every output
//!   below X);
//! - on revocation, the slice is snapshotted before release, and the release
//!   waits for the write.
//!
//! Snapshots do not stop the worker: a snapshot is copied *while the slice
//! goes on* (copy-on-write, [`SliceState::begin_copy`]): its encoding is laid
//! out at once but for the filter's cells (bytes), then the cells are copied
//! into it in 64 KiB chunks — a few after each record, more when the worker
//! is idle, and any chunk about to be written before it is written — so the
//! snapshot is the state at one offset while the worker never stops for
//! more than a chunk or two. Then the checkpoint writer thread waits until
//! what had been sent to the slice's output partitions at that offset is
//! acknowledged, computes the checksums and writes it. One snapshot is in
//! progress at a time.
//!
//! The snapshot is copied straight into one buffer that the worker keeps
//! and the writer hands back after each write: memory for snapshots is one
//! slice's encoding, not a second copy of every slice, and after the first
//! snapshot copying writes into pages already mapped.
//!
//! A delivery failure is fatal: the process stops and its replacement
//! resumes from the last snapshot and the last acknowledged output.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message, OwnedMessage};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::checkpoint::{CheckpointStore, Manifest};
use super::join::JoinWatch;
use super::producer::{OutputProducer, SentMark, produce_with, wait_acked};
use super::restore::{PolicyRange, RestoredFrom, Restorer, Sent, flush_record, policy_record, range_of};
use super::shared::InputReader;
use super::{Context, KafkaLayerError, clients, headers};
use crate::admin::{SliceStatus, Status};
use crate::config::{AvailabilityPolicy, Resolved, SlicingMode};
use crate::engine::read_order::{self, ReadOrder};
use crate::engine::slice::{Unframed, unframe};
use crate::engine::{
    Extractor, Judgment, Progress, RecordView, ReleasePos, STAMP_BYTES, SliceCopy, SliceCounters, SliceImage,
    SliceRecord, SliceState, SliceVerdict, SourceRef, format_into, shrink_target,
};
use crate::filter::FilterParams;
use crate::metrics::{Metrics, now_ms, observe_since};

const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// A snapshot that stops its slice's worker longer than this is logged as a warning.
const STALL_WARNING: Duration = Duration::from_millis(100);
/// A gap this long between two turns of the worker loop means the worker
/// itself stood still (a stopped process, a starved CPU, a long GC-like
/// pause), not that its slices received nothing. A turn normally takes one
/// poll (100 ms) plus one record's work.
const WORKER_STALL: Duration = Duration::from_secs(1);
/// After such a stall, no snapshot starts for this long (see [`after_stall`]).
const STALL_SETTLE: Duration = Duration::from_secs(2);

/// A slice this process owns.
struct Owned {
    state: SliceState,
    /// A snapshot being copied while the slice goes on.
    copying: Option<Copying>,
    /// Judgments up to this release position are replayed silently.
    replay_until: Option<ReleasePos>,
    /// Decisions of `availability.policy` up to this release position were
    /// output already: replayed silently.
    policy_until: Option<ReleasePos>,
    /// The last ordinary judgment made (its release position): what a
    /// policy output names in `dedupd.policy.after`.
    last_normal: Option<ReleasePos>,
    /// The policy ranges logged that the slice has not passed yet: their
    /// records are decided by the logged policy, not judged.
    ranges: Vec<PolicyRange>,
    /// Flags up to this release position are in the flag topic already.
    flag_replay_until: Option<ReleasePos>,
    /// The records waiting for the watermark, by slice offset (for output).
    held: HashMap<u64, OwnedMessage>,
    /// Idle flushes logged and not applied yet (a replay): the slice
    /// offsets they came after.
    flushes: VecDeque<u64>,
    /// When the slice last received a record (or was restored).
    last_arrival: Instant,
    manifest: Option<Manifest>,
    since_checkpoint: u64,
    last_checkpoint: Instant,
    /// A snapshot of this slice is being copied or written.
    writing: bool,
    /// Counters already published to the metrics.
    published: SliceCounters,
    /// Filter counters already published: generations created, dropped, saturated inserts.
    published_filter: [u64; 3],
    /// `dedupd_provenance_dropped_total` already published.
    published_provenance_dropped: u64,
    /// `dedupd_hold_overflows_total` already published.
    published_overflows: u64,
}

/// Everything the worker loop and its rebalance callbacks share.
pub struct Deps {
    pub cfg: Resolved,
    pub params: FilterParams,
    pub extractor: Extractor,
    pub slice_topic: String,
    /// The idle flush log, partition = slice.
    pub flush_topic: String,
    pub producer: OutputProducer,
    pub store: CheckpointStore,
    pub reader: clients::Reader,
    pub metrics: Arc<Metrics>,
    pub status: Arc<Status>,
    /// Counts input records when the slice log is the input (input-partitions mode).
    pub input_counter: Option<prometheus::IntCounter>,
    /// A sparse tree's root publishes a verdict for every delivery (docs/tiers.md).
    pub verdicts: Option<super::tier::RootVerdicts>,
}

struct Inner {
    slices: BTreeMap<u32, Owned>,
    /// Judgments of the record being handled (reused).
    judged: Vec<Judgment>,
    fatal: Option<String>,
    writer: Writer,
    /// The buffer snapshots are copied into, reused; `None` while a snapshot has it.
    buffer: Option<Vec<u8>>,
    /// Slices assigned and being restored on the restore thread, with the
    /// number of the restore asked for: a result for another number (the
    /// slice was revoked meanwhile) is dropped.
    restoring: BTreeMap<u32, u64>,
    /// Slices the group gave this member whose partitions are not in the
    /// consumer's assignment yet: added (`incremental_assign`) at the offset
    /// to read from once that is known, left out of the `incremental_unassign`
    /// of a revocation. (Not assigned paused at a placeholder offset and then
    /// sought and resumed: librdkafka wakes its fetcher only when a partition
    /// starts fetching, not when it is resumed, so a resumed partition waited
    /// up to a second for the fetcher's next turn — docs/availability.md.)
    unassigned: BTreeSet<u32>,
    /// Slices being restored whose records `availability.policy` decides meanwhile.
    deciding: BTreeMap<u32, Deciding>,
    /// Numbers restores.
    restores_asked: u64,
    restorer: Restores,
}

/// A restore asked of the restore thread: the slice and its number.
struct RestoreJob {
    slice: u32,
    id: u64,
}

/// What the restore thread tells the worker about a restore.
enum RestoreEvent {
    /// Where the slice's outputs stopped and the policy ranges logged (read
    /// first, before the snapshot, when `availability.policy` is not `wait`).
    Located { slice: u32, id: u64, result: Result<(Sent, Option<u64>, Vec<PolicyRange>), KafkaLayerError> },
    /// The slice, restored.
    Restored { slice: u32, id: u64, result: Result<Box<Owned>, KafkaLayerError> },
}

/// A slice being restored whose records `availability.policy` decides
/// meanwhile (docs/availability.md): each is sent at once, to the output
/// (`deliver`) or to the duplicates topic (`drop`), once the range of slice
/// offsets it is in has been logged in the flush log, so that the restore
/// (and every later one) applies the same decisions.
struct Deciding {
    /// The next slice offset expected.
    next: u64,
    /// The slice's last ordinary output before (its release position).
    normal: Option<ReleasePos>,
    /// Policy outputs were sent up to this release position.
    sent: Option<ReleasePos>,
    /// The policy ranges logged, by earlier owners and by this one.
    ranges: Vec<PolicyRange>,
}

/// The worker's side of the restore thread: restores run there, one after
/// another, while the worker goes on with the slices it has (see
/// docs/availability.md, "How deliver and drop can be added", step 1).
struct Restores {
    jobs: Option<mpsc::Sender<RestoreJob>>,
    done: mpsc::Receiver<RestoreEvent>,
}

impl Restores {
    fn start(deps: Arc<Deps>) -> Restores {
        let (jobs, job_rx) = mpsc::channel::<RestoreJob>();
        let (done_tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("dedupd-restores".into())
            .spawn(move || {
                for RestoreJob { slice, id } in job_rx {
                    if deps.cfg.availability != AvailabilityPolicy::Wait {
                        let result = restorer(&deps).locate(slice);
                        if done_tx.send(RestoreEvent::Located { slice, id, result }).is_err() {
                            break;
                        }
                    }
                    let result = restore(&deps, slice).map(Box::new);
                    if done_tx.send(RestoreEvent::Restored { slice, id, result }).is_err() {
                        break;
                    }
                }
            })
            .expect("starting the restore thread");
        Restores { jobs: Some(jobs), done }
    }
}

/// A snapshot being copied (see the module documentation).
struct Copying {
    copy: SliceCopy,
    /// What had been sent to the slice's output partitions when it was taken.
    mark: SentMark,
    previous: Option<Manifest>,
    /// When the snapshot was taken.
    taken: Instant,
    /// The longest the copy has stopped the worker at once.
    longest_pause: Duration,
    /// Records judged while it was copied.
    records: u64,
}

/// Bytes of cells copied after each record while a snapshot is copied:
/// a pause of tens of µs per record; ~500 records copy 123 MiB.
const COPY_STEP_BYTES: usize = 256 << 10;
/// Records taken from the consumer per turn of the worker loop (see `run`).
const POLL_BATCH: usize = 256;
/// Bytes of cells copied per turn of the worker loop that found no record
/// (a few ms, faulting in the pages of a new buffer included).
const IDLE_COPY_BYTES: usize = 4 << 20;

/// A snapshot for the checkpoint writer.
struct Job {
    slice: u32,
    /// The slice offset it was taken at.
    offset: u64,
    image: SliceImage,
    /// What had been sent to the slice's output partitions when it was taken.
    mark: SentMark,
    previous: Option<Manifest>,
    /// When the snapshot was taken.
    taken: Instant,
}

/// What became of a [`Job`].
struct Written {
    slice: u32,
    result: Result<(Manifest, usize), KafkaLayerError>,
    /// The buffer, back for the next snapshot.
    buffer: Vec<u8>,
    /// From taken to written.
    took: Duration,
}

/// The worker's side of the checkpoint writer thread.
struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    written: mpsc::Receiver<Written>,
    /// Jobs sent and not yet answered.
    outstanding: usize,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(deps: Arc<Deps>) -> Writer {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done, written) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dedupd-checkpoints".into())
            .spawn(move || {
                for job in job_rx {
                    let Job { slice, offset, mut image, mark, previous, taken } = job;
                    let result = write_snapshot(&deps, slice, offset, image.seal(), &mark, previous.as_ref());
                    let took = taken.elapsed();
                    if done.send(Written { slice, result, buffer: image.into_buffer(), took }).is_err() {
                        break;
                    }
                }
            })
            .expect("starting the checkpoint writer thread");
        Writer { jobs: Some(jobs), written, outstanding: 0, thread: Some(thread) }
    }

    /// Stops the thread after the jobs already sent.
    fn stop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The checkpoint writer's work: waits until the slice's outputs up to the
/// snapshot are acknowledged, then writes the snapshot.
fn write_snapshot(
    deps: &Deps,
    slice: u32,
    offset: u64,
    bytes: &[u8],
    mark: &SentMark,
    previous: Option<&Manifest>,
) -> Result<(Manifest, usize), KafkaLayerError> {
    wait_acked(&deps.producer, mark, FLUSH_TIMEOUT).map_err(|detail| KafkaLayerError::Checkpoint {
        slice,
        detail: format!("outputs before the snapshot: {detail}"),
    })?;
    let fingerprint = super::restore::fingerprint(&deps.params, deps.cfg.counting.as_ref());
    let manifest = deps.store.write(slice, offset, bytes, &fingerprint, previous)?;
    Ok((manifest, bytes.len()))
}

/// The consumer context: rebalances restore and release slices.
pub struct WorkerContext {
    deps: Arc<Deps>,
    inner: Arc<Mutex<Inner>>,
    /// End of each slice partition as librdkafka's statistics last saw it.
    high_offsets: Arc<Mutex<BTreeMap<u32, i64>>>,
    join: JoinWatch,
}

impl ClientContext for WorkerContext {
    fn error(&self, error: KafkaError, reason: &str) {
        clients::log_client_error(&error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        clients::log_client_message(level, fac, message);
    }

    /// Reads only the partitions' end offsets (for the lag gauge); never
    /// logs the statistics (rdkafka's default `stats` logs all of them at INFO).
    fn stats_raw(&self, statistics: &[u8]) {
        match serde_json::from_slice::<HighOffsets>(statistics) {
            Ok(stats) => {
                // The freshest connection (rxidle: microseconds since it last
                // received; -1 before its first answer) says when a broker last answered.
                if let Some(idle) = stats.brokers.values().filter(|b| b.rxidle >= 0).map(|b| b.rxidle).min() {
                    let at = Instant::now().checked_sub(Duration::from_micros(idle as u64));
                    self.deps.status.heard_from_broker(at.unwrap_or_else(Instant::now));
                }
                let fetched: i64 =
                    stats.topics.values().flat_map(|t| t.partitions.values()).map(|p| p.fetchq_size).sum();
                self.deps.metrics.consumer_queue_bytes.set(fetched);
                let Some(topic) = stats.topics.get(&self.deps.slice_topic) else { return };
                let mut highs = self.high_offsets.lock().expect("offsets lock");
                for (p, part) in &topic.partitions {
                    if let Ok(p) = p.parse::<u32>()
                        && part.hi_offset >= 0
                    {
                        highs.insert(p, part.hi_offset);
                    }
                }
            }
            Err(e) => log::debug!("librdkafka statistics without partition offsets: {e}"),
        }
    }
}

/// The part of librdkafka's statistics JSON the lag gauge, the prefetch
/// gauge and the broker silence read:
/// `topics.<name>.partitions.<id>.hi_offset` (the internal partition `-1`
/// is skipped by its id) and `.fetchq_size`.
#[derive(serde::Deserialize)]
struct HighOffsets {
    #[serde(default)]
    topics: HashMap<String, TopicOffsets>,
    /// For `dedupd_broker_silence_seconds` and `/readyz`.
    #[serde(default)]
    brokers: HashMap<String, BrokerIdle>,
}

/// `brokers.<name>.rxidle`: microseconds since the connection last received.
#[derive(serde::Deserialize)]
struct BrokerIdle {
    #[serde(default = "no_offset")]
    rxidle: i64,
}

#[derive(serde::Deserialize)]
struct TopicOffsets {
    #[serde(default)]
    partitions: HashMap<String, PartitionOffsets>,
}

#[derive(serde::Deserialize)]
struct PartitionOffsets {
    #[serde(default = "no_offset")]
    hi_offset: i64,
    /// Bytes fetched ahead and not yet consumed (for `dedupd_consumer_queue_bytes`).
    #[serde(default)]
    fetchq_size: i64,
}

fn no_offset() -> i64 {
    -1
}

impl ConsumerContext for WorkerContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let mut inner = self.inner.lock().expect("worker lock");
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let topic = self.deps.slice_topic.as_str();
                self.join.assigned(&partitions.iter().map(|&p| (topic, p)).collect::<Vec<_>>());
                self.deps.metrics.rebalances.with_label_values(&["assign"]).inc();
                self.deps.status.ready.store(false, Ordering::Relaxed);
                // What the consumer takes now: with cooperative rebalancing
                // (what `clients::group_consumer` sets), only the partitions
                // that need no restore.
                let mut now = TopicPartitionList::new();
                for p in partitions {
                    if p as u32 >= self.deps.cfg.settings.filter.slices {
                        // Left by `dedupd checkpoint merge`: no key routes
                        // there any more, and its old snapshot is not a slice.
                        log::info!("{topic}/{p} is beyond filter.slices (left by a merge): not consumed");
                        let skipped = tpl
                            .set_partition_offset(topic, p, Offset::End)
                            .and_then(|()| now.add_partition_offset(topic, p, Offset::End));
                        if let Err(e) = skipped {
                            inner.fatal.get_or_insert(format!("partition {p}: cannot skip it: {e}"));
                        }
                        continue;
                    }
                    // Restored on the restore thread while the worker goes
                    // on with its other slices. Its partition is assigned
                    // once the offset to read from is known
                    // (`take_restored`). Eager rebalancing must assign
                    // everything at once: there it is assigned paused, at a
                    // placeholder offset, then sought and resumed.
                    inner.restores_asked += 1;
                    let id = inner.restores_asked;
                    inner.restoring.insert(p as u32, id);
                    if cooperative {
                        inner.unassigned.insert(p as u32);
                    } else if let Err(e) = tpl.set_partition_offset(topic, p, Offset::Offset(0)) {
                        inner.fatal.get_or_insert(format!("slice {p}: cannot set its start offset: {e}"));
                    }
                    let asked = inner
                        .restorer
                        .jobs
                        .as_ref()
                        .is_some_and(|j| j.send(RestoreJob { slice: p as u32, id }).is_ok());
                    if !asked {
                        inner.fatal.get_or_insert(format!("slice {p}: the restore thread has stopped"));
                    }
                }
                let result = if cooperative { consumer.incremental_assign(&now) } else { consumer.assign(tpl) };
                if let Err(e) = result {
                    inner.fatal.get_or_insert(format!("cannot take the assignment: {e}"));
                }
                let waiting = restoring_list(topic, &inner);
                if !cooperative
                    && waiting.count() > 0
                    && let Err(e) = consumer.pause(&waiting)
                {
                    inner.fatal.get_or_insert(format!("cannot pause the slices being restored: {e}"));
                }
                self.deps.metrics.slices_owned.set(inner.slices.len() as i64);
                self.deps.status.ready.store(inner.fatal.is_none() && inner.restoring.is_empty(), Ordering::Relaxed);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.deps.metrics.rebalances.with_label_values(&["revoke"]).inc();
                let lost = consumer.assignment_lost();
                // What the consumer gives up: not the partitions it never took.
                let mut taken = TopicPartitionList::new();
                for p in partitions {
                    let slice = p as u32;
                    if !inner.unassigned.remove(&slice) {
                        taken.add_partition(&self.deps.slice_topic, p);
                    }
                    // Not restored yet: nothing to snapshot, its restore is dropped.
                    if inner.restoring.remove(&slice).is_some() {
                        inner.deciding.remove(&slice);
                        log::info!("slice {p}: revoked while being restored");
                        continue;
                    }
                    // A lost assignment may already be someone else's: write nothing more.
                    if !lost && let Err(e) = checkpoint_now(&self.deps, &mut inner, slice) {
                        log::warn!("slice {p}: no snapshot on release ({e}); its next owner replays further");
                    }
                    if inner.slices.remove(&slice).is_some() {
                        self.deps.status.slices.lock().expect("status lock").remove(&slice);
                        self.deps.metrics.forget_slice(slice);
                    }
                }
                let result = if cooperative { consumer.incremental_unassign(&taken) } else { consumer.unassign() };
                if let Err(e) = result {
                    log::warn!("releasing partitions: {e}");
                }
                self.deps.metrics.slices_owned.set(inner.slices.len() as i64);
                self.deps.status.ready.store(inner.fatal.is_none() && inner.restoring.is_empty(), Ordering::Relaxed);
            }
            other => {
                log::error!("rebalance error: {other:?}");
                if !cooperative {
                    let _ = consumer.unassign();
                }
            }
        }
    }
}

/// The partitions of the slices being restored (paused, with eager rebalancing).
fn restoring_list(topic: &str, inner: &Inner) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for &slice in inner.restoring.keys() {
        tpl.add_partition(topic, slice as i32);
    }
    tpl
}

/// Takes in what the restore thread has done: a slice located is decided
/// by `availability.policy` until restored (its partition read from after
/// its last output); a restored slice is owned from now, its partition read
/// from where it resumes. What comes for a restore whose slice was revoked
/// meanwhile is dropped.
fn take_restored(deps: &Deps, consumer: &BaseConsumer<WorkerContext>, inner: &mut Inner) {
    while let Ok(event) = inner.restorer.done.try_recv() {
        match event {
            RestoreEvent::Located { slice, id, result } => {
                if inner.restoring.get(&slice) != Some(&id) {
                    continue;
                }
                match result {
                    // A slice that never sent an output has nothing to go on from: it waits.
                    Ok((sent, _, _)) if sent.normal.is_none() => {
                        log::info!("slice {slice}: no output yet; its records wait for the restore");
                    }
                    Ok((sent, snapshot, ranges)) => {
                        // Records below the snapshot's offset are in it: judged, or
                        // waiting for the watermark (judged once it is restored).
                        let next = sent.normal.map_or(0, |y| y.after + 1).max(snapshot.unwrap_or(0));
                        if let Err(e) = read_from(deps, consumer, inner, slice, next) {
                            inner.fatal.get_or_insert(e);
                            continue;
                        }
                        log::info!(
                            "slice {slice}: being restored; its records from offset {next} are decided by \
                             availability.policy = {} meanwhile",
                            deps.cfg.availability.as_str()
                        );
                        inner.deciding.insert(slice, Deciding { next, normal: sent.normal, sent: sent.policy, ranges });
                    }
                    Err(e) => {
                        log::warn!("slice {slice}: cannot read where its outputs stopped ({e}); its records wait")
                    }
                }
            }
            RestoreEvent::Restored { slice, id, result } => {
                if inner.restoring.get(&slice) != Some(&id) {
                    log::debug!("slice {slice}: a restore finished after the slice was revoked; dropped");
                    continue;
                }
                inner.restoring.remove(&slice);
                let deciding = inner.deciding.remove(&slice);
                match result {
                    Ok(mut owned) => {
                        if let Some(d) = deciding {
                            for r in d.ranges {
                                if r.to >= owned.state.next_offset && !owned.ranges.contains(&r) {
                                    owned.ranges.push(r);
                                }
                            }
                            owned.ranges.sort_by_key(|r| r.from);
                            owned.policy_until = owned.policy_until.max(d.sent);
                            log::info!(
                                "slice {slice}: restored; policy decisions up to offset {} are applied as logged",
                                d.next.saturating_sub(1)
                            );
                        }
                        if let Err(e) = read_from(deps, consumer, inner, slice, owned.state.next_offset) {
                            inner.fatal.get_or_insert(e);
                            continue;
                        }
                        inner.slices.insert(slice, *owned);
                        deps.metrics.init_slice(slice);
                    }
                    Err(e) => {
                        inner.fatal.get_or_insert(format!("slice {slice}: restore failed: {e}"));
                    }
                }
                deps.metrics.slices_owned.set(inner.slices.len() as i64);
                deps.status.ready.store(inner.fatal.is_none() && inner.restoring.is_empty(), Ordering::Relaxed);
            }
        }
    }
}

/// Reads the slice's partition from `offset` on: adds it to the consumer's
/// assignment there if it is not in it yet (librdkafka's fetcher starts on
/// it at once), or else seeks it there and resumes it (a partition assigned
/// paused, with eager rebalancing; a partition read by `availability.policy`
/// during the restore is not paused and the resume does nothing).
fn read_from(
    deps: &Deps,
    consumer: &BaseConsumer<WorkerContext>,
    inner: &mut Inner,
    slice: u32,
    offset: u64,
) -> Result<(), String> {
    let at = Offset::Offset(log_position(deps, offset) as i64);
    let mut tpl = TopicPartitionList::new();
    let result = tpl.add_partition_offset(&deps.slice_topic, slice as i32, at).and_then(|()| {
        if inner.unassigned.remove(&slice) {
            return consumer.incremental_assign(&tpl);
        }
        // One assigned a moment ago (`Located`) may not be fetching yet.
        clients::seek_started(consumer, &deps.slice_topic, slice as i32, at).and_then(|()| consumer.resume(&tpl))
    });
    result.map_err(|e| format!("slice {slice}: cannot read it from offset {offset}: {e}"))
}

/// The restore of the slices of this process.
fn restorer(deps: &Deps) -> Restorer<'_> {
    let mut outputs = vec![deps.cfg.settings.output.topic.as_str()];
    if !deps.cfg.settings.output.duplicates_topic.is_empty() {
        outputs.push(deps.cfg.settings.output.duplicates_topic.as_str());
    }
    Restorer {
        store: &deps.store,
        reader: &deps.reader,
        params: &deps.params,
        order: deps.cfg.order,
        extractor: &deps.extractor,
        slice_topic: &deps.slice_topic,
        slicing: deps.cfg.slicing,
        leaf: (deps.cfg.tier == crate::config::Tier::DenseLeaf).then_some(deps.cfg.settings.app.id.as_str()),
        flush_topic: &deps.flush_topic,
        output_topics: outputs,
        on_corrupt: deps.cfg.on_corrupt,
        rejected: &deps.metrics.checkpoint_rejected,
        bounds_ignored: &deps.metrics.restore_bounds_ignored,
        provenance: deps.cfg.provenance.as_ref(),
        counting: deps.cfg.counting.as_ref(),
        flag_topic: Some(deps.cfg.settings.flag.topic.as_str()).filter(|t| !t.is_empty()),
    }
}

fn restore(deps: &Deps, slice: u32) -> Result<Owned, KafkaLayerError> {
    let started = Instant::now();
    let mut point = restorer(deps).restore(slice)?;
    point.state.passthrough = deps.cfg.passthrough;
    let max_held = usize::try_from(deps.cfg.settings.slicing.max_held).unwrap_or(usize::MAX);
    point.state.order.set_max_held(max_held);
    let source = match point.from {
        RestoredFrom::Snapshot { .. } => "snapshot",
        RestoredFrom::Empty => "empty",
        RestoredFrom::Corrupt(..) => "corrupt",
    };
    deps.metrics.restores.with_label_values(&[source]).inc();
    log::info!("slice {slice}: restored in {:.0} ms", started.elapsed().as_secs_f64() * 1000.0);
    deps.metrics.restore_duration.observe(started.elapsed().as_secs_f64());
    let c = point.state.filter.counters();
    Ok(Owned {
        copying: None,
        published_filter: [c.generations_created, c.generations_dropped, c.saturated_inserts],
        published: point.state.counters.clone(),
        published_provenance_dropped: point.state.provenance.as_ref().map_or(0, |p| p.sources.dropped()),
        published_overflows: point.state.order.overflows(),
        state: point.state,
        replay_until: point.replay_until,
        policy_until: point.policy_until,
        last_normal: point.sent_normal,
        ranges: point.ranges,
        flag_replay_until: point.flag_replay_until,
        held: point.held.into_iter().collect(),
        flushes: point.flushes,
        last_arrival: Instant::now(),
        manifest: point.manifest,
        since_checkpoint: 0,
        last_checkpoint: Instant::now(),
        writing: false,
    })
}

/// The `/v1/lookup` answer for a key: the verdict it would get now, without
/// inserting it. In repartition mode the key's slice is `H_S(key)`; with
/// input-partitions the producer's partitioner chose it, so every owned
/// slice is asked.
fn lookup_fn(deps: &Arc<Deps>, inner: &Arc<Mutex<Inner>>) -> crate::admin::LookupFn {
    let (deps, inner) = (deps.clone(), inner.clone());
    Box::new(move |key: &[u8]| {
        let (hash, home) = home_slice(&deps, key);
        let inner = inner.lock().expect("worker lock");
        let results: Vec<serde_json::Value> = asked(&inner, home)
            .map(|(s, owned)| {
                // Counting by the dedup key replaces the timer filter: the
                // next copy is a duplicate once the estimate reaches the limit.
                if let Some(c) = owned.state.counting.as_ref().filter(|c| c.replaces_filter()) {
                    let estimate = c.stage.estimate(&hash);
                    return serde_json::json!({
                        "slice": s,
                        "duplicate": c.stage.spec().max_per_window.is_some_and(|n| estimate >= n),
                        "kind": "counting",
                        "estimate": estimate,
                    });
                }
                if let Some(count) = &owned.state.count {
                    // No timers: the filter's own test, without its update.
                    return serde_json::json!({
                        "slice": s,
                        "duplicate": count.contains(&hash),
                        "kind": count.kind().as_str(),
                        "hashes": count.stats().hashes,
                    });
                }
                let l = owned.state.filter.lookup(&hash);
                serde_json::json!({
                    "slice": s,
                    "duplicate": l.duplicate,
                    "alive_cells": l.alive_cells,
                    "hashes": deps.params.hashes,
                    "equal_timers": l.equal_timers,
                    "clock_ms": owned.state.filter.clock_ms(),
                })
            })
            .collect();
        serde_json::json!({
            "key": String::from_utf8_lossy(key),
            "slice": home,
            "owned": !results.is_empty(),
            "results": results,
        })
    })
}

/// A key's hash and the slice that judges it: `H_S(key)` in repartition
/// mode; `None` with input-partitions (the producer's partitioner chose it,
/// so every owned slice is asked).
///
/// With a separate count key (`limit.count_key`) the router routes by the
/// count key, so a dedup key's slice is not known either: every owned slice
/// is asked.
fn home_slice(deps: &Deps, key: &[u8]) -> (crate::filter::KeyHash, Option<u32>) {
    let hash = crate::filter::KeyHash::of(deps.params.seed, key);
    let routed_by_key = deps.cfg.counting.as_ref().is_none_or(|c| c.count_key.is_none());
    (hash, routed_slice(deps, &hash, routed_by_key))
}

/// The owned slices a key endpoint asks: `home`, or every one.
fn asked(inner: &Inner, home: Option<u32>) -> impl Iterator<Item = (&u32, &Owned)> {
    inner.slices.iter().filter(move |(s, _)| home.is_none_or(|h| h == **s))
}

/// The slice the router sends a key to, if the router routes by that key
/// (`routed`) in repartition mode; `None` otherwise (ask every owned slice).
fn routed_slice(deps: &Deps, hash: &crate::filter::KeyHash, routed: bool) -> Option<u32> {
    match deps.cfg.slicing {
        SlicingMode::Repartition if routed => Some(hash.slice(deps.cfg.settings.filter.slices)),
        _ => None,
    }
}

/// The `/v1/count` answer for a count key: its estimated count in the
/// window ending at its slice's newest time. In repartition mode the slice
/// is `H_S(count key)` (the router routes by the count key); with
/// input-partitions every owned slice is asked, and `estimate` is the
/// largest (the others see the key only through collisions).
fn count_fn(deps: &Arc<Deps>, inner: &Arc<Mutex<Inner>>) -> crate::admin::LookupFn {
    let (deps, inner) = (deps.clone(), inner.clone());
    Box::new(move |key: &[u8]| {
        let hash = crate::filter::KeyHash::of(deps.params.seed, key);
        // The router routes by the count key (the dedup key, or limit.count_key).
        let home = routed_slice(&deps, &hash, true);
        let inner = inner.lock().expect("worker lock");
        let results: Vec<serde_json::Value> = asked(&inner, home)
            .filter_map(|(s, owned)| {
                let stage = &owned.state.counting.as_ref()?.stage;
                let counts = stage.counts();
                // The window ends at the newest sub-window's end.
                let newest = counts.state().1;
                Some(serde_json::json!({
                    "slice": s,
                    "estimate": stage.estimate(&hash),
                    "window_ms": counts.window_ms(),
                    "window_end_ms": newest.map(|n| (n + 1) * counts.sub_ms()),
                    "subwindow_ms": counts.sub_ms(),
                }))
            })
            .collect();
        let estimate = results.iter().filter_map(|r| r["estimate"].as_u64()).max();
        serde_json::json!({
            "key": String::from_utf8_lossy(key),
            "estimate": estimate,
            "slice": home,
            "owned": !results.is_empty(),
            "results": results,
        })
    })
}

/// The `/v1/provenance` answer for a key: every source that may have
/// delivered it inside what the owned slices keep (no false negatives), and
/// the estimated probability that a source which did not is listed (the
/// largest over the slices asked).
fn provenance_fn(deps: &Arc<Deps>, inner: &Arc<Mutex<Inner>>) -> crate::admin::LookupFn {
    let (deps, inner) = (deps.clone(), inner.clone());
    Box::new(move |key: &[u8]| {
        let (hash, home) = home_slice(&deps, key);
        let inner = inner.lock().expect("worker lock");
        let mut sources = std::collections::BTreeSet::new();
        let (mut owned, mut estimated_fpr) = (false, 0.0f64);
        for (_, o) in asked(&inner, home) {
            if let Some(p) = &o.state.provenance {
                owned = true;
                let answer = p.sources.query(&hash);
                sources.extend(answer.sources.iter().map(|s| s.to_string()));
                estimated_fpr = estimated_fpr.max(answer.estimated_fpr);
            }
        }
        serde_json::json!({
            "key": String::from_utf8_lossy(key),
            "sources": sources,
            "estimated_fpr": estimated_fpr,
            "slice": home,
            "owned": owned,
        })
    })
}

/// Takes a snapshot of the slice: begins a copy of its state (everything
/// but the filter's cells now; the cells while the slice goes on).
fn begin_snapshot(deps: &Deps, buffer: &mut Option<Vec<u8>>, owned: &mut Owned) {
    let taken = Instant::now();
    let slice = owned.state.slice;
    let copy = owned.state.begin_copy(buffer.take().unwrap_or_default());
    let mark = deps.producer.context().counts().mark(Some(slice as usize));
    log::debug!(
        "slice {slice}: snapshot at offset {} taken, {} bytes of cells to copy",
        copy.offset(),
        copy.bytes_left()
    );
    owned.copying = Some(Copying {
        copy,
        mark,
        previous: owned.manifest.clone(),
        taken,
        longest_pause: taken.elapsed(),
        records: 0,
    });
    owned.writing = true;
    owned.since_checkpoint = 0;
}

/// Copies up to `budget` more bytes of the snapshot being copied, if any,
/// and hands it to the writer once complete.
fn copy_some(deps: &Deps, inner: &mut Inner, budget: usize) -> Result<(), KafkaLayerError> {
    let Inner { slices, writer, .. } = inner;
    let Some(owned) = slices.values_mut().find(|o| o.copying.is_some()) else {
        return Ok(());
    };
    let c = owned.copying.as_mut().expect("found copying");
    let started = Instant::now();
    let complete = c.copy.advance(&owned.state, budget);
    c.longest_pause = c.longest_pause.max(started.elapsed());
    if complete { hand_over(deps, writer, owned, false) } else { Ok(()) }
}

/// Finishes the slice's snapshot copy (whatever is left, at once) and hands
/// it to the checkpoint writer. `releasing`: the slice is being released or
/// the process is stopping, so the copy could not wait (logged as such).
fn hand_over(deps: &Deps, writer: &mut Writer, owned: &mut Owned, releasing: bool) -> Result<(), KafkaLayerError> {
    let Some(Copying { copy, mark, previous, taken, longest_pause, records }) = owned.copying.take() else {
        return Ok(());
    };
    let slice = owned.state.slice;
    let (started, offset) = (Instant::now(), copy.offset());
    let image = copy.finish(&owned.state);
    let longest_pause = longest_pause.max(started.elapsed());
    let jobs = writer
        .jobs
        .as_ref()
        .ok_or_else(|| KafkaLayerError::Checkpoint { slice, detail: "the checkpoint writer has stopped".into() })?;
    jobs.send(Job { slice, offset, image, mark, previous, taken })
        .map_err(|_| KafkaLayerError::Checkpoint { slice, detail: "the checkpoint writer has stopped".into() })?;
    writer.outstanding += 1;
    let line = format!(
        "slice {slice}: snapshot at offset {offset} copied{} in {:.1} ms alongside {records} records, longest_pause_ms={:.2}",
        if releasing { " at release" } else { "" },
        taken.elapsed().as_secs_f64() * 1000.0,
        longest_pause.as_secs_f64() * 1000.0
    );
    if longest_pause > STALL_WARNING && !releasing {
        log::warn!("{line}");
    } else {
        log::debug!("{line}");
    }
    deps.metrics.checkpoint_stall.observe(longest_pause.as_secs_f64());
    Ok(())
}

/// Takes in a written snapshot; returns its error, if any.
fn apply(deps: &Deps, inner: &mut Inner, written: Written) -> Option<KafkaLayerError> {
    inner.writer.outstanding -= 1;
    inner.buffer = Some(written.buffer);
    let slice = written.slice;
    let label = slice.to_string();
    let owned = inner.slices.get_mut(&slice);
    match written.result {
        Ok((manifest, bytes)) => {
            log::debug!(
                "slice {slice}: snapshot at offset {} written, bytes={bytes} write_ms={:.0}",
                manifest.offset,
                written.took.as_secs_f64() * 1000.0
            );
            deps.metrics.checkpoints.with_label_values(&[&label]).inc();
            deps.metrics.checkpoint_bytes.with_label_values(&[&label]).set(bytes as i64);
            deps.metrics.checkpoint_duration.observe(written.took.as_secs_f64());
            if let Some(owned) = owned {
                owned.writing = false;
                owned.manifest = Some(manifest);
                owned.last_checkpoint = Instant::now();
            }
            None
        }
        Err(e) => {
            deps.metrics.checkpoint_failures.with_label_values(&[&label]).inc();
            if let Some(owned) = owned {
                owned.writing = false;
                // Due again: the records it covered are not in any snapshot.
                owned.since_checkpoint += 1;
            }
            Some(e)
        }
    }
}

/// Takes in every snapshot written so far, without waiting.
fn apply_written(deps: &Deps, inner: &mut Inner) {
    while let Ok(w) = inner.writer.written.try_recv() {
        let slice = w.slice;
        if let Some(e) = apply(deps, inner, w) {
            log::warn!("slice {slice}: snapshot failed: {e}");
        }
    }
}

/// Waits until no snapshot of `slice` is being written; returns the error
/// of the one it waited for, if it failed.
fn wait_written(deps: &Deps, inner: &mut Inner, slice: u32) -> Result<(), KafkaLayerError> {
    let Inner { slices, writer, .. } = &mut *inner;
    if let Some(owned) = slices.get_mut(&slice) {
        hand_over(deps, writer, owned, true)?;
    }
    let mut failure = Ok(());
    while inner.slices.get(&slice).is_some_and(|o| o.writing) {
        let w = inner.writer.written.recv_timeout(FLUSH_TIMEOUT * 2).map_err(|_| KafkaLayerError::Checkpoint {
            slice,
            detail: "the checkpoint writer did not answer".into(),
        })?;
        let of = w.slice;
        if let Some(e) = apply(deps, inner, w) {
            if of == slice {
                failure = Err(e);
            } else {
                log::warn!("slice {of}: snapshot failed: {e}");
            }
        }
    }
    failure
}

/// Snapshots `slice` and waits until the snapshot is written (on release and
/// shutdown). A slice snapshotted since its last record needs no new one.
fn checkpoint_now(deps: &Deps, inner: &mut Inner, slice: u32) -> Result<(), KafkaLayerError> {
    // A failed write in flight leaves the slice due: it is retried here.
    let _ = wait_written(deps, inner, slice);
    let Inner { slices, buffer, .. } = &mut *inner;
    let Some(owned) = slices.get_mut(&slice) else {
        return Ok(());
    };
    if owned.since_checkpoint == 0 && owned.manifest.is_some() {
        return Ok(());
    }
    // Copied at once by `wait_written`: the slice is being released.
    begin_snapshot(deps, buffer, owned);
    wait_written(deps, inner, slice)
}

/// The slice worker loop. Returns when `stop` is set (after snapshotting
/// every owned slice) or on a fatal error.
pub fn run(deps: Arc<Deps>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    super::name_thread("dedupd-slices");
    let writer = Writer::start(deps.clone());
    let restorer = Restores::start(deps.clone());
    let inner = Arc::new(Mutex::new(Inner {
        slices: BTreeMap::new(),
        judged: Vec::new(),
        fatal: None,
        writer,
        buffer: None,
        restoring: BTreeMap::new(),
        unassigned: BTreeSet::new(),
        deciding: BTreeMap::new(),
        restores_asked: 0,
        restorer,
    }));
    let high_offsets = Arc::new(Mutex::new(BTreeMap::new()));
    let id = &deps.cfg.settings.app.id;
    let join = JoinWatch::new(&deps.cfg, "slice workers", id);
    let context = WorkerContext { deps: deps.clone(), inner: inner.clone(), high_offsets: high_offsets.clone(), join };
    *deps.status.lookup.lock().expect("status lock") = Some(lookup_fn(&deps, &inner));
    let owner = inner.clone();
    let delete = super::deletes::delete_fn(
        &deps.cfg,
        deps.params.seed,
        deps.params.deletable,
        &deps.slice_topic,
        deps.status.clone(),
        move |slice| owner.lock().expect("worker lock").slices.contains_key(&slice),
    )?;
    *deps.status.delete.lock().expect("status lock") = Some(delete);
    if deps.cfg.provenance.is_some() {
        *deps.status.provenance.lock().expect("status lock") = Some(provenance_fn(&deps, &inner));
    }
    if deps.cfg.counting.is_some() {
        *deps.status.count.lock().expect("status lock") = Some(count_fn(&deps, &inner));
    }
    let mut config = clients::group_consumer(&deps.cfg, id, &format!("{id}-slices"));
    // Statistics feed the consumer-lag gauge; no other client asks for them.
    config.set(clients::STATISTICS_INTERVAL, clients::statistics_interval(&deps.cfg, 2000));
    let consumer: BaseConsumer<WorkerContext> =
        config.create_with_context(context).context(|| "creating the slice consumer".into())?;
    consumer.subscribe(&[&deps.slice_topic]).context(|| format!("subscribing to {}", deps.slice_topic))?;
    consumer.context().join.joining(&[&deps.slice_topic]);

    // Shared mode: the slice reads the input records the read order names.
    let mut input = match deps.cfg.slicing {
        SlicingMode::Shared => Some(InputReader::new(&deps.cfg, deps.metrics.input_missing.clone())?),
        _ => None,
    };
    let settings = &deps.cfg.settings.checkpoint;
    let interval = Duration::from_millis(settings.interval);
    let mut last_housekeeping = Instant::now();
    let mut last_idle_check = Instant::now();
    let mut last_turn = Instant::now();
    let mut snapshots_from = Instant::now();
    // A local copy, flushed once per turn of the loop (see `Observer`).
    let received = deps.metrics.stage("slice_received").local();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        {
            let mut guard = inner.lock().expect("worker lock");
            take_restored(&deps, &consumer, &mut guard);
            if let Some(f) = guard.fatal.clone() {
                break Err(KafkaLayerError::Topology(f));
            }
        }
        if let Some(f) = deps.producer.context().failure() {
            break Err(KafkaLayerError::Topology(f));
        }
        // One wait, then whatever librdkafka already holds (up to
        // POLL_BATCH), with one reading of the clocks: per record, they cost
        // as much as judging it. The worker lock is taken per record, not
        // held across a poll: rebalance callbacks run inside `poll` and take it.
        let mut polled = consumer.poll(Duration::from_millis(100));
        let now = Instant::now();
        let wall_ms = now_ms();
        consumer.context().join.tick(now);
        let mut events = 0;
        let mut failed = None;
        while let Some(event) = polled.take() {
            match event {
                Ok(msg) => {
                    observe_since(&received, msg.timestamp().to_millis(), wall_ms);
                    if let Some(input) = input.as_mut().filter(|_| is_read_order(&msg)) {
                        if let Err(e) = handle_read_order(&deps, &inner, input, &msg, now) {
                            failed = Some(e);
                            break;
                        }
                        events += 1;
                        if events < POLL_BATCH {
                            polled = consumer.poll(Duration::ZERO);
                        }
                        continue;
                    }
                    let mut guard = inner.lock().expect("worker lock");
                    if let Err(e) = handle(&deps, &mut guard, &msg, now) {
                        failed = Some(e);
                        break;
                    }
                    // A snapshot being copied advances by a step per record,
                    // as before batching: the pause per record stays short.
                    if let Err(e) = copy_some(&deps, &mut guard, COPY_STEP_BYTES) {
                        log::warn!("snapshot failed: {e}");
                    }
                }
                Err(e) => log::warn!("consuming {}: {e}", deps.slice_topic),
            }
            events += 1;
            if events < POLL_BATCH {
                polled = consumer.poll(Duration::ZERO);
            }
        }
        received.flush();
        if let Some(e) = failed {
            break Err(e);
        }
        if events == 0
            && let Err(e) = copy_some(&deps, &mut inner.lock().expect("worker lock"), IDLE_COPY_BYTES)
        {
            log::warn!("snapshot failed: {e}");
        }
        let stalled = last_turn.elapsed();
        last_turn = Instant::now();
        if stalled >= WORKER_STALL {
            after_stall(&mut inner.lock().expect("worker lock"), stalled);
            snapshots_from = last_turn + STALL_SETTLE;
        }
        if last_idle_check.elapsed() >= IDLE_CHECK_EVERY {
            last_idle_check = Instant::now();
            if let Err(e) = flush_idle(&deps, &mut inner.lock().expect("worker lock")) {
                break Err(e);
            }
        }
        if last_housekeeping.elapsed() >= Duration::from_millis(200) {
            last_housekeeping = Instant::now();
            let mut guard = inner.lock().expect("worker lock");
            apply_written(&deps, &mut guard);
            let Inner { slices, writer, buffer, .. } = &mut *guard;
            // The most overdue slice first; one snapshot in the writer's hands at a time.
            let due = slices
                .values()
                .filter(|o| !o.writing && o.since_checkpoint > 0)
                .filter(|o| {
                    (settings.interval_records > 0 && o.since_checkpoint >= settings.interval_records)
                        || o.last_checkpoint.elapsed() >= interval
                })
                .min_by_key(|o| o.last_checkpoint)
                .map(|o| o.state.slice);
            let in_progress = writer.outstanding > 0 || slices.values().any(|o| o.copying.is_some());
            let settled = Instant::now() >= snapshots_from;
            if !in_progress
                && settled
                && let Some(owned) = due.and_then(|s| slices.get_mut(&s))
            {
                begin_snapshot(&deps, buffer, owned);
            }
            publish(&deps, &mut guard, &high_offsets.lock().expect("offsets lock"));
        }
    };

    // Graceful stop: snapshot every slice, then leave the group.
    let mut guard = inner.lock().expect("worker lock");
    let owned: Vec<u32> = guard.slices.keys().copied().collect();
    for slice in owned {
        // After a failure only the writes in flight finish.
        let done = if result.is_ok() {
            checkpoint_now(&deps, &mut guard, slice)
        } else {
            wait_written(&deps, &mut guard, slice)
        };
        if let Err(e) = done {
            log::warn!("slice {slice}: snapshot on shutdown failed: {e}");
        }
    }
    publish(&deps, &mut guard, &BTreeMap::new());
    // Nothing left to snapshot on the revocation that closing triggers.
    for owned in guard.slices.values_mut() {
        owned.since_checkpoint = 0;
    }
    // A restore in progress is not waited for: its slice was never owned.
    guard.restoring.clear();
    guard.deciding.clear();
    guard.restorer.jobs = None;
    drop(guard);
    drop(consumer);
    inner.lock().expect("worker lock").writer.stop();
    result
}

/// Publishes counters, gauges and status of the owned slices.
fn publish(deps: &Deps, inner: &mut Inner, high_offsets: &BTreeMap<u32, i64>) {
    let m = &deps.metrics;
    // Room a backlog left in the buffers is given back here, off the per-record path.
    if let Some(to) = shrink_target(inner.judged.len(), inner.judged.capacity()) {
        inner.judged.shrink_to(to);
    }
    m.producer_queue.set(i64::from(deps.producer.in_flight_count()));
    let mut status = deps.status.slices.lock().expect("status lock");
    for (slice, owned) in inner.slices.iter_mut() {
        let c = &owned.state.counters;
        let p = &owned.published;
        let label = slice.to_string();
        for (result, now, before) in [
            ("distinct", c.distinct, p.distinct),
            ("duplicate", c.duplicates, p.duplicates),
            ("invalid", c.invalid, p.invalid),
            ("resend", c.resends, p.resends),
        ] {
            if now > before {
                deps.metrics.records.with_label_values(&[&label, result]).inc_by(now - before);
            }
        }
        if c.late > p.late {
            m.late_records.with_label_values(&[&label]).inc_by(c.late - p.late);
        }
        // A dense leaf resolves its duplicates itself and forwards its distinct records.
        if deps.cfg.tier == crate::config::Tier::DenseLeaf {
            m.tier_lookups.with_label_values(&["forwarded"]).inc_by(c.distinct - p.distinct);
            m.tier_lookups.with_label_values(&["resolved"]).inc_by(c.duplicates - p.duplicates);
        }
        let overflows = owned.state.order.overflows();
        if overflows > owned.published_overflows {
            // Once per publication, not per release: a storm of them is one line.
            log::warn!(
                "slice {slice}: held more than slicing.max_held = {} records for an input partition nobody \
                 routes; released them past it ({} times so far): records of that partition may now arrive late",
                deps.cfg.settings.slicing.max_held,
                overflows
            );
            m.hold_overflows.with_label_values(&[&label]).inc_by(overflows - owned.published_overflows);
            owned.published_overflows = overflows;
        }
        m.waiting_records.with_label_values(&[&label]).set(owned.held.len() as i64);
        if let Some(to) = shrink_target(owned.held.len(), owned.held.capacity()) {
            owned.held.shrink_to(to);
        }
        owned.state.order.shrink_spare();
        owned.published = c.clone();
        let f = &owned.state.filter;
        let fc = f.counters();
        let now = [fc.generations_created, fc.generations_dropped, fc.saturated_inserts];
        for (i, counter) in
            [&m.generations_created, &m.generations_dropped, &m.saturated_inserts].into_iter().enumerate()
        {
            if now[i] > owned.published_filter[i] {
                counter.with_label_values(&[&label]).inc_by(now[i] - owned.published_filter[i]);
            }
        }
        owned.published_filter = now;
        if let Some(p) = &owned.state.provenance {
            let dropped = p.sources.dropped();
            if dropped > owned.published_provenance_dropped {
                m.provenance_dropped.with_label_values(&[&label]).inc_by(dropped - owned.published_provenance_dropped);
            }
            owned.published_provenance_dropped = dropped;
        }
        // Exported (0) with provenance off too, as every documented metric is.
        let live_sources = owned.state.provenance.as_ref().map_or(0, |p| p.sources.live_sources());
        m.provenance_sources.with_label_values(&[&label]).set(live_sources as i64);
        // A count kind: the fraction of ones (rsbf) or of non-zero cells
        // (stable) stands for the density, its design FPR for the estimate.
        let (density, estimated_fpr, memory_bytes) = match &owned.state.count {
            Some(count) => {
                let st = count.stats();
                (st.ones_fraction, st.design_fpr, st.memory_bytes as usize)
            }
            None => (f.generations().last().map_or(0.0, |g| g.density()), f.estimated_fpr(), f.memory_bytes()),
        };
        m.filter_density.with_label_values(&[&label]).set(density);
        m.filter_generations.with_label_values(&[&label]).set(f.generations().len() as i64);
        m.filter_memory_bytes.with_label_values(&[&label]).set(memory_bytes as i64);
        m.filter_estimated_fpr.with_label_values(&[&label]).set(estimated_fpr);
        m.checkpoint_age.with_label_values(&[&label]).set(owned.last_checkpoint.elapsed().as_secs_f64());
        // Shared mode: read-order records (a router's turn each) not taken in yet.
        let next = log_position(deps, owned.state.next_offset) as i64;
        let lag = high_offsets.get(slice).map_or(0, |&h| (h - next).max(0));
        m.consumer_lag.with_label_values(&[&label]).set(lag);
        status.insert(
            *slice,
            SliceStatus {
                slice: *slice,
                next_offset: owned.state.next_offset,
                replaying_until: owned.replay_until.map(|y| y.to_string()),
                clock_ms: f.clock_ms(),
                generations: f.generations().len(),
                density,
                estimated_fpr,
                memory_bytes,
                distinct: c.distinct,
                duplicates: c.duplicates,
                invalid: c.invalid,
                resends: c.resends,
                late: c.late,
                waiting: owned.held.len() as u64,
                last_checkpoint_offset: owned.manifest.as_ref().map(|m| m.offset),
            },
        );
    }
}

/// After the worker stood still for `stalled`: its slices did not go idle
/// meanwhile, the worker did. Without this, every slice holding records
/// would look idle on waking and be flushed at once; if the process was
/// stopped beyond `session.timeout.ms`, the group has given its slices to
/// another member by then, and those flushes (their outputs and their
/// records in the flush log, which later restores replay) would be a
/// zombie's writes: measured 14 outputs delivered twice by
/// `scripts/faults.sh daemon-pause` before this. Idleness and the snapshot
/// count again from now (and the worker loop starts no snapshot for
/// [`STALL_SETTLE`]), which gives librdkafka the time to learn from the
/// coordinator that the assignment is lost (it asks at once on waking) and
/// revoke it before this process writes for those slices again.
fn after_stall(inner: &mut Inner, stalled: Duration) {
    log::info!(
        "slice workers: stood still for {:.1} s (a stopped process or a starved CPU); idle flushes and snapshots \
         count from now",
        stalled.as_secs_f64()
    );
    let now = Instant::now();
    for owned in inner.slices.values_mut() {
        owned.last_arrival = now;
    }
}

/// How often the worker looks for idle slices with records waiting.
const IDLE_CHECK_EVERY: Duration = Duration::from_millis(50);

/// Flushes every owned slice that holds records for the watermark and has
/// received nothing for the lateness (at least 100 ms): with no more input,
/// nothing would ever release them. Not during a silent replay, which must
/// only flush where the original run did (its flushes are logged). Not
/// past the hold either (repartition mode): a slice that hears only
/// progress records, or nothing, while an input partition that is not idle
/// waits for its router (a rebalance), releases nothing that partition
/// may still come before.
fn flush_idle(deps: &Deps, inner: &mut Inner) -> Result<(), KafkaLayerError> {
    let idle_after = Duration::from_millis(deps.cfg.order.lateness_ms.max(100));
    let Inner { slices, judged, .. } = inner;
    for owned in slices.values_mut() {
        apply_logged_flushes(deps, owned, judged)?;
        let replaying = !owned.flushes.is_empty()
            || [owned.replay_until, owned.flag_replay_until, owned.policy_until]
                .iter()
                .flatten()
                .any(|y| arrivals_to_replay(*y, owned.state.next_offset));
        if owned.state.order.flush_pending() && !replaying && owned.last_arrival.elapsed() >= idle_after {
            idle_flush(deps, owned, judged)?;
        }
    }
    Ok(())
}

/// Whether a silent replay up to the last output `y` still waits for the
/// arrival of a record, the slice having taken in every record before
/// `next_offset`. Then an idle flush must wait: its judgments would come
/// before ones the replay has still to make. Once the record `y` names
/// has arrived (`y.after < next_offset`), every judgment up to `y` has been
/// made — a flush now comes after it. (A flush `y` is the logged flushes'
/// business.) `y.after >= next_offset - 1` here once kept a slice restored
/// right after its last output from ever flushing its waiting records when
/// no record came after (a rebalance storm's last restore).
fn arrivals_to_replay(y: ReleasePos, next_offset: u64) -> bool {
    !y.flush && y.after >= next_offset
}

/// Processes one slice record: takes it in, emits the judgments it
/// releases, keeps it if it waits, then applies a logged idle flush that
/// came right after it (replay).
fn handle(deps: &Deps, inner: &mut Inner, msg: &BorrowedMessage<'_>, now: Instant) -> Result<(), KafkaLayerError> {
    let slice = msg.partition() as u32;
    let Inner { slices, judged, deciding, .. } = inner;
    let Some(owned) = slices.get_mut(&slice) else {
        if let Some(d) = deciding.get_mut(&slice) {
            return decide_early(deps, d, slice, msg);
        }
        return Ok(()); // fetched just before a revocation, or while restoring
    };
    // Shared mode: a slice-log record (a router's progress, a delete
    // request) is at index 0 of its offset's virtual positions.
    let offset = slice_position(deps, msg.offset() as u64);
    if offset < owned.state.next_offset {
        return Ok(()); // already reflected in the state
    }
    // A logged idle flush due after the slice's last record comes before
    // this one: a slice restored from a snapshot taken between a record and
    // the flush after it must not wait for the worker's idle check, which a
    // record arriving first would overtake (the flush would be skipped, and
    // the replay would release its records at other positions).
    apply_logged_flushes(deps, owned, judged)?;
    let header_list: Vec<(&str, &[u8])> =
        msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()).unwrap_or_default();
    let source_header = header_list.iter().find(|(k, _)| *k == headers::SOURCE).map(|(_, v)| *v);
    let framed = parts_with(deps.cfg.slicing, msg.payload(), source_header);
    let source = framed.source;
    // Control records (a router's progress, a delete request) are written by
    // dedupd itself into the slice log: they have no router stamp, while
    // every record the router copies has one — so an input record that
    // carries such a header of its own is judged as the record it is.
    let control = |name: &str| is_control(deps, source, &header_list, name);
    // Inside a range of slice offsets logged as decided by
    // `availability.policy`: records are decided, not judged (see
    // [`decide_logged`]).
    owned.ranges.retain(|r| r.to >= offset);
    if let Some(range) = range_of(&owned.ranges, offset) {
        return decide_logged(deps, owned, judged, msg, &framed, &header_list, range, now);
    }
    // A router's progress record (see `super::router`): not input, and not
    // an arrival either — a slice that receives only these is idle, and its
    // idle flush (up to the hold) is what releases its last records.
    if control(headers::PROGRESS) {
        judged.clear();
        // Only routers write these: a malformed one is a bug or a foreign
        // writer; it announces nothing (at the same place in a replay).
        let entries = Progress::parse_all(msg.payload().unwrap_or_default()).unwrap_or_else(|| {
            log::warn!("slice {slice}: the progress record at offset {offset} cannot be read; skipped");
            Vec::new()
        });
        match owned.copying.as_mut() {
            Some(c) => owned.state.announce_copying(offset, &entries, &mut c.copy, judged),
            None => owned.state.announce(offset, &entries, judged),
        }
        owned.since_checkpoint += 1;
        emit(deps, owned, judged, ReleasePos { after: offset, flush: false, rank: 0 }, None)?;
        return apply_logged_flushes(deps, owned, judged);
    }
    owned.last_arrival = now;
    // A delete request (see `super::deletes`), applied here, in the log's
    // order. Only the admin endpoint writes one: it has no router stamp,
    // while every record the router copies has one — so an input record
    // that carries a `dedupd.delete` header of its own is judged as the
    // record it is, never taken for a request (nor dropped).
    if control(headers::DELETE) {
        let key = msg.key().unwrap_or_default();
        let outcome = match owned.copying.as_mut() {
            Some(c) => owned.state.delete_copying(offset, key, &mut c.copy),
            None => owned.state.delete(offset, key),
        };
        owned.since_checkpoint += 1;
        // The admin endpoint waits for the slice-log offset it wrote.
        super::deletes::posted(&deps.status.deletes, slice, msg.offset() as u64, outcome);
        judged.clear();
        return apply_logged_flushes(deps, owned, judged);
    }
    // In shared mode the slice log holds only what dedupd writes there
    // (read-order records are taken by `handle_read_order`).
    if deps.cfg.slicing == SlicingMode::Shared {
        log::warn!("slice {slice}: the record at slice-log offset {} is not one dedupd writes; skipped", msg.offset());
        return Ok(());
    }
    judge(deps, owned, judged, offset, msg, &framed, &header_list)
}

/// Shared mode: judges the input records the read-order record `msg` names,
/// in its order, from the first the slice has not taken in yet (a slice
/// resumes in the middle of one), reading them from the input with `input`.
/// The worker lock is taken per record: an admin lookup waits for one
/// record, not for a whole read-order record and its fetches.
fn handle_read_order(
    deps: &Deps,
    inner: &Mutex<Inner>,
    input: &mut InputReader,
    msg: &BorrowedMessage<'_>,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let slice = msg.partition() as u32;
    let Some(next) = inner.lock().expect("worker lock").slices.get(&slice).map(|o| o.state.next_offset) else {
        return Ok(()); // fetched just before a revocation
    };
    let mut order = match ReadOrder::decode(msg.payload().unwrap_or_default()) {
        Ok(order) => order,
        Err(e) => {
            // Only routers write these: a record that cannot be read is a
            // bug or a foreign writer, and the records it names are unknown.
            log::error!(
                "slice {slice}: the read-order record at slice-log offset {} cannot be read ({e}); the input \
                 records it names are not judged",
                msg.offset()
            );
            return Ok(());
        }
    };
    order.first_position = read_order::position(msg.offset() as u64, 0);
    let mut run_start = order.first_position;
    for run in &order.runs {
        let run_end = run_start + u64::from(run.count);
        let skip = next.saturating_sub(run_start);
        if skip < u64::from(run.count) {
            let first = run.first + skip as i64;
            input.read_run(&run.topic, run.partition, first, run.count - skip as u32, |offset, record| {
                let position = run_start + (offset - run.first) as u64;
                let source = SourceRef { topic: &run.topic, partition: run.partition, offset };
                let mut guard = inner.lock().expect("worker lock");
                handle_named(deps, &mut guard, slice, position, record, source, now)?;
                if let Err(e) = copy_some(deps, &mut guard, COPY_STEP_BYTES) {
                    log::warn!("snapshot failed: {e}");
                }
                Ok(())
            })?;
        }
        run_start = run_end;
    }
    Ok(())
}

/// Shared mode: judges one input record a read-order record names, at
/// virtual position `offset`; `source` is where it was read.
fn handle_named(
    deps: &Deps,
    inner: &mut Inner,
    slice: u32,
    offset: u64,
    msg: &BorrowedMessage<'_>,
    source: SourceRef<'_>,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let Inner { slices, judged, .. } = inner;
    let Some(owned) = slices.get_mut(&slice) else {
        return Ok(()); // revoked meanwhile
    };
    if offset < owned.state.next_offset {
        return Ok(()); // already reflected in the state
    }
    apply_logged_flushes(deps, owned, judged)?;
    owned.last_arrival = now;
    let header_list: Vec<(&str, &[u8])> =
        msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()).unwrap_or_default();
    // The source makes a record named twice (by a router that re-read its
    // partitions after a crash) a re-sent copy, as the stamp of a routed copy does.
    let framed = Unframed { source: Some(source), payload: msg.payload(), reading: None };
    judge(deps, owned, judged, offset, msg, &framed, &header_list)
}

/// Judges an input record at slice offset (shared mode: virtual position)
/// `offset`: emits the judgments it releases, keeps it if it waits, then
/// applies a logged idle flush that came right after it (replay).
fn judge(
    deps: &Deps,
    owned: &mut Owned,
    judged: &mut Vec<Judgment>,
    offset: u64,
    msg: &BorrowedMessage<'_>,
    framed: &Unframed<'_>,
    header_list: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    let Unframed { source, payload, reading } = *framed;
    let record = RecordView {
        key: msg.key(),
        payload: payload.unwrap_or_default(),
        headers: header_list,
        timestamp_ms: msg.timestamp().to_millis(),
    };
    let slice_record = SliceRecord { offset, record, source, reading };
    judged.clear();
    match owned.copying.as_mut() {
        Some(c) => {
            c.records += 1;
            owned.state.process_copying(&slice_record, &deps.extractor, &mut c.copy, judged)
        }
        None => owned.state.process(&slice_record, &deps.extractor, judged),
    }
    owned.since_checkpoint += 1;
    if let Some(input) = &deps.input_counter {
        input.inc();
    }
    // No judgment of its own: it waits for the watermark.
    if !judged.iter().any(|j| j.offset == offset) {
        owned.held.insert(offset, msg.detach());
    }
    emit(deps, owned, judged, ReleasePos { after: offset, flush: false, rank: 0 }, Some((offset, msg, framed)))?;
    apply_logged_flushes(deps, owned, judged)
}

/// Applies the logged idle flushes due after the slice's last record (a
/// replay flushes where the original run did).
fn apply_logged_flushes(deps: &Deps, owned: &mut Owned, judged: &mut Vec<Judgment>) -> Result<(), KafkaLayerError> {
    let last = owned.state.next_offset.checked_sub(1);
    while let Some(&after) = owned.flushes.front() {
        if Some(after) > last {
            break;
        }
        owned.flushes.pop_front();
        if Some(after) == last {
            flush_slice(deps, owned, judged)?;
        }
    }
    Ok(())
}

/// Judges every record the slice holds for the watermark (an idle flush,
/// already logged) and emits the judgments.
fn flush_slice(deps: &Deps, owned: &mut Owned, judged: &mut Vec<Judgment>) -> Result<(), KafkaLayerError> {
    judged.clear();
    match owned.copying.as_mut() {
        Some(c) => owned.state.flush_copying(&mut c.copy, judged),
        None => owned.state.flush(judged),
    }
    let after = owned.state.next_offset.saturating_sub(1);
    deps.metrics.idle_flushes.with_label_values(&[&owned.state.slice.to_string()]).inc();
    emit(deps, owned, judged, ReleasePos { after, flush: true, rank: 0 }, None)
}

/// Writes an idle flush of the slice to its flush log, waits until the
/// broker has it, then applies it: a restart replays it at the same place.
fn idle_flush(deps: &Deps, owned: &mut Owned, judged: &mut Vec<Judgment>) -> Result<(), KafkaLayerError> {
    let slice = owned.state.slice;
    let after = owned.state.next_offset.saturating_sub(1);
    let payload = flush_record(after);
    log_and_wait(deps, slice, payload.as_bytes(), &format!("idle flush after offset {after}"))?;
    owned.since_checkpoint += 1;
    flush_slice(deps, owned, judged)
}

/// Emits the judgments of one release (an arrival, or a flush) whose
/// first position is `first`: outputs go to partition `slice` of the
/// output topics, with the record's slice offset and release position;
/// judgments up to the restored slice's last output are replayed silently.
/// `arriving` is the record whose arrival released them, if any.
fn emit(
    deps: &Deps,
    owned: &mut Owned,
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
        let silent = owned.replay_until.is_some_and(|y| pos <= y);
        if !silent {
            owned.replay_until = None;
        }
        owned.last_normal = owned.last_normal.max(Some(pos));
        // Flags have their own replay bound: the flag topic's last record.
        let flag_written = owned.flag_replay_until.is_some_and(|y| pos <= y);
        if !flag_written {
            owned.flag_replay_until = None;
        }
        let flag = j.count.filter(|m| m.flagged && !flag_written);
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
        msg.emit(deps, slice, j, pos, silent, framed)?;
        if let Some(mark) = flag {
            msg.flag(deps, slice, j, pos, mark.estimate, framed)?;
            deps.metrics.flagged.with_label_values(&[&slice.to_string()]).inc();
        }
        if silent {
            deps.metrics.replayed.with_label_values(&[&slice.to_string()]).inc();
        }
    }
    Ok(())
}

/// A consumed record, borrowed or owned (held for the watermark), that a
/// judgment's outputs copy; `framed` is its [`parts`] when already read
/// (the arriving record's, by [`handle`]), else they are read here.
trait MessageRef {
    fn emit(
        &self,
        deps: &Deps,
        slice: u32,
        j: &Judgment,
        pos: ReleasePos,
        silent: bool,
        framed: Option<&Unframed<'_>>,
    ) -> Result<(), KafkaLayerError>;
    fn flag(
        &self,
        deps: &Deps,
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
        deps: &Deps,
        slice: u32,
        j: &Judgment,
        pos: ReleasePos,
        silent: bool,
        framed: Option<&Unframed<'_>>,
    ) -> Result<(), KafkaLayerError> {
        let framed = framed.copied().unwrap_or_else(|| parts(deps.cfg.slicing, self));
        emit_one(deps, slice, j, pos, self, &framed, silent)
    }

    fn flag(
        &self,
        deps: &Deps,
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
    deps: &Deps,
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

/// Sends what one judgment of `msg` (its [`parts`]: `framed`) produces
/// (nothing when `silent`).
fn emit_one<M: Message>(
    deps: &Deps,
    slice: u32,
    j: &Judgment,
    pos: ReleasePos,
    msg: &M,
    framed: &Unframed<'_>,
    silent: bool,
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
    if silent {
        return Ok(());
    }
    let out = &deps.cfg.settings.output;
    let mut offset_buf = [0u8; 20];
    let offset_text = format_into(&mut offset_buf, format_args!("{}", j.offset));
    let mut release_buf = [0u8; 48];
    let release_text = format_into(&mut release_buf, format_args!("{pos}"));
    let ids = [(headers::SLICE_OFFSET, offset_text), (headers::RELEASE, release_text)];
    if let Some(late) = j.late_by_ms
        && !out.late_topic.is_empty()
    {
        let late_text = late.to_string();
        send(deps, &out.late_topic, slice, msg, payload, &[ids[0], ids[1], (headers::LATE_BY, late_text.as_bytes())])?;
    }
    match &j.verdict {
        // A dense leaf's output is its parent's input: named as this leaf's.
        SliceVerdict::Distinct if deps.cfg.tier == crate::config::Tier::DenseLeaf => {
            let leaf = (super::tier::LEAF, deps.cfg.settings.app.id.as_bytes());
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
        SliceVerdict::Invalid(why) => {
            deps.metrics.dead_letters.with_label_values(&[why.reason.as_str()]).inc();
            let mut extra = vec![
                ids[0],
                ids[1],
                (headers::REASON, why.reason.as_str().as_bytes()),
                (headers::DETAIL, why.detail.as_bytes()),
            ];
            // The input record's position: in repartition mode the router's
            // stamp; else this record's own (the slice log is the input).
            let mut stamp_buf = [0u8; STAMP_BYTES];
            let source = framed.source.unwrap_or(SourceRef {
                topic: msg.topic(),
                partition: msg.partition(),
                offset: msg.offset(),
            });
            // No stamp for a topic name longer than Kafka allows (never panics).
            if let Some(stamp) = SourceRef::stamp(&mut stamp_buf, source.topic, source.partition, source.offset) {
                extra.push((headers::SOURCE, stamp));
            }
            send(deps, &out.dead_letter_topic, slice, msg, payload, &extra)
        }
    }
}

/// Sends a copy of the input record `msg` holds (key, timestamp, headers;
/// its input payload `payload`, from [`parts`]) to `topic` partition `slice`
/// with `extra` headers, waiting while the queue is full.
fn send<M: Message>(
    deps: &Deps,
    topic: &str,
    slice: u32,
    msg: &M,
    payload: Option<&[u8]>,
    extra: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    produce_with(&deps.producer, topic, slice as i32, msg, payload, extra, &[])
}

/// A slice-log record's input position, the router's reading and the
/// input record's payload: in repartition mode from the router's frame
/// ([`unframe`]); in input-partitions mode the slice log is the input.
pub fn parts<M: Message>(slicing: SlicingMode, msg: &M) -> Unframed<'_> {
    let source_header = match slicing {
        SlicingMode::InputPartitions | SlicingMode::Shared => None,
        SlicingMode::Repartition => {
            msg.headers().and_then(|h| h.iter().find(|h| h.key == headers::SOURCE)).and_then(|h| h.value)
        }
    };
    parts_with(slicing, msg.payload(), source_header)
}

/// [`parts`] of a record with value `payload` and `dedupd.source` header
/// `source_header` (a caller that has the header list at hand).
fn parts_with<'a>(slicing: SlicingMode, payload: Option<&'a [u8]>, source_header: Option<&'a [u8]>) -> Unframed<'a> {
    match (slicing, payload) {
        // Shared mode: a record held is the input record itself (its own
        // topic, partition and offset are its source), a slice-log record a
        // control record.
        (SlicingMode::InputPartitions | SlicingMode::Shared, payload) => {
            Unframed { source: None, payload, reading: None }
        }
        (SlicingMode::Repartition, Some(value)) => unframe(source_header, value),
        (SlicingMode::Repartition, None) => {
            Unframed { source: source_header.and_then(SourceRef::parse), payload: None, reading: None }
        }
    }
}

/// Whether a slice-log record is a control record `name` (a router's
/// progress, a delete request) rather than input: dedupd writes those
/// without a router stamp, which every routed input record has.
fn is_control(deps: &Deps, source: Option<SourceRef<'_>>, header_list: &[(&str, &[u8])], name: &str) -> bool {
    deps.cfg.slicing != SlicingMode::InputPartitions && source.is_none() && header_list.iter().any(|(k, _)| *k == name)
}

/// Whether a slice-log record is a router's read-order record (shared mode).
fn is_read_order(msg: &BorrowedMessage<'_>) -> bool {
    msg.headers().is_some_and(|h| h.iter().any(|h| h.key == headers::READ_ORDER))
}

/// The slice offset — in shared mode the virtual position
/// ([`read_order::position`]) — of the slice-log record at `log_offset`
/// that is not a read-order record.
fn slice_position(deps: &Deps, log_offset: u64) -> u64 {
    match deps.cfg.slicing {
        SlicingMode::Shared => read_order::position(log_offset, 0),
        _ => log_offset,
    }
}

/// Where in the slice log a slice at slice offset `offset` goes on from
/// (the inverse of [`slice_position`]; in shared mode the read-order record
/// that names `offset`, whose records before it are passed over).
fn log_position(deps: &Deps, offset: u64) -> u64 {
    match deps.cfg.slicing {
        SlicingMode::Shared => read_order::log_offset(offset),
        _ => offset,
    }
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
fn decide_early(deps: &Deps, d: &mut Deciding, slice: u32, msg: &BorrowedMessage<'_>) -> Result<(), KafkaLayerError> {
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
/// slice (see [`SliceState::decide`]): a replay of a decision made while
/// it was restored (silent: its output was sent) or, for a range logged
/// ahead, a decision made now. A router's progress record there is skipped
/// and a delete request applied, as [`decide_early`] leaves them; a record
/// whose key or time cannot be read goes to the dead-letter topic.
#[allow(clippy::too_many_arguments)]
fn decide_logged(
    deps: &Deps,
    owned: &mut Owned,
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
        super::deletes::posted(&deps.status.deletes, slice, offset, outcome);
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
    deps: &Deps,
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
/// broker has it: no output of the range is sent before (see [`idle_flush`]).
fn log_range(deps: &Deps, slice: u32, range: &PolicyRange) -> Result<(), KafkaLayerError> {
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
fn log_and_wait(deps: &Deps, slice: u32, payload: &[u8], what: &str) -> Result<(), KafkaLayerError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_flush_waits_only_for_arrivals_a_replay_has_still_to_judge() {
        let at = |after, flush| ReleasePos { after, flush, rank: 0 };
        // Restored at offset 1879 (records 0..=1878 taken in), last output
        // released by the arrival of 1878: nothing left to replay.
        assert!(!arrivals_to_replay(at(1878, false), 1879));
        assert!(!arrivals_to_replay(at(1500, false), 1879));
        // The last output came from records not read again yet.
        assert!(arrivals_to_replay(at(1879, false), 1879));
        assert!(arrivals_to_replay(at(2000, false), 1879));
        // A flush is replayed from the flush log, not by arrivals.
        assert!(!arrivals_to_replay(at(2000, true), 1879));
    }

    #[test]
    fn the_lag_gauge_reads_end_offsets_from_librdkafka_statistics() {
        // Trimmed from a real statistics event of the slice consumer.
        let json = br#"{"name":"app-slices#consumer-1","type":"consumer","msg_cnt":0,
            "brokers":{"127.0.0.1:9092/1":{"state":"UP"}},
            "topics":{"app.slices":{"topic":"app.slices","partitions":{
                "0":{"partition":0,"hi_offset":120,"lo_offset":0},
                "1":{"partition":1,"hi_offset":-1001},
                "-1":{"partition":-1,"hi_offset":-1001}}}}}"#;
        let stats: HighOffsets = serde_json::from_slice(json).unwrap();
        let parts = &stats.topics["app.slices"].partitions;
        assert_eq!(parts["0"].hi_offset, 120);
        assert_eq!(parts["1"].hi_offset, -1001);
        assert!(serde_json::from_slice::<HighOffsets>(br#"{"name":"x"}"#).unwrap().topics.is_empty());
    }
}
