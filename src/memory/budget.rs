//! One memory budget for the whole process, divided at start-up.
//!
//! Every buffer that grows with the input has a part: the filters (their
//! worst case, [`super::filters`]), one slice's snapshot buffer, the
//! counting and provenance stages, the records the slices hold for the
//! watermark (keys, values and headers), the router's lanes, the
//! producers' queues and the consumers' prefetch, and a fixed part for the
//! runtime itself (code, threads, the allocator's slack). A part a setting
//! fixes takes that setting's value; the others share what is left of
//! `memory.limit` by fixed weights. A configuration whose parts cannot fit
//! is refused at start-up, naming the limit and what it needs.
//!
//! Without a limit (no `memory.limit`, no container limit) nothing is
//! divided: each part has the default it had before the budget existed.

use std::fmt;

use super::limit::MemoryLimit;
use crate::units::format_bytes;

const MIB: u64 = 1 << 20;

/// The runtime's part: the binary, thread stacks as touched, the
/// allocator's slack and the small tables of every stage.
pub const RUNTIME_BYTES: u64 = 64 * MIB;

/// What a budgeted record needs beside its key and value in a producer's
/// queue: its headers and librdkafka's own framing.
const RECORD_OVERHEAD: u64 = 64 * 1024;

/// A part of the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Runtime,
    Filters,
    Snapshot,
    Stages,
    HeldRecords,
    Router,
    ProducerQueues,
    ConsumerPrefetch,
}

impl Part {
    /// The `part` label of `dedupd_memory_budget_bytes`.
    pub fn label(self) -> &'static str {
        match self {
            Part::Runtime => "runtime",
            Part::Filters => "filters",
            Part::Snapshot => "snapshot",
            Part::Stages => "stages",
            Part::HeldRecords => "held_records",
            Part::Router => "router",
            Part::ProducerQueues => "producer_queues",
            Part::ConsumerPrefetch => "consumer_prefetch",
        }
    }

    /// The setting that fixes the part instead of the budget, if any.
    fn setting(self) -> &'static str {
        match self {
            Part::Runtime => "fixed",
            Part::Filters => "filter.max_memory",
            Part::Snapshot => "one slice's filters",
            Part::Stages => "[limit] and [provenance]",
            Part::HeldRecords => "slicing.max_held_bytes",
            Part::Router => "slicing.max_buffered_bytes",
            Part::ProducerQueues => "kafka.queue.buffering.max.kbytes",
            Part::ConsumerPrefetch => "kafka.queued.max.messages.kbytes",
        }
    }

    /// The share of what is left that the part takes when no setting fixes it.
    fn weight(self) -> u64 {
        match self {
            Part::HeldRecords => 20,
            Part::Router => 15,
            Part::ProducerQueues => 40,
            Part::ConsumerPrefetch => 25,
            _ => 0,
        }
    }
}

/// The Kafka clients a process runs at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clients {
    pub producers: u32,
    pub consumers: u32,
    /// Whether a router runs (repartition and shared mode).
    pub router: bool,
}

/// What the budget divides, from the settings.
#[derive(Clone, Debug)]
pub struct Demand {
    pub limit: Option<MemoryLimit>,
    /// The filters' worst case, all slices.
    pub filters: u64,
    pub slices: u32,
    /// The counting and provenance stages at their planned size, all slices.
    pub stages: u64,
    pub clients: Clients,
    /// `input.max_record_bytes`: one record must fit in every buffer.
    pub largest_record: u64,
    /// `kafka.message.max.bytes` when set: a producer's queue must hold one.
    pub message_max: Option<u64>,
    /// `slicing.max_held_bytes`, per slice.
    pub held_per_slice: Option<u64>,
    /// `slicing.max_buffered_bytes`, all input partitions.
    pub router: Option<u64>,
    /// `kafka.queue.buffering.max.kbytes`, in bytes, per producer.
    pub producer_queue: Option<u64>,
    /// `kafka.queued.max.messages.kbytes`, in bytes, per consumer.
    pub consumer_queue: Option<u64>,
    /// `kafka.fetch.max.bytes`, per consumer.
    pub fetch: Option<u64>,
}

/// The budget as divided: every part's bytes and what each buffer may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub limit: Option<MemoryLimit>,
    pub parts: Vec<(Part, u64)>,
    pub clients: Clients,
    /// Bytes of records (keys, values, headers) one slice may hold.
    pub held_per_slice: u64,
    /// Bytes of records the router may buffer, all input partitions.
    pub router: u64,
    /// A producer's queue (`queue.buffering.max.kbytes`, in bytes).
    pub producer_queue: u64,
    /// A producer's largest record (`message.max.bytes`), when the budget sets it.
    pub producer_max_record: Option<u64>,
    /// A consumer's prefetch (`queued.max.messages.kbytes`, in bytes).
    pub consumer_queue: u64,
    /// `kafka.fetch.max.bytes` if set; else librdkafka sizes a fetch
    /// response to the prefetch queue (at most 50 MiB).
    pub fetch: Option<u64>,
}

/// A budget that cannot hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetError {
    pub setting: &'static str,
    pub value: String,
    pub rule: String,
}

/// The defaults without a limit.
const UNBOUNDED_HELD_PER_SLICE: u64 = 32 * MIB;
const UNBOUNDED_ROUTER: u64 = 64 * MIB;
const UNBOUNDED_CONSUMER_QUEUE: u64 = 16 * MIB;
/// librdkafka's `fetch.max.bytes` default: unless set, it lowers it to the
/// prefetch queue's size (and raises it to `message.max.bytes`).
const LIBRDKAFKA_FETCH_MAX: u64 = 52_428_800;

/// A consumer's largest fetch response.
fn fetch_of(queue: u64, fetch: Option<u64>, message_max: Option<u64>) -> u64 {
    fetch.unwrap_or_else(|| queue.min(LIBRDKAFKA_FETCH_MAX).max(message_max.unwrap_or(0)))
}
/// The producers' `message.max.bytes` when neither `[kafka]` nor the
/// budget sets it: copies of records the broker already accepted must not
/// be refused by the client's own (1 MB) default.
pub const LARGEST_RECORD: u64 = 100 * MIB;

/// A producer's queue: room for one record of `message_max` and a MiB
/// more — librdkafka never queues a record larger than its queue, so a
/// send of one would wait forever.
fn queue_for(message_max: u64) -> u64 {
    message_max + MIB
}

/// The smallest a derived part may be for one record to fit, per client
/// or per slice as the part is divided.
fn smallest(part: Part, d: &Demand) -> u64 {
    let record = d.largest_record + RECORD_OVERHEAD;
    match part {
        Part::HeldRecords => d.largest_record.saturating_mul(u64::from(d.slices)),
        Part::Router => d.largest_record,
        // Room for two records at once (one sent, one queued behind it),
        // or for one of the `message.max.bytes` set.
        Part::ProducerQueues => {
            let each = (2 * record).max(d.message_max.map_or(0, queue_for));
            each.saturating_mul(u64::from(d.clients.producers))
        }
        // Half prefetch, half one fetch response, each at least a record.
        Part::ConsumerPrefetch => {
            let each = 2 * record.max(MIB).max(d.message_max.unwrap_or(0));
            each.saturating_mul(u64::from(d.clients.consumers))
        }
        _ => 0,
    }
}

impl Demand {
    /// The part a setting fixes, if one does.
    fn fixed_by_setting(&self, part: Part) -> Option<u64> {
        let per = |v: Option<u64>, n: u32| v.map(|v| v.saturating_mul(u64::from(n)));
        match part {
            Part::HeldRecords => per(self.held_per_slice, self.slices),
            Part::Router => self.clients.router.then_some(self.router).flatten(),
            Part::ProducerQueues => per(self.producer_queue, self.clients.producers),
            Part::ConsumerPrefetch => match (self.consumer_queue, self.fetch) {
                (Some(q), Some(f)) => per(Some(q + f), self.clients.consumers),
                _ => None,
            },
            _ => None,
        }
    }

    /// The parts that do not grow with the records: runtime, filters, one
    /// slice's snapshot buffer, the stages.
    fn fixed_parts(&self) -> Vec<(Part, u64)> {
        let snapshot = self.filters / u64::from(self.slices.max(1));
        vec![
            (Part::Runtime, RUNTIME_BYTES),
            (Part::Filters, self.filters),
            (Part::Snapshot, snapshot),
            (Part::Stages, self.stages),
        ]
    }

    /// The parts that hold records, in the order they are printed.
    fn record_parts(&self) -> Vec<Part> {
        let mut parts = vec![Part::HeldRecords];
        if self.clients.router {
            parts.push(Part::Router);
        }
        parts.extend([Part::ProducerQueues, Part::ConsumerPrefetch]);
        parts
    }
}

/// Divides the budget: the fixed parts, the parts settings fix, and what is
/// left shared by weight among the others.
pub fn divide(d: &Demand) -> Result<Budget, BudgetError> {
    let Some(limit) = d.limit.clone() else {
        return Ok(unbounded(d));
    };
    let mut parts = d.fixed_parts();
    let record_parts = d.record_parts();
    let fixed: u64 = parts.iter().map(|(_, b)| b).sum::<u64>()
        + record_parts.iter().filter_map(|&p| d.fixed_by_setting(p)).sum::<u64>();
    let weights: u64 = record_parts.iter().filter(|&&p| d.fixed_by_setting(p).is_none()).map(|p| p.weight()).sum();
    // What is left must give every derived part its smallest size.
    let needed_left = record_parts
        .iter()
        .filter(|&&p| d.fixed_by_setting(p).is_none())
        .map(|&p| smallest(p, d).saturating_mul(weights).div_ceil(p.weight()))
        .max()
        .unwrap_or(0);
    let needed = fixed.saturating_add(needed_left);
    if needed > limit.bytes {
        return Err(too_small(d, &limit, needed, &parts));
    }
    let left = limit.bytes - fixed;
    for &part in &record_parts {
        let bytes = d.fixed_by_setting(part).unwrap_or_else(|| left * part.weight() / weights.max(1));
        if bytes < smallest(part, d) {
            return Err(BudgetError {
                setting: part.setting(),
                value: format!("{}B for all {}", bytes, per_what(part)),
                rule: format!(
                    "at least {}B: one record of input.max_record_bytes ({}B) must fit in each",
                    smallest(part, d),
                    d.largest_record
                ),
            });
        }
        parts.push((part, bytes));
    }
    let part_of = |p: Part| parts.iter().find(|(q, _)| *q == p).map_or(0, |(_, b)| *b);
    let producer_queue = part_of(Part::ProducerQueues) / u64::from(d.clients.producers.max(1));
    let consumer_each = part_of(Part::ConsumerPrefetch) / u64::from(d.clients.consumers.max(1));
    // librdkafka sizes a fetch to the prefetch queue unless `fetch.max.bytes`
    // is set: half of a consumer's share each.
    let consumer_queue = match (d.consumer_queue, d.fetch) {
        (Some(q), _) => q,
        (None, Some(f)) => consumer_each.saturating_sub(f).max(MIB),
        (None, None) => consumer_each / 2,
    };
    Ok(Budget {
        limit: Some(limit),
        held_per_slice: part_of(Part::HeldRecords) / u64::from(d.slices.max(1)),
        router: part_of(Part::Router),
        producer_queue,
        producer_max_record: (d.producer_queue.is_none() && d.message_max.is_none()).then_some(producer_queue / 2),
        consumer_queue,
        fetch: d.fetch,
        clients: d.clients,
        parts,
    })
}

fn per_what(part: Part) -> &'static str {
    match part {
        Part::HeldRecords => "slices",
        Part::Router => "input partitions",
        Part::ProducerQueues => "producers",
        _ => "consumers",
    }
}

/// The error of a limit too small for the parts: what they need, and the
/// largest parts to lower instead.
fn too_small(d: &Demand, limit: &MemoryLimit, needed: u64, fixed: &[(Part, u64)]) -> BudgetError {
    let mut named: Vec<String> = fixed
        .iter()
        .filter(|(_, b)| *b > 0)
        .map(|(p, b)| format!("{} {} ({})", p.label(), format_bytes(*b), p.setting()))
        .collect();
    for p in d.record_parts() {
        if let Some(b) = d.fixed_by_setting(p) {
            named.push(format!("{} {} ({})", p.label(), format_bytes(b), p.setting()));
        }
    }
    BudgetError {
        setting: "memory.limit",
        value: limit.to_string(),
        rule: format!(
            "the process needs at least {needed}B ({}): {}, and room for one record of input.max_record_bytes \
             ({}B) in every buffer of {} slices, {} producers and {} consumers; raise memory.limit (or the \
             container's limit) or lower the parts named",
            format_bytes(needed),
            named.join(", "),
            d.largest_record,
            d.slices,
            d.clients.producers,
            d.clients.consumers
        ),
    }
}

/// The parts without a limit: each buffer's own default.
fn unbounded(d: &Demand) -> Budget {
    let held_per_slice = d.held_per_slice.unwrap_or(UNBOUNDED_HELD_PER_SLICE);
    let router = if d.clients.router { d.router.unwrap_or(UNBOUNDED_ROUTER) } else { 0 };
    let message_max = d.message_max.unwrap_or(LARGEST_RECORD);
    let producer_queue = d.producer_queue.unwrap_or_else(|| queue_for(message_max).max(64 * MIB));
    let consumer_queue = d.consumer_queue.unwrap_or(UNBOUNDED_CONSUMER_QUEUE);
    let mut parts = d.fixed_parts();
    parts.push((Part::HeldRecords, held_per_slice.saturating_mul(u64::from(d.slices))));
    if d.clients.router {
        parts.push((Part::Router, router));
    }
    parts.push((Part::ProducerQueues, producer_queue.saturating_mul(u64::from(d.clients.producers))));
    let fetch = fetch_of(consumer_queue, d.fetch, d.message_max);
    parts.push((Part::ConsumerPrefetch, (consumer_queue + fetch).saturating_mul(u64::from(d.clients.consumers))));
    Budget {
        limit: None,
        parts,
        clients: d.clients,
        held_per_slice,
        router,
        producer_queue,
        producer_max_record: None,
        consumer_queue,
        fetch: d.fetch,
    }
}

impl Budget {
    /// All parts together.
    pub fn total(&self) -> u64 {
        self.parts.iter().map(|(_, b)| b).sum()
    }

    /// The division in one line, for the log (one record a line).
    pub fn one_line(&self) -> String {
        let parts: Vec<String> =
            self.parts.iter().map(|(part, bytes)| format!("{} {}", part.label(), format_bytes(*bytes))).collect();
        match &self.limit {
            Some(limit) => format!("memory budget: {limit}: {}", parts.join(", ")),
            None => format!(
                "memory budget: no limit (memory.limit is empty and there is no container limit): {}",
                parts.join(", ")
            ),
        }
    }
}

/// Lines for `dedupd check-config` and the start-up log: the limit, then
/// each part.
impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.limit {
            Some(limit) => write!(f, "memory budget: {limit}, divided into")?,
            None => write!(
                f,
                "memory budget: no limit (memory.limit is empty and there is no container limit); the parts add up \
                 to {} at most:",
                format_bytes(self.total())
            )?,
        }
        for (part, bytes) in &self.parts {
            write!(f, "\n  {:<18} {:>10}", part.label(), format_bytes(*bytes))?;
            match part {
                Part::HeldRecords => write!(f, "  ({} per slice)", format_bytes(self.held_per_slice))?,
                Part::ProducerQueues => {
                    write!(f, "  ({} producers, {} each)", self.clients.producers, format_bytes(self.producer_queue))?
                }
                Part::ConsumerPrefetch => write!(
                    f,
                    "  ({} consumers, {} prefetch + {} fetch each)",
                    self.clients.consumers,
                    format_bytes(self.consumer_queue),
                    format_bytes(fetch_of(self.consumer_queue, self.fetch, None))
                )?,
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::limit::LimitSource;

    fn demand(limit: Option<u64>) -> Demand {
        Demand {
            limit: limit.map(|bytes| MemoryLimit { bytes, source: LimitSource::Setting }),
            filters: 100 * MIB,
            slices: 8,
            stages: 0,
            clients: Clients { producers: 3, consumers: 4, router: true },
            largest_record: MIB,
            message_max: None,
            held_per_slice: None,
            router: None,
            producer_queue: None,
            consumer_queue: None,
            fetch: None,
        }
    }

    /// With a limit the parts add up to it and no more; each buffer's
    /// size is its part divided among its slices or clients.
    #[test]
    fn the_parts_add_up_to_the_limit() {
        let b = divide(&demand(Some(512 * MIB))).unwrap();
        assert!(b.total() <= 512 * MIB && b.total() > 511 * MIB, "{b}");
        let part = |p: Part| b.parts.iter().find(|(q, _)| *q == p).unwrap().1;
        assert_eq!(part(Part::Snapshot), 100 * MIB / 8);
        assert_eq!(b.held_per_slice, part(Part::HeldRecords) / 8);
        assert_eq!(b.producer_queue, part(Part::ProducerQueues) / 3);
        assert_eq!(b.producer_max_record, Some(b.producer_queue / 2));
        assert_eq!(b.fetch, None, "librdkafka sizes a fetch to the prefetch queue");
        assert!(2 * b.consumer_queue <= part(Part::ConsumerPrefetch) / 4);
        assert!(part(Part::ProducerQueues) > part(Part::Router), "weights: {b}");
        let text = b.to_string();
        assert!(text.starts_with("memory budget: 536870912B (512.0 MiB, memory.limit), divided into"), "{text}");
        assert!(text.contains("producer_queues") && text.contains("(3 producers,"), "{text}");
        let line = b.one_line();
        assert!(!line.contains('\n') && line.contains(", producer_queues "), "{line}");
    }

    /// A part a setting fixes keeps its value; the others share the rest.
    #[test]
    fn a_setting_fixes_its_part() {
        let d = Demand { held_per_slice: Some(2 * MIB), ..demand(Some(512 * MIB)) };
        let b = divide(&d).unwrap();
        assert_eq!(b.held_per_slice, 2 * MIB);
        assert!(b.total() <= 512 * MIB);
        let free = divide(&demand(Some(512 * MIB))).unwrap();
        assert!(b.producer_queue > free.producer_queue, "the room the held records left goes to the others");
    }

    /// Too small a limit is refused with what the parts need.
    #[test]
    fn a_limit_too_small_is_refused_with_what_it_needs() {
        let e = divide(&demand(Some(128 * MIB))).unwrap_err();
        assert_eq!(e.setting, "memory.limit");
        assert!(e.value.starts_with("134217728B (128.0 MiB, memory.limit)"), "{e:?}");
        assert!(
            e.rule.contains("filters 100.0 MiB (filter.max_memory)") && e.rule.contains("raise memory.limit"),
            "{e:?}"
        );
        let needed: u64 = e.rule.split("at least ").nth(1).unwrap().split('B').next().unwrap().parse().unwrap();
        assert!(divide(&demand(Some(needed))).is_ok(), "the figure named is enough");
        assert!(divide(&demand(Some(needed - 1))).is_err(), "and no more than enough");
        let fixed_too_much = Demand { held_per_slice: Some(64 * MIB), ..demand(Some(512 * MIB)) };
        let e = divide(&fixed_too_much).unwrap_err();
        assert!(e.rule.contains("held_records 512.0 MiB (slicing.max_held_bytes)"), "{e:?}");
    }

    /// Without a limit each buffer keeps its own default.
    #[test]
    fn without_a_limit_nothing_is_divided() {
        let b = divide(&demand(None)).unwrap();
        assert_eq!((b.held_per_slice, b.router, b.producer_queue), (32 * MIB, 64 * MIB, 101 * MIB));
        assert_eq!((b.consumer_queue, b.fetch, b.producer_max_record), (16 * MIB, None, None));
        assert!(b.to_string().starts_with("memory budget: no limit"), "{b}");
        let no_router = Demand { clients: Clients { router: false, ..demand(None).clients }, ..demand(None) };
        assert!(divide(&no_router).unwrap().parts.iter().all(|(p, _)| *p != Part::Router));
    }
}
