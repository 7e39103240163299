//! Faults on the real broker that fit in CI (issue 19); the longer ones
//! (20 SIGKILLs per slicing mode, a 30 s broker outage, the soak) are in
//! `scripts/faults.sh`, their figures in docs/reliability.md.

mod support;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dedupd::engine::ReleasePos;
use support::*;

fn signal(d: &Daemon, sig: &str) {
    let status = Command::new("kill").args([sig, &d.child.id().to_string()]).status().expect("kill");
    assert!(status.success(), "kill {sig}");
}

/// The output of `topic` as a downstream consumer that keeps the highest
/// release position per partition sees it: (value → times delivered, copies
/// dropped because their release position is not above the last one). A
/// correct output only ever increases; a record a stopped member had queued
/// and sent on waking, after the slice's next owner went on, repeats an
/// earlier position (docs/reliability.md).
fn delivered(topic: &str) -> (HashMap<Vec<u8>, usize>, usize) {
    let (mut n, mut dropped) = (HashMap::new(), 0);
    for recs in read_all(topic, Duration::from_secs(3)).into_values() {
        let mut last: Option<ReleasePos> = None;
        for r in recs {
            let pos = r.header("dedupd.release").and_then(ReleasePos::parse).expect("a release position");
            if last.is_some_and(|l| pos <= l) {
                dropped += 1;
                continue;
            }
            last = Some(pos);
            *n.entry(r.value.unwrap_or_default()).or_default() += 1;
        }
    }
    (n, dropped)
}

fn idle_flushes(d: &Daemon) -> f64 {
    let (_, text) = http_get(d.admin_port, "/metrics").expect("/metrics");
    text.lines()
        .filter(|l| l.starts_with("dedupd_idle_flushes_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A member of the group stopped (SIGSTOP) beyond `session.timeout.ms`
/// while another runs: the group gives its slices to the other member, and
/// when it wakes up it must not judge for them. Before the fix its slices,
/// idle by the wall clock on waking, were flushed at once: records the other
/// member had delivered went out a second time (14 in
/// `scripts/faults.sh daemon-pause`) and the flushes went into the flush log
/// that later restores replay. What it had queued in its producer when
/// stopped still goes out on waking (no broker transactions to fence it):
/// those copies repeat a release position and are dropped by the reader
/// here as docs/reliability.md tells consumers to. Compared with an
/// uninterrupted run of the same input: the same records, none twice.
#[test]
fn a_member_stopped_beyond_the_session_timeout_writes_nothing_twice() {
    let partitions = 4;
    let input = unique("clicks-paused");
    create_topic(&input, partitions as i32);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let producer = keyed_stream(input.clone(), partitions, stop.clone(), produced.clone(), 23);
    let app = unique("paused");
    let env = app_env(&app, &input, "input-partitions", partitions);
    let mut a = Daemon::start("paused-a", &env);
    a.wait_ready(Duration::from_secs(60));
    let mut b = Daemon::start("paused-b", &env);
    b.wait_ready(Duration::from_secs(60));
    let owns = |d: &Daemon| d.slices().and_then(|s| s.as_array().map(|a| a.len())).unwrap_or(0);
    wait_for("both members own slices", Duration::from_secs(60), || owns(&a) > 0 && owns(&b) > 0);
    std::thread::sleep(Duration::from_secs(3));

    // 10 s > session.timeout.ms = 6 s (Daemon::start).
    let flushes_before = idle_flushes(&a);
    signal(&a, "-STOP");
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(owns(&b), partitions as usize, "the running member should own every slice by now");
    signal(&a, "-CONT");
    std::thread::sleep(Duration::from_secs(8));
    assert!(a.child.try_wait().unwrap().is_none(), "the woken member should keep running:\n{}", a.log_text());
    assert_eq!(idle_flushes(&a), flushes_before, "the woken member flushed slices that were no longer its own");
    assert!(a.log_text().contains("stood still for"), "the woken member should notice its stall:\n{}", a.log_text());

    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(Ordering::Relaxed);
    wait_processed(&[&a, &b], total, Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(1));
    let (got, repeated) = delivered(&format!("{app}.out"));
    eprintln!("{repeated} outputs repeated an earlier release position (sent by the stopped member on waking)");
    for d in [&mut a, &mut b] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }

    let reference_app = unique("paused-ref");
    let mut reference = Daemon::start("paused-ref", &app_env(&reference_app, &input, "input-partitions", partitions));
    reference.wait_ready(Duration::from_secs(60));
    wait_processed(&[&reference], total, Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(1));
    let (want, none) = delivered(&format!("{reference_app}.out"));
    assert_eq!(none, 0, "an uninterrupted run's release positions increase");
    assert!(reference.terminate(Duration::from_secs(30)).success(), "{}", reference.log_text());

    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).map(|(v, _)| String::from_utf8_lossy(v)).collect();
    assert!(twice.is_empty(), "{} records delivered twice, e.g. {:?}", twice.len(), &twice[..twice.len().min(5)]);
    let lost = want.keys().filter(|v| !got.contains_key(*v)).count();
    let extra = got.keys().filter(|v| !want.contains_key(*v)).count();
    assert_eq!((lost, extra), (0, 0), "against the uninterrupted run of {} outputs", want.len());
    assert!(want.len() > 1000, "{} outputs", want.len());
}
