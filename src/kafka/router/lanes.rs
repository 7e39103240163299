//! The router's buffers: one lane per input partition, its records in
//! offset order, each read once when it arrives.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use crate::engine::{InvalidRecord, Reading};
use crate::kafka::clients;
use crate::kafka::consumed::{BatchQueue, KeptRecord};

/// How long an empty partition that has not reached its end may hold back the others.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// Records buffered per partition before it is paused. Larger than what
/// librdkafka prefetches per partition (`queued.min.messages`, see
/// [`super::PREFETCH`]), so partitions that advance together are never
/// paused: pausing drops the prefetched records and costs a fetch round
/// trip to get them again.
pub(super) const MAX_BUFFERED: usize = 50_000;

/// Which bound a lane reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Full {
    Records,
    Bytes,
}

/// A lane's share of the router's bytes (`slicing.max_buffered_bytes` or
/// the router's part of the memory budget), all lanes sharing it equally:
/// each lane paused at its share keeps the router within the whole.
pub(super) fn lane_share(router_bytes: u64, lanes: usize) -> usize {
    usize::try_from(router_bytes / lanes.max(1) as u64).unwrap_or(usize::MAX)
}

/// A buffered input record, read once: its slice and event time, or why
/// it cannot be read.
pub(super) struct Read<'c> {
    pub(super) msg: KeptRecord<'c>,
    pub(super) target: Result<(u32, Reading), InvalidRecord>,
    /// Its place in the routing order (see [`Lane::order_time`]).
    pub(super) order: i64,
    /// The bytes that count against the lane's share (its key, value and
    /// headers), measured once.
    pub(super) bytes: usize,
    /// Whether it has headers: a record without any is not asked again
    /// (librdkafka parses them on each ask, allocating also for none).
    pub(super) has_headers: bool,
}

impl Read<'_> {
    /// Its place in the routing order: an unreadable record goes at once
    /// (to the dead letters; it holds nothing back).
    pub(super) fn time(&self) -> i64 {
        if self.target.is_ok() { self.order } else { i64::MIN }
    }
}

/// One input partition's buffered records, in offset order.
pub(super) struct Lane<'c> {
    pub(super) records: VecDeque<Read<'c>>,
    /// Bytes of the buffered records' keys and values.
    pub(super) bytes: usize,
    /// Event time of the last readable record read from the partition
    /// (outliers left out, see [`Lane::order_time`]).
    pub(super) last_timestamp: Option<i64>,
    /// Outliers read in a row since the last ordinary record.
    outliers: u32,
    /// When a record last arrived (or the lane was assigned).
    pub(super) last_arrival: Instant,
    /// The consumer reported the end of the partition after the last record.
    pub(super) at_end: bool,
    /// The offset the end-of-partition event after the last record handed
    /// out named (the next to fetch), when it came off the records queue:
    /// where the partition must resume, one before where librdkafka would
    /// (see [`resume_at_end`]).
    pub(super) end_offset: Option<i64>,
    pub(super) paused: bool,
    /// The largest routing time (outliers left out) of a record routed from
    /// the partition: the progress announced for it.
    pub(super) routed_max: Option<i64>,
    /// Records routed to the slices from the partition.
    pub(super) routed: u64,
    /// Unreadable records sent from the partition to the dead letters.
    pub(super) dead_lettered: u64,
}

impl<'c> Lane<'c> {
    pub(super) fn new() -> Self {
        Lane {
            records: VecDeque::new(),
            bytes: 0,
            last_timestamp: None,
            outliers: 0,
            last_arrival: Instant::now(),
            at_end: false,
            end_offset: None,
            paused: false,
            routed_max: None,
            routed: 0,
            dead_lettered: 0,
        }
    }

    /// What to announce of this lane: its progress and whether it is idle
    /// (`None`: nothing routed yet and not idle — nothing to say).
    pub(super) fn progress(&self, now: Instant, idle_after: Duration) -> Option<(u64, bool)> {
        // A partition whose every record so far was unreadable (dead-lettered
        // here) has no time to announce, and holding the slices at its start
        // would stop them all while its producer keeps writing such records:
        // with nothing buffered it is idle until a readable record comes.
        let unreadable_only = self.routed_max.is_none() && self.dead_lettered > 0;
        let idle = self.records.is_empty()
            && ((self.at_end && now.duration_since(self.last_arrival) >= idle_after) || unreadable_only);
        let time = self.routed_max.map(|t| u64::try_from(t).unwrap_or(0));
        match (time, idle) {
            (None, false) => None,
            (time, idle) => Some((time.unwrap_or(0), idle)),
        }
    }

    /// Where a readable record at event time `time` goes in the routing
    /// order, and takes it into the lane's progress. An *outlier* — more
    /// than `jump` (input.max_clock_jump) ahead of, or behind, the
    /// partition's last time (before it has one: `latest`, the time last
    /// read from any partition) — is a broken clock until `confirmations`
    /// come in a row (input.jump_confirmations: the stream resumed after a
    /// gap). It is routed in place (ahead: at the partition's last time, or
    /// at once before it has one) and is not the partition's progress:
    /// ordered by a time in the year 3000 it would wait until every other
    /// partition had been read to its end, and taken as progress it would
    /// tell the router that its partition had nothing older to deliver —
    /// either way the records behind it would reach their slices late. Its slice judges it (a time
    /// jump is dead-lettered there). The router's very first record has
    /// nothing to be measured against: it goes first, whatever its time,
    /// and is only `latest` until records confirm another.
    pub(super) fn order_time(&mut self, time: i64, latest: &mut Option<i64>, jump: i64, confirmations: u32) -> i64 {
        let Some(last) = self.last_timestamp.or(*latest) else {
            *latest = Some(time);
            return i64::MIN;
        };
        let outlier = time.abs_diff(last) > jump.unsigned_abs();
        if outlier && self.outliers + 1 < confirmations.max(1) {
            self.outliers += 1;
            // Ahead: where its own partition is — at once if it has no time
            // yet (another partition's time may be far ahead of this one's:
            // placed there, it would hold back the records behind it).
            return if time > last { self.last_timestamp.unwrap_or(i64::MIN) } else { time };
        }
        self.outliers = 0;
        self.last_timestamp = Some(time);
        *latest = Some(time);
        time
    }

    /// Whether buffering a record of `bytes` fills the lane, so that its partition should
    /// be paused now (`None` when it is paused already): by count
    /// (`MAX_BUFFERED`) or by bytes (`max_bytes`: the lane's share of `slicing.max_buffered_bytes`).
    pub(super) fn fills(&self, bytes: usize, max_bytes: usize) -> Option<Full> {
        if self.paused {
            None
        } else if self.records.len() + 1 >= MAX_BUFFERED {
            Some(Full::Records)
        } else if self.bytes + bytes >= max_bytes {
            Some(Full::Bytes)
        } else {
            None
        }
    }

    /// Buffers a record.
    pub(super) fn push(&mut self, read: Read<'c>) {
        self.bytes += read.bytes;
        self.records.push_back(read);
    }

    /// Takes the oldest buffered record.
    pub(super) fn pop(&mut self) -> Option<Read<'c>> {
        let read = self.records.pop_front()?;
        self.bytes -= read.bytes;
        Some(read)
    }

    /// Whether a paused lane has drained enough to resume: below half of
    /// both bounds, so it is not paused and resumed at every record.
    pub(super) fn may_resume(&self, max_bytes: usize) -> bool {
        self.records.len() < MAX_BUFFERED / 2 && self.bytes < max_bytes / 2
    }

    /// An empty lane may still deliver a record older than every buffered
    /// one: it holds back a record at `next` ms more than `tolerance` ms
    /// newer than its own last record.
    pub(super) fn holds_back(&self, now: Instant, next: i64, tolerance: i64) -> bool {
        self.records.is_empty()
            && !self.at_end
            && now.duration_since(self.last_arrival) < MAX_WAIT
            && self.last_timestamp.is_none_or(|last| next > last.saturating_add(tolerance))
    }
}

/// Pauses one input partition, to be read again from `next` (the record
/// after the one that filled its lane) when it resumes; returns whether it
/// is paused now. librdkafka resumes a paused partition after the last
/// record taken off its queue (`rktp_app_pos`), but
/// `rd_kafka_consume_batch_queue` counts an end-of-partition event (whose
/// offset is the next to fetch) as a record taken: paused after a batch that
/// held one, the partition would resume a record too far, and skip it. So
/// the records of the partition taken and not yet handed out go, and the
/// partition is sought to `next` (read again from there).
pub(super) fn pause_at<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    records: &mut BatchQueue,
    (topic, partition): (&str, i32),
    next: i64,
) -> bool {
    if !set_paused(consumer, topic, partition, true) {
        return false;
    }
    records.discard_where(|r| r.is_of(topic, partition));
    if let Err(e) = clients::seek_started(consumer, topic, partition, Offset::Offset(next)) {
        // Paused where librdkafka puts it: at worst a record too far.
        log::warn!("router: {topic}/{partition}: cannot pin where it resumes, offset {next}: {e}");
    }
    true
}

/// Pins where a partition resumes after librdkafka paused it, as it does
/// every assigned partition while a rebalance waits for its callbacks:
/// `end_offset`, the offset named by an end-of-partition event that was the
/// last thing taken of it off the records queue. librdkafka resumes a
/// partition after the last record taken off its queue (`rktp_app_pos`,
/// moved when a batch is taken, not when a record is handed out), and
/// `rd_kafka_consume_batch_queue` counts an end-of-partition event (whose
/// offset is the next to fetch) as a record taken: resumed there, the
/// partition would skip the record that comes next. Records of it taken
/// before the event and not handed out yet are older: they stay. Called
/// after every rebalance callback, before a record is taken again.
pub(super) fn resume_at_end<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    (topic, partition): (&str, i32),
    end_offset: i64,
) {
    log::debug!("router: {topic}/{partition}: resumes at {end_offset}, after its end");
    if let Err(e) = clients::seek_started(consumer, topic, partition, Offset::Offset(end_offset)) {
        log::warn!(
            "router: {topic}/{partition}: cannot pin where it resumes after a rebalance, offset {end_offset}: {e}"
        );
    }
}

/// Pauses or resumes one input partition; returns whether it is paused now.
pub(super) fn set_paused<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    pause: bool,
) -> bool {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let result = if pause { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
    match result {
        Ok(()) => pause,
        Err(e) => {
            log::warn!("router: {} {topic}/{partition}: {e}", if pause { "pausing" } else { "resuming" });
            !pause
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::progress::IDLE_AFTER;
    use super::*;

    #[test]
    fn an_empty_lane_holds_back_only_records_beyond_the_tolerance() {
        let now = Instant::now();
        let mut lane = Lane::new();
        // Nothing read yet: it may deliver anything, so it holds everything back.
        assert!(lane.holds_back(now, 1_000, 1_000));
        lane.last_timestamp = Some(10_000);
        assert!(!lane.holds_back(now, 11_000, 1_000), "within the tolerance");
        assert!(lane.holds_back(now, 11_001, 1_000), "beyond it");
        assert!(lane.holds_back(now, 10_001, 0), "strict order");
        assert!(!lane.holds_back(now, 10_000, 0));
        // At its end, or silent for longer than MAX_WAIT, it holds nothing back.
        lane.at_end = true;
        assert!(!lane.holds_back(now, 99_999, 0));
        lane.at_end = false;
        assert!(!lane.holds_back(lane.last_arrival + MAX_WAIT, 99_999, 0));
    }

    /// A lane says nothing before it has routed a record or is idle; it is
    /// idle only at its end, empty, and silent for `IDLE_AFTER`.
    #[test]
    fn a_lane_announces_its_routed_time_and_idleness() {
        let mut lane = Lane::new();
        let t0 = lane.last_arrival;
        assert_eq!(lane.progress(t0, IDLE_AFTER), None);
        lane.at_end = true;
        assert_eq!(lane.progress(t0, IDLE_AFTER), None, "at its end, but not silent for long");
        assert_eq!(lane.progress(t0 + IDLE_AFTER, IDLE_AFTER), Some((0, true)), "an empty partition");
        lane.routed_max = Some(1_700);
        assert_eq!(lane.progress(t0 + IDLE_AFTER, IDLE_AFTER), Some((1_700, true)));
        lane.at_end = false;
        assert_eq!(lane.progress(t0 + IDLE_AFTER * 10, IDLE_AFTER), Some((1_700, false)), "not at its end: never idle");
        // Only unreadable records so far, none buffered: idle, so a producer
        // of bad records cannot hold every slice at this partition's start.
        let mut bad = Lane::new();
        bad.dead_lettered = 3;
        assert_eq!(bad.progress(t0, IDLE_AFTER), Some((0, true)));
    }

    #[test]
    fn an_outlier_is_routed_in_place_until_confirmed() {
        let y3k = 32_503_680_000_000;
        // The router's very first record goes first, whatever its time, and
        // is not its partition's progress (the partition still holds others back).
        let (mut first, mut latest) = (Lane::new(), None);
        assert_eq!(first.order_time(y3k, &mut latest, 60_000, 3), i64::MIN);
        assert_eq!((first.last_timestamp, latest), (None, Some(y3k)));
        assert!(first.holds_back(Instant::now(), 1_000_000, 0));
        // The others are measured against it until three in a row confirm theirs.
        assert_eq!(first.order_time(1_000_000, &mut latest, 60_000, 3), 1_000_000);
        assert_eq!(first.order_time(1_000_010, &mut latest, 60_000, 3), 1_000_010);
        assert_eq!((first.last_timestamp, latest), (None, Some(y3k)));
        assert_eq!(first.order_time(1_000_020, &mut latest, 60_000, 3), 1_000_020);
        assert_eq!((first.last_timestamp, latest), (Some(1_000_020), Some(1_000_020)));

        // The first record of a partition is measured against the other
        // partitions; ahead of them, it goes at once (its partition has no
        // place yet; another's may be far ahead).
        let mut lane = Lane::new();
        let mut latest = Some(1_000_500);
        assert_eq!(lane.order_time(y3k, &mut latest, 60_000, 3), i64::MIN);
        assert_eq!(lane.order_time(1_000_000, &mut latest, 60_000, 3), 1_000_000);
        assert_eq!(lane.order_time(1_000_040, &mut latest, 60_000, 3), 1_000_040);
        // A year-3000 record goes where the partition is; it is not its progress.
        assert_eq!(lane.order_time(y3k, &mut latest, 60_000, 3), 1_000_040);
        assert_eq!((lane.last_timestamp, latest), (Some(1_000_040), Some(1_000_040)));
        assert_eq!(lane.order_time(1_000_045, &mut latest, 60_000, 3), 1_000_045);
        // Far behind: routed at once, and not the partition's progress either.
        assert_eq!(lane.order_time(0, &mut latest, 60_000, 3), 0);
        assert_eq!(lane.last_timestamp, Some(1_000_045));
        assert_eq!(lane.order_time(1_000_050, &mut latest, 60_000, 3), 1_000_050);
        // Three in a row: the stream jumped.
        assert_eq!(lane.order_time(9_000_000, &mut latest, 60_000, 3), 1_000_050);
        assert_eq!(lane.order_time(9_000_010, &mut latest, 60_000, 3), 1_000_050);
        assert_eq!(lane.order_time(9_000_020, &mut latest, 60_000, 3), 9_000_020);
        assert_eq!(lane.order_time(9_000_030, &mut latest, 60_000, 3), 9_000_030);
        assert_eq!((lane.last_timestamp, latest), (Some(9_000_030), Some(9_000_030)));
    }
}
