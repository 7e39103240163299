//! The `dedupd` command line. `main.rs` only calls [`main`].
//!
//! - `dedupd run`: the Kafka daemon.
//! - `dedupd filter`: the engine over newline-delimited records on stdin.
//! - `dedupd bench accuracy`: the accuracy experiments (see [`crate::bench`]).
//! - `dedupd bench stream-kinds`: RSBF vs SBF vs the timer filter (docs/rsbf-stable.md).
//! - `dedupd bench bloofi`: the provenance indexes against the naive scan (docs/provenance.md).

pub mod filter;
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
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Accuracy against an exact oracle on synthetic streams; writes CSV and
    /// a markdown report.
    Accuracy(crate::bench::accuracy::AccuracyArgs),
    /// The count-based kinds (rsbf, stable) and the timer filter at equal
    /// memory on uniform streams, against "ever seen before"; writes CSV.
    StreamKinds(crate::bench::stream_kinds::StreamKindsArgs),
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
        Command::Bench(BenchCommand::Bloofi(args)) => crate::bench::bloofi::run(&args),
    }
}
