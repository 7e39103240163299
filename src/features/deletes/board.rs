//! Where the slice that applied a delete request posts its outcome for the
//! request waiting on it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
