//! A cuckoo table filter's snapshot, in the envelope every dedupd snapshot
//! is written in (version 2, little-endian):
//!
//! ```text
//! magic "DEDUPDCK" | version u16
//! seed u64, buckets u64, fingerprint_bits u8, clock_bits u8, tick_ms u64,
//! window_ticks u32, lateness_ticks u32, max_tables u32
//! clock: set u8, clock_ms u64
//! counters: events, distinct, duplicates, late_events, tables_created,
//!           tables_dropped, failed_kicks, forced_evictions (u64 each)
//! tables u32, each: level u8, buckets u64, cursor u64, buckets × bucket u64
//!   (a semi-sorted bucket: 12-bit code of the nibbles, 4 × 13-bit fields)
//! checksum: XXH3-64 of everything above, u64
//! ```
//!
//! Every parameter is checked against the configured filter; another
//! kind's snapshot is refused by its magic. Version 1 (16-bit slots, f + c
//! = 16, unsorted) is refused as an unsupported version: its stamps count
//! other ticks and its slots cannot be re-sorted without the bit they lack.

use super::bucket::CODES;
use super::filter::{CuckooCounters, CuckooFilter};
use super::params::{CuckooParams, MAX_LEVEL};
use super::table::Table;
use crate::filter::envelope::{self, Reader, SnapshotError, check, put_u32, put_u64};

/// The first bytes of a cuckoo table snapshot.
pub const MAGIC: [u8; 8] = *b"DEDUPDCK";
/// The format version this build writes and reads (2: semi-sorted buckets).
pub const VERSION: u16 = 2;

/// Encodes the filter's complete state.
pub fn encode(f: &CuckooFilter) -> Vec<u8> {
    let p = f.params();
    let words: usize = f.tables().iter().map(|t| t.words().len()).sum();
    let mut w = envelope::begin(MAGIC, VERSION, 160 + 8 * words);
    put_u64(&mut w, p.seed);
    put_u64(&mut w, p.buckets);
    w.push(p.fingerprint_bits as u8);
    w.push(p.clock_bits as u8);
    put_u64(&mut w, p.tick_ms);
    put_u32(&mut w, p.window_ticks);
    put_u32(&mut w, p.lateness_ticks);
    put_u32(&mut w, p.max_tables);
    w.push(u8::from(f.clock_ms().is_some()));
    put_u64(&mut w, f.clock_ms().unwrap_or(0));
    let c = f.counters();
    for v in [
        c.events,
        c.distinct,
        c.duplicates,
        c.late_events,
        c.tables_created,
        c.tables_dropped,
        c.failed_kicks,
        c.forced_evictions,
    ] {
        put_u64(&mut w, v);
    }
    put_u32(&mut w, f.tables().len() as u32);
    for t in f.tables() {
        w.push(t.level);
        put_u64(&mut w, t.buckets());
        put_u64(&mut w, t.cursor());
        for &word in t.words() {
            w.extend_from_slice(&word.to_le_bytes());
        }
    }
    envelope::seal(w)
}

/// Restores the state in `bytes` into a filter with `params`, refusing a
/// snapshot taken with other settings.
pub fn decode(bytes: &[u8], params: &CuckooParams) -> Result<CuckooFilter, SnapshotError> {
    let mut r = envelope::open(bytes, MAGIC, VERSION)?;
    check(r.u64()?, params.seed, "hash seed")?;
    check(r.u64()?, params.buckets, "buckets (from expected_keys, fpr, window and slices)")?;
    check(u32::from(r.u8()?), params.fingerprint_bits, "fingerprint bits (from fpr)")?;
    check(u32::from(r.u8()?), params.clock_bits, "clock bits (from fpr)")?;
    check(r.u64()?, params.tick_ms, "tick_ms")?;
    check(r.u32()?, params.window_ticks, "window ticks")?;
    check(r.u32()?, params.lateness_ticks, "lateness ticks")?;
    check(r.u32()?, params.max_tables, "max_generations")?;
    let clock_set = r.u8()?;
    let clock_ms = r.u64()?;
    let clock_ms = match clock_set {
        0 => None,
        1 => Some(clock_ms),
        other => return Err(SnapshotError::Malformed(format!("clock flag {other}"))),
    };
    let counters = CuckooCounters {
        events: r.u64()?,
        distinct: r.u64()?,
        duplicates: r.u64()?,
        late_events: r.u64()?,
        tables_created: r.u64()?,
        tables_dropped: r.u64()?,
        failed_kicks: r.u64()?,
        forced_evictions: r.u64()?,
    };
    let n = r.u32()?;
    if n == 0 || n > params.max_tables {
        return Err(SnapshotError::Malformed(format!("{n} tables (1 to {} allowed)", params.max_tables)));
    }
    let mut tables = Vec::with_capacity(n as usize);
    for _ in 0..n {
        tables.push(read_table(&mut r, params)?);
    }
    r.finish()?;
    Ok(CuckooFilter::from_parts(params.clone(), clock_ms, tables, counters))
}

fn read_table(r: &mut Reader<'_>, params: &CuckooParams) -> Result<Table, SnapshotError> {
    let level = r.u8()?;
    if level > MAX_LEVEL {
        return Err(SnapshotError::Malformed(format!("table level {level} (at most {MAX_LEVEL})")));
    }
    // Any size up to the largest level's: a merged slice keeps the tables
    // of the slices it took, each of their size (`unite`).
    let buckets = r.u64()?;
    let most = params.level_buckets(MAX_LEVEL);
    if buckets == 0 || buckets > most {
        return Err(SnapshotError::Malformed(format!("a table of {buckets} buckets (1 to {most} allowed)")));
    }
    let cursor = r.u64()?;
    let len = (buckets as usize).checked_mul(8).ok_or_else(|| SnapshotError::Malformed("size".into()))?;
    let raw = r.take(len)?;
    let words = raw.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
    Table::from_state(level, buckets, cursor, words).ok_or_else(|| {
        SnapshotError::Malformed(format!(
            "table cursor {cursor} past its {buckets} buckets, or a bucket code past {}",
            CODES - 1
        ))
    })
}
