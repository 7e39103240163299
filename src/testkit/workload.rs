//! Synthetic event streams for the accuracy harness and tests: uniform and
//! Zipf keys, and a "recurring" stream whose copies arrive after a spread of
//! delays, with a rate profile that can burst. Deterministic for a seed.

use std::collections::VecDeque;

/// The workloads' PRNG (SplitMix64), shared with the decaying filters.
pub use crate::filter::random::Rng;

/// Zipf(α) over ranks `0..n` by inverse CDF.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, alpha: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for r in 1..=n {
            total += 1.0 / (r as f64).powf(alpha);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) as u64
    }
}

/// How keys are drawn.
#[derive(Clone, Debug)]
pub enum KeyDist {
    /// Independent draws, uniform over a universe of ids.
    Uniform { universe: u64 },
    /// Independent draws, Zipf over a universe of ids.
    Zipf(Zipf),
    /// Each event is a new key with probability `p_new`, else a copy of an
    /// earlier event whose age is log-uniform in `[min_gap_ms, max_gap_ms]`.
    Recurring { p_new: f64, min_gap_ms: u64, max_gap_ms: u64 },
}

/// Events per time unit, piecewise: `base` outside the burst, `base·factor`
/// inside `[burst_start, burst_end)` (in units).
#[derive(Clone, Copy, Debug)]
pub struct RateProfile {
    pub unit_ms: u64,
    pub base: u64,
    pub burst_factor: u64,
    pub burst_start: u64,
    pub burst_end: u64,
}

impl RateProfile {
    pub fn steady(unit_ms: u64, base: u64) -> Self {
        RateProfile { unit_ms, base, burst_factor: 1, burst_start: 0, burst_end: 0 }
    }

    pub fn rate_at(&self, unit: u64) -> u64 {
        if (self.burst_start..self.burst_end).contains(&unit) { self.base * self.burst_factor } else { self.base }
    }
}

/// A deterministic stream of `(key id, time ms)`, in time order.
pub struct Stream {
    rng: Rng,
    dist: KeyDist,
    profile: RateProfile,
    units: u64,
    unit: u64,
    in_unit: u64,
    next_id: u64,
    history: VecDeque<(u64, u64)>,
}

impl Stream {
    /// `units` time units of events starting at time 0.
    pub fn new(seed: u64, dist: KeyDist, profile: RateProfile, units: u64) -> Self {
        Stream { rng: Rng::new(seed), dist, profile, units, unit: 0, in_unit: 0, next_id: 0, history: VecDeque::new() }
    }
}

impl Iterator for Stream {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        while self.unit < self.units && self.in_unit >= self.profile.rate_at(self.unit) {
            self.unit += 1;
            self.in_unit = 0;
        }
        if self.unit >= self.units {
            return None;
        }
        let rate = self.profile.rate_at(self.unit);
        let time = self.unit * self.profile.unit_ms + self.in_unit * self.profile.unit_ms / rate;
        self.in_unit += 1;
        let id = match &self.dist {
            KeyDist::Uniform { universe } => self.rng.below(*universe),
            KeyDist::Zipf(z) => z.sample(&mut self.rng),
            KeyDist::Recurring { p_new, min_gap_ms, max_gap_ms } => {
                let (p_new, min_gap, max_gap) = (*p_new, *min_gap_ms as f64, *max_gap_ms as f64);
                while self.history.front().is_some_and(|&(_, t)| t + *max_gap_ms < time) {
                    self.history.pop_front();
                }
                let fresh = self.rng.next_f64() < p_new || self.history.is_empty();
                let id = if fresh {
                    self.next_id += 1;
                    self.next_id
                } else {
                    let gap = (min_gap.ln() + self.rng.next_f64() * (max_gap.ln() - min_gap.ln())).exp() as u64;
                    let target = time.saturating_sub(gap);
                    let at = self.history.partition_point(|&(_, t)| t < target).min(self.history.len() - 1);
                    self.history[at].0
                };
                self.history.push_back((id, time));
                id
            }
        };
        Some((id, time))
    }
}

/// A headline-like text key for id `id`: 4 to 9 words from a fixed
/// vocabulary, deterministic per id (the same id always gives the same text,
/// different ids almost always differ).
pub fn headline(id: u64) -> String {
    const WORDS: [&str; 64] = [
        "market", "storm", "election", "league", "river", "council", "record", "study", "city", "late", "court",
        "energy", "price", "school", "union", "film", "season", "police", "bank", "health", "report", "winter",
        "trade", "border", "festival", "crash", "vote", "talks", "fire", "budget", "station", "rally", "launch",
        "deal", "strike", "museum", "coach", "farm", "plan", "warns", "rises", "falls", "opens", "closes", "wins",
        "loses", "new", "old", "first", "final", "north", "south", "east", "west", "local", "global", "after",
        "before", "over", "under", "amid", "despite", "cup", "data",
    ];
    let mut rng = Rng::new(id.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
    let n = 4 + rng.below(6);
    let mut s = String::with_capacity(64);
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    // Disambiguate the rare collisions of short word sequences.
    s.push_str(&format!(" #{}", id % 997));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_low_ranks() {
        let z = Zipf::new(1000, 1.0);
        let mut rng = Rng::new(1);
        let hits = (0..10_000).filter(|_| z.sample(&mut rng) == 0).count();
        // P(rank 0) = 1/H_1000 ≈ 0.134.
        assert!((1_200..1_500).contains(&hits), "{hits}");
    }

    #[test]
    fn streams_follow_the_rate_profile() {
        let profile = RateProfile { unit_ms: 1000, base: 10, burst_factor: 5, burst_start: 2, burst_end: 3 };
        let events: Vec<_> = Stream::new(7, KeyDist::Uniform { universe: 100 }, profile, 4).collect();
        assert_eq!(events.len(), 10 + 10 + 50 + 10);
        assert!(events.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!(events.iter().filter(|e| (2000..3000).contains(&e.1)).count(), 50);
    }

    #[test]
    fn recurring_streams_repeat_keys() {
        let dist = KeyDist::Recurring { p_new: 0.5, min_gap_ms: 10, max_gap_ms: 10_000 };
        let events: Vec<_> = Stream::new(3, dist, RateProfile::steady(1000, 100), 60).collect();
        let distinct: std::collections::HashSet<_> = events.iter().map(|e| e.0).collect();
        let share = distinct.len() as f64 / events.len() as f64;
        assert!((0.45..0.55).contains(&share), "{share}");
    }
}
