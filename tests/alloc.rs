//! No allocation per event on the filter's hot path (issue #5): a counting
//! global allocator around test-then-insert at steady state, one event at a
//! time and in batches, for every cell layout. (Allocation happens when a
//! generation is created; the streams here keep the load steady, and the
//! test checks that no generation was created while it counted.)

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;

use dedupd::filter::{Event, FilterSpec, KeyHash, Layout, SlicedFilter, SlidingFilter, Verdict};
use dedupd::testkit::workload::Rng;

/// Counts the allocations of the current thread (the test harness's other
/// threads allocate too).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const EVENTS: usize = 100_000;
const BATCH: usize = 1024;

/// A steady stream: ~1 event per ms over a 10 s window sized for it, half
/// of the keys recurring, so the filter sits at its design load.
fn events(seed: u64, n: usize, start_ms: u64) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let key = rng.below(20_000);
            Event { hash: KeyHash::of(0, &key.to_le_bytes()), time_ms: start_ms + i as u64 }
        })
        .collect()
}

fn spec(timer_bits: u8) -> FilterSpec {
    FilterSpec { window_ms: 10_000, expected_keys: 10_000, timer_bits, seed: 0, ..FilterSpec::default() }
}

#[test]
fn the_counter_counts() {
    let before = allocations();
    let boxed = std::hint::black_box(Box::new(1u64));
    let v: Vec<u8> = Vec::with_capacity(std::hint::black_box(10));
    assert_eq!(allocations() - before, 2);
    drop((boxed, v));
}

#[test]
fn observe_allocates_nothing_per_event() {
    let layouts = [4u8, 8, 12, 16, 32].map(|b| (b, Layout::Standard)).into_iter();
    for (bits, layout) in layouts.chain([4u8, 8, 16, 32].map(|b| (b, Layout::Blocked))) {
        let mut f = SlidingFilter::new(FilterSpec { layout, ..spec(bits) }.resolve().unwrap());
        // Warm up through a few windows.
        for e in events(1, 50_000, 0) {
            f.observe(&e.hash, e.time_ms);
        }
        let created = f.counters().generations_created;
        let stream = events(2, EVENTS, 50_000);
        let before = allocations();
        let mut distinct = 0;
        for e in &stream {
            distinct += usize::from(f.observe(&e.hash, e.time_ms).is_distinct());
        }
        let allocated = allocations() - before;
        let name = format!("{bits}-bit {layout:?}");
        assert_eq!(f.counters().generations_created, created, "{name}: the load must stay steady");
        assert!(distinct > EVENTS / 10 && distinct < EVENTS, "{name}: {distinct} distinct");
        assert_eq!(allocated, 0, "{name}: {allocated} allocations over {EVENTS} events");
    }
}

#[test]
fn observe_batch_allocates_nothing_per_event() {
    for bits in [4u8, 8, 16] {
        let mut f = SlidingFilter::new(spec(bits).resolve().unwrap());
        let mut sliced = SlicedFilter::new(&FilterSpec { slices: 4, ..spec(bits) }).unwrap();
        let mut out: Vec<Verdict> = Vec::with_capacity(BATCH);
        for chunk in events(1, 50_000, 0).chunks(BATCH) {
            out.clear();
            f.observe_batch(chunk, &mut out);
            out.clear();
            sliced.observe_batch(chunk, &mut out);
        }
        let created = (f.counters().generations_created, sliced.stats().generations_created);
        let stream = events(2, EVENTS, 50_000);
        let before = allocations();
        for chunk in stream.chunks(BATCH) {
            out.clear();
            f.observe_batch(chunk, &mut out);
            out.clear();
            sliced.observe_batch(chunk, &mut out);
        }
        let allocated = allocations() - before;
        // (stats() allocates its per-k counts; it is read only outside the count.)
        assert_eq!((f.counters().generations_created, sliced.stats().generations_created), created);
        assert_eq!(allocated, 0, "{bits}-bit: {allocated} allocations over {EVENTS} events × 2 filters");
    }
}
