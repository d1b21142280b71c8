//! `kintsugi fabric bench`: the flags ([`args`]); the benchmark itself is
//! [`bench::fabric`].

mod args;

use std::process::ExitCode;

pub use args::BenchArgs;

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let plan = args.validate()?;
    let report = bench::fabric::run(&plan)?;
    super::print_report(plan.json, || report.json(), || report.table())?;
    Ok(ExitCode::SUCCESS)
}
