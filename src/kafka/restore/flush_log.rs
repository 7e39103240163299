//! The flush log of a slice: the idle flushes and the policy ranges it
//! logged, so that every restore applies them at the same places.

use std::collections::VecDeque;

use crate::kafka::KafkaLayerError;
use crate::kafka::checkpoint::{ReadFrom, read_partition};
use crate::kafka::clients::Reader;

/// What a policy range does with its records instead of judging them
/// (what the settings ask for a slice's records while it is restored:
/// docs/availability.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Each goes to the output, as a distinct record would.
    Deliver,
    /// Each goes to the duplicates topic.
    Drop,
}

impl Decision {
    /// Its name in the flush log and in the `dedupd.policy` header.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Deliver => "deliver",
            Decision::Drop => "drop",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "deliver" => Some(Decision::Deliver),
            "drop" => Some(Decision::Drop),
            _ => None,
        }
    }
}

/// A range of slice offsets whose records were decided, not judged, while
/// the slice was being restored (logged in the flush log before any of
/// their outputs was sent; docs/availability.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyRange {
    pub from: u64,
    /// Inclusive.
    pub to: u64,
    pub policy: Decision,
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

/// An idle flush as logged: the slice offset it came after, and whether
/// it released past the hold (the records an input nobody routes kept back
/// took more bytes than the slice may hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedFlush {
    pub after: u64,
    pub past_hold: bool,
}

/// What the flush log of a slice holds.
#[derive(Debug, Default)]
pub struct FlushLog {
    /// The idle flushes: the slice offsets they came after, in the order
    /// written (increasing: a slice flushes at most once after a record).
    pub flushes: VecDeque<LoggedFlush>,
    /// The policy ranges, in the order written.
    pub ranges: Vec<PolicyRange>,
    /// Where it was read from, and one past the last record read.
    pub span: FlushLogSpan,
}

/// The part of a slice's flush log a restore read: what a snapshot taken
/// later names as the offset its own restore reads from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushLogSpan {
    pub from: u64,
    pub end: u64,
}

impl FlushLogSpan {
    /// The flush log offset a restore from a snapshot taken now reads from.
    /// `pending`: a logged flush not applied yet, or a policy range that
    /// reaches the snapshot's offset or beyond; those lie at or after where
    /// this restore read from, and the snapshot needs them. Otherwise every
    /// record logged so far is in the snapshot or behind its offset: the
    /// next restore starts at the end of what this restore read or of what
    /// the slice logged since (`logged`), whichever is later.
    pub fn read_from(&self, pending: bool, logged: Option<u64>) -> u64 {
        if pending { self.from } else { self.end.max(logged.unwrap_or(0)) }
    }
}

/// The idle flushes and policy ranges logged in `topic`/`partition`, from
/// offset `from` (a snapshot's [`crate::kafka::checkpoint::Manifest::flush_log_offset`])
/// or from the start.
pub fn read_flushes(
    reader: &Reader,
    topic: &str,
    partition: i32,
    from: Option<u64>,
) -> Result<FlushLog, KafkaLayerError> {
    let start = from.unwrap_or(0);
    let mut log = FlushLog { span: FlushLogSpan { from: start, end: start }, ..FlushLog::default() };
    let mut bad = None;
    let at = ReadFrom::Offset(i64::try_from(start).unwrap_or(i64::MAX));
    read_partition(reader, topic, partition, at, |offset, _, value, _| {
        log.span.end = log.span.end.max(u64::try_from(offset + 1).unwrap_or(0));
        match value.and_then(parse_flush) {
            Some(Logged::Flush(flush)) => log.flushes.push_back(flush),
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

/// The payload of a flush record: `{"after":<slice offset>}`, with
/// `"past_hold":true` for a flush past the hold.
pub fn flush_record(flush: LoggedFlush) -> String {
    match flush.past_hold {
        false => format!("{{\"after\":{}}}", flush.after),
        true => format!("{{\"after\":{},\"past_hold\":true}}", flush.after),
    }
}

/// The payload of a policy range record:
/// `{"policy":"deliver"|"drop","from":<slice offset>,"to":<slice offset>}`.
pub fn policy_record(range: &PolicyRange) -> String {
    format!("{{\"policy\":\"{}\",\"from\":{},\"to\":{}}}", range.policy.as_str(), range.from, range.to)
}

/// A record of the flush log.
enum Logged {
    Flush(LoggedFlush),
    Range(PolicyRange),
}

fn parse_flush(payload: &[u8]) -> Option<Logged> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if let Some(after) = v.get("after") {
        let past_hold = v.get("past_hold").and_then(serde_json::Value::as_bool).unwrap_or(false);
        return after.as_u64().map(|after| Logged::Flush(LoggedFlush { after, past_hold }));
    }
    // A logged "wait" decides nothing: it does not parse.
    let policy = Decision::parse(v.get("policy")?.as_str()?)?;
    let (from, to) = (v.get("from")?.as_u64()?, v.get("to")?.as_u64()?);
    (from <= to).then_some(Logged::Range(PolicyRange { from, to, policy }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot names where its restore reads the flush log from: the end
    /// of what is logged when nothing logged is still needed, else where
    /// the restore before it read from.
    #[test]
    fn a_snapshot_reads_the_flush_log_from_what_it_still_needs() {
        let span = FlushLogSpan { from: 40, end: 57 };
        assert_eq!(span.read_from(false, None), 57);
        assert_eq!(span.read_from(false, Some(90)), 90);
        assert_eq!(span.read_from(true, Some(90)), 40);
        assert_eq!(span.read_from(true, None), 40);
        assert_eq!(FlushLogSpan::default().read_from(false, None), 0);
    }

    #[test]
    fn flush_and_policy_records_read_back() {
        let range = PolicyRange { from: 3, to: 502, policy: Decision::Drop };
        let plain = LoggedFlush { after: 17, past_hold: false };
        assert_eq!(flush_record(plain), r#"{"after":17}"#, "as before flushes past the hold existed");
        assert!(matches!(parse_flush(flush_record(plain).as_bytes()), Some(Logged::Flush(f)) if f == plain));
        let past = LoggedFlush { after: 18, past_hold: true };
        assert!(matches!(parse_flush(flush_record(past).as_bytes()), Some(Logged::Flush(f)) if f == past));
        assert!(matches!(parse_flush(policy_record(&range).as_bytes()), Some(Logged::Range(r)) if r == range));
        assert!(parse_flush(b"not a flush").is_none());
    }
}
