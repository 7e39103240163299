//! What the memory budget divides, from the settings: the limit, the
//! filters' worst case, the stages, the Kafka clients a process runs in its
//! mode and the parts settings fix ([`crate::memory::budget`]).

use super::Settings;
use super::sections::SlicingMode;
use crate::engine::slice::stages::StageSetups;
use crate::features::tiers::Tier;
use crate::memory::budget::{Clients, Demand};
use crate::memory::{MemoryLimit, MemoryPlan};

/// The Kafka clients a process runs at once: the output and checkpoint
/// producers, the slice consumer and the restore and checkpoint readers,
/// and those of its mode and features. A consumer whose records are taken
/// off its queue a batch at a time counts twice: the batch is at most what
/// the queue held, and librdkafka fills the queue again meanwhile
/// (`crate::kafka::consumed::BatchQueue`).
pub fn clients(slicing: SlicingMode, tier: Tier, deletable: bool) -> Clients {
    let router = slicing != SlicingMode::InputPartitions && tier != Tier::SparseLeaf;
    // The slice consumer (twice), the restore and checkpoint readers.
    let (mut producers, mut consumers) = (2, 4);
    if router {
        producers += 1;
        consumers += 2; // the router's, read a batch at a time
    }
    if slicing == SlicingMode::Shared {
        consumers += 2; // the input reader, read a batch at a time
    }
    match tier {
        Tier::SparseLeaf => {
            producers += 1;
            consumers += 2; // the input and the root's verdicts
        }
        Tier::SparseRoot => producers += 1, // the verdicts
        _ => {}
    }
    if deletable {
        producers += 1; // delete requests
    }
    Clients { producers, consumers, router }
}

/// A `[kafka]` setting's value in bytes (`kbytes` settings times 1024), if
/// set and a number (librdkafka refuses one that is not, at start-up).
fn kafka_bytes(s: &Settings, name: &str, unit: u64) -> Option<u64> {
    let settings = s.kafka.client_settings();
    let value = settings.iter().find(|(k, _)| k == name)?;
    value.1.trim().parse::<u64>().ok().map(|v| v.saturating_mul(unit))
}

/// The demand on the budget of valid settings.
pub fn demand(
    s: &Settings,
    limit: Option<MemoryLimit>,
    filters: &MemoryPlan,
    stages: &StageSetups,
    clients: Clients,
) -> Demand {
    let slices = s.filter.slices;
    let per_slice = stages.planned_bytes();
    Demand {
        limit,
        filters: filters.worst_case,
        slices,
        stages: per_slice.saturating_mul(u64::from(slices)),
        clients,
        largest_record: s.input.max_record_bytes as u64,
        message_max: kafka_bytes(s, "message.max.bytes", 1),
        held_per_slice: s.slicing.max_held_bytes,
        router: s.slicing.max_buffered_bytes,
        producer_queue: kafka_bytes(s, "queue.buffering.max.kbytes", 1024),
        consumer_queue: kafka_bytes(s, "queued.max.messages.kbytes", 1024),
        fetch: kafka_bytes(s, "fetch.max.bytes", 1),
    }
}
