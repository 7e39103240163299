//! The tail of each topic a slice writes: the highest release position
//! there is that topic's replay bound (see [`crate::kafka::replay`]).

use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message};

use super::flush_log::Decision;
use crate::engine::ReleasePos;
use crate::kafka::checkpoint::{ReadFrom, read_partition, read_partition_range};
use crate::kafka::clients::Reader;
use crate::kafka::replay::Sent;
use crate::kafka::{Context, KafkaLayerError, headers};

const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// How many records at the end of a partition restore reads for its
/// highest release position ([`read_tail`]): enough to reach past the
/// writes a member that woke up from a long pause delivers late (what its
/// producer held: it judges nothing after its slices were taken).
pub const TAIL_RECORDS: i64 = 1000;

/// A record a slice wrote to one of its topics, as its headers say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Its offset in the topic's partition.
    pub offset: i64,
    /// Its own release position (`dedupd.release`; `dedupd.slice.offset`
    /// from builds before event-time order). dedupd writes it on every
    /// record, replacing any header of that name the input record had.
    pub release: ReleasePos,
    /// Its availability-policy headers, if it has `dedupd.policy`.
    pub policy: Option<PolicyHeaders>,
}

/// The `dedupd.policy` and `dedupd.policy.after` headers of an output record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyHeaders {
    /// `dedupd.policy`, if `deliver` or `drop` (the only values dedupd writes).
    pub policy: Option<Decision>,
    /// `dedupd.policy.after`: `None` if missing or unreadable, `Some(None)`
    /// if empty (no ordinary output before the policy decided).
    pub after: Option<Option<ReleasePos>>,
}

impl Written {
    /// What the partition holds up to this record, as the record says.
    pub fn sent(&self) -> Sent {
        match &self.policy {
            None => Sent { normal: Some(self.release), policy: None },
            Some(p) => Sent { normal: p.after.flatten(), policy: Some(self.release) },
        }
    }

    /// The record taken as an ordinary judgment's, whatever policy headers it has.
    pub(super) fn ordinary(&self) -> Sent {
        Sent { normal: Some(self.release), policy: None }
    }
}

/// The records a slice of application `app` wrote in the tail of
/// `topic`/`partition`, oldest first: those among the last
/// [`TAIL_RECORDS`] records of the application there. Other applications'
/// records (`dedupd.app` naming another) are read past, window by window
/// back, until that many of its own are read or the partition's start
/// (invariant 8: several applications may write one topic on purpose, and
/// none takes another's positions for its own). Records without
/// `dedupd.app` (written by builds that did not name their application)
/// are taken as the application's own. With `shared_with_router` (the
/// router's dead letters, which carry no release position) the scan goes
/// on back until a slice's record is found. With `mark` (the header its
/// outputs carry in a topic others write too: a dense tree's leaf's
/// `app.id` in its parent's topic), the whole partition, the records that
/// carry it.
pub fn read_tail(
    reader: &Reader,
    topic: &str,
    partition: i32,
    app: &str,
    mark: Option<(&str, &str)>,
    shared_with_router: bool,
) -> Result<Vec<Written>, KafkaLayerError> {
    let mut scan = TailScan { app, mark, shared_with_router, found: Vec::new(), own: 0, unmarked: None };
    if mark.is_some() {
        read_partition(reader, topic, partition, ReadFrom::Start, |o, _, _, m| scan.take(o, m))?;
    } else {
        let (low, high) = reader
            .fetch_watermarks(topic, partition, IO_TIMEOUT)
            .context(|| format!("watermarks of {topic}/{partition}"))?;
        let mut start = (high - TAIL_RECORDS).max(low);
        read_partition(reader, topic, partition, ReadFrom::Offset(start), |o, _, _, m| scan.take(o, m))?;
        // Back window by window past the records no slice of this application wrote.
        while scan.unmarked.is_none() && start > low && scan.wants_more() {
            let stop = start;
            start = (stop - TAIL_RECORDS).max(low);
            // Records read earlier were newer: the older ones go first.
            let newer = std::mem::take(&mut scan.found);
            read_partition_range(reader, topic, partition, start, stop, |o, _, _, m| scan.take(o, m))?;
            scan.found.extend(newer);
        }
    }
    match scan.unmarked {
        None => Ok(scan.found),
        Some(offset) => Err(KafkaLayerError::ForeignRecord(format!(
            "the record at offset {offset} of {topic}/{partition} has neither a {} nor a {} header: is an \
             application other than dedupd writing to this topic? dedupd needs its output partitions to itself \
             and to other dedupd applications",
            headers::RELEASE,
            headers::APP
        ))),
    }
}

/// What [`read_tail`] has found so far.
struct TailScan<'a> {
    app: &'a str,
    mark: Option<(&'a str, &'a str)>,
    shared_with_router: bool,
    found: Vec<Written>,
    /// Records of this application read (with a release position or not).
    own: i64,
    /// The first record without a release position, where only slices write.
    unmarked: Option<i64>,
}

impl TailScan<'_> {
    /// Whether to read further back: fewer than [`TAIL_RECORDS`] of the
    /// application's records read yet, or none of its slices' where the
    /// router writes too.
    fn wants_more(&self) -> bool {
        self.own < TAIL_RECORDS || (self.shared_with_router && self.found.is_empty())
    }

    fn take(&mut self, offset: i64, m: &rdkafka::message::BorrowedMessage<'_>) {
        let header = |name: &str| m.headers().and_then(|h| h.iter().find(|h| h.key == name)).and_then(|h| h.value);
        if let Some((name, value)) = self.mark
            && header(name) != Some(value.as_bytes())
        {
            return;
        }
        let app = header(headers::APP);
        if app.is_some_and(|a| a != self.app.as_bytes()) {
            return; // another application's: never its bound
        }
        self.own += 1;
        match written(offset, &header) {
            Some(w) => self.found.push(w),
            // This application's router's dead letter, or one where the router writes.
            None if self.shared_with_router || app.is_some() => {}
            None => {
                self.unmarked.get_or_insert(offset);
            }
        }
    }
}

/// What a record's headers (`header`) say it is, if a slice wrote it.
fn written<'h>(offset: i64, header: &impl Fn(&str) -> Option<&'h [u8]>) -> Option<Written> {
    let release = header(headers::RELEASE).and_then(ReleasePos::parse);
    let slice_offset = header(headers::SLICE_OFFSET)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse::<u64>().ok())
        .map(ReleasePos::through_arrival);
    let policy = header(headers::POLICY).map(|value| PolicyHeaders {
        policy: std::str::from_utf8(value).ok().and_then(Decision::parse),
        after: header(headers::POLICY_AFTER).and_then(|v| match v {
            [] => Some(None),
            v => ReleasePos::parse(v).map(Some),
        }),
    });
    Some(Written { offset, release: release.or(slice_offset)?, policy })
}
