//! What dedupd reads from librdkafka's statistics JSON (each consumer that
//! asks for it gets one every `statistics.interval.ms`): when a broker last
//! answered, the bytes fetched ahead, each partition's end offset, and the
//! input lag — how far the consumer that reads the input (the router's
//! group in repartition and shared mode, the slice workers in
//! input-partitions mode) is behind the end of each input partition, in
//! records here and in seconds of record time in [`super::lag_seconds`].

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::lag_seconds::{LagSeconds, Offsets};
use crate::config::Resolved;
use crate::metrics::Metrics;

/// The part of a statistics event dedupd reads.
#[derive(Debug, serde::Deserialize)]
pub struct Statistics {
    #[serde(default)]
    pub topics: HashMap<String, TopicStats>,
    #[serde(default)]
    brokers: HashMap<String, BrokerStats>,
}

#[derive(Debug, serde::Deserialize)]
pub struct TopicStats {
    /// By partition id; the internal partition `-1` is skipped by its id.
    #[serde(default)]
    pub partitions: HashMap<String, PartitionStats>,
}

/// `brokers.<name>.rxidle`: microseconds since the connection last
/// received; -1 before its first answer.
#[derive(Debug, serde::Deserialize)]
struct BrokerStats {
    #[serde(default = "unknown")]
    rxidle: i64,
}

/// One partition's offsets (librdkafka's -1 or -1001 where unknown).
#[derive(Debug, serde::Deserialize)]
pub struct PartitionStats {
    /// The partition's end (high watermark).
    #[serde(default = "unknown")]
    pub hi_offset: i64,
    /// The last stable offset: the end a `read_committed` consumer (librdkafka's default) reads up to.
    #[serde(default = "unknown")]
    ls_offset: i64,
    /// The offset after the last record handed to dedupd.
    #[serde(default = "unknown")]
    app_offset: i64,
    /// The next offset the fetcher asks for (ahead of dedupd by the prefetched records).
    #[serde(default = "unknown")]
    next_offset: i64,
    /// Records fetched ahead and not yet handed to dedupd.
    #[serde(default)]
    fetchq_cnt: i64,
    #[serde(default = "unknown")]
    committed_offset: i64,
    /// Assigned to this consumer (not only known from metadata).
    #[serde(default)]
    desired: bool,
    /// Bytes fetched ahead and not yet consumed (for `dedupd_consumer_queue_bytes`).
    #[serde(default)]
    pub fetchq_size: i64,
}

fn unknown() -> i64 {
    -1
}

impl Statistics {
    pub fn parse(json: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json)
    }

    /// When a broker last answered: the freshest connection's.
    pub fn broker_heard_at(&self) -> Option<Instant> {
        let idle = self.brokers.values().filter(|b| b.rxidle >= 0).map(|b| b.rxidle).min()?;
        Some(Instant::now().checked_sub(Duration::from_micros(idle as u64)).unwrap_or_else(Instant::now))
    }

    /// Bytes fetched ahead of the consumer, over every partition.
    pub fn fetched_bytes(&self) -> i64 {
        self.topics.values().flat_map(|t| t.partitions.values()).map(|p| p.fetchq_size).sum()
    }

    /// The end offset of each partition of `topic` that has one.
    pub fn high_offsets<'a>(&'a self, topic: &str) -> impl Iterator<Item = (u32, i64)> + 'a {
        let partitions = self.topics.get(topic).map(|t| &t.partitions);
        partitions
            .into_iter()
            .flatten()
            .filter_map(|(p, s)| Some((p.parse::<u32>().ok()?, s.hi_offset)).filter(|(_, h)| *h >= 0))
    }

    /// The lag of each partition of `topics` assigned to this consumer:
    /// its end (the last stable offset, else the high watermark) minus the
    /// offset after the last record handed to dedupd. Before the first one,
    /// the position is where the fetcher starts (less what it fetched ahead)
    /// — on a new deployment the log start or end that `input.start` chose —
    /// else the committed offset. A partition with none is not listed.
    pub fn input_lag(&self, topics: &[String]) -> Vec<((String, i32), i64)> {
        let offsets = self.input_offsets(topics);
        offsets.into_iter().map(|(tp, o)| (tp, (o.end - o.position).max(0))).collect()
    }

    /// The position and end of each partition of `topics` assigned to this
    /// consumer, as [`Statistics::input_lag`] takes them.
    pub fn input_offsets(&self, topics: &[String]) -> Vec<((String, i32), Offsets)> {
        let mut offsets = Vec::new();
        for topic in topics {
            for (id, p) in self.topics.get(topic).map(|t| &t.partitions).into_iter().flatten() {
                let Ok(partition) = id.parse::<i32>() else { continue };
                let end = if p.ls_offset >= 0 { p.ls_offset } else { p.hi_offset };
                let position = if p.app_offset >= 0 {
                    p.app_offset
                } else if p.next_offset >= 0 {
                    p.next_offset - p.fetchq_cnt
                } else {
                    p.committed_offset
                };
                if partition >= 0 && p.desired && end >= 0 && position >= 0 {
                    offsets.push(((topic.clone(), partition), Offsets { position, end }));
                }
            }
        }
        offsets
    }
}

/// `dedupd_input_lag` and `dedupd_input_lag_seconds` of the consumer that
/// reads the input topics: publishes the lag of each partition it reads and
/// removes those it no longer reads (another member reports them).
#[derive(Debug, Default)]
pub struct InputLag {
    /// The input topics; none when this consumer does not read them.
    topics: Vec<String>,
    reported: Mutex<BTreeSet<(String, i32)>>,
    seconds: LagSeconds,
}

impl InputLag {
    /// For a consumer that reads `topics` (none: it does not read the
    /// input); the seconds are measured through a client made from `cfg`.
    pub fn new(topics: Vec<String>, cfg: &Resolved, metrics: &Arc<Metrics>) -> Self {
        let seconds = if topics.is_empty() { LagSeconds::default() } else { LagSeconds::reading(cfg, metrics.clone()) };
        InputLag { topics, reported: Mutex::default(), seconds }
    }

    pub fn publish(&self, metrics: &Metrics, stats: &Statistics) {
        if !self.topics.is_empty() {
            let offsets = stats.input_offsets(&self.topics);
            let lags: Vec<((String, i32), i64)> =
                offsets.iter().map(|(tp, o)| (tp.clone(), (o.end - o.position).max(0))).collect();
            self.set(metrics, &lags);
            self.seconds.update(metrics, &offsets);
        }
    }

    fn set(&self, metrics: &Metrics, lags: &[((String, i32), i64)]) {
        let mut reported = self.reported.lock().expect("input lag lock");
        let now: BTreeSet<(String, i32)> = lags.iter().map(|(tp, _)| tp.clone()).collect();
        for (topic, partition) in reported.difference(&now) {
            let _ = metrics.input.input_lag.remove_label_values(&[topic, &partition.to_string()]);
        }
        for ((topic, partition), lag) in lags {
            metrics.input.input_lag.with_label_values(&[topic, &partition.to_string()]).set(*lag);
        }
        *reported = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from real statistics events of a consumer.
    const JSON: &[u8] = br#"{"name":"app-slices#consumer-1","type":"consumer","msg_cnt":0,
        "brokers":{"127.0.0.1:9092/1":{"state":"UP","rxidle":1500}},
        "topics":{"in":{"topic":"in","partitions":{
            "0":{"partition":0,"desired":true,"hi_offset":120,"ls_offset":118,"app_offset":100,"committed_offset":90,"fetchq_size":300},
            "1":{"partition":1,"desired":true,"hi_offset":50,"ls_offset":-1001,"app_offset":-1001,"committed_offset":20},
            "4":{"partition":4,"desired":true,"hi_offset":900,"app_offset":-1001,"next_offset":40,"fetchq_cnt":30,"committed_offset":-1001},
            "2":{"partition":2,"desired":false,"hi_offset":70,"app_offset":-1001,"committed_offset":70},
            "3":{"partition":3,"desired":true,"hi_offset":-1001,"app_offset":-1001,"committed_offset":-1001},
            "-1":{"partition":-1,"desired":false,"hi_offset":-1001}}},
          "other":{"topic":"other","partitions":{"0":{"partition":0,"desired":true,"hi_offset":9,"app_offset":1}}}}}"#;

    #[test]
    fn offsets_and_lags_from_librdkafka_statistics() {
        let stats = Statistics::parse(JSON).unwrap();
        let mut highs: Vec<(u32, i64)> = stats.high_offsets("in").collect();
        highs.sort();
        assert_eq!(highs, [(0, 120), (1, 50), (2, 70), (4, 900)]);
        assert_eq!(stats.fetched_bytes(), 300);
        assert!(stats.broker_heard_at().is_some());
        let mut lags = stats.input_lag(&["in".to_string()]);
        lags.sort();
        // 0: the last stable offset minus the position; 1: before its first
        // record, from the committed offset to the high watermark; 4: from
        // where the fetcher started (40 - 30 fetched ahead); 2 is not this
        // consumer's, 3 has no offsets, "other" is not an input topic.
        let lag = |p: i32, l: i64| (("in".to_string(), p), l);
        assert_eq!(lags, [lag(0, 18), lag(1, 30), lag(4, 890)]);
        let empty = Statistics::parse(br#"{"name":"x"}"#).unwrap();
        assert!(empty.topics.is_empty() && empty.broker_heard_at().is_none());
    }

    #[test]
    fn a_partition_no_longer_read_leaves_the_gauge() {
        let metrics = Metrics::new(3);
        let lag = InputLag::default();
        let series = |m: &Metrics| m.render().lines().filter(|l| l.starts_with("dedupd_input_lag{")).count();
        lag.set(&metrics, &[(("in".into(), 0), 5), (("in".into(), 1), 7)]);
        assert_eq!(series(&metrics), 2);
        lag.set(&metrics, &[(("in".into(), 1), 0)]);
        assert_eq!(series(&metrics), 1);
        assert_eq!(metrics.input.input_lag.with_label_values(&["in", "1"]).get(), 0);
    }
}
