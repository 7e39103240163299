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
    /// Repartition and shared mode: the input partition that holds the
    /// watermark back (the slowest one not announced idle), absent when
    /// none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<HeldBy>,
}

/// The input partition a slice's watermark waits for, and the largest
/// event time its routers have announced routing from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HeldBy {
    pub topic: String,
    pub partition: i32,
    pub time_ms: u64,
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

/// A feature's answer to a request on a key that changes a slice
/// (`DELETE /v1/keys/{key}`): an HTTP status and a JSON body. Blocks until
/// the slice applied it (or a time limit).
pub type KeyActionFn = Arc<dyn Fn(&[u8]) -> (StatusCode, serde_json::Value) + Send + Sync>;

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
    /// The features' key actions, by feature name: set by the slice
    /// workers once they run (the feature's admin route answers 503 before).
    pub key_actions: Mutex<BTreeMap<&'static str, KeyActionFn>>,
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
