//! The exact answer, for measuring the filter: a hash map from key to the
//! time of its last *delivered* occurrence, with the filter's semantics
//! (event time is the running maximum; an event is a duplicate iff its key
//! was delivered less than `window_ms` before).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Exact sliding-window deduplication.
#[derive(Clone, Debug)]
pub struct ExactWindow<K> {
    window_ms: u64,
    clock: u64,
    delivered: HashMap<K, u64>,
    /// Delivery times in order: the keys delivered inside the window are
    /// the deliveries of the last `window_ms` (a key is delivered at most
    /// once per window).
    deliveries: VecDeque<u64>,
}

impl<K: Hash + Eq + Clone> ExactWindow<K> {
    pub fn new(window_ms: u64) -> Self {
        ExactWindow { window_ms, clock: 0, delivered: HashMap::new(), deliveries: VecDeque::new() }
    }

    /// Whether `key` at `time_ms` is a duplicate; records it if not.
    pub fn observe(&mut self, key: &K, time_ms: u64) -> bool {
        self.clock = self.clock.max(time_ms);
        let now = self.clock;
        while self.deliveries.front().is_some_and(|&t| now - t >= self.window_ms) {
            self.deliveries.pop_front();
        }
        if let Some(&t) = self.delivered.get(key)
            && now - t < self.window_ms
        {
            return true;
        }
        self.delivered.insert(key.clone(), now);
        self.deliveries.push_back(now);
        if self.delivered.len() > 4 * self.deliveries.len() + 1_000_000 {
            let window = self.window_ms;
            self.delivered.retain(|_, t| now - *t < window);
        }
        false
    }

    /// Records `key` as delivered at `time_ms` whatever it held: a verdict
    /// made without looking (an availability policy's "deliver"). A key
    /// already in the window is counted twice by [`Self::keys_in_window`]
    /// until the older delivery leaves it.
    pub fn force_deliver(&mut self, key: &K, time_ms: u64) {
        self.clock = self.clock.max(time_ms);
        self.delivered.insert(key.clone(), self.clock);
        self.deliveries.push_back(self.clock);
    }

    /// Distinct keys delivered inside the current window.
    pub fn keys_in_window(&self) -> usize {
        self.deliveries.len()
    }
}

/// Verdicts compared with the truth; "positive" means "duplicate".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Confusion {
    pub true_duplicates: u64,
    pub false_duplicates: u64,
    pub true_distinct: u64,
    pub false_distinct: u64,
}

impl Confusion {
    pub fn record(&mut self, said_duplicate: bool, is_duplicate: bool) {
        match (said_duplicate, is_duplicate) {
            (true, true) => self.true_duplicates += 1,
            (true, false) => self.false_duplicates += 1,
            (false, false) => self.true_distinct += 1,
            (false, true) => self.false_distinct += 1,
        }
    }

    /// FP / (FP + TN): distinct events wrongly dropped.
    pub fn fpr(&self) -> f64 {
        ratio(self.false_duplicates, self.false_duplicates + self.true_distinct)
    }

    /// FN / (FN + TP): duplicates wrongly delivered.
    pub fn fnr(&self) -> f64 {
        ratio(self.false_distinct, self.false_distinct + self.true_duplicates)
    }

    pub fn events(&self) -> u64 {
        self.true_duplicates + self.false_duplicates + self.true_distinct + self.false_distinct
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_runs_from_the_delivery() {
        let mut o = ExactWindow::new(100);
        assert!(!o.observe(&1, 0));
        assert!(o.observe(&1, 99));
        assert!(!o.observe(&1, 100));
        assert!(o.observe(&1, 150));
        assert!(!o.observe(&2, 150));
        assert_eq!(o.keys_in_window(), 2);
        assert!(!o.observe(&3, 300));
        assert_eq!(o.keys_in_window(), 1);
    }

    #[test]
    fn rates() {
        let mut c = Confusion::default();
        c.record(true, false);
        c.record(false, false);
        c.record(false, true);
        c.record(true, true);
        c.record(true, true);
        assert_eq!(c.fpr(), 0.5);
        assert!((c.fnr() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(c.events(), 5);
    }
}
