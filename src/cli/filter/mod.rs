//! `dedupd filter`: the engine over newline-delimited records on stdin.
//!
//! Distinct records go to stdout byte for byte, in input order. Duplicates
//! can go to a file; records that cannot be read are never dropped silently:
//! they are counted by reason and written to `--invalid FILE` (raw) or
//! reported on stderr with their line number. Stats go to `--stats-json`.
//!
//! - `args.rs`: the flags ([`FilterArgs`]); `--kind` takes the family's kinds.
//! - `build.rs`: what the flags make, validated (the filter, the counting
//!   stage, the decoder, the ordering settings).
//! - `lines.rs`: the judged lines written in input order, and counted.
//! - `stats.rs`: the stats JSON ([`FilterStats`]).
//! - Here: [`run`], the read-judge-write loop.

mod args;
mod build;
mod lines;
mod stats;

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;

pub use args::FilterArgs;
use build::flag_error;
use lines::{HeldLines, Sinks, Tally, decode_lines, strip_line_ending};
pub use stats::{CountingStatsJson, FilterStats};

use crate::engine::record::PayloadDecoder;
use crate::engine::{Deduplicator, Extractor, InvalidReason, OrderSettings, RecordView};
use crate::filter::{FilterKind, KindName, SliceFilter, SlicedFilter, decaying};

/// How long a line waits for a schema registry that does not answer before
/// the run stops (unjudged, exit status 1): a fault outside the record is
/// not bad data, and a one-shot run has no later to wait for.
pub const PIPE_REGISTRY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Records per batch: large enough to amortise per-batch work, small enough
/// to keep output flowing.
const BATCH: usize = 4096;

pub fn run(args: FilterArgs) -> anyhow::Result<()> {
    if args.max_record_bytes == 0 {
        anyhow::bail!("invalid --max-record-bytes 0: must be at least 1");
    }
    let order = args.order_settings()?;
    let decoder = args.decoder()?;
    let mut dedup = deduplicator(&args, order)?;
    // Avro or Protobuf: each line one base64 record, read through the decoder.
    let decoder: Option<&dyn PayloadDecoder> = decoder.as_ref().map(|d| d as &dyn PayloadDecoder);

    let create = |p: &PathBuf, what: &str| -> anyhow::Result<BufWriter<File>> {
        let f = File::create(p).with_context(|| format!("cannot create the {what} file {}", p.display()))?;
        Ok(BufWriter::with_capacity(1 << 16, f))
    };
    let mut duplicates = args.duplicates.as_ref().map(|p| create(p, "duplicates")).transpose()?;
    let mut invalid_out = args.invalid.as_ref().map(|p| create(p, "invalid")).transpose()?;
    let mut flags_out = args.flags.as_ref().map(|p| create(p, "flags")).transpose()?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let stdin = io::stdin();
    let mut input = BufReader::with_capacity(1 << 20, stdin.lock());
    let mut stderr = io::stderr().lock();

    let started = Instant::now();
    let mut tally =
        Tally { invalid_by_reason: InvalidReason::ALL.iter().map(|r| (r.as_str(), 0)).collect(), ..Tally::default() };
    let mut sinks = Sinks {
        out: &mut out,
        duplicates: duplicates.as_mut(),
        invalid: invalid_out.as_mut(),
        flags: flags_out.as_mut(),
        stderr: &mut stderr,
    };
    let memory_bytes_peak = match judge_lines(&mut input, &mut dedup, decoder, &mut tally, &mut sinks) {
        // A closed stdout (e.g. `| head`) ends the run quietly, like other filters.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        other => other.context("reading stdin or writing the output")?,
    };
    for w in [duplicates.as_mut(), invalid_out.as_mut(), flags_out.as_mut()].into_iter().flatten() {
        w.flush().context("writing the duplicates, invalid or flags file")?;
    }
    match out.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        other => other.context("writing stdout")?,
    }
    if let (Some(path), Some(filter)) = (&args.save_state, dedup.judges().first().and_then(SliceFilter::as_decaying)) {
        std::fs::write(path, decaying::encode(filter))
            .with_context(|| format!("cannot write the --save-state file {}", path.display()))?;
    }

    let elapsed = started.elapsed().as_secs_f64();
    let invalid: u64 = tally.invalid_by_reason.values().sum();
    if invalid > 0 && args.invalid.is_some() {
        let reasons: Vec<String> =
            tally.invalid_by_reason.iter().filter(|(_, n)| **n > 0).map(|(r, n)| format!("{r} {n}")).collect();
        eprintln!("dedupd: {invalid} invalid records written to the invalid file ({})", reasons.join(", "));
    }
    if let Some(path) = &args.stats_json {
        let stats = FilterStats::of(&args, &dedup, tally, order.lateness_ms, memory_bytes_peak, elapsed);
        let json = serde_json::to_vec_pretty(&stats).expect("stats serialise");
        std::fs::write(path, json).with_context(|| format!("cannot write the stats file {}", path.display()))?;
    }
    Ok(())
}

/// The deduplicator of `--kind`, with the counting stage if one is asked for.
fn deduplicator(args: &FilterArgs, order: OrderSettings) -> anyhow::Result<Deduplicator> {
    let extractor =
        Extractor { key: args.key.clone(), time: args.time.clone(), max_record_bytes: args.max_record_bytes };
    let mut dedup = match args.kind.decaying() {
        Some(kind) => {
            let filter = FilterKind::Decaying(args.decaying_filter(kind)?);
            Deduplicator::in_arrival_order(filter.into(), extractor)
        }
        None => {
            if args.load_state.is_some() || args.save_state.is_some() {
                anyhow::bail!("--load-state and --save-state are for --kind rsbf or stable");
            }
            let spec = args.filter_spec();
            match args.kind.windowed_filters(&spec, args.expected.0).map_err(flag_error)? {
                Some(filters) => Deduplicator::per_slice(filters, extractor, order),
                None => {
                    // The equal-timer counts are only reported in --stats-json.
                    let filter =
                        SlicedFilter::new(&spec).map_err(flag_error)?.count_equal_timers(args.stats_json.is_some());
                    Deduplicator::new(filter, extractor, order).with_passthrough(args.kind == KindName::Passthrough)
                }
            }
        }
    };
    if let Some(stage) = args.counting_stage()? {
        dedup = dedup.with_counting(stage, args.count_key.clone());
    }
    Ok(dedup)
}

/// Reads `input` in batches of lines, judges them and writes each to its
/// sink in input order, to the end of the input. Returns the most bytes the
/// filter held at the end of a batch.
fn judge_lines<O: Write, E: Write>(
    input: &mut impl BufRead,
    dedup: &mut Deduplicator,
    decoder: Option<&dyn PayloadDecoder>,
    tally: &mut Tally,
    sinks: &mut Sinks<'_, O, E>,
) -> io::Result<u64> {
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut ends: Vec<usize> = Vec::with_capacity(BATCH);
    let mut decoded: Vec<Vec<u8>> = Vec::new();
    let mut judged = Vec::with_capacity(BATCH);
    let mut held = HeldLines::default();
    let mut memory_bytes_peak = dedup.memory_bytes();
    loop {
        // Read up to BATCH lines into one buffer.
        buf.clear();
        ends.clear();
        while ends.len() < BATCH {
            let n = input.read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            ends.push(buf.len());
        }
        judged.clear();
        if ends.is_empty() {
            dedup.finish(&mut judged);
            held.settle(&judged, tally, sinks)?;
            return Ok(memory_bytes_peak);
        }
        let arrival = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let mut views = Vec::with_capacity(ends.len());
        let mut start = 0;
        if decoder.is_some() {
            decode_lines(&buf, &ends, &mut decoded);
            views.extend(decoded.iter().map(|payload| RecordView { payload, decoder, ..RecordView::default() }));
        } else {
            for &end in &ends {
                views.push(RecordView { payload: strip_line_ending(&buf[start..end]), ..RecordView::default() });
                start = end;
            }
        }
        dedup.push_batch(&views, arrival, &mut judged);
        memory_bytes_peak = memory_bytes_peak.max(dedup.memory_bytes());
        held.push(&buf, &ends);
        held.settle(&judged, tally, sinks)?;
    }
}
