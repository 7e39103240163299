//! What the slice workers share with the admin endpoint: each slice's
//! status, readiness and health, the key lookups and deletes they answer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde::Serialize;

/// What one slice looks like from outside (`/v1/slices`, `dedupd status`).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct SliceStatus {
    pub slice: u32,
    pub next_offset: u64,
    /// Records of the slice log not yet taken in (`dedupd_consumer_lag`).
    pub lag: i64,
    /// The release position up to which judgments are replayed silently.
    pub replaying_until: Option<String>,
    pub clock_ms: Option<u64>,
    pub generations: usize,
    pub density: f64,
    pub estimated_fpr: f64,
    pub memory_bytes: usize,
    pub distinct: u64,
    pub duplicates: u64,
    pub invalid: u64,
    pub resends: u64,
    /// Records judged after arriving more than input.lateness late.
    pub late: u64,
    /// Records waiting for the watermark.
    pub waiting: u64,
    pub last_checkpoint_offset: Option<u64>,
}

/// Answers `/v1/lookup` (or a feature's `/v1/<name>`) for a key, or
/// [`Busy`] when the slice workers did not let it in within [`LOOKUP_WAIT`].
/// An `Arc`: a request clones it out of [`Status`] and holds no lock of
/// [`Status`] while it runs.
pub type LookupFn = Arc<dyn Fn(&[u8]) -> Result<serde_json::Value, Busy> + Send + Sync>;

/// A feature's key endpoint: its answer, set by the slice workers when the
/// feature is on, and what it answers (404) while off.
#[derive(Clone, Default)]
pub struct FeatureLookup {
    pub answer: Option<LookupFn>,
    pub off: &'static str,
}

/// A key lookup that could not take the slice workers' lock in time: they
/// hold it for as long as they wait for the broker (an idle flush during
/// an outage) or run a rebalance callback, minutes at worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

/// How long a key lookup waits for the slice workers' lock before it
/// answers 503 busy: long enough to get in between two batches of a busy
/// worker, short enough that lookups never pile up on a worker stuck on
/// the broker.
pub const LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// Locks `mutex` if it comes free within `wait` (tried every few
/// milliseconds), else `None`. A poisoned lock panics, as `lock().expect()`
/// does.
pub fn lock_within<T>(mutex: &Mutex<T>, wait: Duration) -> Option<std::sync::MutexGuard<'_, T>> {
    let deadline = Instant::now() + wait;
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => panic!("lock poisoned: {e}"),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() >= deadline => return None,
            Err(std::sync::TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Answers `DELETE /v1/keys/{key}`: an HTTP status and a JSON body. Blocks
/// until the slice applied the delete (or a time limit).
pub type DeleteFn = Arc<dyn Fn(&[u8]) -> (StatusCode, serde_json::Value) + Send + Sync>;

/// The outcomes of delete requests, by (slice, slice offset of the request),
/// posted by the slice worker that applied them and taken by the request
/// waiting for them.
#[derive(Default)]
pub struct DeleteBoard {
    /// Each outcome with the time it was posted.
    outcomes: Mutex<BTreeMap<(u32, u64), (DeleteOutcome, Instant)>>,
    posted: std::sync::Condvar,
}

type DeleteOutcome = Result<(), crate::filter::DeleteRefusal>;

/// Outcomes nobody came for (a request that timed out, a replay after a
/// restart, a delete another member's request wrote) are dropped by age: a
/// waiting request takes its outcome within seconds, so one this old has no
/// taker left. A burst is bounded by count too, dropping the oldest posted
/// (not the lowest slice or offset: a fresh outcome must outlive stale ones).
const DELETE_OUTCOME_TTL: Duration = Duration::from_secs(60);
const DELETE_OUTCOMES_KEPT: usize = 1024;

impl DeleteBoard {
    pub fn post(&self, slice: u32, offset: u64, outcome: DeleteOutcome) {
        self.post_at(slice, offset, outcome, Instant::now());
    }

    fn post_at(&self, slice: u32, offset: u64, outcome: DeleteOutcome, now: Instant) {
        let mut outcomes = self.outcomes.lock().expect("delete board lock");
        outcomes.retain(|_, (_, at)| now.saturating_duration_since(*at) < DELETE_OUTCOME_TTL);
        outcomes.insert((slice, offset), (outcome, now));
        while outcomes.len() > DELETE_OUTCOMES_KEPT {
            let oldest = *outcomes.iter().min_by_key(|(_, (_, at))| *at).expect("not empty").0;
            outcomes.remove(&oldest);
        }
        self.posted.notify_all();
    }

    /// Waits at most `timeout` for the outcome of the request at `offset` of `slice`.
    pub fn wait(&self, slice: u32, offset: u64, timeout: Duration) -> Option<DeleteOutcome> {
        let deadline = Instant::now() + timeout;
        let mut outcomes = self.outcomes.lock().expect("delete board lock");
        loop {
            if let Some((outcome, _)) = outcomes.remove(&(slice, offset)) {
                return Some(outcome);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            outcomes = self.posted.wait_timeout(outcomes, left).expect("delete board lock").0;
        }
    }

    /// Outcomes held (taken or dropped ones are not).
    pub fn len(&self) -> usize {
        self.outcomes.lock().expect("delete board lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Shared between the workers (writers) and the admin endpoint (reader).
#[derive(Default)]
pub struct Status {
    /// The group assignment happened and no restore is in progress.
    pub ready: AtomicBool,
    /// A fatal error stops the daemon; until then the endpoint reports it.
    pub healthy: AtomicBool,
    pub slices: Mutex<BTreeMap<u32, SliceStatus>>,
    /// Set by the slice workers once they run.
    pub lookup: Mutex<Option<LookupFn>>,
    /// Set by the slice workers once they run.
    pub delete: Mutex<Option<DeleteFn>>,
    pub deletes: DeleteBoard,
    /// The features' key endpoints (`/v1/<name>`), by name: listed before
    /// the endpoint starts (it routes those), answered once the slice
    /// workers run with the feature on.
    pub feature_lookups: Mutex<BTreeMap<&'static str, FeatureLookup>>,
    /// When the slice consumer last received anything from a broker, as
    /// librdkafka's statistics tell (None before the first statistics).
    /// A stopped or unreachable broker keeps its connections open without
    /// answering, so neither the assignment nor an error says so; this does.
    pub broker_contact: Mutex<Option<Instant>>,
}

/// Silence of every broker connection this long makes `/readyz` answer 503:
/// a healthy consumer hears from its broker at least every
/// `fetch.wait.max.ms` (500 ms) and statistics come every 2 s.
pub const BROKER_SILENCE_NOT_READY: Duration = Duration::from_secs(10);

/// A record waiting this long for the schema registry makes `/readyz`
/// answer 503 (the slice holds its input meanwhile).
pub const REGISTRY_OUTAGE_NOT_READY: Duration = Duration::from_secs(5);

impl Status {
    pub fn new() -> Arc<Self> {
        let s = Status::default();
        s.healthy.store(true, Ordering::Relaxed);
        Arc::new(s)
    }

    /// Records that a broker was heard from at `at` (never moves back).
    pub fn heard_from_broker(&self, at: Instant) {
        let mut contact = self.broker_contact.lock().expect("status lock");
        if contact.is_none_or(|c| c < at) {
            *contact = Some(at);
        }
    }

    /// How long no broker has been heard from, if known.
    pub fn broker_silence(&self) -> Option<Duration> {
        self.broker_contact.lock().expect("status lock").map(|c| c.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The board drops outcomes by age and, over its size bound, the oldest
    /// posted — never a fresh one for having a low slice or offset.
    #[test]
    fn delete_board_evicts_by_age_not_by_position() {
        use crate::filter::DeleteRefusal;
        let board = DeleteBoard::default();
        let now = Instant::now();
        // A full board of stale-ish outcomes of a high slice...
        for offset in 0..DELETE_OUTCOMES_KEPT as u64 {
            board.post_at(7, 1000 + offset, Err(DeleteRefusal::Absent), now - Duration::from_secs(5));
        }
        // ...then a fresh outcome of slice 0 at a low offset: it is kept.
        board.post_at(0, 3, Ok(()), now);
        assert_eq!(board.len(), DELETE_OUTCOMES_KEPT);
        assert_eq!(board.wait(0, 3, Duration::ZERO), Some(Ok(())));
        assert_eq!(board.wait(7, 1000, Duration::ZERO), None, "the oldest posted was dropped");
        assert_eq!(board.wait(7, 1001, Duration::ZERO), Some(Err(DeleteRefusal::Absent)));
        // Outcomes older than the TTL go at the next post, whatever their key.
        board.post_at(9, 1, Ok(()), now + DELETE_OUTCOME_TTL);
        assert_eq!(board.len(), 1);
        assert_eq!(board.wait(9, 1, Duration::ZERO), Some(Ok(())));
    }
}
