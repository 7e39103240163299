//! The slice-log offsets the snapshots make safe, committed to the slice
//! consumers' group so that the ecosystem's lag tools (`kafka-consumer-groups`,
//! Burrow, Control Center) see how far each slice is. Informational only: a
//! restore starts from the slice's snapshot and never reads these commits
//! (in input-partitions mode the slice log is the input, so its lag shows there).

use std::collections::BTreeMap;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use super::setup::WorkerSetup;
use super::state::WorkerState;

/// What has been committed, by slice.
#[derive(Debug, Default)]
pub(super) struct SafeOffsets {
    committed: BTreeMap<u32, u64>,
}

impl SafeOffsets {
    /// Commits, without waiting, each owned slice's last snapshot offset
    /// not committed yet; forgets the slices no longer owned.
    pub(super) fn commit<C: ConsumerContext>(
        &mut self,
        setup: &WorkerSetup,
        consumer: &BaseConsumer<C>,
        worker_state: &WorkerState,
    ) {
        self.committed.retain(|slice, _| worker_state.slices.contains_key(slice));
        let mut tpl = TopicPartitionList::new();
        for (&slice, owned) in &worker_state.slices {
            let Some(manifest) = &owned.manifest else { continue };
            // For the lag tools: a batch the snapshot took in whole is behind it.
            let safe = setup.log_end(manifest.offset);
            if self.committed.get(&slice) == Some(&safe) {
                continue;
            }
            let at = Offset::Offset(i64::try_from(safe).unwrap_or(i64::MAX));
            if tpl.add_partition_offset(&setup.slice_topic, slice as i32, at).is_ok() {
                self.committed.insert(slice, safe);
            }
        }
        if tpl.count() > 0
            && let Err(e) = consumer.commit(&tpl, CommitMode::Async)
        {
            // Only the lag tools' view is behind: the next snapshot commits again.
            log::debug!("committing the slices' snapshot offsets: {e}");
        }
    }
}
