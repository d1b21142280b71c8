//! `kintsugi ctl`: operate the control plane (placeholder while it is written).

use std::process::ExitCode;

/// Arguments of `kintsugi ctl`.
#[derive(clap::Args, Debug)]
pub struct CtlArgs {}

pub fn run(_args: CtlArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kintsugi ctl is not written yet")
}
