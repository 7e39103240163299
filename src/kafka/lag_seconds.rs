//! `dedupd_input_lag_seconds`: how far, in record time, the consumer that
//! reads an input partition is behind its end — the timestamp of the
//! partition's newest record minus that of the last record handed to
//! dedupd; 0 when it has read everything.
//!
//! Nothing of it runs on the record path. [`LagSeconds::update`] runs on
//! the statistics callback with each partition's position and end (from
//! librdkafka's statistics): a partition at its end is set to 0 there; for
//! the others a thread of its own is woken, which reads the two records
//! (the newest, at the end − 1, and the last one read, at the position −
//! 1, or the first to be read before any) with a consumer by assignment of
//! its own, at most once a second, and sets the gauge from their
//! timestamps. That consumer connects when the thread starts (a backlog
//! the router reads in a second or two is over before a new client has
//! reached its broker), fetches one batch per partition it asks for
//! (`max.partition.fetch.bytes` 64 KiB: a larger batch comes alone; a fetch
//! of about 1 MiB, librdkafka's `fetch.max.bytes` from the 64 KiB queue and
//! `message.max.bytes`), pauses a partition once it has its record, then
//! gives the partitions up again: the memory
//! budget's runtime part holds it (docs/capacity.md).

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::clients::{self, PlainContext};
use crate::config::Resolved;
use crate::metrics::Metrics;

/// An input partition: topic and partition.
type Partition = (String, i32);

/// At most one round of reads a second, however often statistics come.
const MIN_PERIOD: Duration = Duration::from_secs(1);
/// How long one round waits for the records it asked for.
const READ_WAIT: Duration = Duration::from_secs(2);

/// A partition's position (the offset after the last record handed to
/// dedupd) and end, as the last statistics said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    pub position: i64,
    pub end: i64,
}

impl Offsets {
    fn lagging(self) -> bool {
        self.end > self.position && self.position >= 0
    }

    /// The record being judged: the last one handed to dedupd, else (none
    /// yet) the first it will get.
    fn judged(self) -> i64 {
        (self.position - 1).max(0)
    }
}

/// The seconds gauge of the partitions one consumer reads (see the module
/// documentation).
#[derive(Debug, Default)]
pub struct LagSeconds {
    /// The partitions reported, with their offsets from the last statistics;
    /// the gauge is set and removed under this lock only.
    reported: Arc<Mutex<BTreeMap<Partition, Offsets>>>,
    /// Wakes the reading thread; none without one (then a lagging
    /// partition's gauge keeps its last value).
    wake: Option<SyncSender<()>>,
}

impl LagSeconds {
    /// With a thread that reads the records' timestamps through a consumer
    /// made from `cfg`; it ends when this is dropped.
    pub fn reading(cfg: &Resolved, metrics: Arc<Metrics>) -> Self {
        let reported: Arc<Mutex<BTreeMap<Partition, Offsets>>> = Arc::default();
        let (wake, woken) = sync_channel(1);
        let mut config = clients::reader(cfg, &format!("{}-lag", cfg.settings.app.id));
        config
            .set("enable.partition.eof", "false")
            .set("max.partition.fetch.bytes", "65536")
            .set("queued.max.messages.kbytes", "64")
            .set("queued.min.messages", "1")
            // Past `queued.min.messages` (at once, here) librdkafka waits this
            // long before the next fetch: 1 s by default, a round's whole
            // budget while a backlog lasts a second or two.
            .set("fetch.queue.backoff.ms", "10");
        let state = reported.clone();
        let topics = cfg.settings.input.topics.clone();
        let spawned = std::thread::Builder::new()
            .name("input-lag".into())
            .spawn(move || read_loop(config, &topics, &state, &metrics, &woken));
        if let Err(e) = spawned {
            log::warn!("dedupd_input_lag_seconds will not be measured: cannot start its thread: {e}");
            return LagSeconds { reported, wake: None };
        }
        LagSeconds { reported, wake: Some(wake) }
    }

    /// The partitions this consumer reads now, from a statistics event: those
    /// no longer read leave the gauge, those at their end are at 0, and the
    /// reading thread is woken for the others.
    pub fn update(&self, metrics: &Metrics, partitions: &[(Partition, Offsets)]) {
        let now: BTreeMap<Partition, Offsets> = partitions.iter().cloned().collect();
        let mut reported = self.reported.lock().expect("lag seconds lock");
        for (topic, partition) in reported.keys().filter(|tp| !now.contains_key(*tp)) {
            let _ = metrics.input.input_lag_seconds.remove_label_values(&[topic, &partition.to_string()]);
        }
        for ((topic, partition), offsets) in &now {
            let gauge = metrics.input.input_lag_seconds.with_label_values(&[topic, &partition.to_string()]);
            if !offsets.lagging() {
                gauge.set(0.0);
            }
        }
        let wake = now.values().any(|o| o.lagging());
        *reported = now;
        drop(reported);
        if wake && let Some(sender) = &self.wake {
            match sender.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) => {}
                Err(TrySendError::Disconnected(())) => log::debug!("the input-lag thread has stopped"),
            }
        }
    }
}

/// The reading thread: a round of reads each time it is woken, at most one
/// a second; ends when its [`LagSeconds`] is dropped.
fn read_loop(
    config: ClientConfig,
    topics: &[String],
    reported: &Mutex<BTreeMap<Partition, Offsets>>,
    metrics: &Metrics,
    woken: &Receiver<()>,
) {
    // Connected before any lag: a backlog the consumer reads in a second or
    // two (the router with `batches`) is over before a new client has
    // reached the brokers.
    let reader: BaseConsumer<PlainContext> = match config.create_with_context(PlainContext) {
        Ok(c) => c,
        Err(e) => {
            log::warn!("dedupd_input_lag_seconds will not be measured: cannot create its consumer: {e}");
            return;
        }
    };
    for topic in topics {
        if let Err(e) = reader.fetch_metadata(Some(topic), READ_WAIT) {
            log::debug!("dedupd_input_lag_seconds: metadata of {topic}: {e}");
        }
    }
    while woken.recv().is_ok() {
        let started = Instant::now();
        let lagging: Vec<(Partition, Offsets)> = reported
            .lock()
            .expect("lag seconds lock")
            .iter()
            .filter(|(_, o)| o.lagging())
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        if lagging.is_empty() {
            continue;
        }
        let newest = timestamps(&reader, lagging.iter().map(|(tp, o)| (tp, o.end - 1)));
        let judged = timestamps(&reader, lagging.iter().map(|(tp, o)| (tp, o.judged())));
        let _ = reader.unassign();
        log::debug!("input-lag: read {lagging:?} in {:?}: newest {newest:?}, judged {judged:?}", started.elapsed());
        {
            let reported = reported.lock().expect("lag seconds lock");
            for (tp, _) in &lagging {
                // Still read here and still behind (else the statistics set 0 meanwhile).
                let behind = reported.get(tp).is_some_and(|o| o.lagging());
                if let (true, Some(newest), Some(judged)) = (behind, newest.get(tp), judged.get(tp)) {
                    let seconds = (newest - judged).max(0) as f64 / 1000.0;
                    metrics.input.input_lag_seconds.with_label_values(&[&tp.0, &tp.1.to_string()]).set(seconds);
                }
            }
        }
        std::thread::sleep(MIN_PERIOD.saturating_sub(started.elapsed()));
    }
}

/// The timestamp (ms) of the record at each offset asked for (or the first
/// one after it, past a gap), for those read within [`READ_WAIT`].
fn timestamps<'a>(
    reader: &BaseConsumer<PlainContext>,
    at: impl Iterator<Item = (&'a Partition, i64)>,
) -> BTreeMap<Partition, i64> {
    let mut list = TopicPartitionList::new();
    let mut asked = BTreeMap::new();
    for ((topic, partition), offset) in at {
        if list.add_partition_offset(topic, *partition, Offset::Offset(offset)).is_ok() {
            asked.insert((topic.clone(), *partition), offset);
        }
    }
    let mut found = BTreeMap::new();
    if let Err(e) = reader.assign(&list) {
        log::debug!("dedupd_input_lag_seconds: assigning {list:?}: {e}");
        return found;
    }
    let deadline = Instant::now() + READ_WAIT;
    while found.len() < asked.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match reader.poll(left) {
            Some(Ok(msg)) => {
                let tp = (msg.topic().to_string(), msg.partition());
                let wanted = asked.get(&tp).is_some_and(|&o| msg.offset() >= o);
                if let (true, Some(ms)) = (wanted, msg.timestamp().to_millis())
                    && !found.contains_key(&tp)
                {
                    found.insert(tp, ms);
                    // No more of it: a broker may fill a whole fetch with one
                    // partition's records and starve the others (the test
                    // broker does, past `max.partition.fetch.bytes`).
                    let mut done = TopicPartitionList::new();
                    let _ = done.add_partition(msg.topic(), msg.partition());
                    let _ = reader.pause(&done);
                }
            }
            Some(Err(e)) => log::debug!("dedupd_input_lag_seconds: reading: {e}"),
            None => break,
        }
    }
    // Paused partitions stay paused across assignments: the next round's
    // must fetch.
    let _ = reader.resume(&list);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_up_partitions_are_at_zero_and_gone_ones_leave() {
        let metrics = Metrics::new(3);
        let lag = LagSeconds::default();
        let series = |m: &Metrics| m.render().lines().filter(|l| l.starts_with("dedupd_input_lag_seconds{")).count();
        let at = |p: i32, position: i64, end: i64| (("in".to_string(), p), Offsets { position, end });
        metrics.input.input_lag_seconds.with_label_values(&["in", "0"]).set(42.0);
        lag.update(&metrics, &[at(0, 10, 10), at(1, 5, 9)]);
        assert_eq!(series(&metrics), 2);
        assert_eq!(metrics.input.input_lag_seconds.with_label_values(&["in", "0"]).get(), 0.0);
        lag.update(&metrics, &[at(1, 9, 9)]);
        assert_eq!(series(&metrics), 1);
        assert_eq!(metrics.input.input_lag_seconds.with_label_values(&["in", "1"]).get(), 0.0);
    }
}
