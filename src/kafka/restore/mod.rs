//! Where a slice resumes (docs/design.md, invariants 5 and 7).
//!
//! Load the newest valid snapshot (taken at slice offset X); re-read from
//! the slice log the records that were waiting for the watermark at X (the
//! snapshot lists their offsets); read the idle flushes logged since the
//! snapshot (from the flush log offset its manifest names); read the tail of partition s of each topic the slice writes
//! (the highest release position there: that topic's bound Y, see
//! [`super::replay`]). Then replay from X, writing a judgment's record to a
//! topic only beyond that topic's Y, and go on. Because the engine is
//! deterministic, the replay rebuilds exactly the state an uninterrupted
//! run had, and each topic continues exactly where it stopped. Without a
//! usable snapshot the slice starts from the beginning of its retained log,
//! also silently up to each Y.
//!
//! Files of this folder: `tail.rs` (the replay bounds read from the tails),
//! `flush_log.rs` (idle flushes and policy ranges logged), `restorer.rs`
//! (the restore itself, [`Restorer`]), `log_form.rs` (a snapshot of the
//! other form of the slice log: carried over or refused).

mod flush_log;
mod log_form;
mod restorer;
mod tail;

pub use flush_log::{
    Decision, FlushLog, FlushLogSpan, LoggedFlush, PolicyRange, flush_record, policy_record, range_of, read_flushes,
};
pub use restorer::{RestoredFrom, Restorer, ResumePoint, fingerprint};
pub use tail::{TAIL_RECORDS, Written, read_tail};
