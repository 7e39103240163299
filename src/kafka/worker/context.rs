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
    pub(super) setup: Arc<WorkerSetup>,
    pub(super) worker_state: Arc<Mutex<WorkerState>>,
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
            self.setup.status.heard_from_broker(at);
        }
        self.setup.metrics.slices.consumer_queue_bytes.set(stats.fetched_bytes());
        self.high_offsets.lock().expect("offsets lock").extend(stats.high_offsets(&self.setup.slice_topic));
        self.input_lag.publish(&self.setup.metrics, &stats);
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
        let mut worker_state = self.worker_state.lock().expect("worker lock");
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.on_assign(consumer, &mut worker_state, tpl, partitions, cooperative)
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.on_revoke(consumer, &mut worker_state, partitions, cooperative)
            }
            other => {
                log::error!("rebalance error: {other:?}");
                if !cooperative {
                    let _ = consumer.unassign();
                }
                return;
            }
        }
        self.setup.metrics.slices.slices_owned.set(worker_state.slices.len() as i64);
        self.setup
            .status
            .ready
            .store(worker_state.fatal.is_none() && worker_state.restoring.is_empty(), Ordering::Relaxed);
    }
}

impl WorkerContext {
    /// Slices assigned: each is handed to the restore thread; its partition
    /// is consumed once restored (`take_restored`).
    fn on_assign(
        &self,
        consumer: &BaseConsumer<Self>,
        worker_state: &mut WorkerState,
        tpl: &mut TopicPartitionList,
        partitions: Vec<i32>,
        cooperative: bool,
    ) {
        let topic = self.setup.slice_topic.as_str();
        self.join.assigned(&partitions.iter().map(|&p| (topic, p)).collect::<Vec<_>>());
        self.setup.metrics.slices.rebalances.with_label_values(&["assign"]).inc();
        self.setup.status.ready.store(false, Ordering::Relaxed);
        // What the consumer takes now: with cooperative rebalancing
        // (what `clients::group_consumer` sets), only the partitions
        // that need no restore.
        let mut now = TopicPartitionList::new();
        for p in partitions {
            if p as u32 >= self.setup.cfg.settings.filter.slices {
                // Left by `dedupd checkpoint merge`: no key routes
                // there any more, and its old snapshot is not a slice.
                log::info!("{topic}/{p} is beyond filter.slices (left by a merge): not consumed");
                let skipped = tpl
                    .set_partition_offset(topic, p, Offset::End)
                    .and_then(|()| now.add_partition_offset(topic, p, Offset::End));
                if let Err(e) = skipped {
                    worker_state.fatal.get_or_insert(format!("partition {p}: cannot skip it: {e}"));
                }
                continue;
            }
            // Restored on the restore thread while the worker goes
            // on with its other slices. Its partition is assigned
            // once the offset to read from is known
            // (`take_restored`). Eager rebalancing must assign
            // everything at once: there it is assigned paused, at a
            // placeholder offset, then sought and resumed.
            worker_state.restores_asked += 1;
            let id = worker_state.restores_asked;
            worker_state.restoring.insert(p as u32, id);
            if cooperative {
                worker_state.unassigned.insert(p as u32);
            } else if let Err(e) = tpl.set_partition_offset(topic, p, Offset::Offset(0)) {
                worker_state.fatal.get_or_insert(format!("slice {p}: cannot set its start offset: {e}"));
            }
            let asked =
                worker_state.restorer.jobs.as_ref().is_some_and(|j| j.send(RestoreJob { slice: p as u32, id }).is_ok());
            if !asked {
                worker_state.fatal.get_or_insert(format!("slice {p}: the restore thread has stopped"));
            }
        }
        let result = if cooperative { consumer.incremental_assign(&now) } else { consumer.assign(tpl) };
        match result {
            Err(e) => _ = worker_state.fatal.get_or_insert(format!("cannot take the assignment: {e}")),
            Ok(()) => {
                let taken = if cooperative { &now } else { &*tpl };
                super::forward_records(
                    &self.setup,
                    consumer,
                    worker_state,
                    taken.elements().iter().map(|e| e.partition()),
                );
            }
        }
        // Shared mode: whether the router of this process hands its records
        // to the slice (one slice: this process holds it or another does).
        if let Some(handoff) = &self.setup.handoff {
            match worker_state.restoring.is_empty() && worker_state.slices.is_empty() {
                true => handoff.detach(),
                false => handoff.attach(),
            }
        }
        let waiting = restoring_list(topic, worker_state);
        if !cooperative
            && waiting.count() > 0
            && let Err(e) = consumer.pause(&waiting)
        {
            worker_state.fatal.get_or_insert(format!("cannot pause the slices being restored: {e}"));
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
        worker_state: &mut WorkerState,
        partitions: Vec<i32>,
        cooperative: bool,
    ) {
        self.setup.metrics.slices.rebalances.with_label_values(&["revoke"]).inc();
        let lost = consumer.assignment_lost();
        let revoked_any = !partitions.is_empty();
        // What the consumer gives up: not the partitions it never took.
        let mut taken = TopicPartitionList::new();
        worker_state.stale.extend(&partitions);
        for p in partitions {
            let slice = p as u32;
            if !worker_state.unassigned.remove(&slice) {
                taken.add_partition(&self.setup.slice_topic, p);
            }
            worker_state.gaps.forget(slice);
            // Not restored yet: nothing to snapshot, its restore is dropped.
            if worker_state.restoring.remove(&slice).is_some() {
                worker_state.deciding.remove(&slice);
                log::info!("slice {p}: revoked while being restored");
                continue;
            }
            // A lost assignment may already be someone else's: write nothing more.
            if !lost && let Err(e) = checkpoint_now(&self.setup, worker_state, slice) {
                log::warn!("slice {p}: no snapshot on release ({e}); its next owner replays further");
            }
            // Whatever of the slice is still queued for the writer, or being
            // written, is dropped before its next step: it is not ours to write.
            worker_state.writer.ownership.release(slice);
            if worker_state.slices.remove(&slice).is_some() {
                self.setup.status.slices.lock().expect("status lock").remove(&slice);
                self.setup.metrics.forget_slice(slice);
            }
        }
        if let Some(handoff) = &self.setup.handoff
            && revoked_any
        {
            handoff.detach(); // shared mode: one slice, revoked
        }
        let result = if cooperative { consumer.incremental_unassign(&taken) } else { consumer.unassign() };
        if let Err(e) = result {
            log::warn!("releasing partitions: {e}");
        }
    }
}
