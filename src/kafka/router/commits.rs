//! Input offsets are committed only once what was routed from them is
//! acknowledged: every `COMMIT_EVERY` the offsets routed so far become a
//! candidate with a mark of what the producer had been given, committed
//! (asynchronously) once the mark is reached; a rebalance and the final
//! stop flush the producer and commit synchronously.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};

use super::setup::{PartitionId, RouterSetup};
use crate::kafka::producer::SentMark;
use crate::kafka::{Context, KafkaLayerError};

/// How often the offsets routed become a commit candidate.
pub(super) const COMMIT_EVERY: Duration = Duration::from_millis(500);
/// How often acknowledgements are looked at.
pub(super) const COMMIT_CHECK_EVERY: Duration = Duration::from_millis(10);
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// Next offsets to commit, per input partition.
pub(super) type Pending = BTreeMap<PartitionId, i64>;

/// Offsets to commit once everything the producer had been given when they
/// were taken is acknowledged.
struct Candidate {
    offsets: Pending,
    mark: SentMark,
}

/// CommitBook between the router loop and its rebalance callbacks.
#[derive(Default)]
pub(super) struct CommitBook {
    /// Routed since the last candidate was taken.
    pub(super) pending: Pending,
    /// Oldest first.
    candidates: VecDeque<Candidate>,
    /// Partitions revoked since the loop last looked: their buffers go.
    pub(super) revoked: Vec<PartitionId>,
    /// Partitions assigned since the loop last looked.
    pub(super) assigned: Vec<PartitionId>,
}

/// Flushes the producer, then commits synchronously every routed offset (of
/// `only`, if given; the other partitions' offsets stay pending).
pub(super) fn commit_all<C: ConsumerContext>(
    setup: &RouterSetup,
    consumer: &BaseConsumer<C>,
    book: &Mutex<CommitBook>,
    only: Option<&[PartitionId]>,
) -> Result<(), KafkaLayerError> {
    setup.producer.flush(FLUSH_TIMEOUT).context(|| "router: flushing slice records".into())?;
    if let Some(f) = setup.producer.context().failure() {
        return Err(KafkaLayerError::Fatal(format!("router: {f}")));
    }
    let chosen =
        |(topic, partition): &PartitionId| only.is_none_or(|o| o.iter().any(|(t, p)| t == topic && p == partition));
    let mut book = book.lock().expect("router lock");
    let mut latest = Pending::new();
    // Oldest first, so the newest offset of each partition wins.
    let CommitBook { pending, candidates, .. } = &mut *book;
    for offsets in candidates.iter_mut().map(|c| &mut c.offsets).chain(std::iter::once(pending)) {
        offsets.retain(|id, next| {
            if chosen(id) {
                latest.insert(id.clone(), *next);
            }
            !chosen(id)
        });
    }
    drop(book);
    commit_offsets(consumer, &latest, CommitMode::Sync)
}

/// Moves the pending offsets into a new candidate, then commits (without
/// waiting) the newest offsets of every candidate whose records are all acknowledged.
pub(super) fn commit_acknowledged<C: ConsumerContext>(
    setup: &RouterSetup,
    consumer: &BaseConsumer<C>,
    book: &Mutex<CommitBook>,
    new_candidate: bool,
) -> Result<(), KafkaLayerError> {
    let counts = setup.producer.context().counts();
    let mut latest = Pending::new();
    {
        let mut s = book.lock().expect("router lock");
        if new_candidate && !s.pending.is_empty() {
            let offsets = std::mem::take(&mut s.pending);
            s.candidates.push_back(Candidate { offsets, mark: counts.mark(None) });
        }
        while s.candidates.front().is_some_and(|c| counts.reached(&c.mark)) {
            let c = s.candidates.pop_front().expect("a candidate");
            latest.extend(c.offsets);
        }
    }
    if latest.is_empty() {
        return Ok(());
    }
    // Checked after the acknowledgements: a failed record before them shows here.
    if let Some(f) = setup.producer.context().failure() {
        return Err(KafkaLayerError::Fatal(format!("router: {f}")));
    }
    commit_offsets(consumer, &latest, CommitMode::Async)
}

fn commit_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    offsets: &Pending,
    mode: CommitMode,
) -> Result<(), KafkaLayerError> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), next) in offsets {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*next))
            .context(|| "router: building the offsets to commit".into())?;
    }
    consumer.commit(&tpl, mode).context(|| "router: committing input offsets".into())
}
