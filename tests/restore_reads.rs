//! Restore reads time out on a lack of progress, not on their total time.
//!
//! A read that fails on its total time fails again after every restart (a
//! crash loop on a large partition or a slow broker); one that fails when
//! nothing arrives for a while stops only a read that is stuck. The broker is
//! reached through `scripts/produce_block_proxy.py --slow-fetch`, which passes
//! its answers on at a fixed rate, so that reading a snapshot of a few MiB
//! takes seconds while its chunks keep arriving. The stall timeout is
//! shortened to 3 s through `DEDUPD_READ_STALL_TIMEOUT_MS`.
//!
//! Needs the local broker's binary (`scripts/broker.sh install`) and python3.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use support::*;

const STALL_MS: &str = "3000";
const RECORDS: u64 = 200;

/// A proxy in front of the test's own broker, restarted at another rate on
/// the same port (the broker advertises that port).
struct Proxy {
    port: u16,
    broker_port: u16,
    dir: PathBuf,
    proc: Option<Proc>,
}

impl Proxy {
    fn start(&mut self, slow_fetch: Option<u64>) {
        self.proc = None;
        let script = root().join("scripts/produce_block_proxy.py");
        let (listen, to) = (self.port.to_string(), format!("127.0.0.1:{}", self.broker_port));
        let rate = slow_fetch.map(|r| r.to_string());
        let mut args = vec![script.to_str().unwrap(), "--listen", &listen, "--to", &to, "--topic", "none"];
        if let Some(rate) = &rate {
            args.extend(["--slow-fetch", rate]);
        }
        let log = self.dir.join(format!("proxy-{}.log", slow_fetch.unwrap_or(0)));
        self.proc = Some(start_in(&self.dir, Path::new("python3"), &args, &log, self.port));
    }

    fn client(&self) -> ClientConfig {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", format!("127.0.0.1:{}", self.port));
        client
    }
}

fn env(app: &str, input: &str, proxy: &Proxy, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = app_env(app, input, "input-partitions", 1);
    env.extend(
        [
            ("DEDUPD__KAFKA__BROKERS", format!("127.0.0.1:{}", proxy.port)),
            // A snapshot of about 6.6 MiB, in 512 KiB chunks.
            ("DEDUPD__FILTER__EXPECTED_KEYS", "600000".into()),
            ("DEDUPD_READ_STALL_TIMEOUT_MS", STALL_MS.into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

/// The duration of the checkpoint read the log reports ("read N checkpoint
/// records, X MiB in Y ms").
fn checkpoint_read(log: &str) -> Option<(f64, f64)> {
    let line = log.lines().find(|l| l.contains(" checkpoint records, "))?;
    let mib = line.split(" checkpoint records, ").nth(1)?.split(" MiB").next()?.parse().ok()?;
    let ms = line.split(" MiB in ").nth(1)?.split(" ms").next()?.parse().ok()?;
    Some((mib, ms))
}

/// A snapshot whose read takes over twice the stall timeout, with chunks
/// arriving all along, restores; a read that gets nothing for the stall
/// timeout fails with an error naming the partition, how far it got and for
/// how long nothing came.
#[test]
fn a_slow_restore_read_that_makes_progress_completes() {
    let dir = std::env::temp_dir().join(unique("dedupd-restore-reads"));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let (_broker, broker_port) = own_broker_advertising(&dir, Some(port), &[]);
    let mut proxy = Proxy { port, broker_port, dir: dir.clone(), proc: None };
    proxy.start(None);

    let app = unique("restore-reads");
    let input = unique("restore-reads-in");
    create_topic_on(&proxy.client(), &input, 1);
    let records: Vec<Rec> = (0..RECORDS).map(|s| click(s, &format!("k{s}"), BASE_TS + s as i64 * 10, 0)).collect();
    produce_on(&proxy.client(), &input, &records);

    // A snapshot at the end of the input, written at full speed.
    let mut first = Daemon::start("restore-reads-first", &env(&app, &input, &proxy, &[]));
    wait_processed(&[&first], RECORDS, Duration::from_secs(60));
    wait_for("a snapshot at the end of the input", Duration::from_secs(30), || {
        matches!(first.slices(), Some(serde_json::Value::Array(s))
            if s.len() == 1 && s[0]["last_checkpoint_offset"].as_u64() == Some(RECORDS))
    });
    assert!(first.terminate(Duration::from_secs(60)).success(), "{}", first.log_text());

    // 800 kB/s and fetches of at most 1 MB: the read takes about 8 s, with
    // a chunk or two arriving every second or so.
    proxy.start(Some(800_000));
    let fetch = [("DEDUPD__KAFKA__MAX_PARTITION_FETCH_BYTES", "262144"), ("DEDUPD__KAFKA__FETCH_MAX_BYTES", "1000000")];
    let mut slow = Daemon::start("restore-reads-slow", &env(&app, &input, &proxy, &fetch));
    slow.wait_log("slice 0: restored in ", Duration::from_secs(120));
    let log = slow.log_text();
    assert!(log.contains("slice 0: restored from Snapshot"), "{log}");
    let (mib, ms) = checkpoint_read(&log).unwrap_or_else(|| panic!("no checkpoint read logged:\n{log}"));
    assert!(mib >= 6.0, "the snapshot should be several MiB, read {mib} MiB:\n{log}");
    assert!(ms >= 2.0 * 3000.0, "the read should take longer than two stall timeouts, took {ms} ms:\n{log}");
    assert!(slow.terminate(Duration::from_secs(120)).success(), "{}", slow.log_text());

    // 4 KiB/s: the first fetch of chunks does not arrive within the stall timeout.
    proxy.start(Some(4096));
    let mut stuck = Daemon::start("restore-reads-stuck", &env(&app, &input, &proxy, &[]));
    let status = stuck.wait_exit(Duration::from_secs(120), "a read that gets nothing should fail");
    let log = stuck.log_text();
    assert!(!status.success(), "{log}");
    let ckpt = format!("reading {app}.ckpt/0 from offset ");
    let line = log.lines().find(|l| l.contains(&ckpt)).unwrap_or_else(|| panic!("no error naming {ckpt:?}:\n{log}"));
    assert!(line.contains("nothing arrived for 3."), "{line}");
    assert!(line.contains("stopped at offset ") && line.contains(" records in "), "{line}");
    assert!(!log.contains("restored from Snapshot"), "{log}");
}

/// The newest manifest of slice 0 in `topic`, as JSON.
fn newest_manifest(topic: &str) -> serde_json::Value {
    let all = read_all(topic, Duration::from_secs(1));
    let last = all[&0].iter().rev().find(|r| r.key.as_deref() == Some(b"0/manifest")).expect("a manifest");
    serde_json::from_slice(last.value.as_deref().expect("not a tombstone")).unwrap()
}

/// Writes the newest manifest of slice 0 again without `flush_log_offset`,
/// as builds before it wrote it.
fn drop_flush_log_offset(topic: &str) {
    let mut manifest = newest_manifest(topic);
    assert!(manifest["flush_log_offset"].is_u64(), "{manifest}");
    manifest.as_object_mut().unwrap().remove("flush_log_offset");
    produce(topic, &[Rec::new(0, "0/manifest", &manifest.to_string(), BASE_TS)]);
}

/// `n` records of distinct keys from `first` on; the last ones wait for the
/// watermark until an idle flush (logged in the flush log) judges them.
fn distinct(first: u64, n: u64) -> Vec<Rec> {
    (first..first + n).map(|s| click(s, &format!("k{s}"), BASE_TS + s as i64 * 10, 0)).collect()
}

fn wait_snapshot_at(daemon: &Daemon, offset: u64) {
    wait_for(&format!("a snapshot at offset {offset}"), Duration::from_secs(60), || {
        matches!(daemon.slices(), Some(serde_json::Value::Array(s))
            if s.len() == 1 && s[0]["last_checkpoint_offset"].as_u64() == Some(offset))
    });
}

/// A restore reads the flush log from the offset its snapshot's manifest
/// names: a record that is no flush record, logged before that offset,
/// is never read (a read from the start stops at it). A manifest without
/// the offset (an earlier build's) still restores, reading from the start.
#[test]
fn the_flush_log_is_read_from_the_offset_the_snapshot_names() {
    let app = unique("flush-from");
    let input = unique("flush-from-in");
    create_topic(&input, 1);
    let (ckpt, flushes) = (format!("{app}.ckpt"), format!("{app}.flushes"));
    let env = || app_env(&app, &input, "input-partitions", 1);

    // A snapshot after an idle flush.
    produce(&input, &distinct(0, 50));
    let mut first = Daemon::start("flush-from-first", &env());
    wait_processed(&[&first], 50, Duration::from_secs(60));
    wait_snapshot_at(&first, 50);
    assert!(first.terminate(Duration::from_secs(60)).success(), "{}", first.log_text());
    let logged = read_all(&flushes, Duration::from_secs(1))[&0].len() as u64;
    assert!(logged >= 1, "an idle flush should be logged");
    assert!(newest_manifest(&ckpt)["flush_log_offset"].as_u64() == Some(logged), "{}", newest_manifest(&ckpt));

    // As an earlier build wrote it: restored, the flush log read from its start.
    drop_flush_log_offset(&ckpt);
    let mut second = Daemon::start("flush-from-second", &env());
    second.wait_log("slice 0: restored in ", Duration::from_secs(60));
    assert!(second.log_text().contains("slice 0: restored from Snapshot"), "{}", second.log_text());
    // Not a flush record, before the offset the next snapshot names.
    produce(&flushes, &[Rec::new(0, "x", "not a flush record", BASE_TS)]);
    let garbage = read_all(&flushes, Duration::from_secs(1))[&0].last().unwrap().offset as u64;
    produce(&input, &distinct(50, 50));
    wait_processed(&[&second], 100, Duration::from_secs(60));
    wait_snapshot_at(&second, 100);
    assert!(second.terminate(Duration::from_secs(60)).success(), "{}", second.log_text());
    let from = newest_manifest(&ckpt)["flush_log_offset"].as_u64().expect("flush_log_offset");
    assert!(from > garbage, "the snapshot should name an offset after {garbage}, names {from}");

    // Read from there: the garbage is never read.
    let mut third = Daemon::start("flush-from-third", &env());
    third.wait_log("slice 0: restored in ", Duration::from_secs(60));
    assert!(third.log_text().contains("slice 0: restored from Snapshot"), "{}", third.log_text());
    assert!(third.terminate(Duration::from_secs(60)).success(), "{}", third.log_text());

    // Without the offset, read from the start: the garbage stops the restore.
    drop_flush_log_offset(&ckpt);
    let mut fourth = Daemon::start("flush-from-fourth", &env());
    let status = fourth.wait_exit(Duration::from_secs(60), "a read from the start should meet the garbage");
    assert!(!status.success());
    let needle = format!("{flushes}/0 offset {garbage} is not a dedupd flush record");
    assert!(fourth.log_text().contains(&needle), "{needle:?}:\n{}", fourth.log_text());
}
