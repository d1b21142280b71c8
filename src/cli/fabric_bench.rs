//! `kintsugi fabric bench` (being written).

use std::process::ExitCode;

/// Arguments of `kintsugi fabric bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet")
}
