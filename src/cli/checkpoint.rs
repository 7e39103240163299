//! `dedupd checkpoint merge`: shrink the number of slices of a stopped
//! daemon without losing its window (see [`crate::kafka::merge`]).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum CheckpointCommand {
    /// Merge the snapshots of a stopped daemon's slices into fewer slices
    /// (the union of their filters, DBF Def. 3), written to the checkpoint
    /// topic; then start the daemon with `filter.slices = --to`.
    Merge(MergeArgs),
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The daemon's settings file (environment overrides apply, as for `run`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The slice count the snapshots were taken with.
    #[arg(long)]
    pub from: u32,
    /// The new slice count (below --from).
    #[arg(long)]
    pub to: u32,
}

pub fn run(command: CheckpointCommand) -> anyhow::Result<()> {
    let CheckpointCommand::Merge(args) = command;
    let with_slices = |slices: u32| {
        let env = std::env::vars().chain([("DEDUPD__FILTER__SLICES".to_string(), slices.to_string())]);
        Settings::load_from(args.config.as_deref(), env).with_context(|| format!("settings for {slices} slices"))
    };
    let (old, new) = (with_slices(args.from)?, with_slices(args.to)?);
    let report = crate::kafka::merge::merge_checkpoints(&old, &new)?;
    for m in &report {
        println!(
            "slice {} <- slices {:?}: offset {}, {} generations, {} bytes",
            m.slice, m.from_slices, m.offset, m.generations, m.bytes
        );
    }
    println!("merged {} slices into {}: start the daemon with filter.slices = {}", args.from, args.to, args.to);
    Ok(())
}
