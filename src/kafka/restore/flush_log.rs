//! The flush log of a slice: the idle flushes and the policy ranges it
//! logged, so that every restore applies them at the same places.

use std::collections::VecDeque;

use crate::config::AvailabilityPolicy;
use crate::kafka::KafkaLayerError;
use crate::kafka::checkpoint::{ReadFrom, read_partition};
use crate::kafka::clients::Reader;

/// A range of slice offsets whose records `availability.policy` decided
/// while the slice was being restored (logged in the flush log before any
/// of their outputs was sent; docs/availability.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyRange {
    pub from: u64,
    /// Inclusive.
    pub to: u64,
    pub policy: AvailabilityPolicy,
}

impl PolicyRange {
    pub fn contains(&self, offset: u64) -> bool {
        (self.from..=self.to).contains(&offset)
    }
}

/// The policy range of `ranges` that holds `offset`, if any.
pub fn range_of(ranges: &[PolicyRange], offset: u64) -> Option<PolicyRange> {
    ranges.iter().find(|r| r.contains(offset)).copied()
}

/// What the flush log of a slice holds.
#[derive(Debug, Default)]
pub struct FlushLog {
    /// The idle flushes: the slice offsets they came after, in the order
    /// written (increasing: a slice flushes at most once after a record).
    pub flushes: VecDeque<u64>,
    /// The policy ranges, in the order written.
    pub ranges: Vec<PolicyRange>,
}

/// The idle flushes and policy ranges logged in `topic`/`partition`.
pub fn read_flushes(reader: &Reader, topic: &str, partition: i32) -> Result<FlushLog, KafkaLayerError> {
    let mut log = FlushLog::default();
    let mut bad = None;
    read_partition(reader, topic, partition, ReadFrom::Start, |offset, _, value, _| {
        match value.and_then(parse_flush) {
            Some(Logged::Flush(after)) => log.flushes.push_back(after),
            Some(Logged::Range(range)) => log.ranges.push(range),
            None => {
                bad.get_or_insert(offset);
            }
        }
    })?;
    match bad {
        None => Ok(log),
        Some(offset) => Err(KafkaLayerError::ForeignRecord(format!(
            "{topic}/{partition} offset {offset} is not a dedupd flush record: is another application writing to \
             this topic?"
        ))),
    }
}

/// The payload of a flush record: `{"after":<slice offset>}`.
pub fn flush_record(after: u64) -> String {
    format!("{{\"after\":{after}}}")
}

/// The payload of a policy range record:
/// `{"policy":"deliver"|"drop","from":<slice offset>,"to":<slice offset>}`.
pub fn policy_record(range: &PolicyRange) -> String {
    format!("{{\"policy\":\"{}\",\"from\":{},\"to\":{}}}", range.policy.as_str(), range.from, range.to)
}

/// A record of the flush log.
enum Logged {
    Flush(u64),
    Range(PolicyRange),
}

fn parse_flush(payload: &[u8]) -> Option<Logged> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if let Some(after) = v.get("after") {
        return after.as_u64().map(Logged::Flush);
    }
    let policy = AvailabilityPolicy::parse(v.get("policy")?.as_str()?)?;
    let (from, to) = (v.get("from")?.as_u64()?, v.get("to")?.as_u64()?);
    (policy != AvailabilityPolicy::Wait && from <= to).then_some(Logged::Range(PolicyRange { from, to, policy }))
}
