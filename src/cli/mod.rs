//! The `dedupd` command line. `main.rs` only calls [`main`].
//!
//! - `dedupd run`: the Kafka daemon.
//! - `dedupd filter`: the engine over newline-delimited records on stdin.
//! - `dedupd bench accuracy`: the accuracy experiments (see [`crate::bench`]).
//! - `dedupd bench stream-kinds`: RSBF vs SBF vs the timer filter (docs/rsbf-stable.md).
//! - `dedupd bench design-space`: the paper's §7 on a simulator (docs/paper-reproduction.md).
//! - `dedupd bench spectral`: Spectral Bloom Filter accuracy (docs/spectral.md).
//! - `dedupd bench bloofi`: the provenance indexes against the naive scan (docs/provenance.md).

pub mod checkpoint;
pub mod filter;
pub mod keys;
pub mod logs;
pub mod run;

use clap::{Parser, Subcommand};

/// Removes duplicate events from streams with sliding-window timer Bloom filters.
#[derive(Debug, Parser)]
#[command(name = "dedupd", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: deduplicate Kafka topics with slices over a consumer group.
    Run(run::RunArgs),
    /// Deduplicate newline-delimited records from stdin; distinct records go
    /// to stdout, unchanged and in input order.
    Filter(filter::FilterArgs),
    /// Measurements.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Operations on the checkpoints of a stopped daemon.
    #[command(subcommand)]
    Checkpoint(checkpoint::CheckpointCommand),
    /// Calls to a running daemon's key endpoints.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Accuracy against an exact oracle on synthetic streams; writes CSV and
    /// a markdown report.
    Accuracy(crate::bench::accuracy::AccuracyArgs),
    /// The count-based kinds (rsbf, stable) and the timer filter at equal
    /// memory on uniform streams, against "ever seen before"; writes CSV.
    StreamKinds(crate::bench::stream_kinds::StreamKindsArgs),
    /// The paper's design space on a simulator: failures and S_f, slicing
    /// (FPR, fairness, load), the x-of-k heuristic, pipelining, Bloom trees;
    /// writes CSV (docs/paper-reproduction.md).
    DesignSpace(crate::bench::design_space::DesignSpaceArgs),
    /// Spectral Bloom Filters: MS, RM and MI error rates against the paper's
    /// formulas, and windowed counts against exact ones; prints CSV.
    Spectral(crate::bench::spectral::SpectralArgs),
    /// Which of N Bloom filters hold a key: naive scan, Bloofi and
    /// Flat-Bloofi in the Bloofi paper's setting; writes CSV.
    Bloofi(crate::bench::bloofi::BloofiArgs),
}

/// Parses the command line and runs it; the error is printed by `main`.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Filter(args) => filter::run(args),
        Command::Run(args) => run::run(args),
        Command::Bench(BenchCommand::Accuracy(args)) => crate::bench::accuracy::run(&args),
        Command::Bench(BenchCommand::StreamKinds(args)) => crate::bench::stream_kinds::run(&args),
        Command::Bench(BenchCommand::DesignSpace(args)) => crate::bench::design_space::run(&args),
        Command::Keys(command) => keys::run(command),
        Command::Checkpoint(command) => checkpoint::run(command),
        Command::Bench(BenchCommand::Spectral(args)) => crate::bench::spectral::run(&args),
        Command::Bench(BenchCommand::Bloofi(args)) => crate::bench::bloofi::run(&args),
    }
}
