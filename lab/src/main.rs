//! `dedupd-lab`: the measurements behind dedupd's documented figures.

use clap::{Parser, Subcommand};
use dedupd_lab::{accuracy, bloofi, cuckoo, design_space, spectral, stream_kinds};

/// dedupd's measurements: accuracy against an exact oracle and the papers' experiments.
#[derive(Debug, Parser)]
#[command(name = "dedupd-lab", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Experiment,
}

#[derive(Debug, Subcommand)]
enum Experiment {
    /// Accuracy against an exact oracle on synthetic streams; writes CSV and
    /// a markdown report.
    Accuracy(accuracy::AccuracyArgs),
    /// The decaying kinds (rsbf, stable) and the timer filter at equal
    /// memory on uniform streams, against "ever seen before"; writes CSV.
    StreamKinds(stream_kinds::StreamKindsArgs),
    /// The paper's design space on a simulator: failures and S_f, slicing
    /// (FPR, fairness, load), the x-of-k heuristic, pipelining, Bloom trees;
    /// writes CSV.
    DesignSpace(design_space::DesignSpaceArgs),
    /// Spectral Bloom Filters: MS, RM and MI error rates against the paper's
    /// formulas, and windowed counts against exact ones; prints CSV.
    Spectral(spectral::SpectralArgs),
    /// Which of N Bloom filters hold a key: naive scan, Bloofi and
    /// Flat-Bloofi in the Bloofi paper's setting; writes CSV.
    Bloofi(bloofi::BloofiArgs),
    /// The cuckoo table filter beside the timer filter on real text
    /// (Brown Corpus bigrams), with the expected keys right and 10x low;
    /// prints a table.
    Cuckoo(cuckoo::CuckooArgs),
}

fn main() {
    let result = match Cli::parse().command {
        Experiment::Accuracy(args) => accuracy::run(&args),
        Experiment::StreamKinds(args) => stream_kinds::run(&args),
        Experiment::DesignSpace(args) => design_space::run(&args),
        Experiment::Spectral(args) => spectral::run(&args),
        Experiment::Bloofi(args) => bloofi::run(&args),
        Experiment::Cuckoo(args) => cuckoo::run(&args),
    };
    if let Err(e) = result {
        eprintln!("dedupd-lab: {e:#}");
        std::process::exit(1);
    }
}
