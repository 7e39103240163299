//! librdkafka settings: the user's pass-through `[kafka]` table first, then
//! the settings dedupd's correctness depends on, which the user cannot turn off.
//!
//! Statistics: librdkafka emits its whole statistics JSON (kilobytes per
//! client) every `statistics.interval.ms`, and rdkafka's default context
//! logs each one at INFO ("Client stats: …"). Only the slice and router
//! consumers use them (for the lag gauges), so only they get that setting
//! ([`statistics_interval`]); every context here still swallows statistics
//! (`stats_raw`) so that none can ever reach the log. A client that is not
//! polled (the readers, between restores) would otherwise also queue them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::{RDKafkaConfRes, RDKafkaErrorCode};
use rdkafka::{ClientConfig, ClientContext, Offset};

use crate::config::{REDACTED, Resolved, is_secret_setting};
use crate::memory::budget::LARGEST_RECORD;

/// What every client of this daemon does with librdkafka's error events
/// (each context's [`ClientContext::error`] calls this).
///
/// A consumer with `enable.partition.eof` (the router and the readers) gets
/// an event at every end of a partition it reaches; rdkafka's default
/// context would log each one as `Global error: PartitionEOF` at ERROR,
/// though it is the normal end of a read. It is logged at debug; any other
/// error as rdkafka's default does, at ERROR.
pub fn log_client_error(error: &KafkaError, reason: &str) {
    if is_partition_eof(error) {
        log::debug!(target: "rdkafka::client", "librdkafka: end of partition: {reason}");
    } else {
        // "All brokers are down" says that, not why: keep the reason before it.
        let code = error.rdkafka_error_code();
        if code.is_some_and(is_connection_error) && code != Some(RDKafkaErrorCode::AllBrokersDown) {
            remember_connection_failure(reason);
        }
        log::error!(target: "rdkafka::client", "librdkafka: {error}: {reason}");
    }
}

/// What every client of this daemon does with librdkafka's log lines (each
/// context's [`ClientContext::log`] calls this): rdkafka's default (the
/// `log` crate, target `librdkafka`), and a connection failure (`FAIL`:
/// a refused TLS handshake, a failed SASL authentication, a refused
/// connection) is remembered for [`with_connection_failure`].
pub fn log_client_message(level: RDKafkaLogLevel, fac: &str, message: &str) {
    if fac == "FAIL" {
        remember_connection_failure(message);
    }
    log::log!(target: "librdkafka", level_of(level, fac, message), "librdkafka: {fac} {message}");
}

/// The level dedupd logs a librdkafka line at: librdkafka's own, but for
/// its warning that `enable.gapless.guarantee` is experimental, which the
/// output producer sets on purpose (`producer::output_producer`) — a WARN
/// on every start would be noise in a clean run.
fn level_of(level: RDKafkaLogLevel, fac: &str, message: &str) -> log::Level {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            log::Level::Error
        }
        RDKafkaLogLevel::Warning
            if fac == "CONFWARN" && message.contains("enable.gapless.guarantee is experimental") =>
        {
            log::Level::Info
        }
        // An offset commit a rebalance overtook: the slices' commits are for
        // the lag tools only and the next snapshot commits again; the routers
        // commit again once their partitions are assigned.
        RDKafkaLogLevel::Warning if fac == "COMMITFAIL" && is_rebalance_commit_failure(message) => log::Level::Info,
        RDKafkaLogLevel::Warning => log::Level::Warn,
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => log::Level::Info,
        RDKafkaLogLevel::Debug => log::Level::Debug,
    }
}

/// Whether a failed commit's message names a rebalance: the group's
/// generation moved on, or a rebalance is in progress, or the member left it.
fn is_rebalance_commit_failure(message: &str) -> bool {
    ["generation id is not valid", "Group rebalance in progress", "Unknown member"].iter().any(|m| message.contains(m))
}

/// The last reason librdkafka gave for failing a broker connection, in any
/// client of this process.
static LAST_CONNECTION_FAILURE: Mutex<Option<String>> = Mutex::new(None);

fn remember_connection_failure(reason: &str) {
    *LAST_CONNECTION_FAILURE.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
}

/// Error codes of a client that could not talk to the brokers at all.
fn is_connection_error(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::SSL
            | RDKafkaErrorCode::Resolve
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
    )
}

/// `context` with, if `error` says the brokers could not be reached, the
/// last connection failure librdkafka reported. Why: a refused TLS
/// certificate or a wrong SASL password surfaces in rdkafka's result only
/// as "Broker transport failure"; the cause ("certificate verify failed",
/// "Authentication failure … unknown-user") is in librdkafka's log lines,
/// which scroll by among hundreds of retries. librdkafka never puts a
/// password into these lines.
pub fn with_connection_failure(context: String, error: &KafkaError) -> String {
    if !error.rdkafka_error_code().is_some_and(is_connection_error) {
        return context;
    }
    match LAST_CONNECTION_FAILURE.lock().unwrap_or_else(|p| p.into_inner()).as_deref() {
        Some(reason) => match setting_to_check(reason) {
            Some(hint) => format!("{context} (last broker connection failure: {reason}; {hint})"),
            None => format!("{context} (last broker connection failure: {reason})"),
        },
        None => context,
    }
}

/// The settings to look at for a connection failure librdkafka reported
/// (its own wording names them only for some TLS errors, depending on the
/// OpenSSL error it got).
fn setting_to_check(reason: &str) -> Option<&'static str> {
    if reason.contains("certificate verify failed") {
        Some("check ssl.ca.location: it must hold the CA that signed the broker's certificate")
    } else if reason.contains("SASL authentication error") || reason.contains("Authentication failure") {
        Some("check sasl.mechanisms, sasl.username and sasl.password")
    } else {
        None
    }
}

/// A partition's end, as a consumer event or as a global error event.
pub fn is_partition_eof(error: &KafkaError) -> bool {
    matches!(error, KafkaError::PartitionEOF(_)) || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
}

/// The context of clients with no callbacks of their own (the readers, the
/// admin client): only [`log_client_error`].
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainContext;

impl ClientContext for PlainContext {
    /// Not asked for (see the module documentation); never logged.
    fn stats_raw(&self, _: &[u8]) {}

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_client_message(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

impl ConsumerContext for PlainContext {}

/// A consumer that reads partitions by assignment (see [`reader`]).
pub type Reader = BaseConsumer<PlainContext>;

/// The kind of librdkafka handle a configuration is for. The admin client
/// is a producer handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Consumer,
    Producer,
}

/// librdkafka properties only a consumer reads (`C` in librdkafka 2.12's
/// CONFIGURATION.md, global and topic tables, callbacks left out).
const CONSUMER_ONLY: &[&str] = &[
    "auto.commit.enable",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "check.crcs",
    "consume.callback.max.messages",
    "coordinator.query.interval.ms",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "fetch.error.backoff.ms",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "fetch.min.bytes",
    "fetch.queue.backoff.ms",
    "fetch.wait.max.ms",
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.protocol.type",
    "group.remote.assignor",
    "heartbeat.interval.ms",
    "isolation.level",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "offset.store.method",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "partition.assignment.strategy",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "session.timeout.ms",
];

/// librdkafka properties only a producer reads (`P`, as for [`CONSUMER_ONLY`]).
const PRODUCER_ONLY: &[&str] = &[
    "acks",
    "batch.num.messages",
    "batch.size",
    "compression.codec",
    "compression.level",
    "compression.type",
    "delivery.report.only.error",
    "delivery.timeout.ms",
    "enable.gapless.guarantee",
    "enable.idempotence",
    "linger.ms",
    "message.send.max.retries",
    "message.timeout.ms",
    "partitioner",
    "produce.offset.report",
    "queue.buffering.backpressure.threshold",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.ms",
    "queuing.strategy",
    "request.required.acks",
    "request.timeout.ms",
    "retries",
    "sticky.partitioning.linger.ms",
    "transaction.timeout.ms",
    "transactional.id",
];

/// Whether a client of `role` reads the librdkafka property `name`.
pub fn applies_to(name: &str, role: Role) -> bool {
    let other_only = match role {
        Role::Consumer => PRODUCER_ONLY,
        Role::Producer => CONSUMER_ONLY,
    };
    !other_only.contains(&name)
}

/// Base settings for any client of this daemon: the `[kafka]` settings that
/// a client of `role` reads. The others are not passed on: librdkafka would
/// ignore them anyway, but warn about each one (`CONFWARN ... is a consumer
/// property and will be ignored by this producer instance`) in the log of
/// every start with, say, `session.timeout.ms` set.
pub fn base(cfg: &Resolved, client_id: &str, role: Role) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.settings.kafka.brokers);
    c.set("client.id", client_id);
    for (k, v) in cfg.settings.kafka.client_settings() {
        if k == STATISTICS_INTERVAL {
            log::debug!("{client_id}: {k} reaches only the slice consumer (its statistics feed the lag gauge)");
        } else if applies_to(&k, role) {
            c.set(k, v);
        } else {
            log::debug!("{client_id}: {k} is not a {role:?} setting: not passed on");
        }
    }
    c
}

/// A `[kafka]` setting librdkafka refuses, named without its value when
/// that may be a secret.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting kafka.{name} = {value}: librdkafka refuses it: {reason}")]
pub struct RefusedSetting {
    pub name: String,
    pub value: String,
    pub reason: String,
}

/// Lets librdkafka check the `[kafka]` settings at start-up, so that a bad
/// one stops the daemon with a message naming it. rdkafka's own error
/// would show the value, and so print a mistyped `sasl.pasword`'s secret:
/// the value of a secret setting, or of one librdkafka does not know, is
/// shown as [`REDACTED`] instead, in the message and in librdkafka's reason.
pub fn check(cfg: &Resolved) -> Result<(), RefusedSetting> {
    for role in [Role::Consumer, Role::Producer] {
        if let Err(KafkaError::ClientConfig(code, reason, name, value)) =
            base(cfg, "check", role).create_native_config()
        {
            let hide = is_secret_setting(&name) || code == RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN;
            return Err(if hide && !value.is_empty() {
                RefusedSetting { reason: reason.replace(&value, REDACTED), name, value: REDACTED.to_string() }
            } else {
                RefusedSetting { name, value, reason }
            });
        }
    }
    Ok(())
}

/// librdkafka's statistics period setting.
pub const STATISTICS_INTERVAL: &str = "statistics.interval.ms";

/// The statistics period of the slice and router consumers:
/// `statistics.interval.ms` from `[kafka]` if set, else `default_ms`. No
/// other client gets one.
pub fn statistics_interval(cfg: &Resolved, default_ms: u64) -> String {
    cfg.settings
        .kafka
        .client_settings()
        .into_iter()
        .find(|(k, _)| k == STATISTICS_INTERVAL)
        .map_or_else(|| default_ms.to_string(), |(_, v)| v)
}

/// A group consumer that never auto-commits (positions come from snapshots
/// and explicit commits) and rebalances cooperatively. A partition with no
/// position starts at its earliest record: what the slice consumer needs
/// (its positions come from the restores; the slice log is dedupd's own).
/// Consumers of the input use [`input_group_consumer`].
pub fn group_consumer(cfg: &Resolved, group: &str, client_id: &str) -> ClientConfig {
    let mut c = base(cfg, client_id, Role::Consumer);
    bounded_prefetch(cfg, &mut c);
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky");
    follow_live(&mut c);
    c
}

/// A [`group_consumer`] of the input topics (the router, a sparse leaf): an
/// input partition the group has no committed offset in starts where
/// `input.start` says (librdkafka's `auto.offset.reset`; a `[kafka]` value
/// that contradicts it was refused at start-up).
pub fn input_group_consumer(cfg: &Resolved, group: &str, client_id: &str) -> ClientConfig {
    let mut c = group_consumer(cfg, group, client_id);
    c.set("auto.offset.reset", cfg.input_start.as_str());
    c
}

/// Fetch settings (unless `[kafka]` sets them) of a consumer that follows
/// records as they arrive: the group consumers and shared mode's input reader.
fn follow_live(c: &mut ClientConfig) {
    // The broker answers a fetch as soon as data arrives or after this long:
    // librdkafka's 500 ms default would add up to half a second per stage.
    if c.get("fetch.wait.max.ms").is_none() {
        c.set("fetch.wait.max.ms", "20");
    }
    // A partition whose prefetched records reach `queued.min.messages` is
    // fetched again after this long: librdkafka's 1 s default stalls a
    // consumer that bounds its prefetch (the router does) for a second at a time.
    if c.get("fetch.queue.backoff.ms").is_none() {
        c.set("fetch.queue.backoff.ms", "10");
    }
}

/// A consumer's prefetch from the memory budget (unless `[kafka]` sets it):
/// librdkafka's default queue may hold 64 MiB before it stops fetching, and
/// sizes a fetch response to the queue. Without a limit 16 MiB, still
/// hundreds of thousands of small records, several fetches ahead.
fn bounded_prefetch(cfg: &Resolved, c: &mut ClientConfig) {
    if c.get("queued.max.messages.kbytes").is_none() {
        c.set("queued.max.messages.kbytes", (cfg.budget.consumer_queue / 1024).max(1).to_string());
    }
}

/// A consumer for reading partitions by assignment (checkpoints, the last
/// output record); it never joins a group or commits. Create it with
/// [`PlainContext`]: `reader(..).create_with_context(PlainContext)`.
pub fn reader(cfg: &Resolved, client_id: &str) -> ClientConfig {
    let mut c = by_assignment(cfg, client_id);
    // Restores read to the end of a partition: the broker holds a fetch at
    // the end for up to this long (librdkafka's default: 500 ms per read).
    if c.get("fetch.wait.max.ms").is_none() {
        c.set("fetch.wait.max.ms", "10");
    }
    c
}

/// A [`reader`] of input records as they arrive (shared mode's slice reads
/// the records the routers name a moment after they read them): the group
/// consumers' fetch settings, no end-of-partition events.
pub fn input_reader(cfg: &Resolved, client_id: &str) -> ClientConfig {
    let mut c = by_assignment(cfg, client_id);
    c.set("enable.partition.eof", "false");
    follow_live(&mut c);
    c
}

/// What every consumer by assignment has: no group membership, no commits.
fn by_assignment(cfg: &Resolved, client_id: &str) -> ClientConfig {
    let mut c = base(cfg, client_id, Role::Consumer);
    bounded_prefetch(cfg, &mut c);
    c.set("group.id", format!("{}.reader", cfg.settings.app.id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    // Snapshots come in chunks of `checkpoint.chunk_bytes`: fetch many per
    // round trip, within the prefetch the budget allows.
    if c.get("max.partition.fetch.bytes").is_none() {
        c.set("max.partition.fetch.bytes", cfg.budget.consumer_queue.clamp(1 << 20, 16 << 20).to_string());
    }
    c
}

/// Seeks `topic`/`partition` of `consumer` to `at`, retrying for up to 10 s
/// while librdkafka refuses: it refuses to seek a partition whose fetcher
/// has not started yet (one assigned a moment ago starts once the stops of
/// partitions released before it are done).
pub fn seek_started<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    at: Offset,
) -> KafkaResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match consumer.seek(topic, partition, at, Duration::from_secs(10)) {
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            sought => break sought,
        }
    }
}

/// The largest record (batch) dedupd's producers send: `kafka.message.max.bytes`,
/// else what the memory budget leaves a producer's queue room for, else
/// 100 MiB — copies of records the broker already accepted must not be
/// refused by the client's own (1 MB) default. The topics dedupd creates
/// accept it (`max.message.bytes`).
pub fn largest_record(cfg: &Resolved) -> String {
    cfg.settings
        .kafka
        .client_settings()
        .into_iter()
        .find(|(k, _)| k == "message.max.bytes")
        .map_or_else(|| cfg.budget.producer_max_record.unwrap_or(LARGEST_RECORD).to_string(), |(_, v)| v)
}

/// An idempotent producer: no duplicates from retries, order kept per partition.
pub fn producer(cfg: &Resolved, client_id: &str) -> ClientConfig {
    let mut c = base(cfg, client_id, Role::Producer);
    c.set("enable.idempotence", "true").set("acks", "all");
    if c.get("message.max.bytes").is_none() {
        c.set("message.max.bytes", largest_record(cfg));
    }
    // Bounded memory: librdkafka's default lets a producer queue 1 GiB of
    // records (a snapshot's chunks, or large records). Sends wait (back-pressure)
    // while the queue is full: 100 000 records (librdkafka's default count)
    // or the producer's share of the memory budget, which always has room
    // for one record of `message.max.bytes` (or a send of one would wait forever).
    if c.get("queue.buffering.max.kbytes").is_none() {
        c.set("queue.buffering.max.kbytes", (cfg.budget.producer_queue / 1024).max(1).to_string());
    }
    if c.get("queue.buffering.max.messages").is_none() {
        c.set("queue.buffering.max.messages", "100000");
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    #[test]
    fn kafka_settings_reach_only_the_clients_that_read_them() {
        let env = [
            ("DEDUPD__KAFKA__SESSION_TIMEOUT_MS", "6000"),
            ("DEDUPD__KAFKA__LINGER_MS", "7"),
            ("DEDUPD__KAFKA__SOCKET_TIMEOUT_MS", "9000"),
        ];
        let cfg = Settings::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap();
        let consumer = group_consumer(&cfg, "g", "c");
        assert_eq!(consumer.get("session.timeout.ms"), Some("6000"));
        assert_eq!(consumer.get("linger.ms"), None);
        assert_eq!(consumer.get("socket.timeout.ms"), Some("9000"));
        let producer = producer(&cfg, "p");
        assert_eq!(producer.get("session.timeout.ms"), None);
        assert_eq!(producer.get("linger.ms"), Some("7"));
        assert_eq!(producer.get("socket.timeout.ms"), Some("9000"));
        assert_eq!(reader(&cfg, "r").get("linger.ms"), None);
    }

    /// `input.start` reaches the consumers of the input as librdkafka's
    /// `auto.offset.reset`; the slice consumer and the readers, which seek
    /// to positions of their own, keep `earliest`.
    #[test]
    fn input_start_sets_where_the_input_consumers_start() {
        let load =
            |env: &[(&str, &str)]| Settings::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        for (env, want) in [
            (&[][..], "earliest"),
            (&[("DEDUPD__INPUT__START", "latest")][..], "latest"),
            (&[("DEDUPD__INPUT__START", "latest"), ("DEDUPD__KAFKA__AUTO_OFFSET_RESET", "largest")][..], "latest"),
            (&[("DEDUPD__KAFKA__AUTO_OFFSET_RESET", "earliest")][..], "earliest"),
        ] {
            let cfg = load(env).unwrap();
            assert_eq!(input_group_consumer(&cfg, "g.router", "c").get("auto.offset.reset"), Some(want), "{env:?}");
            assert_eq!(group_consumer(&cfg, "g", "c").get("auto.offset.reset"), Some("earliest"), "{env:?}");
            assert_eq!(reader(&cfg, "r").get("auto.offset.reset"), Some("earliest"), "{env:?}");
        }
    }

    #[test]
    fn refused_settings_are_named_without_secret_values() {
        let load = |env: &[(&str, &str)]| {
            Settings::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
        };
        // A mistyped password setting: librdkafka does not know it, so it may be a secret.
        let e = check(&load(&[("DEDUPD__KAFKA__SASL_PASWORD", "hunter2-0007")])).unwrap_err().to_string();
        assert!(e.starts_with("invalid setting kafka.sasl.pasword = [redacted]: librdkafka refuses it: "), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        // A known setting with a bad value is shown as it is.
        let e = check(&load(&[("DEDUPD__KAFKA__SECURITY_PROTOCOL", "carrier-pigeon")])).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid setting kafka.security.protocol = carrier-pigeon: librdkafka refuses it: "),
            "{e}"
        );
        assert!(check(&load(&[("DEDUPD__KAFKA__SASL_PASSWORD", "hunter2-0007")])).is_ok());
    }

    #[test]
    fn statistics_reach_only_the_client_that_asks_for_them() {
        let load = |env: &[(&str, &str)]| {
            Settings::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
        };
        let cfg = load(&[("DEDUPD__KAFKA__STATISTICS_INTERVAL_MS", "500")]);
        for c in [group_consumer(&cfg, "g", "c"), reader(&cfg, "r"), producer(&cfg, "p")] {
            assert_eq!(c.get(STATISTICS_INTERVAL), None);
        }
        assert_eq!(statistics_interval(&cfg, 2000), "500");
        assert_eq!(statistics_interval(&load(&[]), 2000), "2000");
    }

    #[test]
    fn a_failed_connection_is_named_in_the_error_of_a_call_that_needed_it() {
        use rdkafka::types::RDKafkaErrorCode;
        let transport = KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure);
        log_client_message(RDKafkaLogLevel::Error, "FAIL", "ssl://b:9093/bootstrap: certificate verify failed");
        // "All brokers are down" comes after the cause and must not hide it.
        log_client_error(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down");
        assert_eq!(
            with_connection_failure("metadata of t".into(), &transport),
            "metadata of t (last broker connection failure: ssl://b:9093/bootstrap: certificate verify failed; \
             check ssl.ca.location: it must hold the CA that signed the broker's certificate)"
        );
        log_client_message(
            RDKafkaLogLevel::Error,
            "FAIL",
            "sasl_plaintext://b:9092/bootstrap: SASL authentication error",
        );
        let why = with_connection_failure("metadata of t".into(), &transport);
        assert!(why.ends_with("check sasl.mechanisms, sasl.username and sasl.password)"), "{why}");
        log_client_message(RDKafkaLogLevel::Error, "FAIL", "b:9092/bootstrap: Connection refused");
        assert!(with_connection_failure("m".into(), &transport).ends_with("Connection refused)"));
        let other = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert_eq!(with_connection_failure("sending".into(), &other), "sending");
    }

    #[test]
    fn the_gapless_warning_is_info_and_other_warnings_stay_warnings() {
        let gapless = "[thrd:app]: Configuration property enable.gapless.guarantee is experimental: When set";
        assert_eq!(level_of(RDKafkaLogLevel::Warning, "CONFWARN", gapless), log::Level::Info);
        let other = "[thrd:app]: Configuration property linger.ms is deprecated";
        assert_eq!(level_of(RDKafkaLogLevel::Warning, "CONFWARN", other), log::Level::Warn);
        assert_eq!(level_of(RDKafkaLogLevel::Error, "CONFWARN", gapless), log::Level::Error);
        // A commit a rebalance overtook (seen in the two-routers test), and one that failed otherwise.
        let overtaken = "[thrd:main]: Offset commit (manual) failed for 1/1 partition(s) in join-state wait-metadata: \
                         Broker: Specified group generation id is not valid: app.slices((null))[2]@2";
        assert_eq!(level_of(RDKafkaLogLevel::Warning, "COMMITFAIL", overtaken), log::Level::Info);
        let refused =
            "[thrd:main]: Offset commit (manual) failed for 1/1 partition(s): Broker: Group authorization failed";
        assert_eq!(level_of(RDKafkaLogLevel::Warning, "COMMITFAIL", refused), log::Level::Warn);
    }

    #[test]
    fn the_end_of_a_partition_is_no_error() {
        use rdkafka::types::RDKafkaErrorCode;
        assert!(is_partition_eof(&KafkaError::Global(RDKafkaErrorCode::PartitionEOF)));
        assert!(is_partition_eof(&KafkaError::PartitionEOF(3)));
        assert!(!is_partition_eof(&KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure)));
    }
}
