//! `dedupd run`: the daemon. Wires settings, topics, the admin endpoint, the
//! router (repartition mode) and the slice workers, and owns the one
//! shutdown sequence: on SIGTERM/SIGINT the router stops reading and commits
//! what it delivered, then the slice workers drain, snapshot every slice and
//! leave the group; the process exits 0 within `shutdown.timeout`. The
//! admin endpoint stops last, after the requests in flight (at most
//! `admin::Limits::drain`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

use super::logs;
use crate::admin::{Admin, Status};
use crate::config::{KeyEndpoints, Settings, SettingsFile, SlicingMode, Tier};
use crate::engine::Extractor;
use crate::features::limits::stage::counting;
use crate::features::shared::handoff::Handoff;
use crate::features::tiers::io as tier;
use crate::kafka::checkpoint::CheckpointStore;
use crate::kafka::size_limits::RecordLimits;
use crate::kafka::{KafkaLayerError, clients, producer, router, topics, worker};
use crate::metrics::Metrics;

/// The `dedupd` binary's allocator: the system allocator, with blocks of
/// [`HugePageAlloc::LARGE`] bytes or more (filter cells, the copy of a slice
/// taken for a snapshot, snapshot encodings, restored filters) advised to be
/// backed by transparent huge pages. Such blocks are fresh mappings, and a
/// first write to one takes a page fault per 4 KiB page: copying a 128 MiB
/// slice for a snapshot spent ~90 ms in faults, stopping its slice that long.
/// With huge pages it takes one fault per 2 MiB.
pub struct HugePageAlloc;

impl HugePageAlloc {
    pub const LARGE: usize = 32 << 20;

    fn advise(ptr: *mut u8, size: usize) {
        #[cfg(target_os = "linux")]
        {
            const HUGE: usize = 2 << 20;
            let (start, end) = (ptr as usize, ptr as usize + size);
            let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
            if !ptr.is_null() && last > first {
                // SAFETY: MADV_HUGEPAGE only changes how the kernel backs these
                // pages of a block we own, not their contents or access rights;
                // an error (THP unsupported) is harmless.
                unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE) };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (ptr, size);
    }
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// advice does not change what a block holds.
unsafe impl std::alloc::GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let ptr = unsafe { std::alloc::System.alloc(layout) };
        if layout.size() >= Self::LARGE {
            Self::advise(ptr, layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as for alloc.
        let ptr = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if layout.size() >= Self::LARGE {
            Self::advise(ptr, layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as for alloc.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for alloc.
        let ptr = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        if new_size >= Self::LARGE {
            Self::advise(ptr, new_size);
        }
        ptr
    }
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The settings file (defaults < file < DEDUPD__SECTION__KEY environment).
    /// Without it: the file DEDUPD_CONFIG names, else ./config/dedupd.toml,
    /// else /etc/dedupd/dedupd.toml, else none (defaults and environment only).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let file = SettingsFile::locate_default(args.config.as_deref())?;
    // The settings choose the log format, so they are read before the log
    // starts; an error here names the file it read.
    let cfg = Settings::load(file.path()).with_context(|| file.to_string())?;
    logs::init(cfg.log_format);
    log::info!("{file}");
    // The slice workers and routers run on the blocking threads and decode
    // records there: apache-avro recurses a few frames per nesting level
    // (at most `formats::depth::MAX_DEPTH`), about 4 KB a level optimized
    // and 70 KB unoptimized. 16 MiB of stack (reserved, touched only as
    // used) leaves an unoptimized build room too.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(16 << 20)
        .enable_all()
        .build()?;
    let grace = Duration::from_millis(cfg.settings.shutdown.timeout);
    let result = runtime.block_on(daemon(cfg));
    // Dropping the runtime would wait for its blocking tasks for as long as
    // they live: a router or slice worker that never returns would keep the
    // process, and its consumer's group membership and slices with it,
    // forever. Past `shutdown.timeout` what still runs is left behind; after
    // a failure the workers wind down (snapshots, leaving the group) within
    // the same bound.
    match &result {
        Err(e) if e.is::<ShutdownTimedOut>() => runtime.shutdown_background(),
        _ => runtime.shutdown_timeout(grace),
    }
    result
}

/// The graceful shutdown did not end within `shutdown.timeout`.
#[derive(Debug)]
struct ShutdownTimedOut(Duration);

impl std::fmt::Display for ShutdownTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shutdown took longer than shutdown.timeout = {:?}; exiting anyway", self.0)
    }
}

impl std::error::Error for ShutdownTimedOut {}

/// The topics the slice workers write, partition = slice.
fn output_topics(cfg: &crate::config::Resolved) -> Vec<String> {
    let out = &cfg.settings.output;
    let mut topics = vec![out.topic.clone()];
    if !out.duplicates_topic.is_empty() {
        topics.push(out.duplicates_topic.clone());
    }
    topics.push(out.dead_letter_topic.clone());
    if !out.late_topic.is_empty() {
        topics.push(out.late_topic.clone());
    }
    // Counted like the outputs: a snapshot waits for its flags too.
    if !cfg.settings.flag.topic.is_empty() {
        topics.push(cfg.settings.flag.topic.clone());
    }
    topics.push(cfg.flush_topic());
    topics
}

/// A task of the daemon's on the blocking threads: the slice workers (or a
/// sparse leaf's loop), the router.
type Task = tokio::task::JoinHandle<Result<(), KafkaLayerError>>;

async fn daemon(cfg: crate::config::Resolved) -> anyhow::Result<()> {
    clients::check(&cfg)?;
    log::info!("{}", super::check_config::Sizing::of(&cfg));
    if cfg.memory.capped() {
        log::warn!("{}", cfg.memory);
    } else {
        log::info!("{}", cfg.memory);
    }
    log::info!("{}", cfg.budget.one_line());
    let filter = cfg.filter_choice().expect("validated at load");
    let params = filter.params();
    let metrics = start_metrics(&cfg, params.hashes);
    let status = Status::new();
    crate::features::list_key_lookups(&status);
    let admin = start_admin(&cfg, &status, &metrics).await?;
    tokio::spawn(logs::summarize(metrics.clone(), Duration::from_millis(cfg.settings.log.summary_interval)));
    // Taken over from here on: a SIGTERM while the topics are made and
    // their limits read stops the daemon cleanly instead of killing it.
    let mut terminate = signal(SignalKind::terminate())?;
    let started = async {
        let slice_count = topics::ensure(&cfg).await?;
        // Read once: every decision a replay makes again must be made
        // against the same limits (docs/design.md, invariant 1).
        let limits = crate::kafka::size_limits::read(&cfg).await?;
        anyhow::Ok((slice_count, limits))
    };
    let (slice_count, limits) = tokio::select! {
        r = started => r?,
        _ = terminate.recv() => {
            log::info!("SIGTERM during start-up: stopped before any slice started");
            admin.stop().await;
            return Ok(());
        }
    };
    log::info!("record-size limits: {limits}");

    let extractor = Extractor {
        key: cfg.key.clone(),
        time: cfg.time.clone(),
        max_record_bytes: cfg.settings.input.max_record_bytes,
    };
    let handoff = crate::features::shared::handoff::of(&cfg);
    let started = Started { extractor, slice_count, limits, seed: params.seed, handoff };
    let setup = worker_setup(&cfg, &filter, &started, &metrics, &status)?;
    let worker_stop = Arc::new(AtomicBool::new(false));
    // A sparse leaf has no slices: its loop takes the workers' place (and the router's).
    let sparse_leaf = cfg.tier == Tier::SparseLeaf;
    let mut worker = if sparse_leaf {
        let leaf = Arc::new(tier::LeafSetup {
            cfg: cfg.clone(),
            extractor: started.extractor.clone(),
            cache_params: cfg.leaf_cache().expect("validated at load"),
            producer: producer::output_producer(&cfg, "leaf", None, vec![], 0, None)?,
            metrics: metrics.clone(),
            status: status.clone(),
        });
        let stop = worker_stop.clone();
        tokio::task::spawn_blocking(move || tier::run_leaf(leaf, stop))
    } else {
        let (setup, stop) = (setup.clone(), worker_stop.clone());
        tokio::task::spawn_blocking(move || worker::run(setup, stop))
    };
    let router_stop = Arc::new(AtomicBool::new(false));
    let mut router_task = (cfg.slicing != SlicingMode::InputPartitions && !sparse_leaf)
        .then(|| start_router(&cfg, &started, &metrics, router_stop.clone()));

    if let Some(e) = first_failure(&mut terminate, &mut worker, &mut router_task).await {
        status.healthy.store(false, Ordering::Relaxed);
        router_stop.store(true, Ordering::Relaxed);
        worker_stop.store(true, Ordering::Relaxed);
        admin.stop().await;
        return Err(e);
    }

    // The one shutdown order: router first (it feeds the workers), then the workers.
    let timeout = Duration::from_millis(cfg.settings.shutdown.timeout);
    let graceful = async {
        crate::schema_registry::shutting_down();
        router_stop.store(true, Ordering::Relaxed);
        if let Some(t) = router_task {
            t.await.context("router task")?.context("router shutdown")?;
        }
        worker_stop.store(true, Ordering::Relaxed);
        worker.await.context("slice worker task")?.context("slice worker shutdown")?;
        anyhow::Ok(())
    };
    match tokio::time::timeout(timeout, graceful).await {
        Ok(result) => {
            // The admin endpoint goes last: /healthz and /metrics answer
            // while the slices drain.
            admin.stop().await;
            result?;
            log::info!("stopped cleanly");
            Ok(())
        }
        Err(_) => Err(ShutdownTimedOut(timeout).into()),
    }
}

/// The metrics, with the memory plan's figures and a counter per input topic set.
fn start_metrics(cfg: &crate::config::Resolved, hashes: u32) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::new(hashes));
    metrics.memory.memory_cap.set(cfg.memory.cap.map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX)));
    metrics.memory.filter_worst_case.set(i64::try_from(cfg.memory.worst_case).unwrap_or(i64::MAX));
    metrics
        .memory
        .memory_limit
        .set(cfg.budget.limit.as_ref().map_or(0, |l| i64::try_from(l.bytes).unwrap_or(i64::MAX)));
    for (part, bytes) in &cfg.budget.parts {
        metrics.memory.memory_budget.with_label_values(&[part.label()]).set(i64::try_from(*bytes).unwrap_or(i64::MAX));
    }
    for topic in &cfg.settings.input.topics {
        metrics.input_counter(topic);
    }
    metrics
}

/// Binds the admin port (and the health port) and serves them. Bound before
/// anything talks to the broker: a taken port fails the start at once, and
/// `/healthz` answers while the topics are made.
async fn start_admin(
    cfg: &crate::config::Resolved,
    status: &Arc<Status>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Admin> {
    let listener = tokio::net::TcpListener::bind(cfg.admin_listen)
        .await
        .with_context(|| format!("invalid setting admin.listen = {}: cannot listen there", cfg.admin_listen))?;
    // Port 0 asks the system for a free port; this line says which one.
    let bound = listener.local_addr().unwrap_or(cfg.admin_listen);
    let key_endpoints = match cfg.key_endpoints {
        KeyEndpoints::Off => "off",
        KeyEndpoints::Token(_) => "bearer token required",
    };
    log::info!("admin endpoint on http://{bound} (key endpoints such as /v1/lookup: {key_endpoints})");
    let health = match cfg.health_listen {
        None => None,
        Some(addr) => {
            let health = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("invalid setting admin.health_listen = {addr}: cannot listen there"))?;
            log::info!("health endpoint on http://{} (/healthz, /readyz)", health.local_addr().unwrap_or(addr));
            Some(health)
        }
    };
    Ok(Admin::start(listener, health, status.clone(), metrics.clone(), &cfg.key_endpoints))
}

/// What start-up found: the record reader, the slice count (the topics'
/// partitions) and the record-size limits, and the filter's hash seed;
/// in shared mode, the handoff between the router and the slice.
struct Started {
    extractor: Extractor,
    slice_count: u32,
    limits: RecordLimits,
    seed: u64,
    handoff: Option<Arc<Handoff>>,
}

/// The slice workers' setup: their producer, checkpoint store and restore
/// reader. Made in every mode, a sparse leaf's too, and kept to the end.
fn worker_setup(
    cfg: &crate::config::Resolved,
    filter: &crate::filter::FilterChoice,
    started: &Started,
    metrics: &Arc<Metrics>,
    status: &Arc<Status>,
) -> anyhow::Result<Arc<worker::WorkerSetup>> {
    let id = cfg.settings.app.id.clone();
    Ok(Arc::new(worker::WorkerSetup {
        filter: filter.clone(),
        extractor: started.extractor.clone(),
        slice_topic: cfg.slice_topic(),
        flush_topic: cfg.flush_topic(),
        producer: producer::output_producer(
            cfg,
            "output",
            Some(metrics.output.end_to_end_latency.clone()),
            output_topics(cfg),
            started.slice_count as usize,
            Some(&started.limits),
        )?,
        store: CheckpointStore::new(cfg)?,
        reader: clients::reader(cfg, &format!("{id}-restore"))
            .create_with_context(clients::PlainContext)
            .context("creating the restore reader")?,
        metrics: metrics.clone(),
        status: status.clone(),
        input_counter: (cfg.slicing == SlicingMode::InputPartitions)
            .then(|| metrics.input_counter(&cfg.settings.input.topics[0])),
        on_distinct: crate::features::on_distinct(cfg, started.seed)?,
        requests_applied: std::sync::OnceLock::new(),
        record_limits: started.limits.clone(),
        stages: cfg.stages.clone(),
        routes_by_dedup_key: counting(&cfg.stages).is_none_or(|c| c.count_key.is_none()),
        path: worker::RecordPath::of(cfg, crate::features::output_header(cfg), crate::features::while_restoring(cfg)),
        handoff: started.handoff.clone(),
        cfg: cfg.clone(),
    }))
}

/// Starts the router (repartition and shared slicing), restarting it with a
/// new producer when its producer fails.
fn start_router(
    cfg: &crate::config::Resolved,
    started: &Started,
    metrics: &Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> Task {
    let (extractor, slice_count, limits, seed) =
        (started.extractor.clone(), started.slice_count, started.limits.clone(), started.seed);
    let handoff = started.handoff.clone();
    // With a separate count key the router routes by it: every record
    // of a count key reaches one slice, so its counts, limit and flags
    // are the whole stream's (copies of a dedup key carry the same count
    // key, so they still meet in one slice).
    let route_key = counting(&cfg.stages).and_then(|c| c.count_key.clone());
    // A count key's hash is not the dedup key's: the slices read the
    // record again then.
    let hands_on_reading = route_key.is_none();
    let extractor = match route_key {
        Some(key) => Extractor { key, ..extractor },
        None => extractor,
    };
    let (cfg, metrics) = (cfg.clone(), metrics.clone());
    // A new setup, with a new producer, at each start of the router.
    let make_setup = move || {
        Ok(Arc::new(router::RouterSetup {
            cfg: cfg.clone(),
            hands_on_reading,
            key_reads_headers: extractor.key.reads_headers(),
            extractor: extractor.clone(),
            slices: slice_count,
            slice_topic: cfg.slice_topic(),
            seed,
            producer: producer::output_producer(
                &cfg,
                "router",
                Some(metrics.stage("router_acked")),
                vec![cfg.slice_topic(), cfg.settings.output.dead_letter_topic.clone()],
                slice_count as usize,
                Some(&limits),
            )?,
            metrics: metrics.clone(),
            handoff: handoff.clone(),
        }))
    };
    tokio::task::spawn_blocking(move || router::run_restarting(make_setup, stop))
}

/// Waits for a signal (None: shut down) or for a task to end, which is a
/// failure: the workers and the router run until they are stopped.
async fn first_failure(
    terminate: &mut tokio::signal::unix::Signal,
    worker: &mut Task,
    router_task: &mut Option<Task>,
) -> Option<anyhow::Error> {
    tokio::select! {
        _ = terminate.recv() => { log::info!("SIGTERM: shutting down"); None }
        _ = tokio::signal::ctrl_c() => { log::info!("SIGINT: shutting down"); None }
        r = worker => Some(match r {
            Ok(Ok(())) => anyhow::anyhow!("the slice workers stopped unexpectedly"),
            Ok(Err(e)) => anyhow::Error::new(e).context("slice workers"),
            Err(e) => anyhow::anyhow!("the slice workers panicked: {e}"),
        }),
        r = async { match router_task.as_mut() { Some(t) => t.await, None => std::future::pending().await } } => Some(match r {
            Ok(Ok(())) => anyhow::anyhow!("the router stopped unexpectedly"),
            Ok(Err(e)) => anyhow::Error::new(e).context("router"),
            Err(e) => anyhow::anyhow!("the router panicked: {e}"),
        }),
    }
}
