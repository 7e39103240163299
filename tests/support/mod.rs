//! Test support for the daemon tests: the real broker (started by
//! `scripts/broker.sh`), topics, producing and reading records with rdkafka,
//! and `dedupd run` processes with their admin endpoints.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use dedupd::testkit::workload::Rng;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The broker address; starts the local test broker once per test binary.
pub fn broker() -> String {
    static START: Once = Once::new();
    let port = std::env::var("DEDUPD_BROKER_PORT").unwrap_or_else(|_| "9092".into());
    START.call_once(|| {
        let out =
            Command::new("bash").arg(root().join("scripts/broker.sh")).arg("start").output().expect("run broker.sh");
        assert!(
            out.status.success(),
            "scripts/broker.sh start failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
    format!("127.0.0.1:{port}")
}

/// A name no other test (or earlier run against the same broker) uses.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}

/// Client settings for the local test broker. A test against another
/// broker (TLS, SASL) passes its own to the `*_on` helpers.
pub fn local_broker() -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", broker());
    c
}

pub fn create_topic(topic: &str, partitions: i32) {
    create_topic_on(&local_broker(), topic, partitions);
}

/// A topic with topic configs, e.g. `max.message.bytes` for records over
/// the broker's default limit (Kafka's and Nisshi's ~1 MB).
pub fn create_topic_with(topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    create_topic_configured(&local_broker(), topic, partitions, configs);
}

pub fn create_topic_on(broker: &ClientConfig, topic: &str, partitions: i32) {
    create_topic_configured(broker, topic, partitions, &[]);
}

fn create_topic_configured(broker: &ClientConfig, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = broker.create().expect("admin client");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let new =
        configs.iter().fold(NewTopic::new(topic, partitions, TopicReplication::Fixed(1)), |t, (k, v)| t.set(k, v));
    let res = rt.block_on(admin.create_topics(&[new], &AdminOptions::new())).expect("create topics");
    for r in res {
        r.expect("topic created");
    }
    // Wait until the metadata shows every partition.
    let c = reader_on(broker);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let md = c.fetch_metadata(Some(topic), Duration::from_secs(5)).unwrap();
        if md.topics().iter().any(|t| t.name() == topic && t.partitions().len() == partitions as usize) {
            return;
        }
        assert!(Instant::now() < deadline, "topic {topic} did not appear");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A record to produce or one read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Rec {
    pub fn new(partition: i32, key: &str, value: &str, timestamp: i64) -> Self {
        Rec {
            partition,
            offset: -1,
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            timestamp: Some(timestamp),
            headers: Vec::new(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_slice())
    }

    pub fn value_str(&self) -> String {
        String::from_utf8_lossy(self.value.as_deref().unwrap_or_default()).into_owned()
    }
}

pub fn producer() -> ThreadedProducer<DefaultProducerContext> {
    producer_on(&local_broker())
}

/// A producer that counts the records the broker refused: a test that
/// writes with it asserts [`CountingDelivery::assert_none_failed`] after its
/// flush, so a record the broker never took cannot pass for one the
/// daemon lost.
pub fn counting_producer() -> ThreadedProducer<CountingDelivery> {
    producer_settings(&local_broker()).create_with_context(CountingDelivery::default()).expect("producer")
}

pub fn producer_on(broker: &ClientConfig) -> ThreadedProducer<DefaultProducerContext> {
    producer_settings(broker).create().expect("producer")
}

/// The test producers' settings: idempotent, a 5 ms linger, one request in
/// flight per connection: the test broker checks an idempotent batch's
/// sequence number apart from storing it, and two batches of one partition
/// in flight at once can be refused as out of order, which librdkafka makes
/// fatal (docs/dev/broker.md, finding 12): a test's own producer stopped so
/// is no finding about dedupd.
fn producer_settings(broker: &ClientConfig) -> ClientConfig {
    let mut c = broker.clone();
    c.set("enable.idempotence", "true").set("linger.ms", "5").set("max.in.flight.requests.per.connection", "1");
    c
}

/// Produces `records` in order (to their partitions) and waits for delivery.
pub fn produce(topic: &str, records: &[Rec]) {
    produce_on(&local_broker(), topic, records);
}

/// Counts records the broker refused, so that [`produce_on`] cannot lose one
/// silently (a broker that enforces `max.message.bytes` refuses a whole batch).
#[derive(Default)]
pub struct CountingDelivery {
    failed: std::sync::Mutex<Vec<String>>,
}

impl CountingDelivery {
    /// Panics naming the first refusal, if there was one.
    pub fn assert_none_failed(&self, topic: &str) {
        let failed = self.failed.lock().unwrap();
        assert!(failed.is_empty(), "{} records to {topic} refused, first: {}", failed.len(), failed[0]);
    }
}

impl rdkafka::ClientContext for CountingDelivery {}

impl rdkafka::producer::ProducerContext for CountingDelivery {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.lock().unwrap().push(e.to_string());
        }
    }
}

pub fn produce_on(broker: &ClientConfig, topic: &str, records: &[Rec]) {
    produce_by(&test_producer(broker), topic, records);
}

/// A producer for [`produce_by`].
pub fn test_producer(broker: &ClientConfig) -> ThreadedProducer<CountingDelivery> {
    producer_settings(broker).create_with_context(CountingDelivery::default()).expect("producer")
}

/// Produces `records` in order by `p` and waits for their delivery.
pub fn produce_by(p: &ThreadedProducer<CountingDelivery>, topic: &str, records: &[Rec]) {
    for r in records {
        let mut hs = OwnedHeaders::new();
        for (k, v) in &r.headers {
            hs = hs.insert(Header { key: k, value: Some(v) });
        }
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(r.partition).headers(hs);
        if let Some(k) = &r.key {
            rec = rec.key(k);
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v);
        }
        if let Some(t) = r.timestamp {
            rec = rec.timestamp(t);
        }
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
    p.context().assert_none_failed(topic);
}

pub fn reader() -> BaseConsumer {
    reader_on(&local_broker())
}

pub fn reader_on(broker: &ClientConfig) -> BaseConsumer {
    broker
        .clone()
        .set("group.id", unique("test-reader"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("reader")
}

/// Every record of `topic`, per partition in offset order: reads at least
/// up to each partition's end as listed when the read begins, then until no
/// record has arrived for `quiet`.
pub fn read_all(topic: &str, quiet: Duration) -> BTreeMap<i32, Vec<Rec>> {
    read_all_on(&local_broker(), topic, quiet)
}

pub fn read_all_on(broker: &ClientConfig, topic: &str, quiet: Duration) -> BTreeMap<i32, Vec<Rec>> {
    let c = reader_on(broker);
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    let partitions = md.topics().iter().find(|t| t.name() == topic).map_or(0, |t| t.partitions().len());
    let mut tpl = TopicPartitionList::new();
    let mut out = BTreeMap::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        out.insert(p, Vec::new());
    }
    c.assign(&tpl).expect("assign");
    // A loaded broker's first fetch can take longer than `quiet`: until the
    // records listed at the start have arrived, silence is not the end (for
    // at most REACH_END, in case a listed end is never reached).
    const REACH_END: Duration = Duration::from_secs(15);
    let mut ends: BTreeMap<i32, i64> = (0..partitions as i32)
        .filter_map(|p| match c.fetch_watermarks(topic, p, Duration::from_secs(10)) {
            Ok((low, high)) if high > low => Some((p, high)),
            _ => None,
        })
        .collect();
    let started = Instant::now();
    let mut last = Instant::now();
    while last.elapsed() < quiet || (!ends.is_empty() && started.elapsed() < REACH_END) {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                last = Instant::now();
                if ends.get(&m.partition()).is_some_and(|&end| m.offset() + 1 >= end) {
                    ends.remove(&m.partition());
                }
                let headers = m
                    .headers()
                    .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
                    .unwrap_or_default();
                out.entry(m.partition()).or_insert_with(Vec::new).push(Rec {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    timestamp: m.timestamp().to_millis(),
                    headers,
                });
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out
}

/// How many records `topic` holds, read by one consumer from the beginning
/// until it has seen `at_least` of them or `within` has passed. For waits:
/// unlike [`read_all`] with a short `quiet`, a slow first fetch (a loaded
/// broker) does not end the read early and read as "none yet".
pub fn count_records(topic: &str, at_least: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let c = reader();
    let mut tpl = TopicPartitionList::new();
    while tpl.count() == 0 && Instant::now() < deadline {
        let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        let partitions = md.topics().iter().find(|t| t.name() == topic).map_or(0, |t| t.partitions().len());
        for p in 0..partitions as i32 {
            tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        }
        if partitions == 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    c.assign(&tpl).expect("assign");
    let mut seen = 0;
    while seen < at_least && Instant::now() < deadline {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => seen += 1,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    seen
}

/// A free TCP port on loopback, never one this process was given before:
/// the port is let go at once, so two calls may get the same one from the
/// kernel (a proxy and the broker behind it were given one port, and the
/// proxy could not listen).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if GIVEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(port) {
            return port;
        }
    }
}

/// `GET path` on the admin endpoint: (status code, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_request(port, "GET", path, &[]).map(|r| (r.code, r.body))
}

/// An answer of the admin endpoint.
#[derive(Clone, Debug)]
pub struct HttpAnswer {
    pub code: u16,
    /// The status line and headers.
    pub head: String,
    pub body: String,
}

/// `METHOD path` with extra `headers` on the admin endpoint, one request per connection.
pub fn http_request(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Option<HttpAnswer> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Some(HttpAnswer { code, head: head.to_string(), body: body.to_string() })
}

/// A `dedupd run` process.
pub struct Daemon {
    pub child: Child,
    pub admin_port: u16,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `dedupd run` with the shipped settings file and `env` overrides,
    /// with the short session timeout the test broker needs to assign
    /// partitions in ~3 s rather than ~23 s.
    pub fn start(name: &str, env: &[(String, String)]) -> Daemon {
        let mut all: Vec<(String, String)> = vec![
            ("DEDUPD__KAFKA__SESSION_TIMEOUT_MS".into(), "6000".into()),
            ("DEDUPD__KAFKA__HEARTBEAT_INTERVAL_MS".into(), "500".into()),
        ];
        all.extend_from_slice(env);
        Daemon::spawn(name, &root(), &["run", "--config", "config/dedupd.toml"], &all)
    }

    /// Starts `dedupd ARGS` in `dir` with only the broker, a free admin port,
    /// the log level and `env` set (no `DEDUPD_CONFIG`, librdkafka's default
    /// session timeout). Its output goes to
    /// `target/test-daemons/NAME-PID-N.log`. `DEDUPD_TEST_RUST_LOG` replaces
    /// the log level, e.g. `info,librdkafka=debug` with `DEDUPD__KAFKA__DEBUG=cgrp`
    /// in the environment to see every group join of every daemon.
    ///
    /// The admin endpoint listens on port 0 and the daemon's log names the
    /// port it got: a port picked here and bound later could be taken in
    /// between (an outgoing connection's ephemeral port once was, in CI).
    /// So this returns once the daemon has logged its admin address, or
    /// has exited (its test then sees why).
    pub fn spawn(name: &str, dir: &std::path::Path, args: &[&str], env: &[(String, String)]) -> Daemon {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let logs = root().join("target/test-daemons");
        std::fs::create_dir_all(&logs).unwrap();
        let log = logs.join(format!("{name}-{}-{n}.log", std::process::id()));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_dedupd"))
            .args(args)
            .current_dir(dir)
            .env_remove("DEDUPD_CONFIG")
            .env_remove("DEDUPD__KAFKA__SESSION_TIMEOUT_MS")
            .env("DEDUPD__KAFKA__BROKERS", broker())
            .env("DEDUPD__ADMIN__LISTEN", "127.0.0.1:0")
            .env(
                "RUST_LOG",
                std::env::var("DEDUPD_TEST_RUST_LOG").unwrap_or_else(|_| "info,librdkafka=warn,rdkafka=warn".into()),
            )
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("start dedupd");
        let mut daemon = Daemon { child, admin_port: 0, log };
        daemon.admin_port = daemon.wait_admin_port(Duration::from_secs(60));
        daemon
    }

    /// The port of the log line "admin endpoint on http://127.0.0.1:PORT",
    /// once it is there; 0 if the process exits first (a start-up error).
    fn wait_admin_port(&mut self, within: Duration) -> u16 {
        const LINE: &str = "admin endpoint on http://127.0.0.1:";
        let deadline = Instant::now() + within;
        loop {
            let text = self.log_text();
            if let Some(at) = text.find(LINE) {
                let digits: String = text[at + LINE.len()..].chars().take_while(char::is_ascii_digit).collect();
                return digits.parse().unwrap_or_else(|_| panic!("no port after {LINE:?}:\n{text}"));
            }
            if self.child.try_wait().unwrap().is_some() {
                return 0;
            }
            assert!(Instant::now() < deadline, "dedupd named no admin port within {within:?}:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Where each thread of the running process is, for a test that finds
    /// it stuck: gdb's backtrace of every thread and the kernel's state of
    /// each (a note instead where gdb is missing or cannot attach).
    pub fn thread_stacks(&self) -> String {
        let pid = self.child.id();
        let states = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .flatten()
                    .map(|t| {
                        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
                        format!(
                            "{} {} wchan={}",
                            read("comm").trim(),
                            read("stat").split(' ').nth(2).unwrap_or("?"),
                            read("wchan")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|e| format!("no /proc/{pid}/task: {e}"));
        let gdb = Command::new("gdb")
            .args(["-batch", "-p", &pid.to_string(), "-ex", "thread apply all bt"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("gdb: {e}"));
        format!("threads of pid {pid}:\n{states}\n{gdb}")
    }

    /// Waits until the log contains `needle`; panics (with the log) if the
    /// process exits first or `within` passes.
    pub fn wait_log(&mut self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.log_text().contains(needle) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("dedupd exited ({status}) before logging {needle:?}:\n{}", self.log_text());
            }
            assert!(Instant::now() < deadline, "dedupd did not log {needle:?} within {within:?}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `who` ("router", "slice workers") has said that it joins
    /// consumer group `group` and waits for an assignment, and then that
    /// the assignment arrived.
    pub fn wait_joined(&mut self, who: &str, group: &str, within: Duration) {
        let waiting = format!("{who}: joining consumer group {group} for topics ");
        self.wait_log(&waiting, within);
        let line = self.log_text().lines().find(|l| l.contains(&waiting)).unwrap_or_default().to_string();
        assert!(line.ends_with(", waiting for an assignment"), "{line}");
        self.wait_log(&format!("(group {group}) after "), within);
        let assigned =
            self.log_text().lines().find(|l| l.contains(&format!("(group {group}) after "))).map(str::to_string);
        assert!(assigned.is_some_and(|l| l.contains(&format!("{who}: assigned "))), "{}", self.log_text());
    }

    /// A clean run (no kill, no bad input, no broker trouble) logs no WARN
    /// or ERROR line: panics listing those it did log.
    pub fn assert_clean_log(&self) {
        self.assert_clean_log_but(|_| false);
    }

    /// No WARN or ERROR line in the log but those `expected` accepts.
    fn assert_clean_log_but(&self, expected: impl Fn(&str) -> bool) {
        let text = self.log_text();
        let bad: Vec<&str> = warnings_and_errors(&text).into_iter().filter(|l| !expected(l)).collect();
        assert!(
            bad.is_empty(),
            "{} WARN/ERROR line(s) in the log of a clean run ({}):\n{}",
            bad.len(),
            self.log.display(),
            bad.join("\n")
        );
    }

    /// [`Self::assert_clean_log`], but for what the test broker's
    /// out-of-order sequence answer to a router causes (docs/dev/broker.md,
    /// finding 12): librdkafka's lines about it and the router starting
    /// again. Tests of two routers writing one slice log, where it happens
    /// under load; what the daemon makes of it is asserted by
    /// `a_router_whose_producer_fails_starts_again_and_loses_nothing`.
    pub fn assert_clean_log_but_router_restarts(&self) {
        self.assert_clean_log_but(|l| {
            l.contains("OutOfOrderSequenceNumber")
                || l.contains("out of order sequence number")
                || l.contains("router: its producer failed")
        });
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("dedupd exited early ({status}):\n{}", self.log_text());
            }
            if http_get(self.admin_port, "/readyz").is_some_and(|(code, _)| code == 200) {
                return;
            }
            assert!(Instant::now() < deadline, "dedupd not ready after {within:?}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A series of its `/metrics` (name and labels, as rendered), 0 if absent.
    pub fn metric(&self, series: &str) -> u64 {
        let (_, text) = http_get(self.admin_port, "/metrics").expect("/metrics answers");
        let value = text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok()));
        value.map_or(0, |v| v as u64)
    }

    /// The per-slice status, or None if the endpoint does not answer.
    pub fn slices(&self) -> Option<serde_json::Value> {
        let (code, body) = http_get(self.admin_port, "/v1/slices")?;
        (code == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }

    /// SIGKILL: no chance to flush or snapshot.
    pub fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// Waits for the process to exit by itself (e.g. on a fatal error);
    /// panics, with the log, if it is still running after `within`.
    pub fn wait_exit(&mut self, within: Duration, why: &str) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "{why}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self, within: Duration) -> std::process::ExitStatus {
        unsafe_sigterm(self.child.id());
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "dedupd did not stop within {within:?}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill();
        }
    }
}

fn unsafe_sigterm(pid: u32) {
    Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill -TERM");
}

/// The WARN and ERROR lines of a daemon log (env_logger's
/// `[TIME LEVEL TARGET] message` lines).
pub fn warnings_and_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.strip_prefix('[')
                .and_then(|rest| rest.split_whitespace().nth(1))
                .is_some_and(|level| level == "WARN" || level == "ERROR")
        })
        .collect()
}

/// Starts daemon `name` with `env`, then `kills` times lets it run
/// `min_delay` plus up to 3 s (random, from a schedule seed it prints) and
/// SIGKILLs and restarts it. Some kills land in the middle of restoring or
/// replaying (one in four does not wait for `/readyz`), most while
/// processing. Returns the running daemon and the logs of the killed ones.
pub fn kill_storm(
    name: &str,
    env: &[(String, String)],
    kills: u32,
    min_delay: Duration,
    produced: &AtomicU64,
) -> (Daemon, String) {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("{name}: kill schedule seed {seed}");
    let mut rng = Rng::new(seed);
    let mut daemon = Daemon::start(name, env);
    let mut logs = String::new();
    for kill in 1..=kills {
        if kill == kills {
            // The last kill comes after a snapshot, so that the final
            // restart restores one (the tests check it): an early schedule
            // could otherwise kill every incarnation before its first.
            daemon.wait_ready(Duration::from_secs(60));
            wait_for("a snapshot before the last kill", Duration::from_secs(60), || {
                matches!(daemon.slices(), Some(serde_json::Value::Array(s))
                    if s.iter().any(|s| !s["last_checkpoint_offset"].is_null()))
            });
        } else if rng.below(4) > 0 {
            daemon.wait_ready(Duration::from_secs(60));
        }
        let delay = min_delay + Duration::from_millis(rng.below(3000));
        std::thread::sleep(delay);
        daemon.kill();
        logs.push_str(&daemon.log_text());
        eprintln!("{name}: kill {kill} after {delay:?} ({} records produced)", produced.load(Ordering::Relaxed));
        daemon = Daemon::start(name, env);
    }
    (daemon, logs)
}

/// Sum over daemons of a counter in `/v1/slices` (e.g. "distinct").
pub fn slice_total(daemons: &[&Daemon], fields: &[&str]) -> u64 {
    let mut total = 0;
    for d in daemons {
        if let Some(serde_json::Value::Array(slices)) = d.slices() {
            for s in slices {
                for f in fields {
                    total += s[*f].as_u64().unwrap_or(0);
                }
            }
        }
    }
    total
}

/// Waits until a background producer has written more than `n` records
/// (`produced` counts them), however slow the broker's produce path is
/// (the tests' producers open a producer per batch): a kill storm then
/// always has a stream running through it.
pub fn wait_produced(produced: &AtomicU64, n: u64) {
    wait_for(&format!("more than {n} records produced"), Duration::from_secs(60), || {
        produced.load(Ordering::Relaxed) > n
    });
}

/// Waits until `done()` holds, polling; fails after `within`.
pub fn wait_for(what: &str, within: Duration, done: impl FnMut() -> bool) {
    wait_for_else(what, within, done, || {});
}

/// [`wait_for`], calling `report` before it fails on a timeout (to print
/// what the test waited on).
fn wait_for_else(what: &str, within: Duration, mut done: impl FnMut() -> bool, report: impl FnOnce()) {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            report();
            panic!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until the slices of `daemons` have judged `total` records (the sum
/// of `fields` in `/v1/slices`) for as long as they make progress: it fails
/// only after `stall` without a new judgment (a fixed deadline fails a
/// slow machine that is still working), printing what each daemon's slices
/// hold and the end of its log — what a stuck record waits for.
pub fn wait_judged(daemons: &[&Daemon], fields: &[&str], total: u64, stall: Duration) {
    let started = Instant::now();
    let mut last = (slice_total(daemons, fields), Instant::now());
    while last.0 < total {
        std::thread::sleep(Duration::from_millis(250));
        let now = slice_total(daemons, fields);
        if now > last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= stall {
            print_slices_and_log_tails(daemons);
            panic!("{} of {total} records judged, none more for {stall:?}", last.0);
        }
    }
    eprintln!("all {total} records judged {:.1} s after the wait began", started.elapsed().as_secs_f64());
}

/// What each daemon's slices hold and the end of its log: what a stuck
/// record waits for.
fn print_slices_and_log_tails(daemons: &[&Daemon]) {
    for d in daemons {
        let log = d.log_text();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        eprintln!("{}: slices {}", d.log.display(), serde_json::to_string(&d.slices()).unwrap_or_default());
        for line in tail.iter().rev() {
            eprintln!("  {line}");
        }
    }
}

/// Waits until the daemons have judged `total` records (by `/v1/slices`);
/// on a timeout, prints their slices and log tails before failing.
pub fn wait_processed(daemons: &[&Daemon], total: u64, within: Duration) {
    wait_for_else(
        &format!("{total} records processed"),
        within,
        || slice_total(daemons, &["distinct", "duplicates", "invalid"]) >= total,
        || print_slices_and_log_tails(daemons),
    );
}

/// Settings for a test app: topics named after `app`.
pub fn app_env(app: &str, input: &str, mode: &str, slices: u32) -> Vec<(String, String)> {
    [
        ("DEDUPD__APP__ID", app.to_string()),
        ("DEDUPD__INPUT__TOPICS", input.to_string()),
        ("DEDUPD__INPUT__KEY", "json:/id".to_string()),
        ("DEDUPD__INPUT__TIME", "json:/ts".to_string()),
        ("DEDUPD__SLICING__MODE", mode.to_string()),
        ("DEDUPD__FILTER__SLICES", slices.to_string()),
        ("DEDUPD__FILTER__WINDOW", "60s".to_string()),
        ("DEDUPD__FILTER__EXPECTED_KEYS", "20000".to_string()),
        ("DEDUPD__OUTPUT__TOPIC", format!("{app}.out")),
        ("DEDUPD__OUTPUT__DEAD_LETTER_TOPIC", format!("{app}.dlq")),
        ("DEDUPD__CHECKPOINT__TOPIC", format!("{app}.ckpt")),
        ("DEDUPD__CHECKPOINT__INTERVAL", "1s".to_string()),
        ("DEDUPD__CHECKPOINT__INTERVAL_RECORDS", "500".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Event time of the first test record.
pub const BASE_TS: i64 = 1_700_000_000_000;

/// The partition a key goes to when the input is partitioned by the dedup key.
pub fn partition_of(id: &str, partitions: u32) -> i32 {
    let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (h % u64::from(partitions)) as i32
}

/// A JSON click `{"id", "ts", "seq"}` keyed by its id.
pub fn click(seq: u64, id: &str, ts: i64, partition: i32) -> Rec {
    Rec::new(partition, id, &format!("{{\"id\":\"{id}\",\"ts\":{ts},\"seq\":{seq}}}"), ts)
}

/// Produces a keyed click stream until `stop`, in batches, and counts it.
/// Keys come from a pool of 3000, timestamps advance 25 ms per record, so
/// the stream outlives the 60 s window and keys come back both inside and
/// after it. The stream is out of order, as real ones are: every record's
/// time is jittered by up to 1.5 s (within the 2 s lateness), 1% arrive 3–6 s
/// late (judged at their own time), and 1 in 2000 is a day in the future
/// (a broken producer clock: dead-lettered as a time jump).
pub fn keyed_stream(
    topic: String,
    partitions: u32,
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
    seed: u64,
) -> std::thread::JoinHandle<()> {
    keyed_stream_with(topic, partitions, stop, produced, seed, true)
}

/// [`keyed_stream`]; without `late_records`, no record is more than the
/// lateness (2 s) behind the others: an exact oracle's verdicts then do not
/// depend on how the records of different partitions interleave.
pub fn keyed_stream_with(
    topic: String,
    partitions: u32,
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
    seed: u64,
    late_records: bool,
) -> std::thread::JoinHandle<()> {
    keyed_stream_late_by(topic, partitions, stop, produced, seed, late_records.then_some(3_000))
}

/// [`keyed_stream`] with its 1% of late records `late_by_ms` to that plus
/// 3 s behind (none with `None`): a run with a longer lateness keeps them late.
pub fn keyed_stream_late_by(
    topic: String,
    partitions: u32,
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
    seed: u64,
    late_by_ms: Option<i64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // One producer for the whole stream: one per batch (a new
        // connection each time) could pause the stream for seconds on a
        // loaded machine. A pause past the lateness lets a reader that is
        // caught up flush its idle slices where one that lags does not (a
        // live idle flush follows the wall clock; only a replay follows the
        // logged one: docs/design.md, invariant 7), and two independent
        // runs' outputs then differ for a reason the tests do not judge.
        let p = test_producer(&local_broker());
        let mut rng = Rng::new(seed);
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let batch: Vec<Rec> = (0..150)
                .map(|_| {
                    let id = format!("k{}", rng.below(3000));
                    let mut ts = BASE_TS + seq as i64 * 25 + rng.below(1_500) as i64;
                    // Drawn whether or not the stream has late records: the same seed, the same keys.
                    let late = rng.below(100) == 0;
                    if let Some(late_by_ms) = late_by_ms.filter(|_| late) {
                        ts -= late_by_ms + rng.below(3_000) as i64;
                    } else if rng.below(2_000) == 0 {
                        ts += 86_400_000;
                    }
                    let r = click(seq, &id, ts, partition_of(&id, partitions));
                    seq += 1;
                    r
                })
                .collect();
            produce_by(&p, &topic, &batch);
            produced.fetch_add(batch.len() as u64, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(250));
        }
    })
}

/// The `seq` of every record of `app`'s output (`<app>.out`), read through `client`, sorted.
pub fn output_seqs(client: &ClientConfig, app: &str) -> Vec<u64> {
    let out = read_all_on(client, &format!("{app}.out"), Duration::from_secs(3));
    let mut seqs: Vec<u64> = out
        .values()
        .flatten()
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(r.value.as_deref().unwrap()).unwrap()["seq"].as_u64().unwrap()
        })
        .collect();
    seqs.sort_unstable();
    seqs
}

/// A broker of its own that advertises the port of a proxy in front of it
/// (scripts/produce_block_proxy.py), the proxy holding back the Produce
/// requests for `topic` between [`ProduceProxy::hold`] and
/// [`ProduceProxy::release`]: with `lag`, only those requests (the
/// connection's others are answered); without, the connection's every
/// request from the first of them on (the topic does not accept writes).
pub struct ProduceProxy {
    _broker: Proc,
    proxy: Proc,
    proxy_log: PathBuf,
    mode: ProxyMode,
    pub client: ClientConfig,
}

/// What a [`ProduceProxy`] does between `hold` and `release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Holds the connection's every request from the first Produce naming the topic on.
    Block,
    /// Holds only the Produce requests naming the topic.
    Lag,
    /// Takes the first record batch out of one Fetch answer (holding two or
    /// more of a partition) to the client whose `client.id` ends so.
    SkipBatch(&'static str),
    /// Answers one Produce request of the client whose `client.id` ends so
    /// with OUT_OF_ORDER_SEQUENCE_NUMBER (its records stored all the same).
    FailProduce(&'static str),
}

impl ProduceProxy {
    pub fn new(dir: &Path, topic: &str, lag: bool) -> ProduceProxy {
        Self::with_mode(dir, topic, if lag { ProxyMode::Lag } else { ProxyMode::Block })
    }

    pub fn with_mode(dir: &Path, topic: &str, mode: ProxyMode) -> ProduceProxy {
        let proxy_port = free_port();
        let (broker, broker_port) = own_broker_advertising(dir, Some(proxy_port), &[]);
        let proxy_log = dir.join("proxy.log");
        let script = root().join("scripts/produce_block_proxy.py");
        let (port, to) = (proxy_port.to_string(), format!("127.0.0.1:{broker_port}"));
        let mut args = vec![script.to_str().unwrap(), "--listen", &port, "--to", &to, "--topic", topic];
        // `=`: a suffix may start with a dash.
        let rewrite = match mode {
            ProxyMode::SkipBatch(suffix) => format!("--skip-batch={suffix}"),
            ProxyMode::FailProduce(suffix) => format!("--fail-produce={suffix}"),
            _ => String::new(),
        };
        match mode {
            ProxyMode::Block => {}
            ProxyMode::Lag => args.push("--lag"),
            ProxyMode::SkipBatch(_) | ProxyMode::FailProduce(_) => args.push(&rewrite),
        }
        let proxy = start_in(dir, Path::new("python3"), &args, &proxy_log, proxy_port);
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", format!("127.0.0.1:{proxy_port}"));
        ProduceProxy { _broker: broker, proxy, proxy_log, mode, client }
    }

    /// The address clients (the daemon) bootstrap from.
    pub fn brokers(&self) -> String {
        self.client.get("bootstrap.servers").unwrap().to_string()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.proxy.0.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig} the proxy");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.proxy_log).unwrap_or_default()
    }

    pub fn hold(&self) {
        self.signal("-USR1");
        let said = match self.mode {
            ProxyMode::Block => " blocked (",
            ProxyMode::Lag => " lagging (",
            ProxyMode::SkipBatch(_) => "skip-batch armed",
            ProxyMode::FailProduce(_) => "fail-produce armed",
        };
        wait_for("the proxy to hold", Duration::from_secs(5), || self.log().contains(said));
    }

    pub fn release(&self) {
        self.signal("-USR2");
        let said = match self.mode {
            ProxyMode::SkipBatch(_) => "skip-batch disarmed",
            ProxyMode::FailProduce(_) => "fail-produce disarmed",
            _ => " writable (",
        };
        wait_for("the proxy to pass everything on", Duration::from_secs(5), || self.log().contains(said));
    }

    pub fn read(&self, topic: &str, quiet: Duration) -> BTreeMap<i32, Vec<Rec>> {
        read_all_on(&self.client, topic, quiet)
    }
}

/// A process of the test (a broker of its own, a proxy), killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Starts `program args`, its output appended to `log`, and waits until
/// 127.0.0.1:`port` accepts connections.
pub fn start(program: &Path, args: &[&str], log: &Path, port: u16) -> Proc {
    start_in(&std::env::current_dir().unwrap(), program, args, log, port)
}

/// [`start`] in the working directory `dir`.
pub fn start_in(dir: &Path, program: &Path, args: &[&str], log: &Path, port: u16) -> Proc {
    try_start_in(dir, program, args, log, port).unwrap_or_else(|exit| panic!("{exit}"))
}

/// [`start_in`], but an early exit is returned (with the log) instead of a panic.
fn try_start_in(dir: &Path, program: &Path, args: &[&str], log: &Path, port: u16) -> Result<Proc, String> {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let mut p = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = p.0.try_wait().unwrap() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("{} exited ({status}):\n{text}", program.display()));
        }
        assert!(Instant::now() < deadline, "{} does not listen on {port}", program.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(p)
}

/// A broker (Nisshi) of its own on a free port, working in `dir`, with
/// `extra` arguments such as `--cert`/`--key` (TLS), `--authentication`
/// (SASL, which needs `--storage-engine sqlite://NAME.db`, a file in `dir`:
/// memory storage keeps no users).
pub fn own_broker(dir: &Path, extra: &[&str]) -> (Proc, u16) {
    own_broker_advertising(dir, None, extra)
}

/// [`own_broker`], advertising `advertised` (a proxy's port) instead of its
/// own when given: clients bootstrap anywhere, then connect to that port
/// (scripts/produce_block_proxy.py passes every request on to the broker).
pub fn own_broker_advertising(dir: &Path, advertised: Option<u16>, extra: &[&str]) -> (Proc, u16) {
    broker(); // installs target/tools/nisshi (scripts/broker.sh) if missing
    // A free port can be taken before the broker binds it (by an outgoing
    // connection's ephemeral port): then the broker exits, and another
    // port is tried.
    let mut exits = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised_url = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(port));
        let mut args = vec!["broker", "--listener-url", &url, "--advertised-listener-url", &advertised_url, "--silent"];
        args.extend_from_slice(extra);
        let log = dir.join(format!("broker-{port}.log"));
        match try_start_in(dir, &root().join("target/tools/nisshi"), &args, &log, port) {
            Ok(p) => return (p, port),
            Err(exit) => exits.push(exit),
        }
    }
    panic!("the broker did not start on three free ports:\n{}", exits.join("\n"))
}
