//! The vertical filter's threads: T − 1 parked workers that, with the
//! caller as the T-th, run one job on every thread at once (`job(t)` on
//! thread t) and return when all have finished — a persistent pool, so a
//! round of a batch costs a wake-up per worker instead of a thread spawn.
//!
//! The job borrows the caller's data (the owners' cell parts, the batch):
//! [`Pool::run`] hands the workers a pointer to it with its lifetime
//! erased, and does not return, or unwind, before every worker is done
//! with it. A worker's panic is caught, waited for like a return, and
//! raised again in the caller.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// What every thread of a round runs, with its thread number.
pub(super) type Job<'a> = dyn Fn(usize) + Sync + 'a;

pub(super) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    start: Condvar,
    done: Condvar,
}

struct State {
    /// The job of the current round (see [`Pool::run`] for how long it lives).
    job: Option<JobPtr>,
    round: u64,
    /// Workers that have not finished the current round.
    running: usize,
    panicked: bool,
    stop: bool,
}

#[derive(Clone, Copy)]
struct JobPtr(*const Job<'static>);

// SAFETY: the pointee is `Sync`, so calling it from any thread is allowed;
// the pointer is dereferenced only while `Pool::run` keeps its referent
// alive (see there).
unsafe impl Send for JobPtr {}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Jobs run outside the lock and panics are caught: never poisoned in
    // practice, and the state stays consistent if it were.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pool {
    /// A pool of `threads` threads in all: the caller and `threads - 1` workers.
    pub(super) fn new(threads: usize) -> Pool {
        let state = State { job: None, round: 0, running: 0, panicked: false, stop: false };
        let shared = Arc::new(Shared { state: Mutex::new(state), start: Condvar::new(), done: Condvar::new() });
        let workers = (1..threads.max(1))
            .map(|t| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("dedupd-vertical-{t}"))
                    .spawn(move || work(&shared, t))
                    .expect("spawning a vertical filter thread")
            })
            .collect();
        Pool { shared, workers }
    }

    /// Threads in all, the caller's included.
    pub(super) fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(t)` on thread t for every t in `0..threads` (0 is the
    /// caller's) and returns when all have returned. A panic in any of them
    /// is raised here once all have finished.
    pub(super) fn run(&self, job: &Job<'_>) {
        if self.workers.is_empty() {
            job(0);
            return;
        }
        // SAFETY: only the lifetime changes (same fat pointer). The workers
        // call the job between the store below and their decrement of
        // `running`; this function waits for `running` to reach 0 before it
        // returns or resumes a panic, so the job outlives every call.
        let erased = unsafe { std::mem::transmute::<*const Job<'_>, *const Job<'static>>(job) };
        {
            let mut state = lock(&self.shared.state);
            state.job = Some(JobPtr(erased));
            state.round += 1;
            state.running = self.workers.len();
        }
        self.shared.start.notify_all();
        let mine = panic::catch_unwind(AssertUnwindSafe(|| job(0)));
        let mut state = lock(&self.shared.state);
        while state.running > 0 {
            state = self.shared.done.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        state.job = None;
        let theirs = std::mem::take(&mut state.panicked);
        drop(state);
        if let Err(payload) = mine {
            panic::resume_unwind(payload);
        }
        assert!(!theirs, "a vertical filter thread panicked");
    }
}

/// A worker: waits for a round, runs its part, reports, and again.
fn work(shared: &Shared, t: usize) {
    let mut seen = 0;
    loop {
        let job = {
            let mut state = lock(&shared.state);
            while state.round == seen && !state.stop {
                state = shared.start.wait(state).unwrap_or_else(PoisonError::into_inner);
            }
            if state.stop {
                return;
            }
            seen = state.round;
            state.job.expect("a round has a job")
        };
        // SAFETY: `Pool::run` keeps the job alive until `running` is back at
        // 0, and this worker decrements it only after this, its last use.
        let result = panic::catch_unwind(AssertUnwindSafe(|| unsafe { (*job.0)(t) }));
        let mut state = lock(&shared.state);
        state.panicked |= result.is_err();
        state.running -= 1;
        if state.running == 0 {
            shared.done.notify_one();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.start.notify_all();
        for worker in self.workers.drain(..) {
            // A worker never panics outside a job (those are caught).
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_thread_runs_each_round_once() {
        for threads in 1..=4 {
            let pool = Pool::new(threads);
            assert_eq!(pool.threads(), threads);
            let counts: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..200 {
                pool.run(&|t| {
                    counts[t].fetch_add(1, Ordering::Relaxed);
                });
            }
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 200));
        }
    }

    #[test]
    fn a_worker_panic_reaches_the_caller_and_the_pool_goes_on() {
        let pool = Pool::new(3);
        let hit = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|t| assert_ne!(t, 2, "worker 2 fails"));
        }));
        assert!(hit.is_err());
        let ran = AtomicUsize::new(0);
        pool.run(&|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.load(Ordering::Relaxed), 3);
    }
}
