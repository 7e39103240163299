//! The router consumer's context: in every rebalance the slices are told
//! to wait for this router's partitions (see [`super::progress::hold`]),
//! and before partitions are revoked everything routed from them is
//! delivered and committed; the loop learns of
//! assignments and revocations through [`CommitBook`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{ClientContext, TopicPartitionList};

use super::commits::{CommitBook, commit_all};
use super::progress::hold;
use super::setup::{PartitionId, RouterSetup};
use crate::kafka::clients;
use crate::kafka::consumed::{BatchQueue, ForwardTarget};
use crate::kafka::join::JoinWatch;
use crate::kafka::statistics::{InputLag, Statistics};

/// The router consumer's context (see the module documentation).
pub(super) struct RouterContext {
    pub(super) setup: Arc<RouterSetup>,
    pub(super) book: Arc<Mutex<CommitBook>>,
    pub(super) join: JoinWatch,
    /// Set by the rebalance callbacks (which run inside `poll`, on the
    /// router's thread): the loop then looks at `CommitBook`'s assignment lists,
    /// and not under the lock for every record.
    pub(super) rebalanced: AtomicBool,
    /// `dedupd_input_lag`: the router's group reads the input.
    pub(super) input_lag: InputLag,
    /// Where the records of the partitions assigned go: the router loop's
    /// records queue; `None` while there is none.
    pub(super) records_to: Mutex<Option<ForwardTarget>>,
}

impl ClientContext for RouterContext {
    /// Read for the input lag; never logged.
    fn stats_raw(&self, statistics: &[u8]) {
        match Statistics::parse(statistics) {
            Ok(stats) => self.input_lag.publish(&self.setup.metrics, &stats),
            Err(e) => log::debug!("librdkafka statistics without partition offsets: {e}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        clients::log_client_error(&error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        clients::log_client_message(level, fac, message);
    }
}

impl ConsumerContext for RouterContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // Hand over cleanly: everything routed so far is delivered and committed.
            let revoked = partition_ids(tpl);
            // Not when the group has already given them away (this member
            // was fenced): their new owner may have spoken of them already.
            if !consumer.assignment_lost() {
                self.hold_owned(consumer, &revoked);
            }
            if let Err(e) = commit_all(&self.setup, consumer, &self.book, Some(&revoked)) {
                log::warn!("router: committing before a rebalance: {e}");
            }
            self.book.lock().expect("router lock").revoked.extend(revoked);
            // A pause outlives the assignment in librdkafka: a partition this
            // router paused (a lane at its share) would come back paused if
            // it were assigned here again, to a lane that is not. Resumed
            // now, while librdkafka's own pause for the rebalance still holds
            // it (a resume of a partition not paused does nothing).
            if let Err(e) = consumer.resume(tpl) {
                log::warn!("router: resuming the partitions revoked: {e}");
            }
            self.rebalanced.store(true, Ordering::Relaxed);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let elements = tpl.elements();
            let named: Vec<(&str, i32)> = elements.iter().map(|e| (e.topic(), e.partition())).collect();
            self.join.assigned(&named);
            self.forward_records(consumer, &named);
            let assigned: Vec<PartitionId> = named.iter().map(|(t, p)| (t.to_string(), *p)).collect();
            self.hold_owned(consumer, &assigned);
            self.book.lock().expect("router lock").assigned.extend(assigned);
            self.rebalanced.store(true, Ordering::Relaxed);
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _: &TopicPartitionList) {
        if let Err(e) = result {
            log::warn!("router: committing input offsets: {e}");
        }
    }
}

impl RouterContext {
    /// Holds the slices for every partition this router owns, with `named`
    /// (those the callback names) if its assignment cannot be had: see
    /// [`hold`].
    fn hold_owned(&self, consumer: &BaseConsumer<Self>, named: &[PartitionId]) {
        let owned: Vec<PartitionId> = match consumer.assignment() {
            Ok(tpl) => partition_ids(&tpl),
            Err(_) => named.to_vec(),
        };
        let all = self.book.lock().expect("router lock").input_partitions.clone();
        if let Err(e) = hold(&self.setup, &owned, &all) {
            log::warn!("router: announcing {owned:?} held for a rebalance: {e}");
        }
    }

    /// Forwards the records of the input partitions just assigned to the
    /// router loop's records queue, if there is one: read there a batch at
    /// a time (see [`BatchQueue::forward`]).
    fn forward_records(&self, consumer: &BaseConsumer<Self>, partitions: &[(&str, i32)]) {
        let Some(target) = *self.records_to.lock().expect("router lock") else { return };
        // SAFETY: `run` clears `records_to` before the queue goes.
        unsafe { BatchQueue::forward(target, consumer.client(), partitions.iter().copied()) };
    }
}

/// The partitions `tpl` names.
fn partition_ids(tpl: &TopicPartitionList) -> Vec<PartitionId> {
    tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect()
}
