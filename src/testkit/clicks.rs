//! The demo's click stream and its exact answer, shared by the demo driver
//! (`examples/demo.rs`, run by `scripts/demo.sh`) and the test that holds
//! the demo's figures (`tests/event_time.rs`).

use super::oracle::{Confusion, ExactWindow};
use super::workload::Rng;

/// One click of the stream: `seq` is its place in event-time order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Click {
    pub seq: u64,
    pub click_id: String,
    pub ts: i64,
}

impl Click {
    /// The record payload: `{"click_id", "ts", "seq", "ad"}`.
    pub fn payload(&self) -> String {
        format!(
            "{{\"click_id\":\"{}\",\"ts\":{},\"seq\":{},\"ad\":\"ad-{}\"}}",
            self.click_id,
            self.ts,
            self.seq,
            self.seq % 97
        )
    }
}

/// Real clicks at ~2000/s of event time (6000/s during a burst in the middle
/// third); 8% are double-clicks 50–400 ms later, 5% are retried 1–20 s later
/// by a client that timed out, and 3% are replayed by a flaky collector
/// 1–3 minutes later (outside a 60 s window: those are new events again).
/// Sorted by time; `seq` numbers them in that order.
pub fn clicks(n: u64, seed: u64) -> Vec<Click> {
    let mut rng = Rng::new(seed);
    let start: i64 = 1_750_000_000_000;
    let mut out = Vec::with_capacity(n as usize * 5 / 4);
    let mut t = start as f64;
    for i in 0..n {
        let burst = (n / 3..2 * n / 3).contains(&i);
        t += if burst { 1000.0 / 6000.0 } else { 1000.0 / 2000.0 };
        let id = format!("click-{:016x}", rng.next_u64());
        let ts = t as i64;
        out.push(Click { seq: 0, click_id: id.clone(), ts });
        let r = rng.next_f64();
        if r < 0.08 {
            out.push(Click { seq: 0, click_id: id, ts: ts + 50 + rng.below(350) as i64 });
        } else if r < 0.13 {
            out.push(Click { seq: 0, click_id: id, ts: ts + 1000 + rng.below(19_000) as i64 });
        } else if r < 0.16 {
            out.push(Click { seq: 0, click_id: id, ts: ts + 60_000 + rng.below(120_000) as i64 });
        }
    }
    out.sort_by_key(|c| c.ts);
    for (i, c) in out.iter_mut().enumerate() {
        c.seq = i as u64;
    }
    out
}

/// The exact answer over event-time order: `true` for a duplicate.
pub fn truth(stream: &[Click], window_ms: u64) -> Vec<bool> {
    let mut oracle = ExactWindow::new(window_ms);
    stream.iter().map(|c| oracle.observe(&c.click_id, c.ts as u64)).collect()
}

/// Verdicts against the truth, given which clicks (by `seq`) were delivered.
pub fn confusion(stream: &[Click], truth: &[bool], delivered: impl Fn(u64) -> bool) -> Confusion {
    let mut c = Confusion::default();
    for (click, is_dup) in stream.iter().zip(truth) {
        c.record(!delivered(click.seq), *is_dup);
    }
    c
}
