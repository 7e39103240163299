//! The union of several slices' cuckoo tables, for `dedupd checkpoint
//! merge` (fewer slices): as the timer filter's generations are united,
//! the tables stand side by side under the latest clock, each keeping its
//! own size. Nothing is rehashed — a fingerprint cannot move to a table of
//! another size, and need not: lookups check every table, inserts go to the
//! newest, and an older table drains and is dropped once its slots expire.

use super::filter::{CuckooCounters, CuckooFilter};
use super::params::CuckooParams;

/// Two filters whose slots mean different things (another fingerprint
/// width, stamp width, tick, window or lateness): they cannot unite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotsDiffer {
    pub parameter: &'static str,
    pub left: String,
    pub right: String,
}

impl CuckooFilter {
    /// The union of `filters` under `params` (the settings of the slice
    /// they become): every filter moved to the latest clock among them (its
    /// own sweeps, so every slot is what an uninterrupted filter would
    /// hold), then their tables, older ones first and the newest of each
    /// last. A filter that never saw an event adds nothing.
    pub fn unite(filters: Vec<CuckooFilter>, params: &CuckooParams) -> Result<CuckooFilter, SlotsDiffer> {
        let clock = filters.iter().filter_map(CuckooFilter::clock_ms).max();
        let (mut older, mut newest) = (Vec::new(), Vec::new());
        let mut counters = CuckooCounters::default();
        for mut f in filters {
            same_slots(f.params(), params)?;
            add(&mut counters, f.counters());
            let Some(clock) = clock.filter(|_| f.clock_ms().is_some()) else {
                continue;
            };
            f.advance(clock);
            let mut tables = f.into_tables();
            let last = tables.pop();
            older.append(&mut tables);
            newest.extend(last);
        }
        older.append(&mut newest);
        if older.is_empty() {
            return Ok(CuckooFilter::new(params.clone()));
        }
        Ok(CuckooFilter::from_parts(params.clone(), clock, older, counters))
    }
}

/// The parameters a slot's meaning depends on must agree; the table sizes
/// may differ (each table keeps its own).
fn same_slots(a: &CuckooParams, b: &CuckooParams) -> Result<(), SlotsDiffer> {
    let fields: [(&'static str, String, String); 6] = [
        ("seed", format!("{:#x}", a.seed), format!("{:#x}", b.seed)),
        ("fingerprint_bits", a.fingerprint_bits.to_string(), b.fingerprint_bits.to_string()),
        ("clock_bits", a.clock_bits.to_string(), b.clock_bits.to_string()),
        ("tick_ms", a.tick_ms.to_string(), b.tick_ms.to_string()),
        ("window_ms", a.window_ms.to_string(), b.window_ms.to_string()),
        ("lateness_ms", format!("{:?}", a.lateness_ms), format!("{:?}", b.lateness_ms)),
    ];
    match fields.into_iter().find(|(_, l, r)| l != r) {
        Some((parameter, left, right)) => Err(SlotsDiffer { parameter, left, right }),
        None => Ok(()),
    }
}

fn add(sum: &mut CuckooCounters, c: &CuckooCounters) {
    sum.events += c.events;
    sum.distinct += c.distinct;
    sum.duplicates += c.duplicates;
    sum.late_events += c.late_events;
    sum.tables_created += c.tables_created;
    sum.tables_dropped += c.tables_dropped;
    sum.failed_kicks += c.failed_kicks;
    sum.forced_evictions += c.forced_evictions;
}
