//! The checkpoint writer thread: writes a slice's snapshot once the
//! outputs sent before it are acknowledged (see the module documentation of
//! [`super`]), unless the slice was released meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::setup::WorkerSetup;
use crate::engine::SliceImage;
use crate::kafka::KafkaLayerError;
use crate::kafka::checkpoint::{Fence, Manifest, WriteOutcome};
use crate::kafka::producer::{SentMark, wait_acked};

/// How long a write (a snapshot, a flush-log record) waits for the broker
/// to acknowledge what was sent before it, at a time.
pub(super) const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a snapshot write may take from when it is handed to the writer:
/// the wait for its outputs, its chunks and its manifest all end by then.
/// A release waits this long (and [`ANSWER_MARGIN`]) for its slice's write,
/// so it never gives up on a write that may still land.
pub(super) const WRITE_DEADLINE: Duration = Duration::from_secs(60);
/// What the writer may take beyond a write's deadline to answer for it.
pub(super) const ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// A snapshot for the checkpoint writer.
pub(super) struct Job {
    pub(super) slice: u32,
    /// The slice offset it was taken at.
    pub(super) offset: u64,
    pub(super) image: SliceImage,
    /// What had been sent to the slice's output partitions when it was taken.
    pub(super) mark: SentMark,
    pub(super) previous: Option<Manifest>,
    /// Where a restore from it reads the flush log from.
    pub(super) flush_log_offset: u64,
    /// When the snapshot was taken.
    pub(super) taken: Instant,
    /// The slice's [`Ownership`] epoch when the job was queued.
    pub(super) epoch: u64,
    /// When the write must be done ([`WRITE_DEADLINE`] after it was queued).
    pub(super) deadline: Instant,
}

/// What a job came to, if it did not fail.
#[derive(Debug)]
pub(super) enum Done {
    /// Written: its manifest and size.
    Written(Manifest, usize),
    /// Not written, or not all of it: the slice was released before the step named.
    Dropped(&'static str),
}

/// What became of a [`Job`].
pub(super) struct Written {
    pub(super) slice: u32,
    /// The epoch the job was queued in: its result is the slice's only if
    /// the slice is still owned in that epoch.
    pub(super) epoch: u64,
    pub(super) result: Result<Done, KafkaLayerError>,
    /// The buffer, back for the next snapshot.
    pub(super) buffer: Vec<u8>,
    /// From taken to written.
    pub(super) took: Duration,
}

/// Which ownership of each slice this member is in: the worker releases a
/// slice (a new epoch) when it is revoked or its assignment is lost, and the
/// writer drops a job of an earlier epoch before each step. Shared with the
/// writer thread, which must not wait for the worker lock the release holds.
#[derive(Default)]
pub(super) struct Ownership {
    epochs: Mutex<HashMap<u32, u64>>,
}

impl Ownership {
    pub(super) fn epoch(&self, slice: u32) -> u64 {
        self.epochs.lock().expect("ownership lock").get(&slice).copied().unwrap_or(0)
    }

    /// The slice is this member's no more: its jobs queued so far are dropped.
    pub(super) fn release(&self, slice: u32) {
        *self.epochs.lock().expect("ownership lock").entry(slice).or_default() += 1;
    }

    pub(super) fn holds(&self, slice: u32, epoch: u64) -> bool {
        self.epoch(slice) == epoch
    }
}

/// The worker's side of the checkpoint writer thread.
pub(super) struct Writer {
    pub(super) jobs: Option<mpsc::Sender<Job>>,
    pub(super) written: mpsc::Receiver<Written>,
    /// Jobs sent and not yet answered.
    pub(super) outstanding: usize,
    pub(super) ownership: Arc<Ownership>,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    pub(super) fn start(setup: Arc<WorkerSetup>) -> Writer {
        Writer::start_with(move |job, fence| write_snapshot(&setup, job, fence))
    }

    /// The writer thread, writing each job (unless fenced off) with `write`.
    fn start_with(
        mut write: impl FnMut(&mut Job, &Fence<'_>) -> Result<Done, KafkaLayerError> + Send + 'static,
    ) -> Writer {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done, written) = mpsc::channel();
        let ownership = Arc::new(Ownership::default());
        let owners = ownership.clone();
        let thread = std::thread::Builder::new()
            .name("dedupd-checkpoints".into())
            .spawn(move || {
                for mut job in job_rx {
                    let (slice, epoch) = (job.slice, job.epoch);
                    let result = fenced(&owners, slice, epoch, job.deadline, |fence| write(&mut job, fence));
                    let took = job.taken.elapsed();
                    let answer = Written { slice, epoch, result, buffer: job.image.into_buffer(), took };
                    if done.send(answer).is_err() {
                        break;
                    }
                }
            })
            .expect("starting the checkpoint writer thread");
        Writer { jobs: Some(jobs), written, outstanding: 0, ownership, thread: Some(thread) }
    }

    /// Stops the thread after the jobs already sent.
    pub(super) fn stop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `write` for a job of `slice` queued in `epoch`, fenced by the
/// slice's ownership and the job's deadline: a job whose slice was released
/// since it was queued is dropped before it starts, and `write` checks the
/// fence again before its chunks and its manifest.
fn fenced(
    ownership: &Ownership,
    slice: u32,
    epoch: u64,
    deadline: Instant,
    write: impl FnOnce(&Fence<'_>) -> Result<Done, KafkaLayerError>,
) -> Result<Done, KafkaLayerError> {
    let still_owned = || ownership.holds(slice, epoch);
    if !still_owned() {
        return Ok(Done::Dropped("its start"));
    }
    if Instant::now() >= deadline {
        return Err(KafkaLayerError::Timeout(format!(
            "slice {slice}: the snapshot waited for the writer past its deadline ({WRITE_DEADLINE:?})"
        )));
    }
    write(&Fence { still_owned: &still_owned, deadline })
}

/// The checkpoint writer's work: waits until the slice's outputs up to the
/// snapshot are acknowledged, then writes the snapshot.
fn write_snapshot(setup: &WorkerSetup, job: &mut Job, fence: &Fence<'_>) -> Result<Done, KafkaLayerError> {
    let Job { slice, offset, image, mark, previous, flush_log_offset, .. } = job;
    let slice = *slice;
    let timeout = fence.deadline.saturating_duration_since(Instant::now()).min(FLUSH_TIMEOUT);
    wait_acked(&setup.producer, mark, timeout).map_err(|detail| KafkaLayerError::Checkpoint {
        slice,
        detail: format!("outputs before the snapshot: {detail}"),
    })?;
    let fingerprint = crate::kafka::restore::fingerprint(&setup.filter, &setup.stages);
    let bytes = image.seal();
    let at = (*offset, Some(*flush_log_offset));
    Ok(match setup.store.write_fenced(slice, at, bytes, &fingerprint, previous.as_ref(), fence)? {
        WriteOutcome::Written(manifest) => Done::Written(manifest, bytes.len()),
        WriteOutcome::Dropped(before) => Done::Dropped(before),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{OrderSettings, SliceState};
    use crate::filter::FilterSpec;

    fn later() -> Instant {
        Instant::now() + WRITE_DEADLINE
    }

    /// A job queued before its slice was released (revoked, or its
    /// assignment lost) is not written; a job of the slice's new epoch, and
    /// a job of another slice, are.
    #[test]
    fn a_job_queued_for_a_released_slice_is_not_written() {
        let ownership = Ownership::default();
        let queued = ownership.epoch(3);
        let other = ownership.epoch(4);
        ownership.release(3);
        let result = fenced(&ownership, 3, queued, later(), |_| panic!("a released slice's snapshot was written"));
        assert!(matches!(result, Ok(Done::Dropped("its start"))), "{result:?}");

        let now = ownership.epoch(3);
        assert_ne!(now, queued);
        let result = fenced(&ownership, 3, now, later(), |_| Ok(Done::Dropped("a stand-in for written")));
        assert!(matches!(result, Ok(Done::Dropped("a stand-in for written"))), "{result:?}");
        let mut wrote = false;
        let _ = fenced(&ownership, 4, other, later(), |_| {
            wrote = true;
            Ok(Done::Dropped("-"))
        });
        assert!(wrote, "another slice's job was dropped");
    }

    /// The fence a write checks before its manifest turns once the slice
    /// is released while the write is under way.
    #[test]
    fn a_release_during_the_write_closes_its_fence() {
        let ownership = Ownership::default();
        let epoch = ownership.epoch(7);
        let _ = fenced(&ownership, 7, epoch, later(), |fence| {
            assert!((fence.still_owned)());
            ownership.release(7);
            assert!(!(fence.still_owned)(), "the fence stayed open after the release");
            Ok(Done::Dropped("its manifest"))
        });
    }

    fn job(slice: u32, epoch: u64) -> Job {
        let params = FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap();
        let order = OrderSettings { lateness_ms: 0, max_clock_jump_ms: 100_000, jump_confirmations: 1 };
        let mut state = SliceState::new(slice, params, 0, order);
        state.begin_copy(Vec::new());
        let image = state.finish_copy().expect("a copy begun");
        let (mark, taken) = (SentMark::default(), Instant::now());
        Job { slice, offset: 0, image, mark, previous: None, flush_log_offset: 0, taken, epoch, deadline: later() }
    }

    fn manifest(slice: u32) -> Manifest {
        Manifest {
            format: 2,
            slice,
            seq: 0,
            offset: 0,
            chunks: 0,
            bytes: 0,
            checksum: 0,
            written_at_ms: 0,
            params: String::new(),
            first_chunk_offset: None,
            app: None,
            flush_log_offset: None,
            attempt: Some(1),
        }
    }

    /// The writer thread itself: a job queued behind another while its
    /// slice is released is answered as dropped without being written; the
    /// slice's next job, in its new epoch, is written.
    #[test]
    fn the_writer_drops_a_job_queued_before_its_slice_was_released() {
        let (gate, held) = mpsc::channel::<()>();
        let wrote = Arc::new(Mutex::new(Vec::new()));
        let log = wrote.clone();
        let mut writer = Writer::start_with(move |job, _| {
            if job.slice == 5 {
                held.recv().expect("the gate");
            }
            log.lock().unwrap().push(job.slice);
            Ok(Done::Written(manifest(job.slice), 0))
        });
        let jobs = writer.jobs.clone().unwrap();
        jobs.send(job(5, writer.ownership.epoch(5))).unwrap();
        jobs.send(job(3, writer.ownership.epoch(3))).unwrap();
        writer.ownership.release(3);
        gate.send(()).unwrap();
        let answers: Vec<Written> = (0..2).map(|_| writer.written.recv().unwrap()).collect();
        assert!(matches!(answers[0].result, Ok(Done::Written(..))) && answers[0].slice == 5);
        assert!(matches!(answers[1].result, Ok(Done::Dropped("its start"))), "{:?}", answers[1].result);
        assert_eq!(answers[1].slice, 3);
        assert!(!writer.ownership.holds(3, answers[1].epoch));
        assert_eq!(*wrote.lock().unwrap(), [5], "the released slice's job was written");

        jobs.send(job(3, writer.ownership.epoch(3))).unwrap();
        assert!(matches!(writer.written.recv().unwrap().result, Ok(Done::Written(..))));
        assert_eq!(*wrote.lock().unwrap(), [5, 3]);
        drop(jobs);
        writer.stop();
    }

    /// A job that waited in the queue past its deadline is not started.
    #[test]
    fn a_job_past_its_deadline_is_not_started() {
        let ownership = Ownership::default();
        let past = Instant::now() - Duration::from_millis(1);
        let result = fenced(&ownership, 1, 0, past, |_| panic!("started past its deadline"));
        assert!(matches!(result, Err(KafkaLayerError::Timeout(_))), "{result:?}");
    }
}
