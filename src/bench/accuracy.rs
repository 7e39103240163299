//! Accuracy experiments (work in progress).
#[derive(Debug, clap::Args)]
pub struct AccuracyArgs {}
pub fn run(_args: &AccuracyArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
