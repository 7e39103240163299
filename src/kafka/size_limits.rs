//! How large a record each topic a slice writes accepts, read once at
//! start-up, and how large a copy of a record is as the broker counts it.
//!
//! A broker refuses a record batch larger than its topic's
//! `max.message.bytes`, and the output producer is gapless: a refused record
//! would stop the daemon, and its restart would stop at the same record. So
//! the record path compares each copy with the limit of the topic it goes to
//! and dead-letters what does not fit (`too_large_for_topic`) instead of
//! sending it. The limits are fixed for the life of the process, so a replay
//! decides exactly as the original run did (docs/design.md, invariant 1).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::message::Headers;

use super::clients::{self, PlainContext, Reader};
use super::replay::Destination;
use super::{Context, KafkaLayerError};
use crate::config::Resolved;

/// The reason dead letters of records a topic refuses for their size carry.
pub const REASON: &str = "too_large_for_topic";

/// Kafka's default `message.max.bytes` (and so a topic's `max.message.bytes`):
/// what a topic takes when neither it nor its broker reports a limit.
pub const KAFKA_DEFAULT_LIMIT: u64 = 1_048_588;

/// librdkafka's default `batch.size`.
const LIBRDKAFKA_BATCH_SIZE: u64 = 1_000_000;

/// A record batch's header (v2 format, Kafka 0.11 on), counted once per
/// record: a record may be alone in its batch.
const BATCH_HEADER: u64 = 61;
/// A record's own framing at its largest: length, attributes, timestamp and
/// offset deltas, key and value lengths, header count (varints at their
/// widest, so the count never falls short).
const RECORD_FRAMING: u64 = 5 + 1 + 10 + 5 + 5 + 5 + 5;
/// A header's two length varints at their widest.
const HEADER_FRAMING: u64 = 10;
/// What dedupd adds in headers of its own (slice offset, release position,
/// rule, lateness, count, reason, detail, source stamp, policy), at most,
/// and the application's name (`dedupd.app`: an `app.id` of at most
/// [`crate::config::MAX_APP_ID_BYTES`]).
pub const OWN_HEADERS: u64 =
    1024 + HEADER_FRAMING + super::headers::APP.len() as u64 + crate::config::MAX_APP_ID_BYTES as u64;

const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The size a copy of a record takes in a batch of its own, as the broker
/// compares it with `max.message.bytes`, before compression: `headers` are
/// the (name, value) lengths of the input record's headers; dedupd's own
/// come on top, counted as [`OWN_HEADERS`].
pub fn record_size(key: Option<&[u8]>, value: Option<&[u8]>, headers: impl Iterator<Item = (usize, usize)>) -> u64 {
    let len = |b: Option<&[u8]>| b.map_or(0, |b| b.len() as u64);
    let headers: u64 = headers.map(|(n, v)| HEADER_FRAMING + n as u64 + v as u64).sum();
    BATCH_HEADER + RECORD_FRAMING + len(key) + len(value) + headers + OWN_HEADERS
}

/// The (name, value) lengths of `headers` (a record's, if it has any).
pub fn header_lens<H: Headers>(headers: Option<&H>) -> impl Iterator<Item = (usize, usize)> + '_ {
    headers.into_iter().flat_map(|h| h.iter().map(|h| (h.key.len(), h.value.map_or(0, <[u8]>::len))))
}

/// Where a topic's limit came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The topic's `max.message.bytes`.
    Topic,
    /// The broker's `message.max.bytes` (the topic reported none).
    Broker,
    /// Neither reported one: Kafka's default.
    Default,
}

/// The largest record one topic takes from dedupd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    pub topic: String,
    /// The smaller of the topic's limit and the producer's `message.max.bytes`.
    pub bytes: u64,
    /// The topic's own limit and where it came from.
    pub topic_bytes: u64,
    pub source: Source,
}

/// Resolves one topic's limit from what the broker reported (the topic's
/// `max.message.bytes`, the broker's `message.max.bytes`) and the producer's
/// own `message.max.bytes`: the smaller one holds. A value that is not a
/// number counts as not reported.
pub fn resolve(topic: &str, topic_value: Option<&str>, broker_value: Option<&str>, producer_max: u64) -> Limit {
    let parse = |v: Option<&str>| v.and_then(|v| v.trim().parse::<u64>().ok());
    let (topic_bytes, source) = match (parse(topic_value), parse(broker_value)) {
        (Some(t), _) => (t, Source::Topic),
        (None, Some(b)) => (b, Source::Broker),
        (None, None) => (KAFKA_DEFAULT_LIMIT, Source::Default),
    };
    Limit { topic: topic.to_string(), bytes: topic_bytes.min(producer_max), topic_bytes, source }
}

/// The limits of the topics a slice writes, per [`Destination`] (`None`:
/// the topic is off).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordLimits {
    limits: [Option<Limit>; Destination::ALL.len()],
}

impl RecordLimits {
    /// Limits from `(destination, limit)` pairs.
    pub fn new(limits: impl IntoIterator<Item = (Destination, Limit)>) -> Self {
        let mut all = RecordLimits::default();
        for (dest, limit) in limits {
            all.limits[dest as usize] = Some(limit);
        }
        all
    }

    /// `dest`'s limit, when `dest` is on.
    pub fn get(&self, dest: Destination) -> Option<&Limit> {
        self.limits[dest as usize].as_ref()
    }

    /// `dest`'s limit when a record of `size` bytes exceeds it.
    pub fn refuses(&self, dest: Destination, size: u64) -> Option<&Limit> {
        self.get(dest).filter(|l| size > l.bytes)
    }

    /// The `batch.size` a producer that writes these topics needs: a batch
    /// of several records must fit the smallest limit too (the broker
    /// refuses a whole batch larger than the topic's limit), at most
    /// `configured` (librdkafka's default when unset).
    pub fn batch_size(&self, configured: Option<u64>) -> u64 {
        let smallest = self.limits.iter().flatten().map(|l| l.bytes).min();
        let configured = configured.unwrap_or(LIBRDKAFKA_BATCH_SIZE);
        smallest.map_or(configured, |s| s.min(configured))
    }

    /// The limit of `topic`, if a slice writes it.
    pub fn of_topic(&self, topic: &str) -> Option<&Limit> {
        self.limits.iter().flatten().find(|l| l.topic == topic)
    }
}

/// As the start-up log shows them: `output out 4096 (topic), dead letters
/// dl 1048588 (Kafka's default; producer 104857600)`.
impl std::fmt::Display for RecordLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for dest in Destination::ALL {
            let Some(l) = self.get(dest) else { continue };
            f.write_str(if first { "" } else { ", " })?;
            first = false;
            let from = match l.source {
                Source::Topic => "its max.message.bytes",
                Source::Broker => "the broker's message.max.bytes",
                Source::Default => "not reported: Kafka's default",
            };
            write!(f, "{} {} {} bytes ({from} {}", dest.name(), l.topic, l.bytes, l.topic_bytes)?;
            if l.bytes < l.topic_bytes {
                f.write_str(", kafka.message.max.bytes lower")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Reads the limit of every topic a slice writes (they exist: after
/// [`super::topics::ensure`]).
pub async fn read(cfg: &Resolved) -> Result<RecordLimits, KafkaLayerError> {
    let s = &cfg.settings;
    let producer_max: u64 = clients::largest_record(cfg).parse().map_err(|_| {
        KafkaLayerError::Settings(format!(
            "invalid setting kafka.message.max.bytes = {}: not a number",
            clients::largest_record(cfg)
        ))
    })?;
    let topics: Vec<(Destination, &str)> =
        Destination::ALL.iter().filter_map(|d| d.topic(s).map(|t| (*d, t))).collect();
    let admin: AdminClient<PlainContext> = clients::base(cfg, &format!("{}-admin", s.app.id), clients::Role::Producer)
        .create_with_context(PlainContext)
        .context(|| "creating an admin client".into())?;
    let opts = AdminOptions::new().request_timeout(Some(DESCRIBE_TIMEOUT));
    let specs: Vec<ResourceSpecifier<'_>> = topics.iter().map(|(_, t)| ResourceSpecifier::Topic(t)).collect();
    let described = admin.describe_configs(&specs, &opts).await.context(|| "describing the output topics".into())?;
    let mut reported = Vec::new();
    for ((_, topic), r) in topics.iter().zip(described) {
        let resource = r.map_err(|code| {
            KafkaLayerError::Topics(format!(
                "cannot read the configuration of topic {topic}: {code} (dedupd reads its max.message.bytes: it \
                 needs DescribeConfigs on the topics it writes)"
            ))
        })?;
        reported.push(resource.get("max.message.bytes").and_then(|e| e.value.clone()));
    }
    // Only asked when a topic reported no limit (a broker that lists only
    // the configs set on a topic): its broker's default then holds.
    let broker = if reported.iter().any(Option::is_none) { broker_limit(cfg, &admin, &opts).await } else { None };
    let limits = topics
        .iter()
        .zip(&reported)
        .map(|((dest, topic), value)| (*dest, resolve(topic, value.as_deref(), broker.as_deref(), producer_max)));
    Ok(RecordLimits::new(limits))
}

/// The `message.max.bytes` a broker of the cluster reports, if any: a
/// broker that reports none, or an error, leaves Kafka's default.
async fn broker_limit(cfg: &Resolved, admin: &AdminClient<PlainContext>, opts: &AdminOptions) -> Option<String> {
    let probe: Reader =
        clients::reader(cfg, &format!("{}-limits", cfg.settings.app.id)).create_with_context(PlainContext).ok()?;
    let id = {
        use rdkafka::consumer::Consumer;
        probe.fetch_metadata(None, DESCRIBE_TIMEOUT).ok()?.brokers().first()?.id()
    };
    let described = admin.describe_configs(&[ResourceSpecifier::Broker(id)], opts).await.ok()?;
    let resource = described.into_iter().next()?.ok()?;
    resource.get("message.max.bytes").and_then(|e| e.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_counts_its_key_value_headers_and_framing() {
        let none = record_size(None, None, std::iter::empty());
        assert_eq!(none, BATCH_HEADER + RECORD_FRAMING + OWN_HEADERS);
        let full = record_size(Some(b"key"), Some(&[0u8; 4000]), [(5, 7), (2, 0)].into_iter());
        assert_eq!(full, none + 3 + 4000 + (HEADER_FRAMING + 12) + (HEADER_FRAMING + 2));
    }

    #[test]
    fn the_count_is_never_below_what_the_broker_counts() {
        // Nisshi 0.8.1 takes a 4025-byte value with a 1-byte key and no
        // header into a topic of max.message.bytes 4096, and refuses 4026:
        // the batch is then 4097 bytes.
        let accepted = record_size(Some(b"k"), Some(&[0u8; 4025]), std::iter::empty());
        assert!(accepted - OWN_HEADERS >= 4096, "{accepted}");
    }

    #[test]
    fn the_smaller_of_topic_and_producer_holds() {
        let l = resolve("out", Some("4096"), Some("2000000"), 104_857_600);
        assert_eq!((l.bytes, l.topic_bytes, l.source), (4096, 4096, Source::Topic));
        let l = resolve("out", Some("4096"), None, 1000);
        assert_eq!((l.bytes, l.topic_bytes, l.source), (1000, 4096, Source::Topic));
    }

    #[test]
    fn a_topic_without_a_limit_takes_the_brokers_then_kafkas_default() {
        let l = resolve("out", None, Some("2000000"), 104_857_600);
        assert_eq!((l.bytes, l.source), (2_000_000, Source::Broker));
        let l = resolve("out", None, None, 104_857_600);
        assert_eq!((l.bytes, l.source), (KAFKA_DEFAULT_LIMIT, Source::Default));
        let l = resolve("out", Some("lots"), Some(" 5000 "), 104_857_600);
        assert_eq!((l.bytes, l.source), (5000, Source::Broker), "a value that is no number is not a limit");
    }

    #[test]
    fn refusal_batch_size_and_display_follow_the_limits() {
        let limits = RecordLimits::new([
            (Destination::Output, resolve("out", Some("4096"), None, 104_857_600)),
            (Destination::DeadLetters, resolve("dl", None, None, 104_857_600)),
        ]);
        assert!(limits.refuses(Destination::Output, 4096).is_none());
        assert_eq!(limits.refuses(Destination::Output, 4097).map(|l| l.bytes), Some(4096));
        assert!(limits.refuses(Destination::Late, u64::MAX).is_none(), "a topic that is off refuses nothing");
        assert_eq!(limits.batch_size(None), 4096);
        assert_eq!(limits.batch_size(Some(1000)), 1000);
        assert_eq!(RecordLimits::default().batch_size(None), LIBRDKAFKA_BATCH_SIZE);
        assert_eq!(limits.of_topic("dl").map(|l| l.bytes), Some(KAFKA_DEFAULT_LIMIT));
        assert_eq!(
            limits.to_string(),
            "output out 4096 bytes (its max.message.bytes 4096), dead letters dl 1048588 bytes (not reported: \
             Kafka's default 1048588)"
        );
    }
}
