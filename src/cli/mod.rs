//! The `dedupd` command line. `main.rs` only calls [`main`].
//!
//! - `dedupd run`: the Kafka daemon.
//! - `dedupd filter`: the engine over newline-delimited records on stdin.
//! - `dedupd checkpoint …`: operations on a stopped daemon's checkpoints.
//! - `dedupd keys …`: calls to a running daemon's key endpoints.
//! - `dedupd status --admin URL…`: the members' slices, from their admin endpoints.
//! - `dedupd check-config FILE`: checks a settings file as `run` would.
//! - `dedupd topics FILE`: the topics and ACLs an application needs.
//!
//! The measurements (accuracy experiments, the design-space simulator) are
//! not in this binary: they are the lab's, `cargo run --release -p dedupd-lab`.

pub mod check_config;
pub mod checkpoint;
pub mod filter;
mod http;
pub mod keys;
pub mod logs;
pub mod run;
pub mod status;
pub mod topics;

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
    /// Operations on the checkpoints of a stopped daemon.
    #[command(subcommand)]
    Checkpoint(checkpoint::CheckpointCommand),
    /// Calls to a running daemon's key endpoints.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Show what the members of a deployment are doing: health, readiness
    /// and, per slice, its owner, offset, lag, event-time clock, records
    /// waiting, replay, last checkpoint, estimated FPR and memory (from the
    /// admin endpoints). Exits non-zero if a member is not healthy or not
    /// reachable.
    Status(status::StatusArgs),
    /// Check a settings file as `dedupd run` would at start-up (without a
    /// broker): exit 0 and print the filter's sizing, or exit non-zero with
    /// the error the daemon would give.
    CheckConfig(check_config::CheckConfigArgs),
    /// Print the topics an application writes (name, partitions, configs)
    /// and the ACLs of its principal, from its settings (without a broker):
    /// for clusters where topics are not created automatically.
    Topics(topics::TopicsArgs),
}

/// Parses the command line and runs it; the error is printed by `main`.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Filter(args) => filter::run(args),
        Command::Run(args) => run::run(args),
        Command::Keys(command) => keys::run(command),
        Command::Checkpoint(command) => checkpoint::run(command),
        Command::Status(args) => status::run(args),
        Command::CheckConfig(args) => check_config::run(args),
        Command::Topics(args) => topics::run(args),
    }
}
