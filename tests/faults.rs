//! Faults on the real broker that fit in CI (issue 19); the longer ones
//! (20 SIGKILLs per slicing mode, a 30 s broker outage, the soak) are in
//! `scripts/faults.sh`, their figures in docs/reliability.md.

mod support;

use std::collections::{BTreeMap, HashMap};
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

/// The lateness these tests run with: an idle flush (a slice that received
/// nothing for the lateness, by the wall clock: on a loaded machine the
/// stream stalls now and then) releases everything a slice holds, in one
/// run and not the other, at different moments. Then the records after it
/// up to the jitter behind are late (repartition mode; seen: 1 393 late
/// records in a storm's reference with 2 s), and in input-partitions mode a
/// copy that comes after the flush but carries an earlier time is judged a
/// duplicate of the one the flush released (seen: `k1506` at input offsets
/// 1264 and 1270, 490 ms apart, after a storm member's logged flush after
/// 1264; and 1 missing, 1 extra in the stopped-member test). Each run is
/// right by its own flush log; the tests compare two. 10 s of silence does
/// not happen mid-stream.
const LATENESS: &str = "10s";

/// [`app_env`] with [`LATENESS`].
fn faults_env(app: &str, input: &str, mode: &str, slices: u32) -> Vec<(String, String)> {
    let mut env = app_env(app, input, mode, slices);
    env.push(("DEDUPD__INPUT__LATENESS".into(), LATENESS.into()));
    env
}

/// A keyed click stream (`keyed_stream`) flowing into a new topic until
/// [`Flow::finish`].
struct Flow {
    input: String,
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Flow {
    fn start(prefix: &str, partitions: u32, seed: u64) -> Flow {
        Self::start_with(prefix, partitions, seed, true)
    }

    /// Without `late_records`: see [`keyed_stream_with`]. With them, they
    /// are 12–15 s behind: late beyond [`LATENESS`] too.
    fn start_with(prefix: &str, partitions: u32, seed: u64, late_records: bool) -> Flow {
        let input = unique(prefix);
        create_topic(&input, partitions as i32);
        let stop = Arc::new(AtomicBool::new(false));
        let produced = Arc::new(AtomicU64::new(0));
        let late_by_ms = late_records.then_some(12_000);
        let thread = keyed_stream_late_by(input.clone(), partitions, stop.clone(), produced.clone(), seed, late_by_ms);
        Flow { input, stop, produced, thread }
    }

    /// Stops the stream; the number of records produced.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.produced.load(Ordering::Relaxed)
    }
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
    let flow = Flow::start("clicks-paused", partitions, 23);
    let input = flow.input.clone();
    let app = unique("paused");
    let env = faults_env(&app, &input, "input-partitions", partitions);
    let mut a = Daemon::start("paused-a", &env);
    a.wait_ready(Duration::from_secs(60));
    let mut b = Daemon::start("paused-b", &env);
    b.wait_ready(Duration::from_secs(60));
    let owns = |d: &Daemon| d.slices().and_then(|s| s.as_array().map(|a| a.len())).unwrap_or(0);
    wait_for("both members own slices", Duration::from_secs(60), || owns(&a) > 0 && owns(&b) > 0);
    std::thread::sleep(Duration::from_secs(3));

    // 12 s > session.timeout.ms = 6 s (Daemon::start), and > LATENESS: on
    // waking, its slices are idle by the wall clock.
    let flushes_before = idle_flushes(&a);
    signal(&a, "-STOP");
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(owns(&b), partitions as usize, "the running member should own every slice by now");
    signal(&a, "-CONT");
    std::thread::sleep(Duration::from_secs(8));
    assert!(a.child.try_wait().unwrap().is_none(), "the woken member should keep running:\n{}", a.log_text());
    assert_eq!(idle_flushes(&a), flushes_before, "the woken member flushed slices that were no longer its own");
    assert!(a.log_text().contains("stood still for"), "the woken member should notice its stall:\n{}", a.log_text());

    let total = flow.finish();
    wait_processed(&[&a, &b], total, Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(1));
    let (got, repeated) = delivered(&format!("{app}.out"));
    eprintln!("{repeated} outputs repeated an earlier release position (sent by the stopped member on waking)");
    for d in [&mut a, &mut b] {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }

    let reference_app = unique("paused-ref");
    let mut reference =
        Daemon::start("paused-ref", &faults_env(&reference_app, &input, "input-partitions", partitions));
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

/// A rebalance storm, bounded for CI (`scripts/faults.sh storm` runs it
/// for minutes): three members of one group, and every 3–5 s one of them
/// SIGKILLed, stopped cleanly (SIGTERM) or started again, 10 times, while
/// input flows and an uninterrupted daemon reads the same input. Each
/// partition's output must hold the uninterrupted one's records — key,
/// value, timestamp and slice offset — none twice, and every SIGTERM must
/// end its member cleanly. Order and release positions are not compared:
/// an idle flush (input silent for a moment by the wall clock, e.g. the
/// producer stalled on a loaded machine) releases the held records at
/// once, in either run, ahead of records the watermark would have put
/// first (seen: the reference flushed 20 s into the stream, the storm's
/// members did not).
#[test]
fn a_rebalance_storm_changes_no_output() {
    rebalance_storm("input-partitions", "timer");
}

/// The same storm in repartition mode: a killed member's router leaves its
/// input partitions unrouted until the group expires it, while the other
/// routers go on; the slices hold their watermark at those partitions'
/// announced progress (`slicing.max_held`), so the resumed records are in
/// order and each slice's output holds the same records (key, value,
/// timestamp) as the uninterrupted run's. Slice offsets are not compared:
/// the slice log of each run interleaves the routers' records and
/// progress records in its own way.
#[test]
fn a_rebalance_storm_changes_no_output_in_repartition_mode() {
    rebalance_storm("repartition", "timer");
}

/// The same storm in shared mode (docs/shared-mode.md): the one slice moves
/// between members, each time restored and replayed through the read
/// order, while the routers' input partitions move on their own.
#[test]
fn a_rebalance_storm_changes_no_output_in_shared_mode() {
    rebalance_storm("shared", "timer");
}

/// The repartition-mode storm with the cuckoo kind: its tables move with
/// the slices, restored from their snapshots, and judge as an uninterrupted
/// run's do.
#[test]
fn a_rebalance_storm_changes_no_output_with_the_cuckoo_kind() {
    rebalance_storm("repartition", "cuckoo");
}

fn rebalance_storm(mode: &str, kind: &str) {
    let partitions = 4;
    // Repartition mode: records are judged in event-time order within the
    // lateness (design invariant 7), and a record later than that gets a
    // verdict that depends on when it came relative to the other
    // partitions' records — which a storm changes. So that stream has none
    // (the input-partitions slices read the input partitions themselves:
    // their order never changes).
    let flow = Flow::start_with("clicks-storm", partitions, 31, mode == "input-partitions");
    let input = flow.input.clone();
    let reference_app = unique("storm-ref");
    // Every late record copied out, to see that none is (repartition mode).
    let with_late = |app: &str| {
        // Shared mode has one slice, whatever the partitions.
        let slices = if mode == "shared" { 1 } else { partitions };
        let mut env = faults_env(app, &input, mode, slices);
        if kind != "timer" {
            env.push(("DEDUPD__FILTER__KIND".into(), kind.into()));
        }
        env.push(("DEDUPD__OUTPUT__LATE_TOPIC".into(), format!("{app}.late")));
        env
    };
    let mut reference = Daemon::start("storm-ref", &with_late(&reference_app));
    reference.wait_ready(Duration::from_secs(60));

    let app = unique("storm");
    let env = with_late(&app);
    let mut members: Vec<Daemon> = (0..3).map(|i| Daemon::start(&format!("storm-m{i}"), &env)).collect();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("storm seed {seed}");
    let mut rng = dedupd::testkit::workload::Rng::new(seed);
    let mut stopped = Vec::new(); // members sent SIGTERM, checked for a clean exit at the end
    for step in 0..10 {
        std::thread::sleep(Duration::from_millis(3000 + rng.below(2000)));
        let alive: Vec<usize> = (0..3).filter(|&i| members[i].child.try_wait().unwrap().is_none()).collect();
        if alive.len() < 3 && (alive.len() == 1 || rng.below(2) == 0) {
            let slot = (0..3).find(|i| !alive.contains(i)).unwrap();
            let new = Daemon::start(&format!("storm-m{slot}"), &env);
            stopped.push(std::mem::replace(&mut members[slot], new));
            eprintln!("step {step}: start m{slot}");
        } else {
            let victim = alive[rng.below(alive.len() as u64) as usize];
            if rng.below(2) == 0 {
                members[victim].kill();
                eprintln!("step {step}: SIGKILL m{victim}");
            } else {
                signal(&members[victim], "-TERM");
                eprintln!("step {step}: SIGTERM m{victim}");
            }
        }
    }
    let total = flow.finish();
    for (slot, member) in members.iter_mut().enumerate() {
        if member.child.try_wait().unwrap().is_some() {
            let new = Daemon::start(&format!("storm-m{slot}"), &env);
            stopped.push(std::mem::replace(member, new));
        }
    }
    let all: Vec<&Daemon> = members.iter().collect();
    for (who, daemons) in [("reference", vec![&reference]), ("members", all.clone())] {
        let done = || slice_total(&daemons, &["distinct", "duplicates", "invalid"]) >= total;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while !done() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        if !done() {
            for d in &daemons {
                eprintln!("{who}: {}", d.thread_stacks());
                let log = d.log_text();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!("{who}: {:?}\nlast lines of its log:", d.slices());
                for line in tail.iter().rev() {
                    eprintln!("  {line}");
                }
            }
        }
        assert!(done(), "{who}: not every record of {total} judged");
    }
    std::thread::sleep(Duration::from_secs(1));

    let content = |topic: &str| -> BTreeMap<i32, Vec<_>> {
        read_all(topic, Duration::from_secs(3))
            .into_iter()
            .map(|(p, recs)| {
                let sig = |r: &Rec| {
                    let offset = r.header("dedupd.slice.offset").filter(|_| mode == "input-partitions");
                    (r.key.clone(), r.value.clone(), r.timestamp, offset.map(<[u8]>::to_vec))
                };
                let mut sigs: Vec<_> = recs.iter().map(sig).collect();
                sigs.sort();
                (p, sigs)
            })
            .collect()
    };
    let want = content(&format!("{reference_app}.out"));
    let got = content(&format!("{app}.out"));
    if mode != "input-partitions" {
        for run in [&reference_app, &app] {
            let late: Vec<_> =
                read_all(&format!("{run}.late"), Duration::from_secs(1)).into_values().flatten().collect();
            let first =
                late.first().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
            // By input partition: one partition's run of late records is a
            // partition the watermark passed (its router behind the others').
            let mut by_partition = BTreeMap::new();
            for r in &late {
                let id = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
                *by_partition.entry(partition_of(&id, partitions)).or_insert(0) += 1;
            }
            eprintln!("{run}: {} late records (first {first:?}; by input partition {by_partition:?})", late.len());
        }
    }
    let n: usize = want.values().map(Vec::len).sum();
    assert!(n > 1000, "{n} outputs");
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "output partitions");
    for (p, w) in &want {
        // Sorted, so a record delivered twice shows up as a difference too.
        let g = got.get(p).cloned().unwrap_or_default();
        let missing: Vec<_> = w.iter().filter(|r| g.binary_search(r).is_err()).collect();
        let extra: Vec<_> = g.iter().filter(|r| w.binary_search(r).is_err()).collect();
        for r in missing.iter().take(5).chain(extra.iter().take(5)) {
            eprintln!("partition {p} differs: {:?} {:?}", r.2, r.1.as_deref().map(String::from_utf8_lossy));
        }
        let (missing, extra) = (missing.len(), extra.len());
        if g != *w {
            // Where each run flushed a slice idle (its flush log): a flush in
            // one run only releases records the other judged in time order.
            for run in [&reference_app, &app] {
                let flushes = read_all(&format!("{run}.flushes"), Duration::from_secs(1));
                let afters: BTreeMap<i32, Vec<String>> = flushes
                    .into_iter()
                    .map(|(p, recs)| {
                        (
                            p,
                            recs.iter()
                                .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
                                .collect(),
                        )
                    })
                    .collect();
                eprintln!("{run}: idle flushes by slice {afters:?}");
            }
            // What the members logged about releasing early or standing still.
            for d in members.iter().chain(&stopped) {
                let log = d.log_text();
                // Not a restore's summary, which names its idle flushes (0 or more).
                let noted = log.lines().filter(|l| !l.contains("restored from")).filter(|l| {
                    ["idle flush", "past the hold", "stood still", "WARN", "ERROR"].iter().any(|m| l.contains(m))
                });
                for line in noted.take(20) {
                    eprintln!("  {line}");
                }
            }
        }
        assert!(
            g == *w,
            "{mode}, partition {p}: the storm's output differs ({} vs {} records, {missing} missing, {extra} extra)",
            g.len(),
            w.len()
        );
    }
    for d in members.iter_mut().chain([&mut reference]) {
        assert!(d.terminate(Duration::from_secs(30)).success(), "{}", d.log_text());
    }
    // A member stopped by SIGTERM exits 0; one killed by SIGKILL has no exit code.
    for d in &mut stopped {
        let status = d.child.wait().unwrap();
        assert!(status.success() || status.code().is_none(), "a member stopped with {status}:\n{}", d.log_text());
    }
    reference.assert_clean_log();
}
