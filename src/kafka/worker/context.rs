//! The consumer context whose callbacks run the rebalance protocol: an
//! assigned slice is handed to the restore thread, a revoked one is
//! snapshotted and released (see the module map in [`super`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::restore_thread::RestoreJob;
use super::restores::restoring_list;
use super::setup::WorkerSetup;
use super::snapshots::checkpoint_now;
use super::state::WorkerState;
use crate::kafka::clients;
use crate::kafka::join::JoinWatch;
use crate::kafka::statistics::{InputLag, Statistics};

/// The consumer context: rebalances restore and release slices.
pub struct WorkerContext {
    pub(super) deps: Arc<WorkerSetup>,
    pub(super) inner: Arc<Mutex<WorkerState>>,
    /// End of each slice partition as librdkafka's statistics last saw it.
    pub(super) high_offsets: Arc<Mutex<BTreeMap<u32, i64>>>,
    pub(super) join: JoinWatch,
    /// `dedupd_input_lag` in input-partitions mode (where the slice log is
    /// the input; in the other modes the router's group reads the input).
    pub(super) input_lag: InputLag,
}

impl ClientContext for WorkerContext {
    fn error(&self, error: KafkaError, reason: &str) {
        clients::log_client_error(&error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        clients::log_client_message(level, fac, message);
    }

    /// Reads the partitions' end offsets (for the lag gauges) and when a
    /// broker last answered; never logs the statistics (rdkafka's default
    /// `stats` logs all of them at INFO).
    fn stats_raw(&self, statistics: &[u8]) {
        let stats = match Statistics::parse(statistics) {
            Ok(stats) => stats,
            Err(e) => return log::debug!("librdkafka statistics without partition offsets: {e}"),
        };
        if let Some(at) = stats.broker_heard_at() {
            self.deps.status.heard_from_broker(at);
        }
        self.deps.metrics.consumer_queue_bytes.set(stats.fetched_bytes());
        self.high_offsets.lock().expect("offsets lock").extend(stats.high_offsets(&self.deps.slice_topic));
        self.input_lag.publish(&self.deps.metrics, &stats);
    }
}

/// The rebalance protocol, as rust-rdkafka's `ConsumerContext` runs its
/// own: the callback takes the worker lock, hands the partitions to
/// `WorkerContext::on_assign` or `WorkerContext::on_revoke`, then says
/// how many slices are owned and whether the member is ready.
impl ConsumerContext for WorkerContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let mut inner = self.inner.lock().expect("worker lock");
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.on_assign(consumer, &mut inner, tpl, partitions, cooperative)
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.on_revoke(consumer, &mut inner, partitions, cooperative)
            }
            other => {
                log::error!("rebalance error: {other:?}");
                if !cooperative {
                    let _ = consumer.unassign();
                }
                return;
            }
        }
        self.deps.metrics.slices_owned.set(inner.slices.len() as i64);
        self.deps.status.ready.store(inner.fatal.is_none() && inner.restoring.is_empty(), Ordering::Relaxed);
    }
}

impl WorkerContext {
    /// Slices assigned: each is handed to the restore thread; its partition
    /// is consumed once restored (`take_restored`).
    fn on_assign(
        &self,
        consumer: &BaseConsumer<Self>,
        inner: &mut WorkerState,
        tpl: &mut TopicPartitionList,
        partitions: Vec<i32>,
        cooperative: bool,
    ) {
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
            let asked =
                inner.restorer.jobs.as_ref().is_some_and(|j| j.send(RestoreJob { slice: p as u32, id }).is_ok());
            if !asked {
                inner.fatal.get_or_insert(format!("slice {p}: the restore thread has stopped"));
            }
        }
        let result = if cooperative { consumer.incremental_assign(&now) } else { consumer.assign(tpl) };
        if let Err(e) = result {
            inner.fatal.get_or_insert(format!("cannot take the assignment: {e}"));
        }
        let waiting = restoring_list(topic, inner);
        if !cooperative
            && waiting.count() > 0
            && let Err(e) = consumer.pause(&waiting)
        {
            inner.fatal.get_or_insert(format!("cannot pause the slices being restored: {e}"));
        }
    }

    /// Slices revoked: each is snapshotted (unless the assignment was lost:
    /// it may be another member's already) and released. The release waits
    /// for the slice's writes (`wait_written`: the one in flight, then the
    /// release snapshot, each until its deadline), then fences the writer
    /// off the slice.
    fn on_revoke(
        &self,
        consumer: &BaseConsumer<Self>,
        inner: &mut WorkerState,
        partitions: Vec<i32>,
        cooperative: bool,
    ) {
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
            if !lost && let Err(e) = checkpoint_now(&self.deps, inner, slice) {
                log::warn!("slice {p}: no snapshot on release ({e}); its next owner replays further");
            }
            // Whatever of the slice is still queued for the writer, or being
            // written, is dropped before its next step: it is not ours to write.
            inner.writer.ownership.release(slice);
            if inner.slices.remove(&slice).is_some() {
                self.deps.status.slices.lock().expect("status lock").remove(&slice);
                self.deps.metrics.forget_slice(slice);
            }
        }
        let result = if cooperative { consumer.incremental_unassign(&taken) } else { consumer.unassign() };
        if let Err(e) = result {
            log::warn!("releasing partitions: {e}");
        }
    }
}
