//! The worker standing still: a stopped process (SIGSTOP, a VM paused), a
//! starved CPU. Its slices did not go idle meanwhile, the worker did; and
//! if it stood still beyond `session.timeout.ms`, the group has given its
//! slices to another member, which writes for them now. Whatever this
//! process wrote for them on waking — judgments of the records polled
//! then, idle flushes, snapshots — would be a zombie's writes.
//!
//! So a stall seen when a poll returns holds the worker back for
//! [`SETTLE`] before anything polled is handled: the records polled
//! meanwhile are let go and read again afterwards (each slice sought back
//! to where it stands), no idle flush and no snapshot is made, and
//! librdkafka has the time to learn from the coordinator whether the
//! assignment is lost (it asks at once on waking) and to revoke it. A
//! stall inside a turn (while records were handled) is seen at its end:
//! then only idleness and snapshots count again from there.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, ConsumerContext};

use super::restores::read_from;
use super::setup::WorkerSetup;
use super::state::WorkerState;

/// A gap this long between two turns of the worker loop means the worker
/// itself stood still, not that its slices received nothing. A turn
/// normally takes one poll (100 ms) plus its records' work.
pub(super) const WORKER_STALL: Duration = Duration::from_secs(1);
/// After such a stall, what is polled is not handled for this long, and no
/// snapshot starts.
pub(super) const SETTLE: Duration = Duration::from_secs(2);

/// Watches the gaps between the worker's turns.
pub(super) struct StallWatch {
    /// When the last turn ended.
    last_turn: Instant,
    /// Set after a stall seen before a batch: until then nothing polled is handled.
    settle_until: Option<Instant>,
}

/// What the worker does with the batch it has just polled.
pub(super) enum Turn {
    /// Handles it.
    Handle,
    /// Lets it go (read again once settled).
    Settle,
    /// Settled: seeks its slices back, then handles it.
    Resume,
}

impl StallWatch {
    pub(super) fn new() -> Self {
        StallWatch { last_turn: Instant::now(), settle_until: None }
    }

    /// Called when a poll returns, before its batch is handled.
    pub(super) fn polled(&mut self, worker_state: &mut WorkerState, now: Instant) -> Turn {
        let stalled = now.saturating_duration_since(self.last_turn);
        if stalled >= WORKER_STALL {
            after_stall(worker_state, stalled, "what is polled for the next 2 s is read again after");
            self.settle_until = Some(now + SETTLE);
        }
        let turn = match self.settle_until {
            None => return Turn::Handle,
            Some(until) if now < until => Turn::Settle,
            Some(_) => {
                self.settle_until = None;
                Turn::Resume
            }
        };
        // A turn that handles nothing ends here.
        self.last_turn = now;
        turn
    }

    /// Called when a turn ends; `true` if it stood still inside the turn.
    pub(super) fn turn_ended(&mut self, worker_state: &mut WorkerState) -> bool {
        let stalled = self.last_turn.elapsed();
        self.last_turn = Instant::now();
        if stalled < WORKER_STALL {
            return false;
        }
        after_stall(worker_state, stalled, "idle flushes and snapshots count from now");
        true
    }

    /// Whether the worker is settling after a stall: no idle flush now.
    pub(super) fn settling(&self) -> bool {
        self.settle_until.is_some()
    }
}

/// Idleness counts again from now: without this, every slice holding
/// records would look idle on waking and be flushed at once (measured: 14
/// outputs delivered twice by `scripts/faults.sh daemon-pause` before).
fn after_stall(worker_state: &mut WorkerState, stalled: Duration, then: &str) {
    log::info!(
        "slice workers: stood still for {:.1} s (a stopped process or a starved CPU); {then}",
        stalled.as_secs_f64()
    );
    idle_from_now(worker_state);
}

/// Every owned slice counts its idleness from now.
fn idle_from_now(worker_state: &mut WorkerState) {
    let now = Instant::now();
    for owned in worker_state.slices.values_mut() {
        owned.last_arrival = now;
    }
}

/// After settling: every slice still owned (or decided by the policy) is
/// read again from where it stands, records polled meanwhile included;
/// idleness counts from now (those records are on their way again).
pub(super) fn seek_back<C: ConsumerContext>(
    setup: &WorkerSetup,
    consumer: &BaseConsumer<C>,
    worker_state: &mut WorkerState,
) {
    idle_from_now(worker_state);
    let at: Vec<(u32, u64)> = worker_state
        .slices
        .iter()
        .map(|(&s, o)| (s, o.state.next_offset))
        .chain(worker_state.deciding.iter().map(|(&s, d)| (s, d.next)))
        .collect();
    log::info!("slice workers: settled after the stall; slices {at:?} are read again from these offsets");
    for (slice, next) in at {
        if let Err(e) = read_from(setup, consumer, worker_state, slice, next) {
            worker_state.fatal.get_or_insert(e);
        }
    }
}
