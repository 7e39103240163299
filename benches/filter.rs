//! Test-then-insert throughput of one slice's filter against the structures a
//! user would pick instead, and against the memory system's random-access
//! limit (issue #5). Every figure of one size comes from the same run, so
//! compare them as ratios: the machines these run on are shared and noisy.
//!
//! Workload: random 16-byte keys, never repeated (so every duplicate verdict
//! is a false positive), one event per millisecond of event time, k = 7,
//! hashing included in every timing. The dedupd filters get a window of
//! exactly the keys that fill them to 1% FPR, so after the warm-up (one full
//! window) they run at their design density with cells expiring as fast as
//! they are set: the steady state of a real deployment.
//!
//! Sizes (bytes of cells or bits): ~256 KiB (cache-resident), ~8 MiB
//! (L3-sized) and, with `DEDUPD_BENCH_DRAM=1`, ~1 GiB (DRAM-resident; slow to
//! allocate and warm up, and needs ~8 GiB of RAM).
//!
//! Per size, the benches are:
//! - `dedupd-{4,8,16}bit`: `SlidingFilter::observe(KeyHash::of(key))`, one event at a time;
//! - `dedupd-{8,16}bit-batch`: hash a batch of 4096 keys, then `observe_batch` (which
//!   prefetches the cells of the event 16 ahead from filters of 1 MiB or more);
//! - `dedupd-8bit-blocked`, `dedupd-{4,8,16}bit-blocked-batch`: the same with the blocked
//!   layout (all k cells of a key in one block of 256 cells: 2 lines at 4 bits, 4 at 8, 8 at 16);
//! - `fastbloom`: `fastbloom::BloomFilter` (its default hasher, SipHash-1-3), same bytes of
//!   bits, k = 7, `insert` (which returns whether the key was there: test-then-insert), no
//!   timers; `fastbloom-thp` the same on a bit vector with transparent huge pages;
//! - `cuckoo`, `cuckoo-batch`: the cuckoo table filter (`CuckooFilter::observe`, and
//!   `observe_batch`, prefetching its buckets 16 events ahead), the same bytes of slots
//!   (16 bits each in semi-sorted buckets), sized by its own rule (20% headroom at 95% load) for a window of as many keys,
//!   one event at a time (`cuckoo`) or a batch of 4 096 at a time (`cuckoo-batch`);
//! - `bloomfilter`: the `bloomfilter` crate, same bytes, k = 7, `check_and_set`;
//! - `hashbrown-exact`: an exact `hashbrown::HashMap<u64 fingerprint, u32 time>` holding the
//!   same number of in-window keys as the 8-bit filter, evicting with a `retain` every
//!   quarter window (what an engineer would hand-roll);
//! - `moka-ttl`: a `moka::sync::Cache<u64, ()>` bounded to the same number of keys, with a TTL
//!   (an LRU/TTL-cache dedup); not at 1 GiB (it would need >20 GiB);
//! - `limit-random-read`: independent random 8-byte reads from a buffer of the same size,
//!   with transparent huge pages like dedupd's cells — the memory system's random-access
//!   limit; an element is one read. `limit-random-read-4k`: the same on 4 KiB pages;
//! - `limit-block-rw-{4,2}lines`: read-modify-write of one byte in each of 4 (2) consecutive
//!   lines of a random 256-byte block — the least memory traffic of one key in the blocked
//!   layout at 8 (4) bits, written back; an element is one block.
//!
//! `cargo bench --bench filter` (about 6 minutes for the two small sizes);
//! `DEDUPD_BENCH_QUICK=1 cargo bench --bench filter` (short samples, under ~3 minutes);
//! `DEDUPD_BENCH_DRAM=1` adds the 1 GiB size. Filter benches by name as usual, e.g.
//! `cargo bench --bench filter -- 8MiB`. `scripts/bench_summary.py` turns the results into
//! the ops/s and ratio tables of `docs/dev/performance.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use dedupd::filter::cuckoo::{CuckooFilter, CuckooSpec};
use dedupd::filter::{Event, FilterSpec, Growth, KeyHash, Layout, SlidingFilter, Verdict};
use dedupd::testkit::workload::Rng;
use twox_hash::XxHash3_64;

/// Events per timed iteration.
const BATCH: usize = 4096;
const K: u32 = 7;
/// Cells per key at 1% FPR with k = 7 (`-ln p / ln²2`).
const CELLS_PER_KEY: f64 = 9.585;

type Key = [u8; 16];

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The sizes to run: `DEDUPD_BENCH_SIZES=16,256,65536` (KiB) overrides the
/// standard ones (e.g. to plot cost against size).
fn sizes() -> Vec<(String, u64)> {
    if let Ok(list) = std::env::var("DEDUPD_BENCH_SIZES") {
        return list
            .split(',')
            .map(|kib| {
                let kib: u64 = kib.trim().parse().expect("DEDUPD_BENCH_SIZES: sizes in KiB, comma-separated");
                (if kib % 1024 == 0 { format!("{}MiB", kib / 1024) } else { format!("{kib}KiB") }, kib << 10)
            })
            .collect();
    }
    let mut s = vec![("256KiB".to_string(), 256u64 << 10), ("8MiB".to_string(), 8 << 20)];
    if env_flag("DEDUPD_BENCH_DRAM") {
        s.push(("1GiB".to_string(), 1 << 30));
    }
    s
}

fn fresh_keys(rng: &mut Rng, n: usize) -> Vec<Key> {
    (0..n).map(|_| rng.key16()).collect()
}

/// Keys in the window of a filter of `bytes` of `timer_bits` cells.
fn window_keys(bytes: u64, timer_bits: u8) -> u64 {
    ((bytes * 8 / u64::from(timer_bits)) as f64 / CELLS_PER_KEY) as u64
}

/// The window, in ms (= keys at one event per ms), that keeps at most `keys`
/// keys alive in a filter of `timer_bits` timers. A cell lives W ticks plus
/// the rest of the tick it was set in, up to W + 1 ticks of ~window/W ms, so
/// a filter holds up to (W + 1)/W windows of keys (just before a tick ends):
/// 17% more than the window's at 4 bits (W = 6), nothing to speak of at 8
/// bits (W = 126). Sized without this, narrow timers would be measured above
/// their design density and their bits per in-window key understated.
fn design_window_ms(keys: u64, timer_bits: u8) -> u64 {
    let probe = FilterSpec { window_ms: keys, expected_keys: keys, timer_bits, ..FilterSpec::default() };
    let w = f64::from(probe.resolve().expect("valid spec").window_ticks);
    (keys as f64 * w / (w + 1.0)) as u64
}

/// A dedupd slice filter of `bytes` of cells, warmed up through one window,
/// and its window in ms (its in-window keys: one event per ms).
fn dedupd_filter(bytes: u64, timer_bits: u8, layout: Layout) -> (SlidingFilter, u64, u64) {
    let cells = bytes * 8 / u64::from(timer_bits);
    let keys = window_keys(bytes, timer_bits);
    let window_ms = design_window_ms(keys, timer_bits);
    let spec = FilterSpec {
        window_ms,
        expected_keys: keys,
        total_cells: Some(cells),
        hashes: Some(K),
        timer_bits,
        growth: Growth::None,
        layout,
        ..FilterSpec::default()
    };
    let mut f = SlidingFilter::new(spec.resolve().expect("valid spec"));
    let mut rng = Rng::new(1);
    let mut clock = 1_000_000u64;
    let (mut events, mut out) = (Vec::with_capacity(BATCH), Vec::with_capacity(BATCH));
    for _ in 0..keys.div_ceil(BATCH as u64) {
        events.clear();
        for k in fresh_keys(&mut rng, BATCH) {
            clock += 1;
            events.push(Event { hash: KeyHash::of(f.params().seed, &k), time_ms: clock });
        }
        out.clear();
        f.observe_batch(&events, &mut out);
    }
    (f, clock, window_ms)
}

fn false_positive_share(f: &SlidingFilter, before: (u64, u64)) -> f64 {
    let c = f.counters();
    (c.duplicates - before.1) as f64 / (c.events - before.0).max(1) as f64
}

/// Benchmarks `routine` over batches of fresh keys. The state is built on
/// first use only, so a bench filtered out on the command line costs no
/// warm-up; it is returned for reporting.
fn bench<S>(
    group: &mut BenchmarkGroup<WallTime>,
    name: &str,
    setup: impl FnOnce() -> S,
    mut routine: impl FnMut(&mut S, &[Key]) -> usize,
) -> Option<S> {
    let mut setup = Some(setup);
    let mut state: Option<(S, Rng)> = None;
    group.bench_function(name, |b| {
        let (s, rng) = state.get_or_insert_with(|| (setup.take().expect("set up once")(), Rng::new(2)));
        b.iter_batched_ref(|| fresh_keys(rng, BATCH), |keys| routine(s, keys), BatchSize::SmallInput)
    });
    state.map(|(s, _)| s)
}

struct DedupdState {
    f: SlidingFilter,
    clock: u64,
    window_keys: u64,
    before: (u64, u64),
    events: Vec<Event>,
    out: Vec<Verdict>,
}

fn bench_dedupd(
    group: &mut BenchmarkGroup<WallTime>,
    size: &str,
    bytes: u64,
    timer_bits: u8,
    layout: Layout,
    batched: bool,
) {
    let blocked = if layout == Layout::Blocked { "-blocked" } else { "" };
    let batch = if batched { "-batch" } else { "" };
    let name = format!("dedupd-{timer_bits}bit{blocked}{batch}");
    let setup = || {
        let (f, clock, window_keys) = dedupd_filter(bytes, timer_bits, layout);
        let before = (f.counters().events, f.counters().duplicates);
        DedupdState { f, clock, window_keys, before, events: Vec::with_capacity(BATCH), out: Vec::with_capacity(BATCH) }
    };
    let state = bench(group, &name, setup, |s, keys| {
        let seed = s.f.params().seed;
        if batched {
            s.events.clear();
            for k in keys {
                s.clock += 1;
                s.events.push(Event { hash: KeyHash::of(seed, k), time_ms: s.clock });
            }
            s.out.clear();
            s.f.observe_batch(&s.events, &mut s.out);
            s.out.len()
        } else {
            let mut distinct = 0;
            for k in keys {
                s.clock += 1;
                distinct += usize::from(s.f.observe(&KeyHash::of(seed, k), s.clock).is_distinct());
            }
            distinct
        }
    });
    if let Some(s) = state {
        eprintln!(
            "  {size}/{name}: {} B of cells, FPR measured {:.3}% over the timed events, {:.1} bits per in-window key",
            s.f.memory_bytes(),
            100.0 * false_positive_share(&s.f, s.before),
            s.f.memory_bytes() as f64 * 8.0 / s.window_keys as f64,
        );
    }
}

struct CuckooState {
    f: CuckooFilter,
    clock: u64,
    window_keys: u64,
    before: (u64, u64),
    events: Vec<Event>,
    out: Vec<bool>,
}

/// The cuckoo table filter whose first table is `bytes` of slots (its
/// window the keys it is sized for), warmed up through one window.
fn bench_cuckoo(group: &mut BenchmarkGroup<WallTime>, size: &str, bytes: u64, batched: bool) {
    let name = if batched { "cuckoo-batch" } else { "cuckoo" };
    let setup = || {
        // Slots (2 bytes each) hold the keys of W + 1 ticks (W = 117) at 95% load, 20% headroom.
        let keys = (bytes / 2) as f64 * 0.95 / 1.2 * 117.0 / 118.0;
        let keys = keys as u64;
        let spec = CuckooSpec { window_ms: keys, expected_keys: Some(keys), ..CuckooSpec::default() };
        let mut f = CuckooFilter::new(spec.resolve().expect("valid spec"));
        let mut rng = Rng::new(1);
        let mut clock = 1_000_000u64;
        // One key at a time: at 1 GiB the window is ~400 M keys (6 GiB as a list).
        for _ in 0..keys {
            clock += 1;
            f.observe(&KeyHash::of(f.params().seed, &rng.key16()), clock);
        }
        let before = (f.counters().events, f.counters().duplicates);
        CuckooState { f, clock, window_keys: keys, before, events: Vec::new(), out: Vec::new() }
    };
    let state = bench(group, name, setup, |s, keys| {
        let seed = s.f.params().seed;
        if batched {
            s.events.clear();
            for k in keys {
                s.clock += 1;
                s.events.push(Event { hash: KeyHash::of(seed, k), time_ms: s.clock });
            }
            s.out.clear();
            s.f.observe_batch(&s.events, &mut s.out);
            return s.out.len();
        }
        let mut distinct = 0;
        for k in keys {
            s.clock += 1;
            distinct += usize::from(!s.f.observe(&KeyHash::of(seed, k), s.clock));
        }
        distinct
    });
    if let Some(s) = state {
        let c = s.f.counters();
        eprintln!(
            "  {size}/{name}: {} B of slots, FPR measured {:.3}% over the timed events, {:.1} bits per in-window key",
            s.f.memory_bytes(),
            100.0 * (c.duplicates - s.before.1) as f64 / (c.events - s.before.0).max(1) as f64,
            s.f.memory_bytes() as f64 * 8.0 / s.window_keys as f64,
        );
    }
}

/// `fastbloom` as a user gets it (`thp` false), or on a bit vector with
/// transparent huge pages like dedupd's cells.
fn bench_fastbloom(group: &mut BenchmarkGroup<WallTime>, bytes: u64, thp: bool) {
    let setup = || {
        let mut bloom = if thp {
            let bits = vec![0u64; bytes as usize / 8];
            dedupd::filter::advise_huge_pages(&bits);
            fastbloom::BloomFilter::from_vec(bits).hashes(K)
        } else {
            fastbloom::BloomFilter::with_num_bits(bytes as usize * 8).hashes(K)
        };
        for k in fresh_keys(&mut Rng::new(1), window_keys(bytes, 8) as usize) {
            bloom.insert(&k);
        }
        bloom
    };
    let name = if thp { "fastbloom-thp" } else { "fastbloom" };
    bench(group, name, setup, |bloom, keys| keys.iter().map(|k| usize::from(!bloom.insert(k))).sum());
}

fn bench_bloomfilter(group: &mut BenchmarkGroup<WallTime>, bytes: u64) {
    let setup = || {
        // k = round(ln 2 · bits / items) = 7 with items = bits / 10.
        let mut bloom = bloomfilter::Bloom::<Key>::new_with_seed(bytes as usize, bytes as usize * 8 / 10, &[7; 32])
            .expect("bloomfilter");
        assert_eq!(bloom.number_of_hash_functions(), K);
        for k in fresh_keys(&mut Rng::new(1), window_keys(bytes, 8) as usize) {
            bloom.set(&k);
        }
        bloom
    };
    bench(group, "bloomfilter", setup, |bloom, keys| keys.iter().map(|k| usize::from(!bloom.check_and_set(k))).sum());
}

/// The exact dedup an engineer would write: fingerprint → time of delivery,
/// with a sweep of expired entries every quarter window.
struct ExactMap {
    map: hashbrown::HashMap<u64, u32>,
    window: u32,
    next_sweep: u32,
    now: u32,
}

impl ExactMap {
    fn new(window: u32) -> Self {
        ExactMap { map: hashbrown::HashMap::new(), window, next_sweep: window / 4, now: 0 }
    }

    /// Whether `key`, arriving one tick after the previous key, is distinct.
    #[inline]
    fn observe(&mut self, key: &Key) -> bool {
        self.now += 1;
        let now = self.now;
        if now >= self.next_sweep {
            let window = self.window;
            self.map.retain(|_, t| now - *t < window);
            self.next_sweep = now + window / 4;
        }
        let fp = XxHash3_64::oneshot(key);
        match self.map.entry(fp) {
            hashbrown::hash_map::Entry::Occupied(mut e) => {
                if now - *e.get() < self.window {
                    return false;
                }
                e.insert(now);
                true
            }
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert(now);
                true
            }
        }
    }
}

fn bench_hashbrown(group: &mut BenchmarkGroup<WallTime>, size: &str, bytes: u64) {
    let window = window_keys(bytes, 8) as u32;
    let setup = || {
        let mut exact = ExactMap::new(window);
        for k in fresh_keys(&mut Rng::new(1), window as usize * 5 / 4) {
            exact.observe(&k);
        }
        exact
    };
    let state =
        bench(group, "hashbrown-exact", setup, |exact, keys| keys.iter().map(|k| usize::from(exact.observe(k))).sum());
    if let Some(exact) = state {
        eprintln!(
            "  {size}/hashbrown-exact: {window} in-window keys, {} entries, {} B allocated, {:.1} bits per in-window key",
            exact.map.len(),
            exact.map.allocation_size(),
            exact.map.allocation_size() as f64 * 8.0 / f64::from(window),
        );
    }
}

fn bench_moka(group: &mut BenchmarkGroup<WallTime>, bytes: u64) {
    let keys = window_keys(bytes, 8);
    let setup = || {
        let cache: moka::sync::Cache<u64, ()> =
            moka::sync::Cache::builder().max_capacity(keys).time_to_live(Duration::from_secs(600)).build();
        for k in fresh_keys(&mut Rng::new(1), keys as usize) {
            cache.insert(XxHash3_64::oneshot(&k), ());
        }
        cache
    };
    bench(group, "moka-ttl", setup, |cache, keys| {
        let mut distinct = 0;
        for k in keys {
            let fp = XxHash3_64::oneshot(k);
            if !cache.contains_key(&fp) {
                cache.insert(fp, ());
                distinct += 1;
            }
        }
        distinct
    });
}

/// Independent random 8-byte reads from `bytes`: the most random accesses
/// per second one core gets from that level of the memory hierarchy. One
/// element is one read.
/// With `thp`, the buffer has transparent huge pages like dedupd's cells
/// (`limit-random-read`, the reference for the fractions); without, 4 KiB
/// pages like the other structures (`limit-random-read-4k`).
fn bench_limit(group: &mut BenchmarkGroup<WallTime>, bytes: u64, thp: bool) {
    let words = bytes / 8;
    let setup = || {
        let mut buf = vec![0u64; words as usize];
        if thp {
            dedupd::filter::advise_huge_pages(&buf);
        }
        for (i, w) in buf.iter_mut().enumerate() {
            *w = i as u64;
        }
        buf
    };
    let mut rng = Rng::new(3);
    let mut at = vec![0usize; BATCH];
    let name = if thp { "limit-random-read" } else { "limit-random-read-4k" };
    bench(group, name, setup, |buf, _keys| {
        // Addresses first, then the reads (as in `bench_block_limit`): with
        // the generator in the loop the reads ran ~40% slower.
        for a in at.iter_mut() {
            *a = dedupd::filter::hash::fastrange(rng.next_u64(), words) as usize;
        }
        let mut sum = 0u64;
        for &i in &at {
            sum = sum.wrapping_add(buf[i]);
        }
        black_box(sum) as usize
    });
}

/// Read-modify-write of one byte in each of `lines` consecutive 64-byte
/// lines of a random 256-byte block (huge pages): what a key of the blocked
/// layout costs the memory system at the least (an 8-bit block is 4 lines,
/// a 4-bit one 2; a key touches ~3.5 of 4, ~1.9 of 2). One element is one
/// block. Written back, unlike `limit-random-read`: the cells a key sets
/// are written back to memory when their lines leave the caches.
fn bench_block_limit(group: &mut BenchmarkGroup<WallTime>, bytes: u64, lines: usize) {
    let blocks = bytes / 256;
    let setup = || {
        let buf = vec![0u8; bytes as usize];
        dedupd::filter::advise_huge_pages(&buf);
        buf
    };
    let mut rng = Rng::new(4);
    let mut at = vec![0usize; BATCH];
    bench(group, &format!("limit-block-rw-{lines}lines"), setup, |buf, _keys| {
        // Addresses first, then the accesses, as the batched filter hashes a
        // batch first: the accesses do not wait on address arithmetic.
        for a in at.iter_mut() {
            *a = dedupd::filter::hash::fastrange(rng.next_u64(), blocks) as usize * 256;
        }
        for &a in &at {
            for b in &mut buf[a..a + lines * 64].iter_mut().step_by(64) {
                *b = b.wrapping_add(1);
            }
        }
        black_box(buf[0]) as usize
    });
}

fn test_then_insert(c: &mut Criterion) {
    for (size, bytes) in sizes() {
        let mut group = c.benchmark_group(format!("tti/{size}"));
        group.throughput(Throughput::Elements(BATCH as u64));
        for bits in [4u8, 8, 16] {
            bench_dedupd(&mut group, &size, bytes, bits, Layout::Standard, false);
        }
        for bits in [8u8, 16] {
            bench_dedupd(&mut group, &size, bytes, bits, Layout::Standard, true);
        }
        bench_dedupd(&mut group, &size, bytes, 8, Layout::Blocked, false);
        for bits in [4u8, 8, 16] {
            bench_dedupd(&mut group, &size, bytes, bits, Layout::Blocked, true);
        }
        bench_cuckoo(&mut group, &size, bytes, false);
        bench_cuckoo(&mut group, &size, bytes, true);
        bench_fastbloom(&mut group, bytes, false);
        bench_fastbloom(&mut group, bytes, true);
        bench_bloomfilter(&mut group, bytes);
        bench_hashbrown(&mut group, &size, bytes);
        if bytes < 1 << 30 {
            bench_moka(&mut group, bytes);
        }
        bench_limit(&mut group, bytes, true);
        bench_limit(&mut group, bytes, false);
        bench_block_limit(&mut group, bytes, 4);
        bench_block_limit(&mut group, bytes, 2);
        group.finish();
    }
}

fn config() -> Criterion {
    let c = Criterion::default();
    if env_flag("DEDUPD_BENCH_QUICK") {
        c.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1))
    } else {
        c
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = test_then_insert
}
criterion_main!(benches);
