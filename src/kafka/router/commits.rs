//! Input offsets are committed only once what was routed from them is
//! acknowledged: every `COMMIT_EVERY` the offsets routed so far become a
//! candidate with a mark of what the producer had been given, committed
//! (asynchronously) once the mark is reached; a rebalance and the final
//! stop flush the producer and commit synchronously (at the stop, a group
//! that has moved on may refuse: [`commit_at_stop`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
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
    /// Every partition of the input topics, as the loop last learned them:
    /// the rebalance callbacks name them all ([`super::progress::hold`]).
    pub(super) input_partitions: Vec<PartitionId>,
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

/// The commit at stop, after every routed record is acknowledged. One the
/// group refuses because it has moved on (a member joining or leaving as
/// this one stops) is no failure: the partitions' next owner reads from
/// the offsets committed before, and the slices drop what it routes again
/// as exact re-sends (docs/design.md, invariant 3).
pub(super) fn commit_at_stop<C: ConsumerContext>(
    setup: &RouterSetup,
    consumer: &BaseConsumer<C>,
    book: &Mutex<CommitBook>,
) -> Result<(), KafkaLayerError> {
    match commit_all(setup, consumer, book, None) {
        Err(KafkaLayerError::Client { source, .. }) if is_group_moved_on(&source) => {
            log::warn!(
                "router: the group refused the last commit of input offsets ({source}): it is rebalancing; the next \
                 owner of those partitions routes the records since the last commit again, and the slices drop them"
            );
            Ok(())
        }
        other => other,
    }
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

/// Whether a commit was refused because the consumer group has moved on
/// to a new generation (a member joined or left meanwhile): the commit is
/// not made, and the partitions' next owner reads from the offsets
/// committed before.
fn is_group_moved_on(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::IllegalGeneration
                | RDKafkaErrorCode::RebalanceInProgress
                | RDKafkaErrorCode::UnknownMemberId
        )
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_refused_by_a_rebalance_is_told_from_other_failures() {
        for code in [
            RDKafkaErrorCode::IllegalGeneration,
            RDKafkaErrorCode::RebalanceInProgress,
            RDKafkaErrorCode::UnknownMemberId,
        ] {
            assert!(is_group_moved_on(&KafkaError::ConsumerCommit(code)), "{code:?}");
        }
        for code in
            [RDKafkaErrorCode::MessageTimedOut, RDKafkaErrorCode::AllBrokersDown, RDKafkaErrorCode::NotCoordinator]
        {
            assert!(!is_group_moved_on(&KafkaError::ConsumerCommit(code)), "{code:?}");
        }
        assert!(!is_group_moved_on(&KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)));
    }
}
