//! Test-then-insert throughput of one slice's filter, hashing included:
//! random 16-byte keys, k = 7, a window that keeps the filter at its design
//! density, at a cache-resident and an L3-sized filter, for several timer
//! widths. (The comparisons against other structures are issue #5's.)
//!
//! `cargo bench --bench filter`

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use dedupd::bench::workload::Rng;
use dedupd::filter::{FilterSpec, Growth, KeyHash, SlidingFilter};

const BATCH: usize = 4096;

fn filter_for(bytes: u64, timer_bits: u8) -> SlidingFilter {
    // Cells for `bytes` of storage at this width, and the keys that fill them to 1% FPR.
    let cells = bytes * 8 / u64::from(timer_bits);
    let keys = (cells as f64 / 9.585) as u64;
    let spec = FilterSpec {
        window_ms: 1_000_000,
        expected_keys: keys,
        total_cells: Some(cells),
        hashes: Some(7),
        timer_bits,
        growth: Growth::None,
        ..FilterSpec::default()
    };
    let mut f = SlidingFilter::new(spec.resolve().expect("valid spec"));
    // Warm up to the design population so the benchmark sees realistic density.
    let mut rng = Rng::new(1);
    for i in 0..keys {
        f.observe(&KeyHash::of(0, &rng.next_u64().to_le_bytes()), i * 1_000_000 / keys);
    }
    f
}

fn test_then_insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("test_then_insert");
    group.throughput(Throughput::Elements(BATCH as u64));
    for (label, bytes) in [("256KiB", 256u64 << 10), ("8MiB", 8 << 20)] {
        for bits in [4u8, 8, 16] {
            let mut f = filter_for(bytes, bits);
            let mut rng = Rng::new(2);
            let mut clock = 1_000_000u64;
            group.bench_function(format!("{label}/{bits}bit"), |b| {
                b.iter_batched_ref(
                    || {
                        let keys: Vec<[u8; 16]> = (0..BATCH)
                            .map(|_| {
                                let mut k = [0u8; 16];
                                k[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
                                k[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
                                k
                            })
                            .collect();
                        keys
                    },
                    |keys| {
                        let mut distinct = 0u32;
                        for k in keys.iter() {
                            clock += 1;
                            distinct += u32::from(f.observe(&KeyHash::of(0, k), clock).is_distinct());
                        }
                        distinct
                    },
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, test_then_insert);
criterion_main!(benches);
