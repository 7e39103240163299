//! `dedupd filter` (work in progress).
#[derive(Debug, clap::Args)]
pub struct FilterArgs {}
pub fn run(_args: FilterArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
