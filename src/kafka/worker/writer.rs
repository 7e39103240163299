//! The checkpoint writer thread: writes a slice's snapshot once the
//! outputs sent before it are acknowledged (see the module documentation of
//! [`super`]).

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::setup::WorkerSetup;
use crate::engine::SliceImage;
use crate::kafka::KafkaLayerError;
use crate::kafka::checkpoint::Manifest;
use crate::kafka::producer::{SentMark, wait_acked};

/// How long a write (a snapshot, a flush-log record) waits for the broker
/// to acknowledge what was sent before it, at a time.
pub(super) const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);
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
}

/// What became of a [`Job`].
pub(super) struct Written {
    pub(super) slice: u32,
    pub(super) result: Result<(Manifest, usize), KafkaLayerError>,
    /// The buffer, back for the next snapshot.
    pub(super) buffer: Vec<u8>,
    /// From taken to written.
    pub(super) took: Duration,
}

/// The worker's side of the checkpoint writer thread.
pub(super) struct Writer {
    pub(super) jobs: Option<mpsc::Sender<Job>>,
    pub(super) written: mpsc::Receiver<Written>,
    /// Jobs sent and not yet answered.
    pub(super) outstanding: usize,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    pub(super) fn start(deps: Arc<WorkerSetup>) -> Writer {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done, written) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dedupd-checkpoints".into())
            .spawn(move || {
                for job in job_rx {
                    let Job { slice, offset, mut image, mark, previous, flush_log_offset, taken } = job;
                    let at = (offset, flush_log_offset);
                    let result = write_snapshot(&deps, slice, at, image.seal(), &mark, previous.as_ref());
                    let took = taken.elapsed();
                    if done.send(Written { slice, result, buffer: image.into_buffer(), took }).is_err() {
                        break;
                    }
                }
            })
            .expect("starting the checkpoint writer thread");
        Writer { jobs: Some(jobs), written, outstanding: 0, thread: Some(thread) }
    }

    /// Stops the thread after the jobs already sent.
    pub(super) fn stop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The checkpoint writer's work: waits until the slice's outputs up to the
/// snapshot are acknowledged, then writes the snapshot.
fn write_snapshot(
    deps: &WorkerSetup,
    slice: u32,
    (offset, flush_log_offset): (u64, u64),
    bytes: &[u8],
    mark: &SentMark,
    previous: Option<&Manifest>,
) -> Result<(Manifest, usize), KafkaLayerError> {
    wait_acked(&deps.producer, mark, FLUSH_TIMEOUT).map_err(|detail| KafkaLayerError::Checkpoint {
        slice,
        detail: format!("outputs before the snapshot: {detail}"),
    })?;
    let fingerprint = crate::kafka::restore::fingerprint(&deps.params, deps.cfg.counting.as_ref());
    let manifest = deps.store.write_noting(slice, offset, bytes, &fingerprint, previous, Some(flush_log_offset))?;
    Ok((manifest, bytes.len()))
}
